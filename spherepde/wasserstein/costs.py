r"""Transport costs on S^{d-1} and their exact c-transforms.

Chordal :math:`c(x, y) = |x - y|^2 = 2 - 2\langle x, y\rangle` (the default) and geodesic
:math:`c(x, y) = \theta^2`, :math:`\theta = \arccos\langle x, y\rangle = 2\arcsin(|x-y|/2)`.
The geodesic cost is an increasing function of the chordal one,
:math:`h(s) = (2\arcsin(\sqrt{s}/2))^2 \ge s`, which is what lets one KD-tree serve both.
"""
from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

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
        theta[i, j] = np.pi - 2.0 * np.arcsin(np.minimum(0.5 * np.sqrt(np.einsum("kd,kd->k", s, s)), 1.0))
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
        theta[far] = np.pi - 2.0 * np.arcsin(np.minimum(0.5 * np.sqrt(np.einsum("kd,kd->k", p, p)), 1.0))
    return theta**2


def lifted(points, potential, offset=None):
    r"""Points lifted to R^{d+1} so that squared distance = cost - potential (+ a constant).

    With :math:`s_k = \sqrt{M - f_k + o_k}` (M = max(f - o)),
    :math:`|(x_k, s_k) - (y, 0)|^2 = |x_k - y|^2 + o_k - f_k + M`: a nearest-neighbour search
    over the lifted points is an exact minimization of :math:`|x_k - y|^2 + o_k - f_k`
    (Mérigot's lifting of power diagrams). Returns (lifted (K, d+1), M).
    """
    p = np.asarray(potential, dtype=np.float64)
    q = p if offset is None else p - offset
    M = float(np.max(q))
    return np.hstack([points, np.sqrt(np.maximum(M - q, 0.0))[:, None]]), M


def c_transform(x, f, y, cost: str = "chordal", workers: int = -1):
    r"""Exact c-transform :math:`f^c(y_j) = \min_k c(x_k, y_j) - f_k`, with its argmin.

    x: (K, d) points with potential f: (K,); y: (m, d) -> (f^c (m,), argmin (m,)).
    O((K + m) log K) time, O(K + m) memory: a nearest-neighbour query in the lifted space
    (see :func:`lifted`). For the geodesic cost h(|x - y|^2) - f, the chordal minimizer gives a
    value v; every k that could do better has |x_k - y|^2 - f_k <= v (because h(s) >= s), so a
    ball query in the same tree finds them all. The minimum is re-evaluated from the points
    (not from tree distances), so f^c(y) + f(x) <= c(x, y) holds to the round-off of one cost.
    """
    check_cost(cost)
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    f = np.asarray(f, dtype=np.float64)
    X, M = lifted(x, f)
    tree = cKDTree(X)
    Y = np.hstack([y, np.zeros((len(y), 1))])
    _, k = tree.query(Y, k=1, workers=workers)
    k = np.asarray(k, dtype=np.intp)
    val = _pair_cost(x[k], y, "chordal") - f[k]
    if cost == "chordal":
        return val, k
    val = _pair_cost(x[k], y, cost) - f[k]
    # Candidates: chordal - f <= v, i.e. lifted distance^2 <= v + M.
    radius = np.sqrt(np.maximum(val + M, 0.0)) * (1 + 1e-12) + 1e-15
    step = 20000
    for s in range(0, len(y), step):
        cand = tree.query_ball_point(Y[s:s + step], radius[s:s + step], workers=workers,
                                     return_sorted=False)
        lens = np.fromiter((len(c) for c in cand), dtype=np.intp, count=len(cand))
        if lens.sum() == 0:
            continue
        rows = np.repeat(np.arange(s, s + len(cand)), lens)
        cols = np.fromiter((j for c in cand for j in c), dtype=np.intp, count=int(lens.sum()))
        v = _pair_cost(x[cols], y[rows], cost) - f[cols]
        better = v < val[rows]
        if np.any(better):
            # Per row, keep the smallest candidate.
            order = np.lexsort((v[better], rows[better]))
            r_b, v_b, c_b = rows[better][order], v[better][order], cols[better][order]
            first = np.r_[True, r_b[1:] != r_b[:-1]]
            val[r_b[first]] = v_b[first]
            k[r_b[first]] = c_b[first]
    return val, k
