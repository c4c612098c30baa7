"""Faults a user meets around the main job: each ends in one clear line, never a traceback,
and never leaves a folder that disagrees with itself."""
import errno
import json
import math
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from spherepde import io
from spherepde.app import scenario
from spherepde.app.cli import main
from spherepde.app.config import validate_config

TINY = """
[run]
betas = [2.0, "inf"]
t_end = 0.5
n_times = 3
[particles]
n = 30
[spectral]
enabled = false
[finite_volume]
enabled = false
[convergence]
check = false
"""


def run_cli(argv, capsys):
    code = main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def assert_one_line_error(err):
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("spherepde: "), err
    assert "Traceback" not in err


@pytest.fixture
def tiny(tmp_path):
    p = tmp_path / "tiny.toml"
    p.write_text(TINY)
    return p


def test_version(capsys):
    from spherepde import __version__

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"spherepde {__version__}"


def test_output_folder_that_is_a_file(tiny, tmp_path, capsys):
    f = tmp_path / "taken"
    f.write_text("not a folder")
    code, _, err = run_cli(["run", str(tiny), "--out", str(f), "--quiet"], capsys)
    assert code == 2 and "is a file" in err
    assert_one_line_error(err)
    code, _, err = run_cli(["run", str(tiny), "--out", str(f / "below"), "--quiet"], capsys)
    assert code == 2 and "is a file" in err
    assert_one_line_error(err)


def test_read_only_location(tiny, tmp_path, capsys, monkeypatch):
    # Root ignores permission bits, so simulate what a read-only file system answers.
    real_mkdir = Path.mkdir

    def mkdir(self, *a, **k):
        if "ro" in self.parts:
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_mkdir(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    code, _, err = run_cli(["run", str(tiny), "--out", str(tmp_path / "ro" / "o"), "--quiet"],
                           capsys)
    assert code == 2 and "Read-only file system" in err
    assert_one_line_error(err)


def test_unwritable_existing_folder(tiny, tmp_path, capsys, monkeypatch):
    out = tmp_path / "o"
    out.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if mode == os.W_OK else
                        real_access(p, mode))
    code, _, err = run_cli(["run", str(tiny), "--out", str(out), "--quiet"], capsys)
    assert code == 2 and "not writable" in err
    assert_one_line_error(err)


def test_config_that_is_not_utf8_or_is_a_folder(tmp_path, capsys):
    bad = tmp_path / "latin1.toml"
    bad.write_bytes("[output]\ndir = \"r\xe9sultats\"\n".encode("latin-1"))
    code, _, err = run_cli(["run", str(bad), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "not UTF-8" in err and "0xe9" in err
    assert_one_line_error(err)
    code, _, err = run_cli(["run", str(tmp_path), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "is a folder" in err
    assert_one_line_error(err)


def test_second_run_on_a_locked_folder_is_refused(tiny, tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    with io.FolderLock(out):  # another run holds the folder
        code, _, err = run_cli(["run", str(tiny), "--out", str(out), "--quiet"], capsys)
    assert code == 2 and "another spherepde run" in err and f"process {os.getpid()}" in err
    assert_one_line_error(err)
    assert not (out / "runs" / "particles_beta=inf.npz").exists()


def test_scenario_json_is_strict_and_lists_only_used_keys(tiny, tmp_path, capsys):
    out = tmp_path / "o"
    code, stdout, _ = run_cli(["run", str(tiny), "--out", str(out), "--quiet"], capsys)
    assert code == 0
    text = (out / "scenario.json").read_text()
    # json.loads with parse_constant rejects Infinity/NaN, as strict parsers outside Python do
    def reject(c):
        raise ValueError(c)
    data = json.loads(text, parse_constant=reject)
    assert data["run"]["betas"] == [2.0, "inf"]
    assert data["spectral"] == {"enabled": False}  # lmax, t_end unused
    assert set(data["initial"]) == {"kind", "mean", "kappa"}  # no bimodal keys for a vMF
    assert "rescale_time" not in data["model"]  # SA: unused
    assert not (out / scenario.IN_PROGRESS).exists()
    assert json.loads(io.open_dataset(out / "results.nc").attrs["scenario"]) == data
    # the rerun says what it reused
    code, stdout, _ = run_cli(["run", str(tiny), "--out", str(out), "--quiet"], capsys)
    assert code == 0 and "2 of 2 runs reused from" in stdout


def test_files_follow_the_umask(tiny, tmp_path, capsys):
    old = os.umask(0o027)
    try:
        code, _, _ = run_cli(["run", str(tiny), "--out", str(tmp_path / "o"), "--quiet",
                              "--no-figures"], capsys)
    finally:
        os.umask(old)
    assert code == 0
    for p in [tmp_path / "o" / "results.nc", tmp_path / "o" / "summary.md",
              tmp_path / "o" / "runs" / "particles_beta=2.npz"]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o640, p  # 0666 & ~0027


def test_damaged_or_foreign_saved_runs_are_recomputed_with_a_notice(tiny, tmp_path,
                                                                      monkeypatch):
    out = tmp_path / "o"
    cfg = str(tiny)
    first = scenario.run_scenario(cfg, out=out, progress=False, figures=False,
                                  notify=lambda s: None)
    runs = out / "runs"
    ref = {r.beta: r.w2 for r in first["runs"]}
    # particles at beta = 2: truncated; beta = inf: garbage bytes
    data = (runs / "particles_beta=2.npz").read_bytes()
    (runs / "particles_beta=2.npz").write_bytes(data[: len(data) // 2])
    (runs / "particles_beta=inf.npz").write_bytes(b"\x00garbage" * 100)
    notes = []
    again = scenario.run_scenario(cfg, out=out, progress=False, figures=False,
                                  notify=notes.append)
    assert again["reused"] == 0 and len(notes) == 2
    assert all("is damaged" in n and "recomputing" in n and "\n" not in n for n in notes)
    for r in again["runs"]:
        np.testing.assert_array_equal(r.w2, ref[r.beta])  # same numbers, recomputed
    # a run saved by another version of the package is not trusted either
    monkeypatch.setattr(scenario, "__version__", "0.0.0-other")
    notes = []
    other = scenario.run_scenario(cfg, out=out, progress=False, figures=False,
                                  notify=notes.append)
    assert other["reused"] == 0 and len(notes) == 2
    assert all("another spherepde version" in n for n in notes)


def test_interrupted_run_marks_the_folder_and_says_what_finished(tiny, tmp_path, capsys,
                                                                   monkeypatch):
    out = tmp_path / "o"
    calls = []
    real = scenario.run_one

    def run_one(task, **kw):
        if calls:
            raise KeyboardInterrupt  # Ctrl-C during the second run
        calls.append(task)
        return real(task, **kw)

    monkeypatch.setattr(scenario, "run_one", run_one)
    code, _, err = run_cli(["run", str(tiny), "--out", str(out), "--quiet"], capsys)
    assert code == 130
    assert_one_line_error(err)
    assert "1 of 2 runs finished" in err and "again to resume" in err
    assert (out / scenario.IN_PROGRESS).exists()
    assert not (out / "summary.md").exists() and not (out / "scenario.json").exists()
    monkeypatch.setattr(scenario, "run_one", real)
    code, stdout, _ = run_cli(["run", str(tiny), "--out", str(out), "--quiet"], capsys)
    assert code == 0 and "1 of 2 runs reused" in stdout
    assert not (out / scenario.IN_PROGRESS).exists()


def test_ctrl_c_on_the_real_process_exits_130(tmp_path):
    cfg = tmp_path / "c.toml"
    # particles only, long enough to be interrupted in the middle of a run on an idle machine
    # too: 2000 output times force at least 2000 steps, each of 6 evaluations of 3000^2 pairs
    # (~10 ms each); t_end = 50 alone, or 400 tokens once W2 against the two atoms became an
    # O(N log N) sort, let the run end before the signal
    cfg.write_text(TINY.replace("t_end = 0.5", "t_end = 50.0").replace("n = 30", "n = 3000")
                   .replace("n_times = 3", "n_times = 2000"))
    out = tmp_path / "o"
    # The run gets Ctrl-C's default action whatever the suite was started with: a shell runs
    # a background job with SIGINT ignored, the child would inherit that, and the test would
    # measure the launcher (seen: exit 0 in every backgrounded .ci/run, 130 in the foreground).
    proc = subprocess.Popen([sys.executable, "-m", "spherepde.app.cli", "run", str(cfg),
                             "--out", str(out), "--quiet", "--no-figures"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[1],
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not (out / scenario.IN_PROGRESS).exists() and proc.poll() is None:
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert_one_line_error(err)
    assert "interrupted" in err and "again" in err


def test_bimodal_keys_build_the_mixture():
    cfg = validate_config({"initial": {"kind": "bimodal", "mean": [0, 0, 2.0],
                                       "mean2": [1.0, 0, 0], "weights": [0.25, 0.75]}})
    mu0 = scenario.build_initial(cfg)
    x = np.array([[0, 0, 1.0], [1.0, 0, 0]])
    # vMF density ~ e^{kappa <x, m>}: at one cap's mean the other (orthogonal) cap is e^{-kappa}
    # times its own peak, so the ratio of the two values is exact
    d = mu0.density(x)
    q = math.exp(-1.5)
    assert math.isclose(d[1] / d[0], (0.75 + 0.25 * q) / (0.25 + 0.75 * q), rel_tol=1e-12)


@pytest.mark.parametrize("lmax", [1, 2])
def test_tiny_lmax_ends_with_an_error_naming_lmax(lmax):
    # Before: lmax = 1 or 2 crawled for more than 600 s with steps ~1e-12 (never below the
    # old 1e-14 floor). Now the step floor (1e-10 of the span) ends it, naming the setting.
    from spherepde.density import SpectralSolver
    from spherepde.timestepping import StepSizeError

    cfg = validate_config({})
    model, mu0 = scenario.build_model(cfg, 16.0), scenario.build_initial(cfg)
    solver = SpectralSolver(model, lmax=lmax)
    old = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("no answer within 120 s"))
    signal.alarm(120)
    try:
        with pytest.warns(UserWarning, match="not resolved"):
            with pytest.raises(StepSizeError, match=f"at lmax = {lmax}.*raise lmax"):
                solver.solve(mu0, np.linspace(0.0, 3.0, 5))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_usa_at_beta_50_runs_with_rescaled_time():
    import spherepde as sp
    from spherepde.timestepping import StepSizeError

    x0 = sp.measures.VonMisesFisher([0.4, 0.3, 1.0], 1.5).sample(100, seed=0)
    V = np.diag([1.0, 0.4, 0.0])
    plain = sp.Model(V=V, beta=50.0, normalized=False)
    with pytest.raises(StepSizeError, match="rescale_time=True"):
        sp.ParticleSolver(plain, rtol=1e-6, atol=1e-8).solve(x0, [0.0, 1.0])
    fast = sp.Model(V=V, beta=50.0, normalized=False, rescale_time=True)
    assert fast.time_scale == pytest.approx(math.exp(-50.0), rel=1e-15)  # |B|_2 = 1
    # USA is linear in V: the rescaled field is e^-50 times the plain one, to round-off
    x = x0[:5]
    np.testing.assert_allclose(fast.velocity(x, x0), math.exp(-50.0) * plain.velocity(x, x0),
                               rtol=1e-12)
    traj = sp.ParticleSolver(fast, rtol=1e-6, atol=1e-8).solve(x0, [0.0, 1.0, 2.0])
    assert np.all(np.isfinite(traj.positions))
    with pytest.raises(ValueError, match="applies to USA"):
        sp.Model(beta=50.0, rescale_time=True)


def test_a_run_that_cannot_proceed_ends_with_one_line_and_exit_3(tiny, tmp_path, capsys,
                                                                   monkeypatch):
    from spherepde.timestepping import StepSizeError

    def run_one(task, **kw):
        raise StepSizeError("the adaptive step fell to 1e-20 at t = 0")

    monkeypatch.setattr(scenario, "run_one", run_one)
    code, _, err = run_cli(["run", str(tiny), "--out", str(tmp_path / "o"), "--quiet"], capsys)
    assert code == 3 and "the run stopped: the adaptive step fell" in err
    assert_one_line_error(err)


def test_runs_computed_in_a_process_pool_equal_runs_computed_here(tiny, tmp_path):
    # each run is pure, and a particle run's rows are computed by one thread each: the pool
    # (two processes, one thread each) must give the very same numbers and files
    here = scenario.run_scenario(str(tiny), out=tmp_path / "a", progress=False, figures=False,
                                 workers=1)
    pool = scenario.run_scenario(str(tiny), out=tmp_path / "b", progress=False, figures=False,
                                 workers=2)
    assert [r.key for r in here["runs"]] == [r.key for r in pool["runs"]]
    for a, b in zip(here["runs"], pool["runs"], strict=True):
        np.testing.assert_array_equal(a.w2, b.w2)
        np.testing.assert_array_equal(a.positions, b.positions)
    assert sorted(p.name for p in (tmp_path / "b" / "runs").iterdir()) == \
        sorted(p.name for p in (tmp_path / "a" / "runs").iterdir())
    with pytest.raises(ValueError, match="workers must be >= 1"):
        scenario.run_scenario(str(tiny), out=tmp_path / "c", progress=False, workers=0)


# ---------------------------------------------------------------------------- hostile folders
def _tree(root):
    """{relative path: bytes or link target} of everything under ``root`` (links not followed)."""
    out = {}
    for p in sorted(Path(root).rglob("*")):
        key = str(p.relative_to(root))
        out[key] = ("link", os.readlink(p)) if p.is_symlink() else (
            p.read_bytes() if p.is_file() else "dir")
    return out


@pytest.mark.parametrize("planted", [".lock", "summary.md", "runs"])
def test_a_planted_link_is_refused_and_its_target_untouched(planted, tiny, tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("DATA\n")
    out = tmp_path / "o"
    out.mkdir()
    io.Manifest(out, "run").add()  # spherepde's own folder: only the link is hostile
    os.symlink(victim if planted != "runs" else outside, out / planted)
    before = _tree(outside)
    code, _, err = run_cli(["run", str(tiny), "--out", str(out), "--quiet", "--no-figures"],
                           capsys)
    assert code == 2 and "symbolic link" in err
    assert_one_line_error(err)
    assert _tree(outside) == before and victim.read_text() == "DATA\n"


def test_an_output_folder_that_is_a_link_is_refused(tiny, tmp_path, capsys):
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.symlink(target, tmp_path / "o")
    code, _, err = run_cli(["run", str(tiny), "--out", str(tmp_path / "o"), "--quiet"], capsys)
    assert code == 2 and "symbolic link" in err
    assert_one_line_error(err)
    assert list(target.iterdir()) == []


def test_a_foreign_folder_is_refused_until_forced_and_keeps_the_users_files(tiny, tmp_path,
                                                                               capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    (out / "particles.png").write_bytes(b"my picture")  # a figure's name
    (out / ".draft.part").write_text("my partial file")
    code, _, err = run_cli(["run", str(tiny), "--out", str(out), "--quiet", "--no-figures"],
                           capsys)
    assert code == 2 and "notes.txt" in err and "--force" in err
    assert_one_line_error(err)
    assert sorted(p.name for p in out.iterdir()) == [".draft.part", "notes.txt", "particles.png"]
    code, _, err = run_cli(["run", str(tiny), "--out", str(out), "--quiet", "--no-figures",
                            "--force"], capsys)
    assert code == 0, err
    # --no-figures deletes only figures spherepde drew; the partial-file cleanup only its own
    assert (out / "particles.png").read_bytes() == b"my picture"
    assert (out / ".draft.part").read_text() == "my partial file"
    assert (out / "notes.txt").read_text() == "my notes"
    assert (out / "summary.md").exists() and (out / "results.nc").exists()


def test_a_folder_of_another_scenario_is_reused_and_user_files_survive(tiny, tmp_path, capsys):
    out = tmp_path / "o"
    assert run_cli(["run", str(tiny), "--out", str(out), "--quiet"], capsys)[0] == 0
    assert (out / "particles.png").exists()
    (out / "mine.txt").write_text("mine")
    (out / "runs" / ".x.part").write_text("mine too")
    other = tiny.with_name("other.toml")
    other.write_text(TINY.replace("n = 30", "n = 20"))
    code, _, err = run_cli(["run", str(other), "--out", str(out), "--quiet", "--no-figures"],
                           capsys)
    assert code == 0, err
    assert not (out / "particles.png").exists()  # spherepde's figure of the earlier scenario
    assert (out / "mine.txt").read_text() == "mine"
    assert (out / "runs" / ".x.part").read_text() == "mine too"


def test_only_partial_files_of_spherepde_names_are_cleaned(tmp_path):
    m = io.Manifest(tmp_path, "run")
    m.add("summary.md")
    ours = tmp_path / ".summary.md.abcd1234.part"
    theirs = tmp_path / ".notes.txt.abcd1234.part"
    ours.write_text("x")
    theirs.write_text("y")
    assert m.remove_partial() == 1
    assert not ours.exists() and theirs.exists()


def test_lock_through_a_link_is_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("DATA\n")
    (tmp_path / "o").mkdir()
    os.symlink(victim, tmp_path / "o" / ".lock")
    with pytest.raises(io.LinkError, match="symbolic link"):
        with io.FolderLock(tmp_path / "o"):
            pass
    assert victim.read_text() == "DATA\n"


# ---------------------------------------------------------------------------- write faults
def _fake_ffmpeg(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "ffmpeg"
    exe.write_text("#!/bin/sh\necho 'ffmpeg: broken' >&2\nexit 1\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    import matplotlib

    monkeypatch.setitem(matplotlib.rcParams, "animation.ffmpeg_path", str(exe))


def test_a_failing_ffmpeg_is_a_warning_and_the_results_are_written(tiny, tmp_path, capsys,
                                                                   monkeypatch):
    _fake_ffmpeg(tmp_path, monkeypatch)
    out = tmp_path / "o"
    code, _, err = run_cli(["run", str(tiny), "--out", str(out), "--quiet"], capsys)
    assert code == 0, err
    warn = [ln for ln in err.splitlines() if "animation.mp4" in ln]
    assert len(warn) == 1 and "not written" in warn[0] and "Traceback" not in err
    assert (out / "results.nc").exists() and (out / "summary.md").exists()
    assert (out / "animation.gif").exists() and not (out / "animation.mp4").exists()
    assert not (out / scenario.IN_PROGRESS).exists()
    code, outp, err = run_cli(["plot", str(out)], capsys)  # and plot alike
    assert code == 0 and "animation.mp4" in err and "Traceback" not in err


def test_figures_that_cannot_be_written_leave_the_results(tiny, tmp_path, capsys, monkeypatch):
    # Root ignores permission bits: a figure's write fails as a read-only or full disk answers
    from spherepde.app import plotting

    def refuse(fig, path):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(plotting, "_save", refuse)
    out = tmp_path / "o"
    code, _, err = run_cli(["run", str(tiny), "--out", str(out), "--quiet"], capsys)
    assert code == 0, err
    assert "No space left on device" in err and "w2_to_limit.png" in err
    assert (out / "results.nc").exists() and "Not written" in (out / "summary.md").read_text()
    assert not (out / scenario.IN_PROGRESS).exists()


def test_a_full_disk_names_the_file_and_keeps_the_folder_consistent(tiny, tmp_path, capsys):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        code, _, err = run_cli(["run", str(tiny), "--out", str(mnt / "o"), "--quiet"], capsys)
        # the figures do not fit: warnings, with the results and the summary written; or not
        # even the results fit: one line that names the file
        if code == 0:
            assert (mnt / "o" / "results.nc").exists() and (mnt / "o" / "summary.md").exists()
            assert "not written" in err and "Traceback" not in err
        else:
            assert code == 2 and str(mnt) in err
            assert_one_line_error(err)
    finally:
        subprocess.run(["umount", str(mnt)])


# ---------------------------------------------------------------------------- cost
def test_an_hours_long_scenario_is_refused_with_the_estimate_unless_confirmed(tmp_path, capsys,
                                                                              monkeypatch):
    p = tmp_path / "long.toml"
    p.write_text('[model]\neigenvalues = [100.0, 99.0, -100.0]\n[run]\nt_end = 1000.0\n'
                 '[finite_volume]\nn = 4\n')
    code, _, err = run_cli(["run", str(p), "--out", str(tmp_path / "o"), "--quiet"], capsys)
    assert code == 2 and "hours" in err and "--yes" in err and "lower" in err
    assert_one_line_error(err)
    assert not (tmp_path / "o").exists()
    called = []
    monkeypatch.setattr(scenario, "_prepare_folder", lambda *a: called.append(a) or
                        (_ for _ in ()).throw(scenario.OutputError("stop here")))
    code, _, err = run_cli(["run", str(p), "--out", str(tmp_path / "o"), "--quiet", "--yes"],
                           capsys)
    assert called and "stop here" in err  # --yes goes past the estimate


def test_the_tiny_scenario_is_estimated_in_seconds(tiny):
    from spherepde.app import cost
    from spherepde.app.config import load_config

    assert cost.refuse_if_too_long(load_config(tiny)) < 60


def test_an_unresolved_cap_names_the_lmax_it_needs(tmp_path, capsys):
    p = tmp_path / "sharp.toml"
    p.write_text(TINY.replace("[spectral]\nenabled = false", "[spectral]\nlmax = 8")
                 + "[initial]\nkappa = 1e4\n")
    code, _, err = run_cli(["run", str(p), "--out", str(tmp_path / "o"), "--quiet"], capsys)
    assert code == 2 and "cannot resolve" in err and "lmax" in err
    assert_one_line_error(err)


def test_deep_nesting_is_one_line(tmp_path, capsys):
    p = tmp_path / "deep.toml"
    p.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    code, _, err = run_cli(["run", str(p), "--quiet"], capsys)
    assert code == 2 and "too deeply" in err
    assert_one_line_error(err)


def test_a_fifo_or_a_link_loop_is_named(tmp_path, capsys):
    os.mkfifo(tmp_path / "pipe.toml")
    os.symlink(tmp_path / "loop.toml", tmp_path / "loop.toml")
    for name, what in (("pipe.toml", "pipe"), ("loop.toml", "loop of links")):
        code, _, err = run_cli(["run", str(tmp_path / name), "--quiet"], capsys)
        assert code == 2 and what in err
        assert_one_line_error(err)


def test_the_app_solvers_are_a_registry():
    from spherepde.registry import Registry

    assert isinstance(scenario.SOLVER_ENTRIES, Registry)
    assert tuple(scenario.SOLVER_ENTRIES.names()) == scenario.SOLVERS
    with pytest.raises(ValueError, match="particles"):
        _ = scenario.Task("nope", 1.0, validate_config({})).resolution


# ---------------------------------------------------------------------------- messages
def test_an_output_below_a_broken_link_names_the_link(tiny, tmp_path, capsys):
    os.symlink(tmp_path / "gone", tmp_path / "dangling")
    code, _, err = run_cli(["run", str(tiny), "--out", str(tmp_path / "dangling" / "o"),
                            "--quiet"], capsys)
    assert code == 2 and "broken symbolic link" in err and "dangling" in err
    assert "is a file" not in err
    assert_one_line_error(err)
    assert not (tmp_path / "gone").exists()  # the link was not followed


def test_an_output_in_a_virtual_file_system_says_so(tiny, capsys):
    if not Path("/proc/self").is_dir():
        pytest.skip("no /proc here")
    # /proc answers "No such file or directory" to mkdir, of a folder whose parent exists
    code, _, err = run_cli(["run", str(tiny), "--out", "/proc/spherepde-out", "--quiet"], capsys)
    assert code == 2 and "/proc" in err and "does not accept new" in err
    assert "No such file or directory" not in err
    assert_one_line_error(err)


def test_a_foreign_netcdf_file_is_described(tmp_path, capsys):
    import xarray as xr

    other = tmp_path / "other.nc"
    xr.Dataset({"temperature": ("x", np.arange(3.0))}).to_netcdf(other)
    code, _, err = run_cli(["plot", str(other), "--out", str(tmp_path / "f")], capsys)
    assert code == 2 and "something else" not in err
    # what the file is (a NetCDF file of other variables) and what was expected
    assert "temperature" in err and "results.nc" in err and "spherepde run" in err
    assert_one_line_error(err)


def test_the_usa_overflow_message_states_a_limit_below_the_value():
    import re

    from spherepde import Model

    beta = 705.0  # |B|_2 = 1 (B = I): the kernel's maximum is e^705, within float64's e^709.8
    with pytest.raises(ValueError) as exc:
        Model(V=np.eye(3), beta=beta, normalized=False, rescale_time=True)
    sizes = [float(s.rstrip(".")) for s in re.findall(r"e\^([0-9.]+)", str(exc.value))]
    assert beta in sizes
    assert all(s <= beta for s in sizes), exc.value  # no limit that the value does not exceed


# ---------------------------------------------------------------------------- plot
@pytest.fixture
def saved(tiny, tmp_path, capsys):
    """The results Dataset of the tiny scenario, loaded into memory."""
    import xarray as xr

    code, _, _ = run_cli(["run", str(tiny), "--out", str(tmp_path / "run"), "--quiet",
                          "--no-figures"], capsys)
    assert code == 0
    return xr.load_dataset(tmp_path / "run" / "results.nc")


def test_plot_without_the_w2_variable_is_one_line(saved, tmp_path, capsys):
    bad = tmp_path / "edited.nc"
    saved.drop_vars("w2").to_netcdf(bad)
    code, _, err = run_cli(["plot", str(bad), "--out", str(tmp_path / "f"), "--no-animation"],
                           capsys)
    assert code == 2 and "'w2'" in err and "KeyError" not in err
    assert_one_line_error(err)
    assert not (tmp_path / "f").exists()  # refused before writing anything


def test_plot_with_an_all_nan_w2_warns_for_that_figure_only(saved, tmp_path, capsys):
    bad = tmp_path / "edited.nc"
    saved.assign(w2=saved["w2"] * np.nan).to_netcdf(bad)
    code, out, err = run_cli(["plot", str(bad), "--out", str(tmp_path / "f"), "--no-animation"],
                             capsys)
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "w2_to_limit.png" in lines[0] and "no finite W2" in lines[0], err
    assert "Error" not in err  # a reason, not an exception's name
    assert not (tmp_path / "f" / "w2_to_limit.png").exists()
    assert (tmp_path / "f" / "particles.png").stat().st_size > 0


def test_plot_into_a_folder_that_a_run_is_writing_is_refused(saved, tmp_path, capsys):
    before = _tree(tmp_path / "run")
    with io.FolderLock(tmp_path / "run"):  # a run holds the folder
        code, _, err = run_cli(["plot", str(tmp_path / "run"), "--no-animation"], capsys)
    assert code == 2 and "a spherepde run is writing there" in err
    assert_one_line_error(err)
    assert _tree(tmp_path / "run") == before  # no figure was written beside the run's files


# ---------------------------------------------------------------------------- float32 input
@pytest.fixture
def unit32():
    """Unit vectors normalised in float32: |x| - 1 is float32 rounding, about 1e-7, not 0."""
    x = np.random.default_rng(5).normal(size=(40, 3)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    dev = np.abs(np.linalg.norm(x.astype(np.float64), axis=1) - 1).max()
    assert 1e-8 < dev < 1e-6  # beyond the float64 tolerance, within the float32 one
    return x


def test_float32_unit_vectors_are_accepted_and_normalised_in_float64(unit32):
    import spherepde as sp

    cloud = sp.PointCloud(unit32)
    assert cloud.points.dtype == np.float64
    # normalised in float64: unit to float64 rounding (a few ulps of 1)
    assert np.abs(np.linalg.norm(cloud.points, axis=1) - 1).max() < 1e-15
    # and the points move by no more than float32 rounding did (1e-6, the tolerance)
    assert np.abs(cloud.points - unit32).max() < 1e-6
    model = sp.Model(V=np.diag([1.0, 0.5, 0.25]), beta=2.0)
    v32 = model.velocity(unit32, unit32)
    v64 = model.velocity(cloud.points, cloud.points)
    # the field is Lipschitz with constant O(beta |V|) = O(1): an input change of 1e-6 moves it
    # by about as much
    assert np.abs(v32 - v64).max() < 1e-5
    traj = sp.ParticleSolver(model).solve(unit32, [0.0, 0.5])
    ref = sp.ParticleSolver(model).solve(cloud.points, [0.0, 0.5])
    # same ODE from starting points 1e-6 apart, over a time 0.5 with Lipschitz constant O(1)
    assert np.abs(traj.positions - ref.positions).max() < 1e-5


def test_points_clearly_off_the_sphere_are_still_refused(unit32):
    import spherepde as sp

    for scale in (1 + 1e-4, 2.0):
        with pytest.raises(ValueError, match="must lie on the unit sphere"):
            sp.PointCloud(unit32 * np.float32(scale))
        with pytest.raises(ValueError, match="must lie on the unit sphere"):
            sp.PointCloud(unit32.astype(np.float64) * scale)
