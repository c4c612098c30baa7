r"""Fourier solver of the mean-field equation on S^1 (d = 2).

With :math:`x = (\cos\theta, \sin\theta)` and :math:`\rho(\theta) = \sum_{|k|\le K}\rho_k
e^{ik\theta}` (density against arc length, so the uniform density is 1/(2 pi)):

.. math:: \partial_t\rho + \partial_\theta(\rho\,\dot\theta) = 0, \qquad
          \dot\theta = \langle e_\theta, \mathrm{Attn}[\rho](x)\rangle,
          \quad e_\theta = (-\sin\theta, \cos\theta).

Same contract as :class:`spherepde.density.SpectralSolver`: the flux on a 3/2-rule grid,
the attention by a velocity operator chosen at construction
(:mod:`spherepde.interaction.operators`): Bessel multipliers :math:`2\pi I_k(\beta c)` when
B = c·(rotation or reflection), direct quadrature through an interaction kernel otherwise, or
the zero-temperature field; explicit RK from the shared registry with a CFL cap; the same
hyperviscosity filter. The k = 0 coefficient has
zero tendency, so the mass is conserved to round-off.
"""
from __future__ import annotations

import math

import numpy as np

from ..interaction.operators import (
    DirectQuadrature,
    FunkHeckeS1,
    ZeroTemperature,
    choose_operator,
    operator_registry,
)
from ..sphere import CircleGrid, as_points
from ..transforms.fourier import analyze, synthesize
from ..transforms.sht import fft_size
from .base import MASS_RTOL, DensitySolution, check_mass, check_values, density_callable
from .common import RESOLUTION_TOL, SpectralDensitySolver, warn_resolution

__all__ = ["FourierSolver", "FourierSolution", "synthesize", "analyze"]

#: The velocity operators of :class:`FourierSolver`: name -> build(solver, model, fac).
OPERATORS = operator_registry("velocity operator of FourierSolver", {
    "funk_hecke": lambda s, model, fac: FunkHeckeS1(model, s.grid, s.kmax, fac),
    "direct": lambda s, model, fac: DirectQuadrature(model, s.points, s.weights,
                                                     (s.grid.e_theta,), s.kernel),
    "zero_temperature": lambda s, model, fac: ZeroTemperature(model, s.points, s.weights,
                                                              (s.grid.e_theta,)),
})


#: The largest kmax the Fourier solver accepts (2^16 modes: a grid of ~2·10^5 nodes).
MAX_KMAX = 1 << 16

class FourierSolution(DensitySolution):
    """The densities at the output times of :meth:`FourierSolver.solve`.

    Attributes (besides those of :class:`spherepde.density.base.DensitySolution`):
    ``coefficients`` (T, K + 1) complex (rho_k, k >= 0), ``kmax``, ``n`` (the solver's grid).
    """

    kind = "S1"

    def __init__(self, times, coefficients, model, initial_measure, diagnostics, path="",
                 stats=None, n=None):
        super().__init__(times, coefficients, model, initial_measure, diagnostics, path, stats)
        self.kmax = self.coefficients.shape[-1] - 1
        self.n = int(n or fft_size(3 * (self.kmax + 1)))

    def density(self, i: int, x) -> np.ndarray:
        """rho at output i at points x: (..., 2) -> (...)."""
        x = as_points(x, 2)
        th = np.arctan2(x[..., 1], x[..., 0])
        ck = self.coefficients[i]
        k = np.arange(1, self.kmax + 1)
        return ck[0].real + 2.0 * np.real(np.exp(1j * th[..., None] * k) @ ck[1:])

    def grid_values(self, i: int, n: int | None = None):
        """(points (n, 2), values (n,)) of rho at output i on the equispaced grid."""
        grid = CircleGrid(n or self.n)
        return grid.points, synthesize(self.coefficients[i], grid.n)

    def quadrature(self, i: int):
        pts, vals = self.grid_values(i)
        return pts, None, vals  # equal weights 2 pi/n

    def xarray_space(self):
        """The density on the solver's equispaced grid: dim ``angle`` (radians)."""
        vals = np.stack([self.grid_values(i)[1] for i in range(len(self))])
        coords = {"angle": ("angle", CircleGrid(self.n).theta,
                            {"units": "radian",
                             "long_name": "angle theta, x = (cos theta, sin theta)"})}
        return ("angle",), coords, vals, "radian-1", "token density against arc length"

    def arrays(self) -> dict:
        return dict(n=np.int64(self.n))

    @classmethod
    def from_arrays(cls, z, **common):
        return cls(**common, n=int(z["n"]))

    def __repr__(self) -> str:
        return (f"FourierSolution(kmax={self.kmax}, {self.times.size} times in "
                f"[{self.times[0]:g}, {self.times[-1]:g}], path={self.path})")


class FourierSolver(SpectralDensitySolver):
    r"""Fourier solver on S^1 for :math:`\partial_t\rho + \partial_\theta(\rho\dot\theta) = 0`
    (d = 2), SA and USA.

    Parameters
    ----------
    model : :class:`spherepde.Model` with d = 2
    kmax : int
        Largest wavenumber K.
    path : "auto" | "funk_hecke" | "direct"
        Velocity operator, as in :class:`spherepde.density.SpectralSolver`.
    scheme, dt, rtol, atol, cfl, filter_strength, filter_order, dealias, mass_rtol,
    resolution_tol, kernel :
        As in :class:`spherepde.density.SpectralSolver` (with K for L).

    Examples
    --------
    >>> import numpy as np, spherepde as sp
    >>> model = sp.Model(d=2, beta=5.0, normalized=False)
    >>> f = lambda x: (1 + 0.01 * x[..., 0]) / (2 * np.pi)
    >>> sol = sp.FourierSolver(model, kmax=32).solve(f, [0.0, 1.0])
    >>> bool(abs(sol.diagnostics["mass"][-1] - 1) < 1e-12)
    True
    """

    d = 2
    solution_class = FourierSolution

    def __init__(self, model, kmax: int, *, path: str = "auto", scheme: str = "dopri5",
                 dt: float | None = None, rtol: float = 1e-9, atol: float = 1e-11,
                 cfl: float = 1.0, filter_strength: float = 1.0, filter_order: int = 36,
                 dealias: float = 1.5, mass_rtol: float = MASS_RTOL,
                 resolution_tol: float = RESOLUTION_TOL, kernel: str = "auto"):
        super().__init__(model, kmax, "kmax", scheme=scheme, dt=dt, rtol=rtol, atol=atol,
                         cfl=cfl, filter_strength=filter_strength, filter_order=filter_order,
                         dealias=dealias, mass_rtol=mass_rtol, resolution_tol=resolution_tol)
        if self.degree > MAX_KMAX:  # the grid and the operators grow like kmax (log kmax)
            raise ValueError(f"kmax = {self.degree} is above the largest supported degree "
                             f"{MAX_KMAX}; lower kmax")
        name, fac = choose_operator(model, path, 2, OPERATORS)
        self.kmax = kmax = self.degree
        self.kernel = kernel
        self.grid = CircleGrid(fft_size(max(int(math.ceil(2 * dealias * (kmax + 1))),
                                            2 * kmax + 4)))
        self.n = self.grid.n
        self.theta, self.points, self.weights = self.grid.theta, self.grid.points, self.grid.weights
        self.node_weights = self.grid.weights
        self.k = self.degrees = np.arange(kmax + 1)
        self.operator = OPERATORS.get(name)(self, model, fac)

    def values(self, ck):
        return synthesize(ck, self.n)

    def attention(self, ck, rho=None):
        """Attention output (n, 2) on the dealiased grid and the scaled partition G (or None)."""
        if rho is None and self.operator.needs_values:
            rho = synthesize(ck, self.n)
        return self.operator.attention(rho, ck)

    def angular_velocity(self, ck, rho=None):
        r""":math:`\dot\theta` on the dealiased grid, (n,)."""
        att, _ = self.attention(ck, rho)
        return np.sum(att * self.grid.e_theta, axis=-1)

    def rhs(self, t, ck):
        rho = synthesize(ck, self.n)
        (flux,) = self.operator.flux(rho, ck)
        return -1j * self.k * analyze(flux, self.kmax) - self._nu * ck

    def mass(self, ck) -> float:
        return 2.0 * np.pi * float(ck[0].real)

    def project(self, density0) -> np.ndarray:
        """Coefficients k = 0..K of density0 after checking it (finite, mass 1, resolved)."""
        f = density_callable(density0, 2)
        fine = CircleGrid(fft_size(max(4 * self.kmax + 8, 256)))
        vals = check_values(np.asarray(f(fine.points), dtype=np.float64))
        if vals.shape != (fine.n,):
            raise ValueError(f"the density callable must map points (..., 2) to values (...); "
                             f"got output shape {vals.shape} for input ({fine.n}, 2)")
        c = np.fft.rfft(vals) / fine.n
        check_mass(2.0 * np.pi * c[0].real, self.mass_rtol, d=2)
        spec = np.abs(c) ** 2 * np.where(np.arange(c.size) == 0, 1.0, 2.0)
        warn_resolution(spec, self.kmax, self.resolution_tol, name="kmax")
        out = c[: self.kmax + 1].copy()
        out[0] = out[0].real
        return out

    def check_state(self, y):
        y = np.asarray(y)
        if y.shape != (self.kmax + 1,):
            raise ValueError(f"coefficients for kmax = {self.kmax} must have shape "
                             f"({self.kmax + 1},) (k = 0..kmax); got {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ValueError("the initial coefficients contain NaN or inf")
        return np.array(y, dtype=np.complex128)

    def solution_arrays(self) -> dict:
        return dict(n=self.n)
