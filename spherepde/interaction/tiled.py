r"""Tiled BLAS kernel for the attention output in high dimension: logits and weighted values by
matrix products, an online softmax in between, O(N·tile) memory.

For queries x_i, keys k_j, values v_j and weights w_j the output before the tangent projection
is, with the logits :math:`\ell_{ij} = \beta\langle x_i, k_j\rangle + \log w_j`,

.. math::
    \mathrm{SA:}\ \frac{\sum_j e^{\ell_{ij}} v_j}{\sum_j e^{\ell_{ij}}}, \qquad
    \mathrm{USA:}\ \sum_j e^{\ell_{ij}} v_j .

The queries are cut into tiles of :data:`QUERY_TILE` and the keys into tiles of
:data:`KEY_TILE`. For one (query tile Q, key tile K):

1. :math:`L = (\beta X_Q) K_K^T` by one dgemm (2·|Q|·|K|·d flops);
2. a numba pass adds :math:`\log w_j`, updates the shift m_i, overwrites L by
   :math:`E_{ij} = e^{\ell_{ij} - m_i}` (the vectorized exponential of the fused kernel) and
   accumulates :math:`s_i \mathrel{+}= \sum_j E_{ij}`;
3. :math:`a_Q \mathrel{+}= E V_K` by a second dgemm (2·|Q|·|K|·d_v flops).

Then SA is :math:`a_i / s_i` and USA is :math:`e^{m_i} a_i`. Each thread holds one
|Q|×|K| tile (2 MiB at the defaults, inside this machine's 2 MiB-per-core L2 for the second
product), so memory is O(threads·tile) besides the O(N·d) inputs.

The shift m_i, as in :mod:`spherepde.interaction.fused`:

- *fixed*: when the logits of every query of the tile lie in an interval of length at most
  :data:`~spherepde.interaction.fused.FIXED_SHIFT_SPREAD` = 600 below the bound
  :math:`U_i = \beta|x_i|\max_j|k_j| + \max_j\log w_j` (so :math:`2\beta|x|\max|k|` plus the
  spread of the log-weights is at most 600), m_i = U_i: every term lies in [e^-600, 1], none
  overflows or is lost, and there is no maximum to find nor rescaling to do;
- *online* otherwise (Milakov & Gimelshein 2018, the FlashAttention recurrence): m_i is the
  running maximum of the logits seen so far; when a key tile raises it from m to m', s_i and
  a_i are multiplied by :math:`e^{m - m'}\le 1` before the tile's terms are added, so every
  term is at most 1 and the largest is exactly 1.

USA without overflow: the sums are carried relative to e^{m_i}, so a_i and s_i are at most
N·max|v| and 1..N whatever beta is; the factor e^{m_i} is applied last, in two factors
(e^{min(m_i, 700)} · e^{m_i - min(m_i, 700)}), so that it overflows only where the result itself
is beyond float64, and :func:`~spherepde.interaction.numerics.check_usa_overflow` raises on the
log-partition :math:`m_i + \log s_i` before that.

Parallelism: query tiles are shared among ``numba.get_num_threads()`` Python threads; the
dgemm calls and the numba pass release the GIL, and the BLAS is single-threaded while the
tiles run (:data:`_SET_LOCAL_BLAS_THREADS`), then given back the thread count it had. Threads
over tiles put the exponential pass on every core too, and the result does not depend on the
thread count or on how the BLAS was configured. Measured on an idle 2-core machine
(docs/benchmarks/particles.md, N = 10^4): 0.21, 0.45, 0.74 and 0.69 of a 2-thread dgemm's
GFLOP/s at d = 16, 64, 512, 1024, and 5.5, 3.2, 1.6 and 1.15 times the plain numpy softmax.

Cost model for ``kernel="auto"`` (``AutoProfile.tiled_min_dim`` in
:mod:`spherepde.interaction.options`): **tiled when d >= 16** and m·n >=
``AutoProfile.numba_min_pairs``, the fused kernel below. Measured on the idle 2-core machine,
fused time / tiled time, beta = 4, N × N, interleaved (benchmarks/particles.py ``--highd``,
docs/benchmarks/particles.md)::

    threads  N      d=3   d=4   d=6   d=8   d=16  d=32  d=64
    1        2000   0.66  0.95  1.05  1.23  1.64  2.48  3.63
    1        8000   0.64  0.90  0.97  1.25  1.85  4.79  6.73
    2        2000   0.38  0.63  0.96  0.88  1.09  1.70  2.67
    2        8000   0.54  0.90  1.00  1.07  1.88  3.91  6.03

From d = 16 the tiled kernel is faster at both thread counts and every N measured (500 to
8000); d = 8 is a tie with two threads (0.70-1.07) and a 1.2-1.4x win with one, so the fused
kernel keeps it; at d <= 6 the fused kernel wins or ties.
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import glob
import os
import threading

import numpy as np
from numba import get_num_threads, njit

from . import register_kernel
from .fused import FIXED_SHIFT_SPREAD, _exp_nonpositive
from .numerics import FASTMATH_REDUCE as _REDUCE
from .numerics import check_usa_overflow, log_weights

__all__ = ["KEY_TILE", "QUERY_TILE", "WIDE_DIM", "attention_tiled"]

#: Queries per tile (rows of one logit tile), below :data:`WIDE_DIM`.
QUERY_TILE = 128
#: Keys per tile (columns of one logit tile): 128 × 2048 float64 = 2 MiB.
KEY_TILE = 2048
#: From this d on the tiles are 256 queries × 1024 keys (the same 2 MiB): each query tile
#: re-reads the key and value tiles (KEY_TILE·d floats each), which then dominate the memory
#: traffic, so taller query tiles halve it (measured 1.1-1.2x at d = 1024, N = 4000-6000).
WIDE_DIM = 512


@njit(cache=True, nogil=True, fastmath=_REDUCE)
def _softmax_tile(L, logw, shift, s, scale, online):
    """One logit tile L (q, k) (without the log-weights) -> in place E = e^{L + log w - m_i}.

    Adds the row sums of E to s (q,). ``online``: shift (q,) is the running maximum, raised
    by this tile where its maximum is larger, and scale (q,) receives e^{m_old - m_new} by
    which s (done here) and the caller's numerator must be multiplied first; otherwise shift
    is a fixed bound and scale is left alone."""
    q, k = L.shape
    for i in range(q):
        row = L[i]
        for j in range(k):
            row[j] += logw[j]
        if online:
            tmax = -np.inf
            for j in range(k):
                tmax = max(tmax, row[j])
            old = shift[i]
            if tmax > old:
                # old = -inf: s and the numerator are still 0, any finite factor will do
                scale[i] = np.exp(old - tmax) if old > -np.inf else 0.0
                shift[i] = tmax
            else:
                scale[i] = 1.0
            s[i] *= scale[i]
        m = shift[i]
        if m == -np.inf:  # only zero-weight atoms so far (m - m would be NaN)
            for j in range(k):
                row[j] = 0.0
            continue
        acc = 0.0
        for j in range(k):
            e = _exp_nonpositive(row[j] - m)
            row[j] = e
            acc += e
        s[i] += acc


def _query_tile(xb, keys, values, logw, bound, online, key_tile):
    """Numerator a (q, dv), normalizer s (q,) and shift m (q,) of one tile of scaled queries
    xb = beta·x (q, d), streaming over the keys in tiles of ``key_tile``."""
    q, n = xb.shape[0], keys.shape[0]
    acc = np.zeros((q, values.shape[1]))
    s = np.zeros(q)
    shift = np.full(q, -np.inf) if online else bound.copy()
    scale = np.ones(q)
    buf = np.empty((q, min(key_tile, n)))
    for k0 in range(0, n, key_tile):
        k1 = min(n, k0 + key_tile)
        L = buf if k1 - k0 == buf.shape[1] else np.empty((q, k1 - k0))
        np.matmul(xb, keys[k0:k1].T, out=L)
        _softmax_tile(L, logw[k0:k1], shift, s, scale, online)
        if online:
            acc *= scale[:, None]
        acc += L @ values[k0:k1]
    return acc, s, shift


def _find_blas_threads():
    """OpenBLAS's ``openblas_set_num_threads_local`` (OpenBLAS >= 0.3.27) and its thread-count
    getter in the OpenBLAS that numpy's matmul calls, or (None, None)."""
    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in sorted(glob.glob(os.path.join(libs, "*openblas*"))):
        try:
            lib = ctypes.CDLL(path)
            setter = lib.openblas_set_num_threads_local
        except (OSError, AttributeError):
            continue
        setter.argtypes, setter.restype = [ctypes.c_int], ctypes.c_int
        getter = next((getattr(lib, name) for name in (
            "openblas_get_num_threads", "scipy_openblas_get_num_threads64_",
            "openblas_get_num_threads64_") if hasattr(lib, name)), None)
        if getter is not None:
            getter.argtypes, getter.restype = [], ctypes.c_int
            return setter, getter
    return None, None


#: Makes the BLAS single-threaded while the threads over query tiles run, so that they do not
#: each start BLAS threads (measured 10x slower on 2 cores), and reads the count to put back
#: afterwards: in the bundled OpenBLAS the "local" setter changes the process's count (left at
#: 1, every later matmul of the process runs on one core: a 4000^2 dgemm on 2 cores went from
#: 167 to 89 GFLOP/s), and two tiles restoring their own "previous" values race. None where
#: numpy's BLAS is not a recent OpenBLAS: then set OPENBLAS_NUM_THREADS=1 (or MKL's).
_SET_LOCAL_BLAS_THREADS, _GET_BLAS_THREADS = _find_blas_threads()

_POOLS: dict[int, concurrent.futures.ThreadPoolExecutor] = {}
_POOL_LOCK = threading.Lock()


def _pool(threads: int) -> concurrent.futures.ThreadPoolExecutor:
    with _POOL_LOCK:
        if threads not in _POOLS:
            _POOLS[threads] = concurrent.futures.ThreadPoolExecutor(
                threads, thread_name_prefix="spherepde-tiled")
        return _POOLS[threads]


def _bounds(x, keys, logw, beta):
    """Per-query upper bound U_i of the logits, and whether they may spread over more than
    FIXED_SHIFT_SPREAD below it (then the running maximum is the shift)."""
    alive = np.isfinite(logw)
    kmax = float(np.sqrt(np.einsum("ij,ij->i", keys, keys)).max()) if keys.size else 0.0
    lw_hi = float(logw[alive].max()) if alive.any() else 0.0
    lw_lo = float(logw[alive].min()) if alive.any() else 0.0
    reach = beta * np.linalg.norm(x, axis=1) * kmax
    return reach + lw_hi, 2.0 * reach + (lw_hi - lw_lo) > FIXED_SHIFT_SPREAD


def attention_tiled(x, keys, values, weights, beta: float, normalized: bool, *,
                    threads: int | None = None, query_tile: int | None = None,
                    key_tile: int | None = None) -> np.ndarray:
    """Attention output (before projection) by BLAS tiles and an online softmax.

    Same contract as :func:`spherepde.interaction.reference.attention_numpy`.

    Parameters
    ----------
    x : (m, d) queries
    keys : (n, d), values : (n, dv), weights : (n,) non-negative
    beta : float, finite and >= 0
    normalized : SA (True) or USA (False)
    threads : Python threads over the query tiles (default ``numba.get_num_threads()``);
        each calls the BLAS, which should then be single-threaded (OPENBLAS_NUM_THREADS=1)
    query_tile, key_tile : tile sizes (memory O(threads·query_tile·key_tile)); default
        :data:`QUERY_TILE` × :data:`KEY_TILE`, or 256 × 1024 from d = :data:`WIDE_DIM`

    Returns
    -------
    (m, dv) float64 array
    """
    x = np.ascontiguousarray(x, dtype=np.float64)
    keys = np.ascontiguousarray(keys, dtype=np.float64)
    values = np.ascontiguousarray(values, dtype=np.float64)
    if x.ndim != 2 or keys.ndim != 2 or values.ndim != 2 or x.shape[1] != keys.shape[1] \
            or values.shape[0] != keys.shape[0]:
        raise ValueError(f"expected x (m, d), keys (n, d), values (n, dv); got x {x.shape}, "
                         f"keys {keys.shape}, values {values.shape}")
    wide_d = x.shape[1] >= WIDE_DIM
    query_tile = (256 if wide_d else QUERY_TILE) if query_tile is None else int(query_tile)
    key_tile = (1024 if wide_d else KEY_TILE) if key_tile is None else int(key_tile)
    if query_tile < 1 or key_tile < 1:
        raise ValueError(f"tile sizes must be >= 1; got query_tile={query_tile}, "
                         f"key_tile={key_tile}")
    beta = float(beta)
    m, n, dv = x.shape[0], keys.shape[0], values.shape[1]
    out = np.empty((m, dv))
    if m == 0:
        return out
    if n == 0:
        out[:] = np.nan if normalized else 0.0  # 0/0 as the other kernels give
        return out
    logw = log_weights(weights)
    bound, wide = _bounds(x, keys, logw, beta)
    xb = beta * x
    starts = range(0, m, query_tile)

    def work(q0):
        if local:
            _SET_LOCAL_BLAS_THREADS(1)
        q1 = min(m, q0 + query_tile)
        return _query_tile(xb[q0:q1], keys, values, logw, bound[q0:q1],
                           bool(wide[q0:q1].any()), key_tile)

    threads = get_num_threads() if threads is None else int(threads)
    # one-thread BLAS whatever the tile threads, so that the result does not depend on them
    local = _SET_LOCAL_BLAS_THREADS is not None
    found = _GET_BLAS_THREADS() if local else None
    try:
        if threads > 1 and len(starts) > 1:
            parts = list(_pool(threads).map(work, starts))
        else:
            parts = [work(q0) for q0 in starts]
    finally:
        if local:  # the count this process had, whatever the tiles left (see above)
            _SET_LOCAL_BLAS_THREADS(found)
    acc = np.concatenate([p[0] for p in parts])
    s = np.concatenate([p[1] for p in parts])
    shift = np.concatenate([p[2] for p in parts])
    if normalized:
        with np.errstate(invalid="ignore", divide="ignore"):  # s = 0: no live atom, NaN
            return np.divide(acc, s[:, None], out=out)
    with np.errstate(divide="ignore"):
        log_z = shift + np.log(s)
    check_usa_overflow(float(log_z.max()), beta)
    # e^{m_i} in two factors: e^{m_i} alone may overflow where the result does not
    m1 = np.minimum(shift, 700.0)
    out[:] = (acc * np.exp(shift - m1)[:, None]) * np.exp(m1)[:, None]
    return out


register_kernel("tiled", attention_tiled)
