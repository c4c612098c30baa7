r"""Attention sums at queries that look away from the mass: a dual-tree far-field expansion
(the harmonic kernel's fallback at low temperature).

Setting. For queries :math:`q_i = \beta B^\top x_i \in \mathbb{R}^d` and atoms
:math:`y_j` (unit vectors, weights :math:`w_j > 0`, :math:`|w| = \sum_j w_j`) on S^1 or S^2
the SA/USA sums are

.. math:: s_i = \sum_j w_j e^{\langle q_i, y_j\rangle}, \qquad
          a_i = \sum_j w_j e^{\langle q_i, y_j\rangle} y_j .

Late in a low-temperature run the atoms sit in a few tight clusters and a query x in a
cluster looks, through B, *away* from it: the harmonic expansion cannot resolve s there
(its error is relative to the uniform level) and the cap that carries the kernel holds a
whole cluster, so exact cap sums cost O(N^2). But the queries are clustered too, and the
interaction of a cluster of queries with a cluster of atoms has low rank.

Expansion. Both sets are put in trees (binary, split at the middle of the widest principal
axis). A node has a centre c, an orthonormal frame :math:`F = (f_1, f_2, f_3)` (the principal
axes of its points) and half-extents :math:`\bar b_k \ge |\langle f_k, y - c\rangle|`; a
thin node (an arc of a circle, a flat cluster) has small extents across. For a query node
Q (centre :math:`q_Q`) and an atom node A (centre c, frame F) write :math:`q = q_Q + \delta q`,
:math:`y = c + \delta y`, :math:`a_k = \langle f_k, \delta q\rangle`,
:math:`b_k = \langle f_k, \delta y\rangle`:

.. math:: \langle q, y\rangle = \langle q, c\rangle + \langle q_Q, \delta y\rangle
          + \textstyle\sum_k a_k b_k .

The first term depends on the query only, the second on the atom only; only the cross term
couples them, and it is small when Q and A are small: :math:`|a_k b_k| \le u_k =
\bar a_k\bar b_k` with :math:`\bar a_k \ge |a_k|` over Q. Its exponential is expanded,

.. math:: e^{\sum_k a_k b_k} = \sum_{\alpha\in\mathbb{N}^3}\frac{a^\alpha b^\alpha}{\alpha!},

and truncated to the set :math:`S = \{\alpha : u^\alpha/\alpha! \ge \theta\}`. The node's
moments :math:`m_\alpha = \sum_{j\in A} w_j e^{\langle q_Q,\delta y_j\rangle - \sigma}
b_j^\alpha` (and :math:`m_{\alpha + e_k}` for the first moment, through
:math:`y_j = c + \sum_k b_{j,k} f_k`) cost :math:`|A|\cdot|S|`; the sums at the queries of Q
then cost :math:`|Q|\cdot|S|` instead of :math:`|Q|\cdot|A|` exponentials.

Error bound (a priori). Term by term :math:`|e^{\sum a_k b_k} - T_S| \le R_S(u) =
e^{\sum_k u_k} - \sum_{\alpha\in S} u^\alpha/\alpha!` (the tail of the majorant series), while
every term of the exact pair sum is at least :math:`e^{-\sum u_k}` times the same prefactor.
Both s and a (:math:`|y_j| = 1`) of the pair are therefore off by at most
:math:`\varepsilon_{QA} = R_S(u)\,e^{\sum u_k}` times the pair's exact s; θ is chosen so that
:math:`\varepsilon_{QA} \le \mathrm{tol}/4`. A pair is dropped when its largest possible
term, times the atom node's weight :math:`W_A`, is at most
:math:`\tfrac{\mathrm{tol}}{10}\,e^{\lambda_Q}\max(W_A/|w|,\,1/K)`, where
:math:`\lambda_Q` is a lower bound of :math:`\log s_i` over Q (the largest logit of one leaf
found by a greedy descent per query) and K is the number of leaves of the atom tree: the
dropped nodes of a query are disjoint, so their shares :math:`W_A/|w|` add up to at most 1 and
their number to at most K, and together they carry at most tol/5 of its s. The first term
drops what lies far from the query's kernel; the second drops light nodes near it (a density
on a mesh, whose cell weights span many decades, not equal-weight tokens). Every other pair
is summed exactly (the leaves). With all parts,
:math:`|\Delta s|, |\Delta a| \le 0.45\,\mathrm{tol}\,s`, hence for :math:`|a| \le s`

.. math:: \Big|V\frac{a}{s} - V\frac{\hat a}{\hat s}\Big| \le
          \|V\|_2\frac{|\Delta a| + |\Delta s|}{\hat s} \le \|V\|_2\,\mathrm{tol} \quad
          (\mathrm{SA}), \qquad |V\Delta a| \le \|V\|_2\,\mathrm{tol}\,s \quad (\mathrm{USA}),

the same guarantee as the exact cap sums of :mod:`spherepde.interaction.caps`. Sums are
carried as :math:`(e^{T_i}, s_i e^{-T_i}, a_i e^{-T_i})` with a running log-shift
:math:`T_i` (the online softmax), since the pairs' scales differ by hundreds in the exponent.

Cost. A pair is expanded when :math:`\max_k u_k \le` ``u_max``, its set
:math:`S \cup (S + e_k)` has at most ``max_set`` rows (fields of
:class:`~spherepde.interaction.options.FarFieldOptions`) and the expansion is cheaper than
the direct sum, and splitting it is not cheaper: the split's cost is estimated one level
down, each of the two child pairs at the cheaper of its own expansion and its direct sum (0
if dropped). A large set alone does not decide it: the children's sets are smaller by a
factor that depends on tol and on the cloud. Otherwise the pair is summed directly (leaves,
small pairs) or the node with more points is split. The direct pairs of a query node are
merged into runs of consecutive atoms
(a subtree's atoms are contiguous in tree order), each summed in one vectorized pass. For two
clusters of radius r the cost is about :math:`N\,|S|\,(1 + \beta r^2/U_{\max})` instead of
:math:`N^2/2`; tails along a curve cost more (every piece of a query curve meets every piece
of the atom curve inside its kernel's cap). Measured in docs/methods.md.
"""
from __future__ import annotations

import math
from collections import namedtuple
from concurrent.futures import ThreadPoolExecutor
from typing import Final, NamedTuple

import numpy as np
from numba import get_num_threads, njit, prange

from .caps import positive_atoms
from .fused import _exp_nonpositive, _row3
from .numerics import FASTMATH_REDUCE as _REDUCE
from .options import FarFieldOptions

__all__ = ["FarField", "FarFieldOptions", "CompiledSizes", "compiled_sizes"]

# Compile-time constants: MAX_DEGREE, MAX_TERMS, BLOCK, CHUNK and GRID are read as globals
# inside @njit(cache=True) functions, so numba freezes their values into the machine code and
# its on-disk cache; rebinding them at run time would change what Python sees but not what
# the compiled code uses. They are therefore marked Final, and Python reads them back from
# the compiled code (:func:`compiled_sizes`), never from these globals, so the two cannot
# diverge. To change one, edit it here (the cache is keyed by this file and recompiles).

#: Largest multi-index degree per axis (|S| stays below a few hundred at u <= u_max).
MAX_DEGREE: Final = 30
#: Largest |S+| of an expansion (its scratch arrays); pairs that need more are split.
MAX_TERMS: Final = 4096
#: Atoms or queries per block of the expansion's vectorized loops.
BLOCK: Final = 256
#: Atoms or queries per parallel piece of a large pair; query subtrees of at most this many
#: queries are the parallel tasks of the small pairs.
CHUNK: Final = 4096


# The arguments of the numba functions, grouped (numba takes namedtuples of arrays and
# scalars as one argument each).
#: A node-ordered binary tree (:func:`_build`): per node its range [lo, hi) in tree order,
#: its first child (-1 for a leaf; the second is child + 1), center (3), frame (3, 3) and
#: extents (3) of its box.
Tree = namedtuple("Tree", "lo hi child center frame ext")
#: The atoms in tree order: y (n, 3), yT (3, n), w, log w, the log-weight of each node
#: (logW), max log w and its spread max - min.
Atoms = namedtuple("Atoms", "y yT w logw logW lwmax lwspread")
#: Directly summed pairs merged into runs of consecutive atoms: bounds (r, 2) = [lo, hi),
#: and the atom nodes of run r, nodes[start[r]:start[r + 1]].
Runs = namedtuple("Runs", "bounds start nodes")
#: The running sums at the queries: shift T, normalizer S, first moment A (rows in tree order).
Sums = namedtuple("Sums", "T S A")
#: What the walk needs of the options and of tol (:meth:`FarField._walk`).
WalkParams = namedtuple("WalkParams", "log_drop log_leaf eps u_max cost_term max_set lookahead")
#: One expansion at a query block: index set alpha (ns rows of S; S+ beyond), neighbour rows,
#: the largest degree, the moments and their shift.
Expansion = namedtuple("Expansion", "alpha ns nbr maxd mom sigma")
#: A thread's scratch for expansions (sizes of :func:`compiled_sizes`).
Workspace = namedtuple("Workspace", "alpha lookup nbr mom pows scratch")


def _split_tree(built):
    """(idx, :class:`Tree`) from :func:`_build`'s (idx, lo, hi, child, center, frame, ext)."""
    return built[0], Tree(*built[1:])


_POOL = {"pool": None, "workers": 0}


def _pool(workers):
    """A thread pool for the GIL-free numba functions (the tree builds and the walks): the
    parallel loops elsewhere are numba's own, these are serial functions run side by
    side."""
    if _POOL["workers"] < workers:
        if _POOL["pool"] is not None:
            _POOL["pool"].shutdown(wait=True)
        _POOL["pool"], _POOL["workers"] = ThreadPoolExecutor(workers), workers
    return _POOL["pool"]


def _query_cut(lo, hi, child, parts):
    """Query nodes that partition the queries into about ``parts`` subtrees: the node with
    the most queries is replaced by its children until there are ``parts`` (or only leaves)."""
    nodes = [0]
    while len(nodes) < parts:
        k = max(range(len(nodes)), key=lambda i: hi[nodes[i]] - lo[nodes[i]])
        c = child[nodes[k]]
        if c < 0:
            break
        nodes[k:k + 1] = [c, c + 1]
    return nodes


# ------------------------------------------------------------------------------ the tree
@njit(cache=True)
def _eig3(a, vec):
    """Eigenvectors of the symmetric 3x3 matrix a (overwritten) by cyclic Jacobi rotations,
    as the columns of vec; returns the eigenvalues (the diagonal). A LAPACK call per tree
    node cost more than the node's points."""
    for i in range(3):
        for j in range(3):
            vec[i, j] = 1.0 if i == j else 0.0
    for _ in range(12):
        off = abs(a[0, 1]) + abs(a[0, 2]) + abs(a[1, 2])
        if off <= 1e-30 * (abs(a[0, 0]) + abs(a[1, 1]) + abs(a[2, 2])) or off == 0.0:
            break
        for p, q in ((0, 1), (0, 2), (1, 2)):
            if a[p, q] == 0.0:
                continue
            theta = (a[q, q] - a[p, p]) / (2.0 * a[p, q])
            t = (1.0 if theta >= 0 else -1.0) / (abs(theta) + math.sqrt(theta * theta + 1.0))
            c = 1.0 / math.sqrt(t * t + 1.0)
            sn = t * c
            for k in range(3):  # a <- a J (columns p, q)
                akp, akq = a[k, p], a[k, q]
                a[k, p], a[k, q] = c * akp - sn * akq, sn * akp + c * akq
            for k in range(3):  # a <- J^T a (rows p, q)
                apk, aqk = a[p, k], a[q, k]
                a[p, k], a[q, k] = c * apk - sn * aqk, sn * apk + c * aqk
            for k in range(3):
                vkp, vkq = vec[k, p], vec[k, q]
                vec[k, p], vec[k, q] = c * vkp - sn * vkq, sn * vkp + c * vkq
    return a[0, 0], a[1, 1], a[2, 2]


@njit(cache=True)
def _frame(p, lo, hi, center, frame, ext):
    """Principal frame of the points p[lo:hi]: frame rows f_k (descending spread), the
    centre moved to the middle of the bounding box in that frame, half-extents ext."""
    n = hi - lo
    m0 = m1 = m2 = 0.0
    for t in range(lo, hi):
        m0 += p[t, 0]
        m1 += p[t, 1]
        m2 += p[t, 2]
    m0, m1, m2 = m0 / n, m1 / n, m2 / n
    c00 = c01 = c02 = c11 = c12 = c22 = 0.0
    for t in range(lo, hi):
        d0, d1, d2 = p[t, 0] - m0, p[t, 1] - m1, p[t, 2] - m2
        c00 += d0 * d0
        c01 += d0 * d1
        c02 += d0 * d2
        c11 += d1 * d1
        c12 += d1 * d2
        c22 += d2 * d2
    cov = np.empty((3, 3))
    cov[0, 0], cov[0, 1], cov[0, 2] = c00, c01, c02
    cov[1, 0], cov[1, 1], cov[1, 2] = c01, c11, c12
    cov[2, 0], cov[2, 1], cov[2, 2] = c02, c12, c22
    vec = np.empty((3, 3))
    ev = _eig3(cov, vec)
    # rows of frame: eigenvectors by descending eigenvalue
    order = (0, 1, 2)
    e0, e1, e2 = ev
    if e0 >= e1 and e0 >= e2:
        order = (0, 1, 2) if e1 >= e2 else (0, 2, 1)
    elif e1 >= e0 and e1 >= e2:
        order = (1, 0, 2) if e0 >= e2 else (1, 2, 0)
    else:
        order = (2, 0, 1) if e0 >= e1 else (2, 1, 0)
    for k in range(3):
        for a in range(3):
            frame[k, a] = vec[a, order[k]]
    l0 = l1 = l2 = np.inf
    h0 = h1 = h2 = -np.inf
    for t in range(lo, hi):
        d0, d1, d2 = p[t, 0] - m0, p[t, 1] - m1, p[t, 2] - m2
        v0 = frame[0, 0] * d0 + frame[0, 1] * d1 + frame[0, 2] * d2
        v1 = frame[1, 0] * d0 + frame[1, 1] * d1 + frame[1, 2] * d2
        v2 = frame[2, 0] * d0 + frame[2, 1] * d1 + frame[2, 2] * d2
        l0, h0 = min(l0, v0), max(h0, v0)
        l1, h1 = min(l1, v1), max(h1, v1)
        l2, h2 = min(l2, v2), max(h2, v2)
    center[0], center[1], center[2] = m0, m1, m2
    for k, lk, hk in ((0, l0, h0), (1, l1, h1), (2, l2, h2)):
        mid = 0.5 * (lk + hk)
        # the extents in exact arithmetic, widened for the rounding of the projections
        ext[k] = 0.5 * (hk - lk) * (1.0 + 1e-12) + 1e-15
        for a in range(3):
            center[a] += mid * frame[k, a]


@njit(cache=True)
def _grow(lo, hi, child, center, frame, ext):
    cap = 2 * lo.shape[0]
    lo2, hi2 = np.empty(cap, np.int64), np.empty(cap, np.int64)
    child2 = np.full(cap, -1, np.int64)
    c2, f2, e2 = np.empty((cap, 3)), np.empty((cap, 3, 3)), np.empty((cap, 3))
    n = lo.shape[0]
    lo2[:n], hi2[:n], child2[:n], c2[:n], f2[:n], e2[:n] = lo, hi, child, center, frame, ext
    return lo2, hi2, child2, c2, f2, e2


@njit(cache=True, nogil=True)
def _build(p, leaf):
    """A binary tree over the points p (n, 3). Returns idx (the points in tree order), and per
    node: lo, hi (its range in idx), child (first child; -1 for a leaf, the second child is
    child + 1), center (3), frame (3, 3), ext (3)."""
    n = p.shape[0]
    cap = 4 * (n // leaf) + 16
    lo = np.empty(cap, np.int64)
    hi = np.empty(cap, np.int64)
    child = np.full(cap, -1, np.int64)
    center = np.empty((cap, 3))
    frame = np.empty((cap, 3, 3))
    ext = np.empty((cap, 3))
    idx = np.arange(n)
    pp = p.copy()  # rows move with idx: every pass reads contiguous memory
    lo[0], hi[0] = 0, n
    count = 1
    stack = np.empty(128, np.int64)
    stack[0] = 0
    top = 1
    while top > 0:
        top -= 1
        k = stack[top]
        a, b = lo[k], hi[k]
        _frame(pp, a, b, center[k], frame[k], ext[k])
        if b - a <= leaf:
            continue
        # split at the middle of the widest principal axis (the centre is that middle)
        i, j = a, b - 1
        f0, f1, f2 = frame[k, 0, 0], frame[k, 0, 1], frame[k, 0, 2]
        c0, c1, c2 = center[k, 0], center[k, 1], center[k, 2]
        while i <= j:
            if f0 * (pp[i, 0] - c0) + f1 * (pp[i, 1] - c1) + f2 * (pp[i, 2] - c2) < 0.0:
                i += 1
            else:
                idx[i], idx[j] = idx[j], idx[i]
                for r in range(3):
                    pp[i, r], pp[j, r] = pp[j, r], pp[i, r]
                j -= 1
        if i == a or i == b:  # all points coincide along the axis: split by count
            i = (a + b) // 2
        if count + 2 > lo.shape[0]:  # midpoint splits may leave small leaves: grow
            lo, hi, child, center, frame, ext = _grow(lo, hi, child, center, frame, ext)
        child[k] = count
        lo[count], hi[count] = a, i
        lo[count + 1], hi[count + 1] = i, b
        if top + 2 > stack.shape[0]:
            stack = np.concatenate((stack, np.empty(stack.shape[0], np.int64)))
        stack[top] = count
        stack[top + 1] = count + 1
        top += 2
        count += 2
    return idx, lo[:count], hi[:count], child[:count], center[:count], frame[:count], ext[:count]


# ------------------------------------------------------------------------------ bounds
@njit(cache=True, inline="always")
def _dot3(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


@njit(cache=True)
def _upper(q, cA, fA, eA):
    """max over y in A's box of <q, y>."""
    v = _dot3(q, cA)
    for k in range(3):
        v += abs(_dot3(q, fA[k])) * eA[k]
    return v


@njit(cache=True)
def _leaf_logsum(q, y, logw, lo, hi):
    """log sum_j e^{<q, y_j> + log w_j} over [lo, hi)."""
    m = -np.inf
    for t in range(lo, hi):
        m = max(m, q[0] * y[t, 0] + q[1] * y[t, 1] + q[2] * y[t, 2] + logw[t])
    s = 0.0
    for t in range(lo, hi):
        s += _exp_nonpositive(q[0] * y[t, 0] + q[1] * y[t, 1] + q[2] * y[t, 2] + logw[t] - m)
    return m + math.log(s)


@njit(cache=True)
def _node_lower(q, c, f, e, logW):
    """log W + min over the node's box of <q, y>: a lower bound of log sum_{j in node} w_j
    e^{<q, y_j>} (log W = log sum_j w_j of the node)."""
    v = _dot3(q, c)
    for k in range(3):
        v -= abs(_dot3(q, f[k])) * e[k]
    return logW + v


@njit(cache=True)
def _query_lower(q, atoms, tree, visits, stack):
    """A lower bound of log s at one query: first the best of the node bounds
    (:func:`_node_lower`) on a descent into the child with the larger bound, and the exact
    log-sum over the leaf reached; then a branch and bound for the largest logit (children in
    the order of their upper bounds, nodes skipped whose upper bound is below the best found),
    for at most `visits` nodes, whose leaves' log-sums may raise the bound (a query whose
    largest term is a lone atom far from the bulk). ``stack``: scratch (>= 64 entries)."""
    y, logw, lwmax, logW = atoms.y, atoms.logw, atoms.lwmax, atoms.logW
    lo, hi, child, center, frame, ext = tree
    k = 0
    best = _node_lower(q, center[0], frame[0], ext[0], logW[0])
    while child[k] >= 0:
        c = child[k]
        l0 = _node_lower(q, center[c], frame[c], ext[c], logW[c])
        l1 = _node_lower(q, center[c + 1], frame[c + 1], ext[c + 1], logW[c + 1])
        k = c if l0 >= l1 else c + 1
        best = max(best, max(l0, l1))
    best = max(best, _leaf_logsum(q, y, logw, lo[k], hi[k]))
    stack[0] = 0
    top = 1
    seen = 0
    while top > 0 and seen < visits:
        top -= 1
        k = stack[top]
        seen += 1
        if _upper(q, center[k], frame[k], ext[k]) + lwmax <= best:
            continue
        if child[k] < 0:
            best = max(best, _leaf_logsum(q, y, logw, lo[k], hi[k]))
            continue
        c = child[k]
        if top + 2 > stack.shape[0]:
            return best  # the bound so far is a bound; the search only raises it
        if _upper(q, center[c], frame[c], ext[c]) >= \
                _upper(q, center[c + 1], frame[c + 1], ext[c + 1]):
            stack[top], stack[top + 1] = c + 1, c
        else:
            stack[top], stack[top + 1] = c, c + 1
        top += 2
    return best


@njit(parallel=True, cache=True)
def _lower_bounds(qs, qtree, atoms, tree, visits, radius, out):
    """out_i = a lower bound of log s_i at the queries qs (in the order of their tree: qlo,
    qhi, qchild), by :func:`_query_lower`. A leaf of the query tree whose queries lie within
    ``radius`` of its first one, q_r, takes out_i = out_r - |q_i - q_r|, which is a bound
    since |y_j| = 1 gives <q_i, y_j> >= <q_r, y_j> - |q_i - q_r| term by term (late in a run
    the queries of a cluster nearly coincide, and one search serves the leaf)."""
    qlo, qhi, qchild = qtree.lo, qtree.hi, qtree.child
    leaves = np.flatnonzero(qchild < 0)
    for t in prange(leaves.shape[0]):
        k = leaves[t]
        a, b = qlo[k], qhi[k]
        stack = np.empty(64, np.int64)
        r = 0.0
        for i in range(a, b):  # out_i = -|q_i - q_r| until the bound at q_r is added
            d0, d1, d2 = qs[i, 0] - qs[a, 0], qs[i, 1] - qs[a, 1], qs[i, 2] - qs[a, 2]
            out[i] = -math.sqrt(d0 * d0 + d1 * d1 + d2 * d2)
            r = max(r, -out[i])
        if r <= radius:
            first = _query_lower(qs[a], atoms, tree, visits, stack)
            for i in range(a, b):
                out[i] += first
        else:
            for i in range(a, b):
                out[i] = _query_lower(qs[i], atoms, tree, visits, stack)


@njit(cache=True)
def _node_logsum(lo, hi, child, logw):
    """log of the total weight of each node (children come after their parent)."""
    out = np.empty(lo.shape[0])
    for k in range(lo.shape[0] - 1, -1, -1):
        if child[k] < 0:
            m = -np.inf
            for t in range(lo[k], hi[k]):
                m = max(m, logw[t])
            s = 0.0
            for t in range(lo[k], hi[k]):
                s += math.exp(logw[t] - m)
            out[k] = m + math.log(s)
        else:
            a, b = out[child[k]], out[child[k] + 1]
            m = max(a, b)
            out[k] = m + math.log(math.exp(a - m) + math.exp(b - m))
    return out


# ------------------------------------------------------------------------------ index sets
@njit(cache=True)
def _walk(u, theta, record, alpha, lookup):
    """The multi-indices of S_theta = {alpha : u^alpha/alpha! >= theta} (for u_k <= 1 the
    terms fall along every axis, so each loop stops at its first term below theta): their
    compensated sum, and their number. With ``record`` they are written to alpha and lookup,
    and the number is -1 (lookup reset) once S would need a degree >= MAX_DEGREE or S+ more
    than MAX_TERMS rows (at most 4 |S|)."""
    acc = comp = 0.0
    ns = 0
    t0 = 1.0
    for a0 in range(MAX_DEGREE + 1):
        if a0 > 0:
            t0 *= u[0] / a0
        if t0 < theta:
            break
        t1 = t0
        for a1 in range(MAX_DEGREE + 1):
            if a1 > 0:
                t1 *= u[1] / a1
            if t1 < theta:
                break
            t2 = t1
            for a2 in range(MAX_DEGREE + 1):
                if a2 > 0:
                    t2 *= u[2] / a2
                if t2 < theta:
                    break
                # Neumaier's compensated sum: e^{sum u} - acc is ~1e-14 of it here
                v = acc + t2
                if abs(acc) >= t2:
                    comp += (acc - v) + t2
                else:
                    comp += (t2 - v) + acc
                acc = v
                if record:
                    if a0 >= MAX_DEGREE or a1 >= MAX_DEGREE or a2 >= MAX_DEGREE or \
                            4 * (ns + 1) > MAX_TERMS:
                        _clear(alpha, ns, lookup)
                        return acc + comp, -1
                    alpha[ns, 0], alpha[ns, 1], alpha[ns, 2] = a0, a1, a2
                    lookup[a0, a1, a2] = ns
                ns += 1
    return acc + comp, ns


@njit(cache=True)
def _tail_ok(u, theta, eps, total, alpha, lookup):
    """Whether the majorant tail of S_theta, times e^{sum u} = total, is at most eps."""
    acc, _ = _walk(u, theta, False, alpha, lookup)
    return (total - acc) * total <= eps


@njit(cache=True)
def _index_set(u, eps, alpha, lookup, hint):
    """The multi-indices S = {alpha : u^alpha/alpha! >= theta}, theta the largest power of 2
    for which the majorant tail R_S(u) e^{sum u} <= eps (found from a first guess, the tail
    being monotone in theta). Fills alpha (rows) and lookup (the row of each index in S and
    of S + e_k, -1 elsewhere; entries set here are reset by :func:`_clear`); returns
    (|S|, |S+|, log2 theta), or (-1, -1, 1) if S would need a degree >= MAX_DEGREE, more
    than MAX_TERMS rows, or theta < 1e-30. A hint <= 0 is the log2 theta of an earlier call
    with the same u and eps, used without the search."""
    total = math.exp(u[0] + u[1] + u[2])
    theta = 2.0 ** math.floor(math.log2(eps / (total * total)))
    if hint <= 0:  # the theta found for the same u before (hint = -log2 theta)
        theta = 2.0 ** hint
    elif _tail_ok(u, theta, eps, total, alpha, lookup):
        while theta < 1.0 and _tail_ok(u, 2.0 * theta, eps, total, alpha, lookup):
            theta *= 2.0
    else:
        while True:
            theta *= 0.5
            if theta < 1e-30:
                return -1, -1, 1
            if _tail_ok(u, theta, eps, total, alpha, lookup):
                break
    _, ns = _walk(u, theta, True, alpha, lookup)
    if ns < 0:
        return -1, -1, 1
    # S + e_k (the first moment)
    nt = ns
    for r in range(ns):
        for k in range(3):
            b0, b1, b2 = alpha[r, 0], alpha[r, 1], alpha[r, 2]
            if k == 0:
                b0 += 1
            elif k == 1:
                b1 += 1
            else:
                b2 += 1
            if lookup[b0, b1, b2] < 0:
                alpha[nt, 0], alpha[nt, 1], alpha[nt, 2] = b0, b1, b2
                lookup[b0, b1, b2] = nt
                nt += 1
    return ns, nt, int(round(math.log2(theta)))


@njit(cache=True)
def _clear(alpha, nt, lookup):
    for r in range(nt):
        lookup[alpha[r, 0], alpha[r, 1], alpha[r, 2]] = -1


# ------------------------------------------------------------------------------ accumulation
@njit(cache=True, inline="always")
def _merge(i, shift, s, a0, a1, a2, T, S, A):
    """Adds e^shift (s, a) to query i's running (e^T, s, a)."""
    if not s > 0.0:
        return
    if shift > T[i]:
        f = _exp_nonpositive(T[i] - shift)
        S[i] = S[i] * f + s
        A[i, 0] = A[i, 0] * f + a0
        A[i, 1] = A[i, 1] * f + a1
        A[i, 2] = A[i, 2] * f + a2
        T[i] = shift
    else:
        f = _exp_nonpositive(shift - T[i])
        S[i] += s * f
        A[i, 0] += a0 * f
        A[i, 1] += a1 * f
        A[i, 2] += a2 * f


@njit(cache=True)
def _direct(qs, qlo, qhi, atoms, alo, ahi, nodes, tree, sums):
    """Exact sums of the atoms [alo, ahi) at the queries [qlo, qhi): the atoms of the
    consecutive atom nodes ``nodes`` (tree order keeps a subtree's atoms contiguous, so the
    nodes a query node sums directly merge into few long runs: :func:`_runs`), through the
    fused kernel's vectorized loop, whose cost per term is 3-4 times lower on such runs than
    on one leaf. The shift is the largest upper bound of <q, y> over the nodes' boxes + max
    log w; every term within e^-600 of the largest is kept when the boxes are small enough,
    else a first pass finds the largest logit."""
    yT, logw, lwmax, lwspread = atoms.yT, atoms.logw, atoms.lwmax, atoms.lwspread
    acen, afr, aext = tree.center, tree.frame, tree.ext
    T, S, A = sums
    y0, y1, y2 = yT[0, alo:ahi], yT[1, alo:ahi], yT[2, alo:ahi]
    lw = logw[alo:ahi]
    for i in range(qlo, qhi):
        q = qs[i]
        up = low = -np.inf
        for k in nodes:
            u = _upper(q, acen[k], afr[k], aext[k])
            up = max(up, u)
            low = max(low, 2.0 * _dot3(q, acen[k]) - u)  # <= the box's min of <q, y>
        m = up + lwmax
        # the largest term is at least e^{low + min log w - m}: a pass for it when that
        # could underflow
        if up - low + lwspread > 600.0:
            m = -np.inf
            for j in range(ahi - alo):
                m = max(m, q[0] * y0[j] + q[1] * y1[j] + q[2] * y2[j] + lw[j])
        s, a0, a1, a2 = _row3(q[0], q[1], q[2], y0, y1, y2, lw, y0, y1, y2, m)
        _merge(i, m, s, a0, a1, a2, T, S, A)


def _runs(dir_pairs, alo, ahi):
    """The directly summed pairs (query node, atom node) merged per query node into runs of
    consecutive atoms: (run_q, run_lo, run_hi) and the atom nodes of each run,
    run_nodes[run_start[r]:run_start[r + 1]]. Measured on late states (the harmonic
    benchmark's tokens at t = 6, a finite-volume state at beta = 256): leaf pairs of 54 atoms
    on average merge into runs that hold a typical term in a run of ~2000 atoms."""
    if dir_pairs.shape[0] == 0:
        z = np.zeros(0, np.int64)
        return z, z, z, np.zeros(1, np.int64), z
    Q, P = dir_pairs[:, 0], dir_pairs[:, 1]
    lo, hi = alo[P], ahi[P]
    order = np.lexsort((lo, Q))
    Q, P, lo, hi = Q[order], P[order], lo[order], hi[order]
    new = np.r_[True, (Q[1:] != Q[:-1]) | (lo[1:] != hi[:-1])]
    first = np.flatnonzero(new)
    last = np.r_[first[1:], Q.size] - 1
    return (Q[first], lo[first], hi[last], np.r_[first, Q.size].astype(np.int64),
            P.astype(np.int64))


@njit(cache=True, fastmath=_REDUCE)
def _powers(P, k, vals, n, maxd, scale_factorial):
    """P[k, e, :n] = vals^e (/ e! if scale_factorial)."""
    for i in range(n):
        P[k, 0, i] = 1.0
    for e in range(1, maxd + 1):
        f = 1.0 / e if scale_factorial else 1.0
        for i in range(n):
            P[k, e, i] = P[k, e - 1, i] * vals[i] * f


@njit(cache=True, fastmath=_REDUCE)
def _moments(y, w, lo, hi, c, F, qc, alpha, nt, maxd, mom, P):
    """mom[r] = sum over the atoms [lo, hi) of w_j e^{<qc, y_j - c> - sigma} b_j^alpha_r,
    b_j = F (y_j - c); returns sigma (their largest <qc, y_j - c>). In blocks of BLOCK atoms
    whose inner loops vectorize."""
    sigma = -np.inf
    for j in range(lo, hi):
        sigma = max(sigma, qc[0] * (y[j, 0] - c[0]) + qc[1] * (y[j, 1] - c[1])
                    + qc[2] * (y[j, 2] - c[2]))
    for r in range(nt):
        mom[r] = 0.0
    wv, b0, b1, b2 = np.empty(BLOCK), np.empty(BLOCK), np.empty(BLOCK), np.empty(BLOCK)
    for j0 in range(lo, hi, BLOCK):
        nb = min(BLOCK, hi - j0)
        for t in range(nb):
            j = j0 + t
            d0, d1, d2 = y[j, 0] - c[0], y[j, 1] - c[1], y[j, 2] - c[2]
            wv[t] = w[j] * _exp_nonpositive(qc[0] * d0 + qc[1] * d1 + qc[2] * d2 - sigma)
            b0[t] = F[0, 0] * d0 + F[0, 1] * d1 + F[0, 2] * d2
            b1[t] = F[1, 0] * d0 + F[1, 1] * d1 + F[1, 2] * d2
            b2[t] = F[2, 0] * d0 + F[2, 1] * d1 + F[2, 2] * d2
        _powers(P, 0, b0, nb, maxd, False)
        _powers(P, 1, b1, nb, maxd, False)
        _powers(P, 2, b2, nb, maxd, False)
        for e in range(maxd + 1):
            for t in range(nb):
                P[0, e, t] *= wv[t]
        for r in range(nt):
            p0, p1, p2 = P[0, alpha[r, 0]], P[1, alpha[r, 1]], P[2, alpha[r, 2]]
            acc = 0.0
            for t in range(nb):
                acc += p0[t] * p1[t] * p2[t]
            mom[r] += acc
    return sigma


@njit(cache=True, fastmath=_REDUCE)
def _evaluate(qs, lo, hi, qc, c, F, expansion, P, scratch, sums):
    """Adds the expansion with moments mom (shift sigma) at the queries [lo, hi):
    sum_alpha a^alpha/alpha! (m_alpha, m_{alpha + e_k}), a = F (q - qc); nbr[r, k] is the
    row of alpha_r + e_k. In blocks of BLOCK queries whose inner loops vectorize."""
    alpha, ns, nbr, maxd, mom, sigma = expansion
    T, S, A = sums
    a0, a1, a2 = np.empty(BLOCK), np.empty(BLOCK), np.empty(BLOCK)
    # (s, n_0, n_1, n_2) = M4 tt: the products tt[r, t] = a_t^alpha_r / alpha_r! of a block
    # against the moments (m_alpha, m_{alpha + e_k}), a (4, ns) x (ns, BLOCK) matrix product
    M4 = np.empty((4, ns))
    for r in range(ns):
        M4[0, r] = mom[r]
        for k in range(3):
            M4[k + 1, r] = mom[nbr[r, k]]
    for i0 in range(lo, hi, BLOCK):
        nb = min(BLOCK, hi - i0)
        for t in range(nb):
            i = i0 + t
            d0, d1, d2 = qs[i, 0] - qc[0], qs[i, 1] - qc[1], qs[i, 2] - qc[2]
            a0[t] = F[0, 0] * d0 + F[0, 1] * d1 + F[0, 2] * d2
            a1[t] = F[1, 0] * d0 + F[1, 1] * d1 + F[1, 2] * d2
            a2[t] = F[2, 0] * d0 + F[2, 1] * d1 + F[2, 2] * d2
        _powers(P, 0, a0, nb, maxd, True)
        _powers(P, 1, a1, nb, maxd, True)
        _powers(P, 2, a2, nb, maxd, True)
        tt = scratch[:ns * nb].reshape((ns, nb))
        for r in range(ns):
            p0, p1, p2 = P[0, alpha[r, 0]], P[1, alpha[r, 1]], P[2, alpha[r, 2]]
            row = tt[r]
            for t in range(nb):
                row[t] = p0[t] * p1[t] * p2[t]
        out = M4 @ tt
        for t in range(nb):
            i = i0 + t
            s, n0, n1, n2 = out[0, t], out[1, t], out[2, t], out[3, t]
            # y = c + sum_k b_k f_k
            v0 = c[0] * s + F[0, 0] * n0 + F[1, 0] * n1 + F[2, 0] * n2
            v1 = c[1] * s + F[0, 1] * n0 + F[1, 1] * n1 + F[2, 1] * n2
            v2 = c[2] * s + F[0, 2] * n0 + F[1, 2] * n1 + F[2, 2] * n2
            shift = qs[i, 0] * c[0] + qs[i, 1] * c[1] + qs[i, 2] * c[2] + sigma
            _merge(i, shift, s, v0, v1, v2, T, S, A)


@njit(cache=True)
def _prepare(u, eps, alpha, lookup, nbr, hint):
    """The index set of u (:func:`_index_set`), the neighbour rows nbr and the largest
    degree; (ns, nt, maxd) with ns = -1 when u needs more than MAX_DEGREE."""
    ns, nt, _ = _index_set(u, eps, alpha, lookup, hint)
    maxd = 0
    for r in range(ns):
        nbr[r, 0] = lookup[alpha[r, 0] + 1, alpha[r, 1], alpha[r, 2]]
        nbr[r, 1] = lookup[alpha[r, 0], alpha[r, 1] + 1, alpha[r, 2]]
        nbr[r, 2] = lookup[alpha[r, 0], alpha[r, 1], alpha[r, 2] + 1]
    for r in range(nt):
        for k in range(3):
            maxd = max(maxd, alpha[r, k])
    if ns > 0:
        _clear(alpha, nt, lookup)
    return ns, nt, maxd


def _cross_bounds(Q, P, qfr, qext, afr, aext, u):
    """u_k >= abar_k bbar_k: the query node's extents seen along the atom node's axes times
    the atom node's extents, rounded up to the grid 2^(j/4 - 20) (a larger u only enlarges S, and
    the grid lets the traversal remember the set sizes); returns the grid indices j_k
    (u_k below 2^-20 is raised to it)."""
    j = np.empty(3, np.int64)
    for k in range(3):
        v = 0.0
        for l in range(3):
            v += abs(_dot3(afr[P, k], qfr[Q, l])) * qext[Q, l]
        v *= aext[P, k]
        if v <= 2.0 ** -20:
            u[k], j[k] = 2.0 ** -20, 0
        else:
            jj = min(int(math.ceil(4.0 * (math.log2(v) + 20.0))), GRID - 1)
            u[k], j[k] = 2.0 ** (jj / 4.0 - 20.0), jj
    return j


_cross_bounds = njit(cache=True)(_cross_bounds)

#: Levels of the grid of u (2^(j/4 - 20), j < GRID; u up to 2^3; above that no pair is
#: expanded).
GRID: Final = 92


class CompiledSizes(NamedTuple):
    """The sizes compiled into the far field's numba code (the globals above)."""

    max_degree: int
    max_terms: int
    block: int
    chunk: int
    grid: int


@njit(cache=True)
def _compiled_sizes():
    return MAX_DEGREE, MAX_TERMS, BLOCK, CHUNK, GRID


def compiled_sizes() -> CompiledSizes:
    """The sizes as the compiled code holds them (read from it, not from the globals)."""
    return CompiledSizes(*_compiled_sizes())


@njit(cache=True)
def _set_sizes(u, j, sizes, eps, alpha, lookup):
    """(|S|, |S+|, largest degree) of the index set of u, remembered on the grid j of u
    (``sizes``: -2 until computed; |S| = -1 when u needs more than MAX_DEGREE)."""
    ns = sizes[j[0], j[1], j[2], 0]
    if ns == -2:  # not known yet
        ns, nt, lt = _index_set(u, eps, alpha, lookup, 1)
        if ns > 0:
            _clear(alpha, nt, lookup)
        sizes[j[0], j[1], j[2], 0], sizes[j[0], j[1], j[2], 1] = ns, nt
        sizes[j[0], j[1], j[2], 2] = lt
        return ns, nt, lt
    return ns, sizes[j[0], j[1], j[2], 1], sizes[j[0], j[1], j[2], 2]


@njit(cache=True)
def _is_dropped(Q, P, qcen, qext, qlam, qmax, acen, afr, aext, alogW, log_drop, log_leaf):
    """Whether the pair's largest possible term is below the drop threshold (_traverse)."""
    rq = math.sqrt(qext[Q, 0] ** 2 + qext[Q, 1] ** 2 + qext[Q, 2] ** 2)
    ra = math.sqrt(aext[P, 0] ** 2 + aext[P, 1] ** 2 + aext[P, 2] ** 2)
    cn = math.sqrt(_dot3(acen[P], acen[P]))
    hi = min(_upper(qcen[Q], acen[P], afr[P], aext[P]) + rq * (cn + ra), qmax[Q])
    return hi < qlam[Q] + max(log_drop, log_leaf - alogW[P])


@njit(cache=True)
def _expansion(Q, P, nq, na, qtree, atree, wp, sizes, alpha, lookup, u):
    """(cost, largest degree) of the pair's expansion, the cost in units of one exact term:
    the moments (na atoms x |S+|) and the sums at the queries (nq x |S| with the three
    first-moment rows), each point with its powers. The cost is inf where no expansion is
    allowed (some u_k above u_max, a set beyond MAX_DEGREE or above max_set rows)."""
    j = _cross_bounds(Q, P, qtree.frame, qtree.ext, atree.frame, atree.ext, u)
    if max(u[0], max(u[1], u[2])) <= wp.u_max:
        ns, nt, lt = _set_sizes(u, j, sizes, wp.eps, alpha, lookup)
        if ns > 0 and nt <= wp.max_set:
            return wp.cost_term * (na * (nt + 4.0) + nq * (4.0 * ns + 8.0)), lt
    return np.inf, 0


@njit(cache=True)
def _cheapest(Q, P, qtree, qlam, qmax, atree, alogW, wp, sizes, alpha, lookup, u):
    """The cost of a pair done at once: 0 when dropped, else the cheaper of its expansion
    (where one is allowed) and its direct sum."""
    if _is_dropped(Q, P, qtree.center, qtree.ext, qlam, qmax, atree.center, atree.frame,
                   atree.ext, alogW, wp.log_drop, wp.log_leaf):
        return 0.0
    nq, na = qtree.hi[Q] - qtree.lo[Q], atree.hi[P] - atree.lo[P]
    cost, _ = _expansion(Q, P, nq, na, qtree, atree, wp, sizes, alpha, lookup, u)
    return min(cost, float(nq) * na)


@njit(cache=True, nogil=True)
def _traverse(qtree, qlam, qmax, atree, alogW, wp, start=0):
    """The dual-tree walk from (query node ``start``, root): each pair of nodes is dropped,
    expanded, summed directly or split (module docstring). A pair is dropped when its largest
    possible term e^hi, times the atom node's weight W_A, is at most
    D/2 e^{lambda_Q} max(W_A/|w|, 1/K)
    (log_drop = log(D/(2|w|)), log_leaf = log(D/(2K)), K the atom tree's leaves). Returns
    the pairs to expand and to sum directly, (n, 2) each, and the number of dropped pairs.
    ``wp``: a :data:`WalkParams`."""
    qlo, qhi, qchild, qcen, qfr, qext = qtree
    alo, ahi, achild, acen, afr, aext = atree
    log_drop, log_leaf, lookahead = wp.log_drop, wp.log_leaf, wp.lookahead
    alpha = np.empty((MAX_TERMS, 3), np.int64)
    lookup = np.full((MAX_DEGREE + 2, MAX_DEGREE + 2, MAX_DEGREE + 2), -1, np.int32)
    u = np.empty(3)
    # the index-set sizes (|S|, |S+|) of each u on the grid, -2 until computed
    sizes = np.full((GRID, GRID, GRID, 3), -2, np.int32)
    u2 = np.empty(3)
    stack = np.empty((256, 2), np.int64)
    stack[0, 0], stack[0, 1] = start, 0
    top = 1
    exp_pairs = np.empty((64, 3), np.int64)  # Q, A, log2 theta
    dir_pairs = np.zeros((64, 3), np.int64)
    ne = nd = dropped = 0
    while top > 0:
        top -= 1
        Q, P = stack[top, 0], stack[top, 1]
        nq, na = qhi[Q] - qlo[Q], ahi[P] - alo[P]
        if _is_dropped(Q, P, qcen, qext, qlam, qmax, acen, afr, aext, alogW, log_drop,
                       log_leaf):
            dropped += 1
            continue
        direct_cost = float(nq) * na
        qleaf, aleaf = qchild[Q] < 0, achild[P] < 0
        # the node a split divides: the one with more points (a leaf is never split);
        # splitting the wider one instead was measured 1.5-1.8x slower on late clouds
        split_q = not qleaf and (aleaf or nq > na)
        cost, lt = _expansion(Q, P, nq, na, qtree, atree, wp, sizes, alpha, lookup, u)
        expand = cost <= direct_cost
        if expand and lookahead and not (qleaf and aleaf):
            # a large index set means a large pair: its children's sets may be so much
            # smaller that the split (each child pair at its cheapest) costs less, which
            # depends on tol and on the cloud, not on |S+| alone
            split = 0.0
            for h in range(2):
                cq, cp = (qchild[Q] + h, P) if split_q else (Q, achild[P] + h)
                split += _cheapest(cq, cp, qtree, qlam, qmax, atree, alogW, wp, sizes, alpha,
                                   lookup, u2)
            expand = split >= cost
        if expand:
            if ne == exp_pairs.shape[0]:
                exp_pairs = np.concatenate((exp_pairs, np.empty_like(exp_pairs)))
            exp_pairs[ne, 0], exp_pairs[ne, 1], exp_pairs[ne, 2] = Q, P, lt
            ne += 1
            continue
        if (qleaf and aleaf) or direct_cost <= 4096.0:
            if nd == dir_pairs.shape[0]:
                dir_pairs = np.concatenate((dir_pairs, np.zeros_like(dir_pairs)))
            dir_pairs[nd, 0], dir_pairs[nd, 1] = Q, P
            nd += 1
            continue
        if top + 2 > stack.shape[0]:
            stack = np.concatenate((stack, np.empty_like(stack)))
        if split_q:
            c = qchild[Q]
            stack[top, 0], stack[top, 1] = c, P
            stack[top + 1, 0], stack[top + 1, 1] = c + 1, P
        else:
            c = achild[P]
            stack[top, 0], stack[top, 1] = Q, c
            stack[top + 1, 0], stack[top + 1, 1] = Q, c + 1
        top += 2
    return exp_pairs[:ne], dir_pairs[:nd], dropped


@njit(cache=True)
def _pair(Q, P, lt, expand, qs, qtree, atoms, atree, runs, eps, ws, sums):
    """One pair, serially (P: the atom node, or for a direct pair the run), with the
    :data:`Workspace` ws; returns its work (terms)."""
    qlo, qhi = qtree.lo, qtree.hi
    if not expand:
        a0, a1 = runs.bounds[P, 0], runs.bounds[P, 1]
        _direct(qs, qlo[Q], qhi[Q], atoms, a0, a1, runs.nodes[runs.start[P]:runs.start[P + 1]],
                atree, sums)
        return (qhi[Q] - qlo[Q]) * (a1 - a0), 0
    u = np.empty(3)
    _cross_bounds(Q, P, qtree.frame, qtree.ext, atree.frame, atree.ext, u)
    ns, nt, maxd = _prepare(u, eps, ws.alpha, ws.lookup, ws.nbr, lt)
    sigma = _moments(atoms.y, atoms.w, atree.lo[P], atree.hi[P], atree.center[P],
                     atree.frame[P], qtree.center[Q], ws.alpha, nt, maxd, ws.mom, ws.pows)
    _evaluate(qs, qlo[Q], qhi[Q], qtree.center[Q], atree.center[P], atree.frame[P],
              Expansion(ws.alpha, ns, ws.nbr, maxd, ws.mom, sigma), ws.pows, ws.scratch, sums)
    return 0, (qhi[Q] - qlo[Q] + atree.hi[P] - atree.lo[P]) * nt


@njit(parallel=True, cache=True)
def _run_big(pairs, expand, qs, qtree, atoms, atree, runs, eps, sums):
    """Pairs whose query node is above the task cut, one after the other, each split into
    CHUNK-sized parallel pieces: atom chunks (their moments, combined with their shifts)
    and query blocks (disjoint rows of T, S, A)."""
    qlo, qhi, qcen, qfr, qext = qtree.lo, qtree.hi, qtree.center, qtree.frame, qtree.ext
    alo, ahi, acen, afr, aext = atree.lo, atree.hi, atree.center, atree.frame, atree.ext
    y, w = atoms.y, atoms.w
    alpha = np.empty((MAX_TERMS, 3), np.int64)
    lookup = np.full((MAX_DEGREE + 2, MAX_DEGREE + 2, MAX_DEGREE + 2), -1, np.int32)
    nbr = np.empty((MAX_TERMS, 3), np.int64)
    u = np.empty(3)
    work = np.zeros(2, np.int64)  # exact terms, expansion terms
    for p in range(pairs.shape[0]):
        Q, P, lt = pairs[p, 0], pairs[p, 1], pairs[p, 2]
        q0, q1 = qlo[Q], qhi[Q]
        nqc = (q1 - q0 + CHUNK - 1) // CHUNK
        if not expand[p]:  # P is a run
            a0, a1 = runs.bounds[P, 0], runs.bounds[P, 1]
            nodes = runs.nodes[runs.start[P]:runs.start[P + 1]]
            for b in prange(nqc):
                _direct(qs, q0 + b * CHUNK, min(q1, q0 + (b + 1) * CHUNK), atoms, a0, a1,
                        nodes, atree, sums)
            work[0] += (q1 - q0) * (a1 - a0)
            continue
        a0, a1 = alo[P], ahi[P]
        _cross_bounds(Q, P, qfr, qext, afr, aext, u)
        ns, nt, maxd = _prepare(u, eps, alpha, lookup, nbr, lt)
        nac = (a1 - a0 + CHUNK - 1) // CHUNK
        moms = np.empty((nac, nt))
        sig = np.empty(nac)
        for b in prange(nac):
            pows = np.empty((3, MAX_DEGREE + 2, BLOCK))
            sig[b] = _moments(y, w, a0 + b * CHUNK, min(a1, a0 + (b + 1) * CHUNK), acen[P],
                              afr[P], qcen[Q], alpha, nt, maxd, moms[b], pows)
        sigma = sig.max()
        mom = np.zeros(nt)
        for b in range(nac):
            f = _exp_nonpositive(sig[b] - sigma)
            for r in range(nt):
                mom[r] += f * moms[b, r]
        for b in prange(nqc):
            pows = np.empty((3, MAX_DEGREE + 2, BLOCK))
            scratch = np.empty(ns * BLOCK)
            _evaluate(qs, q0 + b * CHUNK, min(q1, q0 + (b + 1) * CHUNK), qcen[Q], acen[P],
                      afr[P], Expansion(alpha, ns, nbr, maxd, mom, sigma), pows, scratch, sums)
        work[1] += (q1 - q0 + a1 - a0) * nt
    return work


@njit(parallel=True, cache=True)
def _run_small(nthreads, start, pairs, expand, qs, qtree, atoms, atree, runs, eps, sums, work):
    """The other pairs, grouped by the query subtree (task) that holds their query node:
    tasks in parallel (their queries are disjoint), the pairs of a task serially."""
    ntask = start.shape[0] - 1
    nth = min(ntask, nthreads)
    for th in prange(nth):
        alpha = np.empty((MAX_TERMS, 3), np.int64)
        lookup = np.full((MAX_DEGREE + 2, MAX_DEGREE + 2, MAX_DEGREE + 2), -1, np.int32)
        nbr = np.empty((MAX_TERMS, 3), np.int64)
        mom = np.empty(MAX_TERMS)
        pows = np.empty((3, MAX_DEGREE + 2, BLOCK))
        scratch = np.empty(MAX_TERMS * BLOCK)
        ws = Workspace(alpha, lookup, nbr, mom, pows, scratch)
        for t in range(th, ntask, nth):
            acc0 = acc1 = 0
            for p in range(start[t], start[t + 1]):
                w0, w1 = _pair(pairs[p, 0], pairs[p, 1], pairs[p, 2], expand[p], qs, qtree,
                               atoms, atree, runs, eps, ws, sums)
                acc0 += w0
                acc1 += w1
            work[t, 0] = acc0
            work[t, 1] = acc1


@njit(cache=True)
def _node_min(lo, hi, child, vals):
    """min of vals over each node's range (children come after their parent)."""
    out = np.empty(lo.shape[0])
    for k in range(lo.shape[0] - 1, -1, -1):
        if child[k] < 0:
            m = np.inf
            for t in range(lo[k], hi[k]):
                m = min(m, vals[t])
            out[k] = m
        else:
            out[k] = min(out[child[k]], out[child[k] + 1])
    return out


@njit(cache=True)
def _node_max_norm(lo, hi, child, p):
    out = np.empty(lo.shape[0])
    for k in range(lo.shape[0] - 1, -1, -1):
        if child[k] < 0:
            m = 0.0
            for t in range(lo[k], hi[k]):
                m = max(m, math.sqrt(p[t, 0] ** 2 + p[t, 1] ** 2 + p[t, 2] ** 2))
            out[k] = m
        else:
            out[k] = max(out[child[k]], out[child[k] + 1])
    return out


@njit(cache=True)
def _tasks(lo, hi, child, size):
    """Per node, the task that holds it: the highest node of at most `size` points on its
    path from the root (-1 above them)."""
    task = np.full(lo.shape[0], -1, np.int64)
    if hi[0] - lo[0] <= size:
        task[0] = 0
    for k in range(lo.shape[0]):
        c = child[k]
        if c < 0:
            continue
        for cc in (c, c + 1):
            if task[k] >= 0:
                task[cc] = task[k]
            elif hi[cc] - lo[cc] <= size:
                task[cc] = cc
    return task


def _as3(p):
    p = np.asarray(p, dtype=np.float64)
    out = np.zeros((p.shape[0], 3))
    out[:, :p.shape[1]] = p
    return out


class FarField:
    r"""The atoms of a measure on S^1 or S^2 in a tree, for the attention sums at queries
    through the dual-tree far-field expansion (module docstring).

    Parameters
    ----------
    points : (n, d) unit vectors, d = 2 or 3
    weights : (n,) non-negative (atoms of weight 0 are dropped)

    Examples
    --------
    >>> import numpy as np
    >>> from spherepde.interaction.farfield import FarField
    >>> y = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    >>> s, a, shift, stats = FarField(y, np.array([0.5, 0.5])).sums(
    ...     np.array([[0.0, 0.0, 100.0]]), 1e-12)
    >>> (a / s[:, None]).round(12)  # the atom at e_1 is e^-100 below: it does not count
    array([[0., 0., 1.]])
    """

    def __init__(self, points, weights, options: FarFieldOptions | None = None):
        y, w = positive_atoms(points, weights, "far-field sums")
        self.options = FarFieldOptions() if options is None else options
        self.d = y.shape[1]
        self.mass = float(w.sum())
        # the tree is built at the first sums(), beside the queries' tree where there are
        # threads for both
        self._raw = (_as3(y), w)
        self._n = y.shape[0]

    def _set_tree(self, built):
        y3, w = self._raw
        idx, self._tree = _split_tree(built)
        y = np.ascontiguousarray(y3[idx])
        w = np.ascontiguousarray(w[idx])
        logw = np.log(w)
        t = self._tree
        self._atoms = Atoms(y, np.ascontiguousarray(y.T), w, logw,
                            _node_logsum(t.lo, t.hi, t.child, logw), float(logw.max()),
                            float(logw.max() - logw.min()))
        self._leaves = int(np.count_nonzero(t.child < 0))
        self._raw = None

    def build(self) -> "FarField":
        """Build the atoms' tree now (:meth:`sums` does it when needed); returns self."""
        if self._raw is not None:
            self._set_tree(_build(self._raw[0], self.options.leaf_size))
        return self

    def _trees(self, q3, threads):
        """The queries' tree (idx, Tree), and the atoms' tree if not built yet (side by
        side)."""
        leaf = self.options.leaf_size
        if self._raw is None or threads < 2:
            self.build()
            return _split_tree(_build(q3, leaf))
        atoms = _pool(threads).submit(_build, self._raw[0], leaf)
        qtree = _build(q3, leaf)
        self._set_tree(atoms.result())
        return _split_tree(qtree)

    def _walk(self, qtree, qlam, qmax, tol, threads):
        """The pairs of :func:`_traverse`; with threads, the walks from query subtrees (about
        ``walks_per_thread`` per thread) side by side, their pairs concatenated."""
        o = self.options
        wp = WalkParams(math.log(0.5 * o.drop_share * tol / self.mass),
                        math.log(0.5 * o.drop_share * tol / self._leaves),
                        o.expansion_share * tol, float(o.u_max), float(o.cost_term),
                        int(o.max_set), bool(o.lookahead))
        args = (qtree, qlam, qmax, self._tree, self._atoms.logW, wp)
        starts = ([0] if threads < 2 else
                  _query_cut(qtree.lo, qtree.hi, qtree.child, o.walks_per_thread * threads))
        if len(starts) == 1:
            return _traverse(*args)
        parts = list(_pool(threads).map(lambda Q: _traverse(*args, Q), starts))
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                sum(p[2] for p in parts))

    @property
    def n(self) -> int:
        """Atoms of positive weight."""
        return self._n

    def sums(self, q, tol: float):
        r"""Normalizer and first moment at the queries, each to 0.45 tol of the normalizer.

        Parameters
        ----------
        q : (m, d) the query vectors :math:`\beta B^\top x` (any length)
        tol : float in (0, 1)

        Returns
        -------
        s : (m,) :math:`e^{-\mathrm{shift}}\sum_j w_j e^{\langle q, y_j\rangle}` (to 0.45 tol)
        a : (m, d) the same with :math:`y_j` in the sum
        shift : (m,) the exponent taken out
        stats : dict: node pairs ``pairs_expanded``, ``pairs_direct`` and ``pairs_dropped``;
            ``direct_runs`` (the direct pairs merged into runs of consecutive atoms);
            ``direct_terms`` (exact terms summed) and ``expansion_terms`` ((atoms + queries)
            x index-set size, summed over the expansions)
        """
        q = np.asarray(q, dtype=np.float64)
        if q.ndim != 2 or q.shape[1] != self.d:
            raise ValueError(f"q must be (m, {self.d}); got {q.shape}")
        if not 0.0 < tol < 1.0:
            raise ValueError(f"tol must lie in (0, 1); got {tol}")
        m = q.shape[0]
        stats = dict(pairs_expanded=0, pairs_direct=0, direct_runs=0, pairs_dropped=0,
                     direct_terms=0, expansion_terms=0)
        if m == 0 or self.n == 0:
            return np.zeros(m), np.zeros((m, self.d)), np.zeros(m), stats
        q3 = _as3(q)
        threads = get_num_threads()
        qidx, qtree = self._trees(q3, threads)
        qlo, qhi, qchild = qtree.lo, qtree.hi, qtree.child
        qs = np.ascontiguousarray(q3[qidx])
        lam = np.empty(m)
        o = self.options
        _lower_bounds(qs, qtree, self._atoms, self._tree, int(o.lower_bound_visits),
                      float(o.shared_bound_radius), lam)
        qlam = _node_min(qlo, qhi, qchild, lam)
        qmax = _node_max_norm(qlo, qhi, qchild, qs)
        exp_pairs, dir_pairs, dropped = self._walk(qtree, qlam, qmax, tol, threads)
        run_q, run_lo, run_hi, run_start, run_nodes = _runs(dir_pairs, self._tree.lo,
                                                            self._tree.hi)
        runs = Runs(np.stack((run_lo, run_hi), axis=1), run_start, run_nodes)
        # a direct entry is (query node, run, 0)
        direct = np.stack((run_q, np.arange(run_q.size), np.zeros(run_q.size, np.int64)),
                          axis=1)
        pairs = np.concatenate((exp_pairs, direct))
        expand = np.zeros(pairs.shape[0], dtype=np.bool_)
        expand[:exp_pairs.shape[0]] = True
        task = _tasks(qlo, qhi, qchild, compiled_sizes().chunk)[pairs[:, 0]]
        big = task < 0
        T = np.full(m, -np.inf)
        S = np.zeros(m)
        A = np.zeros((m, 3))
        eps = o.expansion_share * tol
        common = (qs, qtree, self._atoms, self._tree, runs, eps, Sums(T, S, A))
        work = _run_big(pairs[big], expand[big], *common)
        order = np.argsort(task[~big], kind="stable")
        small, small_expand, small_task = pairs[~big][order], expand[~big][order], task[~big][order]
        start = np.flatnonzero(np.r_[True, small_task[1:] != small_task[:-1], True]) \
            if small_task.size else np.zeros(1, dtype=np.int64)
        per_task = np.zeros((max(start.size - 1, 0), 2), dtype=np.int64)
        _run_small(4 * get_num_threads(), start.astype(np.int64), small, small_expand, *common,
                   per_task)
        stats = dict(pairs_expanded=int(expand.sum()), pairs_direct=int(dir_pairs.shape[0]),
                     direct_runs=int(run_q.size),
                     pairs_dropped=int(dropped),
                     direct_terms=int(work[0] + per_task[:, 0].sum()),
                     expansion_terms=int(work[1] + per_task[:, 1].sum()))
        s, a, shift = np.empty(m), np.empty((m, 3)), np.empty(m)
        s[qidx], a[qidx], shift[qidx] = S, A, T
        return s, a[:, :self.d], shift, stats
