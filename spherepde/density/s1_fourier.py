r"""Fourier solver of the mean-field equation on S^1 (d = 2).

With :math:`x = (\cos\theta, \sin\theta)` and :math:`\rho(\theta) = \sum_{|k|\le K}\rho_k
e^{ik\theta}` (density against arc length, so the uniform density is 1/(2 pi)):

.. math:: \partial_t\rho + \partial_\theta(\rho\,\dot\theta) = 0, \qquad
          \dot\theta = \langle e_\theta, \mathrm{Attn}[\rho](x)\rangle,
          \quad e_\theta = (-\sin\theta, \cos\theta).

Same contract as :class:`spherepde.density.SpectralSolver`: the flux on a 3/2-rule grid,
the attention by Bessel multipliers :math:`2\pi I_k(\beta c)` when B = c·(rotation or
reflection) (:func:`spherepde.interaction.funk_hecke.attention_s1`), by direct quadrature
through the shared kernels otherwise, or the zero-temperature field; explicit RK from the
shared registry with a CFL cap; the same hyperviscosity filter. The k = 0 coefficient has
zero tendency, so the mass is conserved to round-off.
"""
from __future__ import annotations

import math

import numpy as np

from .. import interaction
from ..interaction.funk_hecke import attention_s1, circular_multipliers
from ..io import save_npz
from ..measures import PointCloud
from ..model import Model
from ..registry import renamed_keyword
from ..sphere import as_points
from ..transforms.sht import fft_size
from .common import (MASS_RTOL, RESOLUTION_TOL, check_mass, check_settings, check_values,
                     choose_path, density_callable, direct_energy, hyperviscosity,
                     initial_measure, run_time_loop,
                     safe_exp_times, signed_attention, warn_resolution)

__all__ = ["FourierSolver", "FourierSolution"]


def synthesize(ck: np.ndarray, n: int) -> np.ndarray:
    r"""Values at :math:`\theta_j = 2\pi j/n` of the real field with coefficients ck (k = 0..K)."""
    K = ck.shape[-1] - 1
    if n < 2 * K + 2:
        raise ValueError(f"synthesis of {K} modes needs n >= {2 * K + 2} points; got {n}")
    buf = np.zeros(ck.shape[:-1] + (n // 2 + 1,), dtype=np.complex128)
    buf[..., : K + 1] = ck
    return np.fft.irfft(buf * n, n=n)


def analyze(f: np.ndarray, K: int) -> np.ndarray:
    """Coefficients k = 0..K of real samples f on the equispaced grid (exact if band-limited)."""
    n = f.shape[-1]
    return np.fft.rfft(f)[..., : K + 1] / n


class FourierSolver:
    r"""Fourier solver on S^1 for :math:`\partial_t\rho + \partial_\theta(\rho\dot\theta) = 0`
    (SPEC §2 with d = 2), SA and USA.

    Parameters
    ----------
    model : :class:`spherepde.Model` with d = 2
    kmax : int
        Largest wavenumber K.
    path, scheme, dt, rtol, atol, cfl, filter_strength, filter_order, dealias, mass_rtol,
    resolution_tol, kernel :
        As in :class:`spherepde.density.SpectralSolver` (with K for L).
    interaction_backend : str, deprecated
        The old name of ``kernel``.

    Examples
    --------
    >>> import numpy as np, spherepde as sp
    >>> model = sp.Model(d=2, beta=5.0, normalized=False)
    >>> f = lambda x: (1 + 0.01 * x[..., 0]) / (2 * np.pi)
    >>> sol = sp.FourierSolver(model, kmax=32).solve(f, [0.0, 1.0])
    >>> bool(abs(sol.diagnostics["mass"][-1] - 1) < 1e-12)
    True
    """

    def __init__(self, model, kmax: int, *, path: str = "auto", scheme: str = "dopri5",
                 dt: float | None = None, rtol: float = 1e-9, atol: float = 1e-11,
                 cfl: float = 1.0, filter_strength: float = 1.0, filter_order: int = 36,
                 dealias: float = 1.5, mass_rtol: float = MASS_RTOL,
                 resolution_tol: float = RESOLUTION_TOL, kernel: str = "auto",
                 interaction_backend: str | None = None):
        kernel = renamed_keyword("kernel", kernel, "interaction_backend", interaction_backend,
                                 "auto")
        kmax = check_settings(model, kmax, "kmax", rtol=rtol, atol=atol, cfl=cfl,
                              filter_strength=filter_strength, filter_order=filter_order)
        if dealias < 1.5:
            raise ValueError(f"dealias must be >= 1.5 (the 3/2 rule); got {dealias}")
        from ..timestepping import get_scheme

        get_scheme(scheme)
        self.model = model
        self.path, fac = choose_path(model, path, 2)
        self.kmax = kmax
        self.scheme, self.dt, self.rtol, self.atol, self.cfl = scheme, dt, rtol, atol, float(cfl)
        self.filter_strength, self.filter_order = float(filter_strength), int(filter_order)
        self.mass_rtol, self.resolution_tol = mass_rtol, resolution_tol
        self.kernel = kernel
        self.n = fft_size(max(int(math.ceil(2 * dealias * (kmax + 1))), 2 * kmax + 4))
        self.theta = 2.0 * np.pi * np.arange(self.n) / self.n
        self.points = np.stack([np.cos(self.theta), np.sin(self.theta)], axis=-1)
        self.weights = np.full(self.n, 2.0 * np.pi / self.n)
        self._e_theta = np.stack([-np.sin(self.theta), np.cos(self.theta)], axis=-1)
        self.k = np.arange(kmax + 1)
        if self.path == "funk_hecke":
            self.c, self.O = fac
            self._mult = circular_multipliers(kmax + 1, model.beta * self.c)
        elif self.path == "direct":
            self._keys = self.points @ model.B.T
            self._values = self.points @ model.V.T
        else:
            self._att0 = interaction.zero_temperature_attention(self.points, model.A, model.B)
        self._nu = np.zeros(kmax + 1)

    def attention(self, ck, rho=None):
        """Attention output (n, 2) on the dealiased grid and the scaled partition G (or None)."""
        m = self.model
        if self.path == "funk_hecke":
            att, G, _ = attention_s1(ck, self.n, self.c, self.O, m.V, m.beta, m.normalized,
                                     self._mult)
            return att, G
        if self.path == "zero_temperature":
            return self._att0, None
        if rho is None:
            rho = synthesize(ck, self.n)
        att = signed_attention(self.points, self._keys, self._values, self.weights * rho, m.beta,
                               m.normalized, kernel=self.kernel)
        return att, None

    def angular_velocity(self, ck, rho=None):
        r""":math:`\dot\theta` on the dealiased grid, (n,)."""
        att, _ = self.attention(ck, rho)
        return np.sum(att * self._e_theta, axis=-1)

    def rhs(self, t, ck):
        rho = synthesize(ck, self.n)
        flux = rho * self.angular_velocity(ck, rho)
        return -1j * self.k * analyze(flux, self.kmax) - self._nu * ck

    def cfl_step(self, ck):
        speed = float(np.max(np.abs(self.angular_velocity(ck))))
        if not np.isfinite(speed) or speed <= 0:
            return None
        return self.cfl / ((self.kmax + 1) * speed)

    def project(self, density0) -> np.ndarray:
        """Coefficients k = 0..K of density0 after checking it (finite, mass 1, resolved)."""
        f = density_callable(density0, 2)
        n2 = fft_size(max(4 * self.kmax + 8, 256))
        th = 2.0 * np.pi * np.arange(n2) / n2
        vals = check_values(np.asarray(f(np.stack([np.cos(th), np.sin(th)], axis=-1)),
                                       dtype=np.float64))
        if vals.shape != (n2,):
            raise ValueError(f"the density callable must map points (..., 2) to values (...); "
                             f"got output shape {vals.shape} for input ({n2}, 2)")
        c = np.fft.rfft(vals) / n2
        check_mass(2.0 * np.pi * c[0].real, self.mass_rtol, d=2)
        spec = np.abs(c) ** 2 * np.where(np.arange(c.size) == 0, 1.0, 2.0)
        warn_resolution(spec, self.kmax, self.resolution_tol, name="kmax")
        out = c[: self.kmax + 1].copy()
        out[0] = out[0].real
        return out

    def diagnostics(self, ck):
        rho = synthesize(ck, self.n)
        mass = 2.0 * np.pi * float(ck[0].real)
        neg = float(np.sum(self.weights * np.minimum(rho, 0.0)))
        m = self.model
        if m.zero_temperature or m.beta == 0:
            energy = math.nan
        elif self.path == "funk_hecke":
            _, G = self.attention(ck)
            energy = safe_exp_times(float(np.sum(self.weights * rho * G)), m.beta * self.c) / (
                2 * m.beta)
        else:
            energy = direct_energy(self.points, self.weights * rho, m.B, m.beta)
        return mass, float(rho.min()), neg, energy

    def solve(self, density0, times, progress=None, stop_negative_mass=None) -> "FourierSolution":
        """Evolve density0 (a measure on S^1 or a callable f(x), x: (..., 2)) to ``times``.

        ``stop_negative_mass``: as in :meth:`SpectralSolver.solve` (end early, keeping the
        times reached, once the density is no longer resolved)."""
        from ..timestepping import _check_times

        times = _check_times(times)
        y0 = self.project(density0)
        if self.filter_strength > 0:
            u0 = float(np.max(np.abs(self.angular_velocity(y0))))
            rate = self.filter_strength * (u0 if np.isfinite(u0) else 0.0)
            self._nu = hyperviscosity(self.k, self.kmax, rate, self.filter_order)
        else:
            self._nu = np.zeros(self.kmax + 1)
        states, stats = run_time_loop(self, y0, times, progress, stop_negative_mass)
        times = times[: len(states)]
        diag = np.array([self.diagnostics(y) for y in states])
        return FourierSolution(times, np.array(states), self.model, initial_measure(density0, 2),
                               dict(mass=diag[:, 0], min=diag[:, 1], negative_mass=diag[:, 2],
                                    energy=diag[:, 3]), n=self.n, path=self.path, stats=stats)


class FourierSolution:
    """The densities at the output times of :meth:`FourierSolver.solve`.

    Attributes: ``times`` (T,), ``coefficients`` (T, K + 1) complex (rho_k, k >= 0), ``kmax``,
    ``model``, ``initial_measure``, ``diagnostics`` (as for SpectralSolution), ``stats``.
    """

    def __init__(self, times, coefficients, model, initial_measure, diagnostics, n=None,
                 path="", stats=None):
        self.times = np.asarray(times, dtype=np.float64)
        self.coefficients = np.asarray(coefficients)
        self.kmax = self.coefficients.shape[-1] - 1
        self.model = model
        self.initial_measure = initial_measure
        self.diagnostics = diagnostics
        self.n = int(n or fft_size(3 * (self.kmax + 1)))
        self.path = path
        self.stats = stats or {}

    def __len__(self):
        return self.times.size

    def density(self, i: int, x) -> np.ndarray:
        """rho at output i at points x: (..., 2) -> (...)."""
        x = as_points(x, 2)
        th = np.arctan2(x[..., 1], x[..., 0])
        ck = self.coefficients[i]
        k = np.arange(1, self.kmax + 1)
        return ck[0].real + 2.0 * np.real(np.exp(1j * th[..., None] * k) @ ck[1:])

    def grid_values(self, i: int, n: int | None = None):
        n = n or self.n
        th = 2.0 * np.pi * np.arange(n) / n
        return np.stack([np.cos(th), np.sin(th)], axis=-1), synthesize(self.coefficients[i], n)

    def measure(self, i: int) -> PointCloud:
        """Output i as a PointCloud of the n grid angles weighted by (2 pi/n)·rho; negative
        values get weight 0 and the rest is rescaled to mass 1 (see negative_mass)."""
        pts, vals = self.grid_values(i)
        w = np.maximum(vals, 0.0)
        return PointCloud(pts, w / w.sum())

    def save(self, path) -> str:
        return save_npz(path, kind=np.str_("S1"), times=self.times,
                        coefficients=self.coefficients, n=np.int64(self.n),
                        path=np.str_(self.path),
                        **{f"diag_{k}": v for k, v in self.diagnostics.items()},
                        **self.model.to_arrays())

    @classmethod
    def load(cls, path) -> "FourierSolution":
        with np.load(path, allow_pickle=False) as z:
            if str(z["kind"]) != "S1":
                raise ValueError(f"{path} holds a {z['kind']} solution; use SpectralSolution.load")
            diag = {k[5:]: z[k] for k in z.files if k.startswith("diag_")}
            return cls(z["times"], z["coefficients"], Model.from_arrays(z), None, diag,
                       int(z["n"]), str(z["path"]))

    def __repr__(self) -> str:
        return (f"FourierSolution(kmax={self.kmax}, {self.times.size} times in "
                f"[{self.times[0]:g}, {self.times[-1]:g}], path={self.path})")
