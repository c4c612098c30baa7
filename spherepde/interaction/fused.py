r"""Fused, parallel numba kernel for the attention output: O(N) memory, no N×N matrix.

For every query x_i (queries are split across threads with ``prange``) the kernel streams
over the keys and accumulates, for the logits
:math:`\ell_{ij} = \beta\langle x_i, k_j\rangle + \log w_j` and a shift m_i,

.. math::
    s_i = \sum_j e^{\ell_{ij} - m_i}, \qquad a_i = \sum_j e^{\ell_{ij} - m_i} v_j, \qquad
    \mathrm{SA:}\ a_i / s_i, \qquad \mathrm{USA:}\ e^{m_i} a_i .

The shift is chosen one of three ways:

- *fixed* (the common case): when :math:`2\beta|x_i|\max_j|k_j|` plus the spread of the
  log-weights is at most :data:`FIXED_SHIFT_SPREAD` = 600, m_i is the upper bound
  :math:`\beta|x_i|\max_j|k_j| + \max_j\log w_j` of the logits. Every term then lies in
  [e^-600, 1]: no overflow, no loss of the leading terms, and one pass over the keys
  suffices (for d = 2, 3 a single fused, SIMD-vectorized loop).
- *checked bound* (d = 2, 3 beyond that spread, i.e. beta > 300 on the unit sphere): the
  same fused pass with the bound as shift, accepted when s_i >= e^-600 (some key lies within
  600 of the bound, as it does for any query near the measure's support; see
  :data:`_ACCEPT_SUM` for why nothing is lost then); otherwise a first pass computes the
  exact maximum :math:`m_i = \max_j \ell_{ij}` and the fused pass is redone with it.
- *online softmax* otherwise (other dimensions at large beta; Milakov & Gimelshein 2018, the
  FlashAttention recurrence): keys are processed in tiles of :data:`TILE`; m_i is the running
  maximum and s_i, a_i are rescaled by :math:`e^{m_{old} - m_{new}}` whenever a tile raises it.

Memory is O(threads · TILE) scratch besides the O(N·d) inputs and output.

The exponential is :func:`_exp_nonpositive`, a branch-free Cody–Waite reduction with a
degree-13 Taylor polynomial and 2^n assembled in the exponent bits (relative error about
2e-16 on [-708, 0], exactly 0 below); unlike ``math.exp`` it vectorizes without Intel's SVML,
which is what makes this kernel an order of magnitude faster than a dense numpy N×N softmax.
"""
from __future__ import annotations

from typing import Final

import numpy as np
from llvmlite import ir
from numba import njit, prange
from numba.core import types
from numba.extending import intrinsic

from . import register_kernel
from .numerics import FASTMATH_REDUCE as _REDUCE
from .numerics import check_usa_overflow, log_weights

__all__ = ["attention_numba", "log_partition_numba", "TILE"]

#: Keys per tile of the online-softmax path: the tile's logits (8 KiB) stay in L1. A
#: compile-time constant (read as a global by the @njit(cache=True) kernels, so frozen into
#: their cache): Final, and read by the compiled code only.
TILE: Final = 1024
#: Queries per parallel task (compile-time, like TILE).
QUERY_BLOCK: Final = 32
#: When beta·|x|·max|k| and the log-weights confine all logits of a query to an interval of
#: this length, the softmax shift is the upper bound of that interval: terms lie in
#: [e^-600, 1], nothing overflows or becomes subnormal, and the running maximum (a pass over
#: every tile) and its rescalings are skipped.
FIXED_SHIFT_SPREAD = 600.0
#: With the bound as shift, a sum s_i >= e^-600 proves the largest term >= e^-600/N: the terms
#: lost below e^-708 are then < N^2 e^-108 (< 1e-30 for N < 1e9) of s_i, so the fused pass is
#: accepted; otherwise it is redone with the exact maximum as shift.
_ACCEPT_SUM: Final = float(np.exp(-600.0))

# The constants of _exp_nonpositive, compile-time (read as globals by numba): Final.
_LOG2E: Final = 1.4426950408889634
# fdlibm's split of log 2: n * _LN2_HI is exact for |n| < 2^20.
_LN2_HI: Final = 6.93147180369123816490e-01
_LN2_LO: Final = 1.90821492927058770002e-10
# Below this the exponential is subnormal; such terms are < 1e-307 relative to the maximum
# term (which is 1) and are set to zero.
_EXP_FLOOR: Final = -708.0


@njit(cache=True, inline="always", fastmath={"contract"})
def _exp_poly(r):
    # Taylor series of e^r to degree 13 on |r| <= log(2)/2: truncation < 5e-18.
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    return p


@intrinsic
def _bits_as_float(typingctx, bits):
    """Reinterpret the 64 bits of an int64 as a float64 (a register move, vectorizable)."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


@njit(cache=True, inline="always", fastmath={"contract"})
def _exp_nonpositive(u0):
    """e^u0 for u0 <= 0 to 2e-16 relative, exactly 0 below -708 (and for -inf)."""
    u = min(max(u0, _EXP_FLOOR), 0.0)
    n = np.floor(u * _LOG2E + 0.5)
    r = (u - n * _LN2_HI) - n * _LN2_LO
    # 2^n assembled in the exponent bits; n >= -1022 after the clamp above
    two_n = _bits_as_float((np.int64(n) + 1023) << 52)
    return _exp_poly(r) * two_n if u0 >= _EXP_FLOOR else 0.0




@njit(cache=True, fastmath=_REDUCE)
def _exp_tile(buf, L, shift):
    """buf[j] <- exp(buf[j] - shift) for j < L (vectorized); returns their sum."""
    s = 0.0
    for j in range(L):
        e = _exp_nonpositive(buf[j] - shift)
        buf[j] = e
        s += e
    return s


@njit(cache=True, fastmath=_REDUCE)
def _row2(b0, b1, k0, k1, lw, v0, v1, shift):
    """d = 2 with a fixed shift: one fused, vectorized pass over all keys."""
    s = a0 = a1 = 0.0
    for j in range(k0.shape[0]):
        e = _exp_nonpositive(b0 * k0[j] + b1 * k1[j] + lw[j] - shift)
        s += e
        a0 += e * v0[j]
        a1 += e * v1[j]
    return s, a0, a1


@njit(cache=True, fastmath=_REDUCE)
def _row3(b0, b1, b2, k0, k1, k2, lw, v0, v1, v2, shift):
    """d = 3 with a fixed shift: one fused, vectorized pass over all keys."""
    s = a0 = a1 = a2 = 0.0
    for j in range(k0.shape[0]):
        e = _exp_nonpositive(b0 * k0[j] + b1 * k1[j] + b2 * k2[j] + lw[j] - shift)
        s += e
        a0 += e * v0[j]
        a1 += e * v1[j]
        a2 += e * v2[j]
    return s, a0, a1, a2


@njit(cache=True, fastmath=_REDUCE)
def _max3(b0, b1, b2, k0, k1, k2, lw):
    """The largest logit of one query (d = 3), for the rare redo. LLVM does not vectorize
    this max reduction: it costs about as much as one fused pass."""
    m = -np.inf
    for j in range(k0.shape[0]):
        m = max(m, b0 * k0[j] + b1 * k1[j] + b2 * k2[j] + lw[j])
    return m


@njit(cache=True, fastmath=_REDUCE)
def _max2(b0, b1, k0, k1, lw):
    """The largest logit of one query (d = 2)."""
    m = -np.inf
    for j in range(k0.shape[0]):
        m = max(m, b0 * k0[j] + b1 * k1[j] + lw[j])
    return m


@njit(cache=True, fastmath=_REDUCE)
def _logits_tile(buf, bx, keysT, logw, t0, L, want_max):
    """buf[j] <- <bx, k_{t0+j}> + log w_{t0+j}; returns the tile maximum (if wanted)."""
    d = bx.shape[0]
    # 1-D slices let LLVM see unit strides and vectorize
    k = keysT[0, t0:t0 + L]
    x0 = bx[0]
    for j in range(L):
        buf[j] = x0 * k[j]
    for a in range(1, d):
        k = keysT[a, t0:t0 + L]
        xa = bx[a]
        for j in range(L):
            buf[j] += xa * k[j]
    lw = logw[t0:t0 + L]
    for j in range(L):
        buf[j] += lw[j]
    tmax = -np.inf
    if want_max:
        for j in range(L):
            tmax = max(tmax, buf[j])
    return tmax


@njit(cache=True, fastmath=_REDUCE)
def _dot_tile(buf, valuesT, a, t0, L):
    v = valuesT[a, t0:t0 + L]
    sa = 0.0
    for j in range(L):
        sa += buf[j] * v[j]
    return sa


@njit(cache=True)
def _row(x, i, keysT, logw, beta, bound, wide, buf, bx, valuesT, acc):
    """One query: returns (shift m_i, normalizer s_i) and leaves the numerator in acc.

    ``bound`` is an upper bound of the query's logits; ``wide`` says they may spread over more
    than :data:`FIXED_SHIFT_SPREAD`, so that the bound alone may be a poor shift."""
    d = x.shape[1]
    n = keysT.shape[1]
    dv = acc.shape[0]
    if d == 3 and dv == 3:
        b0, b1, b2 = beta * x[i, 0], beta * x[i, 1], beta * x[i, 2]
        shift = bound
        s, acc[0], acc[1], acc[2] = _row3(b0, b1, b2, keysT[0], keysT[1], keysT[2], logw,
                                          valuesT[0], valuesT[1], valuesT[2], shift)
        if wide and not s >= _ACCEPT_SUM:
            # the bound overshot the largest logit by more than ~600: redo with the maximum
            shift = _max3(b0, b1, b2, keysT[0], keysT[1], keysT[2], logw)
            if shift == -np.inf:
                acc[0] = acc[1] = acc[2] = 0.0
                return shift, 0.0
            s, acc[0], acc[1], acc[2] = _row3(b0, b1, b2, keysT[0], keysT[1], keysT[2], logw,
                                              valuesT[0], valuesT[1], valuesT[2], shift)
        return shift, s
    if d == 2 and dv == 2:
        b0, b1 = beta * x[i, 0], beta * x[i, 1]
        shift = bound
        s, acc[0], acc[1] = _row2(b0, b1, keysT[0], keysT[1], logw, valuesT[0], valuesT[1],
                                  shift)
        if wide and not s >= _ACCEPT_SUM:
            shift = _max2(b0, b1, keysT[0], keysT[1], logw)
            if shift == -np.inf:
                acc[0] = acc[1] = 0.0
                return shift, 0.0
            s, acc[0], acc[1] = _row2(b0, b1, keysT[0], keysT[1], logw, valuesT[0],
                                      valuesT[1], shift)
        return shift, s
    for a in range(d):
        bx[a] = beta * x[i, a]
    for a in range(acc.shape[0]):
        acc[a] = 0.0
    run_max = -np.inf if wide else bound
    s = 0.0
    for t0 in range(0, n, TILE):
        L = min(TILE, n - t0)
        tmax = _logits_tile(buf, bx, keysT, logw, t0, L, wide)
        if wide:
            if tmax == -np.inf:
                continue  # a tile of zero-weight atoms
            if tmax > run_max:
                if run_max > -np.inf:
                    c = np.exp(run_max - tmax)
                    s *= c
                    for a in range(acc.shape[0]):
                        acc[a] *= c
                run_max = tmax
        s += _exp_tile(buf, L, run_max)
        if valuesT.shape[1] == n:
            for a in range(acc.shape[0]):
                acc[a] += _dot_tile(buf, valuesT, a, t0, L)
    return run_max, s


@njit(parallel=True, cache=True)
def _attention_kernel(x, keysT, valuesT, logw, beta, normalized, bounds, wide, out, log_z):
    m, d = x.shape
    dv = valuesT.shape[0]
    nblocks = (m + QUERY_BLOCK - 1) // QUERY_BLOCK
    for b in prange(nblocks):
        buf = np.empty(TILE)
        acc = np.empty(dv)
        bx = np.empty(d)
        for i in range(b * QUERY_BLOCK, min(m, (b + 1) * QUERY_BLOCK)):
            mi, si = _row(x, i, keysT, logw, beta, bounds[i], wide[i], buf, bx, valuesT, acc)
            log_z[i] = mi + np.log(si)
            if normalized:
                for a in range(dv):
                    out[i, a] = acc[a] / si
            else:
                # e^{m_i} in two factors: e^{m_i} alone may overflow where the result does not
                m1 = min(mi, 700.0)
                f1 = np.exp(m1)
                f2 = np.exp(mi - m1)
                for a in range(dv):
                    out[i, a] = (acc[a] * f2) * f1


@njit(parallel=True, cache=True)
def _log_partition_kernel(x, keysT, logw, beta, bounds, wide, out):
    m, d = x.shape
    nblocks = (m + QUERY_BLOCK - 1) // QUERY_BLOCK
    novalues = np.empty((1, 0))
    for b in prange(nblocks):
        buf = np.empty(TILE)
        acc = np.empty(0)
        bx = np.empty(d)
        for i in range(b * QUERY_BLOCK, min(m, (b + 1) * QUERY_BLOCK)):
            mi, si = _row(x, i, keysT, logw, beta, bounds[i], wide[i], buf, bx, novalues, acc)
            out[i] = mi + np.log(si) if si > 0 else -np.inf


def _shifts(x, keysT, logw, beta):
    """Per-query upper bound U_i = beta |x_i| max_j |k_j| + max_j log w_j of the logits, and
    whether the logits may spread over more than :data:`FIXED_SHIFT_SPREAD` below it (then U_i
    alone may be a poor shift: the online softmax, or for d = 2, 3 a check of the sum)."""
    alive = np.isfinite(logw)
    kmax = float(np.sqrt((keysT ** 2).sum(axis=0)).max()) if keysT.size else 0.0
    lw_hi = float(logw[alive].max()) if alive.any() else 0.0
    lw_lo = float(logw[alive].min()) if alive.any() else 0.0
    reach = beta * np.linalg.norm(x, axis=1) * kmax
    return reach + lw_hi, 2.0 * reach + (lw_hi - lw_lo) > FIXED_SHIFT_SPREAD


def attention_numba(x, keys, values, weights, beta: float, normalized: bool) -> np.ndarray:
    """Attention output (before projection) by the fused numba kernel.

    Same contract as :func:`spherepde.interaction.reference.attention_numpy`:
    x (m, d), keys (n, d), values (n, dv), weights (n,) -> (m, dv), float64.
    """
    x = np.ascontiguousarray(x, dtype=np.float64)
    keysT = np.ascontiguousarray(np.asarray(keys, dtype=np.float64).T)
    valuesT = np.ascontiguousarray(np.asarray(values, dtype=np.float64).T)
    out = np.empty((x.shape[0], valuesT.shape[0]))
    log_z = np.empty(x.shape[0])
    logw = log_weights(weights)
    _attention_kernel(x, keysT, valuesT, logw, float(beta), bool(normalized),
                      *_shifts(x, keysT, logw, float(beta)), out, log_z)
    if not normalized and x.shape[0]:
        # the reference tests the largest logit; the log-partition exceeds it by <= log N
        check_usa_overflow(float(log_z.max()), beta)
    return out


def log_partition_numba(x, keys, weights, beta: float) -> np.ndarray:
    r""":math:`\log \sum_j w_j e^{\beta\langle x_i, k_j\rangle}` for every query x (m, d),
    keys (n, d), weights (n,); returns (m,), O(N) memory."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    keysT = np.ascontiguousarray(np.asarray(keys, dtype=np.float64).T)
    out = np.empty(x.shape[0])
    logw = log_weights(weights)
    _log_partition_kernel(x, keysT, logw, float(beta), *_shifts(x, keysT, logw, float(beta)), out)
    return out


register_kernel("numba", attention_numba)
