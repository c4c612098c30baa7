"""Spectral density solvers: spherical harmonics on S^2 (:class:`SpectralSolver`) and Fourier
on S^1 (:class:`FourierSolver`), over a thin SHT backend layer (:mod:`.backends`)."""
from ..transforms.sht import available_backends, get_backend
from .common import ResolutionWarning
from .finite_volume import FiniteVolumeSolution, FiniteVolumeSolver
from .s2_spectral import SpectralSolution, SpectralSolver

__all__ = ["SpectralSolver", "SpectralSolution", "FiniteVolumeSolver", "FiniteVolumeSolution",
           "ResolutionWarning", "available_backends",
           "get_backend"]

try:  # the S^1 solver lives in its own module
    from .s1_fourier import FourierSolution, FourierSolver  # noqa: F401

    __all__ += ["FourierSolver", "FourierSolution"]
except ImportError:  # pragma: no cover - while fourier.py is being written
    pass
