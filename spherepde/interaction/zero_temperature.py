r"""The zero-temperature (beta = infinity) fields (docs/theory.md).

Local field, for measures with full support (Laplace principle):
:math:`X_\infty(x) = P_x A x / |B^\top x|` with A = V B^T. It does not depend on the measure.

Hardmax, for discrete measures: x_i moves by :math:`P_{x_i} V x_{j^*}` with
:math:`j^* = \arg\max_j \langle x_i, B x_j\rangle`, ties averaged.
"""
from __future__ import annotations

import numpy as np

#: Two logits closer than this (relative) count as a tie in hardmax.
HARDMAX_TIE_RTOL = 1e-12


def zero_temperature_attention(x, A, B) -> np.ndarray:
    """Unprojected zero-temperature attention output A x / |B^T x|, x: (m, d)."""
    return (x @ A.T) / np.linalg.norm(x @ B, axis=-1, keepdims=True)


def hardmax_attention(x, keys, values, weights, chunk: int = 1024) -> np.ndarray:
    """Unprojected hardmax output: the value of the best-aligned key, ties averaged.

    Atoms of zero weight are ignored.
    """
    m = x.shape[0]
    out = np.empty((m, values.shape[1]))
    alive = weights > 0
    for s in range(0, m, chunk):
        logits = x[s:s + chunk] @ keys.T
        logits[:, ~alive] = -np.inf
        mx = logits.max(axis=1, keepdims=True)
        tie = logits >= mx - HARDMAX_TIE_RTOL * np.maximum(1.0, np.abs(mx))
        out[s:s + chunk] = (tie @ values) / tie.sum(axis=1, keepdims=True)
    return out
