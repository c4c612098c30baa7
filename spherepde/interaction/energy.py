r"""The interaction energy, in one place for the diagnostics and every solver.

.. math::
    E_\beta(\mu) = \frac{1}{2\beta}\iint e^{\beta\langle x, By\rangle}\,d\mu(x)\,d\mu(y)
                 = \frac{1}{2\beta}\int Z(x)\,d\mu(x), \qquad
    Z(x) = \int e^{\beta\langle x, By\rangle}\,d\mu(y),

non-decreasing along SA and USA when Q = K = V = I (docs/theory.md). Every way of computing
the field also yields the partition function Z at its nodes, usually with a separate
log-scale (Z = partition · e^{log_scale}, since e^beta overflows long before the energy's
logarithm does): :func:`energy_from_partition` turns that into E_beta. A quadrature
:math:`\mu \approx \sum_i w_i \delta_{x_i}` (w_i = node weight × density, possibly signed for a
truncated density) gives :math:`E = \frac{1}{2\beta}\sum_i w_i Z(x_i)`.
"""
from __future__ import annotations

import math

import numpy as np

from .numerics import exp_times

__all__ = ["energy_from_partition", "log_partition", "quadrature_partition"]


def energy_from_partition(weights, partition, log_scale, beta: float, log: bool = False) -> float:
    r""":math:`E_\beta = \frac{1}{2\beta}\sum_i w_i\, p_i\, e^{s}` from the scaled partition.

    Parameters
    ----------
    weights : (...) quadrature weights of mu at the nodes (signed allowed)
    partition : (...) scaled partition p_i = Z(x_i) e^{-s}, same shape
    log_scale : float, s
    beta : float
    log : bool
        Return log E_beta (needs a positive sum), which stays finite where E_beta overflows.

    Returns
    -------
    float: NaN at beta = 0 (E_beta is infinite there) and at beta = inf.
    """
    beta = float(beta)
    if beta == 0 or not math.isfinite(beta):
        return math.nan
    s = float(np.sum(weights * partition))
    if log:
        return math.log(s) + float(log_scale) - math.log(2.0 * beta)
    return exp_times(s, float(log_scale)) / (2.0 * beta)


def log_partition(x, keys, weights, beta: float) -> np.ndarray:
    r""":math:`\log\sum_j w_j e^{\beta\langle x_i, k_j\rangle}` for queries x (m, d), keys (n, d),
    non-negative weights (n,); returns (m,), in O(m + n) memory (fused numba kernel)."""
    from .fused import log_partition_numba

    return log_partition_numba(x, keys, weights, beta)


def quadrature_partition(points, keys, weights, beta: float, log_scale: float, chunk: int = 2048):
    r"""Scaled partition :math:`p_i = \sum_j w_j e^{\beta\langle x_i, k_j\rangle - s}` for signed
    weights, points (m, d), keys (n, d), weights (n,); returns (m,).

    The caller picks the shift s (e.g. :math:`\beta\|B\|_2`, the largest possible logit on the
    sphere), so that nothing overflows unless the energy itself does."""
    out = np.empty(points.shape[0])
    for a in range(0, points.shape[0], chunk):
        out[a:a + chunk] = np.exp(beta * (points[a:a + chunk] @ keys.T) - log_scale) @ weights
    return out
