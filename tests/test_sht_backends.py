"""The SHT backend layer: every installed backend against exact identities, each other, and a
library-free direct evaluation."""
import sys

import numpy as np
import pytest

import spherepde as sp
from spherepde.sphere import random_rotation
from spherepde.transforms import sht as bk

AVAILABLE = bk.available_backends()
L = 12
NLAT, NLON = 32, 64  # shtns' smallest Gauss grid; exact for degree-L fields and their products


@pytest.fixture(params=AVAILABLE)
def sht(request):
    return bk.get_backend(request.param)(L, NLAT, NLON)


def random_coefficients(sht, seed=0, decay=0.2):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(sht.nlm) + 1j * rng.standard_normal(sht.nlm)) * np.exp(-decay * sht.l)
    a[sht.m == 0] = a[sht.m == 0].real  # real field: m = 0 coefficients are real
    return a


def test_scalar_round_trip(sht):
    # analysis is exact on band-limited fields (Gauss quadrature of degree 2 NLAT - 1 >= 2L)
    a = random_coefficients(sht)
    assert np.abs(sht.analysis(sht.synthesis(a)) - a).max() < 1e-13


def test_synthesis_matches_direct_evaluation(sht):
    # the library and the textbook Legendre recursion compute the same sum: round-off apart
    a = random_coefficients(sht, 1)
    f = sht.synthesis(a)
    ref = bk.evaluate_points(a, L, sht.grid().points, method="direct")
    assert np.abs(f - ref).max() < 1e-12 * np.abs(ref).max()


def test_fast_point_evaluation_matches_direct_sum(sphere_points):
    # ducc0's non-equispaced synthesis against the textbook recursion, at scattered points:
    # its requested accuracy GENERAL_SYNTHESIS_EPS is relative to the l1 size of the field
    rng = np.random.default_rng(3)
    lmax = 40
    l, m = bk.lm_arrays(lmax)
    a = (rng.standard_normal(l.size) + 1j * rng.standard_normal(l.size)) * np.exp(-0.1 * l)
    a[m == 0] = a[m == 0].real
    x = sphere_points(600, 3, seed=4).reshape(2, 300, 3)
    ref = bk.evaluate_points(a, lmax, x, method="direct")
    got = bk.evaluate_points(np.stack([a, 2 * a]), lmax, x, method="ducc0")
    assert got.shape == (2, 2, 300)
    scale = 2 * np.abs(a).sum()
    assert np.abs(got[0] - ref).max() < 10 * bk.GENERAL_SYNTHESIS_EPS * scale
    assert np.abs(got[1] - 2 * ref).max() < 20 * bk.GENERAL_SYNTHESIS_EPS * scale
    with pytest.raises(ValueError, match="method"):
        bk.evaluate_points(a, lmax, x, method="fast")


def test_gradient_of_z(sht):
    # z = cos(theta) = sqrt(4 pi/3) Y_10, and grad z = -sin(theta) e_theta exactly
    a = np.zeros(sht.nlm, complex)
    a[1] = np.sqrt(4 * np.pi / 3)
    vt, vp = sht.gradient(a)
    theta = sht.grid().theta
    assert np.abs(vt + np.sin(theta)[:, None]).max() < 1e-13
    assert np.abs(vp).max() < 1e-13


def test_vector_round_trip_and_divergence(sht):
    # v = grad S + r x grad T is recovered exactly (l >= 1), and div v = Laplacian S
    s, t = random_coefficients(sht, 2), random_coefficients(sht, 3)
    vt, vp = sht.vector_synthesis(s, t)
    s2, t2 = sht.vector_analysis(vt, vp)
    k = sht.l > 0
    assert np.abs(s2 - s)[k].max() < 1e-13 and np.abs(t2 - t)[k].max() < 1e-13
    assert np.abs(sht.divergence(vt, vp) + sht.llp1 * s).max() < 1e-11


@pytest.mark.parametrize("seed", [5, 6])
def test_rotation(sht, seed):
    # rotate(a, R) represents x -> f(R^T x): compare at points, by direct evaluation
    a = random_coefficients(sht, seed)
    R = random_rotation(3, seed)
    x = sht.grid().points[::3, ::5]
    got = bk.evaluate_points(sht.rotate(a, R), L, x, method="direct")
    ref = bk.evaluate_points(a, L, x @ R, method="direct")
    assert np.abs(got - ref).max() < 1e-12 * np.abs(ref).max()


@pytest.mark.skipif("shtns" not in bk.available_backends(), reason="shtns is not installed")
def test_shtns_own_rotation():
    # ShtnsBackend rotates with ducc0 when it can; its own shtns path must be right as well.
    sht = bk.ShtnsBackend(L, max(L + 2, bk.ShtnsBackend.min_nlat), bk.fft_size(2 * L + 2))
    sht.rotate_with_ducc0 = False
    a = random_coefficients(sht, 7)
    R = random_rotation(3, 7)
    x = sht.grid().points[::3, ::5]
    got = bk.evaluate_points(sht.rotate(a, R), L, x, method="direct")
    ref = bk.evaluate_points(a, L, x @ R, method="direct")
    assert np.abs(got - ref).max() < 1e-12 * np.abs(ref).max()


def test_rotation_rejects_reflections(sht):
    with pytest.raises(ValueError, match="rotation"):
        sht.rotate(random_coefficients(sht), -np.eye(3))


@pytest.mark.skipif(len(AVAILABLE) < 2, reason="needs both shtns and ducc0")
def test_backends_agree():
    # same conventions, same grid: every operation agrees to 1e-12
    a_sh = bk.ShtnsBackend(L, NLAT, NLON)
    a_du = bk.Ducc0Backend(L, NLAT, NLON)
    a = random_coefficients(a_sh, 7)
    f = a_sh.synthesis(a)
    assert np.abs(f - a_du.synthesis(a)).max() < 1e-12
    assert np.abs(a_sh.analysis(f) - a_du.analysis(f)).max() < 1e-12
    for u, v in zip(a_sh.vector_synthesis(a, 2 * a), a_du.vector_synthesis(a, 2 * a),
                    strict=True):
        assert np.abs(u - v).max() < 1e-12
    vt, vp = a_sh.gradient(a)
    for u, v in zip(a_sh.vector_analysis(vt, vp), a_du.vector_analysis(vt, vp), strict=True):
        assert np.abs(u - v).max() < 1e-12
    R = random_rotation(3, 9)
    assert np.abs(a_sh.rotate(a, R) - a_du.rotate(a, R)).max() < 1e-12


def test_fallback_without_shtns(monkeypatch):
    # a missing shtns (import fails) makes "auto" pick ducc0, and the solver still runs
    if "ducc0" not in AVAILABLE:
        pytest.skip("ducc0 not installed")
    monkeypatch.setitem(sys.modules, "shtns", None)
    assert bk.available_backends() == ["ducc0"]
    assert bk.get_backend("auto") is bk.Ducc0Backend
    with pytest.raises(ImportError, match="not installed"):
        bk.get_backend("shtns")
    import spherepde as sp

    sol = sp.SpectralSolver(sp.Model(beta=1.0), lmax=10).solve(
        sp.measures.VonMisesFisher([0, 0, 1.0], 1.0), [0.0, 0.1])
    assert sol.sht_library == "ducc0"


def test_grid_size_errors():
    with pytest.raises(ValueError, match="nlat"):
        bk.get_backend(AVAILABLE[0])(L, L, 2 * L + 2)


def test_fft_size():
    assert [bk.fft_size(n) for n in (1, 7, 31, 97)] == [2, 8, 32, 100]


def test_degree_power_matches_pyshtools():
    # An independent library: pyshtools' Gauss-Legendre expansion (orthonormal, real harmonics)
    # and ours (complex layout of a real field) must give the same power per degree, which does
    # not depend on either library's phase or real/complex conventions. vMF(kappa = 3) has
    # coefficients < 1e-16 beyond degree 40, so neither quadrature aliases: round-off agreement.
    pysh = pytest.importorskip("pyshtools")
    L = 20
    rho = sp.measures.VonMisesFisher([0.3, -0.5, 1.0], 3.0)
    lat, lon = pysh.expand.GLQGridCoord(L)
    th, ph = np.radians(90 - lat)[:, None], np.radians(lon)[None, :]
    pts = np.stack(np.broadcast_arrays(np.sin(th) * np.cos(ph), np.sin(th) * np.sin(ph),
                                       np.cos(th)), -1)
    zero, w = pysh.expand.SHGLQ(L)
    c = pysh.expand.SHExpandGLQ(rho.density(pts), w, zero, norm=4, csphase=1)
    power_pysh = (c**2).sum(axis=(0, 2))
    a = sp.SpectralSolver(sp.Model(beta=1.0), lmax=L).project(rho)
    ell, m = bk.lm_arrays(L)
    power = np.bincount(ell, weights=np.where(m == 0, 1.0, 2.0) * np.abs(a) ** 2, minlength=L + 1)
    np.testing.assert_allclose(power, power_pysh, rtol=1e-12, atol=1e-15 * power.max())
