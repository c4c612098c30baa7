"""The lone-cluster flow x' = P_x V x and the conjectured terminal measure built on it."""
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import spherepde as sp
from spherepde.sphere import normalize, rotation_about_axis


def _oja(V):
    return lambda t, x: V @ x - (x @ V @ x) * x


def test_cluster_flow_diagonal_closed_form():
    # V = diag(2, 1, 0.5): e^{tV}x / |e^{tV}x| componentwise, and the limit sign(x1) e1.
    lam = np.array([2.0, 1.0, 0.5])
    m = sp.Model(V=np.diag(lam), beta=np.inf)
    x = normalize(np.array([[0.6, 0.8, 0.0], [-0.3, 0.5, 0.81], [0.1, -0.9, 0.2]]))
    for t in (0.0, 0.7, 4.0):
        want = normalize(x * np.exp(lam * t))
        # expm of a diagonal matrix and a normalisation: round-off only
        np.testing.assert_allclose(m.cluster_flow(x, t), want, atol=1e-13)
    np.testing.assert_allclose(m.cluster_flow(x, np.inf),
                               np.sign(x[:, :1]) * np.array([1.0, 0.0, 0.0]), atol=1e-13)


def test_cluster_flow_multiple_eigenvalue_limit_is_the_normalised_projection():
    # V = diag(1, 1, 0): the dominant eigenspace is the plane x3 = 0; Phi_inf(x) = P x / |P x|.
    m = sp.Model(V=np.diag([1.0, 1.0, 0.0]), beta=np.inf)
    x = normalize(np.array([[0.3, -0.4, 0.9]]))
    np.testing.assert_allclose(m.cluster_flow(x, np.inf), [[0.6, -0.8, 0.0]], atol=1e-13)


def test_cluster_flow_matches_the_ode_and_its_limit_for_a_nonnormal_V():
    # A non-normal V with a real dominant eigenvalue: the side is set by the LEFT eigenvector
    # u (u^T V = lambda u^T), not by v's orthogonal hyperplane. Points are chosen on opposite
    # sides of the two hyperplanes' wedge, where the two rules disagree.
    rng = np.random.default_rng(3)
    V = np.array([[1.0, 2.0, 0.0], [0.0, 0.3, 0.0], [0.5, 0.0, -0.2]])
    m = sp.Model(V=V, beta=np.inf)
    ev, R = np.linalg.eig(V)
    v = np.real(R[:, np.argmax(ev.real)])
    evl, L = np.linalg.eig(V.T)
    u = np.real(L[:, np.argmax(evl.real)])
    u *= np.sign(u @ v)
    x0 = normalize(rng.standard_normal((40, 3)))
    x0 = x0[np.abs(x0 @ u) > 0.05]  # away from u's hyperplane: the flow leaves it at rate >= 0.05
    assert np.any(np.sign(x0 @ u) != np.sign(x0 @ v))  # the wedge is sampled
    for x in x0[:8]:
        sol = solve_ivp(_oja(V), (0.0, 5.0), x, rtol=1e-11, atol=1e-12)
        # the integrator's tolerance 1e-11 over t = 5, against a closed form
        np.testing.assert_allclose(sol.y[:, -1], m.cluster_flow(x, 5.0), atol=1e-8)
    lim = m.cluster_flow(x0, np.inf)
    np.testing.assert_allclose(lim, np.sign(x0 @ u)[:, None] * v / np.linalg.norm(v), atol=1e-12)
    for x, want in zip(x0[:8], lim[:8], strict=True):
        # t = 60: the next eigenvalue's mode is down by e^{-0.7 * 60} ~ 6e-19 relative
        sol = solve_ivp(_oja(V), (0.0, 60.0), x, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(sol.y[:, -1], want, atol=1e-7)


def test_cluster_flow_complex_pair_has_no_limit():
    # A rotation by 0.9 about (1, 1, 1) scaled: its dominant pair is complex.
    m = sp.Model(V=np.diag([1.0, 0.4, 0.0]) @ rotation_about_axis([1, 1, 1], 0.9), beta=64.0)
    with pytest.raises(sp.model.AssumptionError, match="complex"):
        m.cluster_flow([1.0, 0.0, 0.0], np.inf)
    with pytest.raises(ValueError, match="t must be"):
        m.cluster_flow([1.0, 0.0, 0.0], -1.0)
    # finite t stays on the sphere, in V's invariant plane x3 = 0 (V's third row is zero)
    y = m.cluster_flow([1.0, 0.0, 0.0], 7.3)
    assert abs(np.linalg.norm(y) - 1) < 1e-14 and abs(y[2]) < 1e-14


def test_terminal_measure_dim_E_one_moves_the_two_atoms():
    # B = diag(1, 0.25, 1), V = diag(1, 2, 0): A = V B^T = diag(1, 0.5, 0), so E = span e1,
    # while V's dominant eigenvector is e2 (u = e2 too). The atoms +-e1 of Pi#mu0 lie on
    # u^perp: the limit is undefined there and the call says so.
    m = sp.Model(K=np.diag([1.0, 0.25, 1.0]), V=np.diag([1.0, 2.0, 0.0]), beta=16.0)
    np.testing.assert_allclose(m.dominant_subspace()[:, 0] ** 2, [1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="invariant hyperplane"):
        m.terminal_measure(sp.measures.VonMisesFisher([1.0, 0.2, 0.1], 2.0))
    # With V = A R^T for a small rotation R about e3, A = V R stays diagonal: Pi#mu0 = atoms
    # at +-e1, each sent to sign(<u, +-e1>) v; the masses are mu0's half-sphere masses.
    R = rotation_about_axis([0.0, 0.0, 1.0], 0.3)
    A = np.diag([2.0, 1.0, 0.0])
    m = sp.Model(K=R, V=A @ R, beta=16.0)
    mu0 = sp.measures.VonMisesFisher([0.4, 0.3, 1.0], 1.5)
    term = m.terminal_measure(mu0)
    lim = m.limit_measure(mu0)
    ev, Rv = np.linalg.eig(m.V)
    v = normalize(np.real(Rv[:, np.argmax(ev.real)]))
    evl, L = np.linalg.eig(m.V.T)
    u = np.real(L[:, np.argmax(evl.real)])
    s = np.sign(u @ v) * np.sign(u @ lim.points[0])
    plus = np.argmax(term.points @ (s * v))
    np.testing.assert_allclose(term.points[plus], s * v, atol=1e-12)
    np.testing.assert_allclose(term.points[1 - plus], -s * v, atol=1e-12)
    np.testing.assert_allclose(term.weights[plus], lim.weights[0], atol=1e-14)
    # at t = 0 it is Pi#mu0 itself
    np.testing.assert_allclose(m.terminal_measure(mu0, 0.0).weights.sum(), 1.0)


def test_terminal_measure_dim_E_two_is_two_atoms_with_hemisphere_masses():
    # A = diag(1, 1, 0.4) (E = the plane x3 = 0), B = a rotation O, V = A O: Pi#mu0 lives on
    # the circle; Phi_inf sends a circle point x to sign(<u, x>) v, so the mass of +v is the
    # mu0-mass of {<P_E u, x> > 0}, a half-sphere mass with normal P_E u.
    O = rotation_about_axis([1.0, 1.0, 1.0], 0.9)
    m = sp.Model(K=O, V=np.diag([1.0, 1.0, 0.4]) @ O, beta=64.0)
    mu0 = sp.measures.VonMisesFisher([0.4, 0.3, 1.0], 1.5)
    cloud = mu0.lattice(40000)
    term = m.terminal_measure(cloud)
    assert term.n == 2
    evl, L = np.linalg.eig(m.V.T)
    u = np.real(L[:, np.argmax(evl.real)])
    ev, R = np.linalg.eig(m.V)
    v = normalize(np.real(R[:, np.argmax(ev.real)]))
    u *= np.sign(u @ v)
    Pu = np.array([u[0], u[1], 0.0])
    k = int(np.argmax(term.points @ v))
    np.testing.assert_allclose(term.points[k], v, atol=1e-12)
    # the lattice's masses against the closed-form half-sphere mass: quadrature error of a
    # 40000-point lattice on a smooth density, O(1e-4) (measured 2e-5)
    assert abs(term.weights[k] - mu0.hemisphere_mass(normalize(Pu))) < 5e-4
