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
    "ZonalField",
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

    name = "zonal"

    def __init__(self, model, axis, targets, sources):
        if not np.isfinite(model.beta):
            raise ValueError("ZonalField is the finite-beta field; at beta = inf use "
                             "zero_temperature_speed (the field is local)")
        b1, b2, v1, v2 = axial_coefficients(model, axis)
        self.normalized = model.normalized
        self.beta = model.beta
        d = model.d
        nu = 0.5 * (d - 3)
        t = np.asarray(targets, dtype=np.float64)[:, None]
        s = np.asarray(sources, dtype=np.float64)[None, :]
        ct, st, cs, ss = np.cos(t), np.sin(t), np.cos(s), np.sin(s)
        z = model.beta * b2 * st * ss
        lm0 = log_mean_exp(nu, z)
        logk = model.beta * b1 * ct * cs + lm0
        self.log_row_max = logk.max(axis=1)
        if not self.normalized:
            check_usa_overflow(float(self.log_row_max.max()), model.beta)
        with np.errstate(under="ignore"):
            G = np.exp(logk - self.log_row_max[:, None])
        G[G < _FLUSH] = 0.0  # subnormals slow BLAS down tenfold; the rows' maxima are 1
        # the three kernels stacked: one matrix-vector product per call
        self._table = np.concatenate([G, G * cs, G * (ss * mean_ratio(nu, z, lm0))])
        self._ct, self._st = ct[:, 0], st[:, 0]
        self._v1, self._v2 = v1, v2
        self._targets, self._sources = t[:, 0], s[0]
        self._model, self._axis = model, axis

    def speed(self, masses) -> np.ndarray:
        """θ̇ at the targets, (m,), from the source masses (n,) (their sum need not be 1)."""
        m = np.asarray(masses, dtype=np.float64)
        # masses below 1e-290 of the total change no field value beyond round-off, and as
        # subnormals (high d, near the poles) they slow the product down tenfold
        m = np.where(m < _FLUSH * max(float(m.sum()), 1e-300), 0.0, m)
        den, cos_part, ratio_part = np.split(self._table @ m, 3)
        num = self._v2 * self._ct * ratio_part - self._v1 * self._st * cos_part
        if not self.normalized:
            return num * np.exp(self.log_row_max)
        tiny = den <= 1e-280 * max(float(m.sum()), 1e-300)
        if np.any(tiny):  # all the mass where the scaled kernel underflowed: redo in logs
            num, den = self._log_space_rows(np.flatnonzero(tiny), m, num, den)
        return num / den

    def _log_space_rows(self, rows, m, num, den):
        """Numerator and denominator of the rows whose kernel, scaled by its maximum, is zero
        wherever the mass is: rescaled by the row's largest kernel·mass instead."""
        model = self._model
        nu = 0.5 * (model.d - 3)
        b1, b2, v1, v2 = axial_coefficients(model, self._axis)
        t = self._targets[rows][:, None]
        s = self._sources[None, :]
        z = model.beta * b2 * np.sin(t) * np.sin(s)
        lm0 = log_mean_exp(nu, z)
        with np.errstate(divide="ignore"):
            lw = model.beta * b1 * np.cos(t) * np.cos(s) + lm0 + np.log(m)[None, :]
        W = np.exp(lw - lw.max(axis=1, keepdims=True))
        num, den = num.copy(), den.copy()
        den[rows] = W.sum(axis=1)
        num[rows] = (v2 * np.cos(t[:, 0]) * np.sum(W * np.sin(s) * mean_ratio(nu, z, lm0), 1)
                     - v1 * np.sin(t[:, 0]) * np.sum(W * np.cos(s), axis=1))
        return num, den
