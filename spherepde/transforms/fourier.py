r"""Fourier transforms of real fields on S^1, on the equispaced grid
:math:`\theta_j = 2\pi j/n` (:class:`spherepde.sphere.CircleGrid`), and the threaded 2-D FFT of
the torus grids that the planned harmonic field uses (:func:`fft2`).

A real field is stored by its coefficients :math:`c_k`, k = 0..K, of
:math:`f(\theta) = \sum_{|k|\le K} c_k e^{ik\theta}` with :math:`c_{-k} = \overline{c_k}`.
"""
from __future__ import annotations

import os

import numpy as np

__all__ = ["synthesize", "analyze", "synthesize_two_sided", "fft2"]


def _threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover (not Linux)
        return max(1, os.cpu_count() or 1)


def fft2(a: np.ndarray, forward: bool = True, nthreads: int | None = None) -> np.ndarray:
    r"""The 2-D discrete Fourier transform over the last two axes, unnormalized both ways:
    :math:`\hat a_k = \sum_j a_j e^{\mp 2\pi i\, j\cdot k/N}` (``forward``: minus), so
    that ``np.fft.fft2(a) == fft2(a)`` and ``np.fft.ifft2(a) == fft2(a, False) / N``.

    Through ducc0.fft (2.3-3.5 times numpy's pocketfft on one core at the grid sizes of the
    harmonic field, measured in benchmarks/finite_volume.py ``threads``) with ``nthreads``
    threads (default: the cores this process may use); numpy's where ducc0 is missing.
    a: (..., M1, M2) -> complex (..., M1, M2)."""
    try:
        import ducc0
    except ImportError:  # pragma: no cover (ducc0 is a dependency of the harmonic field)
        return np.fft.fft2(a) if forward else np.fft.ifft2(a) * (a.shape[-2] * a.shape[-1])
    a = np.asarray(a)
    if not np.iscomplexobj(a):
        a = a.astype(np.complex128)
    return ducc0.fft.c2c(a, axes=(a.ndim - 2, a.ndim - 1), forward=forward, inorm=0,
                         nthreads=_threads() if nthreads is None else int(nthreads))


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
