"""The late-phase study end to end on a tiny configuration, and its diagnostics' closed forms."""
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import spherepde as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
import late_phase as lp  # noqa: E402


def test_scenario_R1_separates_the_phases():
    # R1 is built so that A = diag(1, 0.4, 0) exactly and V's dominant eigenvector is real and
    # at least 0.5 rad from E = span e1.
    m = lp.model_for("R1", 64.0)
    np.testing.assert_allclose(m.A, lp.R1_A, atol=1e-14)  # A = A B^-1 B^T, B symmetric
    d = lp.eigen_data("R1")
    assert abs(d["V eigenvalues"][0].imag) == 0 and d["angle_v_E"] >= 0.5
    assert np.all(np.linalg.eigvalsh(m.B) > 0)  # <x, Bx> > 0: a lone cluster attends to itself


def test_orbit_diagnostic_is_zero_on_the_projected_measure_and_on_its_orbit():
    # On Pi#rho_0 itself the best orbit point is s = 0 at distance 0, and on the orbit moved
    # by s = 2 it is s = 2: the W2 between two-atom measures is exact (semi-discrete), so only
    # the scalar search's tolerance (1e-4 in s) remains.
    for scenario in ("R1", "E1"):
        diag = lp.Diagnostics(lp.model_for(scenario, 64.0), lp.initial())
        s, w, angle = diag.orbit_match(diag.limit)
        assert s < 1e-3 and w < 1e-3 and angle < 1e-3
        s, w, angle = diag.orbit_match(diag.orbit_measure(2.0))
        assert abs(s - 2.0) < 1e-3 and w < 1e-3 and angle > 0


def test_time_scales_of_a_closed_form_curve():
    # w2 = |t - 3| + 0.1 has its minimum 0.1 at t* = 3; with DEP_FRACTION it is back at
    # (1 + f) 0.1 at t = 3 + 0.1 f; late = e^{-t} falls below a level L at -log(L).
    t = np.linspace(0.0, 10.0, 201)
    sc = lp.time_scales(t, np.abs(t - 3) + 0.1, np.exp(-t), np.full_like(t, np.nan))
    assert abs(sc["t*"] - 3) < 1e-12 and abs(sc["min W2"] - 0.1) < 1e-12
    assert abs(sc["t_dep"] - (3 + 0.1 * lp.DEP_FRACTION)) < 1e-12  # linear: interpolation exact
    # e^{-t} interpolated linearly between outputs h = 0.05 apart: the crossing is off by at
    # most h^2/8 max|y''| / min|y'| = h^2/8 e^{h} on the interval
    tol = 0.05 ** 2 / 8 * math.exp(0.05)
    assert abs(sc[f"t_term({lp.TERM_LEVEL:g})"] + math.log(lp.TERM_LEVEL)) < tol
    # relative: 1 - TERM_FRACTION of the fall from e^{-3} (at t*) to e^{-10} (the end)
    level = math.exp(-10) + lp.TERM_FRACTION * (math.exp(-3) - math.exp(-10))
    assert abs(sc["t_term"] + math.log(level)) < tol
    assert math.isnan(sc["t_orbit"])
    # a curve that has not settled has no relative terminal time
    assert math.isnan(lp.time_scales(t, np.abs(t - 3) + 0.1, np.exp(-t), np.full_like(t, np.nan),
                                     settled_end=False)["t_term"])


def test_late_phase_quick_runs_end_to_end(tmp_path):
    # The quick plan cut to one beta and the window [0, 0.5]: every piece, the report and the
    # figures, written under tmp_path only.
    lp.main(["--quick", "--t-end", "0.5", "--store", str(tmp_path)])
    text = (tmp_path / "late_phase_quick.md").read_text()
    assert "terminal measure" in text and "t_dep" in text
    for sc in ("R1", "E1", "E2"):
        assert (tmp_path / f"late_phase_quick_{sc}.png").exists()
    assert len(list(tmp_path.glob("*_fv_beta=16_*.npz"))) == 5  # R1, E1 at n = 8, 16; E2 at 8
    d = sp.io.load_npz(next(tmp_path.glob("R1_fv_beta=16_n=16_*.npz")))
    # W2 to Pi#rho_0 starts where the low-temperature study's does (the same rho_0 and E)
    assert d["w2"][0] > 0.9 and len(d["times"]) == 2
    # the tokens on rho_0's Gauss rule measure the same distances: at t = 0 both W2 curves
    # differ from the cells' by the two discretisations of rho_0 only: the cells carry their
    # mass at their centres, which moves W2 by at most a cell's width, pi/2/16 at n = 16 (a
    # Gauss rule's quadrature error is far below; measured 4.7e-4 and 3.7e-5)
    p = sp.io.load_npz(next(tmp_path.glob("R1_particles_beta=16_n=2000_*.npz")))
    for key in ("w2", "w2_term"):
        assert abs(p[key][0] - d[key][0]) <= np.pi / 2 / 16
    assert len(p["times"]) == 2 and "confirmed by the other solver" in text


def test_a_longer_window_runs_its_pair_only_and_keeps_the_other_pieces_names(tmp_path):
    # A window beyond t_end changes the output times of its (scenario, beta) alone; a piece on
    # the base window keeps the spec (and so the file) it had before windows existed, and a
    # piece on the longer one gets a new name and snapshots every LATE_SNAPSHOT_STEP after
    # SNAPSHOTS[-1].
    plan = lp.Plan([16.0, 64.0], 100.0, {"E1": [8]}, windows={("E1", 64.0): 150.0})
    base, long = plan.times("E1", 16), plan.times("E1", 64)
    assert base[-1] == 100.0 and long[-1] == 150.0 and np.allclose(np.diff(long), lp.DT)
    assert plan.times("R1", 64)[-1] == 100.0
    _, spec = lp.piece_path(tmp_path, "E1", 16.0, 8, base)
    assert "late_snapshots" not in spec and spec["snapshots"] == lp.SNAPSHOTS
    path, spec = lp.piece_path(tmp_path, "E1", 64.0, 8, long)
    assert spec["late_snapshots"] == lp.LATE_SNAPSHOT_STEP
    assert path != lp.piece_path(tmp_path, "E1", 64.0, 8, plan.times("E1", 16))[0]
    assert lp.snapshot_times(150.0) == lp.SNAPSHOTS + [125.0, 150.0]
    assert lp.snapshot_times(30.0) == [s for s in lp.SNAPSHOTS if s <= 30]


def test_returns_of_a_turning_pair_are_one_period_apart():
    # W2 of a pair turning with period P about the atoms it left: low at t = kP (back on the
    # atoms), high half a turn on (swapped); the decaying start mimics the approach to t*
    P, t = 39.64, np.arange(0.0, 100.0 + 1e-9, 0.5)
    w2 = 0.7 - 0.3 * np.cos(2 * np.pi * (t - 4.0) / P) + 0.4 * np.exp(-t)
    times, values = lp.returns(t, w2)
    # the output spacing 0.5 bounds where a sampled minimum can sit
    assert np.allclose(times, [4.0, 4.0 + P, 4.0 + 2 * P], atol=0.5)
    assert np.all(values < 0.45)
    # a curve that only settles has no return after its minimum
    assert lp.returns(t, 0.2 + np.exp(-t))[0].size == 0


def test_final_clusters_of_two_caps():
    # Two caps of mass 0.7 about v and 0.3 about a point 20 degrees from -v, on a Fibonacci set
    # of cells: found heaviest first with their masses, angles from +-v and sides of u^perp.
    x = sp.measures.Uniform(3).lattice(20000).points
    v = np.array([0.0, 0.0, 1.0])
    w = np.array([math.sin(math.radians(20)), 0.0, -math.cos(math.radians(20))])
    mass = 0.7 * (x @ v > math.cos(0.1)) / (x @ v > math.cos(0.1)).sum()
    mass = mass + 0.3 * (x @ w > math.cos(0.1)) / (x @ w > math.cos(0.1)).sum()
    found = lp.final_clusters(mass, x, v, v)
    assert len(found) == 2
    (m1, a1, s1), (m2, a2, s2) = found
    assert abs(m1 - 0.7) < 1e-12 and a1 < 0.5 and s1 == 1
    assert abs(m2 - 0.3) < 1e-12 and abs(a2 - 20) < 0.5 and s2 == -1


def _curve(solver, t, fine, coarse, beta=64.0):
    def piece(w2, n):
        none = np.full_like(t, np.nan)  # no orbit diagnostic: R1 has a terminal measure
        return {"times": t, "w2": w2, "lower": w2, "upper": w2, "w2_term": w2 / 2,
                "lower_term": w2 / 2, "upper_term": w2 / 2, "orbit_s": none, "orbit_w2": none,
                "orbit_angle": none, "n": n}
    return lp.Curve("R1", beta, 2, piece(fine, 2), piece(coarse, 1), 1, solver)


def test_confirmation_by_the_other_solver_and_the_points_it_admits():
    t = np.linspace(0.0, 10.0, 21)
    base = np.abs(t - 3) + 0.1                      # min 0.1 at t* = 3: threshold 0.005
    # cells converged (coarse off by 1e-6); tokens off by 1e-3 from t = 2 on, their coarse
    # run by 0.02 from t = 2 on, so they are self-converged only to t = 1.5
    cells = _curve("finite_volume", t, base, base + 1e-6)
    step = np.where(t >= 2, 1.0, 0.0)
    tokens = _curve("particles", t, base + 1e-3 * step, base + 0.02 * step)
    # the gap 1e-3 is over the summed errors (2e-6) before t = 2, but under the floor
    assert cells.confirmed_until(tokens) == 10.0
    assert tokens.converged_until() == 1.5
    # a gap over both the errors and the floor ends the confirmation there
    far = _curve("particles", t, base + 0.01 * step, base + 0.01 * step)
    assert cells.confirmed_until(far) == 1.5
    rows, points, _ = lp.scales_rows([cells, tokens])
    ok = {(r[2], r[3]): (r[8], r[10]) for r in rows}
    assert ok["particles", "t*"] == ("no", "yes") and ok["finite_volume", "t*"] == ("yes", "yes")
    # the tokens' t* = 3 is admitted on the confirmation alone
    assert any(p[1] == "t*" and p[4] == "particles" and abs(p[3] - 3) < 1e-9 for p in points)
    # one value per (scenario, scale, beta): the cells' where both are admitted
    picked = lp.fit_points(points)
    assert {p[4] for p in picked} == {"finite_volume"}
    assert len(picked) == len({(p[0], p[1], p[2]) for p in picked})
    # the fits need MIN_FIT_BETAS betas, and list each value with its |fine - coarse|
    row = lp.fits(picked)[0]
    assert row[1] == "t*" and row[3].startswith("64: 3 ± ") and row[4] == "n/a"


def test_a_time_the_two_resolutions_place_apart_is_not_admitted():
    # two plateaus flat to 1e-4 (within the threshold 0.005) whose argmins lie 3 apart: the
    # curves agree, their t* does not
    t = np.linspace(0.0, 10.0, 21)
    plateau = 0.2 + np.maximum(np.abs(t - 5) - 2, 0.0)   # flat on [3, 7]
    fine, coarse = plateau - 1e-4 * (t == 6), plateau - 1e-4 * (t == 3.5)
    c = _curve("finite_volume", t, fine, coarse)
    rows, points, _ = lp.scales_rows([c])
    ok = {r[3]: r[8] for r in rows}
    assert c.converged_until() == 10.0 and ok["t*"] == "no" and ok["min W2"] == "no"
    assert not any(p[1] == "t*" for p in points)


def test_the_misplaced_mass_fit_states_how_far_the_resolutions_masses_lie_apart(monkeypatch):
    # rows (scenario, beta, n, t, conjectured m+, reached m+, ...) coarse to fine per beta: the
    # fit's sentence carries the largest gap between a beta's two finest reached masses (0.2 at
    # beta = 256 here), and a beta with one resolution adds none.
    rows = [("E2", "16", 32, 100.0, 0.6, 0.7, 0, 0), ("E2", "16", 64, 100.0, 0.6, 0.69, 0, 0),
            ("E2", "64", 64, 100.0, 0.6, 0.65, 0, 0),
            ("E2", "256", 32, 100.0, 0.6, 0.62, 0, 0), ("E2", "256", 64, 100.0, 0.6, 0.42, 0, 0)]
    monkeypatch.setattr(lp, "side_masses", lambda plan, curves: rows)
    text = "\n".join(lp.mass_section(lp.Plan([16.0, 64.0, 256.0], 100.0, {}, ["E2"]), []))
    assert "over β = 16, 64, 256" in text and "differ by up to 0.2)" in text


def test_a_variant_piece_changes_one_solver_option_under_its_own_name(tmp_path):
    # A variant is the default piece with one option of FiniteVolumeSolver changed: its own
    # file (the default's name unchanged), its own result (the linear reconstruction is more
    # diffusive than the cubic: the curves part by more than round-off), and a report row
    # against the default at the same n; a variant not yet run is reported as such.
    times = np.linspace(0.0, 1.0, 3)
    plan = lp.Plan([16.0], 1.0, {"E1": [4]}, variants={("E1", 16.0): {4: ["linear", "quadratic"]}})
    default = lp.piece(tmp_path, "E1", 16.0, 4, times)
    linear = lp.piece(tmp_path, "E1", 16.0, 4, times, variant="linear")
    names = sorted(p.name for p in tmp_path.glob("E1_*.npz"))
    assert len(names) == 2 and names[0].startswith("E1_fv-linear_beta=16_n=4_")
    assert names[1] == lp.piece_path(tmp_path, "E1", 16.0, 4, times)[0].name
    gap = np.max(np.abs(linear["w2"] - default["w2"]))
    assert gap > 1e-6 and linear["w2"][0] == default["w2"][0]  # the same start
    rows = {r[3]: r for r in lp.variant_rows(plan, tmp_path)}
    assert rows["default"][7] == 0.0
    assert math.isclose(rows["linear"][9], gap) and rows["quadratic"][4] == "not computed"
    with pytest.raises(ValueError, match="variant 'cubic'"):
        lp.piece_path(tmp_path, "E1", 16.0, 4, times, variant="cubic")
