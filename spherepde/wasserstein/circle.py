r"""W2 (chordal) between a measure on S^{d-1} and a measure on a great circle.

For a unit vector x and a unit vector y in a plane E through 0, with p = P_E x (|p| <= 1),

.. math:: |x - y|^2 = |p - y|^2 + (1 - |p|^2) = 2 - 2\langle p, y\rangle,

so the problem is planar: the projected source points p_i = r_i (cos alpha_i, sin alpha_i) of
the unit disk against atoms y_j = (cos theta_j, sin theta_j) on the unit circle, with the cost
c_ij = |p_i - y_j|^2 + h_i, h_i = |x_i - p_i|^2. Both sides can be sorted by angle, and the
solver only ever walks those two sorted lists:

1. **A plan.** The north-west corner coupling of the sources, in some order, with the atoms in
   angular order, at the best cyclic shift of the atoms' mass coordinate (a scan and a
   golden-section search, as Delon, Salomon & Sobolevski do for costs on the circle). Its
   cost, exact, is an upper bound. It starts with the sources in their own angular order
   (the angular quantile coupling).
2. **A dual.** On the plan's support (a path) complementary slackness phi_i + psi_j = c_ij
   fixes potentials; from that psi, phi = psi^c on every source, then psi' = phi^c on every
   atom, both exact (branch and bound over the other side sorted by angle, every candidate
   evaluated from the points). The dual value sum_i a_i phi_i + sum_j b_j psi'_j is a lower
   bound on W2^2, whatever psi was.
3. **Alternation.** The sources are reordered by where the dual sends them (the argmax atom
   of phi = psi^c, moved by one Newton step of the angle), which gives the next plan, and its
   potentials the next dual. A few rounds close the bracket to ~1e-4 on W2 at a few thousand
   points, and to ~1e-6 at 10^5 (tests compare it with the exact LP).

Why not a semi-discrete Newton on the arcs (Laguerre cells of the sources on the circle):
its cells are thin lenses that open and close as potentials move, so damped Newton needs
hundreds of line-searched steps from any cheap start, each an O(n log n) upper envelope;
the alternation above costs a few O(n log n) passes. Only the chordal cost has this
structure; the geodesic cost goes to the other solvers.

References
----------
Delon, Salomon & Sobolevski, SIAM J. Appl. Math. 70 (2010) (optimal transport on the circle).
Kitagawa, Mérigot & Thibert, J. Eur. Math. Soc. 21 (2019) (semi-discrete Newton).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Final

import numba as nb
import numpy as np

from .result import bracket_result, reject_options

__all__ = ["w2_circle", "great_circle_plane", "CIRCLE_PLANE_ATOL"]

TWO_PI: Final = 2.0 * np.pi  # also read by the numba kernels (compile-time)
#: A side counts as lying on a great circle when every point is within this distance of a
#: plane through 0 (round-off of a projection and normalisation is ~1e-16).
CIRCLE_PLANE_ATOL = 1e-9
#: Rounds that move neither bound by more than this fraction of the bracket, STALLED_ROUNDS in
#: a row, end the alternation (after one such round it can still move: 2.3e-3 -> 1.9e-3 later
#: at 500 sources against 80 atoms, tests/test_wasserstein_circle.py's cases).
STAGNATION, STALLED_ROUNDS = 1e-3, 2
#: Radius bands of the sources in the search tree of the exact c-transform.
_BANDS = 8


def great_circle_plane(points, atol: float = CIRCLE_PLANE_ATOL):
    """Orthonormal basis (d, 2) of a plane through 0 holding every point, or None.

    points: (m, d) on the unit sphere. The plane is spanned by the two leading right singular
    vectors; it holds the points when each is within ``atol`` of it.
    """
    y = np.asarray(points, dtype=np.float64)
    if y.ndim != 2 or y.shape[1] < 2 or y.shape[0] < 2:
        return None
    # The Gram matrix is d x d: cheap for 10^6 points, and its eigenvectors span the plane.
    w, V = np.linalg.eigh(y.T @ y)
    U = V[:, ::-1][:, :2]
    off = y - (y @ U) @ U.T
    if np.max(np.einsum("md,md->m", off, off)) > atol**2:
        return None
    return U


def _check_plane(plane, d):
    U = np.asarray(plane, dtype=np.float64)
    if U.shape != (d, 2):
        raise ValueError(f"plane must be a (d, 2) = ({d}, 2) basis of the great circle's plane; "
                         f"got shape {U.shape}")
    # Orthonormalise: a basis that is only nearly orthonormal would distort every cost.
    Q, R = np.linalg.qr(U)
    if abs(R[0, 0] * R[1, 1]) < 1e-8:
        raise ValueError("plane's two columns are (nearly) parallel; "
                         "pass an orthonormal (d, 2) basis")
    return Q


# --------------------------------------------------------------------------- exact c-transforms
@nb.njit(cache=True)
def _arc_dist(t, lo, hi):
    """Angular distance from t to the arc [lo, hi] (lo <= hi, both in [0, 2 pi))."""
    if lo <= t <= hi:
        return 0.0
    return min((lo - t) % TWO_PI, (t - hi) % TWO_PI, np.pi)


@nb.njit(cache=True, parallel=True)
def _max_sinusoid(beta, s, v, t, q, init, leaf):
    r"""For every query (t_j, q_j), q_j in [0, 1]: the exact maximum over the items k of

    .. math:: 2 q_j s_k \cos(t_j - \beta_k) + v_k,

    and its argmax. beta: (K,) sorted angles in [0, 2 pi), s: (K,) in [0, 1], v: (K,);
    t, q: (m,); init: (m,) a candidate item per query (its value starts the search).
    Branch and bound over blocks of consecutive items: with d the angular distance from t to
    a block's arc of angles, every item of the block has
    2 q s cos(t - beta) + v <= (1 - q) max v + q max(v + 2 s) - 2 q min(s) (1 - cos d).
    The maximum returned is evaluated from an item, not from a bound.
    """
    n = beta.shape[0]
    nblocks = (n + leaf - 1) // leaf
    size = 1
    depth = 0
    while size < nblocks:
        size *= 2
        depth += 1
    lo = np.full(2 * size, np.inf)
    hi = np.full(2 * size, -np.inf)
    vmax = np.full(2 * size, -np.inf)
    gmax = np.full(2 * size, -np.inf)
    smin = np.full(2 * size, np.inf)
    for b in range(nblocks):
        node = size + b
        for i in range(b * leaf, min(n, (b + 1) * leaf)):
            lo[node] = min(lo[node], beta[i])
            hi[node] = max(hi[node], beta[i])
            vmax[node] = max(vmax[node], v[i])
            gmax[node] = max(gmax[node], v[i] + 2.0 * s[i])
            smin[node] = min(smin[node], s[i])
    for node in range(size - 1, 0, -1):
        lo[node] = min(lo[2 * node], lo[2 * node + 1])
        hi[node] = max(hi[2 * node], hi[2 * node + 1])
        vmax[node] = max(vmax[2 * node], vmax[2 * node + 1])
        gmax[node] = max(gmax[2 * node], gmax[2 * node + 1])
        smin[node] = min(smin[2 * node], smin[2 * node + 1])
    m = t.shape[0]
    best = np.empty(m)
    arg = np.empty(m, dtype=np.int64)
    for j in nb.prange(m):
        tj, qj = t[j], q[j]
        i0 = init[j]
        bv = 2.0 * qj * s[i0] * np.cos(tj - beta[i0]) + v[i0]
        bi = i0
        stack = np.empty(2 * depth + 4, dtype=np.int64)
        stack[0] = 1
        top = 1
        while top > 0:
            top -= 1
            node = stack[top]
            if vmax[node] == -np.inf:
                continue
            d = _arc_dist(tj, lo[node], hi[node])
            bound = ((1.0 - qj) * vmax[node] + qj * gmax[node]
                     - 2.0 * qj * smin[node] * (1.0 - np.cos(d)))
            # a relative margin keeps blocks whose bound is within round-off of the best
            if bound <= bv - 1e-13 * (1.0 + abs(bv)):
                continue
            if node >= size:
                b = node - size
                for i in range(b * leaf, min(n, (b + 1) * leaf)):
                    val = 2.0 * qj * s[i] * np.cos(tj - beta[i]) + v[i]
                    if val > bv:
                        bv = val
                        bi = i
            else:
                dl = _arc_dist(tj, lo[2 * node], hi[2 * node])
                dr = _arc_dist(tj, lo[2 * node + 1], hi[2 * node + 1])
                # the nearer child is pushed last, so it is searched first
                if dl <= dr:
                    stack[top] = 2 * node + 1
                    stack[top + 1] = 2 * node
                else:
                    stack[top] = 2 * node
                    stack[top + 1] = 2 * node + 1
                top += 2
        best[j] = bv
        arg[j] = bi
    return best, arg


# --------------------------------------------------------------------------- couplings
@nb.njit(cache=True)
def _start_atom(b, c):
    """The atom at mass coordinate c in [0, 1) of atoms with masses b, and its mass past c."""
    acc = 0.0
    j = 0
    while j < b.shape[0] - 1 and acc + b[j] <= c:
        acc += b[j]
        j += 1
    return j, acc + b[j] - c


@nb.njit(cache=True)
def _northwest(order, a, P, h, b, Y, c):
    """Cost of the north-west corner coupling of the sources taken in ``order`` (masses a,
    projected points P (n, 2), h = |x - p|^2) with the atoms in angular order (masses b,
    points Y (m, 2)), the atoms' mass coordinate starting at c in [0, 1).

    Returns (cost, first atom of each source). The cost of a pair is |p - y|^2 + h."""
    n, m = order.shape[0], b.shape[0]
    j, rj = _start_atom(b, c)
    k = 0
    i = order[0]
    ri = a[i]
    first = np.empty(n, dtype=np.int64)
    first[i] = j
    total = 0.0
    guard = 0
    while k < n and guard < 2 * (n + m) + 8:
        guard += 1
        tmass = min(ri, rj)
        if tmass > 0.0:
            d0 = P[i, 0] - Y[j, 0]
            d1 = P[i, 1] - Y[j, 1]
            total += tmass * (d0 * d0 + d1 * d1 + h[i])
        ri -= tmass
        rj -= tmass
        if ri <= rj:
            k += 1
            if k < n:
                i = order[k]
                ri = a[i]
                first[i] = j
        else:
            j = (j + 1) % m
            rj = b[j]
    return total, first


@nb.njit(cache=True)
def _pair_cost(P, h, Y, i, j):
    d0, d1 = P[i, 0] - Y[j, 0], P[i, 1] - Y[j, 1]
    return d0 * d0 + d1 * d1 + h[i]


@nb.njit(cache=True)
def _staircase_potentials(order, a, P, h, b, Y, c):
    """Potentials with phi_i + psi_j = c_ij on the support of the north-west coupling (the
    complementary slackness of that plan; the support is a path, so they are fixed up to a
    constant, and the cycle's last step is left out). Where a source and an atom run out
    together (always, for equal masses) the path may turn either way; the two choices give
    psi_{j+1} - psi_j = c(i, j+1) - c(i, j) or c(i', j+1) - c(i', j), and their mean is the
    symmetric one. Returns (phi, psi, owner): owner_j is the source whose pair fixed psi_j."""
    n, m = order.shape[0], b.shape[0]
    j, rj = _start_atom(b, c)
    psi = np.empty(m)
    phi = np.zeros(n)
    owner = np.zeros(m, dtype=np.int64)
    seen = np.zeros(m, dtype=np.bool_)
    k = 0
    i = order[0]
    ri = a[i]
    psi[j] = _pair_cost(P, h, Y, i, j)
    owner[j] = i
    seen[j] = True
    guard = 0
    while k < n and guard < 2 * (n + m) + 8:
        guard += 1
        tmass = min(ri, rj)
        ri -= tmass
        rj -= tmass
        tiny = 1e-12 * (a[i] + b[j])
        if ri <= tiny and rj <= tiny and k + 1 < n:
            i2, j2 = order[k + 1], (j + 1) % m
            if not seen[j2]:
                psi[j2] = psi[j] + 0.5 * (_pair_cost(P, h, Y, i, j2) - _pair_cost(P, h, Y, i, j)
                                          + _pair_cost(P, h, Y, i2, j2)
                                          - _pair_cost(P, h, Y, i2, j))
                owner[j2] = i2
                seen[j2] = True
            k += 1
            i, j = i2, j2
            ri, rj = a[i], b[j]
            phi[i] = _pair_cost(P, h, Y, i, j) - psi[j]
        elif ri <= rj:
            k += 1
            if k < n:
                i = order[k]
                ri = a[i]
                phi[i] = _pair_cost(P, h, Y, i, j) - psi[j]
        else:
            j = (j + 1) % m
            rj = b[j]
            if not seen[j]:
                psi[j] = _pair_cost(P, h, Y, i, j) - phi[i]
                owner[j] = i
                seen[j] = True
    for jj in range(m):
        if not seen[jj]:
            psi[jj] = -np.inf
    return phi, psi, owner


def _shift_guess(order, keys, a, th, b):
    """The atoms' mass offset that lines the sources (in ``order``, at angles ``keys``) up
    with the atoms at those angles: the circular mean of F(key_i) - A_i, F the atoms'
    cumulative mass, A_i the sources' (at the middle of source i)."""
    cb = np.concatenate([[0.0], np.cumsum(b)])
    F = cb[np.searchsorted(th, keys[order])]
    A = np.cumsum(a[order]) - 0.5 * a[order]
    z = np.exp(2j * np.pi * (F - A))
    return float(np.angle(np.sum(a[order] * z)) / (2 * np.pi)) % 1.0


def _best_shift(order, a, P, h, b, Y, guess, width, scan=16):
    """The cheapest north-west coupling over the atoms' mass offset c in guess +- width: a
    scan, then a golden-section search around its best point. Returns (cost, c, first)."""

    def f(c):
        return _northwest(order, a, P, h, b, Y, c % 1.0)[0]

    step = 2.0 * width / scan
    grid = guess - width + step * np.arange(scan + 1)
    vals = np.array([f(c) for c in grid])
    k = int(np.argmin(vals))
    lo, hi = grid[k] - step, grid[k] + step
    g = 0.5 * (np.sqrt(5.0) - 1.0)
    x1, x2 = hi - g * (hi - lo), lo + g * (hi - lo)
    f1, f2 = f(x1), f(x2)
    for _ in range(25):
        if f1 <= f2:
            hi, x2, f2 = x2, x1, f1
            x1 = hi - g * (hi - lo)
            f1 = f(x1)
        else:
            lo, x1, f1 = x1, x2, f2
            x2 = lo + g * (hi - lo)
            f2 = f(x2)
    best = min((vals[k], grid[k] % 1.0), (f1, x1 % 1.0), (f2, x2 % 1.0))
    # The cost is smooth between offsets where a source boundary meets an atom boundary and
    # often least at one (always, for equal masses): try the atom boundaries next to the
    # first source's start.
    cb = np.concatenate([[0.0], np.cumsum(b)])
    j = int(np.searchsorted(cb, best[1]))
    for jj in range(max(j - 2, 0), min(j + 3, len(cb))):
        c = cb[jj] % 1.0
        best = min(best, (f(c), c))
    cost, first = _northwest(order, a, P, h, b, Y, best[1])
    return cost, best[1], first


# --------------------------------------------------------------------------- the solver
@dataclass
class _Planar:
    """The planar problem of :func:`w2_circle`, rotated so that angle 0 falls in the widest
    gap between the atoms: atoms at angles ``th: (m,)`` (sorted) with masses ``bj: (m,)`` and
    unit vectors ``Yr: (m, 2)``; sources projected to ``pr: (n, 2)``, of radius ``r: (n,)``,
    angle ``alpha: (n,)`` and squared distance ``h: (n,)`` to the plane; ``dy`` how far the
    given atoms lie from the circle; ``U: (d, 2)`` the plane's basis."""

    th: np.ndarray
    bj: np.ndarray
    Yr: np.ndarray
    pr: np.ndarray
    h: np.ndarray
    r: np.ndarray
    alpha: np.ndarray
    dy: float
    U: np.ndarray


def _circle_plane(y, plane, d):
    """The basis (d, 2) of the plane that holds the circle side y (fitted when plane is None);
    ValueError when y is not on it."""
    if plane is None:
        U = great_circle_plane(y)
        if U is None:
            raise ValueError("method='circle' needs the second measure on a great circle (all "
                             "its points in a plane through 0); pass plane= or another method")
    else:
        U = _check_plane(plane, d)
    off = y - (y @ U) @ U.T
    err = float(np.sqrt(np.max(np.einsum("md,md->m", off, off))))
    if err > CIRCLE_PLANE_ATOL:
        raise ValueError(f"the circle side is not on the great circle of plane: a point lies "
                         f"{err:.1e} away from it (> {CIRCLE_PLANE_ATOL:.0e}); pass the plane "
                         "that holds it, or use method='multiscale'")
    return U


def _planar(x, y, b, U):
    """The :class:`_Planar` problem of sources x (n, d) and atoms y (m, d), masses b."""
    m = len(b)
    Y2 = y @ U
    theta = np.arctan2(Y2[:, 1], Y2[:, 0]) % TWO_PI
    ths = np.sort(theta)
    if m > 1:
        gaps = np.diff(np.concatenate([ths, [ths[0] + TWO_PI]]))
        k = int(np.argmax(gaps))
        cut = ths[k] + 0.5 * gaps[k]
    else:
        cut = ths[0] + np.pi
    theta = (theta - cut) % TWO_PI
    ob = np.argsort(theta, kind="stable")
    th, bj = theta[ob], b[ob]
    Yr = np.stack([np.cos(th), np.sin(th)], axis=1)
    # The bounds are exact for atoms exactly on the circle (Yr); the given ones are within dy
    # of them, and |c(x, y) - c(x, y')| <= 4 |y - y'| widens the bracket by that.
    ybar = np.stack([np.cos(theta + cut), np.sin(theta + cut)], axis=1) @ U.T
    dy = float(np.sqrt(np.max(np.einsum("md,md->m", y - ybar, y - ybar))))
    p = x @ U
    xperp = x - p @ U.T
    h = np.einsum("nd,nd->n", xperp, xperp)
    cs, sn = np.cos(cut), np.sin(cut)
    pr = np.ascontiguousarray(np.stack([cs * p[:, 0] + sn * p[:, 1],
                                        -sn * p[:, 0] + cs * p[:, 1]], 1))
    r = np.minimum(np.hypot(pr[:, 0], pr[:, 1]), 1.0)
    alpha = np.arctan2(pr[:, 1], pr[:, 0]) % TWO_PI
    return _Planar(th, bj, Yr, pr, h, r, alpha, dy, U)


def _phi_transform(P, mx, owner, atom, rank, ot_):
    """psi2 = phi^c on the atoms, exact, for phi = c - max of the sinusoids ``mx`` (n,): it
    is >= psi and raises the dual value. ``rank``/``ot_``: the sources' order in radius bands
    sorted by angle, whose blocks hold similar radii (their bounds then prune well);
    ``owner``/``atom``: where the last transform sent each, the searches' starts."""
    w = -mx  # c(x_i, y) - phi_i = -(2 r cos(t - alpha) + w_i)
    init = rank[owner]
    init[atom] = rank
    mx2, _ = _max_sinusoid(P.alpha[ot_], P.r[ot_], w[ot_], P.th, np.ones(len(P.th)), init, 16)
    return -mx2


def _dual_targets(P, psi, atom):
    """Where the dual psi sends each source: its best atom ``atom`` (n,), refined by one
    Newton step of t -> 2 r cos(t - alpha) + psi(t), kept within a quarter of the spacing to
    the atom's neighbours. Returns the angles (n,)."""
    th, r, alpha = P.th, P.r, P.alpha
    ta = th[atom]
    m = len(th)
    if m > 2:
        nxt, prv = np.roll(np.arange(m), -1), np.roll(np.arange(m), 1)
        span = (th[nxt] - th[prv]) % TWO_PI
        slope = (psi[nxt] - psi[prv]) / np.where(span > 0, span, 1.0)
        d1 = -2.0 * r * np.sin(ta - alpha) + slope[atom]
        d2 = 2.0 * r * np.cos(ta - alpha)
        step = np.where(d2 > 0, d1 / np.where(d2 > 0, d2, 1.0), 0.0)
        quarter = 0.25 * span[atom]
        ta = ta + np.clip(step, -quarter, quarter)
    return ta


def w2_circle(x, a, y, b, cost="chordal", plane=None, tol=1e-3, rounds=6, max_seconds=None,
              verbose=False, **unused):
    r"""W2 between x (n, d) with weights a and atoms y (m, d) on a great circle, bracketed.

    Parameters
    ----------
    x : (n, d), a : (n,)
        The source: points of S^{d-1} and their masses (summing to 1).
    y : (m, d), b : (m,)
        The circle side: points of S^{d-1} in the plane spanned by ``plane``.
    cost : "chordal"
        Only the chordal cost reduces to the planar problem.
    plane : (d, 2), optional
        Basis of the circle's plane (default: fitted to y, see :func:`great_circle_plane`).
    tol : float
        Target bracket width on W2: the alternation stops once the width is below tol/10.
    rounds : int
        Plan/dual alternations at most.
    max_seconds : float, optional
        Time budget: no round starts that would, at the last round's cost, end after it (the
        first always runs: it gives the lower bound).

    The rounds also stop when :data:`STALLED_ROUNDS` in a row leave both bounds where they
    were (within :data:`STAGNATION` of the bracket): on spread clouds, whose many sources of
    small radius tie over long arcs, the alternation can settle on a bracket wider than tol,
    and further rounds of the same plan and dual cost time only. ``details["stopped"]`` then
    says why.

    Returns
    -------
    W2Result with method "circle": lower (dual value) <= W2 <= upper (a plan's cost).
    """
    reject_options(unused, "circle")
    if cost != "chordal":
        raise ValueError("method='circle' needs the chordal cost (|x - y|^2 = 2 - 2<P_E x, y> "
                         "reduces it to a planar problem); use method='multiscale' or 'exact' "
                         "for the geodesic cost")
    t0 = time.perf_counter()
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    n, d = x.shape
    m = len(b)
    U = _circle_plane(y, plane, d)
    P = _planar(x, y, b, U)
    timings = {}
    # ---- 1. the angular quantile coupling at its best shift
    oa = np.argsort(P.alpha, kind="stable")
    # the whole circle of offsets, coarsely, then around the best
    up_quantile, c_quantile, first = _best_shift(oa, a, P.pr, P.h, P.bj, P.Yr,
                                                 _shift_guess(oa, P.alpha, a, P.th, P.bj), 0.5, 32)
    timings["quantile"] = time.perf_counter() - t0
    # ---- 2. alternate plans and duals (:func:`_alternate`)
    state = _Alternation(oa, c_quantile, first, -np.inf, up_quantile)
    stopped = _alternate(P, a, state, tol, rounds, max_seconds, t0, verbose)
    timings["rounds"] = time.perf_counter() - t0 - timings["quantile"]
    lower = state.lower - 4.0 * P.dy
    upper = state.upper + 4.0 * P.dy
    details = {"n": n, "m": m, "rounds": len(state.history), "history": state.history,
               "upper_quantile": up_quantile, "upper_dual_order": state.up_dual,
               "atom_offset": P.dy, "seconds": time.perf_counter() - t0, "timings": timings,
               "plane": U}
    if stopped is not None:
        details["stopped"] = stopped
    return bracket_result(upper, lower, cost, "circle", details)


@dataclass
class _Alternation:
    """The state of :func:`w2_circle`'s plan/dual alternation: the sources' ``order`` (n,),
    ``shift`` and first ``atom`` (n,) of the next plan; the bracket on W2^2 so far
    (``lower``: the best dual value, ``upper``: the cheapest plan), the cheapest plan from a
    dual order ``up_dual``, and the bracket after each round, ``history``."""

    order: np.ndarray
    shift: float
    atom: np.ndarray
    lower: float
    upper: float
    up_dual: float = np.inf
    history: list = field(default_factory=list)

    def closed(self, tol: float) -> bool:
        """Whether the bracket on W2 is within tol/10."""
        return np.sqrt(max(self.upper, 0.0)) - np.sqrt(max(self.lower, 0.0)) <= 0.1 * tol


def _search_order(P):
    """The transform onto the atoms searches the sources in radius bands sorted by angle, so
    that the blocks of its search tree hold similar radii (their bounds then prune well).
    Returns that order ``ot_`` (n,) and each source's ``rank`` (n,) in it."""
    band = np.minimum((P.r * _BANDS).astype(np.int64), _BANDS - 1)
    ot_ = np.lexsort((P.alpha, band))
    rank = np.empty(len(ot_), dtype=np.int64)
    rank[ot_] = np.arange(len(ot_))
    return ot_, rank


def _round(P, a, state, search, tol):
    """One round: the plan -> its staircase potentials psi -> phi = psi^c, exact (then
    sum a phi + sum b psi is a certified dual value; psi' = phi^c, exact, raises it) -> the
    sources ordered by where phi sends them -> a new plan at its best shift. Updates the
    bracket of ``state``; returns the next plan's (order, shift, first atom), or None when
    the bracket closed before a new plan was needed."""
    ot_, rank = search
    _, psi, owner = _staircase_potentials(state.order, a, P.pr, P.h, P.bj, P.Yr, state.shift)
    mx, atom = _max_sinusoid(P.th, np.ones(len(P.th)), psi, P.alpha, P.r, state.atom, 16)
    phi = P.r**2 + 1.0 + P.h - mx  # c(x_i, y) - psi(y) = r^2 + 1 + h - (2 r cos(t - alpha) + psi)
    state.lower = max(state.lower, float(a @ phi) + float(P.bj @ psi))
    if not state.closed(tol):
        # psi2 = phi^c >= psi raises the dual value; it costs more than psi^c (sources of
        # small radius tie over long arcs), so only when the bracket asks for it
        psi = _phi_transform(P, mx, owner, atom, rank, ot_)
        state.lower = max(state.lower, float(a @ phi) + float(P.bj @ psi))
    if state.closed(tol):
        state.history.append((state.lower, state.upper))
        return None
    ta = _dual_targets(P, psi, atom)
    od = np.argsort(ta, kind="stable")
    # sorted by where the dual sends them, the sources line up with their atoms: a few
    # masses either side of the offset that says so is enough
    width = 4.0 * max(a.max(), P.bj.max()) + 1e-3
    plan_cost, c_dual, first_d = _best_shift(od, a, P.pr, P.h, P.bj, P.Yr,
                                             _shift_guess(od, ta % TWO_PI, a, P.th, P.bj), width)
    state.up_dual = min(state.up_dual, plan_cost)
    state.upper = min(state.upper, plan_cost)
    state.history.append((state.lower, state.upper))
    return od, c_dual, first_d


def _alternate(P, a, state, tol, rounds, max_seconds, t0, verbose):
    """Up to ``rounds`` rounds (:func:`_round`) until the bracket closes, the time budget
    would be passed, or STALLED_ROUNDS rounds in a row move neither bound. Returns why it
    stopped early (a sentence), or None."""
    search = _search_order(P)
    # the cost of the last round: read only from the second round on, once one has run
    stopped, stalled, last_round = None, 0, 0.0
    for it in range(rounds):
        start = time.perf_counter()
        if it > 0 and max_seconds is not None and \
                start - t0 + last_round > float(max_seconds):
            stopped = (f"time budget: another round (~{last_round:.1f} s) would pass "
                       f"max_seconds = {float(max_seconds):g}")
            break
        before = (state.lower, state.upper)
        following = _round(P, a, state, search, tol)
        if following is None:
            break
        if verbose:
            print(f"circle round {it}: W2^2 in [{state.lower:.10f}, {state.upper:.10f}]")
        last_round = time.perf_counter() - start
        if state.closed(tol):
            break
        if it > 0 and max(state.lower - before[0], before[1] - state.upper) <= STAGNATION * (
                before[1] - before[0]):
            stalled += 1
            if stalled == STALLED_ROUNDS:
                stopped = f"stagnated: rounds {it - STALLED_ROUNDS + 1}-{it} moved neither bound"
                break
        else:
            stalled = 0
        state.order, state.shift, state.atom = following
    return stopped
