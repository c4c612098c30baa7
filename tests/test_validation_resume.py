"""The low-temperature study's finite-volume pieces save their progress inside a piece and
resume from it (a piece at n = 256 takes longer than one sitting)."""
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
import low_temperature as lt  # noqa: E402

import spherepde as sp  # noqa: E402

TIMES = np.linspace(0.0, 1.0, 5)


class Interrupted(Exception):
    pass


def test_an_interrupted_piece_resumes_where_it_stopped_and_matches_an_uninterrupted_one(
        tmp_path, monkeypatch):
    whole = lt.run_finite_volume("E1", 4.0, 4, TIMES)

    partial = tmp_path / "piece.partial.npz"
    saves = {"n": 0}
    checkpoint = lt._checkpoint

    def failing(*args):
        saves["n"] += 1
        if saves["n"] == 3:  # dies before the third output is saved, as a killed job would
            raise Interrupted
        return checkpoint(*args)

    monkeypatch.setattr(lt, "_checkpoint", failing)
    with pytest.raises(Interrupted):
        lt.run_finite_volume("E1", 4.0, 4, TIMES, partial=partial)
    saved = np.load(partial)
    assert int(saved["done"]) == 2 and saved["rows"].shape[0] == 3

    solved = []
    solve = sp.FiniteVolumeSolver.solve

    def recording(self, state, times, **kwargs):
        solved.append(len(times))
        return solve(self, state, times, **kwargs)

    monkeypatch.setattr(sp.FiniteVolumeSolver, "solve", recording)
    resumed = lt.run_finite_volume("E1", 4.0, 4, TIMES, partial=partial)
    assert solved == [3]  # one solve, from the saved output 2 over the two intervals left
    # The resumed run restarts the macro step at t = 0.5, so it agrees with the uninterrupted
    # one to the step control, not to round-off: restarting at every output moves this curve
    # by 3e-6 relative (measured), a tenth of the default macro_tol (1e-4) bounds it; the saved
    # rows themselves are the uninterrupted run's.
    np.testing.assert_array_equal(resumed["w2"][:3], whole["w2"][:3])
    np.testing.assert_allclose(resumed["w2"], whole["w2"], rtol=1e-4, atol=0)
    assert float(resumed["resumed_seconds"]) > 0


def test_a_checkpoint_for_other_times_is_not_reused(tmp_path):
    partial = tmp_path / "piece.partial.npz"
    lt.run_finite_volume("E1", 4.0, 4, TIMES[:3], partial=partial)
    out = lt.run_finite_volume("E1", 4.0, 4, TIMES, partial=partial)
    assert float(out["resumed_seconds"]) == 0.0 and len(out["w2"]) == len(TIMES)


def test_piece_removes_its_checkpoint_once_the_piece_is_saved(tmp_path):
    times = TIMES[:3]
    data = lt.piece(tmp_path, "E1", "finite_volume", 4.0, 4, times)
    path, _ = lt.piece_path(tmp_path, "E1", "finite_volume", 4.0, 4, times)
    assert path.exists() and len(data["w2"]) == 3
    assert not list(tmp_path.glob("*.partial.npz"))


def test_agreement_compares_only_where_the_other_solvers_error_is_measured():
    # A converged curve against a solver that stopped early: its fine run has two samples past
    # its coarse run's stop, the last one far off. Those samples carry no error estimate, so
    # the comparison ends where the coarse run did (t = 0.5), and agrees there.
    t = TIMES
    conv = lt.Curve("E1", "finite_volume", 16.0, 64, t, np.array([1.0, 0.9, 0.8, 0.7, 0.6]),
                    np.array([1.0, 0.9, 0.8, 0.7, 0.6]) + 1e-3, {}, np.zeros(5))
    stopped = lt.Curve("E1", "spectral", 16.0, 128, t[:4], np.array([1.0, 0.9001, 0.8002, 0.5]),
                       np.array([1.0, 0.9, 0.8]), {}, np.zeros(4))
    rows = [r for r in lt.agreement([conv, stopped]) if r[2] == "finite_volume"]
    assert len(rows) == 1
    _, _, _, other, until, diff, own, within = rows[0]
    assert other == "spectral" and until == 0.5
    assert diff == pytest.approx(2e-4) and own == pytest.approx(2e-4) and within == "yes"


def test_a_curve_is_confirmed_until_an_independent_solver_first_disagrees_beyond_both_errors():
    t = TIMES
    fv = lt.Curve("E1", "finite_volume", 64.0, 128, t, np.array([1.0, 0.9, 0.8, 0.7, 0.6]),
                  np.array([1.0, 0.9, 0.8, 0.7, 0.6]) + 1e-3, {}, np.zeros(5))
    # the particles sit 1.5e-3 off (within 1e-3 + their own 1e-3) until t = 0.5, then 0.05 off
    # at t = 0.75 (far beyond), then back within: confirmation ends at the first disagreement
    w = np.array([1.0, 0.9015, 0.8015, 0.75, 0.6])
    parts = lt.Curve("E1", "particles", 64.0, 64000, t, w, w - 1e-3, {}, np.zeros(5))
    assert lt.confirmed_until(fv, [fv, parts]) == (0.5, "particles")
    assert lt.confirmed_until(parts, [fv, parts]) == (0.5, "finite_volume")
    # no independent curve with its own error: never confirmed
    alone = lt.Curve("E1", "particles", 64.0, 64000, t, w, None, {}, np.zeros(5))
    assert lt.confirmed_until(fv, [fv, alone]) == (-np.inf, "")


def test_an_interrupted_particle_piece_resumes_from_its_last_output(tmp_path, monkeypatch):
    whole = lt.run_particles("E1", 16.0, 300, TIMES)
    # uninterrupted, a checkpointed piece is the one solve it was before checkpoints existed
    # (to the ~1e-10 by which the kernels that kernel="auto" picks by timing agree)
    np.testing.assert_allclose(
        lt.run_particles("E1", 16.0, 300, TIMES, partial=tmp_path / "other.partial.npz")["w2"],
        whole["w2"], rtol=0, atol=1e-9)
    partial = tmp_path / "particles.partial.npz"
    calls = {"n": 0}
    bracket = lt._w2_bracket

    def failing(*args, **options):
        calls["n"] += 1
        if calls["n"] == 4:  # dies at the fourth output (t = 0.75), as a killed job would
            raise Interrupted
        return bracket(*args, **options)

    monkeypatch.setattr(lt, "_w2_bracket", failing)
    with pytest.raises(Interrupted):
        lt.run_particles("E1", 16.0, 300, TIMES, partial=partial)
    saved = np.load(partial)
    assert int(saved["done"]) == 2 and saved["rows"].shape[0] == 3

    calls["n"] = -100
    solved = []
    solve = sp.ParticleSolver.solve
    monkeypatch.setattr(sp.ParticleSolver, "solve",
                        lambda self, x, times, *a, **k: solved.append(np.array(times))
                        or solve(self, x, times, *a, **k))
    resumed = lt.run_particles("E1", 16.0, 300, TIMES, partial=partial)
    np.testing.assert_array_equal(solved[0], TIMES[2:])  # from the saved output on
    assert calls["n"] == -100 + 2  # the rows of t = 0.75 and 1 only
    assert float(resumed["resumed_seconds"]) > 0 and float(resumed["resumed_from"]) == 0.5
    # the saved rows are reused as they are; after the restart the step controller differs,
    # so the rest agrees to about the solver's tolerance, not to round-off (measured 1.6e-9
    # here with rtol 1e-5; a resume from the wrong state would be off by ~0.1)
    np.testing.assert_allclose(resumed["w2"][:3], whole["w2"][:3], rtol=0, atol=1e-9)
    np.testing.assert_allclose(resumed["w2"], whole["w2"], rtol=0, atol=1e-7)


@pytest.mark.parametrize("exact_pairs", [None, 0])
def test_dim_E_2_particle_rows_with_their_time_limit_on_either_side_of_the_exact_LP(
        monkeypatch, exact_pairs):
    # the rows always ask for a 5 s limit: at --quick's sizes "auto" takes the exact LP and
    # leaves it out (it had been a TypeError); beyond the budget's auto_exact_pairs it
    # reaches the iterative solvers
    if exact_pairs is not None:
        monkeypatch.setattr(sp.wasserstein, "DEFAULT_BUDGET",
                            sp.wasserstein.W2Budget(auto_exact_pairs=exact_pairs))
    out = lt.run_particles("E2", 16.0, 200, TIMES[:2])
    assert np.all(out["lower"] <= out["w2"]) and np.all(out["w2"] <= out["upper"])
    assert 0.5 < out["w2"][0] < 1.0


def test_a_curves_error_counts_its_w2_brackets():
    # Two resolutions 1e-3 apart, against a threshold of 5% of the minimum 0.6 = 0.03: the
    # curve converges with exact W2 values, and not once the brackets (fine plus coarse
    # widths, 0.04 at one time) say the true distances may differ by more.
    t = TIMES
    w = np.array([1.0, 0.9, 0.8, 0.7, 0.6])
    exact = lt.Curve("E2", "particles", 4.0, 64000, t, w, w + 1e-3, {}, np.zeros(5))
    assert exact.converged and np.allclose(exact.error, 1e-3)
    widths = np.array([0.0, 0.0, 0.04, 0.0, 0.0])
    loose = lt.Curve("E2", "particles", 4.0, 64000, t, w, w + 1e-3, {}, np.zeros(5), widths)
    assert not loose.converged
    np.testing.assert_allclose(loose.error, 1e-3 + widths)
    assert list(loose.point_converged) == [True, True, False, True, True]


def test_a_longer_window_places_a_minimum_the_plan_window_only_bounds():
    # Finite volumes at three betas, converged on [0, 2] with interior minima, and at a fourth
    # beta still falling at t = 2 (censored: t* >= 2). The same beta over a window to t = 4
    # turns at t = 3: the fit takes that curve, and the censored entry goes.
    plan = lt.Plan(betas=[4.0, 16.0, 64.0, 256.0], t_end=2.0, n_times=5, particles=[],
                   finite_volume=[8, 16], spectral=[], scenarios=["E1"],
                   windows={("E1", 256.0): (4.0, {"finite_volume": [8, 16]})})
    assert list(plan.times_until(4.0)) == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]
    got = [(sc, so, b, r, t[-1]) for sc, so, b, r, t in lt.curves_of(plan)]
    assert got[-1] == ("E1", "finite_volume", 256.0, [8, 16], 4.0) and len(got) == 5

    def curve(beta, times, w):
        return lt.Curve("E1", "finite_volume", beta, 16, times, w, w + 1e-4, {}, np.zeros(w.size))

    t = plan.times
    dip = np.array([1.0, 0.6, 0.4, 0.5, 0.7])
    curves = [curve(b, t, dip * s) for b, s in ((4.0, 1.0), (16.0, 0.8), (64.0, 0.6))]
    falling = curve(256.0, t, np.array([1.0, 0.6, 0.4, 0.3, 0.25]))
    pts, censored, fit = lt.fit_minima(curves + [falling], "E1")
    assert censored == [("finite_volume", 256.0, 2.0, 2.0)] and len(pts) == 3
    longer = curve(256.0, plan.times_until(4.0),
                   np.array([1.0, 0.6, 0.4, 0.3, 0.25, 0.22, 0.21, 0.22, 0.3]))
    pts, censored, fit = lt.fit_minima(curves + [falling, longer], "E1")
    assert censored == [] and [p[1] for p in pts] == [4.0, 16.0, 64.0, 256.0]
    assert 2.5 < pts[-1][2] < 3.5 and fit is not None


def test_a_minimum_on_a_plateau_within_the_curves_error_is_not_located():
    # The curve turns at t = 3 but climbs back by 0.004 only, less than its own error (the
    # coarse twin 0.01 away): within that error it may still be falling at t = 4, so t* is
    # not located (from t = 2.5, where it first comes within 0.01 of its minimum). With the
    # twin 1e-4 away the same minimum is interior.
    t = np.linspace(0.0, 4.0, 9)
    w = np.array([1.0, 0.6, 0.4, 0.3, 0.25, 0.22, 0.21, 0.212, 0.214])
    flat = lt.Curve("E1", "finite_volume", 256.0, 64, t, w, w + 0.01, {}, np.zeros(9))
    assert not flat.interior_minimum and list(flat.minimum_band()) == [2.5, 3.0, 3.5, 4.0]
    sharp = lt.Curve("E1", "finite_volume", 256.0, 64, t, w, w + 1e-4, {}, np.zeros(9))
    assert sharp.interior_minimum and list(sharp.minimum_band()) == [3.0]
    _, censored, _ = lt.fit_minima([flat], "E1")
    assert censored == [("finite_volume", 256.0, 2.5, 4.0)]
