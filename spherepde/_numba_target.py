"""Let numba's kernels use the CPU's full vector width.

On CPUs with AVX-512, LLVM's tuning for recent Intel server cores (``prefer-256-bit``)
vectorizes loops with 256-bit registers only, to avoid the clock drop that 512-bit
instructions once caused. For this project's kernels, which are arithmetic-bound (the fused
attention kernel evaluates a degree-13 polynomial per pair), 512-bit registers are worth
more than that drop: measured on a 2-core Xeon (Emerald Rapids), the fused kernel does
8.6-9.1e8 instead of 5.2-5.8e8 pairs/s on one thread (``benchmarks/particles.py
--vector-width``), but only 1.05-1.3x more with both cores busy.

numba takes its target features from ``NUMBA_CPU_FEATURES`` when it builds its target
machine, i.e. at the first ``@njit`` anywhere in the process, and they are part of its cache
key (a change recompiles once, it never loads mismatched machine code). Importing
``spherepde`` changes nothing in the process environment; a program that wants the wide
vectors calls :func:`use_wide_vectors` (exported as ``spherepde.use_wide_vectors``) once,
before anything compiles. The warm-up of the install (``python -m spherepde.app.warmup``)
and the command line call it, so that they compile and load the same cached machine code.
It sets the host features plus ``-prefer-256-bit``:

- only if the host has AVX-512 (elsewhere nothing changes);
- never over a ``NUMBA_CPU_FEATURES`` that the user set;
- not at all with ``SPHEREPDE_NUMBA_WIDE=0`` in the environment;
- if something compiled with numba before the call, the setting comes too late to apply to
  that target; it is then harmless, and only the speed-up is lost.

The environment variable it sets is inherited by worker processes (Dask sweeps), so they
agree.
"""
from __future__ import annotations

import os
import sys

#: Set to 0 to keep LLVM's default vector width.
OPT_OUT = "SPHEREPDE_NUMBA_WIDE"


def wide_features() -> str | None:
    """The host's features plus ``-prefer-256-bit`` where the host has AVX-512, else None."""
    try:
        import llvmlite.binding as llvm
        features = llvm.get_host_cpu_features()
    except Exception:  # no llvmlite, or a host it cannot read: leave numba's defaults
        return None
    if not features.get("avx512f", False):
        return None
    return features.flatten() + ",-prefer-256-bit"


def use_wide_vectors() -> str | None:
    """Apply :func:`wide_features` to numba unless the user chose otherwise.

    Sets ``NUMBA_CPU_FEATURES`` in this process's environment (the one place spherepde does),
    so call it at the start of a program, before any numba compilation. Returns what was set
    (None when nothing was: no AVX-512, the user set the features, or the opt-out)."""
    if os.environ.get(OPT_OUT, "1").strip() == "0" or "NUMBA_CPU_FEATURES" in os.environ:
        return None
    features = wide_features()
    if features is None:
        return None
    os.environ["NUMBA_CPU_FEATURES"] = features
    numba = sys.modules.get("numba")
    if numba is not None and getattr(numba.config, "CPU_FEATURES", None) is None:
        numba.config.CPU_FEATURES = features  # read at import: set it too
    return features
