"""``spherepde info``: versions, the backends found, and where results go."""
from __future__ import annotations

import importlib
import os
import platform
from pathlib import Path

__all__ = ["environment", "info_text"]

#: Libraries reported, in this order: (import name, what it is for).
_LIBRARIES = (("numpy", "arrays"), ("scipy", "quadrature, optimisation"),
              ("numba", "fused particle kernels"), ("ducc0", "SHT backend"),
              ("shtns", "SHT backend (fastest)"), ("ot", "exact W2 (POT)"),
              ("torch", "GPU particle kernel"), ("xarray", "results as Datasets"),
              ("netCDF4", "NetCDF files"), ("dask", "sweeps"),
              ("distributed", "sweeps on clusters"),
              ("matplotlib", "figures"), ("PIL", "GIF animations"))


def _version(name):
    try:
        mod = importlib.import_module(name)
    except ImportError:
        return None, None
    except Exception as exc:  # an installed but broken library is reported, not fatal
        return f"broken ({type(exc).__name__})", None
    return getattr(mod, "__version__", "installed"), mod


def environment() -> dict:
    """What ``spherepde info`` prints, as data: versions, backends, threads, output folders."""
    from .. import __version__
    from .config import DEFAULT

    libs = {}
    mods = {}
    for name, why in _LIBRARIES:
        ver, mod = _version(name)
        libs[name] = (ver, why)
        mods[name] = mod
    out = {"spherepde": __version__, "python": platform.python_version(),
           "platform": platform.platform(), "cpus": os.cpu_count(), "libraries": libs}
    try:
        from ..transforms.sht import available_backends

        out["sht_backends"] = list(available_backends())
    except Exception as exc:  # pragma: no cover - reported
        out["sht_backends"] = [f"none ({exc})"]
    numba = mods.get("numba")
    if numba is not None:
        out["numba_threads"] = f"{numba.get_num_threads()} (NUMBA_NUM_THREADS to change)"
        features = numba.config.CPU_FEATURES or ""
        out["numba_vectors"] = ("512-bit (AVX-512; SPHEREPDE_NUMBA_WIDE=0 for LLVM's 256-bit "
                                "default)" if features.endswith("-prefer-256-bit") else
                                "LLVM's default for this CPU")
    torch = mods.get("torch")
    if torch is not None:
        cuda = torch.cuda.is_available()
        out["torch_cuda"] = (f"yes: {torch.cuda.get_device_name(0)}" if cuda else "no")
    from .plotting import mp4_writer_available

    out["mp4_animations"] = "yes (ffmpeg)" if mp4_writer_available() else \
        "no (install ffmpeg, or `pip install imageio-ffmpeg`, for MP4; GIFs use pillow)"
    out["results"] = {"spherepde run": str(Path(DEFAULT["output"]["dir"]).resolve()),
                      "spherepde sweep": str(Path("sweep-output").resolve())}
    return out


def info_text() -> str:
    env = environment()
    lines = [f"spherepde {env['spherepde']}  (Python {env['python']}, {env['platform']}, "
             f"{env['cpus']} CPUs)", "", "libraries:"]
    for name, (ver, why) in env["libraries"].items():
        lines.append(f"  {name:<12} {ver or 'not installed':<22} {why}")
    lines += ["", "backends:",
              f"  SHT (S^2 spectral solver): {', '.join(env['sht_backends']) or 'none'}"]
    if "numba_threads" in env:
        lines.append(f"  numba threads: {env['numba_threads']}")
        lines.append(f"  numba vectors: {env['numba_vectors']}")
    lines.append(f"  torch / CUDA: {env.get('torch_cuda', 'torch not installed')}")
    lines.append(f"  MP4 animations: {env['mp4_animations']}")
    lines += ["", "results go to (default; --out or [output] dir / [sweep] out to change):"]
    for cmd, where in env["results"].items():
        lines.append(f"  {cmd:<16} {where}")
    return "\n".join(lines)
