r"""Plain numpy reference for the attention output, chunked so memory stays O(chunk·n).

For queries x_i, keys k_j = B y_j, values v_j = V y_j and weights w_j it returns

.. math::
    \mathrm{SA:}\ \frac{\sum_j w_j e^{\beta\langle x_i, k_j\rangle} v_j}
                       {\sum_j w_j e^{\beta\langle x_i, k_j\rangle}}, \qquad
    \mathrm{USA:}\ \sum_j w_j e^{\beta\langle x_i, k_j\rangle} v_j,

before the tangent projection. The softmax subtracts the row maximum (log-sum-exp), so
beta = 1e6 neither overflows nor produces NaN. USA has no such freedom: its value really is
of size e^{beta max<x,k>}, and a value beyond float64 raises instead of returning inf.
"""
from __future__ import annotations

import numpy as np

#: log of the largest finite float64, minus a margin for the sum over tokens.
LOG_FLOAT_MAX = 700.0


def usa_overflow_error(log_scale: float, beta: float) -> FloatingPointError:
    return FloatingPointError(
        f"the unnormalized (USA) velocity is of size e^{log_scale:.1f}, beyond float64, at "
        f"beta = {beta:g}; USA moves on the time scale e^(-beta): use normalized=True (SA), "
        "or a smaller beta")


def attention_numpy(x, keys, values, weights, beta: float, normalized: bool,
                    chunk: int = 1024) -> np.ndarray:
    """Attention output (before projection), numpy reference.

    Parameters
    ----------
    x : (m, d) queries
    keys : (n, d) B y_j
    values : (n, d) V y_j
    weights : (n,) non-negative
    beta : float, finite and >= 0
    normalized : bool
        True for SA (softmax), False for USA.
    chunk : int
        Number of queries per block; memory is O(chunk·n).

    Returns
    -------
    (m, d) array
    """
    m = x.shape[0]
    out = np.empty((m, values.shape[1]), dtype=np.result_type(x, values))
    logw = np.log(np.where(weights > 0, weights, 1.0))
    logw = np.where(weights > 0, logw, -np.inf)
    for s in range(0, m, chunk):
        logits = beta * (x[s:s + chunk] @ keys.T) + logw  # (c, n)
        mx = np.max(logits, axis=1, keepdims=True)
        e = np.exp(logits - mx)
        num = e @ values
        if normalized:
            out[s:s + chunk] = num / e.sum(axis=1, keepdims=True)
        else:
            top = float(mx.max())
            if top > LOG_FLOAT_MAX:
                raise usa_overflow_error(top, beta)
            out[s:s + chunk] = num * np.exp(mx)
    return out
