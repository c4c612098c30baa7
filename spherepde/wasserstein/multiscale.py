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
:math:`e^{-\theta}\sqrt{a_i b_j}`. These pairs are found by a branch-and-bound range search
(:class:`~spherepde.wasserstein.search.ConeTree`: a ball tree with a linear model of the
potential in each node), so memory stays O((n + m) k) with k the number of kept neighbours
(tens), instead of n·m. The log-domain Sinkhorn sweeps over that sparse support are numba
loops, parallel over rows. At the final levels the bracket itself is the stopping test.

Certification does not trust any of this: the bracket is computed on the original measures.

* Upper bound: the approximate plan is rounded onto the exact marginals (Altschuler, Weed &
  Rigollet 2017, Alg. 2: scale rows down, columns down, then couple the residual marginals:
  exactly when small, else along a space-filling order or by their product, whichever costs
  less). If a side was stopped at a coarse level, the plan between clusters is composed
  with the split of each cluster among its points; for the chordal cost that composed plan's
  cost is exact from the barycentres, :math:`\sum \pi_{kl} (2 - 2\langle \bar x_k,
  \bar y_l\rangle)`, so it is the cost of a feasible coupling of the original clouds.
* Lower bound: a potential on the original points is c-transformed exactly twice
  (branch-and-bound search, :func:`~spherepde.wasserstein.costs.c_transform`); the pair
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
from dataclasses import dataclass, field

import numba as nb
import numpy as np
from scipy.spatial import cKDTree

from ._hierarchy import _lower_bound, _morton_keys, _northwest_pairs, _prune, _widen
from .costs import c_transform, cost_diameter, geodesic_from_chordal
from .newton import newton_columns, softmin_row
from .search import ConeTree

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
#: Points of least mass are left out while their total keeps W2 within tol / PRUNE of the
#: original on each side (a density integrated on a mesh has cells of mass 1e-40).
PRUNE = 200
#: "auto" solves by Newton (:mod:`.newton`) instead of Sinkhorn sweeps when a final level has
#: this many points: the stages at the final levels and at every level pair whose two sides
#: both have that many. There Sinkhorn's large-scale convergence stalls.
NEWTON_MIN_POINTS = 32768
#: Newton iterations per stage (a stage needs 2-4 from the previous stage's potentials), and
#: at a final stage, where the marginals are converged to NEWTON_MARGINAL_TOL (L1) so that
#: the rounding onto the marginals costs nothing measurable.
NEWTON_STAGE_ITER = 10
NEWTON_FINAL_ITER = 30
NEWTON_MARGINAL_TOL = 1e-8
#: With quantize=None, the side with more points, if it has more than QUANTIZE_MIN_POINTS,
#: stops at its finest clustering of at most that many clusters when its quantization error
#: is at most QUANTIZE_TOL * tol (the finest, not the coarsest within the budget: where the
#: tokens are concentrated a coarser level reaches the budget while W2 is small too, and the
#: width then misses tol). Solved at its points, such a side stalls Newton (10^6 tokens
#: against the 393,216-cell mesh: a token keeps one to four cells in its support; 10^5 tokens
#: and the 393,216 cells converge); the composed coupling then costs about
#: sqrt(W2^2 + delta^2) - sqrt(W2^2 - delta^2) of width (measured: delta = 2.7e-3 gives
#: 1.8e-3 at W2 = 5e-3), within tol = delta / 1.5 once W2 >= 1.6 delta. Where W2 is smaller
#: the bracket stays true but wider, and details["tol_met"] says so.
QUANTIZE_MIN_POINTS = 500_000
QUANTIZE_TOL = 1.5
#: New support searches at a final stage whose Newton solve stalled (see newton.STALL_STEPS).
NEWTON_RESEARCH = 3
#: A final Sinkhorn stage whose bracket stalls while its marginal error (L1) is above
#: RESEARCH_ERR searches its truncated support again from the potentials it has reached (at
#: most RESEARCH times) instead of passing them on to the next ε: the support was searched
#: from potentials whose error grows with the transport distance over the cluster spacing,
#: and a stage started from unconverged marginals ends further off (two vMF clouds 45 degrees
#: apart, W2 = 0.57: 0.016, 0.024, 0.058, 0.37, then the continuation broke down).
RESEARCH = 3
RESEARCH_ERR = 1e-3
#: The solve gives up when this many stages in a row end with a marginal error (L1) above
#: DIVERGED_ERR: the coarse-to-fine continuation has broken down (concentrated measures, where
#: each point keeps one or two partners; see docs/methods.md), and every later stage only
#: stalls. What it returns is then certified but trivial (details["stopped"] says why), and
#: "auto" moves on to the quantized solver. Measured: 10^6 two-cap tokens against 6·64^2
#: cells went from err 0.002 to 0.09, 0.25, 0.51 over three stages, then stalled near 0.5
#: for the 330 s left; 10^5 of them reached 0.047, 0.095, 0.070, 0.076 and then spent 515 s
#: of Newton steps between 0.08 and 0.13; broad measures end their stages below 0.02.
DIVERGED_ERR = 0.05
DIVERGED_STAGES = 3


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
    labels: np.ndarray = None  # cluster of each point of the full level (None when full)
    _tree: object = None

    @property
    def n(self):
        return len(self.weights)

    @property
    def tree(self):
        """The :class:`~.search.ConeTree` over the points (built once, on first use)."""
        if self._tree is None:
            self._tree = ConeTree(self.points)
        return self._tree


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
    full, full_order = _level(x, a, np.zeros(n), True)
    levels = []
    K = coarsest
    while 2 * K <= n:
        centres = x[perm[:K]]
        _, lab = cKDTree(centres).query(x, workers=-1)
        W = np.bincount(lab, weights=a, minlength=K)
        keep = W > 0
        bary = np.stack([np.bincount(lab, weights=a * x[:, k], minlength=K)
                         for k in range(x.shape[1])], axis=1)[keep] / W[keep, None]
        remap = np.cumsum(keep) - 1
        lab = remap[lab]
        if cost == "chordal":
            diff = x - bary[lab]
            off = np.bincount(lab, weights=a * np.einsum("nd,nd->n", diff, diff),
                              minlength=len(bary)) / W[keep]
        else:
            bary = bary / np.linalg.norm(bary, axis=1, keepdims=True)
            off = np.zeros(len(bary))
        L, order = _level(bary, W[keep], off, False)
        # Cluster of each point of the full level, as an index into this level's order.
        inv = np.empty(len(order), np.int64)
        inv[order] = np.arange(len(order))
        L.labels = inv[lab[full_order]]
        levels.append(L)
        K *= refine
    levels.append(full)
    return levels


def _level(points, weights, offset, full):
    """A Level in kd-tree leaf order (a spatial sort: neighbours in space become neighbours
    in memory, which keeps the sparse sweeps cache-friendly), and that order."""
    order = cKDTree(points, leafsize=8).indices
    return Level(np.ascontiguousarray(points[order]), weights[order], offset[order], full,
                 _spacing2(points)), order


def quantization_error(level):
    r"""sqrt(sum_k A_k o_k): the cost of moving every point to its cluster's barycentre, an
    upper bound on W2(cloud, clustered cloud) (chordal)."""
    return float(np.sqrt(max(level.weights @ level.offset, 0.0)))


# ---------------------------------------------------------------------------------- kernels
# serial: cheap next to the sweeps; a parallel kernel costs seconds more to compile
@nb.njit(cache=True)
def _layout_costs(indptr, idx, P, Q, op, oq, geodesic):
    """Costs of the pairs (i, idx[p]), p in indptr[i]:indptr[i + 1], between the points P
    (offsets op) and Q (offsets oq)."""
    out = np.empty(idx.size)
    d = P.shape[1]
    for i in range(indptr.size - 1):
        for k in range(indptr[i], indptr[i + 1]):
            j = idx[k]
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
def _transpose(indptr, idx, cost, t_indptr, t_idx, t_cost):
    """The pairs of a layout regrouped by the other side (counting sort; t_indptr holds the
    counts per group shifted by one on entry, the offsets on return)."""
    for j in range(t_indptr.size - 1):
        t_indptr[j + 1] += t_indptr[j]
    fill = t_indptr[:-1].copy()
    for i in range(indptr.size - 1):
        for p in range(indptr[i], indptr[i + 1]):
            j = idx[p]
            t_idx[fill[j]] = i
            t_cost[fill[j]] = cost[p]
            fill[j] += 1


@nb.njit(cache=True)
def _insert(indptr, idx, rows, cols):
    """The layout (indptr, idx) with the pairs (rows[k], cols[k]) added (rows sorted)."""
    n = indptr.size - 1
    added = np.zeros(n + 1, np.int64)
    for r in rows:
        added[r + 1] += 1
    out_ptr = indptr + np.cumsum(added)
    out = np.empty(idx.size + rows.size, idx.dtype)
    k = 0
    for i in range(n):
        q = out_ptr[i]
        for p in range(indptr[i], indptr[i + 1]):
            out[q] = idx[p]
            q += 1
        while k < rows.size and rows[k] == i:
            out[q] = cols[k]
            q += 1
            k += 1
    return out_ptr, out


@nb.njit(cache=True)
def _round_plan(indptr, idx, cost, P, wa, wb, major_first):
    """Altschuler–Weed–Rigollet rounding of the plan P (layout grouped by the side of
    marginal wa; the other side's is wb): scale the groups down to wa (first, when
    major_first), the other side down to wb, in place. Returns the cost of what is left and
    the residual marginals (wa - P 1, wb - P^T 1, clipped at 0)."""
    n, m = wa.size, wb.size
    for rnd in range(2):
        if (rnd == 0) == major_first:
            for i in range(n):
                s = 0.0
                for p in range(indptr[i], indptr[i + 1]):
                    s += P[p]
                f = min(wa[i] / s, 1.0) if s > 0 else 0.0
                for p in range(indptr[i], indptr[i + 1]):
                    P[p] *= f
        else:
            cs = np.zeros(m)
            for i in range(n):
                for p in range(indptr[i], indptr[i + 1]):
                    cs[idx[p]] += P[p]
            g = np.empty(m)
            for j in range(m):
                g[j] = min(wb[j] / cs[j], 1.0) if cs[j] > 0 else 0.0
            for i in range(n):
                for p in range(indptr[i], indptr[i + 1]):
                    P[p] *= g[idx[p]]
    err_a = wa.copy()
    err_b = wb.copy()
    total = 0.0
    for i in range(n):
        for p in range(indptr[i], indptr[i + 1]):
            err_a[i] -= P[p]
            err_b[idx[p]] -= P[p]
            total += P[p] * cost[p]
    return total, np.maximum(err_a, 0.0), np.maximum(err_b, 0.0)


@nb.njit(parallel=True, cache=True)
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
    for k in nb.prange(n):
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
            new = eps * logw[k] + softmin_row(lo, hi, idx, other, cost, eps)
            err += w
        pot[k] = old + omega * (new - old)
    return err


# serial: cheap next to the sweeps; a parallel kernel costs seconds more to compile
@nb.njit(cache=True)
def _plan_rows(indptr, idx, cost, u, v, eps):
    n = indptr.size - 1
    out = np.empty(cost.size)
    for k in range(n):
        for p in range(indptr[k], indptr[k + 1]):
            out[p] = np.exp((u[k] + v[idx[p]] - cost[p]) / eps)
    return out


# serial: cheap next to the sweeps; a parallel kernel costs seconds more to compile
@nb.njit(cache=True)
def _layout_plan_cost(indptr, idx, cost, u, v, eps):
    total = 0.0
    for k in range(indptr.size - 1):
        for p in range(indptr[k], indptr[k + 1]):
            total += np.exp((u[k] + v[idx[p]] - cost[p]) / eps) * cost[p]
    return total


def _plan_cost(S, u, v, eps):
    """sum_ij pi_ij c_ij of the sparse plan (u on X, v on Y): near W2^2 plus the entropic
    bias once the marginals are near; an estimate, never a bound."""
    return (_layout_plan_cost(S.indptr, S.idx, S.cost, u, v, eps) if S.x_major
            else _layout_plan_cost(S.indptr, S.idx, S.cost, v, u, eps))


# serial: cheap next to the sweeps; a parallel kernel costs seconds more to compile
@nb.njit(cache=True)
def _best_partner(indptr, idx, cost, pot, m, by_group):
    """On a sparse support (grouped by one side, m points on the other): per group k the
    partner l minimizing c_kl - pot_l (by_group), else per point l of the other side the
    group k minimizing c_kl - pot_k; -1 where there is none."""
    n = indptr.size - 1
    out = np.full(n if by_group else m, -1, np.int64)
    best = np.full(n if by_group else m, np.inf)
    for k in range(n):
        for p in range(indptr[k], indptr[k + 1]):
            l = idx[p]
            if by_group:
                v = cost[p] - pot[l]
                if v < best[k]:
                    best[k] = v
                    out[k] = l
            else:
                v = cost[p] - pot[k]
                if v < best[l]:
                    best[l] = v
                    out[l] = k
    return out


# ---------------------------------------------------------------------------------- support
class _Support:
    """The kept pairs, stored once (12 bytes a pair): grouped by the side with more points
    (the "major" side, X when x_major; Newton eliminates it), indptr (n_major + 1,), idx
    (nnz,) int32 indices into the other side, cost (nnz,). The layout grouped by the other
    side is built on demand (Sinkhorn sweeps need both) and kept."""

    def __init__(self, x_major, indptr, idx, cost, n_minor):
        self.x_major = x_major
        self.indptr, self.idx, self.cost = indptr, idx, cost
        self.n_minor = n_minor
        self._other = None

    @property
    def nnz(self):
        return self.cost.size

    def by(self, side):
        """(indptr, idx, cost) grouped by side "x" or "y"."""
        if (side == "x") == self.x_major:
            return self.indptr, self.idx, self.cost
        if self._other is None:
            t_indptr = np.zeros(self.n_minor + 1, np.int64)
            t_indptr[1:] = np.bincount(self.idx, minlength=self.n_minor)
            n_major = self.indptr.size - 1
            t_idx = np.empty(self.nnz, np.int32 if n_major < 2**31 else np.int64)
            t_cost = np.empty(self.nnz)
            _transpose(self.indptr, self.idx, self.cost, t_indptr, t_idx, t_cost)
            self._other = (t_indptr, t_idx, t_cost)
        return self._other

    def pairs(self, side):
        """The support as (index on side, index on the other side) arrays, in layout order."""
        own = np.repeat(np.arange(self.indptr.size - 1, dtype=self.idx.dtype), np.diff(self.indptr))
        return (own, self.idx) if (side == "x") == self.x_major else (self.idx, own)

    def best_partner(self, on, pot):
        """For each point of side ``on``, its partner on the other side minimizing c - pot
        (pot on the other side), among its pairs (-1 if none)."""
        return _best_partner(self.indptr, self.idx, self.cost, pot, self.n_minor,
                             (on == "x") == self.x_major)


def _support(X, Y, u, v, eps, theta, geodesic):
    """Pairs with c - u' - v' <= theta eps, plus, for every point of either side left without
    one, its best partner (the argmin of its c-transform). The tree is built over the side
    with fewer points and queried with the other's, so the lists come grouped by the larger
    side, the layout Newton works in."""
    up = u - 0.5 * eps * np.log(X.weights)
    vp = v - 0.5 * eps * np.log(Y.weights)
    cost = "geodesic" if geodesic else "chordal"
    x_major = Y.n <= X.n
    A, fa, B, fb = (X, up, Y, vp) if x_major else (Y, vp, X, up)
    tb = B.tree.fit(fb - B.offset)
    indptr, idx = tb.within(A.points, theta * eps + fa - A.offset, cost)
    extra_a, extra_b = [], []
    ea = np.flatnonzero(np.diff(indptr) == 0)
    if ea.size:
        _, k = tb.cmin(A.points[ea], cost)
        extra_a.append(ea)
        extra_b.append(k)
    seen = np.zeros(B.n, bool)
    seen[idx] = True
    eb = np.flatnonzero(~seen)
    del seen
    if eb.size:
        _, k = A.tree.fit(fa - A.offset).cmin(B.points[eb], cost)
        extra_a.append(k)
        extra_b.append(eb)
    if extra_a:
        # Sorted by the major side, without the duplicates both additions may have produced.
        key = np.unique(np.concatenate(extra_a).astype(np.int64) * B.n + np.concatenate(extra_b))
        indptr, idx = _insert(indptr, idx, key // B.n, (key % B.n).astype(idx.dtype))
    c = _layout_costs(indptr, idx, A.points, B.points, A.offset, B.offset, geodesic)
    return _Support(x_major, indptr, idx, c, B.n)


def _transfer(Xc, up, Yc, vp, Xf, Yf, cost):
    r"""Mass-free potentials on the finer levels from the coarser ones, by hard c-transforms
    (coarse x -> fine y -> fine x)."""
    g, _ = c_transform(Xc.points, up - Xc.offset, Yf.points, cost, tree=Xc.tree)
    g = g + Yf.offset
    f, _ = c_transform(Yf.points, g - Yf.offset, Xf.points, cost, tree=Yf.tree)
    return f + Xf.offset, g


def _sinkhorn(S, X, Y, u, v, eps, tol, maxiter, omega=1.0):
    """Alternate sparse log-domain updates until the column marginal error is <= tol.

    omega > 1 is over-relaxation (Thibault, Chizat, Dossal & Papadakis 2021): a few times
    fewer iterations at small eps, but it may oscillate far from the fixed point: it is used
    in the final stages only, and dropped for the rest of the stage as soon as the error
    exceeds twice its best value in the stage. Returns (iterations, error, omega in effect):
    a caller that continues the same stage passes that omega back.
    """
    la, lb = np.log(X.weights), np.log(Y.weights)
    sx, sy = S.by("x"), S.by("y")
    err = np.inf
    it = 0
    best = np.inf
    for it in range(1, maxiter + 1):  # noqa: B007 (the count is returned)
        _softmin(*sx, v, la, eps, u, omega)
        err = _softmin(*sy, u, lb, eps, v, omega)
        if omega > 1:
            # Over-relaxation does not damp the gauge mode (u + s, v - s), which otherwise
            # grows geometrically until c - u - v has no digits left.
            shift = 0.5 * (np.mean(u) - np.mean(v))
            u -= shift
            v += shift
        if err <= tol:
            break
        if omega > 1 and err > 2 * best:
            omega = 1.0
        best = min(best, err)
    # Finish on a plain u-update so that the row marginals are exact.
    _softmin(*sx, v, la, eps, u, 1.0)
    return it, err, omega


# ---------------------------------------------------------------------------------- bracket
def _upper_bound(S, X, Y, u, v, eps, cost):
    """Cost of the sparse plan rounded onto the exact marginals (a feasible coupling)."""
    A, B, ua, vb = (X, Y, u, v) if S.x_major else (Y, X, v, u)
    P = _plan_rows(S.indptr, S.idx, S.cost, ua, vb, eps)
    # X's side is scaled first, then Y's (Altschuler et al.), whichever side groups the layout.
    upper, err_a, err_b = _round_plan(S.indptr, S.idx, S.cost, P, A.weights, B.weights,
                                      S.x_major)
    del P
    err_r, err_c = (err_a, err_b) if S.x_major else (err_b, err_a)
    E = 0.5 * (err_r.sum() + err_c.sum())
    if E > 0:
        upper += _residual_cost(X, err_r, Y, err_c, E, cost)
    return upper, float(E)


#: The residual marginals of the rounded plan are transported exactly (network simplex) when
#: their supports have at most this many pairs; beyond, by the product coupling.
RESIDUAL_EXACT_PAIRS = 250_000


@nb.njit(cache=True)
def _northwest_cost(P, op, Q, oq, r, c, geodesic):
    """Cost of the north-west-corner coupling of r (on P, in order) and c (on Q, in order),
    both of the same total: a feasible coupling, cheap when the orders follow space."""
    rows, cols, mass = _northwest_pairs(r, c)
    total = 0.0
    d = P.shape[1]
    for p in range(rows.size):
        i, j = rows[p], cols[p]
        s = 0.0
        for k in range(d):
            z = P[i, k] - Q[j, k]
            s += z * z
        if geodesic:
            th = 2.0 * np.arcsin(min(np.sqrt(s) * 0.5, 1.0))
            s = th * th
        else:
            s += op[i] + oq[j]
        total += mass[p] * s
    return total


def _residual_cost(X, err_r, Y, err_c, E, cost):
    """Cost of a coupling of the residual marginals err_r (on X) and err_c (on Y), mass E:
    exact (network simplex) when small, else the cheaper of the product coupling and the
    north-west-corner coupling along a space-filling (Morton) order, which pairs residual
    mass with nearby residual mass."""
    import ot

    i = np.flatnonzero(err_r > 0)
    j = np.flatnonzero(err_c > 0)
    ri, cj = err_r[i] / err_r[i].sum(), err_c[j] / err_c[j].sum()
    if i.size * j.size <= RESIDUAL_EXACT_PAIRS:
        diff = X.points[i, None, :] - Y.points[None, j, :]
        C = np.einsum("ijd,ijd->ij", diff, diff)
        if cost == "chordal":
            C += X.offset[i, None] + Y.offset[None, j]
        else:
            C = geodesic_from_chordal(C)
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
    product = chord if cost == "chordal" else np.pi**2 / 4 * chord
    d = X.points.shape[1]
    bits = max(1, 63 // d)
    oi = np.argsort(_morton_keys(X.points[i], bits), kind="stable")
    oj = np.argsort(_morton_keys(Y.points[j], bits), kind="stable")
    # The two normalized totals agree to round-off; the last pair absorbs the difference.
    nw = _northwest_cost(np.ascontiguousarray(X.points[i][oi]), X.offset[i][oi],
                         np.ascontiguousarray(Y.points[j][oj]), Y.offset[j][oj],
                         ri[oi], cj[oj], cost == "geodesic")
    return min(product, nw * E)


def _extend(Y, vp, YF, own, other, P, X):
    r"""A potential on the points of YF from the potential vp of its clustering Y, to first
    order: :math:`g(y) = v'_l + 2\langle x^*_l, \bar y_l - y\rangle` for y in cluster l,
    with :math:`x^*_l` the barycentre of the X-clusters the plan P (pairs own (on Y),
    other (on X)) sends to l. Since :math:`|x - y|^2 = |x - \bar y_l|^2 + o_l -
    2\langle x, y - \bar y_l\rangle` on average over the cluster, this makes c - g flat in y
    across the cluster at :math:`x^*_l`, and its average over the cluster is :math:`v'_l`.
    Any g gives a valid bound; this one is cheap (no search over the curve's fibres)."""
    mass = np.bincount(own, weights=P, minlength=Y.n)
    d = X.points.shape[1]
    xstar = np.stack([np.bincount(own, weights=P * X.points[other, k], minlength=Y.n)
                      for k in range(d)], axis=1) / np.where(mass > 0, mass, 1.0)[:, None]
    lab = Y.labels
    return vp[lab] + 2.0 * np.einsum("nd,nd->n", xstar[lab], Y.points[lab] - YF.points)


def _bracket(XF, YF, X, Y, S, u, v, eps, cost, lower_too=True, side=None):
    """(lower, upper, residual mass) on W2^2 between the full levels XF, YF (the original
    clouds, reordered) from the plan and potentials on the current levels X, Y. lower is
    -inf unless lower_too (the lower bound costs two c-transforms of the full clouds).
    side ("x" or "y"): take the lower bound from that side's potential only (after Newton,
    the converged one; the other is its soft c-transform and adds nothing but the cost)."""
    upper, resid = _upper_bound(S, X, Y, u, v, eps, cost)
    if not lower_too:
        return -np.inf, upper, resid
    lows = []
    up = u - 0.5 * eps * np.log(X.weights)
    vp = v - 0.5 * eps * np.log(Y.weights)
    both = X.full and Y.full
    if X.full and side != "y":
        lows.append(_lower_bound(X, YF, up, cost, (S, "x") if both else None))
    if Y.full and side != "x":
        lows.append(_lower_bound(Y, XF, vp, cost, (S, "y") if both else None))
    if not lows:
        # Neither side at its points: a potential on the points of one cloud from the
        # clusters of the other (the finer clustering), then one exact c-transform onto the
        # points of the coarser side. (Only one: when a cloud is sent onto a curve, the
        # transform onto the curve's points is flat along the fibres of the map and costs
        # a search over whole fibres.)
        P = (_plan_rows(S.indptr, S.idx, S.cost, u, v, eps) if S.x_major
             else _plan_rows(S.indptr, S.idx, S.cost, v, u, eps))
        on_x, on_y = S.pairs("x")
        if Y.n <= X.n:
            g = _extend(Y, vp, YF, on_y, on_x, P, X)
            lows.append(_lower_bound(YF, XF, g, cost, twice=False))
        else:
            f = _extend(X, up, XF, on_x, on_y, P, Y)
            lows.append(_lower_bound(XF, YF, f, cost, twice=False))
    return max(lows), upper, resid


# ---------------------------------------------------------------------------------- driver
def _keep_best(lower, upper, resid, lo, hi, res):
    """Each bound is valid on its own: keep the best of each (with the upper one's residual
    mass), and the width sqrt(U) - sqrt(L) on W2."""
    lower = max(lower, lo)
    if hi < upper:
        upper, resid = hi, res
    return lower, upper, resid, np.sqrt(max(upper, 0)) - np.sqrt(max(min(lower, upper), 0))


def _solve_stage(S, X, Y, u, v, eps, tol, maxiter, verbose=False, deadline=None):
    """Newton (:func:`.newton.newton_columns`) on the smaller side's potential, the larger
    side (the support's major side) eliminated by its exact soft c-transform. Returns
    (iterations, error, CG iterations)."""
    if S.x_major:
        return newton_columns(S.indptr, S.idx, S.cost, X.weights, Y.weights, u, v, eps, tol,
                              maxiter, points=Y.points, deadline=deadline, verbose=verbose)
    return newton_columns(S.indptr, S.idx, S.cost, Y.weights, X.weights, v, u, eps, tol,
                          maxiter, points=X.points, deadline=deadline, verbose=verbose)


def _final_level(levels, budget):
    """Index of the coarsest level whose quantization error is below budget (chordal)."""
    for k, L in enumerate(levels):
        if L.full or quantization_error(L) <= budget:
            return k
    return len(levels) - 1


def _quantization_budget(X0, Y0, tol, quantize):
    r"""Largest quantization error delta allowed to each side, and a lower bound on W2.

    Stopping a side at a clustering costs the composed coupling about
    :math:`(\delta_x^2 + \delta_y^2) / (2 W_2)` on W2 (barycentre identity; the clustered
    optimum is typically below W2 by as much), so :math:`\delta^2 \le \text{tol}\, W_2 / 4`
    per side keeps that near tol/4. W2 is bounded below from the coarsest clusterings:
    :math:`W_2 \ge W_2(\mu_K, \nu_K) - \delta_x - \delta_y` (triangle inequality), with the
    clustered W2 exact by the network simplex. Without that bound (W2 may be 0) delta <= tol/2
    (then the excess is at most tol/2 even at W2 = 0).
    """
    import ot

    if quantize is not None:
        return float(quantize), 0.0
    # Between the clustered measures the cost is the barycentre distance alone (no offsets).
    diff = X0.points[:, None, :] - Y0.points[None, :, :]
    val = ot.emd2(X0.weights, Y0.weights, np.einsum("ijd,ijd->ij", diff, diff),
                  numItermax=10_000_000)
    w2_low = max(np.sqrt(max(float(val), 0.0)) - quantization_error(X0)
                 - quantization_error(Y0), 0.0)
    return max(tol / 2, np.sqrt(tol * w2_low / 4)), w2_low


@dataclass(frozen=True)
class _Run:
    """What the stages of one solve read: the original clouds' full levels XF, YF, the cost
    and its diameter diam (largest cost), the truncation theta, the iteration settings of the
    stages, the target width tol on W2 (tol less the pruning's slack), the time budget
    max_seconds and its deadline (perf_counter seconds, or None), the start time t0 and
    verbosity."""

    XF: Level
    YF: Level
    cost: str
    diam: float
    theta: float
    max_iter: int
    stage_iter: int
    check_chunk: int
    omega: float
    tol: float
    max_seconds: float | None
    deadline: float | None
    t0: float
    verbose: bool

    @property
    def geodesic(self) -> bool:
        return self.cost == "geodesic"

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline


@dataclass(frozen=True)
class _Pruned:
    """The clouds as solved: the hierarchies hx, hy of the pruned clouds, the points and mass
    pruned from each side (pruned, tau), the slack that pruning adds to W2 (slack) and the
    seconds the hierarchies took (t_hier)."""

    hx: list
    hy: list
    n0: int
    m0: int
    pruned: tuple
    tau: tuple
    slack: float
    t_hier: float


@dataclass(frozen=True)
class _Schedule:
    """Where the continuation goes: the final level indices fx, fy (and the levels FX, FY),
    the quantization budgets bx, by, the coarse lower bound w2_low on W2, the level pairs of
    the stages, the floor of eps (final_eps_floor), the eps from which the bracket is tested
    (check_eps), the final eps asked for (epsilon or None) and whether the final stages go
    by Newton (by_newton)."""

    fx: int
    fy: int
    FX: Level
    FY: Level
    bx: float | None
    by: float | None
    w2_low: float
    pairs: list
    final_eps_floor: float
    check_eps: float
    epsilon: float | None
    by_newton: bool


@dataclass
class _State:
    """What the stages change: the current levels X, Y, their mass-free potentials up, vp
    (kept between stages, see :func:`w2_multiscale`), eps, the support S, the best bracket
    (lower, upper, with the upper one's residual mass resid), the stage log, the iterations
    in all, the count of diverged stages in a row, and why the solve stopped (or None)."""

    X: Level
    Y: Level
    up: np.ndarray
    vp: np.ndarray
    eps: float
    S: object = None
    lower: float = -np.inf
    upper: float = np.inf
    resid: float = np.nan
    log: list = field(default_factory=list)
    total_iter: int = 0
    bad_stages: int = 0
    stopped: str | None = None


def _final_levels(hx, hy, tol, quantize, geodesic):
    """The levels (fx, fy) the solve ends at, the quantization budgets (bx, by) of the two
    sides (None for the geodesic cost, whose sides end at their points) and the coarse lower
    bound w2_low on W2 (see :func:`_quantization_budget`)."""
    if geodesic:
        return len(hx) - 1, len(hy) - 1, None, None, 0.0
    budget, w2_low = _quantization_budget(hx[0], hy[0], tol, quantize)
    bx = by = budget
    fx, fy = _final_level(hx, budget), _final_level(hy, budget)
    if not (hx[fx].full or hy[fy].full) and budget <= tol / 2:
        # W2 may be ~0: keep one side at its points so that the lower bound starts from
        # real potentials.
        if hx[fx].n >= hy[fy].n:
            fx = len(hx) - 1
        else:
            fy = len(hy) - 1
    if quantize is None and max(hx[-1].n, hy[-1].n) > QUANTIZE_MIN_POINTS:
        # The larger side, left at its points, stops at its finest clustering of at most
        # QUANTIZE_MIN_POINTS clusters (the smallest quantization error that still
        # avoids the stall), if that error is within QUANTIZE_TOL * tol and the other
        # side is at its points (the lower bound needs one side there).
        big, f_big, f_other = (hx, fx, fy) if hx[-1].n >= hy[-1].n else (hy, fy, fx)
        other = hy if big is hx else hx
        fine = [k for k, L in enumerate(big) if not L.full and L.n <= QUANTIZE_MIN_POINTS]
        if (big[f_big].full and other[f_other].full and fine
                and quantization_error(big[fine[-1]]) <= QUANTIZE_TOL * tol):
            if big is hx:
                fx, bx = fine[-1], QUANTIZE_TOL * tol
            else:
                fy, by = fine[-1], QUANTIZE_TOL * tol
    return fx, fy, bx, by, w2_low


def _final_stage(run, S, X, Y, u, v, eps, best):
    """One final stage by Sinkhorn sweeps in growing chunks, stopped as soon as the bracket is
    narrow enough (the plan's marginal error says nothing about the width by itself), when
    it stalls, or at the deadline. u, v are updated in place; best = (lower, upper,
    residual) is the bracket kept so far. Returns (support, iterations, marginal error,
    this stage's lower, upper, residual, (lower, upper, residual, width) kept)."""
    lower, upper, resid = best
    chunk, it_stage, om = run.check_chunk, 0, run.omega
    prev_width = np.inf
    researched = 0
    while True:
        it, err, om = _sinkhorn(S, X, Y, u, v, eps, 1e-5, chunk, om)
        it_stage += it
        # The lower bound settles within the first chunk; after that only the
        # upper one moves, and the lower one is recomputed when the stage ends.
        last_chunk = err <= 1e-5 or it_stage >= run.max_iter
        lo, hi, res = _bracket(run.XF, run.YF, X, Y, S, u, v, eps, run.cost,
                               lower_too=chunk == run.check_chunk or last_chunk)
        lower, upper, resid, width = _keep_best(lower, upper, resid, lo, hi, res)
        # This stage's own width: the kept best may come from an earlier stage and
        # then says nothing about whether this one still progresses.
        stage_width = np.sqrt(max(hi, 0)) - np.sqrt(max(min(lower, hi), 0))
        if run.verbose:
            print(f"  chunk: {it_stage} it, err {err:.2e}, nnz {S.nnz}, lower {lo:.6f}, "
                  f"upper {hi:.6f}, residual {res:.2e}, width {width:.2e}, "
                  f"t {time.perf_counter() - run.t0:.1f}")
        if (width <= run.tol or err <= 1e-5 or it_stage >= run.max_iter
                or run.out_of_time()):
            break
        # The plan's entropic bias (about eps on W2^2) does not iterate away: once
        # a chunk closes less than a quarter of what is missing, eps is too large
        # (or at its floor) and more iterations at this eps are wasted.
        if prev_width - stage_width < 0.25 * (stage_width - run.tol):
            if err <= RESEARCH_ERR or researched >= RESEARCH:
                break
            # The marginals are still far off: the support, searched with the
            # potentials the stage started from, may hold no plan with them, and
            # the potentials have moved towards the pairs that are missing.
            researched += 1
            S = None
            S = _support(X, Y, u, v, eps, run.theta, run.geodesic)
            chunk, prev_width = run.check_chunk, np.inf
            continue
        prev_width = stage_width
        chunk = min(2 * chunk, run.max_iter - it_stage)
    return S, it_stage, err, lo, hi, res, (lower, upper, resid, width)


def _newton_final(run, S, X, Y, u, v, eps, floor, best, it, ncg):
    """A final stage by Newton to converged marginals (NEWTON_MARGINAL_TOL), its support
    searched again while Newton stalls; then the rounded plan's cost, and the lower bound
    once eps is below what the width allows (or at its floor). u, v are updated in place;
    it, ncg: the Newton and CG iterations already spent on the stage. Returns (support,
    iterations, marginal error, CG iterations, this stage's lower, upper, residual,
    (lower, upper, residual, width) kept)."""
    lower, upper, resid = best
    it2, err, ncg2 = _solve_stage(S, X, Y, u, v, eps, NEWTON_MARGINAL_TOL,
                                  NEWTON_FINAL_ITER, verbose=run.verbose,
                                  deadline=run.deadline)
    it, ncg = it + it2, ncg + ncg2
    for _ in range(NEWTON_RESEARCH):
        if err <= NEWTON_MARGINAL_TOL:
            break
        S = None
        S = _support(X, Y, u, v, eps, run.theta, run.geodesic)  # as at _final_stage
        it2, err, ncg2 = _solve_stage(S, X, Y, u, v, eps, NEWTON_MARGINAL_TOL,
                                      NEWTON_FINAL_ITER, verbose=run.verbose,
                                      deadline=run.deadline)
        it, ncg = it + it2, ncg + ncg2
    _, hi, res = _bracket(run.XF, run.YF, X, Y, S, u, v, eps, run.cost, lower_too=False)
    lo = -np.inf
    if floor or eps <= 2 * np.sqrt(max(hi, 0.0)) * run.tol:
        # From the Newton side's potential if that side is at its points, else
        # from the other side's (its soft c-transform), if that one is.
        newton_side = "y" if Y.n <= X.n else "x"
        other = "x" if newton_side == "y" else "y"
        at_points = {"x": X.full, "y": Y.full}
        lo, _, _ = _bracket(run.XF, run.YF, X, Y, S, u, v, eps, run.cost,
                            side=newton_side if at_points[newton_side] else
                            (other if at_points[other] else None))
    lower, upper, resid, width = _keep_best(lower, upper, resid, lo, hi, res)
    if run.verbose:
        print(f"  newton: {it} it, {ncg} cg, err {err:.2e}, nnz {S.nnz}, lower {lo:.3e}, "
              f"upper {hi:.3e}, residual {res:.2e}, width {width:.2e}, "
              f"t {time.perf_counter() - run.t0:.1f}")
    return S, it, err, ncg, lo, hi, res, (lower, upper, resid, width)


def w2_multiscale(x, a, y, b, cost="chordal", tol=1e-3, epsilon=None, theta=THETA,
                  coarsest=COARSEST, max_iter=1000, stage_iter=50, check_chunk=10, quantize=None,
                  nu_levels=None, seed=0, omega=1.8, newton=None, prune=None, max_seconds=None,
                  verbose=False):
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
        below this (chordal only). Default: sqrt(tol W2_low / 4), at least tol/2, with W2_low
        a certified lower bound on W2 from the coarsest clusterings (see
        :func:`_quantization_budget`); the side with more points, when it has more than
        ``QUANTIZE_MIN_POINTS`` and the other side is solved at its points, stops at its
        finest clustering of at most that many clusters if its error is within
        ``QUANTIZE_TOL`` * tol. ``details["quantize"]`` records the budget of each side,
        ``details["quantization"]`` the errors taken.
    newton : bool, optional
        Solve the stages at the final levels, and those whose levels both have
        ``NEWTON_MIN_POINTS`` points, by Newton (:mod:`.newton`) rather than Sinkhorn sweeps.
        Default: when one final level has that many points.
    prune : float, optional
        Largest mass left out of each side (its lightest points; see :func:`_prune`). Default:
        what keeps the bracket within tol / PRUNE of each side's W2 change, tol^2 / (PRUNE^2 D).
    max_seconds : float, optional
        Give up once this time has passed (tested inside Newton's steps and the Sinkhorn
        chunks, and at the end of every stage), with the bracket certified so far
        (``details["stopped"]`` says so), as when the continuation breaks down.

    Returns
    -------
    lower, upper : float (bounds on W2^2), details : dict
    """
    t0 = time.perf_counter()
    deadline = None if max_seconds is None else t0 + float(max_seconds)
    diam = cost_diameter(cost)
    pr = _prune_and_cluster(x, a, y, b, cost, diam, tol, coarsest, nu_levels, seed, prune, t0)
    sched = _schedule(pr.hx, pr.hy, cost, diam, tol, quantize, epsilon, newton)
    run = _Run(XF=pr.hx[-1], YF=pr.hy[-1], cost=cost, diam=diam, theta=theta, max_iter=max_iter,
               stage_iter=stage_iter, check_chunk=check_chunk, omega=omega,
               tol=tol - 2 * pr.slack, max_seconds=max_seconds, deadline=deadline, t0=t0,
               verbose=verbose)
    X, Y = pr.hx[sched.pairs[0][0]], pr.hy[sched.pairs[0][1]]
    # Between stages the potentials are kept mass-free, u' = u - (eps/2) log a, which do not
    # move when eps is halved; inside a stage they are the absolute u of the plan formula.
    st = _State(X, Y, np.zeros(X.n), np.zeros(Y.n), diam / 4)
    for k, (ix, iy) in enumerate(sched.pairs):
        if st.stopped:
            break
        if k > 0:
            Xn, Yn = pr.hx[ix], pr.hy[iy]
            if Xn is not st.X or Yn is not st.Y:
                st.up, st.vp = _transfer(st.X, st.up, st.Y, st.vp, Xn, Yn, cost)
                st.X, st.Y = Xn, Yn
        _solve_level(run, sched, st, last=k == len(sched.pairs) - 1)
    lower, upper = st.lower, st.upper
    if pr.slack > 0:
        lower, upper = _widen(lower, upper, pr.slack)
    details = {"n": pr.n0, "m": pr.m0, "epsilon": st.eps, "iterations": st.total_iter,
               "pruned": pr.pruned, "pruned_mass": pr.tau,
               "levels": [(pr.hx[i].n, pr.hy[j].n) for i, j in sched.pairs], "nnz": st.S.nnz,
               "final_levels": (sched.FX.n, sched.FY.n),
               "quantization": (quantization_error(sched.FX), quantization_error(sched.FY)),
               "coarse_lower_bound": sched.w2_low,
               "quantize": None if run.geodesic else (sched.bx, sched.by),
               "residual_mass": st.resid, "stages": st.log,
               "seconds_hierarchy": pr.t_hier, "seconds": time.perf_counter() - t0}
    if st.stopped:
        details["stopped"] = st.stopped
    return lower, upper, details


def _prune_and_cluster(x, a, y, b, cost, diam, tol, coarsest, nu_levels, seed, prune, t0):
    """Prune each side's lightest points (:func:`_prune`; not a shared clustering's side) and
    build the hierarchies: the :class:`_Pruned` clouds."""
    n0, m0 = len(a), len(b)
    tau = tol**2 / (PRUNE**2 * diam) if prune is None else float(prune)
    x, a, tau_x = _prune(x, a, tau)
    if nu_levels is None:
        y, b, tau_y = _prune(y, b, tau)
    else:
        tau_y = 0.0  # a shared clustering belongs to the unpruned nu
    # Each pruned side moves W2 by at most sqrt(D tau) (see _prune).
    slack = np.sqrt(diam * tau_x) + np.sqrt(diam * tau_y)
    hx = hierarchy(x, a, cost, coarsest, seed=seed)
    if nu_levels is not None and nu_levels[-1].n == len(b) and nu_levels[0].n <= coarsest:
        hy = nu_levels
    else:
        hy = hierarchy(y, b, cost, coarsest, seed=seed + 1)
    return _Pruned(hx, hy, n0, m0, (n0 - len(a), m0 - len(b)), (tau_x, tau_y), slack,
                   time.perf_counter() - t0)


def _schedule(hx, hy, cost, diam, tol, quantize, epsilon, newton):
    """The :class:`_Schedule` of a solve between the hierarchies hx and hy."""
    fx, fy, bx, by, w2_low = _final_levels(hx, hy, tol, quantize, cost == "geodesic")
    pairs = [(min(k, fx), min(k, fy)) for k in range(max(fx, fy) + 1)]
    final_res = [L.spacing2 for L in (hx[fx], hy[fy]) if L.n > FEW_POINTS and L.spacing2 > 0]
    final_res = final_res or [1e-3 * diam]
    # Below ~1e-9 diam^2 the plan is a permutation to round-off; nothing is gained there.
    final_eps_floor = max(min(final_res) / 16, 1e-9 * diam) if epsilon is None else float(epsilon)
    # The bracket is tested once eps is near the final resolution, or small enough for the
    # entropic bias (about eps on W2^2) to fit in the requested width.
    check_eps = max(4 * max(final_res), tol / 2)
    by_newton = newton if newton is not None else max(hx[fx].n, hy[fy].n) >= NEWTON_MIN_POINTS
    return _Schedule(fx, fy, hx[fx], hy[fy], bx, by, w2_low, pairs, final_eps_floor, check_eps,
                     epsilon, by_newton)


def _solve_level(run, sched, st, last):
    """The stages at the levels st.X, st.Y, eps halving from st.eps: until the bracket is
    done (at the last level pair) or eps reaches the resolution of the sides that are still
    coarser than their final level (a few atoms are not an approximation of anything), or
    the solve breaks down (:func:`_broke_down`)."""
    level_eps = max([Lv.spacing2 for Lv, f in ((st.X, sched.FX), (st.Y, sched.FY)) if Lv is not f]
                    or [0.0])
    while True:
        entry, u, v, done, loose = _stage(run, sched, st, last)
        st.up = u - 0.5 * st.eps * np.log(st.X.weights)
        st.vp = v - 0.5 * st.eps * np.log(st.Y.weights)
        entry["t"] = time.perf_counter() - run.t0
        st.log.append(entry)
        if loose:
            st.eps = max(st.eps / 2, sched.final_eps_floor)
            continue
        if run.verbose:
            print(entry)
        if _broke_down(run, sched, st, entry, done):
            break
        if done or (not last and st.eps <= level_eps):
            break
        st.eps = st.eps / 2
        if last:
            st.eps = max(st.eps, sched.final_eps_floor)


def _broke_down(run, sched, st, entry, done) -> bool:
    """After a stage that did not finish the solve: DIVERGED_STAGES stages in a row with a
    marginal error above DIVERGED_ERR, or the time budget spent, stop it (st.stopped says
    why) with the bracket certified without a plan: every coupling costs at most the
    diameter^2, and w2_low bounds W2 below."""
    st.bad_stages = st.bad_stages + 1 if entry.get("err", 0.0) > DIVERGED_ERR else 0
    if not (st.bad_stages >= DIVERGED_STAGES or run.out_of_time()) or done:
        return False
    st.stopped = (f"{st.bad_stages} stages in a row ended with a marginal error above "
                  f"{DIVERGED_ERR:g} (last {entry['err']:.2f} at level {entry['level']}, "
                  f"eps {st.eps:.1e}): the continuation broke down"
                  if st.bad_stages >= DIVERGED_STAGES else
                  f"its time ran out ({run.max_seconds:.0f} s) at level {entry['level']}, "
                  f"eps {st.eps:.1e}")
    st.upper = min(st.upper, run.diam)
    st.lower = max(st.lower, sched.w2_low ** 2)
    return True


def _stage(run, sched, st, last):
    """One stage at st.eps between st.X and st.Y: the truncated support (into st.S), then a
    coarse stage to the stage tolerance by Newton or Sinkhorn sweeps, or a final one whose
    bracket is the stopping test. Returns (log entry, u, v, done, loose): the absolute
    potentials reached, whether the bracket is done, and whether this was a loose Newton
    stage (:func:`_final_newton_stage`), after which eps halves without further tests."""
    X, Y, eps = st.X, st.Y, st.eps
    u = st.up + 0.5 * eps * np.log(X.weights)
    v = st.vp + 0.5 * eps * np.log(Y.weights)
    st.S = None  # the previous stage's support goes before the next is searched
    st.S = _support(X, Y, u, v, eps, run.theta, run.geodesic)
    check = last and (eps <= sched.check_eps if sched.epsilon is None
                      else eps <= sched.epsilon * (1 + 1e-12))
    entry = {"level": (X.n, Y.n), "eps": eps, "nnz": st.S.nnz}
    newton_here = sched.by_newton and (last or min(X.n, Y.n) >= NEWTON_MIN_POINTS)
    if not check and newton_here:
        _coarse_newton_stage(run, st, u, v, entry)
    elif not check:
        it, err, _ = _sinkhorn(st.S, X, Y, u, v, eps, 1e-3, run.stage_iter, 1.0)
        st.total_iter += it
        entry.update(iter=it, err=err)
    elif newton_here:
        done, loose = _final_newton_stage(run, sched, st, u, v, entry)
        return entry, u, v, done, loose
    else:
        # At the final levels the bracket is the stopping test (see _final_stage).
        st.S, it_stage, err, lo, hi, res, (st.lower, st.upper, st.resid, width) = _final_stage(
            run, st.S, X, Y, u, v, eps, (st.lower, st.upper, st.resid))
        st.total_iter += it_stage
        entry.update(iter=it_stage, err=err, lower=lo, upper=hi, residual=res)
        done = (width <= run.tol or eps <= sched.final_eps_floor * (1 + 1e-12)
                or sched.epsilon is not None)
        return entry, u, v, done, False
    return entry, u, v, False, False


def _coarse_newton_stage(run, st, u, v, entry):
    """A stage before the final test by Newton to the stage tolerance 1e-3 (u, v in place)."""
    X, Y, eps = st.X, st.Y, st.eps
    it, err, ncg = _solve_stage(st.S, X, Y, u, v, eps, 1e-3, NEWTON_STAGE_ITER,
                                verbose=run.verbose, deadline=run.deadline)
    if err > 1e-3:
        # The truncated support may hold no plan with these marginals (Hall's condition
        # fails for a few heavy clusters); the stalled solve has moved the potentials
        # towards the pairs that are missing: search again.
        st.S = None
        st.S = _support(X, Y, u, v, eps, run.theta, run.geodesic)
        it2, err, ncg2 = _solve_stage(st.S, X, Y, u, v, eps, 1e-3, NEWTON_STAGE_ITER,
                                      verbose=run.verbose, deadline=run.deadline)
        it, ncg = it + it2, ncg + ncg2
    st.total_iter += it
    entry.update(iter=it, err=err, cg=ncg)


def _final_newton_stage(run, sched, st, u, v, entry):
    """A stage at the final test by Newton (u, v in place); returns (done, loose).

    Newton converges the marginals at this eps (the residual of the rounding is then
    negligible); what is left of the width is the entropic bias, about eps on W2^2. So a
    stage first goes to the stage tolerance, like the coarser ones, and only when eps is
    below what the width allows, 2 W2 tol (W2 from the plan's cost), on to converged
    marginals and the upper bound (:func:`_newton_final`); otherwise the stage is *loose*
    and eps halves. The costly lower bound (two exact c-transforms of the full clouds) waits
    for the same test on the rounded plan's cost. (At 1e6 tokens against the mesh the first
    two final stages, 1.8e7 and 6.5e6 pairs, need 2 Newton steps instead of 4.)"""
    X, Y, eps = st.X, st.Y, st.eps
    floor = eps <= sched.final_eps_floor * (1 + 1e-12) or sched.epsilon is not None
    it, err, ncg = 0, np.inf, 0
    if not floor:
        it, err, ncg = _solve_stage(st.S, X, Y, u, v, eps, 1e-3, NEWTON_STAGE_ITER,
                                    verbose=run.verbose, deadline=run.deadline)
        if err <= 1e-3 and eps > (2 * np.sqrt(max(_plan_cost(st.S, u, v, eps), 0.0)) * run.tol):
            st.total_iter += it
            entry.update(iter=it, err=err, cg=ncg, loose=True)
            if run.verbose:
                print(f"  newton (loose): {it} it, {ncg} cg, err {err:.2e}, "
                      f"nnz {st.S.nnz}, t {time.perf_counter() - run.t0:.1f}")
            return False, True
    st.S, it, err, ncg, lo, hi, res, (st.lower, st.upper, st.resid, width) = _newton_final(
        run, st.S, X, Y, u, v, eps, floor, (st.lower, st.upper, st.resid), it, ncg)
    st.total_iter += it
    entry.update(iter=it, err=err, cg=ncg, lower=lo, upper=hi, residual=res)
    return width <= run.tol or floor, False


def w2_multiscale_result(x, a, y, b, cost="chordal", tol=1e-3, **options):
    """:func:`w2_multiscale` wrapped into a :class:`W2Result` (method "multiscale")."""
    from .result import bracket_result

    allowed = {"epsilon", "theta", "coarsest", "max_iter", "stage_iter", "check_chunk", "quantize",
               "nu_levels", "seed", "omega", "newton", "prune", "verbose", "max_seconds"}
    unknown = set(options) - allowed
    if unknown:
        raise TypeError(f"unknown option(s) for method='multiscale': {', '.join(sorted(unknown))}; "
                        f"allowed: {', '.join(sorted(allowed))}")
    lower, upper, details = w2_multiscale(x, a, y, b, cost, tol=tol, **options)
    r = bracket_result(upper, lower, cost, "multiscale", details)
    r.details["tol"] = tol
    r.details["tol_met"] = bool(r.upper - r.lower <= tol)
    return r
