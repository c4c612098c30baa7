"""spherepde: mean-field dynamics of self-attention on the sphere (see SPEC §5).

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
           "exact", "timestepping", "__version__"]


def __getattr__(name):
    # Solvers and transport tools import heavier dependencies (numba, shtns, POT): load them
    # on first use so that `import spherepde` stays fast.
    lazy = {
        "ParticleSolver": ("particles", "ParticleSolver"),
        "Trajectory": ("particles", "Trajectory"),
        "SpectralSolver": ("spectral", "SpectralSolver"),
        "FourierSolver": ("spectral", "FourierSolver"),
        "w2": ("wasserstein", "w2"),
        "w2_to_limit": ("wasserstein", "w2_to_limit"),
        "wasserstein": ("wasserstein", None),
        "particles": ("particles", None),
        "spectral": ("spectral", None),
        "interaction": ("interaction", None),
        "diagnostics": ("diagnostics", None),
    }
    if name in lazy:
        import importlib

        mod_name, attr = lazy[name]
        mod = importlib.import_module(f"{__name__}.{mod_name}")
        return mod if attr is None else getattr(mod, attr)
    raise AttributeError(f"module 'spherepde' has no attribute {name!r}")
