"""The Runge–Kutta registry: every scheme reaches its declared order on the sphere, and the
adaptive default reaches 1e-8, both against the closed-form zero-temperature flow
(docs/theory.md §3.3)."""
import numpy as np
import pytest

import spherepde as sp
from spherepde import exact
from spherepde import timestepping as ts
from spherepde.sphere import random_rotation, retract


def rotating_model():
    """beta = inf with B = 1.5·O (so s = t/1.5 exactly) and A = skew + small symmetric part.

    The rotation keeps tokens moving for the whole run, so the global error accumulates
    steadily instead of being damped near an attractor: clean asymptotic orders.
    """
    Q = 1.5 * random_rotation(3, 1)
    K = random_rotation(3, 2)
    B = Q.T @ K
    S = np.array([[0.0, -2.0, 0.5], [2.0, 0.0, -1.0], [-0.5, 1.0, 0.0]])
    A = S + np.diag([0.3, 0.0, -0.3])
    V = A @ np.linalg.inv(B.T)
    return sp.Model(Q, K, V, beta=np.inf)


T_END = 2.0


@pytest.fixture(scope="module")
def problem():
    model = rotating_model()
    x0 = sp.measures.Uniform(3).sample(8, seed=3)
    ref = exact.zero_temperature_flow(model, x0, T_END)
    return model, x0, ref


def field(model):
    return lambda t, x: model.velocity(x)


@pytest.mark.parametrize("name", ts.SCHEMES.names())
def test_empirical_order(problem, name):
    model, x0, ref = problem
    tab = ts.get_scheme(name)
    steps = np.array([16, 32, 64, 128, 256])
    errs = []
    for n in steps:
        out, _ = ts.integrate(field(model), x0, [0.0, T_END], scheme=name, dt=T_END / n,
                              retract=retract, adaptive=False)
        errs.append(np.abs(out[-1] - ref).max())
    errs = np.array(errs)
    # Errors below 1e-12 are at the round-off floor (256 steps · 2e-16 plus the reference's
    # own 1e-14): leave them out of the regression; at least 3 points must remain.
    use = (errs > 1e-12) & (errs < 1e-1)
    assert use.sum() >= 3, f"{name}: too few errors in the asymptotic range: {errs}"
    slope = np.polyfit(np.log(T_END / steps[use]), np.log(errs[use]), 1)[0]
    # the declared order, within 0.3 (the acceptance band for a measured order)
    assert abs(slope - tab.order) < 0.3, f"{name}: slope {slope:.2f}, declared {tab.order}"


def test_retraction_keeps_states_on_sphere(problem):
    model, x0, _ = problem
    out, _ = ts.integrate(field(model), x0, [0.0, T_END], scheme="euler", dt=0.1,
                          retract=retract)
    # the projective retraction normalizes every step: unit norm to round-off
    assert np.abs(np.linalg.norm(out[-1], axis=1) - 1).max() < 1e-14


def test_dopri5_default_tolerance_reaches_1e8(problem):
    model, x0, ref = problem
    out, stats = ts.integrate(field(model), x0, [0.0, 0.5, T_END], retract=retract)
    # the documented default accuracy: ~1e-8 relative (positions are unit vectors)
    assert np.abs(out[-1] - ref).max() < 1e-8
    assert stats["steps"] > 0


def test_adaptive_pair_tracks_tolerance(problem):
    model, x0, ref = problem
    errs = []
    for rtol in (1e-5, 1e-7, 1e-9):
        out, _ = ts.integrate(field(model), x0, [0.0, T_END], retract=retract, rtol=rtol,
                              atol=rtol * 1e-2)
        errs.append(np.abs(out[-1] - ref).max())
    # tighter tolerance -> smaller error, and each error within 100 x its tolerance
    # (global error = sum of local errors over ~10-100 steps)
    assert errs[0] > errs[1] > errs[2]
    assert all(e < 100 * r for e, r in zip(errs, (1e-5, 1e-7, 1e-9), strict=True))


def test_rms_norm_tracks_tolerance(problem):
    # the same as above with the errors combined by their root mean square: a step may leave
    # one coordinate up to sqrt(3N) times the tolerance (N = 8 tokens here), so the bound is
    # 100 x sqrt(24) x rtol
    model, x0, ref = problem
    errs = []
    for rtol in (1e-5, 1e-7, 1e-9):
        out, _ = ts.integrate(field(model), x0, [0.0, T_END], retract=retract, rtol=rtol,
                              atol=rtol * 1e-2, norm="rms")
        errs.append(np.abs(out[-1] - ref).max())
    assert errs[0] > errs[1] > errs[2]
    assert all(e < 100 * np.sqrt(24) * r for e, r in zip(errs, (1e-5, 1e-7, 1e-9), strict=True))


def test_rms_norm_does_not_let_one_fast_component_set_every_step():
    # 500 rotating pairs, one 20 times faster than the others (a straggler among tokens).
    # The max norm takes the straggler's step for all; the rms norm weighs its error with the
    # others' and takes half as many. Each step keeps the rms of the scaled errors <= 1,
    # so a coordinate may carry up to sqrt(1000) tolerances: the bulk stays within 100 rtol,
    # the straggler within 100 sqrt(1000) rtol.
    n, rtol = 500, 1e-7
    omega = np.ones(n)
    omega[7] = 20.0
    y0 = np.column_stack([np.ones(n), np.zeros(n)])

    def f(t, y):
        return omega[:, None] * np.column_stack([-y[:, 1], y[:, 0]])

    T = 2.0
    exact_end = np.column_stack([np.cos(omega * T), np.sin(omega * T)])
    runs = {norm: ts.integrate(f, y0, [0.0, T], rtol=rtol, atol=rtol, norm=norm)
            for norm in ("max", "rms")}
    steps = {k: v[1]["steps"] for k, v in runs.items()}
    # the error estimate of a step goes like h^5, and the rms divides the straggler's share
    # by sqrt(2n) = 31.6: its steps are 31.6^(1/5) = 2.0 times longer (measured 1.98)
    assert steps["max"] / steps["rms"] > 1.8, steps
    err = np.abs(runs["rms"][0][-1] - exact_end).max(axis=1)
    assert np.delete(err, 7).max() < 100 * rtol
    assert err[7] < 100 * np.sqrt(2 * n) * rtol


def test_bad_arguments():
    def f(t, y):
        return -y
    with pytest.raises(ValueError, match="positive"):
        ts.integrate(f, np.ones(2), [0.0, 1.0], scheme="rk4", dt=0.0)
    with pytest.raises(ValueError, match="strictly increasing"):
        ts.integrate(f, np.ones(2), [0.0, 1.0, 1.0], scheme="rk4", dt=0.1)
    with pytest.raises(ValueError, match="fixed step"):
        ts.integrate(f, np.ones(2), [0.0, 1.0], scheme="rk4")
    with pytest.raises(ValueError, match="embedded"):
        ts.integrate(f, np.ones(2), [0.0, 1.0], scheme="rk4", dt=0.1, adaptive=True)
    with pytest.raises(ValueError, match="unknown time-stepping scheme"):
        ts.integrate(f, np.ones(2), [0.0, 1.0], scheme="rk7", dt=0.1)
    with pytest.raises(ValueError,
                       match=r"unknown error norm 'l2'; choose one of \['max', 'rms'\]"):
        ts.integrate(f, np.ones(2), [0.0, 1.0], norm="l2")


def test_keep_stores_only_requested_outputs():
    def f(t, y):
        return -y
    out, _ = ts.integrate(f, np.ones(1), np.linspace(0, 1, 11), scheme="rk4", dt=0.01,
                          keep=lambda i: i % 5 == 0)
    assert len(out) == 3
    # y = e^{-t}; rk4 at dt = 0.01 has error ~ dt^4 = 1e-8
    np.testing.assert_allclose([o[0] for o in out], np.exp(-np.array([0.0, 0.5, 1.0])),
                               rtol=1e-8)


def test_nan_right_hand_side_is_reported_at_once():
    # A NaN field must not send the adaptive controller into millions of NaN steps.
    from spherepde.timestepping import integrate

    def nan_field(t, y):
        return y * np.nan
    with pytest.raises(FloatingPointError, match="NaN or inf at t = 0"):
        integrate(nan_field, np.ones(3), [0.0, 1.0])
    with pytest.raises(FloatingPointError, match="became NaN"):
        integrate(nan_field, np.ones(3), [0.0, 1.0], scheme="rk4", dt=0.1)
    with pytest.raises(ValueError, match="rtol must be > 0"):
        integrate(lambda t, y: y, np.ones(3), [0.0, 1.0], rtol=-1.0)


def test_dopri5_reuses_its_last_stage():
    # Dormand–Prince is first-same-as-last, and a rejected step keeps f(t, y): after the two
    # evaluations of the starting-step heuristic and the very first stage, every attempted
    # step costs 6 evaluations, not 7; the count in stats is the true number of calls.
    calls = []

    def f(t, y):
        calls.append(t)
        return np.array([y[1], -y[0]]) * (1.0 + 0.5 * np.cos(3 * t))

    assert ts.get_scheme("dopri5").fsal and not ts.get_scheme("rk4").fsal
    _, st = ts.integrate(f, np.array([1.0, 0.0]), np.linspace(0.0, 10.0, 7), rtol=1e-8,
                         atol=1e-10)
    assert st["rejected"] > 0  # the count below covers both kinds of step
    assert st["fevals"] == len(calls) == 2 + 1 + 6 * (st["steps"] + st["rejected"])


# ---------------------------------------------------------------- the driver and its controllers
def _within(seconds, fn):
    """fn() under an alarm: a hang fails the test instead of stalling the suite."""
    import signal

    old = signal.signal(signal.SIGALRM, lambda *_: pytest.fail(f"no answer within {seconds} s"))
    signal.alarm(seconds)
    try:
        return fn()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def test_schemes_and_norms_are_registries_listing_what_is_installed():
    from spherepde.registry import Registry

    assert isinstance(ts.SCHEMES, Registry) and isinstance(ts.ERROR_NORMS, Registry)
    assert {"euler", "heun", "ssprk3", "rk4", "dopri5"} <= set(ts.SCHEMES.names())
    listed = r"choose one of \['dopri5', 'euler', 'heun', 'rk4', 'ssprk3'\]"
    with pytest.raises(ValueError, match=listed):
        ts.get_scheme("rk7")
    assert ts.get_error_norm("rms")(np.array([3.0, 4.0])) == pytest.approx(np.sqrt(12.5))


def test_a_fixed_step_beyond_the_budget_is_refused_naming_dt():
    # 10^298 steps: refused before any work, with the setting to change
    def f(t, y):
        return -y
    with pytest.raises(ts.StepBudgetError, match=r"dt = 1e-300.*raise dt"):
        _within(10, lambda: ts.integrate(f, np.ones(2), [0.0, 0.01], scheme="euler", dt=1e-300))
    # the budget counts steps: 101 steps do not fit into max_steps = 100
    with pytest.raises(ts.StepBudgetError, match="max_steps = 100"):
        ts.integrate(f, np.ones(2), [0.0, 1.01], scheme="euler", dt=0.01, max_steps=100)
    out, st = ts.integrate(f, np.ones(2), [0.0, 1.0], scheme="euler", dt=0.01, max_steps=100)
    assert st["steps"] == 100


def test_particle_solver_with_a_tiny_fixed_step_ends_with_an_error():
    model = sp.Model(V=np.diag([1.0, 0.4, 0.0]), beta=4.0)
    x = sp.measures.Uniform(3).sample(20, seed=1)
    solver = sp.ParticleSolver(model, scheme="euler", dt=1e-300)
    with pytest.raises(RuntimeError, match="raise dt"):
        _within(20, lambda: solver.solve(x, [0.0, 0.01]))


def test_usa_at_beta_500_ends_with_a_step_size_error_not_a_division_by_zero():
    # |dy/dt| ~ e^500 overflows the scaled norms of the starting-step heuristic: the run is
    # refused as unresolvable, with the solver's hint (rescale_time)
    model = sp.Model(V=np.diag([1.0, 0.4, 0.0]), beta=500.0, normalized=False)
    x = sp.measures.Uniform(3).sample(50, seed=0)
    with pytest.raises(ts.StepSizeError, match="rescale_time"):
        _within(60, lambda: sp.ParticleSolver(model).solve(x, [0.0, 0.01]))


def test_positivity_rate_reuses_the_first_stage_and_retakes_a_step_whose_rate_grows():
    # dy/dt = -r(t) y with the rate r(t) = 1 + 10 t growing within a step: the rate of a later
    # stage exceeds the first one's, so the step is re-taken with dt = cfl/r'.
    calls = []

    def tendency(t, y):
        calls.append(t)
        r = 1.0 + 10.0 * t
        return -r * y, r

    ctrl = ts.PositivityRate(tendency, ts.get_scheme("ssprk3"), cfl=1.0)
    out, st = ts.march(ctrl, np.ones(1), [0.0, 2.0])
    assert st["rejected"] > 0
    # one evaluation to find r, then stages - 1 per attempt: the first stage is never redone
    assert len(calls) == st["fevals"] == st["steps"] + 2 * (st["steps"] + st["rejected"])
    assert st["max_courant"] <= 1.0 + 1e-12
    assert out[-1][0] > 0.0


def test_pi_control_reaches_the_tolerance_with_fewer_rejections():
    # Gustafsson's PI controller (beta = 0.4/(q+1)) damps the step-size oscillation of the
    # elementary one on a problem whose step is limited by accuracy: it must reach the same
    # accuracy, with no more rejected steps.
    def f(t, y):
        return np.array([y[1], -y[0]]) * (1.0 + 0.9 * np.cos(5 * t))

    runs = {}
    for beta in (0.0, 0.08):
        ctrl = ts.Adaptive(f, ts.get_scheme("dopri5"), 1e-8, 1e-10, pi_beta=beta)
        runs[beta] = ts.march(ctrl, np.array([1.0, 0.0]), [0.0, 20.0])
    ref = ts.integrate(f, np.array([1.0, 0.0]), [0.0, 20.0], rtol=1e-12, atol=1e-14)[0][-1]
    for beta, (out, _st) in runs.items():
        # 20 time units at rtol 1e-8: the global error stays within 1000 rtol
        assert np.abs(out[-1] - ref).max() < 1e-5, beta
    assert runs[0.08][1]["rejected"] <= runs[0.0][1]["rejected"]
