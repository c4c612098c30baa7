"""The harmonic kernel (the attention field from the measure's moments) against the direct
fused kernel: random clouds on S^2 and S^1, SA and USA, B = c·rotation and a general B, beta
from 0.5 to 1000; its error bound; the moments of densities; the spectral solver's
right-hand side; particle trajectories."""
import math

import numpy as np
import pytest

import spherepde as sp
from spherepde.interaction.fused import attention_numba
from spherepde.interaction.harmonic import DEFAULT_TOL, FALLBACK_FACTOR, HarmonicField, PlannedField

TOL = DEFAULT_TOL
BETAS = [0.5, 16.0, 256.0, 1000.0]


def rotation(d, seed=0):
    if d == 2:
        a = 0.9
        return np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
    from spherepde.sphere import rotation_about_axis

    return rotation_about_axis([1.0, 1.0, 1.0], 0.9)


def matrices(d, kind):
    """The default scenario's B = O, V = S O, and a general B = diag(1, 0.8, 0.6)·O."""
    O = rotation(d)
    S = np.diag([1.0, 0.4, 0.0][:d])
    B = O if kind == "rotation" else np.diag([1.0, 0.8, 0.6][:d]) @ O
    return B, S @ O


def cloud(d, n, seed):
    rng = np.random.default_rng(seed)
    y = rng.standard_normal((n, d))
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    w = rng.random(n)
    return y, w / w.sum()


@pytest.mark.parametrize("d", [3, 2])
@pytest.mark.parametrize("kind", ["rotation", "general"])
@pytest.mark.parametrize("normalized", [True, False])
@pytest.mark.parametrize("beta", BETAS)
def test_matches_direct_kernel(d, kind, normalized, beta):
    B, V = matrices(d, kind)
    y, w = cloud(d, 3000, seed=d)
    q_off, _ = cloud(d, 300, seed=10 + d)  # queries off the atoms too (cell faces, grids)
    x = np.concatenate([y[:700], q_off])
    if not normalized and beta * np.linalg.norm(B, 2) > 700:
        # USA at beta |B| = 1000 is e^1000: both kernels refuse it ...
        field = HarmonicField(B, V, beta, normalized)
        with pytest.raises(FloatingPointError, match="beyond float64"):
            field.attention_of_points(x, y, w)
        with pytest.raises(FloatingPointError, match="beyond float64"):
            attention_numba(x, y @ B.T, y @ V.T, w, beta, normalized)
        # ... and what is representable, |B| = 0.6 (e^600), must agree
        B = 0.6 * B
    field = HarmonicField(B, V, beta, normalized)
    ref = attention_numba(x, y @ B.T, y @ V.T, w, beta, normalized)
    mom = field.moments(y, w)
    att, bound = field.attention(x, mom, return_bound=True)
    err = np.abs(att - ref).max(axis=1) / np.abs(ref).max()
    # the per-query bound holds wherever it is finite (G > 0)
    assert np.all(err[np.isfinite(bound)] <= bound[np.isfinite(bound)])
    # the target: max error <= FALLBACK_FACTOR tol relative to the output's size, since the
    # queries whose bound exceeds it are computed directly
    out, stats = field.evaluate(x, y, w)
    assert np.abs(out - ref).max() <= FALLBACK_FACTOR * TOL * np.abs(ref).max()
    # the fast path does the work: at most 5% of the queries need the direct kernel (20% for
    # a general B, whose bound also carries the Chebyshev coefficients' 1e-13 accuracy floor)
    share = 0.05 if kind == "rotation" else 0.2
    assert stats["fallback"] <= share * stats["queries"] and stats["queries"] == len(x)


@pytest.mark.parametrize("kind", ["rotation", "general"])
@pytest.mark.parametrize("normalized", [True, False])
@pytest.mark.parametrize("beta", [16.0, 256.0])
def test_planned_field_keeps_the_error_model(kind, normalized, beta):
    B, V = matrices(3, kind)
    y, w = cloud(3, 2000, seed=3)
    x = np.concatenate([y[:300], cloud(3, 300, seed=13)[0]])
    field = HarmonicField(B, V, beta, normalized)
    plan = PlannedField(field, x, nodes=y)
    mom, ref_mom = plan.moments(w), field.moments(y, w)
    # both are the sums sum_j w_j conj Y_lm(y_j), each to ducc0's eps times |w| max|Y_lm|
    # (|Y_lm| <= sqrt((2L+1)/4pi)), so they differ by at most twice that
    ymax = math.sqrt((2 * field.degree + 1) / (4 * math.pi))
    assert np.abs(mom.coefficients - ref_mom.coefficients).max() <= \
        2 * field.nufft_eps * w.sum() * ymax
    ref = attention_numba(x, y @ B.T, y @ V.T, w, beta, normalized)
    att, bound = field.attention(x, mom, return_bound=True, plan=plan)
    err = np.abs(att - ref).max(axis=1) / np.abs(ref).max()
    # the unplanned path's per-query bound holds for the planned one (its only approximation
    # is a NUFFT at the same eps)
    assert np.all(err[np.isfinite(bound)] <= bound[np.isfinite(bound)])
    assert np.isfinite(bound).mean() > 0.5  # the check is not vacuous
    with pytest.raises(ValueError, match="own 600 queries"):
        field.attention(x[:5], mom, plan=plan)


def test_degree_is_the_first_that_meets_the_multiplier_tail():
    B, V = matrices(3, "rotation")
    for beta in (16.0, 1000.0):
        field = HarmonicField(B, V, beta)
        L = field.degree
        E, Gbar = field._tail(beta, L)
        E_prev, _ = field._tail(beta, L - 1)
        assert E <= TOL * Gbar < E_prev
        # the multipliers fall like e^{-l^2/(2 kappa)}: L^2/(2 kappa) is about log(1/tol)
        assert 0.8 < L**2 / (2 * beta) / math.log(1 / TOL) < 1.5
        assert f"L={L}" in repr(field)


@pytest.mark.parametrize("d", [3, 2])
def test_error_follows_tol(d):
    """The truncation is what tol controls: the measured error falls with tol and stays
    below tol times the ratio of the mean G to the smallest G at the queries."""
    B, V = matrices(d, "rotation")
    y, w = cloud(d, 2000, seed=5)
    ref = attention_numba(y, y @ B.T, y @ V.T, w, 64.0, True)
    errs = []
    for tol in (1e-4, 1e-6, 1e-8):
        field = HarmonicField(B, V, 64.0, tol=tol)
        att, bound = field.attention(y, field.moments(y, w), return_bound=True)
        errs.append(np.abs(att - ref).max() / np.abs(ref).max())
        assert errs[-1] <= bound.max()
    assert errs[0] > 30 * errs[1] > 900 * errs[2]


def test_moments_of_a_density_from_quadrature_and_from_coefficients():
    """Point masses at Gauss nodes weighted by quadrature weight × density have the
    density's coefficients up to the degree the rule integrates exactly."""
    from spherepde.sphere import GaussGrid
    from spherepde.transforms.sht import Ducc0Backend

    L = 24
    sht = Ducc0Backend(L, 40, 80)
    grid = GaussGrid(40, 80)
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(sht.nlm) + 1j * rng.standard_normal(sht.nlm)) * 0.01
    a[sht.m == 0] = a[sht.m == 0].real
    a[0] = 1 / math.sqrt(4 * math.pi)
    rho = sht.synthesis(a)
    field = HarmonicField(np.eye(3), np.eye(3), 16.0)
    assert field.degree == 36  # > L: zero-padding is exercised
    m_pts = field.moments(grid.points.reshape(-1, 3), (grid.weights * rho).reshape(-1))
    m_coef = field.moments_of_coefficients(a)
    # the products have degree <= L + 36 = 60: Gauss with 40 latitudes is exact to degree 79,
    # 80 longitudes resolve |m| <= 79: exact moments
    assert np.abs(m_pts.coefficients - m_coef.coefficients).max() <= 1e-12
    # the same field from the cell-quadrature entry point (one "cell" per latitude row)
    nodes = grid.points
    cell_w = grid.weights * rho
    masses = cell_w.sum(axis=1)
    m_cells = field.moments_of_cells(nodes, cell_w / masses[:, None], masses)
    assert np.abs(m_cells.coefficients - m_pts.coefficients).max() <= 1e-13
    with pytest.raises(ValueError, match="sum to 1"):
        field.moments_of_cells(nodes, cell_w, masses)


def test_spectral_rhs_through_the_harmonic_field():
    """The spectral solver's right-hand side with its attention evaluated by the harmonic
    field at the grid points equals its Funk–Hecke right-hand side to round-off."""
    import spherepde as sp
    from spherepde.sphere import rotation_about_axis

    O = rotation_about_axis([1.0, 1.0, 1.0], 0.9)
    model = sp.Model(K=O, V=np.diag([1.0, 0.4, 0.0]) @ O, beta=9.0)
    solver = sp.SpectralSolver(model, lmax=24)
    rho_lm = solver.project(sp.measures.VonMisesFisher([0.4, 0.3, 1.0], 1.5))
    ref = solver.rhs(0.0, rho_lm)
    field = HarmonicField.from_model(model)
    pts = solver.grid.points
    att = field.attention(pts.reshape(-1, 3), field.moments_of_coefficients(rho_lm))
    F = solver.sht.synthesis(rho_lm)[..., None] * att.reshape(pts.shape)
    _, e_theta, e_phi = solver.grid.frame
    Ft = np.sum(F * e_theta, axis=-1)
    Fp = np.sum(F * e_phi, axis=-1)
    rhs = -solver.sht.divergence(Ft, Fp) - solver._nu * rho_lm
    # round-off of two transforms at L = 24 (and ducc0's 2e-13 non-equispaced accuracy)
    assert np.abs(rhs - ref).max() <= 1e-11 * np.abs(ref).max()


def test_kernel_contract_and_errors():
    from spherepde.interaction import KERNELS, HarmonicOptions

    B, V = matrices(3, "rotation")
    model = sp.Model(K=2.0 * B, V=V, beta=4.0)
    y, w = cloud(3, 500, seed=2)
    out, stats = KERNELS.get("harmonic").bind(model, y, w, HarmonicOptions(tol=1e-10))(y)
    ref = attention_numba(y, y @ model.B.T, y @ V.T, w, 4.0, True)
    assert np.abs(out - ref).max() <= FALLBACK_FACTOR * 1e-10 * np.abs(ref).max()
    assert stats["queries"] == 500
    with pytest.raises(TypeError, match="HarmonicOptions"):
        KERNELS.get("harmonic").bind(model, y, w, {"tol": 1e-10})
    with pytest.raises(MemoryError, match=r"L = \d+ for beta = 1e\+06"):
        HarmonicField(B, V, 1e6, max_memory=1e8)
    with pytest.raises(ValueError, match="S\\^1 and S\\^2"):
        HarmonicField(np.eye(4), np.eye(4), 1.0)
    with pytest.raises(ValueError, match="finite beta"):
        HarmonicField(B, V, np.inf)


def test_tuning_sets_the_chebyshev_cap_and_the_memory_model():
    from spherepde.interaction.options import HarmonicTuning

    B, V = matrices(3, "general")
    field = HarmonicField(B, V, 40.0)
    assert field.n_terms > 8  # the expansion in kappa needs more than the first 8 terms here
    capped = HarmonicField(B, V, 40.0, tuning=HarmonicTuning(max_chebyshev_terms=8))
    assert capped.n_terms <= 8
    # the memory model: need = bytes_per_degree2 (L + 1)^2 against max_memory; a budget 1.5
    # times the default estimate passes, and doubling the bytes per degree^2 exceeds it
    per_degree2 = HarmonicTuning().bytes_per_degree2
    budget = 1.5 * per_degree2 * (field.degree + 1) ** 2
    assert HarmonicField(B, V, 40.0, max_memory=budget).degree == field.degree
    with pytest.raises(MemoryError, match="GiB allowed"):
        HarmonicField(B, V, 40.0, max_memory=budget,
                      tuning=HarmonicTuning(bytes_per_degree2=2 * per_degree2))


def test_a_capped_kappa_expansion_still_bounds_its_error():
    from spherepde.interaction.options import HarmonicTuning

    # 8 Chebyshev terms in kappa do not converge at beta = 40 (the default needs more): the
    # field is then off by ~4e-8 of |V|, and the per-query bound must still cover it, now
    # through the interpolant's measured defect rather than the unknown terms beyond the cap
    B, V = matrices(3, "general")
    capped = HarmonicField(B, V, 40.0, tuning=HarmonicTuning(max_chebyshev_terms=8))
    y, w = cloud(3, 1500, seed=4)
    x, _ = cloud(3, 200, seed=6)
    att, bound = capped.attention(x, capped.moments(y, w), return_bound=True)
    logits = 40.0 * (x @ B @ y.T)
    p = np.exp(logits - logits.max(axis=1, keepdims=True)) * w
    ref = (p / p.sum(axis=1, keepdims=True)) @ (y @ V.T)
    err = np.abs(att - ref).max(axis=1) / np.linalg.norm(V, 2)
    assert err.max() > 1e-10  # the cap really costs accuracy here
    assert np.all(err <= bound)


def test_model_velocity_with_harmonic_kernel_for_a_general_B():
    import spherepde as sp

    B, V = matrices(3, "general")
    model = sp.Model(K=B, V=V, beta=40.0)
    y, w = cloud(3, 1500, seed=4)
    x, _ = cloud(3, 200, seed=6)
    ref = model.velocity(x, y, w, kernel="numba")
    out = model.velocity(x, y, w, kernel="harmonic")
    assert np.abs(out - ref).max() <= FALLBACK_FACTOR * TOL * np.abs(ref).max()


def test_auto_takes_harmonic_above_the_measured_crossover():
    from spherepde.interaction import KernelProblem, resolve_kernel

    assert resolve_kernel("auto", KernelProblem(20000, 20000, 3, 256.0)) == "harmonic"
    assert resolve_kernel("auto", KernelProblem(20000, 20000, 4, 256.0)) == "numba"
    # without the model's kappa (bare keys and values) auto never guesses harmonic
    assert resolve_kernel("auto", KernelProblem(20000, 20000)) == "numba"
    # the crossover grows with kappa (L^2 log L of the transforms)
    first = [next(n for n in range(64, 10**5, 64)
                  if resolve_kernel("auto", KernelProblem(n, n, 3, k)) == "harmonic")
             for k in (16.0, 256.0)]
    assert first[0] < first[1]


def test_particle_trajectories_match_the_direct_kernel():
    """ParticleSolver(kernel="harmonic") follows the numba trajectories over t in [0, 2] to
    the solver's accuracy (the fields differ by ~1e-13; dopri5 at rtol 1e-9 is accurate to
    ~1e-8 in the positions, tests/test_timestepping.py)."""
    import spherepde as sp
    from spherepde.app.config import DEFAULT
    from spherepde.app.scenario import build_initial, build_model

    model = build_model(DEFAULT, 16.0)
    x0 = build_initial(DEFAULT).sample(400, seed=2)
    times = np.linspace(0.0, 2.0, 5)
    solver = sp.ParticleSolver(model, kernel="harmonic")
    assert solver.harmonic_degree == 36 and "L=36" in repr(solver)
    traj_h = solver.solve(x0, times)
    traj_n = sp.ParticleSolver(model, kernel="numba").solve(x0, times)
    assert np.abs(traj_h.positions - traj_n.positions).max() <= 1e-7


def test_fourier_state_through_the_harmonic_field():
    """On S^1 the moments of a density given by its Fourier coefficients (the Fourier
    solver's state) give the Bessel-multiplier field of funk_hecke.attention_s1 on its grid."""
    from spherepde.interaction.funk_hecke import attention_s1

    O, V = matrices(2, "rotation")
    K, n = 40, 128
    k = np.arange(K + 1)
    rho = np.exp(-0.1 * k) * np.exp(1j * 0.7 * k) / (2 * np.pi)  # a smooth positive density
    for normalized in (True, False):
        ref, _, _ = attention_s1(rho, n, 1.0, O, V, 30.0, normalized)
        field = HarmonicField(O, V, 30.0, normalized)
        theta = 2 * np.pi * np.arange(n) / n
        x = np.stack([np.cos(theta), np.sin(theta)], axis=-1)
        out = field.attention(x, field.moments_of_coefficients(rho))
        # both are exact sums of the same truncated series: round-off
        assert np.abs(out - ref).max() <= 1e-12 * np.abs(ref).max()


def test_particle_solver_harmonic_tol():
    """ParticleSolver(kernel="harmonic", harmonic_tol=tol) truncates at the field's degree for
    that tol, and its SA velocity is within 100 tol |V|_2 of the direct kernel's (the
    module's error model, as at the default tol)."""
    import spherepde as sp
    from spherepde.app.config import DEFAULT
    from spherepde.app.scenario import build_initial, build_model

    model = build_model(DEFAULT, 256.0)
    x = build_initial(DEFAULT).sample(2000, seed=3)
    w = np.full(2000, 1.0 / 2000)
    v_ref = sp.ParticleSolver(model, kernel="numba").velocity(x, w)
    default = sp.ParticleSolver(model, kernel="harmonic").harmonic_degree
    for tol in (1e-6, 1e-9):
        solver = sp.ParticleSolver(model, kernel="harmonic", harmonic_tol=tol)
        assert solver.harmonic_degree == HarmonicField(model.B, model.V, 256.0, tol=tol).degree
        assert solver.harmonic_degree < default and f"harmonic_tol={tol:g}" in repr(solver)
        err = np.abs(solver.velocity(x, w) - v_ref).max()
        assert err <= 100 * tol * np.linalg.norm(model.V, 2)
    with pytest.raises(ValueError, match="harmonic_tol applies to kernel='harmonic'"):
        sp.ParticleSolver(model, kernel="numba", harmonic_tol=1e-6)
    with pytest.raises(ValueError, match="tol must lie in"):
        sp.ParticleSolver(model, kernel="harmonic", harmonic_tol=1e-20)


def test_auto_keeps_the_kernel_its_timings_show_cheaper():
    """kernel="auto" during a run (particles._KernelChooser): with a clock that makes the
    harmonic kernel cost 1 and numba 3 for the first 40 evaluations and then the reverse
    (tokens concentrating), it starts with harmonic, switches to numba once harmonic's time
    exceeds numba's last one by the margin, and later trials of harmonic (at doubling
    intervals) do not switch back. Both kernels compute the same field."""
    from spherepde.app.config import DEFAULT
    from spherepde.app.scenario import build_initial, build_model
    from spherepde.particles import _KernelChooser

    model = build_model(DEFAULT, 16.0)
    x = build_initial(DEFAULT).sample(300, seed=1)
    w = np.full(300, 1.0 / 300)
    state = {"t": 0.0, "calls": 0, "name": None}

    def cost(name):
        late = state["calls"] > 40
        return (3.0 if late else 1.0) if name == "harmonic" else (1.0 if late else 3.0)

    def clock():  # read before and after each evaluation: the second read adds its cost
        state["end"] = not state.get("end", False)
        if not state["end"]:
            state["t"] += cost(state["name"])
        return state["t"]

    chooser = _KernelChooser(model, "harmonic", clock=clock)
    ref = model.attention(x, x, w, kernel="numba")
    used = []
    for _ in range(200):
        name = chooser._other(chooser.current) if chooser.until_probe <= 0 else chooser.current
        used.append(name)
        state["name"] = name
        out, _ = chooser(x, w)
        state["calls"] += 1
        assert np.abs(out - ref).max() <= FALLBACK_FACTOR * TOL * np.abs(ref).max()
    # a trial of numba at evaluation 16 (3 against 1) keeps harmonic and doubles the interval
    assert used[:16] == ["harmonic"] * 16 and used[16] == "numba" and used[17] == "harmonic"
    # after evaluation 40 harmonic costs 3, not above 1.25 x numba's last (early) time 3, so
    # it stays until the next trial (16 + 1 + 32 = 49) shows numba at 1: the switch
    assert set(used[17:49]) == {"harmonic"} and used[49] == "numba"
    # then harmonic is tried after 16, 32, 64 more evaluations, and never wins again
    assert [i for i in range(50, 200) if used[i] == "harmonic"] == [66, 99, 164]
    st = chooser.stats()
    assert st["evaluations_harmonic"] + st["evaluations_numba"] == 200
    assert st["kernel_switches"] == 1
    # the schedule records the kernel of every evaluation, run-length encoded
    assert chooser.schedule[:4] == [(0, "harmonic"), (16, "numba"), (17, "harmonic"),
                                    (49, "numba")]


def test_auto_times_the_fused_kernel_on_a_sample_of_a_large_cloud(monkeypatch):
    """Beyond SAMPLE_QUERIES tokens a trial of the fused kernel runs it on a strided sample of
    the queries and scales its time by N/sample, while that evaluation's output comes from
    the harmonic kernel: with a clock charging the fused kernel per query (3 s per N queries
    first, 0.5 s later) and the harmonic kernel 1 s a call, the trial at evaluation 16 sees
    an estimate of 3 and keeps harmonic, the next one (after 32 more) sees 0.5 and switches;
    only then does the fused kernel run on all N queries."""
    from spherepde.app.config import DEFAULT
    from spherepde.app.scenario import build_initial, build_model
    from spherepde.particles import _KernelChooser

    model = build_model(DEFAULT, 16.0)
    n = 1200  # > SAMPLE_QUERIES = 512: a sample of every 3rd query, 400 of them
    x = build_initial(DEFAULT).sample(n, seed=3)
    w = np.full(n, 1.0 / n)
    clock = {"t": 0.0, "per_token": 3.0 / n}
    queries = []
    bind, fused = model.bind, model.attention

    def timed_bind(points, weights, name, *args, **kw):
        kernel_name, evaluate = bind(points, weights, name, *args, **kw)

        def timed(q):
            if kernel_name == "harmonic":
                clock["t"] += 1.0
            else:
                clock["t"] += clock["per_token"] * q.shape[0]
                queries.append(q.shape[0])
            return evaluate(q)
        return kernel_name, timed

    def timed_fused(q, points, weights, kernel):  # the sampled trial's call
        clock["t"] += clock["per_token"] * q.shape[0]
        queries.append(q.shape[0])
        return bind(points, weights, kernel, n_queries=q.shape[0])[1](q)[0]

    monkeypatch.setattr(model, "bind", timed_bind)
    monkeypatch.setattr(model, "attention", timed_fused)
    chooser = _KernelChooser(model, "harmonic", clock=lambda: clock["t"])
    ref = fused(x, x, w, kernel="numba")
    queries.clear()
    for i in range(60):
        if i == 20:
            clock["per_token"] = 0.5 / n
        out, _ = chooser(x, w)
        assert np.abs(out - ref).max() <= FALLBACK_FACTOR * TOL * np.abs(ref).max()
        if i < 49:
            assert chooser.current == "harmonic"
    assert queries[:2] == [400, 400]  # the trials at evaluations 16 and 49 are sampled
    assert chooser.last["numba"] == pytest.approx(0.5)
    assert chooser.current == "numba" and set(queries[2:]) == {n}  # then it runs in full
    st = chooser.stats()
    assert st["sampled_numba_trials"] == 2 and st["kernel_switches"] == 1
    assert st["evaluations_harmonic"] == 50 and st["evaluations_numba"] == 10


def test_timed_auto_run_matches_numba_and_its_record_replays_it():
    """A ParticleSolver(kernel="auto", adaptive_kernel=True) run where harmonic applies
    counts how it split the evaluations between the two kernels, follows the numba
    trajectory to the solver's accuracy (as test_particle_trajectories_match_the_direct_kernel),
    and records its kernel schedule; a rerun with that schedule gives the same trajectory bit
    for bit, however the timings fall this time."""
    from spherepde.app.config import DEFAULT
    from spherepde.app.scenario import build_initial, build_model

    model = build_model(DEFAULT, 16.0)
    x0 = build_initial(DEFAULT).sample(400, seed=2)
    times = np.linspace(0.0, 2.0, 5)
    traj = sp.ParticleSolver(model, kernel="auto", adaptive_kernel=True).solve(x0, times)
    st = traj.stats
    assert st["evaluations_harmonic"] + st["evaluations_numba"] == st["fevals"]
    ref = sp.ParticleSolver(model, kernel="numba").solve(x0, times)
    assert np.abs(traj.positions - ref.positions).max() <= 1e-7
    schedule = traj.settings["kernel_schedule"]
    again = sp.ParticleSolver(model, kernel_schedule=schedule).solve(x0, times)
    np.testing.assert_array_equal(again.positions, traj.positions)
    assert again.settings["kernel_schedule"] == schedule


def half_uniform_half_cap(n, seed=0):
    """Half the mass uniform, half in a cap of angular width 0.01: the cap's G is ~10^3 times
    the uniform level, and the transforms' error floor (relative to the field's largest
    value) then exceeds 1e-10 of the G that the uniform half's queries see."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((n, 3))
    cap = np.array([0.0, 0.0, 1.0]) + 0.01 * rng.standard_normal((n, 3))
    y = np.concatenate([u, cap])
    return y / np.linalg.norm(y, axis=1, keepdims=True), np.full(2 * n, 0.5 / n)


@pytest.mark.parametrize("normalized", [True, False])
def test_velocity_tol_decides_the_fallback_and_every_row_meets_it(normalized):
    """attention_of_points(velocity_tol=...): on a concentrated measure nearly every query
    fails the default 100 tol (the bound is the transforms' floor over the little mass the
    query sees), while at 1e-8 almost none does; every row is within velocity_tol of the
    direct kernel (SA: relative to |V|_2; USA: to the query's own scale)."""
    from spherepde.interaction.fused import log_partition_numba

    O, V = matrices(3, "rotation")
    B = O if normalized else 0.6 * O  # USA: e^600 stays in float64
    y, w = half_uniform_half_cap(4000)
    ref = attention_numba(y, y @ B.T, y @ V.T, w, 1000.0, normalized)
    scale = np.linalg.norm(V, 2) * (1.0 if normalized else
                                    np.exp(log_partition_numba(y, y @ B.T, w, 1000.0)))
    fallback = {}
    for vt in (None, 1e-8, 1e-6):
        field = HarmonicField(B, V, 1000.0, normalized)
        out, stats = field.evaluate(y, y, w, velocity_tol=vt)
        err = (np.abs(out - ref).max(axis=1) / scale).max()
        assert err <= (FALLBACK_FACTOR * TOL if vt is None else vt)
        fallback[vt] = stats["fallback"]
    assert fallback[None] >= 0.9 * y.shape[0]
    assert fallback[1e-8] <= 0.02 * y.shape[0]
    assert fallback[1e-6] <= fallback[1e-8]
    for bad in (0.0, 1.0, -1e-6):
        with pytest.raises(ValueError, match=r"velocity_tol must lie in \(0, 1\)"):
            field.attention_of_points(y, y, w, velocity_tol=bad)


def test_far_field_runs_at_velocity_tol():
    """Queries that fail even a loose velocity_tol (a late two-cluster cloud: they look away
    from the mass) go to the far field at that tolerance, and stay within it."""
    from spherepde.sphere import rotation_about_axis

    rng = np.random.default_rng(11)
    sign = np.where(rng.random(4000) < 0.6, 1.0, -1.0)
    y = sign[:, None] * np.eye(3)[0] + 0.01 * rng.standard_normal((4000, 3))
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    w = np.full(4000, 1.0 / 4000)
    O = rotation_about_axis([1.0, 1.0, 1.0], 0.9)
    V = np.diag([1.0, 0.4, 0.0]) @ O
    ref = attention_numba(y, y @ O.T, y @ V.T, w, 1000.0, True)
    for vt in (1e-6, 1e-3):
        field = HarmonicField(O, V, 1000.0, True)
        out, stats = field.evaluate(y, y, w, velocity_tol=vt)
        assert stats["fallback"] > 0.9 * y.shape[0]
        err = np.abs(out - ref).max() / np.linalg.norm(V, 2)
        assert err <= vt
    # the looser far field did less work for the same queries
    _, strict = HarmonicField(O, V, 1000.0, True).evaluate(y, y, w)
    assert stats["fallback_work"] < strict["fallback_work"]


def test_particle_solver_velocity_tol_follows_rtol():
    """ParticleSolver's velocity_tol: rtol/100 for an adaptive run, never below
    100 harmonic_tol (so the defaults keep 1e-10), given explicitly, recorded and shown; the
    field gets it, so a run at rtol 1e-5 does not sum the uniform half's tokens exactly; its
    velocities stay within it of the direct kernel."""
    from spherepde.particles import default_velocity_tol

    O, V = matrices(3, "rotation")
    model = sp.Model(Q=np.eye(3), K=O, V=V, beta=1000.0)
    assert np.allclose(model.B, O)
    assert default_velocity_tol(1e-5) == pytest.approx(1e-7)
    assert default_velocity_tol(1e-9) == FALLBACK_FACTOR * TOL
    assert default_velocity_tol(1e-9, harmonic_tol=1e-6) == pytest.approx(1e-4)
    assert sp.ParticleSolver(model).velocity_tol == FALLBACK_FACTOR * TOL
    assert sp.ParticleSolver(model, scheme="rk4", dt=0.1).velocity_tol == FALLBACK_FACTOR * TOL
    loose = sp.ParticleSolver(model, kernel="harmonic", rtol=1e-5, atol=1e-7)
    assert loose.velocity_tol == pytest.approx(1e-7) and "velocity_tol=1e-07" in repr(loose)
    assert loose._settings()["velocity_tol"] == pytest.approx(1e-7)
    given = sp.ParticleSolver(model, kernel="harmonic", rtol=1e-5, velocity_tol=1e-9)
    assert given.velocity_tol == 1e-9
    assert "velocity_tol" not in sp.ParticleSolver(model, kernel="numba")._settings()

    y, w = half_uniform_half_cap(2000, seed=1)
    ref = sp.ParticleSolver(model, kernel="numba").velocity(y, w)
    fallback = []
    for solver in (loose, sp.ParticleSolver(model, kernel="harmonic")):
        assert solver.harmonic_options.velocity_tol == solver.velocity_tol
        v = solver.velocity(y, w)
        assert np.abs(v - ref).max() <= solver.velocity_tol * np.linalg.norm(V, 2)
        _, stats = model.bind(y, w, "harmonic", solver.harmonic_options)[1](y)
        fallback.append(stats["fallback"])
    assert fallback[0] <= 0.02 * y.shape[0] and fallback[1] >= 0.9 * y.shape[0]

    with pytest.raises(ValueError, match="velocity_tol applies to kernel='harmonic'"):
        sp.ParticleSolver(model, kernel="numba", velocity_tol=1e-6)
    with pytest.raises(ValueError, match=r"velocity_tol must lie in \(0, 1\)"):
        sp.ParticleSolver(model, velocity_tol=0.0)
