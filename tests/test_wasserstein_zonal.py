"""W2 between zonal measures as a 1-D transport of theta-marginals: closed forms, the point-cloud
LP, brute-force discrete OT in the non-convex chordal case, and the order in the cell count."""
import math
from types import SimpleNamespace

import numpy as np
import ot
import pytest
from scipy import integrate

import spherepde as sp
from spherepde.sphere import rotation_about_axis
from spherepde.wasserstein import zonal as Z

M = sp.measures
ROUND = 1e-12  # round-off of sums of ~10^4 terms of size <= 4


def _e(d, k=0):
    e = np.zeros(d)
    e[k] = 1.0
    return e


def _ring(theta, d=3):
    return Z.ZonalMarginal(thetas=[theta], weights=[1.0], d=d)


def _h(u, cost):
    return u * u if cost == "geodesic" else 2 - 2 * np.cos(u)


# ------------------------------------------------------------------ closed forms
@pytest.mark.parametrize("cost", ["chordal", "geodesic"])
def test_rings_and_poles_on_a_meridian(cost):
    # Two latitude rings (atoms in theta) are coupled along meridians: W2^2 = h(|t1 - t2|);
    # the poles +-e are the rings at 0 and pi (distance 2 chordal, pi geodesic).
    for t1, t2 in [(0.3, 1.1), (0.2, 3.0), (0.0, np.pi)]:
        r = Z.w2_zonal(_ring(t1), _ring(t2), cost=cost)
        assert r.value == pytest.approx(math.sqrt(_h(t2 - t1, cost)), abs=ROUND)
        assert r.lower <= r.value <= r.upper and r.error <= ROUND
    assert float(Z.w2_zonal(_ring(0.0), _ring(np.pi), cost=cost)) == pytest.approx(
        2.0 if cost == "chordal" else np.pi, abs=ROUND)


def test_a_cap_against_its_own_rotation_about_the_axis_is_zero():
    e = _e(3, 2)
    cap = M.VonMisesFisher(e, 12.0)
    turned = M.VonMisesFisher(rotation_about_axis(e, 0.9) @ e, 12.0)
    for cost in ("chordal", "geodesic"):
        r = Z.w2_zonal(cap, turned, cost=cost, axis=e, n=512)
        assert r.value == 0.0 and r.lower == 0.0
        # the bracket is the two cells' spread, at most a cell's width twice (pi/256 here)
        assert r.upper <= 2 * np.pi / 256


def test_geodesic_is_the_sorted_quantile_distance():
    # Equal-weight atoms: W2^2 = mean((sort a - sort b)^2) (the monotone coupling), exact.
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0, np.pi, 300), rng.uniform(0, np.pi, 300) ** 2 / np.pi
    w = np.full(300, 1 / 300)
    r = Z.w2_zonal(Z.ZonalMarginal(thetas=a, weights=w), Z.ZonalMarginal(thetas=b, weights=w),
                   cost="geodesic")
    assert r.value == pytest.approx(math.sqrt(np.mean((np.sort(a) - np.sort(b)) ** 2)), abs=ROUND)


def test_a_cap_on_the_equator_is_refused():
    with pytest.raises(ValueError, match=r"not zonal about the axis.*1\.5708 rad"):
        Z.w2_zonal(M.VonMisesFisher(_e(3, 2), 3.0), M.VonMisesFisher(_e(3, 0), 3.0), axis=_e(3, 2))


# ------------------------------------------------------------------ the point-cloud LP
def _two_clouds(n=800, n_theta=20):
    e = _e(3, 2)
    one = M.VonMisesFisher(e, 5.0)
    # mass near both poles against a cap: the chordal cost's non-convex case
    two = M.Mixture([M.VonMisesFisher(e, 20.0), M.VonMisesFisher(-e, 8.0)], [0.3, 0.7])
    # product rules about the same axis with the same azimuths
    return e, one, two, one.quadrature(n, axis=e, n_theta=n_theta), two.quadrature(
        n, axis=e, n_theta=n_theta)


@pytest.mark.parametrize("cost", ["chordal", "geodesic"])
def test_equals_the_exact_lp_between_clouds_on_common_meridians(cost):
    # Two clouds whose rings carry their mass equally on the same azimuths: the meridian
    # coupling of the 1-D plan is feasible (W2 <= 1-D) and every coupling costs at least the
    # 1-D one (W2 >= 1-D), so the network simplex on the clouds must give the 1-D value to
    # round-off.
    e, _, _, ca, cb = _two_clouds()
    lp = sp.w2(ca, cb, cost=cost, method="exact")
    r = Z.w2_zonal(Z.ZonalMarginal.from_points(ca.points, ca.weights, e),
                   Z.ZonalMarginal.from_points(cb.points, cb.weights, e), cost=cost)
    assert r.value == pytest.approx(float(lp), abs=1e-10)  # two LPs' round-off
    assert r.lower - 1e-10 <= float(lp) <= r.upper + 1e-10


def test_clouds_agree_with_the_densities_within_the_certified_bracket():
    # W2 between the densities (cells) and W2 between their quadrature clouds (= the 1-D
    # distance of the clouds' marginals, test above) differ by at most the 1-D distances from
    # each cloud's marginal to its density's: the triangle inequality, every term certified.
    e, one, two, ca, cb = _two_clouds(n=1800, n_theta=30)
    lp = float(sp.w2(ca, cb, method="exact"))
    dens = Z.w2_zonal(one, two, axis=e, n=2048)
    da = Z.w2_zonal(Z.ZonalMarginal.from_points(ca.points, ca.weights, e), one, axis=e, n=2048)
    db = Z.w2_zonal(Z.ZonalMarginal.from_points(cb.points, cb.weights, e), two, axis=e, n=2048)
    assert dens.lower - da.upper - db.upper <= lp <= dens.upper + da.upper + db.upper
    assert abs(lp - float(dens)) < 0.02  # and the check is not vacuous: both are ~1.38


# ------------------------------------------------------------------ non-convex chordal case
def _pole_atoms(seed, n, m):
    """Mass near the north pole (and some near the equator) against mass near the south pole
    (and some near the north): pairs more than pi/2 apart, where h = 2 - 2 cos is concave and
    crossing pairs are cheaper than monotone ones."""
    rng = np.random.default_rng(seed)
    ta = np.concatenate([rng.uniform(0, 0.5, n - n // 4), rng.uniform(1.3, 1.8, n // 4)])
    tb = np.concatenate([rng.uniform(2.6, np.pi, m - m // 4), rng.uniform(0.0, 0.4, m // 4)])
    return ta, rng.dirichlet(np.ones(n)), tb, rng.dirichlet(np.ones(m))


def test_chordal_mass_near_both_poles_against_brute_force_ot():
    ta, wa, tb, wb = _pole_atoms(1, 60, 50)
    brute = ot.emd2(wa, wb, 2 - 2 * np.cos(ta[:, None] - tb[None, :]))
    r = Z.w2_zonal(Z.ZonalMarginal(thetas=ta, weights=wa), Z.ZonalMarginal(thetas=tb, weights=wb))
    assert r.value**2 == pytest.approx(brute, abs=ROUND)
    # the monotone coupling is not optimal here (else this would not test the concave part)
    mono, _ = Z._monotone_cost(np.sort(ta), wa[np.argsort(ta)], np.sort(tb), wb[np.argsort(tb)],
                               "chordal")
    assert mono > brute + 1e-3
    assert "network simplex" in r.details["solver"]


def test_chordal_grouped_solver_brackets_brute_force(monkeypatch):
    # Past ZONAL_EXACT_PAIRS the network simplex runs between groups of atoms; its bracket is
    # certified on the atoms, so it must contain the brute-force optimum.
    ta, wa, tb, wb = _pole_atoms(2, 900, 800)
    brute = ot.emd2(wa, wb, 2 - 2 * np.cos(ta[:, None] - tb[None, :]), numItermax=10**7)
    monkeypatch.setattr(Z, "ZONAL_EXACT_PAIRS", 1000)
    monkeypatch.setattr(Z, "ZONAL_GROUP_ATOMS", 100)
    r = Z.w2_zonal(Z.ZonalMarginal(thetas=ta, weights=wa), Z.ZonalMarginal(thetas=tb, weights=wb))
    assert "groups" in r.details["solver"]
    lo, up = r.details["atoms_w2_squared_bracket"]
    assert lo - ROUND <= brute <= up + ROUND
    assert up - lo < 0.05 * brute  # groups of 1% of the mass: a bracket of a few %


@pytest.mark.parametrize("kappas, certified", [((5.0, 2.0), True), ((40.0, 10.0), False)])
def test_chordal_caps_about_one_pole_against_brute_force_ot(kappas, certified):
    # Two caps about e: the monotone coupling is optimal, or nearly (pairs in the far tails
    # are more than pi/2 apart); when its dual does not close the gap to 1e-12 the network
    # simplex decides. Either way the value is the brute-force optimum.
    e = _e(3, 2)
    A, B = (Z.ZonalMarginal.from_measure(M.VonMisesFisher(e, k), e, 1024) for k in kappas)
    r = Z.w2_zonal(A, B)
    assert r.details["solver"].startswith("monotone coupling, certified") == certified
    (ta, wa, _), (tb, wb, _) = A.atoms(), B.atoms()
    brute = ot.emd2(wa, wb, 2 - 2 * np.cos(ta[:, None] - tb[None, :]), numItermax=10**7)
    assert r.details["atoms_w2_squared_bracket"][0] - ROUND <= brute
    assert brute <= r.details["atoms_w2_squared_bracket"][1] + ROUND
    assert r.details["atoms_w2_squared_bracket"][1] == pytest.approx(brute, abs=ROUND)


# ------------------------------------------------------------------ convergence in cells
def _s2_quantile(kappa):
    """theta(u) of vMF(e, kappa) on S^2: cos theta = 1 + log(1 - u (1 - e^{-2 kappa})) / kappa."""
    return lambda u: np.arccos(np.clip(1 + np.log1p(-u * -np.expm1(-2 * kappa)) / kappa, -1, 1))


def test_order_of_the_discretisation_error():
    # Geodesic W2 between two caps on S^2 is the L2 distance of their quantile functions
    # (closed form above). On n uniform cells the value (barycentre atoms) converges at second
    # order and the certified bracket, a cell's spread, at first order.
    e = _e(3, 2)
    q1, q2 = _s2_quantile(8.0), _s2_quantile(2.0)
    exact = math.sqrt(integrate.quad(lambda u: (q1(u) - q2(u)) ** 2, 0, 1, epsabs=1e-13,
                                     epsrel=1e-12, limit=400)[0])
    errs, widths = [], []
    for n in (64, 128, 256, 512):
        edges = np.linspace(0, np.pi, n + 1)
        A, B = (Z.ZonalMarginal(edges, M.VonMisesFisher(e, k).theta_marginal().cell_masses(edges),
                                d=3) for k in (8.0, 2.0))
        r = Z.w2_zonal(A, B, cost="geodesic")
        assert r.lower <= exact <= r.upper
        errs.append(abs(float(r) - exact))
        widths.append(r.upper - r.lower)
    orders = np.log2(np.array(errs[:-1]) / errs[1:])
    assert np.all(orders > 1.45), orders
    w_orders = np.log2(np.array(widths[:-1]) / widths[1:])
    assert np.all(np.abs(w_orders - 1) < 0.1), w_orders


# ------------------------------------------------------------------ Diracs, clouds, the limit
def test_w2_to_a_dirac_off_the_axis_is_the_mean_formula():
    # One coupling: W2^2 = 2 - 2 <E x, z> = 2 - 2 cos(theta_z) A_3(kappa) for a cap about e.
    e = _e(3, 2)
    kappa = 6.0
    z = np.array([np.sin(1.0), 0.0, np.cos(1.0)])
    want = math.sqrt(2 - 2 * math.cos(1.0) * (1 / math.tanh(kappa) - 1 / kappa))
    r = Z.w2_zonal_dirac(M.VonMisesFisher(e, kappa), z, n=4096)
    assert r.lower <= want <= r.upper
    assert r.upper - r.lower < 2 * np.pi / 2048  # the cos-range of 4096 cells (half on the support)
    assert float(Z.w2_zonal_dirac(M.VonMisesFisher(e, kappa), -e, cost="geodesic")) > 2.5


def test_cloud_against_a_zonal_density_is_a_lower_bound():
    # Tokens on a single meridian with the exact theta-atoms of a zonal measure: their
    # theta-marginal distance is 0, yet the cloud is far from zonal. The bound must say so, and
    # its upper end must be above the LP distance to the same atoms spread over 64 azimuths.
    e = _e(3, 2)
    ring = M.VonMisesFisher(e, 3.0).quadrature(64 * 30, axis=e, n_theta=30)
    th = Z.theta_of(ring.points, e)
    t, inv = np.unique(np.round(th, 12), return_inverse=True)
    w = np.bincount(inv, weights=ring.weights)
    meridian = sp.PointCloud(np.stack([np.sin(t), np.zeros_like(t), np.cos(t)], 1), w)
    r = Z.w2_cloud_zonal_bound(meridian, Z.ZonalMarginal(thetas=t, weights=w, d=3), axis=e)
    assert r.details["lower_bound_only"] and "LOWER bound" in r.details["note"]
    assert r.value == pytest.approx(0.0, abs=1e-7)
    lp = float(sp.w2(meridian, ring, method="exact"))
    assert lp > 0.5 and r.lower <= lp <= r.upper


def _zero_temperature_solution(d, rho0, n, times, gap):
    """A zonal solution known exactly: B = I, A = V = diag(mu1, mu2, ...) at beta = inf moves
    theta by tan(theta_t) = tan(theta_0) e^{-gap t}; the cell masses at t are rho0's masses of
    the preimages of the cells."""
    e = _e(d)
    F0 = rho0.theta_marginal(e).cdf
    edges = np.linspace(0, np.pi, n + 1)

    def pre(t):
        return np.arctan2(np.sin(edges) * np.exp(gap * t), np.cos(edges))

    model = sp.Model(V=np.diag([1.0 + gap] + [1.0] * (d - 1)), beta=np.inf, d=d)
    return SimpleNamespace(theta_edges=edges, times=np.asarray(times), axis=e, d=d, model=model,
                           initial_measure=rho0, cell_masses=lambda i: np.diff(F0(pre(times[i]))))


@pytest.mark.parametrize("d, rho0", [
    (3, M.Mixture([M.VonMisesFisher(_e(3), 4.0), M.VonMisesFisher(-_e(3), 1.0)], [0.6, 0.4])),
    (16, M.VonMisesFisher(_e(16), 10.0)),
])
@pytest.mark.parametrize("cost", ["chordal", "geodesic"])
def test_w2_to_limit_of_a_zonal_solution(d, rho0, cost):
    # Against the atoms +-e with the half-spheres' masses (kept by the flow), the threshold
    # coupling at pi/2 is optimal: W2^2 = E_rho0[h(min(theta_t, pi - theta_t))].
    times = [0.0, 1.0, 3.0]
    gap = 1.5
    sol = _zero_temperature_solution(d, rho0, 2000, times, gap)
    curve = sp.w2_to_limit(sol, cost=cost)
    f = rho0.theta_marginal(_e(d)).pdf
    for k, t in enumerate(times):
        def integrand(th, t=t):
            tt = np.arctan2(np.sin(th) * np.exp(-gap * t), np.cos(th))
            return _h(min(tt, np.pi - tt), cost) * f(th)
        exact = math.sqrt(integrate.quad(integrand, 0, np.pi, points=[np.pi / 2], limit=400,
                                         epsabs=1e-14)[0])
        assert curve.lower[k] - ROUND <= exact <= curve.upper[k] + ROUND
        # the bracket is the cells' spread: at most a cell width (pi/2000)
        assert curve.upper[k] - curve.lower[k] <= 2 * np.pi / 2000
    assert curve.methods == ["zonal"] * 3 and curve.limit.n == 2


@pytest.mark.parametrize("cost", ["chordal", "geodesic"])
def test_on_the_circle_the_reduction_is_exact_too(cost):
    # d = 2: a zonal measure is symmetric under the reflection fixing e (u = +-1 with mass 1/2
    # each); the product rules put each theta-node at +-u with equal weights, so the LP between
    # them equals the 1-D value (same argument as on S^2).
    e = _e(2)
    one = M.VonMisesFisher(e, 3.0).quadrature(120, axis=e)
    two = M.Mixture([M.VonMisesFisher(e, 9.0), M.VonMisesFisher(-e, 2.0)], [0.5, 0.5]).quadrature(
        120, axis=e)
    lp = sp.w2(one, two, cost=cost, method="exact")
    r = Z.w2_zonal(Z.ZonalMarginal.from_points(one.points, one.weights, e),
                   Z.ZonalMarginal.from_points(two.points, two.weights, e), cost=cost)
    assert r.value == pytest.approx(float(lp), abs=1e-10)  # two LPs' round-off


def test_plain_arrays_and_bad_input():
    edges = np.linspace(0, np.pi, 5)
    masses = np.array([0.1, 0.2, 0.3, 0.4])
    r = Z.w2_zonal((edges, masses), (edges, masses[::-1]), cost="geodesic")
    assert r.lower <= float(r) <= r.upper and float(r) > 0
    with pytest.raises(ValueError, match="sum to 1"):
        Z.ZonalMarginal(edges, 2 * masses)
    with pytest.raises(ValueError, match=r"masses must have shape \(n,\) = \(4,\)"):
        Z.ZonalMarginal(edges, masses[:3])
    with pytest.raises(ValueError, match="strictly increasing"):
        Z.ZonalMarginal(edges[::-1], masses)
    with pytest.raises(ValueError, match=r"\[0, pi\]"):
        Z.ZonalMarginal(thetas=[4.0], weights=[1.0])
    with pytest.raises(ValueError, match=">= 0"):
        Z.ZonalMarginal(edges, np.array([-0.1, 0.3, 0.4, 0.4]))
    with pytest.raises(ValueError, match="pass edges and masses together"):
        Z.ZonalMarginal(edges=edges)
    with pytest.raises(TypeError, match="cannot read a theta-marginal"):
        Z.w2_zonal(np.ones(3), (edges, masses))
    with pytest.raises(ValueError, match="different dimensions"):
        Z.w2_zonal(Z.ZonalMarginal(edges, masses, d=3), Z.ZonalMarginal(edges, masses, d=4))
    with pytest.raises(ValueError, match="unknown cost"):
        Z.w2_zonal((edges, masses), (edges, masses), cost="l1")


@pytest.mark.parametrize("d", [3, 8])
def test_w2_to_limit_when_e_is_the_equator(d):
    # V = diag(1, 2, ..., 2): E = e^perp, Pi#rho0 is uniform on the equator (the atom theta =
    # pi/2), and the flow opens theta: tan(theta_t) = tan(theta_0) e^{t}. One coupling:
    # W2^2 = E_rho0[h(|theta_t - pi/2|)].
    e = _e(d)
    rho0 = M.VonMisesFisher(e, 3.0)
    F0 = rho0.theta_marginal(e).cdf
    edges = np.linspace(0, np.pi, 1001)
    times = [0.0, 2.0]

    def pre(t):
        return np.arctan2(np.sin(edges) * np.exp(-t), np.cos(edges))

    sol = SimpleNamespace(theta_edges=edges, times=np.array(times), axis=e, d=d,
                          model=sp.Model(V=np.diag([1.0] + [2.0] * (d - 1)), beta=np.inf, d=d),
                          initial_measure=rho0, cell_masses=lambda i: np.diff(F0(pre(times[i]))))
    curve = sp.w2_to_limit(sol)
    f = rho0.theta_marginal(e).pdf
    for k, t in enumerate(times):
        def integrand(th, t=t):
            return _h(np.arctan2(np.sin(th) * np.exp(t), np.cos(th)) - np.pi / 2, "chordal") * f(th)
        exact = math.sqrt(integrate.quad(integrand, 0, np.pi, limit=400)[0])
        assert curve.lower[k] - ROUND <= exact <= curve.upper[k] + ROUND
        assert curve.upper[k] - curve.lower[k] <= 2 * np.pi / 1000  # the cells' spread
    assert np.allclose(curve.limit.points @ e, 0.0, atol=1e-15)  # the ring, on the equator


@pytest.mark.skipif(not hasattr(sp, "ZonalSolver"), reason="needs the zonal density solver")
@pytest.mark.parametrize("d", [3, 8])
def test_w2_to_limit_of_a_zonal_solver_run_brackets_its_token_clouds(d):
    # Against the polar atoms of Pi#rho0 a point costs h(theta) or h(pi - theta) whatever its
    # direction u, so W2 from any cloud with the solution's cell masses at the cell centres
    # equals the 1-D value of those atoms, which lie in the cells: the certified bracket of
    # sp.w2_to_limit(sol) (any law inside the cells) must contain the cloud's exact W2.
    e = _e(d)
    model = sp.Model(V=np.diag([2.0] + [1.0] * (d - 1)), beta=16.0, d=d)
    rho0 = M.Mixture([M.VonMisesFisher(e, 4.0), M.VonMisesFisher(-e, 1.0)], [0.6, 0.4])
    sol = sp.ZonalSolver(model, 200).solve(rho0, [0.0, 2.0])
    curve = sp.w2_to_limit(sol)
    assert curve.methods == ["zonal", "zonal"]
    for i in range(2):
        cloud = sol.measure(i, directions=2, seed=0)
        w = float(sp.w2(cloud, curve.limit, method="semidiscrete"))
        assert curve.lower[i] - ROUND <= w <= curve.upper[i] + ROUND


def test_limit_masses_from_the_cells_when_rho0_is_not_kept():
    # A solution read back from disk has no initial_measure: the limit's masses come from the
    # first cell masses, a cell across pi/2 (odd n) split by its constant-density law. The
    # split can be off by at most that one cell's mass.
    d = 5
    rho0 = M.Mixture([M.VonMisesFisher(_e(d), 4.0), M.VonMisesFisher(-_e(d), 1.0)], [0.6, 0.4])
    sol = _zero_temperature_solution(d, rho0, 301, [0.0, 1.0], 1.0)
    sol.initial_measure = None
    curve = sp.w2_to_limit(sol)
    exact = float(rho0.theta_marginal(_e(d)).cdf(np.pi / 2))
    middle = sol.cell_masses(0)[150]
    assert abs(curve.limit.weights[0] - exact) <= middle

    def x(t):
        return np.cos(t) * _e(d) + np.sin(t) * _e(d, 1)

    # For a density with log-slope g across the cell (width w), the constant-density split
    # is off by middle * |g| w / 8 (the linear profile's first moment); the curvature term is
    # O(w^2) smaller (measured: 0.066% of the cell mass against 0.066% predicted).
    g = (rho0.log_density(x(np.pi / 2 + 1e-6)) - rho0.log_density(x(np.pi / 2 - 1e-6))) / 2e-6
    predicted = middle * abs(g) * (np.pi / 301) / 8
    assert abs(curve.limit.weights[0] - exact) == pytest.approx(predicted, rel=1e-2)
