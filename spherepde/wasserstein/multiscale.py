r"""Multiscale ε-scaling Sinkhorn with a truncated kernel, and its certified bracket.

The problem :math:`\min_\pi \sum_{ij} \pi_{ij} c(x_i, y_j)` between two weighted clouds is
solved on a hierarchy of clusterings of each cloud (nested random centres, each point
assigned to its nearest centre, a cluster represented by its barycentre and its mass), with
the entropic regularization ε halved stage by stage and the problem moved to the next finer
level once ε reaches the level's resolution (the squared spacing of its clusters). At every
stage the kernel is kept only on the pairs with

.. math:: c_{ij} - u'_i - v'_j \le \theta\varepsilon, \qquad
          u' = u - \tfrac{\varepsilon}{2}\log a,\; v' = v - \tfrac{\varepsilon}{2}\log b,

i.e. the entries of :math:`\pi_{ij} = e^{(u_i + v_j - c_{ij})/\varepsilon}` above
:math:`e^{-\theta}\sqrt{a_i b_j}`. These pairs are found by one KD-tree range search in a
lifted space where squared distance is :math:`c_{ij} - u'_i - v'_j` plus a constant (see
:func:`~spherepde.wasserstein.costs.lifted`), so memory stays O((n + m) k) with k the
number of kept neighbours (tens), instead of n·m. The log-domain Sinkhorn sweeps over that
sparse support are numba loops, parallel over rows.

Certification does not trust any of this: the bracket is computed on the original measures.

* Upper bound: the approximate plan is rounded onto the exact marginals (Altschuler, Weed &
  Rigollet 2017, Alg. 2: scale rows down, columns down, add the product of the residual
  marginals). If a side was stopped at a coarse level, the plan between clusters is composed
  with the split of each cluster among its points; for the chordal cost that composed plan's
  cost is exact from the barycentres, :math:`\sum \pi_{kl} (2 - 2\langle \bar x_k,
  \bar y_l\rangle)`, so it is the cost of a feasible coupling of the original clouds.
* Lower bound: a potential on the original points is c-transformed exactly twice (lifted
  KD-tree nearest neighbour, :func:`~spherepde.wasserstein.costs.c_transform`); the pair
  :math:`(f^{cc}, f^{c})` is dual-feasible, so :math:`\langle a, f^{cc}\rangle +
  \langle b, f^c\rangle \le W_2^2` (weak duality).

References
----------
Schmitzer, "Stabilized sparse scaling algorithms for entropy regularized transport
problems", SIAM J. Sci. Comput. 41 (2019): ε-scaling, truncation, multiscale.
Feydy, "Geometric data analysis, beyond convolutions", PhD thesis (2020), §3.3 (GeomLoss's
multiscale scheme). Mérigot, "A multiscale approach to optimal transport" (2011).
Altschuler, Weed & Rigollet, NeurIPS 2017 (rounding onto the transport polytope).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numba as nb
import numpy as np
from scipy.spatial import cKDTree

from .costs import c_transform, cost_diameter, geodesic_from_chordal, lifted

__all__ = ["Level", "hierarchy", "w2_multiscale"]

#: Kernel truncation: keep entries above e^-THETA sqrt(a_i b_j). Truncation only costs
#: optimality of the plan, never validity of the bracket.
THETA = 12.0
#: Cluster count of the coarsest level, and the refinement factor between levels.
COARSEST = 256
REFINE = 4
#: A side with at most this many points is a set of atoms, not a sampled continuum: its
#: spacing says nothing about the ε the problem needs.
FEW_POINTS = 64


# ---------------------------------------------------------------------------------- levels
@dataclass
class Level:
    """One clustering of a cloud: barycentres points (K, d), masses weights (K,), and the
    within-cluster variance offset (K,) (0 when each cluster is one original point)."""

    points: np.ndarray
    weights: np.ndarray
    offset: np.ndarray
    full: bool
    spacing2: float = 0.0  # median squared distance to the nearest other cluster

    @property
    def n(self):
        return len(self.weights)


def _spacing2(points):
    """Median squared distance from a point to its nearest distinct neighbour."""
    if len(points) < 2:
        return 0.0
    sample = points if len(points) <= 20000 else points[:: len(points) // 20000]
    dist, _ = cKDTree(points).query(sample, k=8, workers=-1)
    # Repeated points (samples of a discrete measure) are not a finer resolution.
    dist = np.where(dist > 1e-12, dist, np.inf).min(axis=1)
    dist = dist[np.isfinite(dist)]
    return float(np.median(dist) ** 2) if dist.size else 0.0


def hierarchy(x, a, cost="chordal", coarsest=COARSEST, refine=REFINE, seed=0):
    r"""Clusterings of the cloud (x: (n, d), a: (n,)) from ``coarsest`` clusters up to the
    cloud itself, ``refine`` times finer at each level.

    Centres are the first K points of one random permutation (so levels are nested in their
    centres); every point joins its nearest centre. For the chordal cost a cluster is its
    barycentre :math:`\bar x_k` with the offset :math:`\sum_{i\in k} a_i |x_i - \bar
    x_k|^2 / A_k = 1 - |\bar x_k|^2`, which makes :math:`|\bar x_k - \bar y_l|^2 + o_k + o_l
    = 2 - 2\langle \bar x_k, \bar y_l\rangle` the exact mean cost between the two clusters.
    For the geodesic cost there is no such identity: coarse levels use the normalized
    barycentres and serve only as warm starts.
    """
    n = len(a)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    levels = []
    K = coarsest
    while 2 * K <= n:
        centres = x[perm[:K]]
        _, lab = cKDTree(centres).query(x, workers=-1)
        W = np.bincount(lab, weights=a, minlength=K)
        keep = W > 0
        bary = np.stack([np.bincount(lab, weights=a * x[:, k], minlength=K) for k in range(x.shape[1])],
                        axis=1)[keep] / W[keep, None]
        remap = np.cumsum(keep) - 1
        lab = remap[lab]
        if cost == "chordal":
            diff = x - bary[lab]
            off = np.bincount(lab, weights=a * np.einsum("nd,nd->n", diff, diff),
                              minlength=len(bary)) / W[keep]
        else:
            bary = bary / np.linalg.norm(bary, axis=1, keepdims=True)
            off = np.zeros(len(bary))
        levels.append(_level(bary, W[keep], off, False))
        K *= refine
    levels.append(_level(x, a, np.zeros(n), True))
    return levels


def _level(points, weights, offset, full):
    # kd-tree leaf order is a spatial sort: neighbours in space become neighbours in memory,
    # which is what keeps the sparse sweeps cache-friendly.
    order = cKDTree(points, leafsize=8).indices
    return Level(np.ascontiguousarray(points[order]), weights[order], offset[order], full,
                 _spacing2(points))


def quantization_error(level):
    r"""sqrt(sum_k A_k o_k): the cost of moving every point to its cluster's barycentre, an
    upper bound on W2(cloud, clustered cloud) (chordal)."""
    return float(np.sqrt(max(level.weights @ level.offset, 0.0)))


# ---------------------------------------------------------------------------------- kernels
@nb.njit(parallel=True, cache=True)
def _pair_costs(rows, cols, P, Q, op, oq, geodesic):
    out = np.empty(rows.size)
    d = P.shape[1]
    for k in nb.prange(rows.size):
        i, j = rows[k], cols[k]
        s = 0.0
        for t in range(d):
            z = P[i, t] - Q[j, t]
            s += z * z
        if geodesic:
            r = min(np.sqrt(s) * 0.5, 1.0)
            th = 2.0 * np.arcsin(r)
            out[k] = th * th
        else:
            out[k] = s + op[i] + oq[j]
    return out


@nb.njit(cache=True)
def _softmin(indptr, idx, cost, other, logw, eps, pot, omega):
    """pot_k <- eps log w_k - eps LSE_l((other_l - c_kl)/eps) over the sparse row k, relaxed:
    pot <- (1 - omega) pot + omega (that update).

    The sum is taken against the current plan, sum_l exp((pot_k + other_l - c_kl)/eps) (the
    row's mass), which is the LSE shifted by the old potential: one exp per entry, and no
    overflow while the plan is a plan. A row whose mass under- or overflows (far from
    convergence) falls back to the max-shifted two-pass sum. Returns the L1 row-marginal
    error of the plan before the update.
    """
    n = indptr.size - 1
    err = 0.0
    for k in range(n):
        lo, hi = indptr[k], indptr[k + 1]
        old = pot[k]
        s = 0.0
        for p in range(lo, hi):
            s += np.exp((old + other[idx[p]] - cost[p]) / eps)
        w = np.exp(logw[k])
        if s > 1e-250 and s < 1e250:
            err += abs(s - w)
            new = old + eps * (logw[k] - np.log(s))
        else:
            m = -np.inf
            for p in range(lo, hi):
                z = other[idx[p]] - cost[p]
                if z > m:
                    m = z
            t = 0.0
            for p in range(lo, hi):
                t += np.exp((other[idx[p]] - cost[p] - m) / eps)
            new = eps * logw[k] - m - eps * np.log(t)
            err += w
        pot[k] = old + omega * (new - old)
    return err


@nb.njit(parallel=True, cache=True)
def _plan_rows(indptr, idx, cost, u, v, eps):
    n = indptr.size - 1
    out = np.empty(cost.size)
    for k in nb.prange(n):
        for p in range(indptr[k], indptr[k + 1]):
            out[p] = np.exp((u[k] + v[idx[p]] - cost[p]) / eps)
    return out


# ---------------------------------------------------------------------------------- support
class _Support:
    """Sparse pairs (i, j) with their costs, in row (CSR) and column (CSC) order."""

    def __init__(self, rows, cols, X, Y, geodesic):
        nx, ny = X.n, Y.n
        order = np.lexsort((cols, rows))
        rows, cols = rows[order], cols[order]
        self.rows = rows
        self.cols = cols
        self.indptr = np.searchsorted(rows, np.arange(nx + 1)).astype(np.int64)
        self.cost = _pair_costs(rows, cols, X.points, Y.points, X.offset, Y.offset, geodesic)
        t_order = np.argsort(cols, kind="stable")
        self.t_idx = rows[t_order]
        self.t_cost = self.cost[t_order]
        self.t_indptr = np.searchsorted(cols[t_order], np.arange(ny + 1)).astype(np.int64)

    @property
    def nnz(self):
        return self.cost.size


def _support(X, Y, u, v, eps, theta, geodesic):
    """Pairs with c - u' - v' <= theta eps (superset for the geodesic cost, then filtered),
    plus, for every row and column left empty, its best partner."""
    up = u - 0.5 * eps * np.log(X.weights)
    vp = v - 0.5 * eps * np.log(Y.weights)
    LX, Mx = lifted(X.points, up, X.offset)
    LY, My = lifted(Y.points, vp, Y.offset)
    d = X.points.shape[1]
    PX = np.hstack([LX, np.zeros((X.n, 1))])
    PY = np.hstack([LY[:, :d], np.zeros((Y.n, 1)), LY[:, d:]])
    # The chordal cost bounds the geodesic one from below, so the chordal range search is a
    # superset there; the exact test below keeps the right pairs.
    r = np.sqrt(max(theta * eps + Mx + My, 0.0))
    tx, ty = cKDTree(PX), cKDTree(PY)
    pairs = tx.sparse_distance_matrix(ty, r, output_type="ndarray")
    rows = pairs["i"].astype(np.int64)
    cols = pairs["j"].astype(np.int64)
    if geodesic:
        c = _pair_costs(rows, cols, X.points, Y.points, X.offset, Y.offset, True)
        keep = c - up[rows] - vp[cols] <= theta * eps
        rows, cols = rows[keep], cols[keep]
    # Rows / columns without a pair: add the c-transform's argmin (exact for chordal).
    er = np.flatnonzero(np.bincount(rows, minlength=X.n) == 0)
    if er.size:
        _, k = ty.query(np.hstack([X.points[er], np.sqrt(np.maximum(Mx - (up[er] - X.offset[er]), 0))[:, None],
                                   np.zeros((er.size, 1))]))
        rows, cols = np.r_[rows, er], np.r_[cols, k]
    ec = np.flatnonzero(np.bincount(cols, minlength=Y.n) == 0)
    if ec.size:
        _, k = tx.query(np.hstack([Y.points[ec], np.zeros((ec.size, 1)),
                                   np.sqrt(np.maximum(My - (vp[ec] - Y.offset[ec]), 0))[:, None]]))
        rows, cols = np.r_[rows, k], np.r_[cols, ec]
        # Deduplicate pairs that both additions may have produced.
        key = np.unique(rows * Y.n + cols)
        rows, cols = key // Y.n, key % Y.n
    return _Support(rows, cols, X, Y, geodesic)


def _transfer(Xc, up, Yc, vp, Xf, Yf, cost):
    r"""Mass-free potentials on the finer levels from the coarser ones, by hard c-transforms
    (coarse x -> fine y -> fine x)."""
    geo = cost == "geodesic"
    g, _ = c_transform(Xc.points, up - Xc.offset, Yf.points, "geodesic" if geo else "chordal")
    g = g + Yf.offset
    f, _ = c_transform(Yf.points, g - Yf.offset, Xf.points, "geodesic" if geo else "chordal")
    return f + Xf.offset, g


def _sinkhorn(S, X, Y, u, v, eps, tol, maxiter, omega=1.0):
    """Alternate sparse log-domain updates until the column marginal error is <= tol.

    omega > 1 is over-relaxation (Thibault, Chizat, Dossal & Papadakis 2021): a few times
    fewer iterations at small eps, but it may oscillate far from the fixed point: it is used
    in the final stages only, and dropped for the rest of the stage as soon as the error
    exceeds twice its best value in the stage. Returns (iterations, error).
    """
    la, lb = np.log(X.weights), np.log(Y.weights)
    err = np.inf
    it = 0
    best = np.inf
    for it in range(1, maxiter + 1):
        _softmin(S.indptr, S.cols, S.cost, v, la, eps, u, omega)
        err = _softmin(S.t_indptr, S.t_idx, S.t_cost, u, lb, eps, v, omega)
        if err <= tol:
            break
        if omega > 1 and err > 2 * best:
            omega = 1.0
        best = min(best, err)
    # Finish on a plain u-update so that the row marginals are exact.
    _softmin(S.indptr, S.cols, S.cost, v, la, eps, u, 1.0)
    return it, err


# ---------------------------------------------------------------------------------- bracket
def _upper_bound(S, X, Y, u, v, eps, cost):
    """Cost of the sparse plan rounded onto the exact marginals (a feasible coupling)."""
    P = _plan_rows(S.indptr, S.cols, S.cost, u, v, eps)
    row = np.bincount(S.rows, weights=P, minlength=X.n)
    xs = np.minimum(X.weights / np.where(row > 0, row, np.inf), 1.0)
    P *= xs[S.rows]
    col = np.bincount(S.cols, weights=P, minlength=Y.n)
    ys = np.minimum(Y.weights / np.where(col > 0, col, np.inf), 1.0)
    P *= ys[S.cols]
    err_r = X.weights - np.bincount(S.rows, weights=P, minlength=X.n)
    err_c = Y.weights - np.bincount(S.cols, weights=P, minlength=Y.n)
    np.maximum(err_r, 0.0, out=err_r)
    np.maximum(err_c, 0.0, out=err_c)
    upper = float(P @ S.cost)
    E = 0.5 * (err_r.sum() + err_c.sum())
    if E > 0:
        upper += _residual_cost(X, err_r, Y, err_c, E, cost)
    return upper, float(E)


#: The residual marginals of the rounded plan are transported exactly (network simplex) when
#: their supports have at most this many pairs; beyond, by the product coupling.
RESIDUAL_EXACT_PAIRS = 250_000


def _residual_cost(X, err_r, Y, err_c, E, cost):
    """Cost of a coupling of the residual marginals err_r (on X) and err_c (on Y), mass E."""
    import ot

    i = np.flatnonzero(err_r > 0)
    j = np.flatnonzero(err_c > 0)
    if i.size * j.size <= RESIDUAL_EXACT_PAIRS:
        diff = X.points[i, None, :] - Y.points[None, j, :]
        C = np.einsum("ijd,ijd->ij", diff, diff)
        if cost == "chordal":
            C += X.offset[i, None] + Y.offset[None, j]
        else:
            C = geodesic_from_chordal(C)
        ri, cj = err_r[i] / err_r[i].sum(), err_c[j] / err_c[j].sum()
        val, log = ot.emd2(ri, cj, C, numItermax=max(1_000_000, 50 * (i.size + j.size) ** 2),
                           log=True)
        if log["result_code"] == 1:
            # emd2 is exact for its normalized marginals; the plan scaled by E couples the
            # residuals up to the round-off of err_r.sum() vs err_c.sum().
            return float(val) * E
    # The product plan err_r err_c^T / E: for unit vectors (or barycentres with their
    # offsets) its chordal cost is 2E - 2 <sum err_r x, sum err_c y> / E.
    chord = 2.0 * E - 2.0 * float((err_r @ X.points) @ (err_c @ Y.points)) / E
    chord = min(max(chord, 0.0), 4.0 * E)
    # theta <= (pi/2) |x - y| on the sphere, so the geodesic cost is <= pi^2/4 chordal.
    return chord if cost == "chordal" else np.pi**2 / 4 * chord


def _lower_bound(x, a, y, b, f, cost):
    """<a, f^cc> + <b, f^c> for a potential f on the original points x (weak duality)."""
    g, _ = c_transform(x, f, y, cost)
    f2, _ = c_transform(y, g, x, cost)
    return float(a @ f2 + b @ g)


def _bracket(x, a, y, b, X, Y, S, u, v, eps, cost):
    upper, resid = _upper_bound(S, X, Y, u, v, eps, cost)
    lows = []
    up = u - 0.5 * eps * np.log(X.weights)
    vp = v - 0.5 * eps * np.log(Y.weights)
    geo = "geodesic" if cost == "geodesic" else "chordal"
    # A full level is the original cloud in another order.
    if X.full:
        lows.append(_lower_bound(X.points, X.weights, y, b, up, cost))
    if Y.full:
        lows.append(_lower_bound(Y.points, Y.weights, x, a, vp, cost))
    if not lows:
        # Neither side at its points: a potential on x from the clusters of y.
        f, _ = c_transform(Y.points, vp - Y.offset, x, geo)
        lows.append(_lower_bound(x, a, y, b, f, cost))
    return max(lows), upper, resid


# ---------------------------------------------------------------------------------- driver
def _final_level(levels, budget):
    """Index of the coarsest level whose quantization error is below budget (chordal)."""
    for k, L in enumerate(levels):
        if L.full or quantization_error(L) <= budget:
            return k
    return len(levels) - 1


def w2_multiscale(x, a, y, b, cost="chordal", tol=1e-3, epsilon=None, theta=THETA,
                  coarsest=COARSEST, max_iter=1000, stage_iter=50, quantize=None,
                  nu_levels=None, seed=0, omega=1.8, verbose=False):
    r"""W2^2 bracket between (x, a) and (y, b) by multiscale sparse Sinkhorn.

    Parameters
    ----------
    x: (n, d), a: (n,), y: (m, d), b: (m,)
        The clouds (unit vectors, weights > 0 summing to 1).
    tol : float
        Target width of the bracket on W2 (not squared): ε keeps halving until
        sqrt(U) - sqrt(L) <= tol or ε reaches its floor (1/16 of the finest spacing^2).
    epsilon : float, optional
        Final ε, if given (the bracket is then computed once, at that ε).
    quantize : float, optional
        A side may stop at a clustering whose quantization error (W2 to its barycentres) is
        below this (chordal only; default tol/2): used for measures on curves and atoms.

    Returns
    -------
    lower, upper : float (bounds on W2^2), details : dict
    """
    t0 = time.perf_counter()
    geodesic = cost == "geodesic"
    diam = cost_diameter(cost)
    hx = hierarchy(x, a, cost, coarsest, seed=seed)
    if nu_levels is not None and nu_levels[-1].n == len(b) and nu_levels[0].n <= coarsest:
        hy = nu_levels
    else:
        hy = hierarchy(y, b, cost, coarsest, seed=seed + 1)
    t_hier = time.perf_counter() - t0
    # The composed coupling costs exactly delta^2 more than the clustered one (barycentre
    # identity), so delta <= tol/2 spends at most tol/2 of the bracket on W2, even at W2 = 0.
    budget = tol / 2 if quantize is None else float(quantize)
    if geodesic:
        fx, fy = len(hx) - 1, len(hy) - 1
    else:
        fx, fy = _final_level(hx, budget), _final_level(hy, budget)
        if not (hx[fx].full or hy[fy].full):
            # Keep one side at its points so that the lower bound starts from real potentials.
            if hx[fx].n >= hy[fy].n:
                fx = len(hx) - 1
            else:
                fy = len(hy) - 1
    nlev = max(fx, fy) + 1
    pairs = [(min(k, fx), min(k, fy)) for k in range(nlev)]
    eps = diam / 4
    X, Y = hx[pairs[0][0]], hy[pairs[0][1]]
    # Between stages the potentials are kept mass-free, u' = u - (eps/2) log a, which do not
    # move when eps is halved; inside a stage they are the absolute u of the plan formula.
    up = np.zeros(X.n)
    vp = np.zeros(Y.n)
    log = []
    total_iter = 0
    S = None
    final_res = [L.spacing2 for L in (hx[fx], hy[fy]) if L.n > FEW_POINTS and L.spacing2 > 0]
    final_res = final_res or [1e-3 * diam]
    # Below ~1e-9 diam^2 the plan is a permutation to round-off; nothing is gained there.
    final_eps_floor = max(min(final_res) / 16, 1e-9 * diam) if epsilon is None else float(epsilon)
    check_eps = 4 * max(final_res)
    lower, upper = -np.inf, np.inf
    resid = np.nan
    for k, (ix, iy) in enumerate(pairs):
        if k > 0:
            Xn, Yn = hx[ix], hy[iy]
            if Xn is not X or Yn is not Y:
                up, vp = _transfer(X, up, Y, vp, Xn, Yn, cost)
                X, Y = Xn, Yn
        last = k == len(pairs) - 1
        # A level is left once eps reaches the resolution of the sides that are still coarser
        # than their final level (a few atoms are not an approximation of anything).
        level_eps = max([Lv.spacing2 for Lv, f in ((X, hx[fx]), (Y, hy[fy])) if Lv is not f]
                        or [0.0])
        while True:
            u = up + 0.5 * eps * np.log(X.weights)
            v = vp + 0.5 * eps * np.log(Y.weights)
            S = _support(X, Y, u, v, eps, theta, geodesic)
            check = last and (eps <= check_eps if epsilon is None
                              else eps <= epsilon * (1 + 1e-12))
            it, err = _sinkhorn(S, X, Y, u, v, eps, 1e-5 if check else 1e-3,
                                max_iter if check else stage_iter, omega if check else 1.0)
            total_iter += it
            up = u - 0.5 * eps * np.log(X.weights)
            vp = v - 0.5 * eps * np.log(Y.weights)
            entry = {"level": (X.n, Y.n), "eps": eps, "nnz": S.nnz, "iter": it, "err": err,
                     "t": time.perf_counter() - t0}
            done = False
            if check:
                lo, hi, res = _bracket(x, a, y, b, X, Y, S, u, v, eps, cost)
                entry.update(lower=lo, upper=hi, residual=res)
                # Each bound is valid on its own: keep the best of each.
                lower = max(lower, lo)
                if hi < upper:
                    upper, resid = hi, res
                width = np.sqrt(max(upper, 0)) - np.sqrt(max(min(lower, upper), 0))
                done = (width <= tol or eps <= final_eps_floor * (1 + 1e-12)
                        or epsilon is not None)
            log.append(entry)
            if verbose:
                print(entry)
            if done or (not last and eps <= level_eps):
                break
            eps = eps / 2
            if last:
                eps = max(eps, final_eps_floor)
    details = {"n": len(a), "m": len(b), "epsilon": eps, "iterations": total_iter,
               "levels": [(hx[i].n, hy[j].n) for i, j in pairs], "nnz": S.nnz,
               "final_levels": (hx[fx].n, hy[fy].n),
               "quantization": (quantization_error(hx[fx]), quantization_error(hy[fy])),
               "residual_mass": resid, "stages": log,
               "seconds_hierarchy": t_hier, "seconds": time.perf_counter() - t0}
    return lower, upper, details


def w2_multiscale_result(x, a, y, b, cost="chordal", tol=1e-3, **options):
    """:func:`w2_multiscale` wrapped into a :class:`W2Result` (method "multiscale")."""
    from .result import bracket_result

    allowed = {"epsilon", "theta", "coarsest", "max_iter", "stage_iter", "quantize",
               "nu_levels", "seed", "omega", "verbose"}
    unknown = set(options) - allowed
    if unknown:
        raise TypeError(f"unknown option(s) for method='multiscale': {', '.join(sorted(unknown))}; "
                        f"allowed: {', '.join(sorted(allowed))}")
    lower, upper, details = w2_multiscale(x, a, y, b, cost, tol=tol, **options)
    r = bracket_result(upper, lower, cost, "multiscale", details)
    r.details["tol"] = tol
    r.details["tol_met"] = bool(r.upper - r.lower <= tol)
    return r
