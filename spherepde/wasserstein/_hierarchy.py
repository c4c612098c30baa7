"""Helpers shared by the hierarchical W2 solvers (multiscale, sparse, quantized).

Pruning the lightest points and widening a bracket by what that moves W2; the certified
lower bound from a potential by two exact c-transforms; a space-filling (Morton) order and
the north-west-corner coupling along it.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from .costs import c_transform


def _prune(x, a, tau):
    r"""The cloud without its lightest points, of total mass t <= tau, renormalized; and t.

    The pruned measure :math:`\mu' = \mu|_K / (1 - t)` is within
    :math:`W_2(\mu, \mu') \le \sqrt{D t}` of μ (D the cost's diameter): keep the kept mass
    in place and move the pruned mass t anywhere. So a bracket on :math:`W_2(\mu', \nu')`
    widened by these two distances (triangle inequality) is a bracket on :math:`W_2(\mu, \nu)`.
    """
    if tau <= 0:
        return x, a, 0.0
    order = np.argsort(a, kind="stable")
    k = int(np.searchsorted(np.cumsum(a[order]), tau, side="right"))
    if k == 0:
        return x, a, 0.0
    keep = np.sort(order[k:])
    t = float(a[order[:k]].sum())
    return x[keep], a[keep] / a[keep].sum(), t


def _widen(lower, upper, slack):
    """A bracket (lower, upper) on W2^2 between the pruned measures, widened into one between
    the original measures: each pruned side is within its share of ``slack`` of its original
    in W2 (:func:`_prune`; triangle inequality). -inf stays -inf (no lower bound yet)."""
    if lower > -np.inf:
        lower = max(np.sqrt(max(lower, 0.0)) - slack, 0.0) ** 2
    return lower, (np.sqrt(max(upper, 0.0)) + slack) ** 2


def _lower_bound(XF, YF, f, cost, hints=None, twice=True):
    """<a, f^cc> + <b, f^c> for a potential f on the points of the full level XF (weak
    duality); YF is the other cloud's full level. twice=False stops at <a, f> + <b, f^c>
    (also dual-feasible), for when the second transform is the expensive one. hints:
    (support between XF and YF, "x" or "y" the side of XF in it), whose best partners start
    the searches."""
    if not np.all(np.isfinite(f)):
        return -np.inf  # a diverged potential certifies nothing
    # The bound does not depend on the gauge f + s (the weights sum to 1); centring keeps
    # c - f at the precision of c.
    f = f - np.mean(f)
    other = None if hints is None else ("y" if hints[1] == "x" else "x")
    init = None if hints is None else hints[0].best_partner(other, f)
    g, _ = c_transform(XF.points, f, YF.points, cost, tree=XF.tree, init=init)
    if not twice:
        return float(XF.weights @ f + YF.weights @ g)
    init = None if hints is None else hints[0].best_partner(hints[1], g)
    f2, _ = c_transform(YF.points, g, XF.points, cost, tree=YF.tree, init=init)
    return float(XF.weights @ f2 + YF.weights @ g)


@nb.njit(cache=True)
def _morton_keys(points, bits):
    """Z-order (Morton) keys of points in [-1, 1]^d, ``bits`` bits per coordinate."""
    n, d = points.shape
    keys = np.zeros(n, np.int64)
    scale = (1 << bits) - 1
    for i in range(n):
        key = 0
        q = np.empty(d, np.int64)
        for t in range(d):
            q[t] = int(min(max((points[i, t] + 1.0) * 0.5, 0.0), 1.0) * scale)
        for bit in range(bits - 1, -1, -1):
            for t in range(d):
                key = (key << 1) | ((q[t] >> bit) & 1)
        keys[i] = key
    return keys


@nb.njit(cache=True)
def _northwest_pairs(r, c):
    """The north-west-corner coupling of r and c (same total, in the given orders): its
    pairs (rows, cols) and masses, at most len(r) + len(c) - 1 of them."""
    rows = np.empty(r.size + c.size, np.int64)
    cols = np.empty(r.size + c.size, np.int64)
    mass = np.empty(r.size + c.size)
    i, j, p = 0, 0, 0
    ri, cj = r[0], c[0]
    while i < r.size and j < c.size:
        t = min(ri, cj)
        rows[p], cols[p], mass[p] = i, j, t
        p += 1
        ri -= t
        cj -= t
        if ri <= cj:
            i += 1
            if i < r.size:
                ri = r[i]
        else:
            j += 1
            if j < c.size:
                cj = c[j]
    return rows[:p], cols[:p], mass[:p]
