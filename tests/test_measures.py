"""Measures: normalization relative to surface area, samplers, PointCloud validation."""
import numpy as np
import pytest
from scipy import integrate, special, stats

import spherepde as sp
from spherepde.sphere import GaussGrid, normalize

M = sp.measures


def _gauss_mass(measure, n=300):
    grid = GaussGrid(n, 2 * n)
    return float(grid.integrate(measure.density(grid.points)))


@pytest.mark.parametrize(
    "measure",
    [
        M.Uniform(3),
        M.VonMisesFisher([1.0, 2.0, 2.0], 7.5),
        M.Mixture([M.VonMisesFisher([0, 0, 1.0], 3.0), M.Uniform(3)], [0.3, 0.7]),
        M.ACG(np.diag([4.0, 1.0, 0.25])),
    ],
    ids=["uniform", "vmf", "mixture", "acg"],
)
def test_densities_integrate_to_one_on_s2(measure):
    # The densities are smooth and analytic; a 300-node Gauss grid integrates them to round-off.
    assert _gauss_mass(measure) == pytest.approx(1.0, abs=1e-12)


def test_vmf_density_stable_at_large_kappa():
    v = M.VonMisesFisher([0, 0, 1.0], 1e4)
    peak = v.density(np.array([0, 0, 1.0]))
    # C_3(kappa) = kappa / (4 pi sinh kappa), times e^kappa at the mode -> kappa / (2 pi).
    assert peak == pytest.approx(1e4 / (2 * np.pi), rel=1e-12)
    # Mass on a grid fine enough for the 1/sqrt(kappa) = 0.01 width: 1 to quadrature accuracy.
    assert _gauss_mass(v, n=1500) == pytest.approx(1.0, abs=1e-6)
    x = v.sample(1000, seed=1)
    assert np.all(np.isfinite(x)) and np.allclose(np.linalg.norm(x, axis=1), 1, atol=1e-12)


@pytest.mark.parametrize("kappa", [0.5, 5.0, 50.0, 1e4])
def test_vmf_sampler_mean_resultant_length(kappa):
    n = 200_000
    x = M.VonMisesFisher([0.0, 1.0, 0.0], kappa).sample(n, seed=2)
    w = x[:, 1]
    expected = 1 / np.tanh(kappa) - 1 / kappa  # E<mu, x> on S^2
    # CLT: the sample mean of w has std(w)/sqrt(n); 5 sigma makes a false alarm ~1e-6.
    assert abs(w.mean() - expected) < 5 * w.std() / np.sqrt(n)


def test_vmf_sampler_in_higher_dimension():
    d, kappa, n = 6, 3.0, 200_000
    x = M.VonMisesFisher(np.eye(d)[0], kappa).sample(n, seed=3)
    expected = special.iv(d / 2, kappa) / special.iv(d / 2 - 1, kappa)  # A_d(kappa)
    assert abs(x[:, 0].mean() - expected) < 5 * x[:, 0].std() / np.sqrt(n)


def test_samples_follow_the_density_chi2():
    # Chi-square test of counts in 20 equal-width bands of z = x_3 for an ACG measure.
    acg = M.ACG(np.diag([1.0, 2.0, 5.0]))
    n = 100_000
    z = acg.sample(n, seed=4)[:, 2]
    edges = np.linspace(-1, 1, 21)
    phi = 2 * np.pi * np.arange(256) / 256

    def marginal(zz):  # density of z: the trapezoid rule in phi is spectrally exact here
        s = np.sqrt(1 - zz**2)
        x = np.stack([s * np.cos(phi), s * np.sin(phi), np.full_like(phi, zz)], -1)
        return acg.density(x).mean() * 2 * np.pi

    probs = np.array([integrate.quad(marginal, a, b, epsrel=1e-12)[0]
                      for a, b in zip(edges[:-1], edges[1:], strict=True)])
    assert probs.sum() == pytest.approx(1.0, abs=1e-10)
    counts = np.histogram(z, edges)[0]
    # p-value threshold 1e-3: a correct sampler fails 1 run in 1000 (the seed is fixed).
    assert stats.chisquare(counts, probs * n).pvalue > 1e-3


def test_mixture_and_callable_density():
    def f(x):
        return (1 + 0.5 * x[..., 2]) / (4 * np.pi)
    c = M.CallableDensity(f)
    assert c.mass == pytest.approx(1.0, abs=1e-13)
    z = c.sample(50_000, seed=5)[:, 2]
    # E z = (1/4pi) ∫ z (1 + z/2) dA = 1/6; 5 sigma of the sample mean.
    assert abs(z.mean() - 1 / 6) < 5 * z.std() / np.sqrt(z.size)
    with pytest.raises(ValueError, match="integrates to"):
        M.CallableDensity(lambda x: np.ones(x.shape[:-1]))
    with pytest.raises(ValueError, match=">= 0"):
        M.CallableDensity(lambda x: x[..., 2] / (4 * np.pi))


def test_hemisphere_mass_vmf_against_generic_quadrature():
    v = M.VonMisesFisher([0.2, 0.5, -1.0], 12.0)
    e = normalize(np.array([1.0, 0.3, 0.2]))
    assert v.hemisphere_mass(e) == pytest.approx(M.Measure.hemisphere_mass(v, e), abs=1e-10)
    assert M.Uniform(3).hemisphere_mass(e) == 0.5


def test_pointcloud_validation():
    pts = np.eye(3)
    pc = sp.PointCloud(pts, [0.2, 0.3, 0.5])
    assert pc.n == 3 and pc.d == 3
    np.testing.assert_allclose(pc.mean(), [0.2, 0.3, 0.5])
    with pytest.raises(ValueError, match="unit sphere"):
        sp.PointCloud(2 * pts)
    assert np.allclose(sp.PointCloud(2 * pts, normalize=True).points, pts)
    with pytest.raises(ValueError, match="sum to 1"):
        sp.PointCloud(pts, [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=">= 0"):
        sp.PointCloud(pts, [1.5, -0.5, 0.0])
    with pytest.raises(ValueError, match=r"shape \(n,\)"):
        sp.PointCloud(pts, [0.5, 0.5])
    with pytest.raises(ValueError, match="NaN"):
        sp.PointCloud(np.full((2, 3), np.nan))
    with pytest.raises(ValueError, match=r"shape \(n, d\)"):
        sp.PointCloud(np.ones(3))


def test_measure_bad_input():
    with pytest.raises(ValueError, match="kappa"):
        M.VonMisesFisher([0, 0, 1.0], -1.0)
    with pytest.raises(ValueError, match="nonzero"):
        M.VonMisesFisher([0, 0, 0.0], 1.0)
    with pytest.raises(ValueError, match="positive definite"):
        M.ACG(np.diag([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="same sphere"):
        M.Mixture([M.Uniform(3), M.Uniform(4)])
    with pytest.raises(ValueError, match="sum to 1"):
        M.Mixture([M.Uniform(3), M.Uniform(3)], [0.5, 0.6])
    with pytest.raises(ValueError, match="positive integer"):
        M.Uniform(3).sample(0)
    with pytest.raises(TypeError, match="mixture components must be"):
        M.Mixture([1, 2])


@pytest.mark.parametrize("mean, e", [([1.0, 0.3], [0.6, 0.8]),
                                     ([1.0, 0.3, 0.2, 0.1], [0.6, 0.8, 0, 0])],
                         ids=["S1", "S3"])
def test_hemisphere_mass_vmf_other_dimensions(mean, e):
    # The half-sphere mass against the fraction of 10^6 samples: 5 binomial standard errors.
    v = M.VonMisesFisher(mean, 2.0)
    e = np.asarray(e)
    frac = float((v.sample(1_000_000, seed=6) @ e > 0).mean())
    m = v.hemisphere_mass(e)
    assert abs(m - frac) < 5 * np.sqrt(m * (1 - m) / 1e6)


# ---------------------------------------------------------------------------- lattices
def _lattice_errors(make_error, ns=(500, 2000, 8000)):
    return np.array([make_error(n) for n in ns])


def test_fibonacci_lattice_integrates_faster_than_random_points():
    # Fibonacci lattice rule for a smooth integrand against a 128 x 256 Gauss grid (exact to
    # round-off for this entire function of degree << 128). Random points err like n^-1/2
    # (a 4x step halves the error); the lattice must gain at least 8x per 4x step.
    from spherepde.sphere import fibonacci_lattice

    def f(x):
        return np.exp(2 * x[..., 0] * x[..., 1] + x[..., 2])
    g = GaussGrid(128, 256)
    ref = g.integrate(f(g.points)) / (4 * np.pi)
    err = _lattice_errors(lambda n: abs(f(fibonacci_lattice(n)).mean() - ref))
    assert np.all(err[:-1] / err[1:] > 8.0), err
    assert err[-1] < 1e-7


def test_vmf_lattice_mean_resultant_converges():
    # equal weights, points mapped through the inverse CDF of <mu, x>: the mean is
    # A(kappa) mu, A = coth - 1/kappa; measured gains 7-8x per 4x step (random: 2x)
    m = sp.measures.VonMisesFisher([0.4, 0.3, 1.0], 1.5)

    def error(n):
        c = m.lattice(n)
        assert c.n == n and np.allclose(c.weights, 1.0 / n)
        return np.linalg.norm(c.weights @ c.points - m.mean * (1 / np.tanh(1.5) - 1 / 1.5))

    err = _lattice_errors(error)
    assert np.all(err[:-1] / err[1:] > 5.0), err
    assert err[-1] < 1e-5


def test_mixture_and_weighted_lattices():
    # the mixture splits n by its weights (largest remainders); a measure without an inverse
    # CDF (ACG) is weighted by its density on the Fibonacci lattice
    v1 = sp.measures.VonMisesFisher([0.4, 0.3, 1.0], 1.5)
    v2 = sp.measures.VonMisesFisher([-0.3, -1.0, -0.4], 4.0)
    mix = sp.measures.Mixture([v1, v2], [0.6, 0.4])
    exact = 0.6 * v1.mean * (1 / np.tanh(1.5) - 1 / 1.5) + 0.4 * v2.mean * (1 / np.tanh(4) - 0.25)
    for n in (1001, 8000):
        c = mix.lattice(n)
        assert c.n == n and abs(c.weights.sum() - 1) < 1e-12
    assert np.linalg.norm(c.weights @ c.points - exact) < 1e-4  # measured 2.2e-5
    acg = sp.measures.ACG(np.diag([1.0, 2.0, 3.0]))
    g = GaussGrid(128, 256)
    ref = g.integrate(acg.density(g.points) * g.points[..., 0] ** 2)
    c = acg.lattice(8000)
    assert abs(c.weights @ c.points[:, 0] ** 2 - ref) < 1e-7  # measured 1.7e-8


def test_circle_lattice_is_spectrally_accurate():
    # on S^1 the weighted equispaced grid is the trapezoid rule: the von Mises mean resultant
    # I1/I0 to round-off with 32 points
    m = sp.measures.VonMisesFisher([1.0, 0.0], 2.0)
    c = m.lattice(32)
    assert abs(c.weights @ c.points[:, 0] - special.ive(1, 2.0) / special.ive(0, 2.0)) < 1e-13


def test_lattice_bad_input():
    with pytest.raises(NotImplementedError, match="sample"):
        sp.measures.Uniform(4).lattice(10)
    with pytest.raises(ValueError, match="positive integer"):
        sp.measures.Uniform(3).lattice(0)
    mix = sp.measures.Mixture([sp.measures.Uniform(3), sp.measures.Uniform(3)])
    with pytest.raises(ValueError, match="n >= 2"):
        mix.lattice(1)
