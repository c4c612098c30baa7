"""Density solvers of the mean-field equation: one solver base and one solution base
(:mod:`.base`), one file per discretisation: spherical harmonics on S^2
(:class:`SpectralSolver`, :mod:`.s2_spectral`) and Fourier modes on S^1
(:class:`FourierSolver`, :mod:`.s1_fourier`); finite volumes on the cubed sphere
(:class:`FiniteVolumeSolver`, :mod:`.finite_volume`)."""
from ..transforms.sht import available_backends, get_backend
from .base import DensitySolution, DensitySolver
from .common import ResolutionWarning
from .finite_volume import FiniteVolumeSolution, FiniteVolumeSolver
from .s1_fourier import FourierSolution, FourierSolver
from .s2_spectral import SpectralSolution, SpectralSolver
from .zonal import ZonalSolution, ZonalSolver  # noqa: F401  (zonal densities, any d)

__all__ = ["DensitySolver", "DensitySolution", "SpectralSolver", "SpectralSolution",
           "FourierSolver", "FourierSolution", "FiniteVolumeSolver", "FiniteVolumeSolution",
           "ResolutionWarning", "available_backends", "get_backend"]
