"""ZonalSolver: zonal densities on S^{d-1} in any d (docs/theory.md §6).

Proven by: the Bessel averages against Gauss-Jacobi quadrature; the field against the
particle kernels on a point cloud that integrates the latitudes exactly; the zero-temperature
closed form (docs/theory.md §3.3) with its measured order in d = 3, 16, 512; the growth rates
of docs/theory.md §3.5 in d dimensions; the S^2 solvers in d = 3; particles in d = 8 and 64.
"""
import numpy as np
import pytest
from scipy import linalg, special

import spherepde as sp
from spherepde.density.zonal import log_cell_measures
from spherepde.interaction.zonal import (
    ChebyshevZonalField,
    ZonalField,
    chebyshev_nodes,
    lagrange_stencils,
    log_mean_exp,
    mean_ratio,
)
from spherepde.sphere import log_sphere_area


class LogDensity:
    """A zonal density given by its log (the densities of d = 512 leave float64)."""

    def __init__(self, d, log_rho):
        self.d, self._f = d, log_rho

    def log_density(self, x):
        return self._f(np.asarray(x))


def uniform(d):
    return LogDensity(d, lambda x: np.full(x.shape[:-1], -log_sphere_area(d)))


def vmf_log(d, kappa, axis=0):
    """log of the vMF density about e_axis: C_d(kappa) e^{kappa <x, e>} in log form."""
    nu = 0.5 * d - 1
    logc = nu * np.log(kappa) - 0.5 * d * np.log(2 * np.pi) - np.log(special.ive(nu, kappa)) - kappa
    return LogDensity(d, lambda x: logc + kappa * x[..., axis])


def axial(d, c1, c2):
    return np.diag([c1] + [c2] * (d - 1))


# ---------------------------------------------------------------- the Bessel averages
@pytest.mark.parametrize("nu", [0.0, 2.5, 30.5, 254.5])
def test_log_mean_exp_and_ratio_against_gauss_jacobi(nu):
    # the mean of e^{z t}, t = <u, u'>, u' uniform on S^{2nu+1}: t has density ~ (1-t^2)^(nu-1/2)
    t, w = special.roots_jacobi(400, nu - 0.5, nu - 0.5)
    w = w / w.sum()
    z = np.array([0.0, 1e-8, 0.3, 5.0, 40.0, 300.0])  # includes ive(254.5, 5) = 0 (underflow)
    ref_log = np.array([zz * t.max() + np.log(np.sum(w * np.exp(zz * (t - t.max())))) for zz in z])
    ref_ratio = np.array([np.sum(w * t * np.exp(zz * t - zz)) / np.sum(w * np.exp(zz * t - zz))
                          for zz in z[2:]])
    # 400-node Gauss-Jacobi is exact to round-off for these z; 1e-13 relative leaves 10^3 ulps
    assert np.allclose(log_mean_exp(nu, z), ref_log, rtol=1e-13, atol=1e-15)
    assert np.allclose(mean_ratio(nu, z[2:]), ref_ratio, rtol=1e-12)
    # evenness of m0 and oddness of the ratio in z (b2 < 0)
    assert np.array_equal(log_mean_exp(nu, -z), log_mean_exp(nu, z))
    assert np.array_equal(mean_ratio(nu, -z), -mean_ratio(nu, z))


def test_d2_averages_are_cosh_and_tanh():
    # S^0 = {±1}: the mean of e^{±z} is cosh z, the weighted mean of ±1 is tanh z
    z = np.array([0.0, 0.3, 5.0, 30.0])
    assert np.allclose(log_mean_exp(-0.5, z), np.log(np.cosh(z)), rtol=1e-14, atol=1e-15)
    assert np.allclose(mean_ratio(-0.5, z), np.tanh(z), rtol=1e-14, atol=1e-16)


# ---------------------------------------------------------------- the field
def latitude_cloud(theta, masses, d, k=40):
    """Points integrating the (d-2)-sphere of each latitude exactly for the field at
    x = cos(phi) e1 + sin(phi) e2: t = <u, u'> at Gauss-Jacobi nodes, ± the rest along e3
    (the component along e3 then cancels)."""
    t, g = special.roots_jacobi(k, 0.5 * (d - 4), 0.5 * (d - 4))
    g = g / g.sum()
    s = np.sqrt(1 - t ** 2)
    pts = np.zeros((theta.size, k, 2, d))
    pts[..., 0] = np.cos(theta)[:, None, None]
    pts[..., 1] = (np.sin(theta)[:, None] * t[None, :])[..., None]
    pts[..., 2] = (np.sin(theta)[:, None] * s[None, :])[..., None] * np.array([1.0, -1.0])
    w = (masses[:, None, None] * g[None, :, None] / 2) * np.ones((1, 1, 2))
    return pts.reshape(-1, d), w.reshape(-1)


@pytest.mark.parametrize("d", [8, 64])
@pytest.mark.parametrize("beta,normalized", [(3.0, True), (20.0, True), (3.0, False)])
def test_field_against_particle_sums(d, beta, normalized):
    model = sp.Model(Q=axial(d, 1.3, 0.8), V=axial(d, 0.7, -0.4), beta=beta, d=d,
                     normalized=normalized)
    theta = (np.arange(60) + 0.5) * np.pi / 60
    masses = np.exp(2 * np.cos(theta)) * np.sin(theta) ** 3  # any masses: a zonal measure
    masses /= masses.sum()
    phi = np.linspace(0.05, np.pi - 0.05, 23)
    e = np.eye(d)
    speed = ZonalField(model, e[0], phi, theta).speed(masses)
    pts, w = latitude_cloud(theta, masses, d)
    x = np.cos(phi)[:, None] * e[0] + np.sin(phi)[:, None] * e[1]
    v = model.velocity(x, pts, w, kernel="numpy")
    e_theta = -np.sin(phi)[:, None] * e[0] + np.cos(phi)[:, None] * e[1]
    along = np.sum(v * e_theta, axis=1)
    scale = np.abs(along).max()
    # same measure both ways: only round-off of sums over 4800 atoms remains (1e-12 ~ 10^4 ulps)
    assert np.allclose(speed, along, rtol=0, atol=1e-12 * scale)
    # only the theta-component survives
    assert np.abs(v - along[:, None] * e_theta).max() <= 1e-12 * scale


# ---------------------------------------------------------------- zero temperature
def exact_cell_masses(model, d, log_rho0, t, edges):
    """Cell masses of the pushed density rho_t(y) = rho0(My/|My|) e^{-t tr A}/|My|^d,
    M = e^{-tA} (docs/theory.md §3.3, B = I), by Gauss-Legendre in theta, in log form."""
    _, th, lw = log_cell_measures(edges, d, order=12)
    e = np.eye(d)
    y = np.cos(th)[..., None] * e[0] + np.sin(th)[..., None] * e[1]
    My = y @ linalg.expm(-t * model.A).T
    r = np.linalg.norm(My, axis=-1)
    lrho = log_rho0(My / r[..., None]) - t * np.trace(model.A) - d * np.log(r)
    return np.exp(special.logsumexp(lrho + lw, axis=1))


@pytest.mark.parametrize("d", [3, 16, 512])
def test_zero_temperature_order(d):
    model = sp.Model(V=axial(d, 1.0, 0.0), beta=np.inf, d=d)
    rho0 = vmf_log(d, 1.0) if d < 512 else uniform(d)
    ns, errs = [100, 200, 400, 800], []
    for n in ns:
        sol = sp.ZonalSolver(model, n).solve(rho0, [0.0, 2.0])
        m = sol.cell_masses(1)
        # masses: >= 0 without clipping, and conserved to round-off (n ulps)
        assert m.min() >= 0 and abs(m.sum() - 1) < 1e-14 * n
        errs.append(np.abs(m - exact_cell_masses(model, d, rho0.log_density, 2.0,
                                                 sol.theta_edges)).sum())
    order = -np.polyfit(np.log(ns), np.log(errs), 1)[0]
    # MUSCL with the MC limiter on a smooth solution: second order; measured 1.81-2.10 (the
    # limiter clips at the extrema), so 1.75 separates it from a first-order scheme
    assert order > 1.75, (order, errs)
    assert errs[-1] < 1e-3  # measured 1.1e-4, 5.8e-5, 5.6e-4 at n = 800


def test_zero_temperature_matches_library_closed_form():
    # the library's pushed density (sp.exact) on S^15, integrated over each cell
    d = 16
    model = sp.Model(V=axial(d, 1.0, 0.25), beta=np.inf, d=d)
    rho0 = sp.measures.VonMisesFisher(np.eye(d)[0], 2.0)
    sol = sp.ZonalSolver(model, 800).solve(rho0, [0.0, 1.5])
    exact = sp.exact.zero_temperature_density(model, rho0, 1.5)
    _, th, lw = log_cell_measures(sol.theta_edges, d, order=12)
    x = np.cos(th)[..., None] * np.eye(d)[0] + np.sin(th)[..., None] * np.eye(d)[1]
    ref = np.sum(exact.density(x) * np.exp(lw), axis=1)
    assert abs(ref.sum() - 1) < 1e-12  # the closed form keeps mass (12-point Gauss per cell)
    # second order: 1.7e-4 at n = 400 in d = 16 above, so 1e-4 at n = 800 has a 2x margin
    assert np.abs(sol.cell_masses(1) - ref).sum() < 1e-4


def test_density_near_the_pole_converges():
    # in d = 16 the pole's density grows by e^{(d-1)(a1-a2)t} = e^{16.9}; the cells next to
    # the pole hold ~h^15 of the mass, yet rho there must converge pointwise (second order)
    d = 16
    model = sp.Model(V=axial(d, 1.0, 0.25), beta=np.inf, d=d)
    rho0 = sp.measures.VonMisesFisher(np.eye(d)[0], 2.0)
    exact = sp.exact.zero_temperature_density(model, rho0, 1.5)
    errs = []
    for n in (200, 400, 800):
        sol = sp.ZonalSolver(model, n).solve(rho0, [0.0, 1.5])
        x = np.cos(sol.theta[:4, None]) * np.eye(d)[0] + np.sin(sol.theta[:4, None]) * np.eye(d)[1]
        errs.append(np.abs(sol.density(1, x) / exact.density(x) - 1).max())
    # measured 0.24, 0.066, 0.016: ratios 3.6 and 4.0 (second order, cell average vs centre)
    assert errs[1] < errs[0] / 3 and errs[2] < errs[1] / 3 and errs[2] < 0.03, errs


def test_zero_temperature_tan_law_in_d2():
    # d = 2 as a check: tan(theta_t) = tan(theta_0) e^{-(mu1-mu2) t}; the cell edges' CDF
    model = sp.Model(V=np.diag([1.0, 0.0]), beta=np.inf, d=2)
    rho0 = sp.measures.Uniform(2)
    sol = sp.ZonalSolver(model, 400).solve(rho0, [0.0, 1.0])
    cdf = np.concatenate([[0.0], np.cumsum(sol.cell_masses(1))])
    th0 = np.arctan2(np.sin(sol.theta_edges) * np.e, np.cos(sol.theta_edges))
    # uniform on S^1 folded to [0, pi]: CDF(theta0) = theta0/pi; O(h^2) scheme error, h = pi/400
    assert np.abs(cdf - th0 / np.pi).max() < 1e-4


# ---------------------------------------------------------------- growth rates
def linear_rate(d, beta, normalized, ell, n, eps=1e-6):
    """The rate of the mode C_ell^{(d-2)/2}(cos theta) around the uniform state, from the
    solver's right-hand side (central difference in the perturbation's size)."""
    solver = sp.ZonalSolver(sp.Model(beta=beta, d=d, normalized=normalized), n)
    _, th, lw = log_cell_measures(solver.edges, d)
    w = np.exp(lw - log_sphere_area(d))
    m0, p = w.sum(1), (w * special.eval_gegenbauer(ell, 0.5 * (d - 2), np.cos(th))).sum(1)
    J = (solver.rhs(0, m0 + eps * p) - solver.rhs(0, m0 - eps * p)) / (2 * eps)
    q = special.eval_gegenbauer(ell, 0.5 * (d - 2), np.cos(solver.theta))
    return (J @ q) / (p @ q)


@pytest.mark.parametrize("d", [3, 8, 64])
@pytest.mark.parametrize("normalized", [True, False])
def test_growth_rates_converge(d, normalized):
    for ell in (1, 2, 3):
        exact = sp.exact.growth_rate(ell, 4.0, d, normalized)
        errs = [abs(linear_rate(d, 4.0, normalized, ell, n) - exact) for n in (100, 200, 400)]
        # the midpoint rule in theta' and the reconstruction are O(h^2): 16x over two
        # doublings; measured 12-440x (the error can cross zero on the way), so 9x
        assert errs[2] < errs[0] / 9, (ell, errs)
        assert errs[2] < 2e-4 * max(1.0, exact), (ell, errs)


# ---------------------------------------------------------------- bad input
def test_refuses_a_model_that_breaks_the_symmetry():
    V = axial(8, 1.0, 0.5)
    V[1, 2] = 0.1
    with pytest.raises(ValueError, match="not axially symmetric.*V differs"):
        sp.ZonalSolver(sp.Model(V=V, beta=2.0, d=8), 50)
    Q = axial(8, 1.0, 0.5)
    Q[2, 2] = 0.7
    with pytest.raises(ValueError, match="B = Q\\^T K differs"):
        sp.ZonalSolver(sp.Model(Q=Q, beta=2.0, d=8), 50)


def test_refuses_a_density_that_is_not_zonal():
    d = 8
    solver = sp.ZonalSolver(sp.Model(beta=2.0, d=d), 50)
    off_axis = vmf_log(d, 3.0, axis=1)  # a cap centred on the equator
    with pytest.raises(ValueError, match="not zonal about the axis"):
        solver.solve(off_axis, [0.0, 0.1])
    with pytest.raises(ValueError, match="SSP"):
        sp.ZonalSolver(sp.Model(beta=2.0, d=d), 50, scheme="rk4")
    with pytest.raises(ValueError, match="shape"):
        sp.ZonalSolver(sp.Model(beta=2.0, d=d), 50, axis=np.ones(3))


def test_axis_option_and_solution_api(tmp_path):
    d = 6
    axis = np.ones(d) / np.sqrt(d)
    model = sp.Model(Q=np.eye(d) + np.outer(axis, axis), beta=3.0, d=d)
    rho0 = LogDensity(d, lambda x: 2.0 * (x @ axis) - 2.0)  # unnormalised: refused
    with pytest.raises(ValueError, match="integrates to"):
        sp.ZonalSolver(model, 64, axis=axis).solve(rho0, [0.0, 1.0])
    e1 = np.eye(d)[0]
    model1 = sp.Model(Q=np.eye(d) + np.outer(e1, e1), beta=3.0, d=d)
    ref = sp.ZonalSolver(model1, 64).solve(vmf_log(d, 2.0), [0.0, 0.5, 1.0])
    R = np.linalg.qr(np.column_stack([axis, np.eye(d)[:, 1:]]))[0]
    R *= np.sign(R[:, 0] @ axis)  # the rotation taking e1 to the axis
    rot = LogDensity(d, lambda x: vmf_log(d, 2.0).log_density(x @ R))
    sol = sp.ZonalSolver(model, 64, axis=axis).solve(rot, [0.0, 0.5, 1.0])
    # the same dynamics about another axis: identical to quadrature round-off
    assert np.allclose(sol.masses, ref.masses, atol=1e-13)
    edges, m = sol.measure(2)
    assert edges.shape == (65,) and np.isclose(m.sum(), 1, atol=1e-14)
    cloud = sol.measure(2, directions=4)
    assert cloud.points.shape[1] == d and np.allclose(np.linalg.norm(cloud.points, axis=1), 1)
    # a cloud with antipodal directions in each latitude: its mean is along the axis
    assert np.allclose(cloud.mean() - (cloud.mean() @ axis) * axis, 0, atol=1e-14)
    path = tmp_path / "zonal.nc"
    sol.save(path)
    back = sp.ZonalSolution.load(path)
    assert np.array_equal(back.masses, sol.masses) and np.allclose(back.axis, axis)
    x = cloud.points[:5]
    assert np.array_equal(back.density(2, x), sol.density(2, x))
    assert back.to_xarray()["density"].dims == ("time", "theta")


# ---------------------------------------------------------------- against particles
def marginal_quantiles(edges, masses, p):
    """Quantiles of the theta-marginal (linear CDF within a cell) at probabilities p."""
    cdf = np.concatenate([[0.0], np.cumsum(masses)])
    return np.interp(p, cdf / cdf[-1], edges)


def w2(qa, qb):
    """1-D W2 (cost u^2) from the quantile functions at the same probabilities."""
    return np.sqrt(np.mean((qa - qb) ** 2))


def l1(a, b):
    return np.abs(a - b).sum()


def token_quantiles(theta, p):
    th = np.sort(theta)
    return th[np.minimum(np.ceil(p * th.size).astype(int) - 1, th.size - 1)]


@pytest.mark.parametrize("d,beta,n_tokens", [(8, 4.0, 250), (64, 2.0, 150)])
def test_against_particles_drawn_zonally(d, beta, n_tokens):
    # Finite N in high d is far from the mean field when a token's weight on itself,
    # e^beta/N, rivals the mean field's ~e^{beta^2/(2d)}: hence beta = 2 at d = 64 with
    # N = 150..600 (at beta = 16 the particles need N >> e^16).
    e = np.eye(d)
    model = sp.Model(V=axial(d, 1.0, 0.6), beta=beta, d=d)
    rho0 = sp.measures.Mixture([sp.measures.VonMisesFisher(e[0], 3.0 * d / 8),
                                sp.measures.VonMisesFisher(-e[0], 1.0 * d / 8)], [0.5, 0.5])
    times = np.linspace(0.0, 8.0, 9)
    sol = sp.ZonalSolver(model, 200).solve(rho0, times)
    p = (np.arange(4000) + 0.5) / 4000
    thetas = {}
    for n in (n_tokens, 4 * n_tokens):
        traj = sp.ParticleSolver(model, scheme="rk4", dt=0.1).solve(rho0.sample(n, seed=n), times)
        thetas[n] = np.arccos(np.clip(traj.positions @ e[0], -1, 1))
    for i in range(times.size):
        qz = marginal_quantiles(sol.theta_edges, sol.cell_masses(i), p)
        qn, q4 = (token_quantiles(thetas[n][i], p) for n in (n_tokens, 4 * n_tokens))
        # the 4N cloud's sampling error is about half the N cloud's, and W2(N, 4N) is at
        # least the larger of them: the mean field must sit closer to 4N than N does
        assert w2(qz, q4) < w2(qn, q4), (times[i], w2(qz, q4), w2(qn, q4))


# ---------------------------------------------------------------- against the S^2 solvers
@pytest.fixture(scope="module")
def axisymmetric_s2():
    """An axisymmetric model on S^2 (B = diag(1, .8, .8), V = diag(1, .5, .5)), two caps
    about ±e1, and the zonal reference at n = 200 and 400, binned to 20 cells in theta."""
    e = np.eye(3)
    model = sp.Model(Q=np.diag([1.0, 0.8, 0.8]), V=np.diag([1.0, 0.5, 0.5]), beta=4.0, d=3)
    rho0 = sp.measures.Mixture([sp.measures.VonMisesFisher(e[0], 2.0),
                                sp.measures.VonMisesFisher(-e[0], 1.0)], [0.6, 0.4])
    times = [0.0, 0.5, 1.0]
    zon = {n: sp.ZonalSolver(model, n).solve(rho0, times) for n in (200, 400)}
    binned = {n: s.masses.reshape(len(times), 20, -1).sum(-1) for n, s in zon.items()}
    return model, rho0, times, binned


def s2_marginal(sol, i, bins=20):
    """The theta-marginal of an S^2 solution on `bins` equal cells: its density integrated
    against sin(theta) dtheta dphi by Gauss-Legendre (the solution is axisymmetric)."""
    _, th, lw = log_cell_measures(np.linspace(0, np.pi, bins + 1), 3, order=8)
    x = np.cos(th)[..., None] * np.eye(3)[0] + np.sin(th)[..., None] * np.eye(3)[1]
    return np.sum(sol.density(i, x) * np.exp(lw), axis=1)


@pytest.mark.parametrize("solver,resolutions", [(sp.SpectralSolver, (12, 24)),
                                                (sp.FiniteVolumeSolver, (8, 16))])
def test_d3_against_the_s2_solvers(axisymmetric_s2, solver, resolutions):
    model, rho0, times, zon = axisymmetric_s2
    coarse, fine = (solver(model, r).solve(rho0, times) for r in resolutions)
    for i in (1, 2):
        err_zonal = l1(zon[200][i], zon[400][i])  # bounds the n = 400 error (second order: /3)
        err_s2 = l1(s2_marginal(coarse, i), s2_marginal(fine, i))  # bounds the fine run's error
        # agreement within the two solvers' own error estimates
        assert l1(s2_marginal(fine, i), zon[400][i]) < err_zonal + err_s2, (times[i], err_zonal,
                                                                            err_s2)


def test_d2_against_the_fourier_solver():
    # d = 2 as a check of the finite-beta field (S^0 averages: cosh, tanh): a density on S^1
    # symmetric about e1 is zonal, and its marginal on [0, pi] is twice its values
    model = sp.Model(Q=np.diag([1.0, 0.7]), V=np.diag([1.0, 0.4]), beta=3.0, d=2)
    phi = np.linspace(-np.pi, np.pi, 20001)
    z = np.trapezoid(np.exp(1.5 * np.cos(phi) + 0.8 * np.cos(phi) ** 2), phi)

    def rho0(x):
        return np.exp(1.5 * x[..., 0] + 0.8 * x[..., 0] ** 2) / z

    times = [0.0, 1.0]
    zon = {n: sp.ZonalSolver(model, n).solve(rho0, times) for n in (200, 400)}
    four = {k: sp.FourierSolver(model, kmax=k).solve(rho0, times) for k in (16, 32)}
    g, w = np.polynomial.legendre.leggauss(8)
    lo, hi = zon[400].theta_edges[:-1, None], zon[400].theta_edges[1:, None]
    th = 0.5 * (lo + hi) + 0.5 * (hi - lo) * g
    x = np.stack([np.cos(th), np.sin(th)], -1)

    def marginal(sol):
        return 2 * np.sum(sol.density(1, x) * 0.5 * (hi - lo) * w, axis=1)

    err_zonal = l1(zon[200].masses[1], zon[400].masses[1].reshape(200, 2).sum(1))
    err_fourier = l1(marginal(four[16]), marginal(four[32]))
    # agreement within the two solvers' own error estimates (measured: 4e-5 against 1e-4 + 5e-3)
    assert l1(marginal(four[32]), zon[400].masses[1]) < err_zonal + err_fourier
    # and the remainder is the zonal solver's own (second order: its n = 400 error is about
    # err_zonal/3; the Fourier error decays geometrically in K, far below at K = 32)
    assert l1(marginal(four[32]), zon[400].masses[1]) < 2 * err_zonal


# ---------------------------------------------------------------- the interpolated field
@pytest.mark.parametrize("d", [3, 64, 512])
@pytest.mark.parametrize("beta,normalized", [(16.0, True), (64.0, True), (16.0, False)])
def test_chebyshev_field_equals_the_table(d, beta, normalized):
    model = sp.Model(Q=axial(d, 1.3, 0.8), V=axial(d, 0.7, -0.4), beta=beta, d=d,
                     normalized=normalized)
    edges = np.linspace(0.0, np.pi, 301)
    theta, faces = 0.5 * (edges[1:] + edges[:-1]), edges[1:-1]
    masses = np.exp(-2 * d * (theta - 1.0) ** 2) * np.sin(theta) ** 2 + 1e-3
    masses /= masses.sum()
    ref = ZonalField(model, np.eye(d)[0], faces, theta).speed(masses)
    fast = ChebyshevZonalField(model, np.eye(d)[0], faces, theta).speed(masses)
    # the order-16 interpolant on bins of width 4/(beta(|b1|+|b2|)) is exact to ~1e-14 of the
    # largest speed (measured 1.5e-14 over d = 3..512, beta <= 64): 1e-12 leaves round-off room
    assert np.abs(fast - ref).max() <= 1e-12 * np.abs(ref).max()
    # a coarser interpolant (order 8) misses by ~1e-8: the comparison sees the interpolation
    coarse = ChebyshevZonalField(model, np.eye(d)[0], faces, theta, order=8).speed(masses)
    assert np.abs(coarse - ref).max() > 1e-11 * np.abs(ref).max()


@pytest.mark.parametrize("d", [3, 512])
def test_field_of_two_polar_atoms_at_large_beta(d, monkeypatch):
    # all the mass in the two pole cells at beta = 10^4: the kernel, scaled by its row's
    # maximum, underflows wherever the mass is for most rows, which are then summed in log
    # space (and kept for the next call). Two sources give theta' in closed form:
    # theta' = sum_k m_k K_k [v2 cos t sin s_k r_k - v1 sin t cos s_k] / sum_k m_k K_k
    beta, n, (v1, v2) = 1e4, 400, (1.0, 0.5)
    model = sp.Model(V=np.diag([v1] + [v2] * (d - 1)), beta=beta, d=d)
    edges = np.linspace(0.0, np.pi, n + 1)
    theta, faces = 0.5 * (edges[1:] + edges[:-1]), edges[1:-1]
    masses = np.zeros(n)
    masses[[0, -1]] = 0.6, 0.4
    field = ZonalField(model, np.eye(d)[0], faces, theta)
    first, second = field.speed(masses), field.speed(masses)
    nu, s, m = 0.5 * (d - 3), theta[[0, -1]][None, :], masses[[0, -1]][None, :]
    t = faces[:, None]
    z = beta * np.sin(t) * np.sin(s)
    lm0 = log_mean_exp(nu, z)
    lw = beta * np.cos(t) * np.cos(s) + lm0 + np.log(m)
    w = np.exp(lw - lw.max(axis=1, keepdims=True))
    ref = np.sum(w * (v2 * np.cos(t) * np.sin(s) * mean_ratio(nu, z, lm0)
                      - v1 * np.sin(t) * np.cos(s)), axis=1) / w.sum(axis=1)
    # one log-sum-exp of two terms against another: round-off of the O(beta) exponents,
    # 1e4 * 2e-16 relative to the weights, far below 1e-10 of the largest speed
    assert np.abs(first - ref).max() <= 1e-10 * np.abs(ref).max()
    assert np.array_equal(first, second)  # the kept rows give the same field
    # with room for only 10 kept rows, the rest are recomputed at each call: same field
    monkeypatch.setattr("spherepde.interaction.zonal.LOG_ROW_CACHE_BYTES", 10 * 16 * n)
    small = ZonalField(model, np.eye(d)[0], faces, theta)
    assert np.array_equal(small.speed(masses), first)
    assert np.array_equal(small.speed(masses), first)
    assert len(small._log_row_cache) == 10
    # at the equator face the two atoms pull with weights 0.6 and 0.4 alone (sin is even
    # about pi/2, so both kernels are equal): -v1 cos(h/2) (0.6 - 0.4); sin(pi - h/2) carries
    # the rounding of pi - h/2, 2e-16/(h/2) = 5e-14 relative in z = beta sin(h/2) = 40, which
    # moves log m0 by ~2e-12: 1e-10 relative
    assert first[n // 2 - 1] == pytest.approx(-v1 * np.cos(np.pi / (2 * n)) * 0.2, rel=1e-10)


def test_lagrange_stencils_reproduce_polynomials():
    bins, order = 5, 6
    x = np.linspace(0.0, np.pi, 97)
    nodes = chebyshev_nodes(bins, order)
    idx, w = lagrange_stencils(x, bins, order)
    for k in range(order):  # degree < order: exact up to round-off of O(1) values
        assert np.allclose(np.sum(w * nodes[idx] ** k, axis=1), x ** k, rtol=1e-12, atol=1e-12)
    i2, w2n = lagrange_stencils(nodes, bins, order)  # at the nodes: the identity, up to the
    top = np.argmax(w2n, axis=1)  # round-off of recomputing a node's position in its bin
    assert np.array_equal(i2[np.arange(nodes.size), top], np.arange(nodes.size))
    assert np.allclose(w2n, np.eye(order)[top], atol=1e-13)


def test_auto_field_and_multirate_solve():
    d = 8
    e = np.eye(d)
    model = sp.Model(V=axial(d, 1.0, 0.6), beta=16.0, d=d)
    rho0 = sp.measures.Mixture([sp.measures.VonMisesFisher(e[0], 3.0), sp.measures.VonMisesFisher(
        -e[0], 1.0)], [0.5, 0.5])
    # N = 16 nodes per bin of width 4/(beta(|b1| + |b2|)) = 1/8: 16·ceil(8 pi) = 416 nodes
    assert sp.ZonalSolver(model, 400).field_name == "table"  # N > n/2
    assert sp.ZonalSolver(model, 1000).field_name == "chebyshev"
    big = sp.ZonalSolver(model, 10_000, stepping="multirate")
    assert big.field_name == "chebyshev" and big.field.nodes == 416
    times = np.linspace(0.0, 4.0, 3)
    ref = sp.ZonalSolver(model, 400, field="table").solve(rho0, times)
    p = (np.arange(4000) + 0.5) / 4000
    errs = []
    for tol in (1e-3, 1e-4):
        sol = sp.ZonalSolver(model, 400, stepping="multirate", macro_tol=tol).solve(rho0, times)
        assert np.all(np.abs(sol.masses.sum(axis=1) - 1) < 1e-13)  # round-off of 400 cells
        assert sol.masses.min() >= 0
        errs.append(w2(marginal_quantiles(sol.theta_edges, sol.masses[-1], p),
                       marginal_quantiles(ref.theta_edges, ref.masses[-1], p)))
    # the macro steps' error is first order in macro_tol (the defect is a local error per
    # step and the steps grow as macro_tol^-1/2): tenfold smaller tol, at least 5x smaller
    assert errs[1] < errs[0] / 5 and errs[1] < 2e-3 * 0.5, errs
    cheb = sp.ZonalSolver(model, 400, field="chebyshev", stepping="multirate").solve(rho0, times)
    tab = sp.ZonalSolver(model, 400, field="table", stepping="multirate").solve(rho0, times)
    # the same steps with fields equal to ~1e-14: the masses agree to round-off
    assert np.abs(cheb.masses - tab.masses).max() < 1e-12


def test_unknown_field_and_stepping_are_refused():
    model = sp.Model(beta=2.0, d=8)
    with pytest.raises(ValueError, match="zonal field"):
        sp.ZonalSolver(model, 50, field="fmm")
    with pytest.raises(ValueError, match="zonal time stepping"):
        sp.ZonalSolver(model, 50, stepping="rk45")
    with pytest.raises(ValueError, match="GB of kernel tables"):
        sp.ZonalSolver(model, 9000, field="table")
