r"""torch backend for the attention output (CPU, or CUDA when available); optional.

Importing this module raises ImportError without torch, and the registry then simply lacks
"torch". The computation is the numpy reference's log-sum-exp softmax, blocked over queries
so that the scratch is at most :data:`MAX_BLOCK_ELEMENTS` logits (never the full N×N matrix
for large N):

.. math::
    \mathrm{SA:}\ \frac{\sum_j w_j e^{\beta\langle x_i,k_j\rangle} v_j}
                       {\sum_j w_j e^{\beta\langle x_i,k_j\rangle}},\qquad
    \mathrm{USA:}\ \sum_j w_j e^{\beta\langle x_i,k_j\rangle} v_j .

:func:`attention_torch` is the registered numpy-in/numpy-out backend (float64 by default);
:func:`attention_tensors` works on tensors already on a device (e.g. float32 on a GPU) and
returns a tensor.
"""
from __future__ import annotations

import numpy as np
import torch

from . import register_kernel
from .numerics import check_usa_overflow, log_weights

__all__ = ["attention_torch", "attention_tensors", "default_device", "MAX_BLOCK_ELEMENTS"]

#: Largest number of logits held at once (2^24 float64 = 128 MiB).
MAX_BLOCK_ELEMENTS = 1 << 24


def default_device() -> torch.device:
    """CUDA when a GPU is visible, else CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def attention_tensors(x, keys, values, logw, beta: float, normalized: bool):
    """Attention output for tensors on one device: x (m, d), keys (n, d), values (n, dv),
    logw (n,) log-weights (-inf for zero weight). Returns (out (m, dv), row_max (m,))."""
    m, n = x.shape[0], keys.shape[0]
    block = max(1, MAX_BLOCK_ELEMENTS // max(n, 1))
    out = torch.empty((m, values.shape[1]), dtype=x.dtype, device=x.device)
    row_max = torch.empty(m, dtype=x.dtype, device=x.device)
    kT = keys.T.contiguous()
    for s in range(0, m, block):
        logits = torch.addmm(logw[None, :], x[s:s + block], kT, alpha=beta)
        mx = logits.amax(dim=1, keepdim=True)
        e = torch.exp(logits - mx)
        num = e @ values
        if normalized:
            out[s:s + block] = num / e.sum(dim=1, keepdim=True)
        else:
            out[s:s + block] = num * torch.exp(mx)
        row_max[s:s + block] = mx[:, 0]
    return out, row_max


def attention_torch(x, keys, values, weights, beta: float, normalized: bool, device=None,
                    dtype=torch.float64) -> np.ndarray:
    """Registered backend: numpy in, numpy out, computed by torch on ``device``
    (default :func:`default_device`) in ``dtype`` (default float64)."""
    device = default_device() if device is None else torch.device(device)
    logw = log_weights(weights)
    def t(a):
        return torch.as_tensor(np.ascontiguousarray(a), dtype=dtype, device=device)

    with torch.no_grad():
        out, row_max = attention_tensors(t(x), t(keys), t(values), t(logw), float(beta),
                                         bool(normalized))
    if not normalized and row_max.numel():
        check_usa_overflow(float(row_max.max()), beta)
    return out.cpu().numpy().astype(np.float64, copy=False)


register_kernel("torch", attention_torch)
