r"""The attention field of a zonal measure: densities on S^{d-1} invariant under the rotations
that fix an axis e, for models of the same symmetry (docs/theory.md §6).

Write x = cos(θ) e + sin(θ) u and y = cos(θ') e + sin(θ') u' with u, u' unit vectors of e^⊥.
For B = b1 eeᵀ + b2 (I − eeᵀ) and V = v1 eeᵀ + v2 (I − eeᵀ) the score is
⟨x, By⟩ = b1 cosθ cosθ' + b2 sinθ sinθ' ⟨u, u'⟩, and the average over the (d−2)-sphere of
u' is exact:

.. math::
    m_0(z) = \langle e^{z\langle u, u'\rangle} \rangle_{u'} = \Gamma(\nu+1)(2/z)^\nu I_\nu(z)
           = {}_0F_1(;\nu+1; z^2/4), \qquad
    \langle e^{z\langle u, u'\rangle} u' \rangle_{u'} = m_0(z)\, r_\nu(z)\, u,

with ν = (d−3)/2 and r_ν = I_{ν+1}/I_ν. Only the θ-component of the velocity survives:

.. math::
    \dot\theta = \frac{\int K(\theta,\theta')\,[v_2 \cos\theta \sin\theta'\, r_\nu(z)
                 - v_1 \sin\theta \cos\theta']\, dM(\theta')}{\int K(\theta,\theta')\, dM(\theta')},
    \quad K = e^{\beta b_1 \cos\theta\cos\theta'} m_0(z),\ z = \beta b_2 \sin\theta \sin\theta',

dM the θ-marginal (mass) of the measure; USA drops the denominator. At β = ∞ the field is
local: θ̇ = −(a1 − a2) sinθ cosθ / sqrt(b1² cos²θ + b2² sin²θ), a_k = v_k b_k.

:func:`log_mean_exp` and :func:`mean_ratio` evaluate m_0 and r_ν in log form:
scipy.special.ive underflows at large order and small argument (ive(254.5, 10) = 0), where the
hypergeometric series is summed in log space instead.
"""
from __future__ import annotations

import numpy as np
from scipy import special

from .numerics import check_usa_overflow

__all__ = [
    "ChebyshevZonalField",
    "ZonalField",
    "kernel_tables",
    "axial_coefficients",
    "log_mean_exp",
    "mean_ratio",
    "zero_temperature_speed",
]

#: ive below this counts as underflowed (the log-space series takes over)
_IVE_TINY = 1e-250
#: relative size below which a series term no longer changes the sum
_SERIES_LOG_TOL = -40.0
#: kernel values and masses (relative) below this are flushed to zero (no subnormals in BLAS)
_FLUSH = 1e-290
#: relative asymmetry of B or V about the axis that counts as breaking the symmetry
AXIAL_RTOL = 1e-12


def _log_series(nu, q):
    r"""log 0F1(; ν+1; q) = log Σ_k q^k Γ(ν+1)/(k! Γ(ν+k+1)) for q >= 0, summed in log space
    (all terms positive: no cancellation), until the terms are past their peak and below
    e^-40 of the sum."""
    logq = np.log(np.where(q > 0, q, 1.0))
    logt = np.zeros_like(q)
    acc = np.zeros_like(q)
    k = 0
    while True:
        logt = logt + logq - np.log(k + 1.0) - np.log(nu + k + 1.0)
        logt = np.where(q > 0, logt, -np.inf)
        acc = np.logaddexp(acc, logt)
        k += 1
        past_peak = q < (k + 1.0) * (nu + k + 1.0)
        if np.all(past_peak & (logt - acc < _SERIES_LOG_TOL)):
            return acc


def log_mean_exp(nu: float, z) -> np.ndarray:
    r""":math:`\log m_0(z) = \log[\Gamma(\nu+1)(2/z)^\nu I_\nu(z)]`, the log of the mean of
    e^{z⟨u,u'⟩} over u' uniform on S^{2ν+1}; z: any shape, even in z; exact value 0 at z = 0.

    From ive where it is representable and the argument is not small against the order, from
    the positive hypergeometric series in log space elsewhere (no underflow at any order)."""
    z = np.abs(np.asarray(z, dtype=np.float64))
    out = np.empty_like(z)
    q = 0.25 * z * z
    with np.errstate(divide="ignore", invalid="ignore", under="ignore"):
        iv = special.ive(nu, z)
        big = (q > nu + 1.0) & (iv > _IVE_TINY)
        zb = z[big]
        out[big] = special.gammaln(nu + 1.0) + nu * np.log(2.0 / zb) + np.log(iv[big]) + zb
    out[~big] = _log_series(nu, q[~big])
    return out


def mean_ratio(nu: float, z, log_m0=None) -> np.ndarray:
    r""":math:`r_\nu(z) = I_{\nu+1}(z)/I_\nu(z)` (odd in z; 0 at z = 0), the mean of ⟨u, u'⟩
    under the weight e^{z⟨u,u'⟩}. ``log_m0``: :func:`log_mean_exp` (nu, z) if already known."""
    z = np.asarray(z, dtype=np.float64)
    a = np.abs(z)
    with np.errstate(divide="ignore", invalid="ignore", under="ignore"):
        i0, i1 = special.ive(nu, a), special.ive(nu + 1.0, a)
        ok = (i0 > _IVE_TINY) & (i1 > _IVE_TINY)
        r = np.where(ok, i1 / np.where(ok, i0, 1.0), 0.0)
    bad = ~ok & (a > 0)
    if np.any(bad):
        ab = a[bad]
        l0 = log_mean_exp(nu, ab) if log_m0 is None else np.asarray(log_m0)[bad]
        # I_{ν+1}/I_ν = (z / (2ν+2)) 0F1(;ν+2;z²/4) / 0F1(;ν+1;z²/4)
        r[bad] = np.exp(np.log(ab / (2.0 * nu + 2.0)) + log_mean_exp(nu + 1.0, ab) - l0)
    return np.sign(z) * r


def axial_coefficients(model, axis):
    """(b1, b2, v1, v2) of B = b1 eeᵀ + b2 (I − eeᵀ) and V = v1 eeᵀ + v2 (I − eeᵀ).

    Raises ValueError naming the matrix (B = QᵀK or V) that is not of that form, and by how
    much, when the model is not symmetric under the rotations fixing the axis."""
    e = np.asarray(axis, dtype=np.float64)
    d = model.d
    P = np.eye(d) - np.outer(e, e)
    out = []
    for name, M in (("B = Q^T K", model.B), ("V", model.V)):
        c1 = float(e @ M @ e)
        c2 = float(np.trace(P @ M) / (d - 1))
        ref = c1 * np.outer(e, e) + c2 * P
        scale = max(float(np.linalg.norm(M)), 1e-300)
        off = float(np.linalg.norm(M - ref)) / scale
        if off > AXIAL_RTOL:
            raise ValueError(
                f"the model is not axially symmetric about the axis: {name} differs from "
                f"{c1:.6g}·eeᵀ + {c2:.6g}·(I − eeᵀ) by {off:.2e} (relative Frobenius norm), "
                "so zonal densities do not stay zonal; use weights of that form (or another "
                "axis), or a solver without the symmetry (ParticleSolver, or on S^2 "
                "FiniteVolumeSolver/SpectralSolver)")
        out += [c1, c2]
    b1, b2, v1, v2 = out
    return b1, b2, v1, v2


def zero_temperature_speed(theta, b1, b2, v1, v2) -> np.ndarray:
    r"""θ̇ of the β = ∞ field :math:`P_x A x/|B^\top x|` at angles theta (any shape):
    −(a1 − a2) sinθ cosθ / sqrt(b1² cos²θ + b2² sin²θ), a1 = v1 b1, a2 = v2 b2."""
    c, s = np.cos(theta), np.sin(theta)
    return -(v1 * b1 - v2 * b2) * s * c / np.sqrt((b1 * c) ** 2 + (b2 * s) ** 2)


def kernel_tables(model, axis, targets, sources):
    r"""The three kernels of the module docstring between target and source angles, each row
    scaled by its largest value: ((3m, n) stacked [K, K cosθ', K sinθ' r_ν(z)] / max_row K,
    (m,) the log of each row's maximum). Entries below 1e-290 of their row are flushed to 0."""
    b1, b2, _, _ = axial_coefficients(model, axis)
    nu = 0.5 * (model.d - 3)
    t = np.asarray(targets, dtype=np.float64)[:, None]
    s = np.asarray(sources, dtype=np.float64)[None, :]
    z = model.beta * b2 * np.sin(t) * np.sin(s)
    lm0 = log_mean_exp(nu, z)
    logk = model.beta * b1 * np.cos(t) * np.cos(s) + lm0
    log_row_max = logk.max(axis=1)
    with np.errstate(under="ignore"):
        G = np.exp(logk - log_row_max[:, None])
    G[G < _FLUSH] = 0.0  # subnormals slow BLAS down tenfold; the rows' maxima are 1
    return np.concatenate([G, G * np.cos(s), G * (np.sin(s) * mean_ratio(nu, z, lm0))]), \
        log_row_max


class ZonalField:
    r"""θ̇ at target angles from the masses of a zonal measure at source angles (module
    docstring), at finite β: the kernels are tabulated once (targets × sources), each call is
    three matrix-vector products.

    Parameters
    ----------
    model : :class:`spherepde.Model` with finite beta
    axis : (d,) unit vector
    targets : (m,) angles where θ̇ is wanted
    sources : (n,) angles carrying the masses (the midpoint rule in θ')

    Memory is 3·m·n doubles; the tabulation costs m·n Bessel evaluations.
    """

    name = "table"

    def __init__(self, model, axis, targets, sources):
        if not np.isfinite(model.beta):
            raise ValueError("ZonalField is the finite-beta field; at beta = inf use "
                             "zero_temperature_speed (the field is local)")
        self._coefficients = axial_coefficients(model, axis)
        _, _, v1, v2 = self._coefficients
        self.normalized = model.normalized
        self.beta = model.beta
        t = np.asarray(targets, dtype=np.float64)
        self._table, self.log_row_max = kernel_tables(model, axis, t, sources)
        if not self.normalized:
            check_usa_overflow(float(self.log_row_max.max()), model.beta)
        self._ct, self._st = np.cos(t), np.sin(t)
        self._v1, self._v2 = v1, v2
        self._targets = t
        self._sources = np.asarray(sources, dtype=np.float64)
        self._model, self._axis = model, axis

    def speed(self, masses) -> np.ndarray:
        """θ̇ at the targets, (m,), from the source masses (n,) (their sum need not be 1)."""
        m = np.asarray(masses, dtype=np.float64)
        # masses below 1e-290 of the total change no field value beyond round-off, and as
        # subnormals (high d, near the poles) they slow the product down tenfold
        m = np.where(m < _FLUSH * max(float(m.sum()), 1e-300), 0.0, m)
        den, cos_part, ratio_part = self._sums(m)
        num = self._v2 * self._ct * ratio_part - self._v1 * self._st * cos_part
        if not self.normalized:
            return num * np.exp(self.log_row_max)
        tiny = den <= 1e-280 * max(float(m.sum()), 1e-300)
        if np.any(tiny):  # all the mass where the scaled kernel underflowed: redo in logs
            num, den = self._log_space_rows(np.flatnonzero(tiny), m, num, den)
        return num / den

    def _sums(self, m):
        """The three kernel sums at the targets, each scaled by exp(-log_row_max)."""
        return np.split(self._table @ m, 3)

    def _log_space_rows(self, rows, m, num, den):
        """Numerator and denominator of the rows whose kernel, scaled by its maximum, is zero
        wherever the mass is: rescaled by the row's largest kernel·mass instead."""
        log_k, ratio = self._log_rows(rows)
        t = self._targets[rows]
        with np.errstate(divide="ignore"):
            lw = log_k + np.log(m)[None, :]
        W = np.exp(lw - lw.max(axis=1, keepdims=True))
        num, den = num.copy(), den.copy()
        den[rows] = W.sum(axis=1)
        num[rows] = (self._v2 * np.cos(t) * np.sum(W * ratio, axis=1)
                     - self._v1 * np.sin(t) * np.sum(W * np.cos(self._sources), axis=1))
        return num, den

    def _log_rows(self, rows):
        """log K and sinθ' r_ν(z) of the target rows ``rows`` against every source, (len(rows),
        n) each. Rows are computed once and kept: once the mass has collapsed onto the poles at
        large β the same rows (those about the equator) underflow at every call, and their
        Bessel functions cost a hundred matrix-vector products each (d = 512, β = 10^4).
        What is kept stops growing at LOG_ROW_CACHE_BYTES; rows past it are recomputed."""
        cache = self.__dict__.setdefault("_log_row_cache", {})
        fresh = {}
        missing = [int(i) for i in rows if int(i) not in cache]
        if missing:
            b1, b2, _, _ = self._coefficients
            nu = 0.5 * (self._model.d - 3)
            t = self._targets[missing][:, None]
            s = self._sources[None, :]
            z = self.beta * b2 * np.sin(t) * np.sin(s)
            lm0 = log_mean_exp(nu, z)
            log_k = self.beta * b1 * np.cos(t) * np.cos(s) + lm0
            ratio = np.sin(s) * mean_ratio(nu, z, lm0)
            room = LOG_ROW_CACHE_BYTES // (16 * len(self._sources)) - len(cache)
            for j, i in enumerate(missing):
                (cache if j < room else fresh)[i] = (log_k[j], ratio[j])
        got = [cache.get(int(i)) or fresh[int(i)] for i in rows]
        return np.array([g[0] for g in got]), np.array([g[1] for g in got])


#: Memory the log-space rows of a ZonalField may keep between calls (two float64 rows each).
LOG_ROW_CACHE_BYTES = 256 * 2**20

#: Chebyshev field: nodes per bin, and the bin width times the kernel's rate β(|b1| + |b2|)
CHEBYSHEV_ORDER = 16
CHEBYSHEV_BIN_RATE = 4.0
#: Chebyshev field: bins at least (the kernel factors cos θ', sin θ' r_ν are smooth on [0, π])
CHEBYSHEV_MIN_BINS = 4


def chebyshev_bins(model, axis, order=CHEBYSHEV_ORDER, rate=CHEBYSHEV_BIN_RATE):
    """The number of equal bins of [0, π] on which :class:`ChebyshevZonalField` interpolates
    the kernels: width <= rate / (β(|b1| + |b2|)), at least :data:`CHEBYSHEV_MIN_BINS`."""
    b1, b2, _, _ = axial_coefficients(model, axis)
    k = model.beta * (abs(b1) + abs(b2))
    return max(CHEBYSHEV_MIN_BINS, int(np.ceil(np.pi * k / rate)))


def lagrange_stencils(theta, bins, order):
    """For angles theta (n,) in [0, π]: the node indices (n, order) of each angle's bin among
    ``bins`` equal bins of [0, π] with ``order`` Chebyshev points of the first kind each (the
    nodes of :func:`chebyshev_nodes`), and the Lagrange weights (n, order) of those nodes at
    the angle (barycentric form; exact 1 at a node)."""
    theta = np.asarray(theta, dtype=np.float64)
    width = np.pi / bins
    b = np.clip(np.floor(theta / width).astype(np.int64), 0, bins - 1)
    x = (theta - (b + 0.5) * width) / (0.5 * width)
    k = np.arange(order)
    xk = np.cos((2 * k + 1) * np.pi / (2 * order))
    wk = (-1.0) ** k * np.sin((2 * k + 1) * np.pi / (2 * order))
    diff = x[:, None] - xk[None, :]
    hit = diff == 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        q = wk / diff
        w = q / q.sum(axis=1, keepdims=True)
    rows = hit.any(axis=1)
    w[rows] = hit[rows].astype(np.float64)
    return b[:, None] * order + k[None, :], w


def chebyshev_nodes(bins, order):
    """The interpolation nodes (bins·order,) of :func:`lagrange_stencils`, bin by bin."""
    width = np.pi / bins
    xk = np.cos((2 * np.arange(order) + 1) * np.pi / (2 * order))
    return ((np.arange(bins)[:, None] + 0.5) * width + 0.5 * width * xk[None, :]).ravel()


class ChebyshevZonalField(ZonalField):
    r"""The field of :class:`ZonalField` through a separable expansion of its kernels: on
    equal bins of [0, π] of width H, each kernel is replaced by its tensor Chebyshev
    interpolant of order p in θ and θ',

    .. math:: K(\theta, \theta') \approx \sum_{a, b} L_a(\theta)\, K(\vartheta_a,
              \vartheta_b)\, L_b(\theta'),

    L the Lagrange polynomials of the bin's p nodes ϑ. A call anterpolates the masses to the
    nodes (W_b = Σ_j L_b(θ'_j) m_j, O(n p)), multiplies by the nodes' kernel table (N × N,
    N = p·bins, three tables) and interpolates the sums to the targets (O(m p)). Memory
    3N² + 2(m + n)p doubles: independent of the cell count.

    The kernel's exponent βb1 cosθcosθ' + log m0(βb2 sinθ sinθ') changes at rate at most
    k = β(|b1| + |b2|) in either angle (|d log m0/dz| = |r_ν| <= 1), so on bins of width
    H = 4/k each kernel is e^{linear} times a factor varying by e^{O(1)}, and the order-16
    interpolant reproduces the tabulated field to 1.5e-14 of its largest value (d = 3 … 512,
    β <= 64, SA and USA; 6e-13 at H = 8/k, 4e-8 at order 8: docs/methods.md "Zonal field
    by Chebyshev interpolation"). Each node row is scaled by its largest value, each target
    by the largest scale of its stencil, so the quotients of SA see no overflow. It pays when
    N < n: N ≈ 12.6 k.
    """

    name = "chebyshev"

    def __init__(self, model, axis, targets, sources, order=CHEBYSHEV_ORDER,
                 rate=CHEBYSHEV_BIN_RATE):
        if not np.isfinite(model.beta):
            raise ValueError("ChebyshevZonalField is the finite-beta field; at beta = inf use "
                             "zero_temperature_speed (the field is local)")
        self._coefficients = axial_coefficients(model, axis)
        _, _, v1, v2 = self._coefficients
        self.normalized, self.beta = model.normalized, model.beta
        self.bins, self.order = chebyshev_bins(model, axis, order, rate), int(order)
        nodes = chebyshev_nodes(self.bins, self.order)
        self._table, node_log_max = kernel_tables(model, axis, nodes, nodes)
        t = np.asarray(targets, dtype=np.float64)
        self._sources = np.asarray(sources, dtype=np.float64)
        self._src_idx, self._src_w = lagrange_stencils(self._sources, self.bins, self.order)
        self._tgt_idx, w = lagrange_stencils(t, self.bins, self.order)
        # the nodes' scales differ by e^{O(1)} across a bin: factor out the stencil's largest
        lr = node_log_max[self._tgt_idx]
        self.log_row_max = lr.max(axis=1)
        self._tgt_w = w * np.exp(lr - self.log_row_max[:, None])
        if not self.normalized:
            check_usa_overflow(float(self.log_row_max.max()), model.beta)
        self._ct, self._st = np.cos(t), np.sin(t)
        self._v1, self._v2 = v1, v2
        self._targets = t
        self._model, self._axis = model, axis

    @property
    def nodes(self) -> int:
        """N, the number of interpolation nodes in θ (the kernel tables are 3N × N)."""
        return self.bins * self.order

    def _sums(self, m):
        n_nodes = self.nodes
        W = np.bincount(self._src_idx.ravel(), (self._src_w * m[:, None]).ravel(),
                        minlength=n_nodes)
        F = (self._table @ W).reshape(3, n_nodes)
        return np.einsum("kmp,mp->km", F[:, self._tgt_idx], self._tgt_w)
