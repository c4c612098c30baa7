r"""Exact searches for the c-transform and the truncated kernel: a ball tree with a linear
model of the potential in each node.

Both searches look, for each query y, at the function :math:`k \mapsto c(x_k, y) - f_k` over
the points x_k of the tree: its minimum (the c-transform :math:`f^c(y)`) or the points where it
is below a threshold (the kept pairs of the truncated kernel). Writing
:math:`h_k = f_k - |x_k|^2`, the chordal cost gives

.. math:: |x_k - y|^2 - f_k = |y|^2 - h_k - 2\langle x_k, y\rangle .

Each node stores a cone (centre direction z, half-angle ρ, radii r_min ≤ |x_k| ≤ r_max) and a
fit :math:`h_k \le \alpha + \langle\beta, x_k\rangle + e` (least squares, e the largest
residual), so that for every point of the node

.. math:: |x_k - y|^2 - f_k \ge |y|^2 - \alpha - e - \max_{x \in \text{cone}} \langle x,
          2y + \beta\rangle,

and the maximum over the cone is closed form. Near the optimum :math:`2y + \beta` points along
z (first-order optimality), so the slack of this bound is quadratic in the node's size; a
KD-tree over lifted points :math:`(x_k, \sqrt{M - f_k})` (power-diagram lifting) has a slack
linear in it, times the transport distance, which is what made it visit a large part of the
cloud for every query. The geodesic cost :math:`h(|x-y|^2) \ge |x-y|^2` uses the same bound
and exact costs at the leaves.

Every pruning decision allows for round-off (a relative margin of 1e-12), and the reported
values are exact costs of the points found, so :math:`f^c(y_j) + f_k \le c(x_k, y_j)` holds to
the round-off of one cost.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Final

import numba as nb
import numpy as np

__all__ = ["ConeTree"]

#: Points per leaf.
LEAF = 16
#: Relative round-off margin of every pruning test (compile-time: read by the numba bound).
_MARGIN: Final = 1e-12

#: The fitted tree as one argument of the numba searches (numba takes a namedtuple of arrays
#: as one argument): the points P in tree order and the potential f on them, the nodes'
#: ranges [lo, hi) and children (-1 at leaves), cones (axis z, cos and sin of the half-angle
#: cr, sr, radii rmin, rmax) and the fit of h = f - |x|^2 (alpha, beta, largest residual e).
_Fitted = namedtuple("_Fitted", "P f lo hi left right z cr sr rmin rmax alpha beta e")


@nb.njit(cache=True)
def _build(points, leaf):
    """Balanced binary tree by median splits along the widest coordinate.

    Returns perm (points[perm] is in leaf order; a node is a contiguous range) and per node
    lo, hi, left, right (-1 at leaves), in creation order (parents before children)."""
    n, d = points.shape
    perm = np.arange(n)
    cap = 4 * (n // max(leaf // 2, 1) + 2)
    lo = np.empty(cap, np.int64)
    hi = np.empty(cap, np.int64)
    left = np.full(cap, -1, np.int64)
    right = np.full(cap, -1, np.int64)
    stack = np.empty(256, np.int64)
    lo[0], hi[0] = 0, n
    count = 1
    stack[0] = 0
    top = 1
    while top > 0:
        top -= 1
        k = stack[top]
        a, b = lo[k], hi[k]
        if b - a <= leaf:
            continue
        best, spread = 0, -1.0
        for t in range(d):
            mn, mx = np.inf, -np.inf
            for p in range(a, b):
                v = points[perm[p], t]
                mn = min(mn, v)
                mx = max(mx, v)
            if mx - mn > spread:
                best, spread = t, mx - mn
        sub = perm[a:b].copy()
        vals = np.empty(b - a)
        for p in range(b - a):
            vals[p] = points[sub[p], best]
        order = np.argsort(vals)
        for p in range(b - a):
            perm[a + p] = sub[order[p]]
        mid = (a + b) // 2
        lo[count], hi[count] = a, mid
        lo[count + 1], hi[count + 1] = mid, b
        left[k], right[k] = count, count + 1
        stack[top], stack[top + 1] = count, count + 1
        top += 2
        count += 2
    return perm, lo[:count], hi[:count], left[:count], right[:count]


@nb.njit(cache=True)
def _angle(u, v):
    """Angle between unit vectors, accurate for small and large angles: 2 atan2(|u-v|, |u+v|)."""
    s1 = 0.0
    s2 = 0.0
    for t in range(u.size):
        s1 += (u[t] - v[t]) ** 2
        s2 += (u[t] + v[t]) ** 2
    return 2.0 * np.arctan2(np.sqrt(s1), np.sqrt(s2))


# serial: cheap next to the sweeps; a parallel kernel costs seconds more to compile
@nb.njit(cache=True)
def _cones(P, lo, hi):
    """Per node: centre direction z, half-angle rho, r_min, r_max of the points P[lo:hi]."""
    nn = lo.size
    d = P.shape[1]
    z = np.zeros((nn, d))
    rho = np.empty(nn)
    rmin = np.empty(nn)
    rmax = np.empty(nn)
    for k in range(nn):
        s = np.zeros(d)
        r0, r1 = np.inf, 0.0
        for p in range(lo[k], hi[k]):
            r = np.sqrt(np.sum(P[p] ** 2))
            r0 = min(r0, r)
            r1 = max(r1, r)
            if r > 0:
                s += P[p] / r
        ns = np.sqrt(np.sum(s ** 2))
        ang = 0.0
        if r0 <= 0.0 or ns <= 0.0:
            ang = np.pi  # a point at the origin (or no direction): no cone
        else:
            s /= ns
            for p in range(lo[k], hi[k]):
                r = np.sqrt(np.sum(P[p] ** 2))
                ang = max(ang, _angle(P[p] / r, s))
        z[k] = s
        rho[k] = min(ang * (1 + 1e-10) + 1e-14, np.pi)
        rmin[k] = r0 * (1 - 1e-12)
        rmax[k] = r1 * (1 + 1e-12)
    return z, rho, rmin, rmax


@nb.njit(parallel=True, cache=True)
def _fit(P, h, lo, hi):
    """Per node the least-squares fit h ~ alpha + <beta, x> and its largest residual e."""
    nn = lo.size
    d = P.shape[1]
    alpha = np.empty(nn)
    beta = np.zeros((nn, d))
    e = np.empty(nn)
    for k in nb.prange(nn):
        a, b = lo[k], hi[k]
        m = b - a
        xm = np.zeros(d)
        hm = 0.0
        for p in range(a, b):
            xm += P[p]
            hm += h[p]
        xm /= m
        hm /= m
        A = np.zeros((d, d))
        r = np.zeros(d)
        for p in range(a, b):
            dx = P[p] - xm
            dh = h[p] - hm
            for s in range(d):
                r[s] += dx[s] * dh
                for t in range(d):
                    A[s, t] += dx[s] * dx[t]
        tr = 0.0
        for s in range(d):
            tr += A[s, s]
        # Ridge: any beta gives a valid bound (e is measured after), it only has to exist.
        for s in range(d):
            A[s, s] += 1e-9 * tr + 1e-300
        if m > 1 and tr > 0:
            bk = np.linalg.solve(A, r)
        else:
            bk = np.zeros(d)
        ak = hm - np.dot(bk, xm)
        ek = -np.inf
        for p in range(a, b):
            ek = max(ek, h[p] - ak - np.dot(bk, P[p]))
        alpha[k] = ak
        beta[k] = bk
        e[k] = ek
    return alpha, beta, e


@nb.njit(cache=True)
def _bound(k, y, y2, tree):
    """Lower bound of |x - y|^2 - f over node k, less a round-off margin.

    max <x, w> over the cone (axis z, half-angle rho, r_min <= |x| <= r_max) is
    |w| r cos(theta - rho) with theta the angle of w to z (r_max, or r_min when the cosine is
    negative; |w| r_max when theta <= rho). cos and sin of theta come from the components of w
    along and across z, which keeps them accurate at small angles without trigonometry."""
    z, cr, sr, rmin, rmax = tree.z, tree.cr, tree.sr, tree.rmin, tree.rmax
    alpha, beta, e = tree.alpha, tree.beta, tree.e
    d = y.size
    wn2 = 0.0
    wz = 0.0
    for t in range(d):
        wt = 2.0 * y[t] + beta[k, t]
        wn2 += wt * wt
        wz += wt * z[k, t]
    wn = np.sqrt(wn2)
    M = 0.0
    if wn > 0.0:
        perp = 0.0
        for t in range(d):
            q = 2.0 * y[t] + beta[k, t] - wz * z[k, t]
            perp += q * q
        c = wz / wn
        s = np.sqrt(perp) / wn
        if s * cr[k] - c * sr[k] <= 0.0:  # sin(theta - rho) <= 0: w inside the cone
            M = wn * rmax[k]
        else:
            cd = c * cr[k] + s * sr[k]
            M = wn * cd * (rmax[k] if cd >= 0.0 else rmin[k])
    lb = y2 - alpha[k] - e[k] - M
    return lb - _MARGIN * (1.0 + y2 + abs(alpha[k]) + abs(e[k]) + abs(M))


@nb.njit(cache=True)
def _sqnorm(v):
    """|v|^2 of a query, which both tree searches need for their node bounds."""
    out = 0.0
    for t in range(v.size):
        out += v[t] * v[t]
    return out


@nb.njit(cache=True)
def _cost(P, p, y, geodesic):
    s = 0.0
    for t in range(y.size):
        s += (P[p, t] - y[t]) ** 2
    if not geodesic:
        return s
    if s <= 2.0:
        th = 2.0 * np.arcsin(min(np.sqrt(s) * 0.5, 1.0))
    else:
        q = 0.0
        for t in range(y.size):
            q += (P[p, t] + y[t]) ** 2
        th = np.pi - 2.0 * np.arcsin(min(np.sqrt(q) * 0.5, 1.0))
    return th * th


@nb.njit(parallel=True, cache=True)
def _cmin(tree, Y, Yb, perp2, init, geodesic):
    """min over the points of c(x_p, Y[j]) - f_p and its argmin (tree order), for each j."""
    P, f, lo, hi, left, right = tree.P, tree.f, tree.lo, tree.hi, tree.left, tree.right
    m = Y.shape[0]
    val = np.empty(m)
    arg = np.empty(m, np.int64)
    for j in nb.prange(m):
        y = Y[j]
        yb = Yb[j]  # the bounds see the query projected onto the span of the points
        y2 = _sqnorm(yb)
        best, bk = np.inf, -1
        if init[j] >= 0:
            bk = init[j]
            best = _cost(P, bk, y, geodesic) - f[bk]
        stack = np.empty(256, np.int64)
        stack[0] = 0
        top = 1
        while top > 0:
            top -= 1
            k = stack[top]
            if left[k] < 0:
                for p in range(lo[k], hi[k]):
                    v = _cost(P, p, y, geodesic) - f[p]
                    if v < best:
                        best, bk = v, p
                continue
            c0, c1 = left[k], right[k]
            b0 = _bound(c0, yb, y2, tree) + perp2[j]
            b1 = _bound(c1, yb, y2, tree) + perp2[j]
            if b0 > b1:
                c0, c1, b0, b1 = c1, c0, b1, b0
            # The more promising child is pushed last, so it is searched first.
            if b1 < best:
                stack[top] = c1
                top += 1
            if b0 < best:
                stack[top] = c0
                top += 1
        val[j] = best
        arg[j] = bk
    return val, arg


@nb.njit(parallel=True, cache=True)
def _within(tree, Y, Yb, perp2, thr, geodesic, indptr, out, fill, perm):
    """Points with c - f <= thr[j]: counts[j] (fill False, written to indptr[j + 1]) or their
    indices in the caller's order, perm[k], into out[indptr[j]:indptr[j + 1]] (fill True)."""
    P, f, lo, hi, left, right = tree.P, tree.f, tree.lo, tree.hi, tree.left, tree.right
    m = Y.shape[0]
    for j in nb.prange(m):
        y = Y[j]
        yb = Yb[j]  # the bounds see the query projected onto the span of the points
        y2 = _sqnorm(yb)
        stack = np.empty(256, np.int64)
        stack[0] = 0
        top = 1
        cnt = 0
        pos = indptr[j] if fill else 0
        while top > 0:
            top -= 1
            k = stack[top]
            if left[k] < 0:
                for p in range(lo[k], hi[k]):
                    if _cost(P, p, y, geodesic) - f[p] <= thr[j]:
                        if fill:
                            out[pos + cnt] = perm[p]
                        cnt += 1
                continue
            for c in (left[k], right[k]):
                if _bound(c, yb, y2, tree) + perp2[j] <= thr[j]:
                    stack[top] = c
                    top += 1
        if not fill:
            indptr[j + 1] = cnt


class ConeTree:
    r"""A ball tree over points x: (K, d) answering, for a potential f: (K,),

    * :meth:`cmin`: :math:`\min_k c(x_k, y_j) - f_k` and its argmin (the c-transform);
    * :meth:`within`: all k with :math:`c(x_k, y_j) - f_k \le t_j` (the truncated kernel),

    exactly, for the chordal cost :math:`|x - y|^2` (any points, e.g. barycentres inside the
    ball) or the geodesic cost (unit vectors). Build once per point set; :meth:`fit` once per
    potential (O(K log K)).
    """

    def __init__(self, points, leaf: int = LEAF):
        points = np.ascontiguousarray(points, dtype=np.float64)
        if points.ndim != 2 or len(points) == 0:
            raise ValueError(f"points must be a non-empty (K, d) array; got shape {points.shape}")
        self.perm, self.lo, self.hi, self.left, self.right = _build(points, int(leaf))
        self.P = np.ascontiguousarray(points[self.perm])
        self.z, rho, self.rmin, self.rmax = _cones(self.P, self.lo, self.hi)
        self.cos_rho, self.sin_rho = np.cos(rho), np.sin(rho)
        # Points in a proper subspace (a measure on a great circle): |x - y|^2 =
        # |x - y_par|^2 + |y_perp|^2, and the cone bounds are only tight for queries in the
        # span, so queries are split. (Left out of the span, a query's w = 2y + beta leans out
        # of every node's cone and the bound's slack becomes linear in the node size.)
        _, sv, vt = np.linalg.svd(self.P[:: max(1, len(self.P) // 4096)], full_matrices=False)
        rank = int(np.sum(sv > 1e-10 * sv[0])) if sv[0] > 0 else 0
        self.span = vt[:rank].T if 0 < rank < points.shape[1] else None
        if self.span is not None:
            off = self.P - (self.P @ self.span) @ self.span.T
            if np.max(np.abs(off)) > 1e-13:
                self.span = None  # the sample's span misses points: no split
        self._f = None

    @property
    def n(self):
        return len(self.perm)

    def fit(self, f):
        """Fit the node models to the potential f: (K,) (in the caller's point order)."""
        f = np.asarray(f, dtype=np.float64)
        if f.shape != (self.n,):
            raise ValueError(f"potential must have shape ({self.n},); got {f.shape}")
        fp = np.ascontiguousarray(f[self.perm])
        h = fp - np.einsum("kd,kd->k", self.P, self.P)
        self._f = fp
        self._model = _fit(self.P, h, self.lo, self.hi)
        return self

    def _args(self):
        if self._f is None:
            raise RuntimeError("call fit(potential) first")
        return _Fitted(self.P, self._f, self.lo, self.hi, self.left, self.right, self.z,
                       self.cos_rho, self.sin_rho, self.rmin, self.rmax, *self._model)

    def _split(self, y):
        """Queries projected onto the span of the points, and |y_perp|^2 (less round-off)."""
        if self.span is None:
            return y, np.zeros(len(y))
        yb = np.ascontiguousarray((y @ self.span) @ self.span.T)
        perp2 = np.einsum("kd,kd->k", y - yb, y - yb)
        return yb, perp2 * (1 - 1e-12)

    def cmin(self, y, cost="chordal", init=None):
        """(min_k c(x_k, y_j) - f_k, argmin k) for y: (m, d) -> ((m,), (m,) indices)."""
        y = np.ascontiguousarray(y, dtype=np.float64)
        if init is None:
            init = np.full(len(y), -1, np.int64)
        else:
            # Caller's indices -> tree order.
            inv = np.empty(self.n, np.int64)
            inv[self.perm] = np.arange(self.n)
            init = np.asarray(init, dtype=np.int64)
            init = np.where(init >= 0, inv[init], -1)
        val, arg = _cmin(self._args(), y, *self._split(y), init, cost == "geodesic")
        return val, self.perm[arg]

    def within(self, y, thr, cost="chordal"):
        """CSR lists (indptr (m+1,), idx) of the k with c(x_k, y_j) - f_k <= thr[j]; idx is
        int32 when the tree has fewer than 2^31 points (the lists are the bulk of the
        truncated kernel's memory)."""
        y = np.ascontiguousarray(y, dtype=np.float64)
        thr = np.ascontiguousarray(np.broadcast_to(thr, (len(y),)), dtype=np.float64)
        geo = cost == "geodesic"
        indptr = np.zeros(len(y) + 1, np.int64)
        yb, perp2 = self._split(y)
        dtype = np.int32 if self.n < 2**31 else np.int64
        _within(self._args(), y, yb, perp2, thr, geo, indptr, np.empty(0, dtype), False, self.perm)
        np.cumsum(indptr, out=indptr)
        out = np.empty(indptr[-1], dtype)
        _within(self._args(), y, yb, perp2, thr, geo, indptr, out, True, self.perm)
        return indptr, out
