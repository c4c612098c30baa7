"""Diagnostics against direct formulas and configurations with known answers."""
import numpy as np
import pytest

import spherepde as sp
from spherepde.analysis import diagnostics as dg


def test_energy_matches_dense_double_sum(sphere_points):
    x = sphere_points(300, 4, seed=1)
    w = np.random.default_rng(2).random(300)
    w /= w.sum()
    beta = 3.0
    dense = (w @ np.exp(beta * x @ x.T) @ w) / (2 * beta)
    # two summation orders of positive terms: relative round-off ~ 1e-15, 1e-12 with margin
    assert dg.interaction_energy(x, w, beta=beta) == pytest.approx(dense, rel=1e-12)


def test_energy_of_a_single_cluster_and_log_form():
    beta = 800.0  # e^beta overflows float64: only the log form can report it
    x = np.tile([[0.0, 0.0, 1.0]], (5, 1))
    # all pairs have <x, y> = 1: E = e^beta / (2 beta) exactly
    assert dg.interaction_energy(x, beta=beta, log=True) == pytest.approx(
        beta - np.log(2 * beta), rel=1e-14)
    with pytest.raises(ValueError, match="beta > 0"):
        dg.interaction_energy(x, beta=0.0)


def test_mean_inner_product(sphere_points):
    x = sphere_points(50, 3, seed=3)
    G = x @ x.T
    off = (G.sum() - np.trace(G)) / (50 * 49)
    # closed form |sum w x|^2 vs the direct average: round-off only
    assert dg.mean_inner_product(x) == pytest.approx(off, abs=1e-14)
    assert dg.mean_inner_product(x, exclude_diagonal=False) == pytest.approx(G.mean(), abs=1e-14)


def test_cluster_count_threshold(sphere_points):
    rng = np.random.default_rng(4)
    centers = sphere_points(3, 3, seed=5)
    pts = np.repeat(centers, 10, axis=0) + 1e-5 * rng.standard_normal((30, 3))
    pts /= np.linalg.norm(pts, axis=1, keepdims=True)
    # spread 1e-5 << tol = 1e-3 << separation of random centers (~1)
    assert dg.cluster_count(pts) == 3
    labels, leaders, masses = dg.clusters(pts)
    np.testing.assert_allclose(masses, np.full(3, 1 / 3), rtol=1e-14)  # 10 of 30 tokens each
    # below the spread every token is its own cluster
    assert dg.cluster_count(pts, tol=1e-8) == 30


def test_common_hemisphere():
    e = np.eye(3)
    assert dg.common_hemisphere(np.vstack([e, -e]))[0] is False  # antipodal pairs
    # an equilateral triangle on the equator has mean 0 and is not in any open hemisphere
    tri = np.array([[1.0, 0.0, 0.0], [-0.5, np.sqrt(3) / 2, 0.0], [-0.5, -np.sqrt(3) / 2, 0.0]])
    assert dg.common_hemisphere(tri)[0] is False
    # lifting it slightly puts it in {z > 0}; the mean test alone finds v = e_z
    ok, v = dg.common_hemisphere(sp.sphere.normalize(tri + [0.0, 0.0, 0.1]))
    assert ok and np.min(sp.sphere.normalize(tri + [0, 0, 0.1]) @ v) > 0
    # a set whose weighted mean fails the quick test but which is in a hemisphere (LP path)
    pts = sp.sphere.normalize(np.array([[1.0, 0.0, 0.01], [1.0, 0.0, -0.01], [-0.9, 1.0, 0.0]]))
    ok, v = dg.common_hemisphere(pts, weights=[0.05, 0.05, 0.9])
    assert ok and np.min(pts @ v) > 0
