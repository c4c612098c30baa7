r"""Transport costs on S^{d-1} and their exact c-transforms.

Chordal :math:`c(x, y) = |x - y|^2 = 2 - 2\langle x, y\rangle` (the default) and geodesic
:math:`c(x, y) = \theta^2`, :math:`\theta = \arccos\langle x, y\rangle = 2\arcsin(|x-y|/2)`.
The geodesic cost is an increasing function of the chordal one,
:math:`h(s) = (2\arcsin(\sqrt{s}/2))^2 \ge s`, which is what lets one search tree serve both.
"""
from __future__ import annotations

import numpy as np

__all__ = ["COSTS", "cost_matrix", "check_cost", "cost_diameter", "geodesic_from_chordal",
           "c_transform"]

COSTS = ("chordal", "geodesic")
#: Above this cosine, |x - y|^2 is recomputed from the difference to avoid cancellation.
_NEAR_COS = 0.9


def check_cost(cost: str) -> str:
    if cost not in COSTS:
        raise ValueError(f"unknown cost {cost!r}; allowed: {', '.join(map(repr, COSTS))}")
    return cost


def cost_diameter(cost: str) -> float:
    """sup of the cost on the sphere: |x - y|^2 <= 4, arccos^2 <= pi^2."""
    return 4.0 if cost == "chordal" else np.pi**2


def geodesic_from_chordal(s):
    r"""h(s) = (2 arcsin(sqrt(s)/2))^2: the geodesic cost from the chordal one, s in [0, 4]."""
    return (2.0 * np.arcsin(np.minimum(np.sqrt(np.maximum(s, 0.0)) * 0.5, 1.0)))**2


def cost_matrix(x, y, cost: str = "chordal") -> np.ndarray:
    r"""Pairwise cost between points on the sphere, x: (n, d), y: (m, d) -> (n, m).

    chordal: :math:`|x - y|^2 = 2 - 2\langle x, y\rangle`; geodesic:
    :math:`\theta^2 = (2 \arcsin(|x - y|/2))^2`. Near-coincident (and, for the geodesic cost,
    near-antipodal) pairs are recomputed from the difference vector, so small costs keep full
    relative accuracy instead of the 1e-16 absolute accuracy of 2 - 2<x, y>.
    """
    check_cost(cost)
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    g = x @ y.T
    c = 2.0 - 2.0 * g
    i, j = np.nonzero(g > _NEAR_COS)
    if i.size:
        diff = x[i] - y[j]
        c[i, j] = np.einsum("kd,kd->k", diff, diff)
    np.clip(c, 0.0, 4.0, out=c)
    if cost == "chordal":
        return c
    theta = 2.0 * np.arcsin(np.minimum(np.sqrt(c) * 0.5, 1.0))
    i, j = np.nonzero(g < -_NEAR_COS)
    if i.size:
        s = x[i] + y[j]
        theta[i, j] = np.pi - 2.0 * np.arcsin(
            np.minimum(0.5 * np.sqrt(np.einsum("kd,kd->k", s, s)), 1.0))
    return theta**2


def _pair_cost(x, y, cost):
    """c(x_k, y_k) row by row, x, y: (K, d) -> (K,), accurate for near and far pairs."""
    diff = x - y
    s = np.einsum("kd,kd->k", diff, diff)
    if cost == "chordal":
        return s
    theta = 2.0 * np.arcsin(np.minimum(np.sqrt(s) * 0.5, 1.0))
    far = s > 2.0
    if np.any(far):
        p = x[far] + y[far]
        theta[far] = np.pi - 2.0 * np.arcsin(
            np.minimum(0.5 * np.sqrt(np.einsum("kd,kd->k", p, p)), 1.0))
    return theta**2


def c_transform(x, f, y, cost: str = "chordal", tree=None, init=None):
    r"""Exact c-transform :math:`f^c(y_j) = \min_k c(x_k, y_j) - f_k`, with its argmin.

    x: (K, d) points with potential f: (K,); y: (m, d) -> (f^c (m,), argmin (m,)).
    A branch-and-bound search in a :class:`~spherepde.wasserstein.search.ConeTree` over x
    (pass ``tree``, built on x, to reuse it; ``init``: (m,) candidate indices, e.g. the
    previous argmin, which only speed it up). The minimum is evaluated from the points (not
    from bounds), so f^c(y) + f(x) <= c(x, y) holds to the round-off of one cost.
    """
    from .search import ConeTree

    check_cost(cost)
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    tree = ConeTree(x) if tree is None else tree
    return tree.fit(f).cmin(y, cost, init)
