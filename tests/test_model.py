"""Model: B, A, the docs/theory.md §3.1 assumption report, Pi and its push-forward, the velocity."""
import numpy as np
import pytest

import spherepde as sp
from spherepde.sphere import check_rotation, normalize, random_rotation, rotation_about_axis


def test_B_and_A_follow_the_spec():
    rng = np.random.default_rng(0)
    Q, K, V = rng.standard_normal((3, 4, 4))
    m = sp.Model(Q, K, V, beta=2.0)
    np.testing.assert_array_equal(m.B, Q.T @ K)
    np.testing.assert_array_equal(m.A, V @ (Q.T @ K).T)
    x, y = normalize(rng.standard_normal((2, 4)))
    # <Qx, Ky> = <x, B y>, exactly the identity the velocity relies on.
    assert np.isclose((Q @ x) @ (K @ y), x @ m.B @ y, rtol=1e-13)


def test_assumption_report_dim_E_one():
    m = sp.Model(V=np.diag([3.0, 1.0, 1.0]), beta=np.inf)
    rep = m.check_assumptions()
    assert rep.ok and rep.B_invertible and rep.A_symmetric
    assert rep.dim_E == 1 and rep.gap == pytest.approx(2.0, rel=1e-14)
    np.testing.assert_allclose(rep.eigenvalues, [3.0, 1.0, 1.0])
    assert "gap" in str(rep)


def test_assumption_report_names_the_failure():
    rng = np.random.default_rng(1)
    rep = sp.Model(V=rng.standard_normal((3, 3)), beta=1.0).check_assumptions()
    assert not rep.ok and not rep.A_symmetric
    assert any("not symmetric" in p for p in rep.problems)
    sing = sp.Model(K=np.diag([1.0, 1.0, 0.0]), beta=1.0).check_assumptions()
    assert not sing.B_invertible and sing.B_condition > 1e12


def test_projection_dim_E_one():
    m = sp.Model(V=np.diag([1.0, 2.0, 0.5]), beta=np.inf)  # E = span(e_y)
    x = normalize(np.array([[0.3, 0.4, -0.8], [0.1, -0.2, 0.9], [1.0, 0.0, 0.0]]))
    p = m.projection(x)
    np.testing.assert_allclose(p[0], [0, 1, 0], atol=1e-15)
    np.testing.assert_allclose(p[1], [0, -1, 0], atol=1e-15)
    assert np.all(np.isnan(p[2]))  # x in E^perp: Pi undefined


def test_projection_dim_E_two_with_rotated_basis():
    O = random_rotation(4, seed=3)
    A = O @ np.diag([2.0, 2.0, 1.0, -1.0]) @ O.T
    m = sp.Model(V=A, beta=np.inf)
    assert m.check_assumptions().dim_E == 2
    x = normalize(np.random.default_rng(2).standard_normal((50, 4)))
    p = m.projection(x)
    E = O[:, :2]
    expected = normalize((x @ E) @ E.T)
    np.testing.assert_allclose(p, expected, atol=1e-14)
    np.testing.assert_allclose(np.linalg.norm(p, axis=1), 1.0, atol=1e-14)
    # Pi is idempotent
    np.testing.assert_allclose(m.projection(p), p, atol=1e-14)


def test_limit_measure_of_vmf_matches_independent_quadrature():
    # dim E = 1 along e; the atom masses are the half-sphere masses of the vMF measure.
    e = normalize(np.array([1.0, 2.0, -0.5]))
    O = random_rotation(3, seed=4)
    lam = np.array([1.0, 0.2, -0.4])
    P = np.linalg.qr(np.column_stack([e, O[:, 1:]]))[0]
    P[:, 0] = e
    A = P @ np.diag(lam) @ P.T
    m = sp.Model(V=A, beta=np.inf)
    mu0 = sp.measures.VonMisesFisher([0.3, -0.2, 1.0], kappa=4.0)
    lim = m.limit_measure(mu0)
    e_model = m.dominant_subspace()[:, 0]
    # Independent quadrature: a fine Gauss grid in (theta, phi) of the density itself.
    grid = sp.sphere.GaussGrid(400, 800)
    f = mu0.density(grid.points) * (grid.points @ e_model > 0)
    m_plus = float(np.sum(f * grid.weights))
    i_plus = int(np.argmax(lim.points @ e_model))
    # The half-sphere indicator is discontinuous on the grid: error ~ (pi/400)^2·density.
    assert lim.weights[i_plus] == pytest.approx(m_plus, abs=2e-4)
    # Tighter: the generic hemisphere quadrature (smooth on each half) to 1e-10.
    generic = sp.measures.Measure.hemisphere_mass(mu0, e_model)
    assert lim.weights[i_plus] == pytest.approx(generic, abs=1e-10)


def test_limit_measure_of_a_cloud_is_the_pushforward():
    m = sp.Model(V=np.diag([2.0, 2.0, 1.0]), beta=np.inf)  # dim E = 2
    x = sp.measures.Uniform(3).sample(100, seed=5)
    lim = m.limit_measure(sp.PointCloud(x))
    np.testing.assert_allclose(lim.points, m.projection(x), atol=0)
    np.testing.assert_allclose(lim.points[:, 2], 0.0, atol=1e-15)


def test_projection_refuses_failed_assumptions():
    with pytest.raises(sp.AssumptionError, match="not symmetric"):
        sp.Model(V=np.array([[1.0, 1.0, 0], [0, 0.5, 0], [0, 0, 0.1]])).projection(np.eye(3))
    with pytest.raises(sp.AssumptionError, match="no spectral gap"):
        sp.Model(beta=1.0).projection(np.eye(3))


def _velocity_by_quadrature(model, x, density, n=200):
    """X[rho](x) for a density on S^2 by a Gauss grid (independent of the kernels)."""
    grid = sp.sphere.GaussGrid(n, 2 * n)
    y = grid.points.reshape(-1, 3)
    w = (grid.weights * density(grid.points)).ravel()
    logits = model.beta * (x @ model.B @ y.T)
    e = np.exp(logits - logits.max()) * w
    num = e @ (y @ model.V.T)
    v = num / e.sum() if model.normalized else num * np.exp(logits.max())
    return v - (x @ v) * x


@pytest.mark.parametrize("normalized", [True, False])
def test_velocity_sa_usa_against_quadrature(normalized):
    rng = np.random.default_rng(6)
    V = rng.standard_normal((3, 3))
    K = rng.standard_normal((3, 3))
    m = sp.Model(K=K, V=V, beta=1.5, normalized=normalized)
    rho = sp.measures.VonMisesFisher([0, 0, 1.0], 2.0)
    grid = sp.sphere.GaussGrid(200, 400)
    pts = grid.points.reshape(-1, 3)
    w = (grid.weights * rho.density(grid.points)).ravel()
    x = normalize(rng.standard_normal(3))
    v = m.velocity(x, pts, w / w.sum())
    # The grid integrates the smooth integrand to ~1e-15; the weights' renormalization is 1e-15.
    np.testing.assert_allclose(v, _velocity_by_quadrature(m, x, rho.density), atol=1e-12)
    assert abs(v @ x) < 1e-14  # tangent


def test_velocity_large_beta_is_finite_and_tends_to_the_local_field():
    O = random_rotation(3, seed=8)
    V = np.diag([1.0, 0.3, -0.5]) @ O  # A = V O^T symmetric
    m = sp.Model(K=O, V=V, beta=1e6)
    pts = sp.measures.Uniform(3).sample(4000, seed=9)
    x = pts[:5]
    v = m.velocity(x, pts)
    assert np.all(np.isfinite(v))
    # At beta = 1e6 the softmax picks y* = argmax <x, B y> among the points: hardmax.
    hm = sp.Model(K=O, V=V, beta=np.inf, hardmax=True).velocity(x, pts)
    # Laplace: the other atoms carry softmax mass <= sum_j e^{-beta gap_j}, each moving the
    # (projected) output by at most 2 ||V||.
    logits = x @ m.B @ pts.T
    gaps = logits.max(axis=1, keepdims=True) - logits
    tail = np.sum(np.exp(-m.beta * gaps), axis=1) - 1.0
    bound = 2 * np.linalg.norm(V, 2) * tail + 1e-12
    assert np.all(np.linalg.norm(v - hm, axis=1) <= bound)
    assert np.median(bound) < 1e-10  # and the bound is not vacuous


def test_zero_temperature_velocity_is_the_local_field():
    rng = np.random.default_rng(10)
    K = rng.standard_normal((3, 3))
    m = sp.Model(K=K, V=np.eye(3), beta=np.inf)
    x = normalize(rng.standard_normal((6, 3)))
    Ax = x @ m.A.T
    expected = ((Ax - np.sum(Ax * x, 1, keepdims=True) * x)
                / np.linalg.norm(x @ m.B, axis=1)[:, None])
    np.testing.assert_allclose(m.velocity(x), expected, atol=1e-15)


def test_usa_velocity_beyond_float64_raises():
    pts = np.eye(3)
    with pytest.raises(FloatingPointError, match="normalized=True"):
        sp.Model(beta=1e4, normalized=False).velocity(pts, pts)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(beta=-1.0), r"beta must lie in \[0, inf\]"),
        (dict(beta=np.nan), r"beta must lie in \[0, inf\]"),
        (dict(beta="hot"), "beta must be a number"),
        (dict(V=np.eye(2), d=3), r"V must have shape \(d, d\)"),
        (dict(Q=np.full((3, 3), np.nan)), "Q contains NaN"),
        (dict(beta=np.inf, normalized=False), "normalized=True"),
        (dict(d=1), "d must be an integer >= 2"),
    ],
)
def test_model_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sp.Model(**kwargs)


def test_velocity_bad_input():
    m = sp.Model(beta=1.0)
    pts = np.eye(3)
    with pytest.raises(ValueError, match="unit sphere"):
        m.velocity(2 * pts, pts)
    with pytest.raises(ValueError, match="NaN"):
        m.velocity(np.full((1, 3), np.nan), pts)
    with pytest.raises(ValueError, match="last dimension d = 3"):
        m.velocity(np.eye(2), pts)
    with pytest.raises(ValueError, match="sum to 1"):
        m.velocity(pts, pts, [0.5, 0.5, 0.5])
    with pytest.raises(ValueError, match=r"shape \(n,\)"):
        m.velocity(pts, pts, [0.5, 0.5])


def test_rotation_about_axis():
    axis = np.array([1.0, 2.0, -2.0])  # length 3
    R = check_rotation(rotation_about_axis(axis, 0.7))  # orthogonal with det +1
    np.testing.assert_allclose(R @ axis, axis, atol=1e-15)  # the axis is fixed
    u = np.array([2.0, -1.0, 0.0]) / np.sqrt(5.0)  # unit, perpendicular to the axis
    # a perpendicular vector turns by the angle, counter-clockwise about the axis
    assert abs(u @ R @ u - np.cos(0.7)) < 1e-15
    assert abs(np.cross(u, R @ u) @ axis / 3.0 - np.sin(0.7)) < 1e-15
    with pytest.raises(ValueError, match="non-zero vector of shape"):
        rotation_about_axis([0.0, 0.0, 0.0], 1.0)
