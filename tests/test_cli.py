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
    for name in ("results.npz", "scenario.json", "w2_to_limit.png", "densities.png",
                 "particles.png", "summary.md"):
        assert (out / name).stat().st_size > 0, name
    res = io.load_npz(out / "results.npz")
    assert res["meta"]["cost"] == "chordal"
    t, w = res["particles_beta=inf/times"], res["particles_beta=inf/w2"]
    assert t.shape == (9,) and np.all(np.isfinite(w))
    # Zero temperature: W2 to Pi#mu^N_0 decreases along the flow (SPEC §3.1).
    assert np.all(np.diff(w) < 0)
    # Spectral and particle curves start from the same rho_0: at t = 0 they differ only by the
    # empirical-measure error of 300 samples (~N^-1/2 ~ 0.06 in W2 units, 3 sigma margin).
    ts, ws = res["spectral_beta=4/times"], res["spectral_beta=4/w2"]
    assert ts[-1] == pytest.approx(1.0)
    assert abs(ws[0] - res["particles_beta=4/w2"][0]) < 0.15
    summary = (out / "summary.md").read_text()
    assert "spectral gap gamma = 0.6" in summary and "particles, β=inf" in summary
    assert json.loads((out / "scenario.json").read_text())["particles"]["n"] == 300


def test_rerun_resumes_from_finished_runs(small_run, capsys):
    out = small_run / "out"
    saved = {p.name: p.stat().st_mtime_ns for p in (out / "runs").iterdir()}
    assert len(saved) == 4
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
                   '[spectral]\nenabled = false\n')
    assert main(["run", str(cfg), "--out", str(tmp_path / "o"), "--quiet"]) == 0
    summary = (tmp_path / "o" / "summary.md").read_text()
    assert "spectral solver was not run: disabled" in summary
    assert not (tmp_path / "o" / "runs" / "spectral_beta=inf.npz").exists()
