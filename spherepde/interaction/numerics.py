r"""The numerical guards every way of computing the attention shares, each in one place.

- :func:`log_weights`: :math:`\log w_j`, with :math:`-\infty` for atoms of zero weight (they
  then drop out of every softmax exactly);
- :func:`check_usa_overflow` and :func:`usa_scale`: the unnormalized (USA) field really is of
  size :math:`e^{\beta\max\langle x, By\rangle}`; beyond float64 it raises instead of
  returning inf;
- :func:`exp_times`: :math:`s\,e^{\lambda}` without a spurious overflow, for energies and
  partitions carried with a separate log-scale.
"""
from __future__ import annotations

import math
from typing import Final

import numpy as np

__all__ = ["LOG_FLOAT_MAX", "FASTMATH_REDUCE", "log_weights", "USAOverflowError",
           "usa_overflow_error", "check_usa_overflow", "usa_scale", "exp_times"]

#: log of the largest finite float64, minus a margin for the sum over tokens.
LOG_FLOAT_MAX = 700.0
#: The fastmath flags of the numba kernels' reductions: they may be reordered (SIMD), which
#: changes a result by round-off only. Compile-time (frozen into the kernels' cache): Final.
FASTMATH_REDUCE: Final = {"contract", "reassoc", "nsz", "nnan"}


def log_weights(weights) -> np.ndarray:
    """log w_j as float64, -inf where w_j <= 0; weights: (n,) -> (n,)."""
    w = np.ascontiguousarray(weights, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.where(w > 0, np.log(np.where(w > 0, w, 1.0)), -np.inf)


class USAOverflowError(FloatingPointError, ValueError):
    """A USA field beyond float64: an arithmetic limit that a bad input (beta too large for
    USA) causes, so it is also a ValueError."""


def usa_overflow_error(log_scale: float, beta: float) -> FloatingPointError:
    return USAOverflowError(
        f"the unnormalized (USA) velocity is of size e^{log_scale:.1f}, beyond float64, at "
        f"beta = {beta:g}; USA moves on the time scale e^(-beta): use normalized=True (SA), "
        "or a smaller beta")


def check_usa_overflow(log_scale: float, beta: float) -> None:
    """Raise :func:`usa_overflow_error` when a USA value of size e^{log_scale} leaves float64."""
    if log_scale > LOG_FLOAT_MAX:
        raise usa_overflow_error(log_scale, beta)


def usa_scale(kappa: float, beta: float) -> float:
    r""":math:`e^{\kappa}`, the factor that undoes the :math:`e^{-\kappa}` scaling of the
    Funk–Hecke multipliers in USA; raises when it leaves float64."""
    check_usa_overflow(kappa, beta)
    return math.exp(kappa)


def exp_times(s: float, log_scale: float) -> float:
    """s·e^{log_scale} without spurious overflow (inf only if the value is beyond float64)."""
    if s == 0:
        return 0.0
    try:
        return math.copysign(math.exp(math.log(abs(s)) + log_scale), s)
    except OverflowError:
        return math.copysign(math.inf, s)
