r"""Fourier transforms of real fields on S^1, on the equispaced grid
:math:`\theta_j = 2\pi j/n` (:class:`spherepde.sphere.CircleGrid`).

A real field is stored by its coefficients :math:`c_k`, k = 0..K, of
:math:`f(\theta) = \sum_{|k|\le K} c_k e^{ik\theta}` with :math:`c_{-k} = \overline{c_k}`.
"""
from __future__ import annotations

import numpy as np

__all__ = ["synthesize", "analyze", "synthesize_two_sided"]


def synthesize(ck: np.ndarray, n: int) -> np.ndarray:
    r"""Values at :math:`\theta_j = 2\pi j/n` of the real field with coefficients ck (k = 0..K);
    ck: (..., K + 1) -> (..., n)."""
    K = ck.shape[-1] - 1
    if n < 2 * K + 2:
        raise ValueError(f"synthesis of {K} modes needs n >= {2 * K + 2} points; got {n}")
    buf = np.zeros(ck.shape[:-1] + (n // 2 + 1,), dtype=np.complex128)
    buf[..., : K + 1] = ck
    return np.fft.irfft(buf * n, n=n)


def analyze(f: np.ndarray, K: int) -> np.ndarray:
    """Coefficients k = 0..K of real samples f: (..., n) on the equispaced grid (exact if
    band-limited)."""
    n = f.shape[-1]
    return np.fft.rfft(f)[..., : K + 1] / n


def synthesize_two_sided(ck: np.ndarray, n: int) -> np.ndarray:
    r"""Values at :math:`\theta_j = 2\pi j/n` of :math:`\sum_k c_k e^{ik\theta}`, k = -Kp..Kp
    (ck: (2 Kp + 1,), complex; the field need not be real)."""
    Kp = (ck.shape[0] - 1) // 2
    if n < 2 * Kp + 1:
        raise ValueError(f"the S^1 grid needs n >= {2 * Kp + 1} points; got {n}")
    buf = np.zeros(n, dtype=np.complex128)
    buf[: Kp + 1] = ck[Kp:]
    buf[n - Kp:] = ck[:Kp]
    return np.fft.ifft(buf) * n
