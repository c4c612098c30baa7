"""spherepde: mean-field dynamics of self-attention on the sphere (the public surface;
docs/theory.md states the equations).

>>> import numpy as np, spherepde as sp
>>> model = sp.Model(V=np.diag([1.0, 0.5, 0.25]), beta=np.inf)
>>> mu0 = sp.measures.Uniform(3)
>>> model.limit_measure(mu0).weights
array([0.5, 0.5])
"""
from . import exact, measures, sphere, timestepping
from ._numba_target import use_wide_vectors
from .measures import PointCloud
from .model import AssumptionError, AssumptionReport, Model

__version__ = "0.1.0"

# Solvers and transport tools import heavier dependencies (numba, shtns, POT): they load on
# first use so that `import spherepde` stays fast. name -> (module, attribute or None).
_LAZY = {
    "ParticleSolver": ("particles", "ParticleSolver"),
    "Trajectory": ("particles", "Trajectory"),
    "SpectralSolver": ("density", "SpectralSolver"),
    "SpectralSolution": ("density", "SpectralSolution"),
    "FourierSolver": ("density", "FourierSolver"),
    "FourierSolution": ("density", "FourierSolution"),
    "FiniteVolumeSolver": ("density", "FiniteVolumeSolver"),
    "FiniteVolumeSolution": ("density", "FiniteVolumeSolution"),
    "ResolutionWarning": ("density", "ResolutionWarning"),
    "ZonalSolver": ("density", "ZonalSolver"), "ZonalSolution": ("density", "ZonalSolution"),
    "w2": ("wasserstein", "w2"),
    "w2_to_limit": ("wasserstein", "w2_to_limit"),
    "wasserstein": ("wasserstein", None),
    "particles": ("particles", None),
    "density": ("density", None),
    "interaction": ("interaction", None),
    "transforms": ("transforms", None),
    "diagnostics": ("analysis.diagnostics", None),
    "analysis": ("analysis", None),
}

__all__ = ["Model", "AssumptionReport", "AssumptionError", "PointCloud", "measures", "sphere",
           "exact", "timestepping", "use_wide_vectors", *_LAZY, "__version__"]


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def __getattr__(name):
    if name in _LAZY:
        import importlib

        mod_name, attr = _LAZY[name]
        mod = importlib.import_module(f"{__name__}.{mod_name}")
        return mod if attr is None else getattr(mod, attr)
    raise AttributeError(f"module 'spherepde' has no attribute {name!r}")
