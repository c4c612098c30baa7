"""The main job end to end on a small scenario: files, numbers, resume, config errors."""
import json

import numpy as np
import pytest

from spherepde import io
from spherepde.app.cli import main

SMALL = """
[run]
betas = [4.0, "inf"]
t_end = 2.0
n_times = 9
[particles]
n = 300
[spectral]
lmax = 24
t_end = 1.0
[finite_volume]
n = 8
betas = [4.0, "inf"]
"""


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    cfg = d / "small.toml"
    cfg.write_text(SMALL)
    assert main(["run", str(cfg), "--out", str(d / "out"), "--quiet"]) == 0
    return d


def test_run_writes_results_figures_and_summary(small_run):
    out = small_run / "out"
    for name in ("results.nc", "scenario.json", "w2_to_limit.png", "densities.png",
                 "densities_orthographic.png", "particles.png", "animation.gif", "summary.md"):
        assert (out / name).stat().st_size > 0, name
    assert not (out / "results.npz").exists()
    ds = io.open_dataset(out / "results.nc")
    assert ds.attrs["cost"] == "chordal" and ds["w2"].dims == ("solver", "beta", "time")
    curve = ds["w2"].sel(solver="particles", beta=np.inf)
    t, w = curve["time"].values, curve.values
    assert t.shape == (9,) and np.all(np.isfinite(w))
    # Zero temperature: W2 to Pi#mu^N_0 decreases along the flow (docs/theory.md §3.1).
    assert np.all(np.diff(w) < 0)
    # Spectral and particle curves start from the same rho_0: at t = 0 they differ only by the
    # empirical-measure error of 300 samples (~N^-1/2 ~ 0.06 in W2 units, 3 sigma margin).
    spec = ds["w2"].sel(solver="spectral", beta=4.0)
    ts, ws = spec["time"].values[np.isfinite(spec.values)], spec.values[np.isfinite(spec.values)]
    assert ts[-1] == pytest.approx(1.0)
    assert abs(ws[0] - ds["w2"].sel(solver="particles", beta=4.0).values[0]) < 0.15
    summary = (out / "summary.md").read_text()
    assert "spectral gap gamma = 0.6" in summary and "particles, β=inf" in summary
    assert json.loads((out / "scenario.json").read_text())["particles"]["n"] == 300


def test_rerun_resumes_from_finished_runs(small_run, capsys):
    out = small_run / "out"
    saved = {p.name: p.stat().st_mtime_ns for p in (out / "runs").iterdir()}
    assert len(saved) == 3 * 2 * 2  # three solvers, two betas, fine and coarse
    assert main(["run", str(small_run / "small.toml"), "--out", str(out), "--quiet"]) == 0
    again = {p.name: p.stat().st_mtime_ns for p in (out / "runs").iterdir()}
    assert again == saved  # nothing recomputed


def test_invalid_config_names_the_key(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[particles]\ncount = 10\n")
    assert main(["run", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "unknown key particles.count" in err and "allowed keys" in err


def test_particles_only_run_says_the_spectral_solver_was_off(tmp_path):
    cfg = tmp_path / "p.toml"
    cfg.write_text('[run]\nbetas = ["inf"]\nt_end = 1.0\nn_times = 3\n[particles]\nn = 100\n'
                   '[spectral]\nenabled = false\n[finite_volume]\nenabled = false\n')
    assert main(["run", str(cfg), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    summary = (tmp_path / "o" / "summary.md").read_text()
    assert "spectral solver was not run: disabled" in summary
    assert not (tmp_path / "o" / "runs" / "spectral_beta=inf.npz").exists()


def test_results_nc_holds_the_runs_and_round_trips(small_run, tmp_path):
    from spherepde.app.scenario import Run

    ds = io.open_dataset(small_run / "out" / "results.nc")
    for path in (small_run / "out" / "runs").glob("*.npz"):
        run = Run.load(path)
        var = "w2_coarse" if run.coarse else "w2"
        cell = ds[var].sel(solver=run.solver, beta=run.beta).sel(time=run.times)
        assert np.array_equal(cell.values, run.w2), path.name
    # tokens and densities at the same times (the figures compare them panel by panel)
    dens_t = np.isfinite(ds["density"].sel(beta=4.0).values).any(axis=(1, 2))
    pos_t = np.isfinite(ds["positions"].sel(beta=4.0).values).any(axis=(1, 2))
    assert dens_t.sum() >= 2 and np.all(pos_t[dens_t])
    # the two atoms: masses sum to 1, the atoms are +-e
    assert ds["limit_weights"].sum().item() == pytest.approx(1.0, abs=1e-12)
    e = ds["dominant_eigenspace"].values[:, 0]
    assert np.allclose(ds["limit_points"].values, [e, -e])
    again = io.save_dataset(ds, tmp_path / "again.nc")
    assert io.open_dataset(again).identical(ds)


def test_maps_draw_the_finite_volume_density_over_the_whole_run(small_run):
    from scipy.integrate import trapezoid

    ds = io.open_dataset(small_run / "out" / "results.nc")
    # the finite volumes ran at both betas, so they draw the maps ...
    assert ds["density_solver"].values.tolist() == ["finite_volume", "finite_volume"]
    # ... to run.t_end = 2, past the spectral window (spectral.t_end = 1)
    have = np.isfinite(ds["density"].values).any(axis=(0, 2, 3))
    assert ds["snapshot_time"].values[have][-1] == pytest.approx(2.0)
    # each map is a density of mass 1: the reconstruction keeps the cell masses, and the
    # map's quadrature (2-degree trapezoid over cells of n = 8, jumps at their edges) errs
    # by a few 1e-3 (3.3e-3 at most measured here, growing as the density sharpens)
    lat, lon = np.radians(ds["lat"].values), np.radians(ds["lon"].values)
    for rho in ds["density"].values[:, have].reshape(-1, lat.size, lon.size):
        mass = abs(trapezoid(trapezoid(rho, lon, axis=1) * np.cos(lat), lat))  # lat descends
        assert abs(mass - 1.0) < 1e-2


def test_maps_come_from_the_finite_volumes_where_they_run():
    from spherepde.app.config import validate_config
    from spherepde.app.scenario import Task, map_solver, snapshot_times

    both = validate_config({"run": {"betas": [4.0, 16.0]}, "finite_volume": {"betas": [4.0]}})
    assert map_solver(both, 4.0) == "finite_volume" and map_solver(both, 16.0) == "spectral"
    assert snapshot_times(both)[-1] == both["run"]["t_end"]  # the finite volumes' window
    off = validate_config({"run": {"betas": [4.0, 16.0]}, "finite_volume": {"enabled": False}})
    assert map_solver(off, 4.0) == "spectral"
    assert snapshot_times(off)[-1] == off["spectral"]["t_end"]  # the spectral window
    # the spectral run keeps its maps in one scenario and not in the other: a saved run of
    # the one is not reused for the other
    assert Task("spectral", 4.0, both).key != Task("spectral", 4.0, off).key


def test_run_checks_convergence_with_a_coarse_twin_of_every_curve(small_run):
    out = small_run / "out"
    ds = io.open_dataset(out / "results.nc")
    assert list(ds["solver"].values) == ["particles", "spectral", "finite_volume"]
    res, coarse = ds["resolution"], ds["coarse_resolution"]
    assert res.sel(solver="particles").values.tolist() == [300, 300]
    assert coarse.sel(solver="particles").values.tolist() == [75, 75]
    assert coarse.sel(solver="finite_volume").values.tolist() == [4, 4]
    # the verdict is the rule applied to the two stored curves
    for s in ds["solver"].values:
        for b in ds["beta"].values:
            fine, crs, wf, wc = (ds[v].sel(solver=s, beta=b).values
                                 for v in ("w2", "w2_coarse", "w2_width", "w2_coarse_width"))
            both = np.isfinite(fine) & np.isfinite(crs)
            # each difference widened by the two certified W2 brackets
            assert np.all(wf[both] >= 0) and np.all(wc[both] >= 0)
            diff = np.max(np.abs(fine[both] - crs[both]) + wf[both] + wc[both])
            assert ds["max_difference"].sel(solver=s, beta=b).item() == pytest.approx(diff)
            ok = diff < ds.attrs["convergence_fraction"] * np.nanmin(fine) and \
                np.isfinite(crs[np.isfinite(fine)]).all()
            assert bool(ds["converged"].sel(solver=s, beta=b).item()) == ok
    # the finite volumes start from the same rho_0 as the spectral density: at t = 0 they
    # differ by the cell-average error of n = 8 cells (h ~ 0.19), a few 1e-2 in W2
    fv0 = ds["w2"].sel(solver="finite_volume", time=0.0).values
    sp0 = ds["w2"].sel(solver="spectral", time=0.0).values
    assert np.all(np.abs(fv0 - sp0) < 0.05)
    summary = (out / "summary.md").read_text()
    assert "coarse" in summary and "converged" in summary and "finite_volume, β=4" in summary
    # one line lists the verdicts of the table, by solver
    line = next(x for x in summary.splitlines() if x.startswith("Converged: "))
    yes, no = line.removeprefix("Converged: ").removesuffix(".").split(". Not converged: ")
    listed = {True: set(), False: set()}
    for ok, part in ((True, yes), (False, no)):
        for group in part.split("; ") if part != "none" else []:
            solver, betas = group.split(" at β = ")
            listed[ok] |= {(solver, float(b)) for b in betas.split(", ")}
    for ok in (True, False):
        assert listed[ok] == {(str(s), float(b)) for s in ds["solver"].values
                              for b in ds["beta"].values
                              if bool(ds["converged"].sel(solver=s, beta=b).item()) == ok}


def test_plot_command_redraws_a_saved_run(small_run, tmp_path):
    from PIL import Image

    assert main(["plot", str(small_run / "out"), "--out", str(tmp_path)]) == 0
    names = {p.name for p in tmp_path.iterdir()}
    assert {"w2_to_limit.png", "densities.png", "densities_orthographic.png", "particles.png",
            "animation.gif"} <= names
    img = np.asarray(Image.open(tmp_path / "densities.png").convert("RGB"), dtype=float)
    # not blank: a colour map spreads over many distinct colours (a blank figure has a handful)
    assert len(np.unique(img.reshape(-1, 3), axis=0)) > 200 and img.std() > 20
    with Image.open(tmp_path / "animation.gif") as gif:
        assert gif.n_frames >= 2
    assert main(["plot", str(tmp_path / "missing")]) == 2


def test_animation_is_also_written_as_mp4_when_ffmpeg_is_at_hand(small_run, tmp_path):
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")  # in the test extra
    from spherepde.app.plotting import animate_run, mp4_writer_available

    assert mp4_writer_available()
    ds = io.open_dataset(small_run / "out" / "results.nc")
    written = animate_run(ds, tmp_path / "movie.gif", n=41)
    assert [p.name for p in written] == ["movie.gif", "movie.mp4"]
    reader = imageio_ffmpeg.read_frames(str(tmp_path / "movie.mp4"))
    meta = next(reader)
    w, h = meta["size"]
    frames = [np.frombuffer(f, np.uint8).reshape(h, w, 3) for f in reader]
    # one frame per snapshot time of the density's window, and they change over time
    window = np.isfinite(ds["density"].values).any(axis=(0, 2, 3))
    assert 2 <= len(frames) == window.sum() and frames[0].std() > 10
    assert np.abs(frames[-1].astype(float) - frames[0]).mean() > 1.0
    assert not list(tmp_path.glob(".*.part"))  # no temporary file left


def test_info_lists_versions_and_backends(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "spherepde" in out and "SHT" in out and "numba threads" in out and "results go to" in out
    assert "numba vectors" in out


#: What the installed ``spherepde`` console script runs (as pip generates it) with an import
#: hook that sends this process SIGINT when ``scipy`` starts to load, that is, in the middle of
#: importing the package, as a Ctrl-C in the first second after typing the command does.
_CTRL_C_DURING_IMPORTS = """
import os, signal, sys
class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "scipy":
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, CtrlC())
from {module} import {func}
sys.exit({func}())
"""


def test_ctrl_c_while_the_command_imports_is_one_line(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from spherepde.app.config import tomllib

    root = Path(__file__).resolve().parents[1]
    entry = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]["spherepde"]
    module, func = entry.split(":")
    code = _CTRL_C_DURING_IMPORTS.format(module=module, func=func)
    # Ctrl-C's default action whatever the suite was started with (a backgrounded shell job
    # ignores SIGINT and its children would inherit that)
    import signal

    proc = subprocess.run([sys.executable, "-c", code, "info"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines() == ["spherepde: interrupted"], proc.stderr
