"""Sweeps on a real Dask LocalCluster: a 2×2 grid, resume, a failing cell, the gathered Dataset."""
import numpy as np
import pytest

pytest.importorskip("distributed")

from spherepde import io  # noqa: E402
from spherepde.app.config import validate_config  # noqa: E402
from spherepde.app.scenario import Task, run_one  # noqa: E402
from spherepde.app.sweep import SweepError, load_sweep, run_sweep  # noqa: E402

#: A scenario small enough that a task takes well under a second.
BASE = {"run": {"t_end": 1.0, "n_times": 5},
        "particles": {"n": 24, "rtol": 1e-5, "init": "sample"},  # the seed axis draws samples
        "spectral": {"enabled": False}}


def _sweep(axes, out):
    return load_sweep({"sweep": {"solver": "particles", "cluster_tol": 0.05,
                                 "measures": ["w2", "t_star", "min_w2", "clusters"]},
                       "base": BASE, "axes": axes}, out=out)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    sweep = _sweep({"run.betas": [1.0, 4.0], "particles.seed": [0, 1]}, out)
    res = run_sweep(sweep, n_workers=2, progress=False)
    return sweep, res


def test_two_by_two_sweep_on_a_local_cluster(finished):
    sweep, res = finished
    assert len(res["done"]) == 4 and not res["failed"] and not res["skipped"]
    ds = io.open_dataset(sweep.out / "sweep.nc")
    assert ds["w2"].dims == ("run.betas", "particles.seed", "time")
    assert ds["run.betas"].values.tolist() == [1.0, 4.0]
    assert ds["particles.seed"].values.tolist() == [0.0, 1.0]
    assert (ds["status"].values == "done").all()
    assert len(list((sweep.out / "tasks").glob("*.nc"))) == 4  # one file per task
    assert (sweep.out / "phase_diagram.png").stat().st_size > 0
    # the gathered values are those of single runs of the main job (same code path, same seed)
    for beta in (1.0, 4.0):
        for seed in (0, 1):
            cfg = validate_config({**BASE, "run": {**BASE["run"], "betas": [beta]},
                                   "particles": {**BASE["particles"], "seed": seed}})
            run = run_one(Task("particles", beta, cfg))
            cell = ds.sel({"run.betas": beta, "particles.seed": seed})
            assert np.array_equal(cell["w2"].values, run.w2)
            k = int(np.argmin(run.w2))
            assert cell["min_w2"].item() == run.w2[k] and cell["t_star"].item() == run.times[k]


def test_rerun_skips_every_finished_task(finished):
    sweep, _ = finished
    mtimes = {p: p.stat().st_mtime_ns for p in (sweep.out / "tasks").iterdir()}
    res = run_sweep(sweep, n_workers=2, progress=False)
    assert len(res["skipped"]) == 4 and not res["done"] and not res["failed"]
    assert {p: p.stat().st_mtime_ns for p in (sweep.out / "tasks").iterdir()} == mtimes


def test_a_failing_cell_is_reported_and_the_others_finish(tmp_path):
    # USA caps beta at 12: exactly the cell (normalized = false, beta = 20) is invalid
    sweep = _sweep({"model.normalized": [True, False], "run.betas": [1.0, 20.0]}, tmp_path)
    reports = []
    res = run_sweep(sweep, n_workers=2, progress=False, report=reports.append)
    assert len(res["done"]) == 3 and len(res["failed"]) == 1
    bad = res["failed"][0]
    assert bad["params"] == {"model.normalized": False, "run.betas": 20.0}
    assert "ConfigError" in bad["error"] and "Traceback" in bad["traceback"]
    assert len(reports) == 1
    assert "model.normalized=false" in reports[0] and "run.betas=20.0" in reports[0]
    ds = res["dataset"]
    cell = ds.sel({"model.normalized": "false", "run.betas": 20.0})
    assert cell["status"].item() == "failed" and np.isnan(cell["min_w2"].item())
    assert "USA" in cell["error"].item() or "normalized" in cell["error"].item()
    assert (ds["status"].values == "done").sum() == 3
    assert np.isfinite(ds["min_w2"].values).sum() == 3


def test_seed_axis_needs_random_tokens(tmp_path):
    # from a lattice every seed would give the same run: a seed axis is refused, saying why
    base = {**BASE, "particles": {"n": 24, "init": "auto"}}
    with pytest.raises(SweepError, match="particles.init"):
        load_sweep({"sweep": {"solver": "particles"}, "base": base,
                    "axes": {"particles.seed": [0, 1]}}, out=tmp_path)


def test_invalid_sweep_file_names_the_key(tmp_path, capsys):
    from spherepde.app.cli import main

    bad = tmp_path / "bad.toml"
    bad.write_text('[axes]\n"particles.count" = [1, 2]\n')
    assert main(["sweep", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "particles.count" in err and "not a scenario key" in err


def _toml(doc, prefix="") -> str:
    """A small TOML writer for the sweep files of these tests (values as JSON, which TOML
    reads for numbers, strings, booleans and arrays)."""
    import json

    lines, tables = [], []
    for k, v in doc.items():
        key = json.dumps(k) if "." in k else k
        if isinstance(v, dict):
            tables.append((f"{prefix}{key}", v))
        else:
            lines.append(f"{key} = {json.dumps(v)}")
    text = "\n".join(lines) + "\n"
    for name, table in tables:
        text += f"[{name}]\n" + _toml(table, f"{name}.")
    return text


def test_a_damaged_task_file_is_recomputed(finished):
    sweep, _ = finished
    victim = sorted((sweep.out / "tasks").glob("*.nc"))[0]
    victim.write_bytes(victim.read_bytes()[:100])  # truncated, as a killed copy leaves it
    res = run_sweep(sweep, n_workers=1, progress=False)
    assert len(res["done"]) == 1 and len(res["skipped"]) == 3 and not res["failed"]
    assert io.open_dataset(victim).attrs["task_id"] == victim.stem


def test_a_second_sweep_on_a_locked_folder_is_refused(finished):
    sweep, _ = finished
    with io.FolderLock(sweep.out):
        with pytest.raises(SweepError, match="another spherepde sweep"):
            run_sweep(sweep, n_workers=1, progress=False)


@pytest.mark.parametrize("doc, words", [
    ({"sweep": 3}, "sweep must be a table"),
    ({"sweep": {"base": 5}}, "sweep.base must be a path"),
    ({"sweep": {"out": 7}}, "sweep.out must be a path"),
    ({"axes": 3}, "axes must be a table"),
    ({"sweep": {"phase": "x"}}, "sweep.phase must be a table"),
    ({"sweep": {"phase": {"x": ["a"]}}}, "is not an axis"),
    ({"sweep": {"measures": 5}}, "sweep.measures must be a list"),
    ({"sweep": {"phase": {"x": "run.betas", "y": "run.betas"}}}, "two different axes"),
    ({"axes": {"run.betas": [[4.0, 16.0]]}}, "one beta per point"),
])
def test_wrong_types_in_the_sweep_file_are_one_line(doc, words, tmp_path, capsys):
    from spherepde.app.cli import main

    full = {"base": {"particles": {"n": 24}, "spectral": {"enabled": False}},
            "axes": {"run.betas": [1.0, 4.0], "particles.n": [20, 24]}}
    full.update({k: v for k, v in doc.items()})
    p = tmp_path / "s.toml"
    p.write_text(_toml(full))
    assert main(["sweep", str(p), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o" / "tasks").exists()  # refused before computing anything


@pytest.mark.parametrize("address", ["bogus://127.0.0.1:1", "tcp://127.0.0.1:notaport"])
def test_a_bad_scheduler_address_is_one_line(address, tmp_path, capsys):
    from spherepde.app.cli import main

    p = tmp_path / "s.toml"
    p.write_text(_toml({"base": {"particles": {"n": 24}, "spectral": {"enabled": False}},
                        "axes": {"run.betas": [1.0]}}))
    assert main(["sweep", str(p), "--out", str(tmp_path / "o"), "--quiet",
                 "--scheduler", address]) == 2
    err = capsys.readouterr().err
    assert "scheduler" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_deep_nesting_in_a_sweep_file_is_one_line(tmp_path, capsys):
    from spherepde.app.cli import main

    p = tmp_path / "deep.toml"
    p.write_text("[axes]\n\"run.betas\" = " + "[" * 5000 + "]" * 5000 + "\n")
    assert main(["sweep", str(p), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "too deeply" in err and len(err.strip().splitlines()) == 1


def _without_dask_teardown(err: str) -> list[str]:
    """stderr's lines less Dask's own report of a client collected after its event loop closed
    ("Exception ignored in: <function Client.__del__ ...>" down to "RuntimeError: IOLoop is
    closed"): Dask prints it while the local cluster shuts down, in about one run of three,
    and replacing sys.unraisablehook in the command's process did not silence it (the
    cluster's processes share the command's stderr). It is Dask's, not a line of spherepde's."""
    out, skipping = [], False
    for line in err.strip().splitlines():
        if line.startswith("Exception ignored in: <function Client.__del__"):
            skipping = True
        elif skipping and line.startswith("RuntimeError: IOLoop is closed"):
            skipping = False
        elif not skipping:
            out.append(line)
    return out


def test_ctrl_c_during_a_sweep_leaves_no_failure_record(tmp_path):
    # Ctrl-C in a terminal sends SIGINT to the whole foreground process group: the client and
    # every local worker. A task that the closing worker cuts short is not a failed task: no
    # <id>.failed.json, exit code 130, one line on stderr, and a rerun computes it.
    import os
    import signal
    import subprocess
    import sys
    import time

    p = tmp_path / "s.toml"
    # tasks of a few seconds each, so that two are running when the signal comes
    p.write_text(_toml({"sweep": {"solver": "particles", "measures": ["w2"]},
                        "base": {"run": {"t_end": 30.0, "n_times": 5, "betas": [1.0]},
                                 "particles": {"n": 300, "rtol": 1e-9, "init": "sample"},
                                 "spectral": {"enabled": False}},
                        "axes": {"particles.seed": [0, 1, 2, 3, 4, 5]}}))
    out = tmp_path / "o"
    proc = subprocess.Popen([sys.executable, "-m", "spherepde.app.cli", "sweep", str(p), "--out",
                             str(out), "--workers", "2", "--quiet"], start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # SIGINT's default action even when the suite runs as a background
                            # job (which ignores SIGINT, and children inherit that)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300
        while not list((out / "tasks").glob("*.nc")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        time.sleep(0.5)  # the workers are inside their next tasks
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert not list((out / "tasks").glob("*.failed.json"))
    assert _without_dask_teardown(err) == ["spherepde: interrupted; finished tasks are saved, "
                                           "run the same command again to resume"], err
    assert len(list((out / "tasks").glob("*.nc"))) < 6  # it was stopped mid-sweep
