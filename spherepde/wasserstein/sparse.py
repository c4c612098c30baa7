r"""W2 between large clouds by the network simplex on a sparse support, grown by exact
pricing until the bracket closes (column generation), coarse to fine.

The transport LP between n and m points has n·m arcs, but its optimal plan uses at most
n + m - 1 of them, all between near neighbours (up to a few offsets between separated pieces
of the measures). So the network simplex (POT ``emd`` on a sparse cost matrix) is run on a
support S of a few arcs per point, and the duals (u, v) it returns, optimal on S, are priced
on all n·m pairs by exact c-transforms (the cone-tree searches of :mod:`.search`):

* the plan is a coupling of the original clouds (S always holds the north-west-corner
  coupling along a space-filling order, so the restricted LP is feasible): its exact cost is
  the upper bound;
* :math:`\langle a, g\rangle + \langle b, g^c\rangle` with :math:`g = v^c`, and the other
  transforms, are dual-feasible on all pairs: weak duality makes the best of them the lower
  bound;
* every point whose potential is above its c-transform (a violated pair, negative reduced
  cost) gets its best partner, and that partner's nearest neighbours, added to S, and the LP
  is solved again. When no pair is violated, the two bounds meet: the exact W2.

The first support holds each point's k nearest neighbours on the other side, and, above
``SPARSE_COARSEST`` points on the larger side, every pair of points whose clusters are coupled
by the plan of the same problem solved between clusterings ``SPARSE_REFINE`` times coarser
(recursively): the multiscale support. The coarse plan carries the flow between separated
pieces of the measures (two caps whose sampled masses differ), which a neighbour support
misses and which otherwise costs a full LP per pricing round to correct.

A side of more than ``SPARSE_MAX_POINTS`` points (chordal cost) is replaced by its
clustering, and the bracket is certified on its points (:func:`w2_sparse`).

Unlike the multiscale Sinkhorn solver it has no ε and no semi-discrete breakdown on
concentrated measures. Its cost is the LP on S (one core, from scratch at every round: POT's
sparse solver takes no warm start), which is larger where the plan moves points far: on
broad measures it is much slower than the multiscale solver (10^5 points a side: 196 s
against 4 s), so "auto" only falls back to it.

References: Bertsimas & Tsitsiklis, Introduction to Linear Optimization (1997), §6.1 (column
generation); Schmitzer, "A sparse multiscale algorithm for dense optimal transport",
J. Math. Imaging Vis. 56 (2016) (shielding neighbourhoods, coarse-to-fine supports);
Bonneel et al., SIGGRAPH Asia 2011 (the network simplex POT runs).
"""
from __future__ import annotations

import time

import numba as nb
import numpy as np
from scipy.spatial import cKDTree

from ._hierarchy import _morton_keys, _northwest_pairs, _prune, _widen
from .costs import _pair_cost, cost_diameter

# mass left out of each side, relative to tol^2 / diameter (see .quantized)
from .quantized import PRUNE
from .result import bracket_result, reject_options
from .search import ConeTree

__all__ = ["w2_sparse", "SPARSE_K", "SPARSE_COARSEST", "SPARSE_REFINE", "SPARSE_MAX_ROUNDS",
           "SPARSE_MAX_POINTS", "SPARSE_CLUSTERS"]

#: Nearest neighbours on the other side of each point in the first support; pricing adds a
#: violating point's best partner with this many of its partner's neighbours.
SPARSE_K = 6
#: Above this many points on the larger side, the first support also holds the pairs whose
#: clusters the plan between clusterings SPARSE_REFINE times coarser couples.
SPARSE_COARSEST = 20_000
SPARSE_REFINE = 4
#: LP solves at most (each after a pricing round).
SPARSE_MAX_ROUNDS = 30
#: A pair is violated when its reduced cost is below -VIOLATION (round-off of the duals).
VIOLATION = 1e-12
#: A side with more points than SPARSE_MAX_POINTS (chordal cost) is solved as its clustering
#: of SPARSE_CLUSTERS clusters, certified on its points (see :func:`w2_sparse`): the LP on
#: 10^6 two-cap tokens against the 1.3·10^5 cells of their caps did not finish in 18 minutes,
#: on 10^5 tokens it took 146 s, and on their 10^5 clusters 89 s. (Clustering those 1.3·10^5
#: cells as well, at SPARSE_MAX_POINTS = 10^5, made the 10^5-token case 323 s.)
SPARSE_MAX_POINTS = 200_000
SPARSE_CLUSTERS = 100_000


def _feasible_support(x, a, y, b):
    """Pairs of a coupling of (x, a) and (y, b): the north-west corner along the Morton order,
    so that the LP on any support holding them is feasible."""
    bits = max(1, 63 // x.shape[1])
    ox = np.argsort(_morton_keys(x, bits), kind="stable")
    oy = np.argsort(_morton_keys(y, bits), kind="stable")
    r, c = a[ox], b[oy] * (a.sum() / b.sum())
    i, j, _ = _northwest_pairs(r, c)
    return ox[i], oy[j]


class _Cloud:
    """Points and weights of one side with what the solver reuses: a k-d tree, each point's
    nearest neighbours on its own side, and a cone tree for the c-transforms."""

    def __init__(self, points, weights, k):
        self.points = np.ascontiguousarray(points, dtype=np.float64)
        self.weights = weights
        self.kd = cKDTree(self.points)
        kk = min(k, len(weights))
        _, nb_ = self.kd.query(self.points, k=kk, workers=-1)
        self.neighbours = np.asarray(nb_, np.int64).reshape(len(weights), kk)
        self.cone = ConeTree(self.points)

    @property
    def n(self):
        return len(self.weights)


def _pairs_to_keys(rows, cols, m):
    return np.asarray(rows, np.int64) * m + np.asarray(cols, np.int64)


def _partners(best, other, k):
    """(rows, cols): each point i with its best partner best[i] and the partner's k - 1
    nearest neighbours on the other side (other: that side's _Cloud)."""
    cols = other.neighbours[best, :k]
    rows = np.repeat(np.arange(len(best)), cols.shape[1])
    return rows, cols.ravel()


def _quantize(points, weights, K, seed):
    """K clusters of a cloud (each point joins the nearest of K random centres): labels,
    barycentres (inside the ball), masses and within-cluster variances o_k, so that
    |x̄_k - y|^2 + o_k is the mean chordal cost from the cluster to y."""
    rng = np.random.default_rng(seed)
    centres = points[rng.choice(len(weights), size=K, replace=False)]
    _, lab = cKDTree(centres).query(points, workers=-1)
    W = np.bincount(lab, weights=weights, minlength=K)
    keep = W > 0
    lab = (np.cumsum(keep) - 1)[lab]
    W = W[keep]
    d = points.shape[1]
    bary = np.stack([np.bincount(lab, weights=weights * points[:, t], minlength=len(W))
                     for t in range(d)], axis=1) / W[:, None]
    diff = points - bary[lab]
    offset = np.bincount(lab, weights=weights * np.einsum("nd,nd->n", diff, diff),
                         minlength=len(W)) / W
    return lab, bary, W, offset


def _cluster(points, weights, K, seed):
    """K clusters for the coarse guide: labels, unit barycentres, masses."""
    lab, bary, W, _ = _quantize(points, weights, K, seed)
    return lab, bary / np.linalg.norm(bary, axis=1, keepdims=True), W


@nb.njit(cache=True)
def _expand(pk, pl, xs, xo, ys, yo, m):
    """Keys (i * m + j) of every pair of points i in cluster pk[p], j in cluster pl[p], over
    the cluster pairs p (members of cluster c: order[start[c]:start[c + 1]])."""
    total = 0
    for p in range(pk.size):
        total += (xs[pk[p] + 1] - xs[pk[p]]) * (ys[pl[p] + 1] - ys[pl[p]])
    out = np.empty(total, np.int64)
    q = 0
    for p in range(pk.size):
        for s in range(xs[pk[p]], xs[pk[p] + 1]):
            i = xo[s]
            for t in range(ys[pl[p]], ys[pl[p] + 1]):
                out[q] = i * m + yo[t]
                q += 1
    return out


def _members(lab, K):
    order = np.argsort(lab, kind="stable").astype(np.int64)
    start = np.searchsorted(lab[order], np.arange(K + 1)).astype(np.int64)
    return order, start


def _solve_lp(X, Y, keys, cost):
    """The network simplex on the support keys (row * m + col): (rows, cols, mass) of the
    plan, the duals u, v, and its exact cost."""
    import ot
    import scipy.sparse as sps

    if not hasattr(ot.lp.emd_wrap, "emd_c_sparse"):
        raise ImportError(f"method='sparse' needs POT >= 0.9.7 (emd on a sparse cost matrix); "
                          f"POT {ot.__version__} is installed: pip install 'POT>=0.9.7'")
    m = Y.n
    rows, cols = keys // m, keys % m
    c = _pair_cost(X.points[rows], Y.points[cols], cost)
    M = sps.coo_matrix((c, (rows, cols)), shape=(X.n, m))
    G, log = ot.emd(X.weights, Y.weights, M, numItermax=2**62, log=True, check_marginals=False)
    if log["result_code"] != 1:
        raise RuntimeError(f"network simplex on the sparse support stopped without an optimum: "
                           f"{log['warning']}")
    G = G.tocoo()
    keep = G.data > 0
    pr, pc, mass = G.row[keep].astype(np.int64), G.col[keep].astype(np.int64), G.data[keep]
    upper = float(mass @ _pair_cost(X.points[pr], Y.points[pc], cost))
    return (pr, pc, mass), np.asarray(log["u"], float), np.asarray(log["v"], float), upper


def _price(X, Y, u, v, cost):
    """Lower bound from (u, v) and the violated points: v^c on X and u^c on Y with their
    argmins; the bound is the best of <a, v^c> + <b, v>, <a, u> + <b, u^c> and the doubly
    transformed <a, v^c> + <b, (v^c)^c>, each dual-feasible on all pairs."""
    # One gauge for both (u + s, v - s leaves every u_i + v_j, and the bound, unchanged);
    # centring keeps c - u at the precision of c.
    s = float(np.mean(u))
    u, v = u - s, v + s
    g, gj = Y.cone.fit(v).cmin(X.points, cost)   # min_j c(x_i, y_j) - v_j
    f, fi = X.cone.fit(u).cmin(Y.points, cost)   # min_i c(x_i, y_j) - u_i
    f2, _ = X.cone.fit(g).cmin(Y.points, cost)
    a, b = X.weights, Y.weights
    lower = max(float(a @ g + b @ v), float(a @ u + b @ f), float(a @ g + b @ f2))
    scale = max(1.0, float(np.max(np.abs(u))), float(np.max(np.abs(v))))
    vx = np.flatnonzero(g < u - VIOLATION * scale)
    vy = np.flatnonzero(f < v - VIOLATION * scale)
    return lower, vx, gj[vx], vy, fi[vy]


def _solve(X, Y, cost, tol, k, guide_keys, log, depth, deadline):
    """Rounds of LP and pricing on the support (first: cross neighbours, the feasible
    coupling, the guide) until the bracket on W2 is within tol, nothing is violated, or the
    rounds or the time run out. Returns (lower, upper, plan, u, v)."""
    m = Y.n
    kx = min(k, m)
    _, jj = Y.kd.query(X.points, k=kx, workers=-1)
    ky = min(k, X.n)
    _, ii = X.kd.query(Y.points, k=ky, workers=-1)
    fr, fc = _feasible_support(X.points, X.weights, Y.points, Y.weights)
    parts = [_pairs_to_keys(np.repeat(np.arange(X.n), kx), np.asarray(jj).ravel(), m),
             _pairs_to_keys(np.asarray(ii).ravel(), np.repeat(np.arange(m), ky), m),
             _pairs_to_keys(fr, fc, m)]
    if guide_keys is not None:
        parts.append(guide_keys)
    keys = np.unique(np.concatenate(parts))
    lower, upper, best = -np.inf, np.inf, None
    for rnd in range(SPARSE_MAX_ROUNDS):
        t0 = time.perf_counter()
        plan, u, v, up = _solve_lp(X, Y, keys, cost)
        t1 = time.perf_counter()
        lo, vx, bx, vy, by = _price(X, Y, u, v, cost)
        t2 = time.perf_counter()
        if up < upper:
            upper, best = up, (plan, u, v)
        lower = max(lower, lo)
        width = np.sqrt(max(upper, 0.0)) - np.sqrt(max(min(lower, upper), 0.0))
        log.append({"depth": depth, "round": rnd, "n": X.n, "m": m, "support": int(keys.size),
                    "lower": float(np.sqrt(max(lower, 0.0))), "upper": float(np.sqrt(upper)),
                    "violated": (int(vx.size), int(vy.size)), "seconds_lp": t1 - t0,
                    "seconds_pricing": t2 - t1})
        if width <= tol or (vx.size == 0 and vy.size == 0) or time.perf_counter() > deadline:
            break
        r1, c1 = _partners(bx, Y, k)
        add_x = _pairs_to_keys(vx[r1], c1, m)
        c2, r2 = _partners(by, X, k)
        add_y = _pairs_to_keys(r2, vy[c2], m)
        keys = np.unique(np.concatenate([keys, add_x, add_y]))
    plan, u, v = best
    return lower, upper, plan, u, v


def _guide(X, Y, cost, tol, seed, k, log, depth, deadline):
    """Support keys from the same problem between clusterings SPARSE_REFINE times coarser
    (solved the same way, recursively): every pair of points whose clusters the coarse plan
    couples (the multiscale support of Schmitzer 2016 and Oberman & Ruan 2015)."""
    KX = max(X.n // SPARSE_REFINE, 1)
    KY = max(Y.n // SPARSE_REFINE, 1)
    lx, bx, wx = _cluster(X.points, X.weights, KX, seed)
    ly, by, wy = _cluster(Y.points, Y.weights, KY, seed + 1)
    CX, CY = _Cloud(bx, wx, k), _Cloud(by, wy * (wx.sum() / wy.sum()), k)
    # The coarse problem is cheap: solved tighter, it leaves the fine one fewer violations.
    _, _, (pr, pc, _), _, _ = _core(CX, CY, cost, tol / 4, seed + 2, k, log, depth + 1, deadline)
    xo, xs = _members(lx, CX.n)
    yo, ys = _members(ly, CY.n)
    return _expand(pr, pc, xs, xo, ys, yo, Y.n)


def _core(X, Y, cost, tol, seed, k, log, depth, deadline):
    guide = None
    # The larger side decides: 2·10^4 tokens against the 1.3·10^5 cells of a concentrated
    # mesh snapshot took 206 s without the guide.
    if max(X.n, Y.n) > SPARSE_COARSEST and min(X.n, Y.n) >= 4 * SPARSE_REFINE:
        guide = _guide(X, Y, cost, tol, seed, k, log, depth, deadline)
    return _solve(X, Y, cost, tol, k, guide, log, depth, deadline)


def _certify_on_points(x, a, y, b, pot, lab, cost, tree_y=None):
    """Lower bound on W2^2 between the original clouds from a potential of the y side (on
    its points, or on its clusters when lab maps each point to its cluster): pot
    c-transformed onto the points of x and back, <a, g> + <b, g^c> and <a, g> + <b, pot>.
    tree_y: a ConeTree already built on y, if there is one."""
    g_y = pot if lab is None else pot[lab]
    g_y = g_y - np.mean(g_y)
    tree_y = ConeTree(y) if tree_y is None else tree_y
    g, _ = tree_y.fit(g_y).cmin(x, cost)
    h, _ = ConeTree(x).fit(g).cmin(y, cost)
    return max(float(a @ g + b @ g_y), float(a @ g + b @ h))


def w2_sparse(x, a, y, b, cost="chordal", tol=1e-3, k=SPARSE_K, seed=0, max_seconds=None,
              **unused):
    """Certified W2 bracket between (x, a) and (y, b) by the network simplex on a support grown
    by exact pricing (see the module docstring); exact when no pair is left violated.

    A side of more than ``SPARSE_MAX_POINTS`` points (chordal cost) is replaced by its
    clustering of ``SPARSE_CLUSTERS`` clusters, and the bracket is certified on the points:
    above, the plan between clusters composed with each cluster's split among its points,
    whose chordal cost is exact from the barycentres (the LP cost plus the sides' squared
    quantization errors δ², tiny at 10 points a cluster); below, the duals of the other
    side (or of the finer clustering) c-transformed over the original points, twice.

    k: neighbours per point in the supports; max_seconds: stop the rounds after this long
    (the bracket so far is returned, certified, with ``tol_met`` False); seed: the random
    cluster centres. ``details["rounds"]`` records each LP solve (depth 0 is the problem
    itself, depth 1 its clustering, ...)."""
    reject_options(unused, "sparse")
    t0 = time.perf_counter()
    deadline = np.inf if max_seconds is None else t0 + float(max_seconds)
    n0, m0 = len(a), len(b)
    diam = cost_diameter(cost)
    tau = tol**2 / (PRUNE**2 * diam)
    x, a, tau_x = _prune(x, a, tau)
    y, b, tau_y = _prune(y, b, tau)
    b = b * (a.sum() / b.sum())
    slack = np.sqrt(diam * tau_x) + np.sqrt(diam * tau_y)
    inner_tol = max(tol - 2 * slack, 0.0)
    # Sides too large for the LP: their clusterings (chordal only: the bound above rests on
    # the barycentre identity of |x - y|^2).
    sides = []
    for pts, w, s_ in ((x, a, seed + 7), (y, b, seed + 8)):
        if cost == "chordal" and len(w) > SPARSE_MAX_POINTS:
            sides.append(_quantize(pts, w, SPARSE_CLUSTERS, s_))
        else:
            sides.append(None)
    delta2 = [0.0 if q is None else float(q[2] @ q[3]) for q in sides]
    if any(q is not None for q in sides):
        inner_tol /= 2  # the rest is left to the quantization
    X = _Cloud(x, a, k) if sides[0] is None else _Cloud(sides[0][1], sides[0][2], k)
    Y = _Cloud(y, b, k) if sides[1] is None else _Cloud(sides[1][1], sides[1][2], k)
    log = []
    lower, upper, plan, u, v = _core(X, Y, cost, inner_tol, seed, k, log, 0, deadline)
    exact = bool(log[-1]["violated"] == (0, 0)) and all(q is None for q in sides)
    t_points = 0.0
    if any(q is not None for q in sides):
        t1 = time.perf_counter()
        upper = upper + delta2[0] + delta2[1]
        if sides[1] is None or (sides[0] is not None and len(sides[1][2]) >= len(sides[0][2])):
            # y at its points: its cone tree is the one the pricing used
            lower = _certify_on_points(x, a, y, b, v, None if sides[1] is None else sides[1][0],
                                       cost, Y.cone if sides[1] is None else None)
        else:
            lower = _certify_on_points(y, b, x, a, u, None if sides[0] is None else sides[0][0],
                                       cost, X.cone if sides[0] is None else None)
        t_points = time.perf_counter() - t1
    if slack > 0:
        lower, upper = _widen(lower, upper, slack)
    top = [r for r in log if r["depth"] == 0]
    details = {"n": n0, "m": m0, "pruned": (n0 - len(a), m0 - len(b)),
               "pruned_mass": (tau_x, tau_y), "support": top[-1]["support"],
               "clusters": (X.n if sides[0] is not None else None,
                            Y.n if sides[1] is not None else None),
               "quantization": (float(np.sqrt(delta2[0])), float(np.sqrt(delta2[1]))),
               "plan_pairs": int(plan[0].size), "lp_rounds": len(top), "exact": exact,
               "rounds": log, "seconds_certify_points": t_points,
               "seconds": time.perf_counter() - t0, "tol": tol}
    r = bracket_result(upper, lower, cost, "sparse", details)
    r.details["tol_met"] = bool(r.upper - r.lower <= tol)
    if not r.details["tol_met"] and time.perf_counter() > deadline:
        r.details["stopped"] = (f"its time ran out ({float(max_seconds):g} s) after "
                                f"{len(top)} LP rounds")
    return r
