r"""Fused, parallel numba kernel for the attention output: O(N) memory, no N×N matrix.

For every query x_i the kernel streams over the keys in tiles of :data:`TILE` and keeps an
*online softmax* (Milakov & Gimelshein 2018; the FlashAttention recurrence): a running
maximum m_i of the logits :math:`\ell_{ij} = \beta\langle x_i, k_j\rangle + \log w_j`, a
running normalizer :math:`s_i = \sum_j e^{\ell_{ij} - m_i}` and a running numerator
:math:`a_i = \sum_j e^{\ell_{ij} - m_i} v_j`, rescaled by :math:`e^{m_{old} - m_{new}}`
whenever a tile raises the maximum. Then

.. math::
    \mathrm{SA:}\ a_i / s_i, \qquad \mathrm{USA:}\ e^{m_i} a_i.

Memory is O(threads · TILE) scratch plus the O(N·d) inputs and output. Queries are split
across threads with ``prange``.

The exponential inside the tile loop is evaluated by :func:`_exp_nonpositive`, a branch-free
Cody–Waite reduction with a degree-13 Taylor polynomial (relative error below 2e-16 on
[-708, 0]); unlike ``math.exp`` it vectorizes (SIMD) without Intel's SVML, which is what makes
this kernel an order of magnitude faster than a dense numpy N×N implementation.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import register_backend
from .reference import LOG_FLOAT_MAX, usa_overflow_error

__all__ = ["attention_numba", "log_partition_numba", "TILE"]

#: Keys per tile: the tile's logits (8 KiB) and scale factors stay in L1.
TILE = 1024
#: Queries per parallel task.
QUERY_BLOCK = 32

_LOG2E = 1.4426950408889634
# fdlibm's split of log 2: n * _LN2_HI is exact for |n| < 2^20.
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
# Below this the exponential is subnormal; such terms are < 1e-307 relative to the maximum
# term (which is 1) and are set to zero.
_EXP_FLOOR = -708.0


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


@njit(cache=True, fastmath={"contract"})
def _exp_tile(buf, ibuf, scale, L, shift):
    """buf[j] <- exp(buf[j] - shift) for j < L, vectorizable; returns the sum."""
    for j in range(L):
        u0 = buf[j] - shift
        u = max(u0, _EXP_FLOOR)
        n = np.floor(u * _LOG2E + 0.5)
        r = (u - n * _LN2_HI) - n * _LN2_LO
        buf[j] = _exp_poly(r)
        # 2^n assembled in the exponent bits (n >= -1022 after the clamp); the bit pattern 0
        # is +0.0, which zeroes clamped terms and zero-weight atoms (logit -inf).
        ibuf[j] = (np.int64(n + 1023.0) << 52) if u0 >= _EXP_FLOOR else np.int64(0)
    return _scale_and_sum(buf, scale, L)


# Reductions may be reordered (SIMD); this changes the result by round-off only.
_REDUCE = {"contract", "reassoc", "nsz", "nnan"}


@njit(cache=True, fastmath=_REDUCE)
def _scale_and_sum(buf, scale, L):
    s = 0.0
    for j in range(L):
        e = buf[j] * scale[j]
        buf[j] = e
        s += e
    return s


@njit(cache=True, fastmath=_REDUCE)
def _logits_tile(buf, bx, keysT, logw, t0, L):
    """buf[j] <- <bx, k_{t0+j}> + log w_{t0+j}; returns the tile maximum."""
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
    tmax = -np.inf
    for j in range(L):
        buf[j] += lw[j]
        tmax = max(tmax, buf[j])
    return tmax


@njit(cache=True, fastmath=_REDUCE)
def _dot_tile(buf, valuesT, a, t0, L):
    v = valuesT[a, t0:t0 + L]
    sa = 0.0
    for j in range(L):
        sa += buf[j] * v[j]
    return sa


@njit(parallel=True, cache=True)
def _attention_kernel(x, keysT, valuesT, logw, beta, normalized, out, row_max):
    m, d = x.shape
    dv = valuesT.shape[0]
    n = keysT.shape[1]
    nblocks = (m + QUERY_BLOCK - 1) // QUERY_BLOCK
    for b in prange(nblocks):
        buf = np.empty(TILE)
        ibuf = np.empty(TILE, dtype=np.int64)
        scale = ibuf.view(np.float64)
        acc = np.empty(dv)
        bx = np.empty(d)
        for i in range(b * QUERY_BLOCK, min(m, (b + 1) * QUERY_BLOCK)):
            for a in range(d):
                bx[a] = beta * x[i, a]
            for a in range(dv):
                acc[a] = 0.0
            run_max = -np.inf
            s = 0.0
            for t0 in range(0, n, TILE):
                L = min(TILE, n - t0)
                tmax = _logits_tile(buf, bx, keysT, logw, t0, L)
                if tmax == -np.inf:
                    continue  # a tile of zero-weight atoms
                if tmax > run_max:
                    if run_max > -np.inf:
                        c = np.exp(run_max - tmax)
                        s *= c
                        for a in range(dv):
                            acc[a] *= c
                    run_max = tmax
                s += _exp_tile(buf, ibuf, scale, L, run_max)
                for a in range(dv):
                    acc[a] += _dot_tile(buf, valuesT, a, t0, L)
            row_max[i] = run_max
            if normalized:
                for a in range(dv):
                    out[i, a] = acc[a] / s
            else:
                f = np.exp(run_max) if run_max <= 709.0 else np.inf
                for a in range(dv):
                    out[i, a] = acc[a] * f


@njit(parallel=True, cache=True)
def _log_partition_kernel(x, keysT, logw, beta, out):
    m, d = x.shape
    n = keysT.shape[1]
    nblocks = (m + QUERY_BLOCK - 1) // QUERY_BLOCK
    for b in prange(nblocks):
        buf = np.empty(TILE)
        ibuf = np.empty(TILE, dtype=np.int64)
        scale = ibuf.view(np.float64)
        bx = np.empty(d)
        for i in range(b * QUERY_BLOCK, min(m, (b + 1) * QUERY_BLOCK)):
            for a in range(d):
                bx[a] = beta * x[i, a]
            run_max = -np.inf
            s = 0.0
            for t0 in range(0, n, TILE):
                L = min(TILE, n - t0)
                tmax = _logits_tile(buf, bx, keysT, logw, t0, L)
                if tmax == -np.inf:
                    continue
                if tmax > run_max:
                    if run_max > -np.inf:
                        s *= np.exp(run_max - tmax)
                    run_max = tmax
                s += _exp_tile(buf, ibuf, scale, L, run_max)
            out[i] = run_max + np.log(s) if s > 0 else -np.inf


def _log_weights(weights):
    w = np.ascontiguousarray(weights, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.where(w > 0, np.log(np.where(w > 0, w, 1.0)), -np.inf)


def attention_numba(x, keys, values, weights, beta: float, normalized: bool) -> np.ndarray:
    """Attention output (before projection) by the fused numba kernel.

    Same contract as :func:`spherepde.interaction.reference.attention_numpy`:
    x (m, d), keys (n, d), values (n, dv), weights (n,) -> (m, dv), float64.
    """
    x = np.ascontiguousarray(x, dtype=np.float64)
    keysT = np.ascontiguousarray(np.asarray(keys, dtype=np.float64).T)
    valuesT = np.ascontiguousarray(np.asarray(values, dtype=np.float64).T)
    out = np.empty((x.shape[0], valuesT.shape[0]))
    row_max = np.empty(x.shape[0])
    _attention_kernel(x, keysT, valuesT, _log_weights(weights), float(beta), bool(normalized),
                      out, row_max)
    if not normalized and x.shape[0]:
        top = float(row_max.max())
        if top > LOG_FLOAT_MAX:
            raise usa_overflow_error(top, beta)
    return out


def log_partition_numba(x, keys, weights, beta: float) -> np.ndarray:
    r""":math:`\log \sum_j w_j e^{\beta\langle x_i, k_j\rangle}` for every query, (m,), O(N) memory."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    keysT = np.ascontiguousarray(np.asarray(keys, dtype=np.float64).T)
    out = np.empty(x.shape[0])
    _log_partition_kernel(x, keysT, _log_weights(weights), float(beta), out)
    return out


register_backend("numba", attention_numba)
