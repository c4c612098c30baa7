r"""What the two spectral solvers (spherical harmonics on S^2, Fourier on S^1) share beyond
:class:`spherepde.density.base.DensitySolver`: a truncation degree, the 3/2-rule grid, the
velocity operator picked at construction, the CFL cap, the hyperviscosity filter, the
resolution warning and the diagnostics on the grid."""
from __future__ import annotations

import warnings

import numpy as np

from .base import MASS_RTOL, DensitySolver, _check_number

__all__ = ["SpectralDensitySolver", "ResolutionWarning", "RESOLUTION_TOL", "warn_resolution",
           "hyperviscosity"]

#: Default tolerance on the relative L2 norm of the unresolved part of the initial density.
RESOLUTION_TOL = 1e-8


class ResolutionWarning(UserWarning):
    """The initial density has significant content beyond the chosen truncation."""


def warn_resolution(spectrum, lmax, tol, name="lmax"):
    """spectrum[l] = L2 norm squared of degree l (up to some L2 > lmax)."""
    total = float(spectrum.sum())
    if total <= 0:
        return 0.0
    tail = np.sqrt(np.cumsum(spectrum[::-1])[::-1] / total)  # tail[l] = rel. norm of degrees >= l
    rel = float(tail[lmax + 1]) if lmax + 1 < tail.size else 0.0
    if rel > tol:
        ok = np.nonzero(tail <= tol)[0]
        need = (f"about {name} = {int(ok[0]) - 1}" if ok.size else
                f"{name} > {tail.size - 1} (the analysis went no further)")
        warnings.warn(f"density0 is not resolved at {name} = {lmax}: the part beyond it has "
                      f"relative L2 norm {rel:.1e} (tolerance {tol:.0e}) and is dropped; "
                      f"{need} would resolve it", ResolutionWarning, stacklevel=5)
    return rel


def hyperviscosity(degree, top, strength, order):
    r"""Filter rates :math:`\nu (\ell/L)^p` with the rate at the top degree = strength."""
    return strength * (np.asarray(degree, dtype=np.float64) / max(top, 1)) ** order


class SpectralDensitySolver(DensitySolver):
    """A density solver with a truncation degree (lmax on S^2, kmax on S^1).

    Besides what :class:`~spherepde.density.base.DensitySolver` asks for (the operator on the
    dealiased grid, its weights, ``values(y)``), a subclass sets :attr:`degrees`, the degree of
    every coefficient (for the filter).

    It takes these parameters besides those of the base.

    Parameters
    ----------
    degree : int >= 1, named ``degree_name`` in messages
    filter_strength, filter_order : hyperviscosity :math:`\\nu_\\ell = s U_0 (\\ell/L)^p`
    dealias : oversampling of the flux grid (>= 1.5, the 3/2 rule)
    resolution_tol : a ResolutionWarning when the part of density0 beyond the degree has a
        relative L2 norm above this
    """

    def __init__(self, model, degree, degree_name, *, scheme="dopri5", dt=None, rtol=1e-9,
                 atol=1e-11, cfl=1.0, filter_strength=1.0, filter_order=36, dealias=1.5,
                 mass_rtol=MASS_RTOL, resolution_tol=RESOLUTION_TOL):
        super().__init__(model, scheme=scheme, dt=dt, rtol=rtol, atol=atol, cfl=cfl,
                         mass_rtol=mass_rtol)
        try:
            deg = int(degree)
        except (TypeError, ValueError):
            raise ValueError(f"{degree_name} must be an integer >= 1; got {degree!r}") from None
        if deg != degree or deg < 1:
            raise ValueError(f"{degree_name} must be an integer >= 1; got {degree!r}")
        _check_number("filter_strength", filter_strength, lambda v: v >= 0, ">= 0")
        _check_number("filter_order", filter_order, lambda v: v >= 1, ">= 1")
        if dealias < 1.5:
            raise ValueError(f"dealias must be >= 1.5 (the 3/2 rule) for an exact flux "
                             f"projection; got {dealias}")
        self.degree = deg
        self.degree_name = degree_name
        self.filter_strength, self.filter_order = float(filter_strength), int(filter_order)
        self.resolution_tol = resolution_tol
        self._nu = 0.0


    def step_hint(self) -> str:
        return (f"The density is likely no longer resolved at {self.degree_name} = {self.degree} "
                "(a truncated density dips below 0, and the flux can then blow up): raise "
                f"{self.degree_name}")
    def dt_max(self, t, y):
        r"""CFL cap ``cfl / ((degree + 1) max|X|)``: the advective eigenvalues of the top degree
        are about (degree + 1/2)|X|, and explicit RK4 and dopri5 are stable to ~2.8 on the
        imaginary axis."""
        speed = self.max_speed(y)
        if not np.isfinite(speed) or speed <= 0:
            return None
        return self.cfl / ((self.degree + 1) * speed)

    def prepare(self, y0):
        """Scale the filter by the initial speed U0: the top degree loses one e-fold per
        radian travelled."""
        if self.filter_strength > 0:
            u0 = self.max_speed(y0)
            rate = self.filter_strength * (u0 if np.isfinite(u0) else 0.0)
            self._nu = hyperviscosity(self.degrees, self.degree, rate, self.filter_order)
        else:
            self._nu = np.zeros(self.degrees.size)
