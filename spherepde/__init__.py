"""spherepde: mean-field dynamics of self-attention on the sphere (the public surface; docs/theory.md states the equations).

>>> import numpy as np, spherepde as sp
>>> model = sp.Model(V=np.diag([1.0, 0.5, 0.25]), beta=np.inf)
>>> mu0 = sp.measures.Uniform(3)
>>> model.limit_measure(mu0).weights
array([0.5, 0.5])
"""
from . import exact, measures, sphere, timestepping
from .measures import PointCloud
from .model import AssumptionError, AssumptionReport, Model

__version__ = "0.1.0"

__all__ = ["Model", "AssumptionReport", "AssumptionError", "PointCloud", "measures", "sphere",
           "exact", "timestepping", "ParticleSolver", "Trajectory", "SpectralSolver",
           "FourierSolver", "FiniteVolumeSolver", "w2", "w2_to_limit", "__version__"]


def __getattr__(name):
    # Solvers and transport tools import heavier dependencies (numba, shtns, POT): load them
    # on first use so that `import spherepde` stays fast.
    lazy = {
        "ParticleSolver": ("particles", "ParticleSolver"),
        "Trajectory": ("particles", "Trajectory"),
        "SpectralSolver": ("density", "SpectralSolver"),
        "FourierSolver": ("density", "FourierSolver"),
        "FiniteVolumeSolver": ("density", "FiniteVolumeSolver"),
        "w2": ("wasserstein", "w2"),
        "w2_to_limit": ("wasserstein", "w2_to_limit"),
        "wasserstein": ("wasserstein", None),
        "particles": ("particles", None),
        "density": ("density", None),
        "spectral": ("density", None),  # the old name of the density package
        "interaction": ("interaction", None),
        "diagnostics": ("analysis.diagnostics", None),
        "analysis": ("analysis", None),
    }
    if name in lazy:
        import importlib

        mod_name, attr = lazy[name]
        mod = importlib.import_module(f"{__name__}.{mod_name}")
        return mod if attr is None else getattr(mod, attr)
    raise AttributeError(f"module 'spherepde' has no attribute {name!r}")
