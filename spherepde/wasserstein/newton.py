r"""Newton's method for the entropic transport problem on a sparse support (Sinkhorn–Newton).

One side (the "rows", the larger one) is eliminated exactly: its potential is the soft
c-transform of the other's, so the plan :math:`\pi_{ij} = e^{(u_i + v_j - c_{ij})/\varepsilon}`
has its row marginals exact. What is left is the concave semi-dual in the potential v of the
smaller side (the "columns"), whose gradient is the column marginal error
:math:`b - \pi^T 1` and whose Hessian is :math:`-M/\varepsilon`,

.. math:: M = \operatorname{diag}(\pi^T 1) - \pi^T \operatorname{diag}(1/a)\, \pi ,

a weighted graph Laplacian on the columns (two columns are linked through every row that
sends mass to both). Sinkhorn is a Gauss–Seidel sweep on this system: it corrects each
potential from its neighbours, so a mass imbalance at the scale L of the problem needs
~(L/ℓ)² sweeps when the plan links columns at distance ℓ ~ √ε. That is what stalls the
multiscale solver between a cloud of 10⁶ tokens and a fine mesh (the marginal error left at
small ε is a large-scale imbalance). Newton solves the whole linear system instead, by
conjugate gradients on the exact M (matrix-free: two passes over the support) preconditioned
by algebraic multigrid on a sparsified M (the Laplacian of the plan's strong entries), or,
for small systems, by Jacobi plus an exact coarse correction on aggregates of columns
(two-level additive Schwarz), so its cost does not grow with L/ℓ.

Everything works on the support in one layout, grouped by rows (CSR: indptr, column index,
cost): column sums are scattered from it, so no column layout (and no map between the two)
is ever stored. Memory: the support (12 bytes a pair with 32-bit indices), the plan (8), and
the sparsified Laplacian with its multigrid hierarchy.

References
----------
Brauer, Clason, Lorenz & Wirth, "A Sinkhorn–Newton method for entropic optimal transport"
(2017). Mérigot, "A multiscale approach to optimal transport" (2011) and Kitagawa, Mérigot &
Thibert, "Convergence of a Newton algorithm for semi-discrete optimal transport", JEMS (2019):
damped Newton on the semi-dual. Toselli & Widlund, "Domain Decomposition Methods" (2005), ch. 3
(two-level additive Schwarz with an aggregation coarse space). Ruge & Stüben, "Algebraic
multigrid" (1987), in Multigrid Methods, SIAM.
"""
from __future__ import annotations

import time

import numba as nb
import numpy as np
import scipy.sparse as sps
from scipy.sparse.linalg import LinearOperator, cg, splu
from scipy.spatial import cKDTree

__all__ = ["newton_columns", "softmin_row", "scatter_sum"]

#: Columns per aggregate of the coarse space: the coarse problem has n/AGGREGATE unknowns.
AGGREGATE = 32
#: From this many columns the preconditioner is algebraic multigrid (pyamg, classical
#: Ruge–Stüben: M is a weighted graph Laplacian, an M-matrix, whose weights span many decades
#: where the masses do; the two-level aggregation preconditioner needs hundreds of CG
#: iterations there). Below, the matrix-free two-level one is cheaper.
AMG_MIN_COLUMNS = 20000
#: The multigrid hierarchy is built on the Laplacian of the plan's entries of at least this
#: fraction of their row's mass (the others link columns far apart with weights below it;
#: CG itself runs on the exact M). Measured on the largest stage of 10^6 tokens against the
#: 393,216-cell mesh (1.8e7 pairs): 1e-3 keeps 125 Laplacian entries a column and CG takes
#: 5, 4, 6, 13 iterations over the stage's Newton steps, as with the full P^T P; 1e-2 took
#: 40-109.
SPARSIFY = 1e-3
#: Levenberg–Marquardt shift of the Hessian, relative to the column masses.
LM_SHIFT = 1e-6
#: Largest change of a potential in one Newton step, in units of eps: the plan changes by
#: e^{±MAX_STEP} there, far beyond what a stage needs; only a column the support leaves
#: without a say over its own mass ever gets near it.
MAX_STEP = 30.0
#: The multigrid hierarchy of the last step is kept once the marginal error is below this
#: (the plan then changes by a relative amount of that order per step): CG runs on the exact
#: M, so a stale preconditioner costs iterations, never accuracy. It is rebuilt when CG needs
#: more than twice the iterations it needed when it was built.
AMG_REUSE_ERR = 1e-4
#: Newton gives up after this many steps in a row that raise the marginal error.
STALL_STEPS = 2


@nb.njit(cache=True)
def softmin_row(lo, hi, idx, other, cost, eps):
    """-eps LSE_p((other[idx[p]] - cost[p]) / eps) over the entries lo:hi of a sparse row,
    shifted by the max (no overflow whatever the potentials)."""
    m = -np.inf
    for p in range(lo, hi):
        z = other[idx[p]] - cost[p]
        if z > m:
            m = z
    s = 0.0
    for p in range(lo, hi):
        s += np.exp((other[idx[p]] - cost[p] - m) / eps)
    return -m - eps * np.log(s)


@nb.njit(parallel=True, cache=True)
def _scatter_sum(indptr, idx, P, z, square, m, chunks):
    n = indptr.size - 1
    acc = np.zeros((chunks, m))
    for c in nb.prange(chunks):
        for i in range(n * c // chunks, n * (c + 1) // chunks):
            zi = z[i]
            for p in range(indptr[i], indptr[i + 1]):
                w = P[p]
                acc[c, idx[p]] += (w * w if square else w) * zi
    return _add_chunks(acc)


@nb.njit(parallel=True, cache=True)
def _add_chunks(acc):
    """The sum over the chunks (rows of acc (chunks, m)) of their column sums, (m,)."""
    m = acc.shape[1]
    out = np.empty(m)
    for j in nb.prange(m):
        s = 0.0
        for c in range(acc.shape[0]):
            s += acc[c, j]
        out[j] = s
    return out


def scatter_sum(indptr, idx, P, z, square, m):
    """out_j = sum_i P_ij z_i (or P_ij^2 z_i) from the row layout, (m,).

    Rows are split into one chunk per thread, each summing into its own copy of out (no
    atomics in numba), then the copies are added."""
    return _scatter_sum(indptr, idx, P, z, square, m, nb.get_num_threads())


@nb.njit(parallel=True, cache=True)
def _evaluate(indptr, idx, cost, v, la, eps, u, P, m, chunks):
    """u_i <- eps log a_i - eps LSE_j((v_j - c_ij)/eps) (exact row marginals), the plan P in
    row layout and its column sums (m,). One exp per entry: the max-shifted terms of the LSE
    are the plan's entries up to the row's factor a_i / s_i. Rows are split into ``chunks``
    (one per thread), each with its own column sums (no atomics in numba)."""
    n = indptr.size - 1
    acc = np.zeros((chunks, m))
    for c in nb.prange(chunks):
        for i in range(n * c // chunks, n * (c + 1) // chunks):
            lo, hi = indptr[i], indptr[i + 1]
            mx = -np.inf
            for p in range(lo, hi):
                z = v[idx[p]] - cost[p]
                if z > mx:
                    mx = z
            s = 0.0
            for p in range(lo, hi):
                e = np.exp((v[idx[p]] - cost[p] - mx) / eps)
                P[p] = e
                s += e
            u[i] = eps * la[i] - mx - eps * np.log(s)
            scale = np.exp(la[i]) / s
            for p in range(lo, hi):
                P[p] *= scale
                acc[c, idx[p]] += P[p]
    return _add_chunks(acc)


@nb.njit(cache=True)
def _column_sweep(indptr, idx, cost, u, lb, eps, v, col):
    """One Sinkhorn update of the columns from the row layout: v_j <- eps log b_j -
    eps LSE_i((u_i - c_ij)/eps), which is v_j + eps (log b_j - log col_j) for the current
    plan's column mass col_j; a column whose mass underflowed (far from its target) gets the
    max-shifted LSE, from a scatter over the rows."""
    m = v.size
    bad = col <= 1e-250
    mx = np.full(m, -np.inf)
    nbad = 0
    for j in range(m):
        if bad[j]:
            nbad += 1
        else:
            v[j] += eps * (lb[j] - np.log(col[j]))
    if nbad == 0:
        return
    n = indptr.size - 1
    for i in range(n):
        for p in range(indptr[i], indptr[i + 1]):
            j = idx[p]
            if bad[j]:
                z = u[i] - cost[p]
                if z > mx[j]:
                    mx[j] = z
    s = np.zeros(m)
    for i in range(n):
        for p in range(indptr[i], indptr[i + 1]):
            j = idx[p]
            if bad[j]:
                s[j] += np.exp((u[i] - cost[p] - mx[j]) / eps)
    for j in range(m):
        if bad[j] and s[j] > 0:
            v[j] = eps * lb[j] - mx[j] - eps * np.log(s[j])


@nb.njit(parallel=True, cache=True)
def _rows_times(indptr, idx, P, x, out):
    """out_i = sum_j P_ij x_j (row layout)."""
    n = indptr.size - 1
    for i in nb.prange(n):
        s = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            s += P[p] * x[idx[p]]
        out[i] = s


@nb.njit(parallel=True, cache=True)
def _strong_laplacian(indptr, idx, P, a, m, drop, shift, chunks):
    r"""The Laplacian of the plan's strong entries plus a diagonal shift, as CSR (data,
    indices, indptr) with int32 indices:

    .. math:: M'_{jk} = -\sum_i \pi_{ij}\pi_{ik}/a_i \ (j \ne k), \qquad
              M'_{jj} = -\sum_{k \ne j} M'_{jk} + \text{shift}_j,

    the sums over the rows i where both entries are at least drop·a_i. Gustavson's product,
    column by column through the transposed strong entries, the columns split into
    ``chunks`` (one per thread, each with its own marker and accumulator)."""
    n = indptr.size - 1
    # transposed strong entries: for each column j, its rows and weights pi_ij / a_i
    cnt = np.zeros(m + 1, np.int64)
    for i in range(n):
        t = drop * a[i]
        for p in range(indptr[i], indptr[i + 1]):
            if P[p] >= t:
                cnt[idx[p] + 1] += 1
    for j in range(m):
        cnt[j + 1] += cnt[j]
    t_row = np.empty(cnt[m], np.int32)
    t_w = np.empty(cnt[m])
    fill = cnt[:m].copy()
    for i in range(n):
        t = drop * a[i]
        for p in range(indptr[i], indptr[i + 1]):
            if P[p] >= t:
                j = idx[p]
                t_row[fill[j]] = i
                t_w[fill[j]] = P[p] / a[i]
                fill[j] += 1
    size = np.zeros(m + 1, np.int64)
    for c in nb.prange(chunks):  # pass 1: the pattern's size, row by row
        marker = np.full(m, -1, np.int64)
        for j in range(m * c // chunks, m * (c + 1) // chunks):
            k = 1  # the diagonal
            for q in range(cnt[j], cnt[j + 1]):
                i = t_row[q]
                t = drop * a[i]
                for p in range(indptr[i], indptr[i + 1]):
                    l = idx[p]
                    if l != j and P[p] >= t and marker[l] != j:
                        marker[l] = j
                        k += 1
            size[j + 1] = k
    for j in range(m):
        size[j + 1] += size[j]
    data = np.empty(size[m])
    ind = np.empty(size[m], np.int32)
    for c in nb.prange(chunks):  # pass 2: the values
        marker = np.full(m, -1, np.int64)
        acc = np.zeros(m)
        for j in range(m * c // chunks, m * (c + 1) // chunks):
            q0 = size[j]
            k = q0 + 1
            for q in range(cnt[j], cnt[j + 1]):
                i = t_row[q]
                w = t_w[q]
                t = drop * a[i]
                for p in range(indptr[i], indptr[i + 1]):
                    l = idx[p]
                    if l != j and P[p] >= t:
                        if marker[l] < q0:
                            marker[l] = k
                            ind[k] = l
                            acc[l] = 0.0
                            k += 1
                        acc[l] += w * P[p]
            diag = 0.0
            for r in range(q0 + 1, k):
                data[r] = -acc[ind[r]]
                diag += acc[ind[r]]
            ind[q0] = j
            data[q0] = diag + shift[j]
    return data, ind, size


@nb.njit(cache=True)
def _aggregate_rows(indptr, idx, P, labels):
    """The plan with its columns summed over aggregates, in CSR form (data, indices, indptr):
    a row's few entries mostly share one aggregate, so this is ~n entries, not nnz."""
    n = indptr.size - 1
    data = np.empty(P.size)
    ind = np.empty(P.size, np.int64)
    out_ptr = np.zeros(n + 1, np.int64)
    q = 0
    for i in range(n):
        start = q
        for p in range(indptr[i], indptr[i + 1]):
            lab = labels[idx[p]]
            for r in range(start, q):
                if ind[r] == lab:
                    data[r] += P[p]
                    break
            else:
                ind[q] = lab
                data[q] = P[p]
                q += 1
        out_ptr[i + 1] = q
    return data[:q].copy(), ind[:q].copy(), out_ptr


def _pyamg():
    try:
        import pyamg
    except ImportError:  # pragma: no cover - pyamg is a dependency; the two-level one remains
        return None
    return pyamg


def _aggregates(points, k, seed=0):
    """Labels (m,) in [0, K) of K ~ m/k aggregates: every point joins its nearest of K random
    centres (the coarse space is piecewise constant on these)."""
    m = len(points)
    K = max(1, m // k)
    centres = points[np.random.default_rng(seed).permutation(m)[:K]]
    _, lab = cKDTree(centres).query(points, workers=-1)
    return lab


class _Hessian:
    """M = diag(col) - P^T diag(1/a) P (+ the Levenberg–Marquardt shift) as an operator on the
    row layout of P (matrix-free: rows, then a scatter onto the columns)."""

    def __init__(self, indptr, idx, P, a, col):
        self.indptr, self.idx, self.P, self.a = indptr, idx, P, a
        self.col = col
        self.n, self.m = len(a), len(col)
        # Levenberg–Marquardt shift, relative to each column's mass: M is singular along
        # constants, and a column whose rows send it all their mass has a zero row in M (its
        # mass does not depend on its potential; only a larger support can change it). The
        # shift keeps the system definite and bounds the step of such a column.
        self.shift = LM_SHIFT * col + 1e-300
        self._z = np.empty(self.n)

    def matvec(self, x):
        _rows_times(self.indptr, self.idx, self.P, x, self._z)
        out = scatter_sum(self.indptr, self.idx, self.P, self._z / self.a, False, self.m)
        return (self.col + self.shift) * x - out

    def two_level(self, labels):
        """Jacobi plus an exact coarse correction on the aggregates (labels: (m,))."""
        diag = self.col - scatter_sum(self.indptr, self.idx, self.P, 1.0 / self.a, True, self.m)
        inv_diag = 1.0 / (np.maximum(diag, 0.0) + self.shift)
        K = int(labels.max()) + 1
        Pc = sps.csr_matrix(_aggregate_rows(self.indptr, self.idx, self.P, labels),
                            shape=(self.n, K))
        colc = np.bincount(labels, weights=self.col, minlength=K)
        Ac = sps.diags(colc * (1 + LM_SHIFT) + 1e-300) - Pc.T @ sps.diags(1.0 / self.a) @ Pc
        coarse = splu(sps.csc_matrix(Ac))

        def apply(r):
            rc = np.bincount(labels, weights=r, minlength=K)
            rc -= rc.mean()  # the coarse correction of a constant is a constant: drop it
            return inv_diag * r + coarse.solve(rc)[labels]

        return apply

    def multigrid(self, amg):
        """A classical AMG V-cycle built on the Laplacian of the plan's strong entries."""
        data, ind, ptr = _strong_laplacian(self.indptr, self.idx, self.P, self.a, self.m,
                                           SPARSIFY, self.shift, nb.get_num_threads())
        A = sps.csr_matrix((data, ind, ptr), shape=(self.m, self.m))
        A.sort_indices()
        return amg.ruge_stuben_solver(A).aspreconditioner(cycle="V")


class _SemiDual:
    """The semi-dual of one stage on a fixed support (row layout ``indptr``, ``idx``, ``cost``),
    marginals a: (n,), b: (m,), at eps. :meth:`evaluate` fills the plan ``P`` (nnz,) and its
    column sums ``col`` (m,) for the potentials it is given."""

    def __init__(self, indptr, idx, cost, a, b, eps):
        self.indptr, self.idx, self.cost, self.a, self.b, self.eps = indptr, idx, cost, a, b, eps
        self.la, self.lb = np.log(a), np.log(b)
        self.m = len(b)
        self.P = np.empty(cost.size)
        self.col = None

    def evaluate(self, vv, uu):
        """Semi-dual value <a, u(v)> + <b, v> (the constant -eps dropped) and L1 error; uu
        receives u(v), the soft c-transform of vv."""
        self.col = _evaluate(self.indptr, self.idx, self.cost, vv, self.la, self.eps, uu, self.P,
                             self.m, nb.get_num_threads())
        return float(self.a @ uu + self.b @ vv), float(np.abs(self.b - self.col).sum())


class _Preconditioner:
    """The preconditioner M of the Newton systems: algebraic multigrid (``amg``, the pyamg
    module) or the two-level one on the aggregates ``labels``. Rebuilt at every step while the
    plan still moves (reusing the last one right after a level change took 200 CG
    iterations); kept near the solution (AMG_REUSE_ERR) until CG needs more than twice the
    iterations it needed when it was built."""

    def __init__(self, amg, labels):
        self.amg, self.labels = amg, labels
        self.M, self.cg_built = None, 0

    def refresh(self, H, err, m) -> bool:
        """Build M from the Hessian H unless the last one is kept; returns whether it was
        built."""
        fresh = self.amg is None or self.M is None or err > AMG_REUSE_ERR
        if fresh:
            self.M = None
            self.M = (H.multigrid(self.amg) if self.amg is not None
                      else LinearOperator((m, m), matvec=H.two_level(self.labels),
                                          dtype=np.float64))
        return fresh

    def record(self, fresh: bool, iterations: int) -> None:
        """What CG took with M: the reference of a fresh M, or the sign that a kept one is
        stale (then it is rebuilt at the next step)."""
        if fresh:
            self.cg_built = iterations
        elif iterations > 2 * self.cg_built + 2:
            self.M = None


def _newton_direction(sd, pre, err, cg_rtol, cg_maxiter):
    """The Newton step on v at the plan of ``sd`` (its last evaluation, of error err), by CG
    preconditioned by ``pre``, in the gauge of zero median and clipped to MAX_STEP eps.
    Returns (step (m,), CG iterations, whether M was rebuilt, (t1, t2, t3): perf_counter
    before the preconditioner, before CG and after it)."""
    m, eps = sd.m, sd.eps
    rhs = eps * (sd.b - sd.col)
    count = [0]

    def cb(_, count=count):
        count[0] += 1

    H = _Hessian(sd.indptr, sd.idx, sd.P, sd.a, sd.col)
    A = LinearOperator((m, m), matvec=H.matvec, dtype=np.float64)
    t1 = time.perf_counter()
    fresh = pre.refresh(H, err, m)
    t2 = time.perf_counter()
    step, _ = cg(A, rhs, rtol=cg_rtol, maxiter=cg_maxiter, M=pre.M, callback=cb)
    pre.record(fresh, count[0])
    del A, H
    t3 = time.perf_counter()
    step -= np.median(step)  # the gauge: a constant shift changes nothing
    np.clip(step, -MAX_STEP * eps, MAX_STEP * eps, out=step)
    return step, count[0], fresh, (t1, t2, t3)


def _line_search(sd, v, step, val, err, u_new):
    """Armijo backtracking on the concave semi-dual (the marginal error is not monotone along
    a Newton step): the full step is taken near the solution (quadratic convergence); far
    from it, a step that overshoots is halved. u_new receives u(v_new). Returns (t, v_new,
    value, error) of the step taken."""
    slope = float((sd.b - sd.col) @ step)
    t = 1.0
    while True:
        v_new = v + t * step
        val_new, e_new = sd.evaluate(v_new, u_new)
        if val_new >= val + 1e-4 * t * slope or e_new < 0.5 * err or t < 1e-3:
            return t, v_new, val_new, e_new
        t *= 0.5


def newton_columns(indptr, idx, cost, a, b, u, v, eps, tol, maxiter, points=None, labels=None,
                   cg_rtol=1e-3, cg_maxiter=200, deadline=None, verbose=False):
    r"""Damped Newton on the column potential v until :math:`\|b - \pi^T 1\|_1 \le` tol
    (or ``time.perf_counter()`` passes ``deadline``, when given).

    Parameters
    ----------
    indptr, idx, cost : the support in row layout (n + 1,), (nnz,) column indices (int32 or
        int64), (nnz,) costs
    a: (n,), b: (m,)
        Row and column marginals (> 0).
    u: (n,), v: (m,)
        Potentials, updated in place (u is left as the soft c-transform of v).
    points: (m, d), optional
        The columns' points, to build the coarse aggregates when ``labels`` is not given
        (below ``AMG_MIN_COLUMNS`` columns).

    Returns
    -------
    iterations, L1 column error, CG iterations in all
    """
    m = len(b)
    sd = _SemiDual(indptr, idx, cost, a, b, eps)
    amg = _pyamg() if m >= AMG_MIN_COLUMNS else None
    if amg is None and labels is None:
        labels = _aggregates(points, AGGREGATE)
    pre = _Preconditioner(amg, labels)
    stalled = 0
    val, err = sd.evaluate(v, u)
    total_cg = 0
    it = 0
    u_new = np.empty_like(u)
    for it in range(1, maxiter + 1):
        if err <= tol or (deadline is not None and time.perf_counter() > deadline):
            it -= 1
            break
        t0 = time.perf_counter()
        # One Sinkhorn sweep first: it sets every column's mass exactly in log space, which
        # a linearization cannot do for a column that receives e^-20 of its mass; Newton
        # then corrects what the sweep cannot, the coupled (large-scale) imbalance.
        _column_sweep(indptr, idx, cost, u, sd.lb, eps, v, sd.col)
        val, err = sd.evaluate(v, u)
        step, n_cg, fresh, (t1, t2, t3) = _newton_direction(sd, pre, err, cg_rtol, cg_maxiter)
        total_cg += n_cg
        t, v_new, val_new, e_new = _line_search(sd, v, step, val, err, u_new)
        if verbose:
            print(f"    newton {it}: err {err:.3e} -> {e_new:.3e}, step {t:g}, cg {n_cg}, "
                  f"{'new' if fresh else 'kept'} preconditioner {t2 - t1:.2f} s, "
                  f"cg {t3 - t2:.2f} s, other {time.perf_counter() - t0 - (t3 - t1):.2f}")
        # Near the solution the gain in the semi-dual is below its round-off: a step that
        # reduces the marginal error is then taken on that ground.
        if not (val_new > val or e_new < 0.5 * err):
            sd.evaluate(v, u)  # restore the plan of the last accepted potentials
            break
        # The semi-dual grows while the error does not fall: no plan with these marginals
        # lives on this support (the dual is unbounded there). The caller searches again.
        stalled = stalled + 1 if e_new >= err else 0
        v[:] = v_new
        u[:] = u_new
        val, err = val_new, e_new
        if stalled >= STALL_STEPS:
            break
    return it, err, total_cg
