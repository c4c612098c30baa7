"""The velocity field X[mu] of SPEC §2, one module per way of computing it.

``attention(x, keys, values, weights, beta, normalized, backend)`` returns the attention
output before the tangent projection; :func:`velocity` applies P_x. Backends are registered
in ``BACKENDS``; all agree with the numpy reference to round-off.
"""
from __future__ import annotations

import numpy as np

from .reference import attention_numpy
from .zero_temperature import hardmax_attention, zero_temperature_attention

__all__ = ["BACKENDS", "register_backend", "available_backends", "attention",
           "zero_temperature_attention", "hardmax_attention"]

#: name -> callable(x, keys, values, weights, beta, normalized) -> (m, d)
BACKENDS: dict = {"numpy": attention_numpy}


def register_backend(name: str, fn) -> None:
    BACKENDS[name] = fn


def available_backends() -> list[str]:
    _load_optional()
    return sorted(BACKENDS)


#: optional backend name -> module that registers it on import
_OPTIONAL = {"numba": "fused", "torch": "torch_backend"}


def _load_optional(name: str | None = None) -> None:
    """Import optional backends on first use (numba compiles, torch is heavy): only the
    module of backend ``name`` when given, so that asking for numba never imports torch."""
    mods = _OPTIONAL.values() if name is None else [_OPTIONAL[name]] if name in _OPTIONAL else []
    for mod in mods:
        try:
            __import__(f"{__name__}.{mod}")
        except ImportError:
            pass


def attention(x, keys, values, weights, beta: float, normalized: bool = True,
              backend: str = "auto") -> np.ndarray:
    """Attention output sum_j softmax_j(beta <x, k_j> + log w_j) v_j (SA) or its
    unnormalized version (USA), for queries x: (m, d), keys/values: (n, d), weights: (n,).

    ``backend="auto"`` takes the fused numba kernel for large problems when it is available.
    """
    if backend == "auto":
        backend = "numpy"
        if x.shape[0] * keys.shape[0] >= 1 << 20:
            _load_optional("numba")
            if "numba" in BACKENDS:
                backend = "numba"
    if backend not in BACKENDS:
        _load_optional(backend)
    try:
        fn = BACKENDS[backend]
    except KeyError:
        raise ValueError(f"unknown or unavailable interaction backend {backend!r}; "
                         f"available: {sorted(BACKENDS)}") from None
    return fn(x, keys, values, weights, beta, normalized)
