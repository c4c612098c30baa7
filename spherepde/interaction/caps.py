r"""Exact attention sums restricted to the cap that carries them (the harmonic kernel's
fallback at low temperature).

For a query x write :math:`q = B^\top x`, :math:`\kappa = \beta|q|`, :math:`n = q/|q|`; on
S^1 or S^2 the terms of SA/USA over atoms :math:`y_j` (unit vectors, weights
:math:`w_j > 0`, :math:`|w| = \sum_j w_j`) are :math:`e^{\ell_j}`,
:math:`\ell_j = \kappa\langle n, y_j\rangle + \log w_j`. Let :math:`T = \max_j \ell_j`.
Every atom outside the cap

.. math:: C = \{y : \kappa\langle n, y\rangle \ge T + \log\tfrac{\mathrm{tol}}{2|w|}\}

has :math:`e^{\ell_j} < w_j e^{T}\,\mathrm{tol}/(2|w|)`, so all of them carry at most
:math:`\delta = \tfrac{\mathrm{tol}}{2}e^{T}`, at most tol/2 of the sum :math:`s_C` over C
(the largest term is in C). With :math:`a = \sum_j e^{\ell_j}y_j` and :math:`|y_j| = 1` the
dropped part of a is also at most δ, hence

.. math:: \Big|V\frac{a}{s} - V\frac{a_C}{s_C}\Big| \le \|V\|_2\,\frac{2\delta}{s_C}
          \le \|V\|_2\,\mathrm{tol} \quad (\mathrm{SA}), \qquad
          |V a - V a_C| \le \|V\|_2\,\frac{\mathrm{tol}}{2}\,s \quad (\mathrm{USA}),

the USA error relative to the query's own :math:`\|V\|_2\,s`, the scale of the harmonic
kernel's bound. The bound is a priori and holds for every measure; a lower bound of T in
place of T only widens C. The cost is the number of atoms in C: a band of width about
:math:`\tau/\kappa`, :math:`\tau = \log(2|w|/(w\,\mathrm{tol}))`, on the side of the
measure that faces n, small when the kernel is sharp.

The atoms are sorted once into bands of colatitude (S^2; one band on S^1) and by longitude
inside each band. A query first finds its nearest atom, :math:`\max_j\langle n, y_j\rangle`,
by branch and bound: bands in order of colatitude distance, each scanned outward in
longitude from n while an upper bound of :math:`\langle n, y\rangle` over the band at that
longitude offset beats the best so far (only atoms about as near as the nearest are read).
Its logit is a lower bound of T, which fixes C. The query then visits the bands that meet C
and, in each, the longitudes of C's bounding box (two binary searches): C's *cover*, over
which it takes T and the sums with the fused kernel's loop
(:mod:`spherepde.interaction.fused`). Atoms of the cover outside C add exact terms only.
"""
from __future__ import annotations

import math
from typing import Final

import numpy as np
from numba import njit, prange

from .fused import _row3
from .numerics import FASTMATH_REDUCE as _REDUCE

__all__ = ["CapSums", "full_sums"]

#: Slack in the exponent shift and in the cap's angles against round-off: it only adds
#: atoms (exact terms) or rescales all terms by the same e^{-1e-9}. Compile-time (read by
#: the numba searches): Final.
_SLACK: Final = 1e-9


@njit(cache=True, fastmath=_REDUCE)
def _range_max(y0, y1, y2, logw, lo, hi, n0, n1, n2, k):
    """max_j <n, y_j> and max_j k <n, y_j> + log w_j over j in [lo, hi)."""
    top = logit = -np.inf
    for j in range(lo, hi):
        c = n0 * y0[j] + n1 * y1[j] + n2 * y2[j]
        top = max(top, c)
        logit = max(logit, k * c + logw[j])
    return top, logit


@njit(cache=True)
def _search(phi, lo, hi, value):
    """First index in [lo, hi) with phi >= value (phi sorted there)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if phi[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _cover(theta_n, phi_n, alpha, phi, start, d, ranges):
    """Index ranges [ranges[r, 0], ranges[r, 1]) of the atoms in the bands and longitudes
    that cover the cap of angular radius alpha around (theta_n, phi_n); returns how many.
    ranges: (2 nb, 2)."""
    two_pi = 2.0 * np.pi
    nb = start.shape[0] - 1
    h = np.pi / nb
    alpha = alpha + _SLACK
    if d == 3:
        lo_t, hi_t = theta_n - alpha, theta_n + alpha
        b_lo = max(0, int(lo_t / h)) if lo_t > 0 else 0
        b_hi = min(nb - 1, int(hi_t / h))
        if lo_t <= 0.0 or hi_t >= np.pi:
            dphi = np.pi  # the cap holds a pole: every longitude
        else:
            # the widest longitude span of a cap of radius alpha at colatitude theta_n
            dphi = np.arcsin(min(1.0, np.sin(alpha) / np.sin(theta_n))) + _SLACK
    else:
        b_lo, b_hi = 0, 0
        dphi = alpha
    r = 0
    for b in range(b_lo, b_hi + 1):
        first, last = start[b], start[b + 1]
        if first == last:
            continue
        if dphi >= np.pi:
            ranges[r, 0], ranges[r, 1] = first, last
            r += 1
            continue
        lo, hi = phi_n - dphi, phi_n + dphi
        if lo < 0.0:  # [lo + 2 pi, 2 pi) and [0, hi]
            ranges[r, 0], ranges[r, 1] = _search(phi, first, last, lo + two_pi), last
            ranges[r + 1, 0], ranges[r + 1, 1] = first, _search(phi, first, last, hi)
            r += 2
        elif hi > two_pi:  # [lo, 2 pi) and [0, hi - 2 pi]
            ranges[r, 0], ranges[r, 1] = _search(phi, first, last, lo), last
            ranges[r + 1, 0], ranges[r + 1, 1] = first, _search(phi, first, last, hi - two_pi)
            r += 2
        else:
            ranges[r, 0] = _search(phi, first, last, lo)
            ranges[r, 1] = _search(phi, first, last, hi)
            r += 1
    return r


@njit(cache=True)
def _band_bound(ct, st, theta_a, theta_b, cos_d):
    """max over colatitudes theta in [theta_a, theta_b] of <n, y(theta, phi_n + d)> =
    cos(theta) cos(theta_n) + sin(theta) sin(theta_n) cos(d), for ct, st = cos, sin theta_n:
    a sinusoid in theta, largest at an end or at its crest. Non-increasing in |d|."""
    A, B = ct, st * cos_d
    top = max(A * np.cos(theta_a) + B * np.sin(theta_a), A * np.cos(theta_b) + B * np.sin(theta_b))
    crest = np.arctan2(B, A)
    if theta_a <= crest <= theta_b:
        top = np.sqrt(A * A + B * B)
    return top


@njit(cache=True)
def _nearest(theta_n, phi_n, n0, n1, n2, phi, start, y0, y1, y2, logw):
    """max_j <n, y_j> and log w of that atom, by branch and bound over the bands (nearest
    colatitude first; a band is skipped once its colatitude distance to n exceeds the best
    angle) and, in each band, outward in longitude from phi_n until :func:`_band_bound`
    falls below the best: only atoms about as near as the nearest one are read."""
    two_pi = 2.0 * np.pi
    nb = start.shape[0] - 1
    h = np.pi / nb
    ct, st = np.cos(theta_n), np.sin(theta_n)
    best, best_lw = -np.inf, 0.0
    b_mid = min(nb - 1, int(theta_n / h))
    lo_b, hi_b = b_mid, b_mid  # bands [lo_b, hi_b] done after the first pass
    b = b_mid
    while True:
        first, last = start[b], start[b + 1]
        cnt = last - first
        if cnt > 0:
            ta, tb = b * h, (b + 1) * h
            p = _search(phi, first, last, phi_n)
            for side in range(2):
                for t in range(cnt):
                    if side == 0:  # eastward from phi_n
                        j = p + t
                        if j >= last:
                            j -= cnt
                        dphi = phi[j] - phi_n
                    else:  # westward
                        j = p - 1 - t
                        if j < first:
                            j += cnt
                        dphi = phi_n - phi[j]
                    if dphi < 0.0:
                        dphi += two_pi
                    if dphi > np.pi:
                        break  # the other side's scan covers it
                    if _band_bound(ct, st, ta, tb, np.cos(dphi)) + _SLACK < best:
                        break
                    c = n0 * y0[j] + n1 * y1[j] + n2 * y2[j]
                    if c > best:
                        best, best_lw = c, logw[j]
        # the next band: the nearer in colatitude of lo_b - 1 and hi_b + 1
        d_lo = theta_n - lo_b * h if lo_b > 0 else np.inf
        d_hi = (hi_b + 1) * h - theta_n if hi_b < nb - 1 else np.inf
        dist = min(d_lo, d_hi)
        if dist == np.inf or np.cos(min(np.pi, max(0.0, dist))) + _SLACK < best:
            break
        if d_lo <= d_hi:
            lo_b -= 1
            b = lo_b
        else:
            hi_b += 1
            b = hi_b
    return best, best_lw


@njit(parallel=True, cache=True)
def _cap_sums(nx, kappa, log_rel, yT, logw, phi, start, d, s_out, a_out, shift_out, count_out):
    """Per query i (module docstring): find max_j <n_i, y_j> (:func:`_nearest`); then the
    cap C_i outside which the terms add up to at most
    e^{log_rel} times the largest (log_rel = log(tol / (2 |w|))); then, over the cover of C_i,
    the largest logit T_i and the sums of e^{kappa_i <n_i, y_j> + log w_j - T_i} (1, y_j)."""
    two_pi = 2.0 * np.pi
    nb = start.shape[0] - 1
    y0, y1, y2 = yT[0], yT[1], yT[2]
    for i in prange(nx.shape[0]):
        ranges = np.empty((2 * nb + 2, 2), dtype=np.int64)
        k = kappa[i]
        n0, n1 = nx[i, 0], nx[i, 1]
        n2 = nx[i, 2] if d == 3 else 0.0
        phi_n = np.arctan2(n1, n0)
        if phi_n < 0:
            phi_n += two_pi
        theta_n = np.arccos(min(1.0, max(-1.0, n2))) if d == 3 else 0.5 * np.pi
        top, lw = _nearest(theta_n, phi_n, n0, n1, n2, phi, start, y0, y1, y2, logw)
        logit = k * top + lw  # a lower bound of the largest logit T
        # outside C = {k <n, y> >= logit + log_rel} the terms add up to at most tol/2 times
        # the term e^logit of the nearest atom (which is in C)
        alpha_c = np.pi
        if k > 0:
            c = (logit + log_rel) / k
            if c > -1.0:
                alpha_c = np.arccos(min(1.0, c))
        # the largest logit over C's cover is the largest of all: one outside C is below
        # tol/2 times the one found above
        r = _cover(theta_n, phi_n, alpha_c, phi, start, d, ranges)
        shift = -np.inf
        for q in range(r):
            _, g = _range_max(y0, y1, y2, logw, ranges[q, 0], ranges[q, 1], n0, n1, n2, k)
            shift = max(shift, g)
        shift += _SLACK
        s = a0 = a1 = a2 = 0.0
        count = 0
        for q in range(r):
            lo, hi = ranges[q, 0], ranges[q, 1]
            count += hi - lo
            # the fused kernel's loop, with the atoms as keys and as values
            ya, yb, yc = y0[lo:hi], y1[lo:hi], y2[lo:hi]
            ds, d0, d1, d2 = _row3(k * n0, k * n1, k * n2, ya, yb, yc, logw[lo:hi], ya, yb, yc,
                                   shift)
            s += ds
            a0 += d0
            a1 += d1
            a2 += d2
        s_out[i] = s
        shift_out[i] = shift
        count_out[i] = count
        a_out[i, 0] = a0
        a_out[i, 1] = a1
        if d == 3:
            a_out[i, 2] = a2


@njit(parallel=True, cache=True)
def _all_sums(nx, kappa, yT, logw, s_out, a_out, shift_out):
    """The full sums with the exact largest logit as the shift: one pass for the maximum,
    one fused pass (terms below e^-708 of the largest are dropped, far below any tol)."""
    y0, y1, y2 = yT[0], yT[1], yT[2]
    n = y0.shape[0]
    for i in prange(nx.shape[0]):
        k = kappa[i]
        n0, n1, n2 = nx[i, 0], nx[i, 1], nx[i, 2]
        _, shift = _range_max(y0, y1, y2, logw, 0, n, n0, n1, n2, k)
        shift += _SLACK
        s, a0, a1, a2 = _row3(k * n0, k * n1, k * n2, y0, y1, y2, logw, y0, y1, y2, shift)
        s_out[i] = s
        shift_out[i] = shift
        a_out[i, 0] = a0
        a_out[i, 1] = a1
        a_out[i, 2] = a2


def full_sums(points, weights, n, kappa):
    r"""The sums of :meth:`CapSums.sums` over all atoms, without sorting them: for a few
    queries, cheaper than the sort (two passes over the atoms per query, the fused
    kernel's fixed-shift loop with the exact largest logit as the shift).

    Parameters
    ----------
    points : (N, d) unit vectors; weights : (N,) non-negative
    n : (m, d) unit vectors; kappa : (m,) non-negative

    Returns
    -------
    s : (m,), a : (m, d), shift : (m,) as in :meth:`CapSums.sums` (C = every atom)
    """
    y = np.asarray(points, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    d = y.shape[1]
    m = n.shape[0]
    yT = np.zeros((3, y.shape[0]))
    yT[:d] = y.T
    with np.errstate(divide="ignore"):
        logw = np.log(w)  # weight 0 -> -inf: a term e^-inf = 0
    nx = np.zeros((m, 3))
    nx[:, :d] = n
    s, a, shift = np.zeros(m), np.zeros((m, 3)), np.zeros(m)
    _all_sums(nx, np.ascontiguousarray(kappa, dtype=np.float64), yT, logw, s, a, shift)
    return s, a[:, :d], shift


@njit(parallel=True, cache=True)
def _band_longitude_key(y, nb, key):
    """key_j = 8 band_j + phi_j: band of colatitude (nb equal bands; 0 on S^1), longitude
    phi_j in [0, 2 pi) < 8."""
    h = np.pi / nb
    for j in prange(y.shape[0]):
        phi = np.arctan2(y[j, 1], y[j, 0])
        if phi < 0:
            phi += 2.0 * np.pi
        b = 0
        if y.shape[1] == 3:
            b = min(nb - 1, int(np.arccos(min(1.0, max(-1.0, y[j, 2]))) / h))
        key[j] = 8.0 * b + phi


@njit(parallel=True, cache=True)
def _gather(y, w, key, order, yT, phi, logw, band):
    """The atoms in key order: yT (3, n), longitudes read back from the sorted keys (so
    non-decreasing inside each band), log-weights and bands."""
    for i in prange(order.shape[0]):
        j = order[i]
        for a in range(y.shape[1]):
            yT[a, i] = y[j, a]
        b = int(key[j] / 8.0)
        band[i] = b
        phi[i] = key[j] - 8.0 * b
        logw[i] = np.log(w[j])


def positive_atoms(points, weights, what: str):
    """The atoms of positive weight of a measure on S^1 or S^2, as float64 arrays (n, d) and
    (n,), after checking their shapes and that the weights are finite and non-negative
    (``what`` names the caller in the error)."""
    y = np.asarray(points, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if y.ndim != 2 or y.shape[1] not in (2, 3) or w.shape != y.shape[:1]:
        raise ValueError(f"points must be (n, 2) or (n, 3) and weights (n,); got {y.shape} "
                         f"and {w.shape}")
    bad = ~(np.isfinite(w) & (w >= 0))
    if np.any(bad):
        raise ValueError(f"{what} need finite non-negative weights; {int(bad.sum())} of "
                         f"{w.size} are negative, NaN or infinite")
    if not np.all(w > 0):
        keep = w > 0
        y, w = y[keep], w[keep]
    return y, w


class CapSums:
    r"""The atoms of a measure on S^1 or S^2, sorted for exact sums over caps.

    Parameters
    ----------
    points : (n, d) unit vectors, d = 2 or 3
    weights : (n,) non-negative (atoms of weight 0 are dropped)

    Examples
    --------
    >>> import numpy as np
    >>> from spherepde.interaction.caps import CapSums
    >>> y = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    >>> caps = CapSums(y, np.array([0.5, 0.5]))
    >>> s, a, shift, count = caps.sums(np.array([[0.0, 0.0, 1.0]]), np.array([100.0]), 1e-12)
    >>> (a / s[:, None]).round(12), count  # e_1 weighs e^-100 relative: no trace in a / s
    (array([[0., 0., 1.]]), array([2]))
    """

    def __init__(self, points, weights):
        y, w = positive_atoms(points, weights, "cap sums")
        self.d = y.shape[1]
        self.mass = float(w.sum())
        n = y.shape[0]
        # about sqrt(n)/4 bands on S^2: thousands of atoms per band at n = 10^6, so that the
        # two binary searches per band cost little against the atoms summed
        self.bands = int(min(2048, max(1, math.isqrt(n) // 4))) if self.d == 3 else 1
        y = np.ascontiguousarray(y)
        key = np.empty(n)
        _band_longitude_key(y, self.bands, key)
        # one float key (band, then longitude): argsort is ~8x faster than lexsort at 10^6;
        # its rounding (< 2^-38 rad, keys below 2^14) is far inside the covers' slack
        order = np.argsort(key)
        self._yT = np.zeros((3, n))  # row 2 stays 0 on S^1, read by the loops times n_2 = 0
        self._phi = np.empty(n)
        self._logw = np.empty(n)
        band = np.empty(n, dtype=np.int64)
        _gather(y, w, key, order, self._yT, self._phi, self._logw, band)
        self._start = np.searchsorted(band, np.arange(self.bands + 1)).astype(np.int64)

    @property
    def n(self) -> int:
        """Atoms of positive weight."""
        return self._yT.shape[1]

    def sums(self, n, kappa, tol: float):
        r"""Normalizer and first moment of the kernel at every query, to tol/2 of the
        normalizer.

        Parameters
        ----------
        n : (m, d) unit vectors (the directions :math:`B^\top x/|B^\top x|`)
        kappa : (m,) non-negative (:math:`\beta|B^\top x|`)
        tol : float in (0, 1)

        Returns
        -------
        s : (m,) :math:`e^{-\mathrm{shift}}\sum_{j\in C} w_j e^{\kappa\langle n, y_j\rangle}`
        a : (m, d) the same with :math:`y_j` in the sum
        shift : (m,) the exponent taken out (the largest logit T, plus 1e-9)
        count : (m,) atoms summed (the cost)

        Over the full measure the dropped parts of s and a are at most tol/2 times s
        (module docstring).
        """
        n = np.ascontiguousarray(n, dtype=np.float64)
        kappa = np.ascontiguousarray(kappa, dtype=np.float64)
        if n.ndim != 2 or n.shape[1] != self.d or kappa.shape != n.shape[:1]:
            raise ValueError(f"n must be (m, {self.d}) and kappa (m,); got {n.shape} and "
                             f"{kappa.shape}")
        if not 0.0 < tol < 1.0:
            raise ValueError(f"tol must lie in (0, 1); got {tol}")
        m = n.shape[0]
        s, a, shift = np.zeros(m), np.zeros((m, self.d)), np.zeros(m)
        count = np.zeros(m, dtype=np.int64)
        if m == 0 or self.n == 0:
            return s, a, shift, count
        _cap_sums(n, kappa, math.log(0.5 * tol / self.mass), self._yT,
                  self._logw, self._phi, self._start, self.d, s, a, shift, count)
        return s, a, shift, count
