"""The Lagrangian particle solver against the closed forms of docs/theory.md §3 (zero temperature,
equiangular ODE, energy monotonicity), symmetry, clustering, layers, I/O and bad input."""
import numpy as np
import pytest

import spherepde as sp
from spherepde import exact
from spherepde.analysis import diagnostics as dg
from spherepde.particles import ParticleSolver, Trajectory
from spherepde.sphere import random_rotation


def uniform(n, d, seed):
    return sp.measures.Uniform(d).sample(n, seed=seed)


def equiangular(n, d, rho):
    """n unit vectors in R^d (d >= n) with <x_i, x_j> = rho for i != j: rows of G^{1/2}."""
    G = (1 - rho) * np.eye(n) + rho * np.ones((n, n))
    lam, U = np.linalg.eigh(G)
    X = (U * np.sqrt(lam)) @ U.T
    return np.hstack([X, np.zeros((n, d - n))])


def pair_inner(x):
    G = x @ x.T
    return G[np.triu_indices(x.shape[0], 1)]


# ---------------------------------------------------------------- closed forms
@pytest.mark.parametrize("d", [2, 4])
def test_zero_temperature_matches_closed_form(d):
    rng = np.random.default_rng(d)
    # general Q, K, V: B is not a multiple of an orthogonal matrix, so each token has its own
    # time change ds/dt = 1/|B^T x|
    Q = np.eye(d) + 0.3 * rng.standard_normal((d, d))
    K = np.eye(d) + 0.3 * rng.standard_normal((d, d))
    V = rng.standard_normal((d, d))
    model = sp.Model(Q, K, V, beta=np.inf)
    assert sp.sphere.orthogonal_factor(model.B) is None
    x0 = uniform(20, d, seed=1)
    times = np.array([0.0, 0.5, 1.0, 2.0])
    traj = ParticleSolver(model).solve(x0, times)  # default tolerances
    ref = exact.zero_temperature_flow(model, x0, times)
    # the default solver's accuracy target: 1e-8
    assert np.abs(traj.positions - ref).max() < 1e-8


def test_hardmax_with_B_identity_is_the_oja_flow():
    # With Q = K = I every token's best-aligned key is itself (<x, x> = 1 > <x, y>), so
    # hardmax reduces to dx/dt = P_x V x, whose solution is e^{tV}x0/|e^{tV}x0| (docs/theory.md §3.3
    # with A = V, B = I).
    rng = np.random.default_rng(3)
    V = rng.standard_normal((3, 3))
    x0 = uniform(10, 3, seed=2)
    hard = sp.Model(V=V, beta=np.inf, hardmax=True)
    times = np.linspace(0.0, 1.5, 4)
    traj = ParticleSolver(hard).solve(x0, times)
    ref = exact.zero_temperature_flow(sp.Model(V=V, beta=np.inf), x0, times)
    # default dopri5 accuracy, as in the zero-temperature test
    assert np.abs(traj.positions - ref).max() < 1e-8


@pytest.mark.parametrize("normalized,kind", [(True, "SA"), (False, "USA")])
def test_equiangular_follows_ode(normalized, kind):
    n, d, rho0, beta = 4, 5, 0.2, 1.5
    x0 = equiangular(n, d, rho0)
    times = np.linspace(0.0, 3.0, 7)
    traj = ParticleSolver(sp.Model(beta=beta, d=d, normalized=normalized)).solve(x0, times)
    rho_exact = exact.equiangular_solution(rho0, n, beta, times, kind=kind)
    for i in range(len(times)):
        g = pair_inner(traj.positions[i])
        # symmetry is exact in exact arithmetic: the spread is round-off plus solver error
        assert g.max() - g.min() < 1e-9
        # the target: the docs/theory.md §3.8 ODE to 1e-6
        assert abs(g.mean() - rho_exact[i]) < 1e-6
    assert rho_exact[-1] > rho_exact[0] + 0.1  # the test is not trivially static


@pytest.mark.parametrize("normalized", [True, False])
def test_energy_is_non_decreasing(normalized):
    beta = 2.0
    x0 = uniform(40, 3, seed=4)
    times = np.linspace(0.0, 4.0, 21)
    traj = ParticleSolver(sp.Model(beta=beta, d=3, normalized=normalized)).solve(x0, times)
    E = np.array([dg.interaction_energy(traj.measure(i), beta=beta) for i in range(len(times))])
    # E_beta is a Lyapunov function (docs/theory.md §3.7); allow only round-off (1e-12 relative)
    assert np.all(np.diff(E) >= -1e-12 * E[:-1])
    assert E[-1] > E[0] * 1.01  # and it really moves


def test_rotation_equivariance():
    rng = np.random.default_rng(5)
    d = 4
    Q, K, V = (rng.standard_normal((d, d)) for _ in range(3))
    R = random_rotation(d, seed=6)
    x0 = uniform(30, d, seed=7)
    times = [0.0, 0.5, 1.0]
    def solver(m):
        return ParticleSolver(m, scheme="rk4", dt=0.05)
    a = solver(sp.Model(Q, K, V, beta=2.0)).solve(x0, times)
    b = solver(sp.Model(R @ Q @ R.T, R @ K @ R.T, R @ V @ R.T, beta=2.0)).solve(x0 @ R.T, times)
    # RK4 with the projective retraction commutes with rotations exactly; only round-off of
    # the rotated arithmetic remains (~1e-15 per step, 20 steps)
    assert np.abs(b.positions - a.positions @ R.T).max() < 1e-12


@pytest.mark.parametrize("normalized", [True, False])
def test_open_hemisphere_ends_in_one_cluster(normalized):
    x0 = uniform(24, 3, seed=5)
    x0[:, 2] = np.abs(x0[:, 2]) + 0.05
    x0 /= np.linalg.norm(x0, axis=1, keepdims=True)
    assert dg.common_hemisphere(x0)[0]
    assert dg.cluster_count(x0) == 24
    traj = ParticleSolver(sp.Model(beta=1.0, d=3, normalized=normalized)).solve(x0, [0.0, 20.0])
    # docs/theory.md §3.6: exponential collapse of a hemisphere; at t = 20 the spread is < 1e-7,
    # far below the 1e-3 cluster threshold
    assert dg.cluster_count(traj.measure(-1)) == 1


def test_numba_and_numpy_backends_give_the_same_trajectory():
    pytest.importorskip("numba")
    x0 = uniform(50, 3, seed=8)
    def run(b):
        return ParticleSolver(sp.Model(beta=3.0, d=3), scheme="rk4", dt=0.05,
                                       kernel=b).solve(x0, [0.0, 1.0])
    # backends agree to ~1e-15 per evaluation; 80 evaluations of a contracting flow
    assert np.abs(run("numba").positions - run("numpy").positions).max() < 1e-12


def test_weights_are_respected():
    # a token of weight 1/2 duplicated = two tokens of weight 1/4 each at the same place
    x0 = uniform(5, 3, seed=9)
    x_dup = np.vstack([x0, x0[:1]])
    w_dup = np.array([0.125, 0.1875, 0.1875, 0.25, 0.125, 0.125])
    w = np.array([0.25, 0.1875, 0.1875, 0.25, 0.125])
    solver = ParticleSolver(sp.Model(beta=2.0, d=3), scheme="rk4", dt=0.05)
    a = solver.solve(x0, [0.0, 1.0], weights=w)
    b = solver.solve(x_dup, [0.0, 1.0], weights=w_dup)
    # same measure, same dynamics: round-off only
    assert np.abs(a.positions[-1] - b.positions[-1, :5]).max() < 1e-13
    assert np.abs(b.positions[-1, 0] - b.positions[-1, 5]).max() < 1e-13
    # a PointCloud carries its weights: identical arithmetic, identical result
    c = solver.solve(sp.PointCloud(x0, w), [0.0, 1.0])
    np.testing.assert_array_equal(c.positions, a.positions)


# ---------------------------------------------------------------- layers
@pytest.mark.parametrize("kind", ["post-ln", "pre-ln"])
def test_layers_converge_to_continuous_time_at_first_order(kind):
    n, d, rho0, beta, T = 3, 4, 0.3, 1.0, 1.0
    x0 = equiangular(n, d, rho0)
    solver = ParticleSolver(sp.Model(beta=beta, d=d))
    exact_kind = "post-ln" if kind == "post-ln" else "pre-ln"
    rho_T = exact.equiangular_solution(rho0, n, beta, [T], kind=exact_kind)[0]
    errs = []
    for L in (50, 100, 200):
        traj = solver.layers(x0, L, T / L, kind=kind)
        assert traj.times[-1] == pytest.approx(T)
        g = pair_inner(traj.positions[-1])
        assert g.max() - g.min() < 1e-12  # layers preserve the symmetry exactly
        errs.append(abs(g.mean() - rho_T))
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    # a layer is an explicit Euler step of the continuous dynamics: error ~ h, halving h
    # halves the error (ratio 2 within 15%)
    assert np.all(np.abs(ratios - 2.0) < 0.3), (errs, ratios)


def test_pre_ln_reports_directions_and_radii():
    x0 = uniform(10, 3, seed=10)
    traj = ParticleSolver(sp.Model(beta=1.0, d=3)).layers(x0, 6, 0.5, kind="pre-ln", every=2)
    assert traj.times.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert np.abs(np.linalg.norm(traj.positions, axis=-1) - 1).max() < 1e-14
    assert traj.radii.shape == (4, 10)
    # r grows: d|z|/dt = <theta, Attn(theta)> > 0 for SA with Q = K = V = I and beta >= 0
    # (a softmax average of unit vectors with the largest weight on theta itself)
    assert np.all(np.diff(traj.radii, axis=0) > 0)


# ---------------------------------------------------------------- trajectory object
def test_trajectory_thinning_subset_and_io(tmp_path):
    x0 = uniform(12, 3, seed=11)
    times = np.linspace(0.0, 1.0, 11)
    solver = ParticleSolver(sp.Model(beta=2.0, d=3), scheme="rk4", dt=0.05)
    full = solver.solve(x0, times)
    thin = solver.solve(x0, times, every=4, tokens=[0, 3, 5])
    assert thin.times.tolist() == pytest.approx([0.0, 0.4, 0.8, 1.0])
    assert thin.positions.shape == (4, 3, 3)
    np.testing.assert_array_equal(thin.positions, full.positions[[0, 4, 8, 10]][:, [0, 3, 5]])
    np.testing.assert_array_equal(thin.initial_measure.points, x0)
    mu = thin.measure(1)
    assert isinstance(mu, sp.PointCloud) and mu.weights.sum() == pytest.approx(1.0)

    path = tmp_path / "traj.nc"
    thin.save(path)
    back = Trajectory.load(path)
    np.testing.assert_array_equal(back.positions, thin.positions)
    np.testing.assert_array_equal(back.times, thin.times)
    np.testing.assert_array_equal(back.token_index, [0, 3, 5])
    np.testing.assert_array_equal(back.model.V, thin.model.V)
    assert back.model.beta == 2.0 and back.model.normalized
    assert [p.name for p in tmp_path.iterdir()] == ["traj.nc"]  # no temporary file left


# ---------------------------------------------------------------- bad input
def test_bad_input_errors():
    model = sp.Model(beta=1.0, d=3)
    x0 = uniform(5, 3, seed=12)
    solver = ParticleSolver(model)
    with pytest.raises(ValueError, match="unit sphere.*normalize=True"):
        solver.solve(2 * x0, [0.0, 1.0])
    bad = x0.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        solver.solve(bad, [0.0, 1.0])
    with pytest.raises(ValueError, match="dt must be a positive"):
        ParticleSolver(model, scheme="rk4", dt=-0.1)
    with pytest.raises(ValueError, match="dt must be a positive"):
        ParticleSolver(model, scheme="rk4", dt=0.0)
    with pytest.raises(ValueError, match="fixed step"):
        ParticleSolver(model, scheme="euler")
    with pytest.raises(ValueError, match="strictly increasing"):
        solver.solve(x0, [0.0, 1.0, 0.5])
    with pytest.raises(ValueError, match=r"weights must have shape \(n,\) = \(5,\)"):
        solver.solve(x0, [0.0, 1.0], weights=np.full(4, 0.25))
    with pytest.raises(ValueError, match="d = 3"):
        solver.solve(uniform(5, 4, seed=0), [0.0, 1.0])
    with pytest.raises(ValueError, match="unknown time-stepping scheme"):
        ParticleSolver(model, scheme="rk45")
    with pytest.raises(ValueError, match="kind must be one of"):
        solver.layers(x0, 3, 0.1, kind="mid-ln")
    with pytest.raises(ValueError, match="h must be a positive"):
        solver.layers(x0, 3, -0.1)
    # normalize=True projects instead of rejecting
    traj = solver.solve(2 * x0, [0.0, 0.1], normalize=True)
    np.testing.assert_allclose(traj.positions[0], x0, atol=1e-15)


def test_rms_error_norm_follows_the_max_norm_run_to_its_bound(tmp_path):
    # With error_norm="rms" each step keeps the root mean square of the 3N scaled errors
    # below 1 instead of every one of them: never a shorter step than the max norm asks for,
    # and each coordinate within sqrt(3N) of the tolerance per step, so the two runs differ by
    # at most ~100 sqrt(3N) rtol (the factor 100 as in tests/test_timestepping.py).
    model = sp.Model(beta=16.0)
    x0 = sp.measures.Uniform(3).sample(200, seed=0)
    rtol = 1e-8
    runs = {norm: ParticleSolver(model, rtol=rtol, atol=rtol / 100, error_norm=norm,
                                 kernel="numba").solve(x0, [0.0, 1.0])
            for norm in ("max", "rms")}
    assert runs["rms"].stats["fevals"] < runs["max"].stats["fevals"]
    diff = np.abs(runs["rms"].positions[-1] - runs["max"].positions[-1]).max()
    assert diff < 100 * np.sqrt(3 * 200) * rtol
    assert runs["rms"].settings["error_norm"] == "rms"
    path = runs["rms"].save(tmp_path / "rms.nc")
    assert Trajectory.load(path).settings["error_norm"] == "rms"
    solver = ParticleSolver(model, error_norm="rms")
    assert "error_norm='rms'" in repr(solver)
    with pytest.raises(ValueError, match="unknown error norm 'l2'"):
        ParticleSolver(model, error_norm="l2")
    with pytest.raises(ValueError, match="error_norm only applies to an adaptive scheme"):
        ParticleSolver(model, scheme="rk4", dt=0.1, error_norm="rms")


def _default_scenario(beta, n, seed):
    from spherepde.app.config import DEFAULT
    from spherepde.app.scenario import build_initial, build_model

    return build_model(DEFAULT, beta), build_initial(DEFAULT).sample(n, seed=seed)


@pytest.mark.parametrize("kernel", ["numba", "harmonic"])
def test_one_solver_solves_in_two_threads_as_in_sequence(kernel):
    """A solve changes nothing in its solver or in the shared (cached) harmonic field: two
    solves of one solver object in two threads give, bit for bit, what two sequential solves
    give, and each trajectory carries its own kernel statistics."""
    from concurrent.futures import ThreadPoolExecutor

    model, _ = _default_scenario(16.0, 1, 0)
    clouds = [_default_scenario(16.0, 300, seed)[1] for seed in (1, 2)]
    times = np.linspace(0.0, 0.5, 3)
    solver = sp.ParticleSolver(model, kernel=kernel, rtol=1e-7, atol=1e-9)
    before = repr(solver)
    sequential = [solver.solve(x0, times) for x0 in clouds]
    with ThreadPoolExecutor(2) as pool:
        threaded = list(pool.map(lambda x0: solver.solve(x0, times), clouds))
    for a, b in zip(sequential, threaded, strict=True):
        np.testing.assert_array_equal(a.positions, b.positions)
        assert a.stats == b.stats
        assert a.stats["kernel_queries"] == 300 * a.stats["fevals"]
    assert repr(solver) == before


def test_same_inputs_same_trajectory_bit_for_bit():
    """kernel="auto" chooses by the sizes and the profile only: a rerun (a new solver) gives
    the same trajectory bit for bit and records the same kernel; a profile that moves the
    crossover changes the recorded choice."""
    from spherepde.interaction import AutoProfile

    model, x0 = _default_scenario(16.0, 400, 3)
    times = np.linspace(0.0, 1.0, 3)
    runs = [sp.ParticleSolver(model).solve(x0, times) for _ in range(2)]
    np.testing.assert_array_equal(runs[0].positions, runs[1].positions)
    assert runs[0].settings["kernel_schedule"] == runs[1].settings["kernel_schedule"]
    # N^2 = 1.6e5 pairs: the fused kernel by the default profile (harmonic from N ~ 1500)
    assert runs[0].settings["kernel_schedule"] == "0:numba"
    cheap = AutoProfile(harmonic_pairs_per_unit=1.0, harmonic_fixed_units=0.0)
    other = sp.ParticleSolver(model, profile=cheap).solve(x0, times)
    assert other.settings["kernel_schedule"] == "0:harmonic"
