r"""The velocity field X[mu]: interaction kernels, velocity operators and the energy.

Two layers (docs/theory.md states the equations):

- *kernels* compute the attention output of a discrete measure, the sum over atoms
  :math:`\sum_j \mathrm{softmax}_j(\beta\langle x, k_j\rangle + \log w_j)\, v_j` (SA) or its
  unnormalized version (USA), for queries x: (m, d), keys (n, d), values (n, dv), weights (n,).
  They live in the registry :data:`KERNELS` (numpy reference, fused numba, torch, and the
  moment-based harmonic field) and are chosen with ``kernel=`` everywhere; every kernel
  agrees with the numpy reference to round-off.
- *operators* (:mod:`spherepde.interaction.operators`) compute the field of a density given
  by its grid values or coefficients: Funk–Hecke (B = c·O), direct quadrature through a
  kernel, Chebyshev–Funk–Hecke (general B on S^2) and the zero-temperature field. A density
  solver picks one at construction.

:func:`attention` returns the output before the tangent projection;
:meth:`spherepde.Model.velocity` applies P_x.
"""
from __future__ import annotations

import numpy as np

from ..registry import Registry, renamed_keyword
from .reference import attention_numpy
from .zero_temperature import hardmax_attention, zero_temperature_attention

__all__ = ["KERNELS", "register_kernel", "available_kernels", "attention", "harmonic_applies",
           "zero_temperature_attention", "hardmax_attention", "AUTO_NUMBA_SIZE"]

#: Interaction kernels: name -> callable(x, keys, values, weights, beta, normalized) -> (m, dv).
KERNELS = Registry("interaction kernel")
KERNELS.register("numpy", attention_numpy)
# heavy or optional libraries: each module registers its kernel when first imported
KERNELS.register_module("numba", f"{__name__}.fused")
KERNELS.register_module("torch", f"{__name__}.torch_backend")
KERNELS.register_module("harmonic", f"{__name__}.harmonic")
KERNELS.register_module("tiled", f"{__name__}.tiled")

#: ``kernel="auto"`` takes numba from m·n >= this many query-key pairs (numpy below: no
#: thread start-up for tiny problems). Measured on the 2-core machine (benchmarks/particles.py
#: ``--numpy-crossover``): the fused kernel is already 1.7-5x faster at N = 128 (m·n = 2^14) and
#: 4-13x faster from N = 256 to 2048, at beta = 4, 64 and 1000.
AUTO_NUMBA_SIZE = 1 << 14


def register_kernel(name: str, fn) -> None:
    """Add an interaction kernel fn(x, keys, values, weights, beta, normalized) -> (m, dv)."""
    KERNELS.register(name, fn)


def available_kernels() -> list[str]:
    """The interaction kernels installed here."""
    return KERNELS.available()


# the names of the previous release
register_backend = register_kernel
available_backends = available_kernels


def harmonic_applies(m: int, n: int, *, kappa: float | None = None,
                     d: int | None = None) -> bool:
    """Whether ``kernel="auto"`` weighs the harmonic kernel at all: S^1 or S^2, finite
    kappa = beta·|B|_2, a problem big enough for a compiled kernel, the kernel installed."""
    return (kappa is not None and d in (2, 3) and bool(np.isfinite(kappa))
            and m * n >= AUTO_NUMBA_SIZE and KERNELS.installed("harmonic"))


def resolve_kernel(kernel: str, m: int, n: int, *, kappa: float | None = None,
                   d: int | None = None) -> str:
    """The kernel that ``kernel="auto"`` means for m queries and n keys (else ``kernel``).

    Given kappa = beta·|B|_2 and d (as :meth:`spherepde.Model.attention` does), "auto" takes
    the harmonic kernel on S^1 and S^2 where its measured cost model says it beats the fused
    kernel (:func:`spherepde.interaction.harmonic.harmonic_is_faster`)."""
    if kernel != "auto":
        return kernel
    if harmonic_applies(m, n, kappa=kappa, d=d):
        from .harmonic import harmonic_is_faster

        if harmonic_is_faster(m, n, kappa):
            return "harmonic"
    if d is not None and m * n >= AUTO_NUMBA_SIZE and KERNELS.installed("tiled"):
        from .tiled import tiled_is_faster

        if tiled_is_faster(m, n, d):
            return "tiled"
    return "numba" if m * n >= AUTO_NUMBA_SIZE else "numpy"


def attention(x, keys, values, weights, beta: float, normalized: bool = True,
              kernel: str = "auto", *, backend: str | None = None) -> np.ndarray:
    r"""Attention output before the tangent projection.

    .. math::
        \mathrm{SA:}\ \frac{\sum_j w_j e^{\beta\langle x_i, k_j\rangle} v_j}
                           {\sum_j w_j e^{\beta\langle x_i, k_j\rangle}}, \qquad
        \mathrm{USA:}\ \sum_j w_j e^{\beta\langle x_i, k_j\rangle} v_j .

    Parameters
    ----------
    x : (m, d) queries
    keys : (n, d), values : (n, dv), weights : (n,) non-negative
    beta : float, finite
    normalized : SA (True) or USA (False)
    kernel : name in :data:`KERNELS`, or "auto" (from m·n >= :data:`AUTO_NUMBA_SIZE` the
        tiled BLAS kernel where :func:`spherepde.interaction.tiled.tiled_is_faster`, i.e.
        d >= 16, else the fused numba kernel; numpy below)
    backend : the old name of ``kernel`` (deprecated)

    Returns
    -------
    (m, dv) array
    """
    kernel = renamed_keyword("kernel", kernel, "backend", backend, "auto")
    name = resolve_kernel(kernel, x.shape[0], keys.shape[0], d=x.shape[1])
    return KERNELS.get(name)(x, keys, values, weights, beta, normalized)
