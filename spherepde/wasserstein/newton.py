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
conjugate gradients preconditioned with Jacobi plus an exact coarse correction on
aggregates of columns (two-level additive Schwarz), so its cost does not grow with L/ℓ.

References
----------
Brauer, Clason, Lorenz & Wirth, "A Sinkhorn–Newton method for entropic optimal transport"
(2017). Mérigot, "A multiscale approach to optimal transport" (2011) and Kitagawa, Mérigot &
Thibert, "Convergence of a Newton algorithm for semi-discrete optimal transport", JEMS (2019):
damped Newton on the semi-dual. Toselli & Widlund, "Domain Decomposition Methods" (2005), ch. 3
(two-level additive Schwarz with an aggregation coarse space).
"""
from __future__ import annotations

import numba as nb
import numpy as np
import scipy.sparse as sps
from scipy.sparse.linalg import LinearOperator, cg, splu
from scipy.spatial import cKDTree

__all__ = ["newton_columns", "softmin_row"]

#: Columns per aggregate of the coarse space: the coarse problem has n/AGGREGATE unknowns.
AGGREGATE = 32
#: From this many columns the Hessian is assembled and preconditioned by algebraic multigrid
#: (pyamg, classical Ruge–Stüben: M is a weighted graph Laplacian, an M-matrix, whose weights
#: span many decades where the masses do; the two-level aggregation preconditioner needs
#: hundreds of CG iterations there). Below, the matrix-free two-level one is cheaper.
AMG_MIN_COLUMNS = 20000
#: Levenberg–Marquardt shift of the Hessian, relative to the column masses.
LM_SHIFT = 1e-6
#: Largest change of a potential in one Newton step, in units of eps: the plan changes by
#: e^{±MAX_STEP} there, far beyond what a stage needs; only a column the support leaves
#: without a say over its own mass ever gets near it.
MAX_STEP = 30.0
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
def _row_softmin(indptr, idx, cost, v, la, eps, u):
    """u_i <- eps log a_i - eps LSE_j((v_j - c_ij)/eps): exact row marginals."""
    n = indptr.size - 1
    for i in nb.prange(n):
        u[i] = eps * la[i] + softmin_row(indptr[i], indptr[i + 1], idx, v, cost, eps)


@nb.njit(parallel=True, cache=True)
def _plan(indptr, idx, cost, u, v, eps, out):
    n = indptr.size - 1
    for i in nb.prange(n):
        for p in range(indptr[i], indptr[i + 1]):
            out[p] = np.exp((u[i] + v[idx[p]] - cost[p]) / eps)


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
def _cols_times(t_indptr, t_idx, t_pos, P, z, square, out):
    """out_j = sum_i P_ij z_i (or P_ij^2 z_i), from the column layout: t_pos maps a column
    entry to its place in the row-layout array P."""
    m = t_indptr.size - 1
    for j in nb.prange(m):
        s = 0.0
        for p in range(t_indptr[j], t_indptr[j + 1]):
            w = P[t_pos[p]]
            s += (w * w if square else w) * z[t_idx[p]]
        out[j] = s


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


def _assemble(indptr, idx, P, a, col, m):
    """M = diag(col) - P^T diag(1/a) P (with the Levenberg–Marquardt shift) as a CSR matrix."""
    n = len(a)
    Pm = sps.csr_matrix((P, idx, indptr), shape=(n, m))
    G = (Pm.T @ sps.csr_matrix((P / np.repeat(a, np.diff(indptr)), idx, indptr), shape=(n, m)))
    return (sps.diags(col * (1 + LM_SHIFT) + 1e-300) - G).tocsr()


def _aggregates(points, k, seed=0):
    """Labels (m,) in [0, K) of K ~ m/k aggregates: every point joins its nearest of K random
    centres (the coarse space is piecewise constant on these)."""
    m = len(points)
    K = max(1, m // k)
    centres = points[np.random.default_rng(seed).permutation(m)[:K]]
    _, lab = cKDTree(centres).query(points, workers=-1)
    return lab


class _Hessian:
    """M = diag(col) - P^T diag(1/a) P as an operator, with its two-level preconditioner."""

    def __init__(self, indptr, cols, t_indptr, t_idx, t_pos, P, a, col, labels):
        self.P, self.a = P, a
        self.t = (t_indptr, t_idx, t_pos)
        self.col = col
        self.n, self.m = len(a), len(col)
        self.indptr = None
        diag = np.empty(self.m)
        _cols_times(t_indptr, t_idx, t_pos, P, 1.0 / a, True, diag)
        diag = col - diag
        # Levenberg–Marquardt shift, relative to each column's mass: M is singular along
        # constants, and a column whose rows send it all their mass has a zero row in M (its
        # mass does not depend on its potential; only a larger support can change it). The
        # shift keeps both levels definite and bounds the step of such a column.
        self.shift = LM_SHIFT * col + 1e-300
        self.inv_diag = 1.0 / (np.maximum(diag, 0.0) + self.shift)
        self.labels = labels
        K = int(labels.max()) + 1
        Pc = sps.csr_matrix(_aggregate_rows(indptr, cols, P, labels), shape=(self.n, K))
        colc = np.bincount(labels, weights=col, minlength=K)
        Ac = (sps.diags(colc * (1 + LM_SHIFT) + 1e-300)
              - Pc.T @ sps.diags(1.0 / a) @ Pc)
        self.coarse = splu(sps.csc_matrix(Ac))
        self.K = K

    def matvec(self, x, indptr, idx):
        z = np.empty(self.n)
        _rows_times(indptr, idx, self.P, x, z)
        out = np.empty(self.m)
        _cols_times(*self.t, self.P, z / self.a, False, out)
        return self.col * x - out + self.shift * x

    def precondition(self, r):
        rc = np.bincount(self.labels, weights=r, minlength=self.K)
        rc -= rc.mean()  # the coarse correction of a constant is a constant: drop it
        return self.inv_diag * r + self.coarse.solve(rc)[self.labels]


def newton_columns(indptr, idx, cost, t_indptr, t_idx, t_cost, t_pos, a, b, u, v, eps, tol, maxiter,
                   points=None, labels=None, cg_rtol=1e-3, cg_maxiter=200, verbose=False):
    r"""Damped Newton on the column potential v until :math:`\|b - \pi^T 1\|_1 \le` tol.

    Parameters
    ----------
    indptr, idx, cost : the support in row layout (n + 1,), (nnz,), (nnz,)
    t_indptr, t_idx, t_cost, t_pos : the same support in column layout: (m + 1,), row index
        (nnz,), cost (nnz,) and the place of each column entry in the row layout (nnz,)
    a: (n,), b: (m,)
        Row and column marginals (> 0).
    u: (n,), v: (m,)
        Potentials, updated in place (u is left as the soft c-transform of v).
    points: (m, d), optional
        The columns' points, to build the coarse aggregates when ``labels`` is not given.

    Returns
    -------
    iterations, L1 column error, CG iterations in all
    """
    la = np.log(a)
    n, m = len(a), len(b)
    amg = _pyamg() if m >= AMG_MIN_COLUMNS else None
    if amg is None and labels is None:
        labels = _aggregates(points, AGGREGATE)
    P = np.empty(cost.size)
    col = np.empty(m)

    def evaluate(vv, uu):
        """Semi-dual value <a, u(v)> + <b, v> (the constant -eps dropped) and L1 error."""
        _row_softmin(indptr, idx, cost, vv, la, eps, uu)
        _plan(indptr, idx, cost, uu, vv, eps, P)
        _cols_times(t_indptr, t_idx, t_pos, P, np.ones(n), False, col)
        return float(a @ uu + b @ vv), float(np.abs(b - col).sum())

    lb = np.log(b)
    stalled = 0
    val, err = evaluate(v, u)
    total_cg = 0
    it = 0
    for it in range(1, maxiter + 1):
        if err <= tol:
            it -= 1
            break
        # One Sinkhorn sweep first: it sets every column's mass exactly in log space, which
        # a linearization cannot do for a column that receives e^-20 of its mass; Newton
        # then corrects what the sweep cannot, the coupled (large-scale) imbalance.
        _row_softmin(t_indptr, t_idx, t_cost, u, lb, eps, v)
        val, err = evaluate(v, u)
        rhs = eps * (b - col)
        count = [0]

        def cb(_):
            count[0] += 1

        if amg is not None:
            A = _assemble(indptr, idx, P, a, col, m)
            # Rebuilt at every step: reusing the last one fails (200 CG iterations) right
            # after a level change, where the plan still moves a lot; the setup costs a few
            # CG iterations.
            M = amg.ruge_stuben_solver(A).aspreconditioner(cycle="V")
        else:
            H = _Hessian(indptr, idx, t_indptr, t_idx, t_pos, P, a, col.copy(), labels)
            A = LinearOperator((m, m), matvec=lambda x: H.matvec(x, indptr, idx),
                               dtype=np.float64)
            M = LinearOperator((m, m), matvec=H.precondition, dtype=np.float64)
        step, _ = cg(A, rhs, rtol=cg_rtol, maxiter=cg_maxiter, M=M, callback=cb)
        total_cg += count[0]
        step -= np.median(step)  # the gauge: a constant shift changes nothing
        np.clip(step, -MAX_STEP * eps, MAX_STEP * eps, out=step)
        # Armijo backtracking on the concave semi-dual (the marginal error is not monotone
        # along a Newton step): the full step is taken near the solution (quadratic
        # convergence); far from it, a step that overshoots is halved.
        slope = float((b - col) @ step)
        t = 1.0
        u_new = np.empty_like(u)
        while True:
            v_new = v + t * step
            val_new, e_new = evaluate(v_new, u_new)
            if val_new >= val + 1e-4 * t * slope or e_new < 0.5 * err or t < 1e-3:
                break
            t *= 0.5
        if verbose:
            print(f"    newton {it}: err {err:.3e} -> {e_new:.3e}, step {t:g}, cg {count[0]}")
        # Near the solution the gain in the semi-dual is below its round-off: a step that
        # reduces the marginal error is then taken on that ground.
        if not (val_new > val or e_new < 0.5 * err):
            evaluate(v, u)  # restore the plan of the last accepted potentials
            break
        # The semi-dual grows while the error does not fall: no plan with these marginals
        # lives on this support (the dual is unbounded there). The caller searches again.
        stalled = stalled + 1 if e_new >= err else 0
        if stalled >= STALL_STEPS:
            v[:] = v_new
            u[:] = u_new
            val, err = val_new, e_new
            break
        v[:] = v_new
        u[:] = u_new
        val, err = val_new, e_new
    return it, err, total_cg
