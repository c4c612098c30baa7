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

from .numerics import check_usa_overflow, log_weights


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
    logw = log_weights(weights)
    for s in range(0, m, chunk):
        logits = beta * (x[s:s + chunk] @ keys.T) + logw  # (c, n)
        mx = np.max(logits, axis=1, keepdims=True)
        e = np.exp(logits - mx)
        num = e @ values
        if normalized:
            out[s:s + chunk] = num / e.sum(axis=1, keepdims=True)
        else:
            check_usa_overflow(float(mx.max()), beta)
            out[s:s + chunk] = num * np.exp(mx)
    return out
