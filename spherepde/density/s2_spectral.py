r"""Spectral (spherical-harmonic) solver of the mean-field equation on S^2.

.. math:: \partial_t\rho + \operatorname{div}_S(\rho\, X[\rho]) = 0, \qquad
          \rho = \sum_{\ell\le L}\sum_m \rho_{\ell m} Y_{\ell m}.

One right-hand side:

1. synthesize rho on the *dealiased* Gauss grid (3/2 rule: ``nlat = ceil(3(L+1)/2)``,
   ``nlon >= 3L + 3``), where the product rho·X of a degree-L density and a velocity of degree
   about L + 2 is integrated exactly against the degree-L test functions (Gauss with nlat
   nodes is exact to degree 2 nlat - 1 >= 3L + 2). This holds when X is band-limited (USA,
   whose numerator is a Funk–Hecke convolution of rho; zero temperature). For SA, X = N/G is
   not, and an aliasing error remains; it falls geometrically in L (measured in
   tests/test_spectral.py::test_rotation_B_is_marched_in_its_axis_frame);
2. the flux F = rho X[rho] there, from the velocity operator chosen at construction
   (:mod:`spherepde.interaction.operators`): (a) Funk–Hecke when B = c·O, (b) direct
   quadrature over the dealiased grid through an interaction kernel for general B, with
   weights = quadrature weight × rho, (c) the zero-temperature local field, or on request
   (d) the sub-quadratic Chebyshev–Funk–Hecke operator for general B;
3. its divergence by a vector (spheroidal) analysis,
   :math:`(\operatorname{div}F)_{\ell m} = -\ell(\ell+1) S_{\ell m}`;
4. the filter (a spectral hyperviscosity, see :class:`SpectralSolver`).

The l = 0 coefficient has zero tendency by construction (l(l+1) = 0, filter rate 0), so the
mass is conserved to round-off.
"""
from __future__ import annotations

import math

import numpy as np

from ..interaction.operators import (
    ChebyshevFunkHecke,
    DirectQuadrature,
    FunkHeckeS2,
    ZeroTemperature,
    choose_operator,
    operator_registry,
)
from ..model import Model
from ..sphere import GaussGrid, as_points, rotation_axis_frame
from ..transforms.sht import evaluate_points, fft_size, get_backend, lm_arrays
from .base import (
    MASS_RTOL,
    DensitySolution,
    Resolution,
    check_mass,
    check_values,
    density_callable,
)
from .common import RESOLUTION_TOL, SpectralDensitySolver, warn_resolution

__all__ = ["SpectralSolver", "SpectralSolution"]

SQRT_4PI = math.sqrt(4.0 * math.pi)

#: The velocity operators of :class:`SpectralSolver`: name -> build(solver, model, fac).
OPERATORS = operator_registry("velocity operator of SpectralSolver", {
    "funk_hecke": lambda s, model, fac: FunkHeckeS2(model, s.sht, fac),
    "direct": lambda s, model, fac: DirectQuadrature(model, s.grid.points, s.grid.weights,
                                                     s._tangent_frame, s.kernel),
    "chebyshev": lambda s, model, fac: ChebyshevFunkHecke(model, s.lmax, s.grid.points,
                                                          s.grid.weights, s._tangent_frame),
    "zero_temperature": lambda s, model, fac: ZeroTemperature(model, s.grid.points,
                                                              s.grid.weights, s._tangent_frame),
})


def real_inner(a, b, m):
    r""":math:`\int f g\,dA` from the coefficients of two real fields (m >= 0 storage)."""
    w = np.where(m == 0, 1.0, 2.0)
    return float(np.sum(w * (a * np.conj(b)).real))


class SpectralSolution(DensitySolution):
    r"""The densities at the output times of :meth:`SpectralSolver.solve`.

    Besides those of :class:`spherepde.density.base.DensitySolution`, it has these attributes.

    Attributes
    ----------
    coefficients : (T, nlm) complex, real-harmonic coefficients in the m-major layout of
        :func:`spherepde.transforms.sht.lm_arrays`
    lmax : int
    grid_shape : (nlat, nlon) of the solver's dealiased Gauss grid
    sht_library : the SHT library the solver used
    diagnostics : ``negative_mass`` is the integral of min(rho, 0) on the dealiased grid,
        ``energy`` :math:`\frac1{2\beta}\iint e^{\beta\langle x,By\rangle}\rho\rho`
    """

    kind = "S2"

    def __init__(self, times, coefficients, model, initial_measure, diagnostics, path="",
                 stats=None, lmax=None, grid_shape=None, sht="auto"):
        super().__init__(times, coefficients, model, initial_measure, diagnostics, path, stats)
        nlm = self.coefficients.shape[-1]
        self.lmax = int(lmax) if lmax is not None else int(round((math.sqrt(8 * nlm + 1) - 3) / 2))
        self.grid_shape = grid_shape or (self.lmax + 2, fft_size(2 * self.lmax + 2))
        self.sht_library = sht
        self.l, self.m = lm_arrays(self.lmax)
        self._sht_cache = None

    def density(self, i: int, x) -> np.ndarray:
        """rho at output i, at points x: (..., 3) -> (...)."""
        x = as_points(x, 3)
        return evaluate_points(self.coefficients[i], self.lmax, x)

    def grid_values(self, i: int, nlat: int | None = None, nlon: int | None = None):
        """(GaussGrid, values) of rho at output i on a Gauss grid (default: the solver's
        dealiased grid)."""
        nlat = nlat or self.grid_shape[0]
        nlon = nlon or self.grid_shape[1]
        try:
            cls = get_backend(self.sht_library)
        except (ImportError, ValueError):  # saved elsewhere with another SHT library
            cls = get_backend("auto")
        if nlat < max(cls.min_nlat, self.lmax + 1) or nlon < 2 * self.lmax + 1:
            grid = GaussGrid(nlat, nlon)
            return grid, evaluate_points(self.coefficients[i], self.lmax, grid.points)
        key = (cls.name, nlat, nlon)
        if self._sht_cache is None or self._sht_cache[0] != key:  # one transform per grid
            self._sht_cache = (key, cls(self.lmax, nlat, nlon))
        sht = self._sht_cache[1]
        return sht.grid(), sht.synthesis(self.coefficients[i])

    def quadrature(self, i: int):
        grid, vals = self.grid_values(i)
        return grid.points, grid.weights, vals

    def xarray_space(self):
        """The density on the solver's Gauss grid: dims (lat, lon) in degrees."""
        grid = self.grid_values(0)[0]
        vals = np.stack([self.grid_values(i)[1] for i in range(len(self))])
        coords = {"lat": ("lat", 90.0 - np.degrees(grid.theta),
                          {"units": "degrees_north", "standard_name": "latitude",
                           "long_name": "latitude (Gauss-Legendre nodes)"}),
                  "lon": ("lon", np.degrees(grid.phi),
                          {"units": "degrees_east", "standard_name": "longitude",
                           "long_name": "longitude"})}
        return ("lat", "lon"), coords, vals, "sr-1", "token density against surface area"

    def mass(self, i: int) -> float:
        return SQRT_4PI * float(self.coefficients[i][0].real)

    def arrays(self) -> dict:
        return dict(lmax=np.int64(self.lmax), grid_shape=np.array(self.grid_shape),
                    sht=np.str_(self.sht_library))

    @classmethod
    def from_arrays(cls, z, **common):
        sht = z["sht"]
        return cls(**common, lmax=int(z["lmax"]), grid_shape=tuple(int(v) for v in z["grid_shape"]),
                   sht=str(sht))

    def __repr__(self) -> str:
        return (f"SpectralSolution(lmax={self.lmax}, {self.times.size} times in "
                f"[{self.times[0]:g}, {self.times[-1]:g}], path={self.path})")


#: The largest lmax a SpectralSolver accepts: its construction stays within seconds to minutes.
MAX_LMAX = 1024


class SpectralSolver(SpectralDensitySolver):
    r"""Spherical-harmonic solver for :math:`\partial_t\rho + \operatorname{div}(\rho X[\rho]) = 0`
    on S^2, SA and USA, any Q, K, V, beta in [0, inf].

    Parameters
    ----------
    model : :class:`spherepde.Model` with d = 3
    lmax : int
        Truncation degree L of the density.
    sht : "auto" | "shtns" | "ducc0"
        SHT library of :data:`spherepde.transforms.sht.SHT_LIBRARIES` ("auto": shtns when
        importable, ducc0 otherwise).
    path : "auto" | "funk_hecke" | "direct" | "chebyshev"
        Velocity operator (:mod:`spherepde.interaction.operators`); "auto" takes Funk–Hecke
        when B = c·orthogonal, direct quadrature otherwise (O(n^2) in the grid size n), and
        the zero-temperature field when beta = inf. "chebyshev" (needs ducc0) is the
        sub-quadratic operator for general B (Funk–Hecke multipliers expanded in Chebyshev
        polynomials of kappa = beta |B^T x|, off-grid synthesis).
    scheme : name in :data:`spherepde.timestepping.SCHEMES`
        Default "dopri5": adaptive, with ``rtol``/``atol`` (atol relative to the largest initial
        coefficient) and steps capped by the CFL bound. At the defaults the local time error per
        unit time is ~1e-9 relative, below the spatial truncation error for lmax up to where the
        density is resolved to ~1e-9 (measured in tests/test_spectral.py).
    dt : float, optional
        Fixed step for the non-adaptive schemes (default: the CFL step), first step for dopri5.
    cfl : float
        CFL number: steps are at most ``cfl / ((L + 1) max|X|)``, recomputed at every output
        time (the advective eigenvalues of degree L are about (L + 1/2)|X|; explicit RK4 and
        dopri5 are stable to ~2.8 on the imaginary axis).
    filter_strength, filter_order : float, int
        The spectral filter is a hyperviscosity :math:`-\nu_\ell\rho_{\ell m}` added to the
        tendency, :math:`\nu_\ell = s\,U_0(\ell/L)^p` with U0 the largest initial speed: the top
        degree loses one e-fold per radian travelled, degrees below 0.8 L less than
        :math:`0.8^{36} \approx 3\cdot10^{-4}` of that. It only touches the unresolved tail, and
        its error is of the size of the truncation error (Williamson case 1 at L = 16: 2e-5
        with the filter, 3e-6 without; at L = 24 and above it is below the time error).
        ``filter_strength=0`` switches it off.
    dealias : float
        Oversampling of the flux grid (1.5 = the 3/2 rule).
    mass_rtol, resolution_tol : float
        Checks of the initial density: its integral must be 1 within ``mass_rtol``; the part
        beyond degree L (relative L2 norm) above ``resolution_tol`` gives a ResolutionWarning.
    kernel : str
        Interaction kernel of :func:`spherepde.interaction.attention` for the direct operator.

    Examples
    --------
    >>> import numpy as np, spherepde as sp
    >>> model = sp.Model(beta=1.0)
    >>> mu0 = sp.measures.VonMisesFisher([0, 0, 1.0], 2.0)
    >>> sol = sp.SpectralSolver(model, lmax=16).solve(mu0, [0.0, 0.5])
    >>> bool(abs(sol.diagnostics["mass"][-1] - 1) < 1e-12)
    True
    """

    d = 3
    solution_class = SpectralSolution

    def __init__(self, model, lmax: int, *, sht: str = "auto", path: str = "auto",
                 scheme: str = "dopri5", dt: float | None = None, rtol: float = 1e-9,
                 atol: float = 1e-11, cfl: float = 1.0, filter_strength: float = 1.0,
                 filter_order: int = 36, dealias: float = 1.5, mass_rtol: float = MASS_RTOL,
                 resolution_tol: float = RESOLUTION_TOL, kernel: str = "auto"):
        super().__init__(model, lmax, "lmax", scheme=scheme, dt=dt, rtol=rtol, atol=atol,
                         cfl=cfl, filter_strength=filter_strength, filter_order=filter_order,
                         dealias=dealias, mass_rtol=mass_rtol, resolution_tol=resolution_tol)
        if self.degree > MAX_LMAX:  # the grids and operators grow like lmax^2..lmax^3
            raise ValueError(f"lmax = {self.degree} is above the largest supported degree "
                             f"{MAX_LMAX} (a grid of {MAX_LMAX + 2} x {4 * MAX_LMAX} nodes); "
                             "lower lmax")
        name, fac = choose_operator(model, path, 3, OPERATORS)
        self.lmax = lmax = self.degree
        self.kernel = kernel
        self.sht_class = get_backend(sht)
        self.sht_library = self.sht_class.name
        # Gauss with nlat nodes is exact to degree 2 nlat - 1 >= 3L + 2 (flux x test function)
        nlat = max(int(math.ceil(dealias * (lmax + 1))), self.sht_class.min_nlat)
        nlon = fft_size(max(int(math.ceil(2 * dealias * (lmax + 1))), 2 * lmax + 2))
        self.sht = self.sht_class(lmax, nlat, nlon)
        self.grid = self.sht.grid()
        self.node_weights = self.grid.weights
        self.l, self.m = self.sht.l, self.sht.m
        self.degrees = self.l
        _, e_t, e_p = self.grid.frame
        self._tangent_frame = (e_t, e_p)
        self.operator = OPERATORS.get(name)(self, model, fac)
        self._frame = self._inner = None
        P = rotation_axis_frame(fac[1]) if name == "funk_hecke" else None
        if P is not None:
            # Conjugating by P turns B into c times a rotation about z, whose action on
            # coefficients is a phase per order: no Wigner rotation per right-hand side.
            # The equation is rotation-equivariant (B -> P^T B P, V -> P^T V P).
            conj = Model(K=P.T @ model.B @ P, V=P.T @ model.V @ P, beta=model.beta,
                         normalized=model.normalized)
            self._inner = SpectralSolver(
                conj, lmax, sht=self.sht_library, path="funk_hecke", scheme=scheme, dt=dt,
                rtol=rtol, atol=atol, cfl=cfl, filter_strength=filter_strength,
                filter_order=filter_order, dealias=dealias, mass_rtol=mass_rtol,
                resolution_tol=resolution_tol, kernel=kernel)
            self._frame = P

    # ------------------------------------------------------------------ the right-hand side
    def values(self, rho_lm):
        return self.sht.synthesis(rho_lm)

    def attention(self, rho_lm, rho_grid=None):
        """Attention output (before P_x) on the dealiased grid, (nlat, nlon, 3), and the scaled
        partition function G (Funk–Hecke and Chebyshev operators; None otherwise)."""
        if rho_grid is None and self.operator.needs_values:
            rho_grid = self.sht.synthesis(rho_lm)
        return self.operator.attention(rho_grid, rho_lm)

    def velocity(self, rho_lm, rho_grid=None):
        """The velocity X[rho] on the dealiased grid, (nlat, nlon, 3) tangent vectors."""
        if rho_grid is None and self.operator.needs_values:
            rho_grid = self.sht.synthesis(rho_lm)
        return self.operator.velocity(rho_grid, rho_lm)

    def rhs(self, t, rho_lm):
        """d rho_lm / dt (the model is autonomous; t is unused)."""
        rho = self.sht.synthesis(rho_lm)
        Ft, Fp = self.operator.flux(rho, rho_lm)
        return -self.sht.divergence(Ft, Fp) - self._nu * rho_lm

    def mass(self, rho_lm) -> float:
        return SQRT_4PI * float(rho_lm[0].real)

    # ------------------------------------------------------------------ input
    def project(self, density0) -> np.ndarray:
        """Coefficients (nlm,) of density0 truncated at lmax, after checking it (finite,
        integrating to 1, resolved at lmax)."""
        f = density_callable(density0, 3)
        L2 = max(2 * self.lmax, self.lmax + 16)
        big = self.sht_class(L2, max(L2 + 2, self.sht_class.min_nlat), fft_size(2 * L2 + 4))
        g = big.grid()
        vals = check_values(np.asarray(f(g.points), dtype=np.float64))
        if vals.shape != g.points.shape[:-1]:
            raise ValueError(f"the density callable must map points (..., 3) to values (...); "
                             f"got output shape {vals.shape} for input {g.points.shape}")
        a = big.analysis(vals)
        # a cap's Legendre coefficients decay like exp(-l^2 / (2 kappa))
        check_mass(SQRT_4PI * a[0].real, self.mass_rtol, resolves=Resolution(
            density0, f"the grid of lmax = {self.lmax}", f"its quadrature of degree {L2} gives",
            "lmax", lambda kappa: math.ceil(math.sqrt(2 * kappa * math.log(1e6))),
            "raise lmax, or widen the initial density (a smaller kappa)"))
        spec = np.bincount(big.l, weights=np.where(big.m == 0, 1.0, 2.0) * np.abs(a) ** 2,
                           minlength=L2 + 1)
        warn_resolution(spec, self.lmax, self.resolution_tol)
        return np.ascontiguousarray(a[big.l <= self.lmax])

    def check_state(self, y):
        y = np.asarray(y)
        if y.shape != self.l.shape:
            raise ValueError(f"coefficients for lmax = {self.lmax} must have shape "
                             f"{self.l.shape} (layout of spherepde.transforms.sht.lm_arrays); "
                             f"got {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ValueError("the initial coefficients contain NaN or inf")
        return np.ascontiguousarray(y, dtype=np.complex128)

    def solution_arrays(self) -> dict:
        return dict(lmax=self.lmax, grid_shape=(self.grid.nlat, self.grid.nlon),
                    sht=self.sht_library)

    # ------------------------------------------------------------------ the march
    def march(self, y0, times, progress=None, stop_negative_mass=None, on_output=None):
        if self._frame is None:
            return self.run(y0, times, progress, stop_negative_mass, on_output)
        # march rho'(x') = rho(P x') in the frame where B is c times a z-rotation (see
        # spherepde.sphere.rotation_axis_frame), then rotate each output back: x -> rho'(P^T x)
        P, inner = self._frame, self._inner
        inner._nu = self._nu
        back = None if on_output is None else (
            lambda i, t, y: on_output(i, t, y0 if i == 0 else self.sht.rotate(y, P)))
        ys, stats = inner.run(self.sht.rotate(y0, P.T), times, progress, stop_negative_mass,
                              back)
        return [y0] + [self.sht.rotate(y, P) for y in ys[1:]], stats
