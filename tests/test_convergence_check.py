"""The main job's convergence check: two resolutions of one solver, compared at common times."""
import math

import numpy as np
import pytest

from spherepde.app.config import validate_config
from spherepde.app.scenario import Run, Task, convergence, tasks_of

T = np.linspace(0.0, 4.0, 9)
CURVE = 0.5 * np.exp(-0.3 * T) + 0.1  # minimum 0.1 + 0.5 e^-1.2 at the last time


def run(w2, times=T, coarse=False):
    return Run("particles", 16.0, np.asarray(times), np.asarray(w2), 1.0, coarse=coarse)


def test_identical_resolutions_are_converged():
    chk = convergence(run(CURVE), run(CURVE, coarse=True), 0.05)
    assert chk["max_difference"] == 0.0 and chk["converged"] and chk["until"] == 4.0
    assert chk["threshold"] == pytest.approx(0.05 * CURVE.min(), rel=1e-15)


def test_one_point_beyond_the_threshold_fails_the_check():
    thr = 0.05 * CURVE.min()
    inside = CURVE.copy()
    inside[3] += 0.9 * thr
    assert convergence(run(CURVE), run(inside, coarse=True), 0.05)["converged"]
    outside = CURVE.copy()
    outside[3] += 1.1 * thr  # the threshold is relative to the minimum, not to the local value
    chk = convergence(run(CURVE), run(outside, coarse=True), 0.05)
    assert not chk["converged"] and chk["max_difference"] == pytest.approx(1.1 * thr)


def test_the_w2_brackets_widen_each_difference():
    # 0.9 of the threshold apart: converged with exact W2 values, not once the two brackets
    # (0.1 and 0.05 of the threshold wide at that time) say the true distances may differ
    # by more
    thr = 0.05 * CURVE.min()
    near = CURVE.copy()
    near[3] += 0.9 * thr
    fine, coarse = run(CURVE), run(near, coarse=True)
    fine.w2_width, coarse.w2_width = np.zeros(len(T)), np.zeros(len(T))
    fine.w2_width[3], coarse.w2_width[3] = 0.1 * thr, 0.05 * thr
    chk = convergence(fine, coarse, 0.05)
    assert not chk["converged"] and chk["max_difference"] == pytest.approx(1.05 * thr)


def test_a_coarse_run_that_ended_early_does_not_count_as_converged():
    chk = convergence(run(CURVE), run(CURVE[:5], T[:5], coarse=True), 0.05)
    assert chk["max_difference"] == 0.0 and chk["until"] == T[4] and not chk["converged"]
    assert not convergence(run(CURVE), None, 0.05)["converged"]
    assert math.isnan(convergence(run(CURVE), None, 0.05)["max_difference"])


def test_every_fine_task_gets_its_coarse_twin():
    cfg = validate_config({"run": {"betas": [4.0, 256.0, "inf"]},
                           "finite_volume": {"n": 16, "betas": [256.0, "inf"]}})
    tasks = tasks_of(cfg)
    fine = [(t.solver, t.beta, t.resolution) for t in tasks if not t.coarse]
    coarse = [(t.solver, t.beta, t.resolution) for t in tasks if t.coarse]
    assert len(fine) == len(coarse) == 3 + 3 + 2
    halve = {"particles": 4, "spectral": 2, "finite_volume": 2}
    assert coarse == [(s, b, r // halve[s]) for s, b, r in fine]
    assert len({t.key for t in tasks}) == len({t.filename for t in tasks}) == len(tasks)
    off = validate_config({"convergence": {"check": False}})
    assert not any(t.coarse for t in tasks_of(off))
    assert Task("spectral", 4.0, cfg, coarse=True).resolution == 64


def test_tokens_start_on_the_lattice_where_there_is_one():
    # "auto": rho_0's lattice on S^2 (the same tokens for the run and its summary), a seeded
    # sample in d = 8, the coarse run of the check drawing its own (seed + 1)
    from spherepde.app.scenario import build_initial, initial_tokens

    cfg = validate_config({})
    mu0 = build_initial(cfg)
    a, b = initial_tokens(cfg, mu0, 500), mu0.lattice(500)
    assert np.array_equal(a.points, b.points) and np.array_equal(a.weights, b.weights)
    cfg8 = validate_config({"model": {"matrices": "identity", "d": 8},
                            "initial": {"kind": "uniform"}, "spectral": {"enabled": False}})
    mu8 = build_initial(cfg8)
    fine, coarse = initial_tokens(cfg8, mu8, 50), initial_tokens(cfg8, mu8, 50, coarse=True)
    assert np.array_equal(fine.points, mu8.sample(50, seed=0))
    assert np.array_equal(coarse.points, mu8.sample(50, seed=1))
    sampled = validate_config({"particles": {"init": "sample"}})
    assert np.array_equal(initial_tokens(sampled, mu0, 50).points, mu0.sample(50, seed=0))


def test_resolution_error_matches_times_and_adds_both_brackets():
    # The coarse run stopped at t = 1 and its times carry a 1e-14 rounding: the common times
    # are 0 and 1, and each difference grows by the fine and the coarse bracket there.
    from spherepde.analysis.convergence import resolution_error

    t, err = resolution_error([0.0, 1.0, 2.0], [1.0, 0.5, 0.4], [0.0, 1.0 + 1e-14],
                              [0.9, 0.53], fine_width=[0.001, 0.002, 0.5],
                              coarse_width=[0.01, 0.02])
    np.testing.assert_allclose(t, [0.0, 1.0])
    np.testing.assert_allclose(err, [0.1 + 0.011, 0.03 + 0.022])
    t, err = resolution_error([0.0, 1.0], [1.0, 0.5], [0.5], [0.7])
    assert t.size == 0 and err.size == 0


def test_richardson_recovers_order_and_limit_of_a_known_expansion():
    from spherepde.analysis.convergence import richardson

    # e_h = C h^1.5 + D h^3: the observed order tends to 1.5, the extrapolant keeps the h^3
    # remainder and what the one fitted order misses, both inside the error bar (the correction)
    exact = np.sin(T) + 2.0
    h = [0.1 / 2**k for k in range(3)]
    runs = [exact + 0.7 * np.cos(T) * x**1.5 + 0.4 * x**3 for x in h]
    p, R, err = richardson(*runs)
    assert abs(p - 1.5) < 0.05  # the h^3 term shifts the two-level estimate by O(h^1.5)
    assert np.all(np.abs(R - exact) <= err)
    assert np.max(np.abs(R - exact)) < 0.1 * np.max(np.abs(runs[2] - exact))


def test_richardson_with_unequal_ratios_recovers_order_and_limit():
    from spherepde.analysis.convergence import richardson

    # cells at 64, 96, 128: ratios 1.5 and 4/3; a pure h^p error is removed exactly
    exact = np.sin(T) + 2.0
    for order in (1.0, 2.0, 0.5):
        runs = [exact + 0.7 * np.cos(T) / n**order for n in (64, 96, 128)]
        p, R, err = richardson(*runs, ratio=(1.5, 4 / 3))
        assert abs(p - order) < 1e-9 and np.allclose(R, exact, atol=1e-12, rtol=0)
        assert np.allclose(err, np.abs(runs[2] - exact), atol=1e-12, rtol=0)
    # equal ratios given as a pair agree with the single ratio
    h = [0.1 / 2**k for k in range(3)]
    runs = [exact + 0.7 * np.cos(T) * x**1.5 + 0.4 * x**3 for x in h]
    one, two = richardson(*runs), richardson(*runs, ratio=(2.0, 2.0))
    assert one[0] == two[0] and np.array_equal(one[1], two[1])
    # steps that shrink more slowly than any positive order allows (order 0 would give
    # log 1.5 / log(4/3) = 1.41): refused
    p, R, _ = richardson(T * 0 + 1.3e-3, T * 0, T * 0 - 1e-3, ratio=(1.5, 4 / 3))
    assert math.isnan(p) and np.all(np.isnan(R))
    with pytest.raises(ValueError, match="must exceed 1"):
        richardson(T, T, T, ratio=(1.5, 1.0))


def test_richardson_refuses_what_it_cannot_extrapolate():
    from spherepde.analysis.convergence import richardson

    # differences that grow under refinement: no asymptotic range, no order
    p, R, err = richardson(T * 0, T * 0 + 1e-3, T * 0 + 3e-3)
    assert math.isnan(p) and np.all(np.isnan(R)) and np.all(np.isnan(err))
    with pytest.raises(ValueError, match="same points"):
        richardson(T, T, T[:3])


def test_richardson_refuses_steps_of_opposite_signs():
    from spherepde.analysis.convergence import richardson

    # the middle resolution overshoots: the steps' sizes alone (0.011 then 0.0025) would fit
    # an order of about 3, but convergence that oscillates has no asymptotic range
    t = np.linspace(0.0, 1.0, 9)
    v = 0.3 + 0.1 * t
    p, R, err = richardson(v + 0.010, v - 0.001 * (1 + t), v + 0.0005, ratio=(1.5, 4 / 3))
    assert math.isnan(p) and np.isnan(R).all() and np.isnan(err).all()
    # opposite signs elsewhere than where either step is largest do not matter
    first = np.where(t > 0.5, 0.004, -0.0001)
    second = np.where(t > 0.5, 0.002, 0.00005)
    p, R, _ = richardson(v + second + first, v + second, v, ratio=2.0)
    assert abs(p - 1.0) < 1e-12 and np.allclose(R, v - second)

