"""Compile the numba kernels once, at install time (``scripts/setup.sh``).

numba compiles a kernel at its first call and keeps the machine code in its on-disk cache
(``cache=True``), keyed by the CPU and its features. On a fresh install the first
``spherepde run`` would otherwise spend about 50 s of its 2 minutes compiling (measured on
the 2-core machine: 136 s cold against 84 s with the caches filled), most of it in the
harmonic kernel's far-field fallback, which only a concentrated cloud reaches. :func:`warm_up`
runs one small instance of everything the main job uses, with the same argument types, and
returns the seconds it took. Run it with ``python -m spherepde.app.warmup``: it first makes the
CPU-feature choice of :func:`spherepde.use_wide_vectors` (numba's cache is keyed by the
features, so a program that loads these caches makes the same call before it compiles).
"""
from __future__ import annotations

import time
import warnings

import numpy as np

__all__ = ["warm_up"]

#: A tiny scenario with every solver of the main job (particles, spectral, finite volumes at
#: a finite beta and at zero temperature, the coarse runs of the convergence check).
SCENARIO = {"run": {"betas": [16.0, "inf"], "t_end": 0.25, "n_times": 3},
            "particles": {"n": 64}, "spectral": {"lmax": 8, "t_end": 0.25},
            "finite_volume": {"n": 4, "betas": [16.0, "inf"]}}


def warm_up() -> float:
    """Compile (or load from the cache) the kernels of ``spherepde run``; returns seconds."""
    from ..interaction.fused import attention_numba, log_partition_numba
    from ..interaction.harmonic import HarmonicField
    from ..sphere import rotation_about_axis
    from .config import validate_config
    from .scenario import run_one, tasks_of

    t0 = time.perf_counter()
    with warnings.catch_warnings():  # lmax = 8 does not resolve rho0: beside the point here
        warnings.simplefilter("ignore")
        for task in tasks_of(validate_config(SCENARIO)):
            run_one(task)
    # a late, concentrated cloud: the harmonic kernel's queries fall back to the far field
    rng = np.random.default_rng(0)
    sign = np.where(rng.random(2000) < 0.6, 1.0, -1.0)
    y = sign[:, None] * np.eye(3)[0] + 0.01 * rng.standard_normal((2000, 3))
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    w = np.full(len(y), 1.0 / len(y))
    O = rotation_about_axis([1.0, 1.0, 1.0], 0.9)
    for normalized in (True, False):
        c = 1.0 if normalized else 0.5
        HarmonicField(c * O, np.diag([1.0, 0.4, 0.0]) @ O, 1000.0,
                      normalized).attention_of_points(y, y, w)
    for beta in (4.0, 1000.0):  # the fused kernel's fixed-shift and checked-bound paths
        attention_numba(y, y, y, w, beta, True)
        log_partition_numba(y, y, w, beta)
    return time.perf_counter() - t0


if __name__ == "__main__":
    from .._numba_target import use_wide_vectors

    use_wide_vectors()
    print(f"spherepde: numba kernels compiled (or loaded) in {warm_up():.0f} s")
