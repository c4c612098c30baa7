r"""W2 between large clouds by an exact solve between their clusterings, certified on the
original points (chordal cost).

Each cloud is clustered (the nested clusterings of :func:`.multiscale.hierarchy`: cluster k
is its barycentre :math:`\bar x_k`, its mass :math:`A_k` and its within-cluster variance
:math:`o_k`). The network simplex (POT ``emd``) solves the transport between the two
clusterings exactly, with the cost between barycentres. Two bounds follow, both on the
original measures:

* Upper: the plan G between clusters, composed with the split of each cluster among its
  points, is a coupling of the original clouds, and for the chordal cost its cost is exact
  from the barycentres: :math:`\sum_{kl} G_{kl} |\bar x_k - \bar y_l|^2 + \sum_k A_k o_k +
  \sum_l B_l o_l` (the mean of :math:`|x - y|^2` over two independent clusters is the squared
  distance of the barycentres plus both variances). So :math:`U = W_2^2(\bar\mu, \bar\nu) +
  \delta_x^2 + \delta_y^2`, with :math:`\delta` the quantization errors. It is then
  lowered, keeping the flow between clusters, by an exact transport inside each cluster of
  X (:func:`_refine`).
* Lower: a potential on the points of one cloud (the optimal duals of a side solved at its
  points, or the duals of those transports inside the clusters of X, offset by the
  clusters' duals) is
  c-transformed exactly over the original clouds, twice, which makes it dual-feasible: weak
  duality bounds W2² below. The best of them is kept.

Since :math:`W_2(\bar\mu, \bar\nu) \le W_2 + \delta_x + \delta_y` and the clusters are small
where the mass is, the width on W2 is about :math:`(\delta_x^2 + \delta_y^2)/W_2`, whatever
the shape of the measures. That is what the multiscale Sinkhorn solver cannot promise for
concentrated measures: there W2 is small, the bracket needs ε far below the point spacing,
and its sweeps (and Newton's linear systems) stall in the semi-discrete regime, and where
the measure has separated pieces whose masses differ between the two sides, the truncated
kernel holds no pair between the pieces (see ``docs/methods.md``). The exact solve has none
of these failure modes; its cost is the network simplex on the chosen clusterings, bounded
here by ``QUANTIZED_MAX_PAIRS``.
"""
from __future__ import annotations

import time

import numpy as np

from ._hierarchy import _lower_bound, _prune, _widen
from .costs import cost_diameter
from .exact import EXACT_BYTES_PER_PAIR, _available_memory
from .multiscale import hierarchy, quantization_error
from .result import bracket_result, reject_options

__all__ = ["w2_quantized", "QUANTIZED_MAX_PAIRS"]

#: Largest number of cluster pairs the network simplex is given: about 2.2 GB and 10-20 s
#: (measured: 8000 x 6000 tokens of two caps, 4.8e7 pairs, 8.3 s and 2.1 GB peak; 16384
#: token clusters against 2943 cells, 18 s and 2.0 GB).
QUANTIZED_MAX_PAIRS = 50_000_000
#: Refinement factor between clusterings: finer steps than the multiscale solver's 4, so that
#: the finest clustering within the budget uses most of it.
REFINE = 2
#: The exact transport inside a cluster of X (:func:`_refine`) is solved only when its cost
#: matrix has at most this many entries (points of the cluster x points it sends to); a larger
#: one keeps the composed coupling (coarse clusterings of big clouds would otherwise cost
#: minutes of dense solves).
REFINE_MAX_ENTRIES = 1_000_000
#: Mass left out of each side (its lightest points), relative to tol^2 / diameter: the
#: bracket is widened by what it can move W2 (see :func:`._hierarchy._prune`).
PRUNE = 200


def _levels_within(hx, hy, max_pairs):
    """The pair of clusterings (ix, iy) with the smallest delta_x^2 + delta_y^2 among those
    with at most max_pairs cluster pairs (ties: fewer pairs)."""
    best = None
    for i, X in enumerate(hx):
        for j, Y in enumerate(hy):
            pairs = X.n * Y.n
            if pairs > max_pairs:
                continue
            key = (quantization_error(X) ** 2 + quantization_error(Y) ** 2, pairs)
            if best is None or key < best[0]:
                best = (key, i, j)
    if best is None:
        raise ValueError(f"even the coarsest clusterings ({hx[0].n} x {hy[0].n} clusters) "
                         f"exceed max_pairs = {max_pairs:.1e}; raise max_pairs")
    return best[1], best[2]


def _members(level, full):
    """The points of the full level in each cluster of ``level``: (order, start) with the
    points of cluster c at order[start[c]:start[c + 1]] (each point its own cluster when
    the level is the full one)."""
    if level.full:
        return np.arange(full.n), np.arange(full.n + 1)
    order = np.argsort(level.labels, kind="stable")
    start = np.searchsorted(level.labels[order], np.arange(level.n + 1))
    return order, start


def _refine(X, Y, XF, YF, k, l, mass, u):
    r"""A cheaper coupling than the composed one, with the same flow between clusters: for
    each cluster k of X, the exact transport between its points and the points of the
    Y-clusters it sends to, each Y-point j of cluster l weighted by its share
    :math:`G_{kl} b_j / B_l` of the flow. Every Y-point then receives :math:`\sum_k G_{kl}
    b_j / B_l = b_j`, so the union is a coupling of the original clouds.

    Each of these transports also has optimal duals on the cluster's points, fixed up to a
    constant; with the constant that gives them the cluster's dual u_k + o_k as their mean
    (the mean cost over the cluster), they are a potential on the points of X at the
    resolution of the points (the coarse duals set only the offsets between clusters).

    A cluster whose transport has more than ``REFINE_MAX_ENTRIES`` cost entries keeps the
    composed coupling and the constant potential u_k + o_k.

    Returns (its cost, that potential on the points of XF, the number of clusters kept
    composed)."""
    import ot

    xo, xs = _members(X, XF)
    yo, ys = _members(Y, YF)
    order = np.argsort(k, kind="stable")
    k, l, mass = k[order], l[order], mass[order]
    bounds = np.searchsorted(k, np.arange(X.n + 1))
    # The composed coupling's cost of each pair of clusters (what a cluster keeps when its
    # transport is too large to solve).
    composed = mass * (np.maximum(2.0 - 2.0 * np.einsum("pd,pd->p", X.points[k], Y.points[l]), 0.0)
                       + X.offset[k] + Y.offset[l])
    total = 0.0
    f = np.zeros(XF.n)
    skipped = 0
    for c in range(X.n):
        lo, hi = bounds[c], bounds[c + 1]
        if lo == hi:
            continue
        xi = xo[xs[c]:xs[c + 1]]
        if xi.size * int(np.sum(ys[l[lo:hi] + 1] - ys[l[lo:hi]])) > REFINE_MAX_ENTRIES:
            total += float(composed[lo:hi].sum())
            f[xi] = u[c] + X.offset[c]
            skipped += 1
            continue
        parts = [yo[ys[j]:ys[j + 1]] for j in l[lo:hi]]
        yj = np.concatenate(parts)
        share = np.concatenate([mass[p] * YF.weights[q] / Y.weights[j]
                                for p, j, q in zip(range(lo, hi), l[lo:hi], parts, strict=True)])
        ax = XF.weights[xi] * (mass[lo:hi].sum() / X.weights[c])
        M = 2.0 - 2.0 * (XF.points[xi] @ YF.points[yj].T)
        np.maximum(M, 0.0, out=M)
        # The two sides' totals agree to round-off; the simplex needs them equal.
        share *= ax.sum() / share.sum()
        G, log = ot.emd(ax, share, M, numItermax=10_000_000, log=True)
        total += float(np.sum(G * M))
        alpha = np.asarray(log["u"], float)
        f[xi] = alpha - (ax @ alpha) / ax.sum() + u[c] + X.offset[c]
    return total, f, skipped


def _solve(X, Y, XF, YF, cost):
    """One exact solve between the clusterings X and Y: (lower, upper) on W2^2 between the
    full levels XF, YF, and the figures of the solve."""
    import ot

    t0 = time.perf_counter()
    # The network simplex between the clusterings, with the cost between barycentres.
    M = 2.0 - 2.0 * (X.points @ Y.points.T)
    np.maximum(M, 0.0, out=M)
    it = max(1_000_000, 100 * (X.n + Y.n) ** 2)
    G, log = ot.emd(X.weights, Y.weights, M, numItermax=min(it, 2**62), log=True)
    if log["result_code"] != 1:
        raise RuntimeError(f"network simplex stopped without an optimum: {log['warning']}")
    k, l = np.nonzero(G)
    mass = G[k, l]
    del G
    clustered = float(mass @ M[k, l])
    del M
    t_lp = time.perf_counter() - t0
    composed = clustered + float(X.weights @ X.offset) + float(Y.weights @ Y.offset)
    upper = composed
    u, v = np.asarray(log["u"], float), np.asarray(log["v"], float)
    f_fine, skipped = None, 0
    if not (X.full and Y.full):
        refined, f_fine, skipped = _refine(X, Y, XF, YF, k, l, mass, u)
        upper = min(upper, refined)
    t_refine = time.perf_counter() - t0 - t_lp

    # Lower bounds: potentials on the points of one cloud, made dual-feasible by exact
    # c-transforms over the original clouds; X is at its points or has the local duals.
    lows = {}
    if f_fine is not None and not X.full:
        lows["x points, local duals"] = _lower_bound(XF, YF, f_fine, cost)
    if Y.full:
        lows["y points"] = _lower_bound(Y, XF, v, cost)
    if X.full:
        lows["x points"] = _lower_bound(X, YF, u, cost)
    figures = {"levels": (X.n, Y.n), "pairs": X.n * Y.n,
               "quantization": (quantization_error(X), quantization_error(Y)),
               "clustered_w2": float(np.sqrt(max(clustered, 0.0))),
               "composed_upper_w2": float(np.sqrt(max(composed, 0.0))),
               "clusters_not_refined": skipped, "seconds_lp": t_lp, "seconds_refine": t_refine,
               "seconds_lower": time.perf_counter() - t0 - t_lp - t_refine}
    figures["lower_bounds"] = {name: float(np.sqrt(max(val, 0.0))) for name, val in lows.items()}
    return max(lows.values()), upper, figures


def w2_quantized(x, a, y, b, cost="chordal", tol=1e-3, max_pairs=None, seed=0, **unused):
    """Certified W2 bracket between (x, a) and (y, b) from exact solves between clusterings
    (see the module docstring): the clusterings of least quantization error within
    max_pairs / 16, then max_pairs / 4, then max_pairs cluster pairs, until the bracket is
    within tol. Returns a :class:`W2Result` (method "quantized"); ``details`` records each
    solve (clusterings, quantization errors, bounds, times) under ``"solves"``."""
    reject_options(unused, "quantized")
    if cost != "chordal":
        raise ValueError("method='quantized' needs the chordal cost (its upper bound rests on "
                         "the barycentre identity of |x - y|^2); use method='multiscale' or "
                         "'exact' for the geodesic cost")
    max_pairs = QUANTIZED_MAX_PAIRS if max_pairs is None else int(max_pairs)
    avail = _available_memory()
    if avail is not None:
        max_pairs = min(max_pairs, int(0.5 * avail / EXACT_BYTES_PER_PAIR))
    t0 = time.perf_counter()
    n0, m0 = len(a), len(b)
    diam = cost_diameter(cost)
    tau = tol**2 / (PRUNE**2 * diam)
    x, a, tau_x = _prune(x, a, tau)
    y, b, tau_y = _prune(y, b, tau)
    # Each pruned side moves W2 by at most sqrt(D tau) (see _hierarchy._prune).
    slack = np.sqrt(diam * tau_x) + np.sqrt(diam * tau_y)
    hx = hierarchy(x, a, cost, refine=REFINE, seed=seed)
    hy = hierarchy(y, b, cost, refine=REFINE, seed=seed + 1)
    t_hier = time.perf_counter() - t0
    lower, upper, solves, tried = -np.inf, np.inf, [], set()
    for budget in (max_pairs // 16, max_pairs // 4, max_pairs):
        try:
            ix, iy = _levels_within(hx, hy, budget)
        except ValueError:
            if budget < max_pairs:
                continue
            raise
        if (ix, iy) in tried:
            continue
        tried.add((ix, iy))
        lo, hi, figures = _solve(hx[ix], hy[iy], hx[-1], hy[-1], cost)
        # Both bounds are certified on their own: keep the best of each.
        lower, upper = max(lower, lo), min(upper, hi)
        solves.append(dict(figures, lower=float(np.sqrt(max(lo, 0.0))),
                           upper=float(np.sqrt(max(hi, 0.0)))))
        wide_lo, wide_hi = _widen(lower, upper, slack)
        if np.sqrt(wide_hi) - np.sqrt(wide_lo) <= tol:
            break
    if slack > 0:
        lower, upper = _widen(lower, upper, slack)
    last = solves[-1]
    details = {"n": n0, "m": m0, "levels": last["levels"], "pairs": last["pairs"],
               "quantization": last["quantization"], "solves": solves,
               "pruned": (n0 - len(a), m0 - len(b)), "pruned_mass": (tau_x, tau_y),
               "seconds_hierarchy": t_hier, "seconds": time.perf_counter() - t0, "tol": tol}
    r = bracket_result(upper, lower, cost, "quantized", details)
    r.details["tol_met"] = bool(r.upper - r.lower <= tol)
    return r
