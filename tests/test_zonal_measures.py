"""Zonal initial data in any d: log-form normalisers, theta-marginals, zonality checks, and the
product Gauss quadrature rules of the densities."""
import math

import numpy as np
import pytest
from scipy import special

import spherepde as sp
from spherepde.sphere import rotation_about_axis

M = sp.measures


def _e(d, k=0):
    e = np.zeros(d)
    e[k] = 1.0
    return e


def _mean_length(d, kappa):
    """A_d(kappa) = E<mu, x> = I_{d/2}(kappa) / I_{d/2-1}(kappa) under vMF(mu, kappa)."""
    if kappa == 0:
        return 0.0
    return math.exp(M.log_bessel_i(0.5 * d, kappa) - M.log_bessel_i(0.5 * d - 1, kappa))


# ------------------------------------------------------------------ normalisers and marginals
def test_log_bessel_i_obeys_the_recurrence_where_ive_underflows():
    # I_{nu-1} - I_{nu+1} = (2 nu / x) I_nu, in log form at orders where scipy's ive is 0. The
    # logs are ~ -2000 (gammaln(512) ~ 2700), so their round-off is ~1e-16 * 2700 ~ 3e-13
    # absolute, i.e. relative in the ratios: 1e-12.
    for nu, x in [(255.0, 1.0), (511.0, 3.0), (100.5, 0.01)]:
        assert special.ive(nu, x) == 0.0  # the regime the log form is for
        lo, mid, hi = (M.log_bessel_i(nu + k, x) for k in (-1, 0, 1))
        assert math.exp(lo - mid) - math.exp(hi - mid) == pytest.approx(2 * nu / x, rel=1e-12)
    # where ive is representable, the two agree to round-off
    assert M.log_bessel_i(3.5, 20.0) == pytest.approx(math.log(special.iv(3.5, 20.0)), rel=1e-15)


@pytest.mark.parametrize("d", [2, 3, 8, 64, 512])
@pytest.mark.parametrize("kappa", [0.0, 1.0, 50.0, 1e4])
def test_vmf_theta_marginal_has_mass_one_in_any_dimension(d, kappa):
    # The theta-density |S^{d-2}| sin^{d-2} C_d(kappa) e^{kappa cos} integrates to 1 by the
    # normaliser alone (cdf divides by the integral, total_mass is the raw one). Composite Gauss
    # on 2048 pieces is exact to round-off; log C_d (up to ~1500 in d = 512) carries ~1e-13.
    marginal = M.VonMisesFisher(_e(d), kappa).theta_marginal()
    assert marginal.cdf(np.pi) == 1.0
    assert marginal.total_mass == pytest.approx(1.0, abs=1e-12)


def test_vmf_theta_marginal_closed_form_on_s2():
    # On S^2, P(theta <= t) = (1 - e^{-kappa (1 - cos t)}) / (1 - e^{-2 kappa}); Gauss to round-off.
    kappa = 30.0
    marginal = M.VonMisesFisher(_e(3, 2), kappa).theta_marginal()
    t = np.linspace(0.0, np.pi, 41)
    exact = -np.expm1(-kappa * (1 - np.cos(t))) / -np.expm1(-2 * kappa)
    np.testing.assert_allclose(marginal.cdf(t), exact, rtol=0, atol=1e-14)
    edges = np.linspace(0, np.pi, 11)
    np.testing.assert_allclose(marginal.cell_masses(edges), np.diff(exact[::4]), atol=1e-14)


def test_two_caps_and_uniform_marginals_about_the_axis():
    d = 8
    e = _e(d)
    caps = M.Mixture([M.VonMisesFisher(e, 20.0), M.VonMisesFisher(-e, 5.0)], [0.25, 0.75])
    f = caps.theta_marginal(e)
    # the mass of {theta < pi/2} is the hemisphere mass (exact Beta-tail integrals, 1e-12)
    assert f.cdf(np.pi / 2) == pytest.approx(caps.hemisphere_mass(e), abs=1e-12)
    # uniform: F(theta) = I_{sin^2(theta/2)}((d-1)/2, (d-1)/2), the regularized Beta function
    t = np.linspace(0, np.pi, 9)
    exact = special.betainc(0.5 * (d - 1), 0.5 * (d - 1), np.sin(t / 2) ** 2)
    np.testing.assert_allclose(M.Uniform(d).theta_marginal(e).cdf(t), exact, atol=1e-14)


# ------------------------------------------------------------------ zonality
def test_zonal_initial_data_are_recognised():
    d = 16
    e = _e(d)
    R = rotation_about_axis(_e(3, 2), 0.7)
    assert M.VonMisesFisher(R @ _e(3, 2), 4.0).is_zonal(_e(3, 2))  # a cap turned about e
    assert M.VonMisesFisher(e, 4.0).is_zonal(e) and M.VonMisesFisher(-e, 4.0).is_zonal(e)
    assert M.Uniform(d).is_zonal(_e(d, 5))
    assert M.VonMisesFisher(_e(d, 3), 0.0).is_zonal(e)  # kappa = 0 is uniform
    caps = M.Mixture([M.VonMisesFisher(e, 9.0), M.VonMisesFisher(-e, 2.0)], [0.4, 0.6])
    assert caps.is_zonal(e)
    np.testing.assert_array_equal(caps.default_axis(), e)
    assert M.ACG(np.diag([4.0, 1.0, 1.0])).is_zonal(_e(3)) and not M.ACG(
        np.diag([4.0, 1.0, 1.0])).is_zonal(_e(3, 1))


def test_a_cap_on_the_equator_is_refused_with_the_reason():
    d = 8
    e = _e(d)
    cap = M.VonMisesFisher(_e(d, 1), 4.0)
    assert not cap.is_zonal(e)
    with pytest.raises(ValueError, match=r"not zonal about the axis.*1\.5708 rad \(90 deg\) from "
                                         r"the axis"):
        cap.check_zonal(e)
    with pytest.raises(ValueError, match="not zonal"):
        cap.theta_marginal(e)
    mix = M.Mixture([M.VonMisesFisher(e, 3.0), cap], [0.5, 0.5])
    with pytest.raises(ValueError, match=r"component 1 .*from the axis"):
        mix.check_zonal(e)
    with pytest.raises(ValueError, match="no symmetry this library can verify"):
        M.CallableDensity(lambda x: np.full(x.shape[:-1], 1 / (4 * np.pi))).check_zonal(_e(3))


# ------------------------------------------------------------------ quadrature
def _gauss_legendre_remainder(n, length, kappa, degree):
    """Bound on the n-point Gauss–Legendre error for e^{kappa (w - 1)} p(w), p of the given
    degree with |p^{(j)}| <= 1 on an interval of this length inside [-1, 1]:
    L^{2n+1} (n!)^4 / ((2n+1) ((2n)!)^3) max |f^{(2n)}|, with
    max |f^{(2n)}| <= sum_{j <= degree} C(2n, j) kappa^{2n-j}."""
    k = 2 * n
    deriv = sum(math.comb(k, j) * kappa ** (k - j) for j in range(degree + 1))
    log_r = ((k + 1) * math.log(length) + 4 * math.lgamma(n + 1) - math.log(k + 1)
             - 3 * math.lgamma(k + 1))
    return math.exp(log_r) * deriv


@pytest.mark.parametrize("kappa, n", [(0.0, 800), (4.0, 800), (40.0, 3200)])
def test_vmf_quadrature_moments_on_s2(kappa, n):
    mu = np.array([1.0, 2.0, 2.0]) / 3
    cap = M.VonMisesFisher(mu, kappa)
    rule = cap.quadrature(n)
    n_t = round(math.sqrt(n / 2))
    assert rule.n == n
    # the rule's interval in w: from the pole to the support's end (1e-19 of the mass beyond)
    length = 1.0 - math.cos(cap.theta_marginal().support()[1])
    A = _mean_length(3, kappa)
    first = A * mu
    second = (A / kappa if kappa else 1 / 3) * np.eye(3) + (
        (1 - 3 * A / kappa) * np.outer(mu, mu) if kappa else 0)
    # The rule is exact in the azimuth for degree < 2 n_t; in w = cos(theta) the n_t-point
    # Gauss remainder of e^{kappa (w-1)} p(w) (times C_3(kappa) e^kappa 2 pi <= kappa + 1) is
    # below _gauss_legendre_remainder; round-off of n weights adds ~1e-15.
    tol = (kappa + 1) * _gauss_legendre_remainder(n_t, length, kappa, 2) + 1e-14
    assert tol < 1e-12
    np.testing.assert_allclose(rule.mean(), first, atol=tol)
    np.testing.assert_allclose(np.einsum("n,ni,nj->ij", rule.weights, rule.points, rule.points),
                               second, atol=tol)
    # the density's own feature: E[e^{s <mu, x>}] = C(kappa) / C(kappa + s)
    s = 3.0
    mgf = math.exp(M.log_bessel_i(0.5, kappa + s) - M.log_bessel_i(0.5, kappa)
                   + 0.5 * math.log(kappa / (kappa + s))) if kappa else math.sinh(s) / s
    assert rule.weights @ np.exp(s * rule.points @ mu) == pytest.approx(mgf, rel=1e-12)


def test_quadrature_converges_exponentially_on_s1():
    # On S^1 the theta-rule is Gauss–Chebyshev in w (or Gauss–Legendre on the support with the
    # 1/sqrt(1 - w^2) factor in the weights): the error of E<mu, x> falls exponentially in n.
    kappa, mu = 6.0, np.array([0.6, 0.8])
    A = _mean_length(2, kappa)
    err = [abs(M.VonMisesFisher(mu, kappa).quadrature(n).mean() @ mu - A) for n in (8, 16, 32, 64)]
    assert err[-1] < 1e-14
    assert err[0] > 1e3 * err[1]  # spectral: each doubling gains orders of magnitude
    uni = M.Uniform(2).quadrature(64)
    np.testing.assert_allclose(uni.mean(), 0, atol=1e-15)
    np.testing.assert_allclose(uni.weights @ uni.points[:, 0] ** 2, 0.5, atol=1e-15)


def test_two_cap_mixture_quadrature_matches_its_moments():
    e = _e(3, 2)
    mix = M.Mixture([M.VonMisesFisher(e, 30.0), M.VonMisesFisher(-e, 10.0)], [0.3, 0.7])
    rule = mix.quadrature(2000)
    want = 0.3 * _mean_length(3, 30.0) - 0.7 * _mean_length(3, 10.0)
    # each cap's rule (about its own mean) is exact to < 1e-13 (remainder bound as above)
    np.testing.assert_allclose(rule.mean(), want * e, atol=1e-13)
    # the mixture's rule about a fixed axis agrees: the same moments from another rule
    fixed = mix.quadrature(2000, axis=e)
    np.testing.assert_allclose(fixed.mean(), want * e, atol=1e-13)


@pytest.mark.parametrize("d", [4, 8, 64])
def test_quadrature_in_higher_dimension(d):
    # d >= 4: Gauss–Jacobi in w (weight (1 - w^2)^{(d-3)/2}) times a rotated cross-polytope
    # per ring, a 3-design: moments of degree <= 2 in x are exact to the theta-rule's error,
    # which at 32 rings is below 1e-12 for kappa = 3 (measured: falls ~1e4 per doubling).
    mu = np.random.default_rng(3).standard_normal(d)
    mu /= np.linalg.norm(mu)
    kappa = 3.0
    rule = M.VonMisesFisher(mu, kappa).quadrature(32 * 2 * (d - 1))
    A = _mean_length(d, kappa)
    np.testing.assert_allclose(rule.mean(), A * mu, atol=1e-12)
    second = (A / kappa) * np.eye(d) + (1 - d * A / kappa) * np.outer(mu, mu)
    np.testing.assert_allclose(np.einsum("n,ni,nj->ij", rule.weights, rule.points, rule.points),
                               second, atol=1e-12)


def test_quadrature_bad_input():
    with pytest.raises(ValueError, match="positive integer"):
        M.Uniform(3).quadrature(0)
    with pytest.raises(ValueError, match="no axis of its own"):
        M.ACG(np.eye(3)).quadrature(100)
    with pytest.raises(ValueError, match="axis must have shape"):
        M.Uniform(3).quadrature(100, axis=[1.0, 0.0])
