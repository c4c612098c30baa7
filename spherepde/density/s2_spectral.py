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
2. the attention output there by one of three paths: (a) Funk–Hecke when B = c·O
   (:mod:`spherepde.interaction.funk_hecke`), (b) direct quadrature over the dealiased grid
   through the shared interaction kernels (:func:`spherepde.interaction.attention`) for general
   B, with weights = quadrature weight × rho (where a truncated rho dips below 0 the positive
   and negative parts are summed separately, see
   :func:`spherepde.density.common.signed_attention`), (c) the zero-temperature local field;
   optionally (d) the sub-quadratic Chebyshev–Funk–Hecke path for general B;
3. the flux F = rho P_x(attention), its divergence by a vector (spheroidal) analysis,
   :math:`(\operatorname{div}F)_{\ell m} = -\ell(\ell+1) S_{\ell m}`;
4. the filter (a spectral hyperviscosity, see :class:`SpectralSolver`).

The l = 0 coefficient has zero tendency by construction (l(l+1) = 0, filter rate 0), so the
mass is conserved to round-off.
"""
from __future__ import annotations

import math

import numpy as np

from .. import interaction
from ..interaction.funk_hecke import (GeneralFunkHecke, attention_s2, funk_hecke_fields_s2,
                                     local_frame, spherical_multipliers)
from ..interaction.reference import LOG_FLOAT_MAX, usa_overflow_error
from ..io import save_npz
from ..measures import PointCloud
from ..model import Model
from ..registry import renamed_keyword
from ..sphere import GaussGrid, as_points
from ..transforms.sht import evaluate_points, fft_size, get_backend, lm_arrays
from .common import (MASS_RTOL, RESOLUTION_TOL, check_mass, check_settings, check_values,
                     choose_path, density_callable, direct_energy, hyperviscosity,
                     initial_measure, run_time_loop,
                     safe_exp_times, signed_attention, warn_resolution)

__all__ = ["SpectralSolver", "SpectralSolution"]

SQRT_4PI = math.sqrt(4.0 * math.pi)


def _flux_numpy(rho, G, Wr, wt, wp, C, normalized, scale, Ft, Fp):
    f = rho / G if normalized else rho * scale
    Ft[...] = f * (C[0] * Wr + C[1] * wt + C[2] * wp)
    Fp[...] = f * (C[3] * Wr + C[4] * wt + C[5] * wp)


try:  # one fused pass over the grid instead of a dozen numpy temporaries (10x at L = 255)
    import numba

    @numba.njit(cache=True, fastmath=False)
    def _flux_fused(rho, G, Wr, wt, wp, C, normalized, scale, Ft, Fp):
        for i in range(rho.shape[0]):
            for j in range(rho.shape[1]):
                f = rho[i, j] / G[i, j] if normalized else rho[i, j] * scale
                a, b, c = Wr[i, j], wt[i, j], wp[i, j]
                Ft[i, j] = f * (C[0, i, j] * a + C[1, i, j] * b + C[2, i, j] * c)
                Fp[i, j] = f * (C[3, i, j] * a + C[4, i, j] * b + C[5, i, j] * c)
except ImportError:  # pragma: no cover
    _flux_fused = _flux_numpy


def real_inner(a, b, m):
    r""":math:`\int f g\,dA` from the coefficients of two real fields (m >= 0 storage)."""
    w = np.where(m == 0, 1.0, 2.0)
    return float(np.sum(w * (a * np.conj(b)).real))


class SpectralSolver:
    r"""Spherical-harmonic solver for :math:`\partial_t\rho + \operatorname{div}(\rho X[\rho]) = 0`
    on S^2 (SPEC §2), SA and USA, any Q, K, V, beta in [0, inf].

    Parameters
    ----------
    model : :class:`spherepde.Model` with d = 3
    lmax : int
        Truncation degree L of the density.
    sht : "auto" | "shtns" | "ducc0"
        SHT library of :data:`spherepde.transforms.sht.SHT_LIBRARIES` ("auto": shtns when
        importable, ducc0 otherwise).
    path : "auto" | "funk_hecke" | "direct" | "chebyshev"
        Velocity path; "auto" takes Funk–Hecke when B = c·orthogonal, direct quadrature
        otherwise (O(n^2) in the grid size n), and the zero-temperature field when beta = inf.
        "chebyshev" (needs ducc0) is the sub-quadratic path for general B of
        :class:`spherepde.interaction.funk_hecke.GeneralFunkHecke` (Funk–Hecke multipliers
        expanded in Chebyshev polynomials of kappa = beta |B^T x|, off-grid synthesis).
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
        Interaction kernel of :func:`spherepde.interaction.attention` for the direct path.
    backend, interaction_backend : str, deprecated
        The old names of ``sht`` and ``kernel``.

    Examples
    --------
    >>> import numpy as np, spherepde as sp
    >>> model = sp.Model(beta=1.0)
    >>> mu0 = sp.measures.VonMisesFisher([0, 0, 1.0], 2.0)
    >>> sol = sp.SpectralSolver(model, lmax=16).solve(mu0, [0.0, 0.5])
    >>> bool(abs(sol.diagnostics["mass"][-1] - 1) < 1e-12)
    True
    """

    def __init__(self, model, lmax: int, *, sht: str = "auto", path: str = "auto",
                 scheme: str = "dopri5", dt: float | None = None, rtol: float = 1e-9,
                 atol: float = 1e-11, cfl: float = 1.0, filter_strength: float = 1.0,
                 filter_order: int = 36, dealias: float = 1.5, mass_rtol: float = MASS_RTOL,
                 resolution_tol: float = RESOLUTION_TOL, kernel: str = "auto",
                 backend: str | None = None, interaction_backend: str | None = None):
        sht = renamed_keyword("sht", sht, "backend", backend, "auto")
        kernel = renamed_keyword("kernel", kernel, "interaction_backend", interaction_backend,
                                 "auto")
        lmax = check_settings(model, lmax, "lmax", rtol=rtol, atol=atol, cfl=cfl,
                              filter_strength=filter_strength, filter_order=filter_order)
        self.model = model
        self._frame = self._inner = None
        self.path, fac = choose_path(model, path, 3)
        self.lmax = lmax
        self.sht_class = get_backend(sht)
        self.sht_library = self.sht_class.name
        self.scheme, self.dt, self.rtol, self.atol, self.cfl = scheme, dt, rtol, atol, float(cfl)
        from ..timestepping import get_scheme

        get_scheme(scheme)
        self.filter_strength, self.filter_order = float(filter_strength), int(filter_order)
        self.mass_rtol, self.resolution_tol = mass_rtol, resolution_tol
        self.kernel = kernel
        if dealias < 1.5:
            raise ValueError(f"dealias must be >= 1.5 (the 3/2 rule) for an exact flux projection; "
                             f"got {dealias}")
        # Gauss with nlat nodes is exact to degree 2 nlat - 1 >= 3L + 2 (flux x test function)
        nlat = max(int(math.ceil(dealias * (lmax + 1))), self.sht_class.min_nlat)
        nlon = fft_size(max(int(math.ceil(2 * dealias * (lmax + 1))), 2 * lmax + 2))
        self.sht = self.sht_class(lmax, nlat, nlon)
        self.grid = GaussGrid(nlat, nlon)
        self.l, self.m = self.sht.l, self.sht.m
        pts = self.grid.points
        frame = local_frame(nlat, nlon)  # (e_r, e_theta, e_phi) on the dealiased grid
        self._e_theta, self._e_phi = frame[1], frame[2]
        self._points_flat = pts.reshape(-1, 3)
        self._weights_flat = self.grid.weights.reshape(-1)
        if self.path == "funk_hecke":
            self.c, self.O = fac
            self._mult = spherical_multipliers(lmax, model.beta * self.c)
            # the attention is M [x Wr + wt e_theta + wp e_phi] / G with M = V O^T = A/c; the
            # flux needs its e_theta and e_phi components: C[a, b] = <e_a, M e_b>
            M = model.V @ self.O.T
            self._C = np.ascontiguousarray(np.stack(
                [np.sum(frame[a] * (frame[b] @ M.T), axis=-1) for a in (1, 2) for b in (0, 1, 2)]))
            kappa = model.beta * self.c
            if not model.normalized and kappa > LOG_FLOAT_MAX:
                raise usa_overflow_error(kappa, model.beta)
            self._usa_scale = math.exp(kappa) if not model.normalized else 1.0
            # M = m I (e.g. V = I, B = I): the radial part of W never reaches the flux
            self._radial = bool(np.abs(M - np.trace(M) / 3 * np.eye(3)).max()
                                > 1e-14 * np.abs(M).max())
            self._Ft = np.empty((nlat, nlon))
            self._Fp = np.empty((nlat, nlon))
            P = _rotation_frame(self.O)
            if P is not None:
                # Conjugating by P turns B into c times a rotation about z, whose action on
                # coefficients is a phase per order: no Wigner rotation per right-hand side.
                # The equation is rotation-equivariant (B -> P^T B P, V -> P^T V P).
                from ..model import Model

                conj = Model(K=P.T @ model.B @ P, V=P.T @ model.V @ P, beta=model.beta,
                             normalized=model.normalized)
                self._inner = SpectralSolver(
                    conj, lmax, sht=self.sht_library, path="funk_hecke", scheme=scheme, dt=dt,
                    rtol=rtol, atol=atol, cfl=cfl, filter_strength=filter_strength,
                    filter_order=filter_order, dealias=dealias, mass_rtol=mass_rtol,
                    resolution_tol=resolution_tol, kernel=kernel)
                self._frame = P
        elif self.path == "direct":
            self._keys = self._points_flat @ model.B.T
            self._values = self._points_flat @ model.V.T
        elif self.path == "chebyshev":
            self._gfh = GeneralFunkHecke(lmax, self._points_flat, model.B, model.V, model.beta,
                                         model.normalized)
        else:
            self._att0 = interaction.zero_temperature_attention(
                self._points_flat, model.A, model.B).reshape(pts.shape)
        self._nu = np.zeros(self.l.size)
        self._zeros = None

    # ------------------------------------------------------------------ the right-hand side
    def attention(self, rho_lm, rho_grid=None):
        """Attention output (before P_x) on the dealiased grid, (nlat, nlon, 3), and the scaled
        partition function G (Funk–Hecke path; None otherwise)."""
        m = self.model
        if self.path == "funk_hecke":
            att, G, _ = attention_s2(rho_lm, self.sht, self.c, self.O, m.V, m.beta, m.normalized,
                                     self._mult)
            return att, G
        if self.path == "zero_temperature":
            return self._att0, None
        if self.path == "chebyshev":
            att, G = self._gfh.attention(rho_lm)
            return att.reshape(self.grid.points.shape), G
        if rho_grid is None:
            rho_grid = self.sht.synthesis(rho_lm)
        w = self._weights_flat * rho_grid.reshape(-1)
        att = signed_attention(self._points_flat, self._keys, self._values, w, m.beta,
                               m.normalized, kernel=self.kernel)
        return att.reshape(self.grid.points.shape), None

    def velocity(self, rho_lm, rho_grid=None):
        """The velocity X[rho] on the dealiased grid, (nlat, nlon, 3) tangent vectors."""
        att, _ = self.attention(rho_lm, rho_grid)
        x = self.grid.points
        return att - np.sum(att * x, axis=-1, keepdims=True) * x

    def rhs(self, t, rho_lm):
        """d rho_lm / dt (the model is autonomous; t is unused)."""
        rho = self.sht.synthesis(rho_lm)
        if self.path == "funk_hecke":
            G, Wr, wt, wp = funk_hecke_fields_s2(rho_lm, self.sht, self.O, self._mult,
                                                 self._radial, self.model.normalized)
            if self._zeros is None:
                self._zeros = np.zeros_like(rho)
            Wr = self._zeros if Wr is None else Wr
            G = self._zeros if G is None else G  # USA: unused by the kernel
            _flux_fused(rho, G, Wr, wt, wp, self._C, self.model.normalized, self._usa_scale,
                        self._Ft, self._Fp)
            return -self.sht.divergence(self._Ft, self._Fp) - self._nu * rho_lm
        att, _ = self.attention(rho_lm, rho)
        F = rho[..., None] * att  # the radial part of att drops out of the e_theta/e_phi components
        Ft = np.sum(F * self._e_theta, axis=-1)
        Fp = np.sum(F * self._e_phi, axis=-1)
        return -self.sht.divergence(Ft, Fp) - self._nu * rho_lm

    def cfl_step(self, rho_lm):
        speed = float(np.max(np.linalg.norm(self.velocity(rho_lm), axis=-1)))
        if not np.isfinite(speed) or speed <= 0:
            return None
        return self.cfl / ((self.lmax + 1) * speed)

    # ------------------------------------------------------------------ input
    def project(self, density0) -> np.ndarray:
        """Coefficients (nlm,) of density0 truncated at lmax, after checking it (finite,
        integrating to 1, resolved at lmax)."""
        f = density_callable(density0, 3)
        L2 = max(2 * self.lmax, self.lmax + 16)
        big = self.sht_class(L2, max(L2 + 2, self.sht_class.min_nlat), fft_size(2 * L2 + 4))
        g = GaussGrid(big.nlat, big.nlon)
        vals = check_values(np.asarray(f(g.points), dtype=np.float64))
        if vals.shape != g.points.shape[:-1]:
            raise ValueError(f"the density callable must map points (..., 3) to values (...); "
                             f"got output shape {vals.shape} for input {g.points.shape}")
        a = big.analysis(vals)
        check_mass(SQRT_4PI * a[0].real, self.mass_rtol)
        spec = np.bincount(big.l, weights=np.where(big.m == 0, 1.0, 2.0) * np.abs(a) ** 2,
                           minlength=L2 + 1)
        warn_resolution(spec, self.lmax, self.resolution_tol)
        return np.ascontiguousarray(a[big.l <= self.lmax])

    # ------------------------------------------------------------------ diagnostics
    def diagnostics(self, rho_lm):
        """mass, min density, negative mass and energy (SPEC §3.6) of a state."""
        rho = self.sht.synthesis(rho_lm)
        mass = SQRT_4PI * float(rho_lm[0].real)
        neg = float(np.sum(self.grid.weights * np.minimum(rho, 0.0)))
        m = self.model
        if m.zero_temperature or m.beta == 0:
            energy = math.nan
        elif self.path == "funk_hecke":
            _, G = self.attention(rho_lm)
            energy = safe_exp_times(float(self.grid.integrate(rho * G)), m.beta * self.c) / (2 * m.beta)
        elif self.path == "chebyshev":  # G carries e^{-kappa(x)}: shift by the largest kappa
            _, G = self._gfh.attention(rho_lm, partition=True)
            k = self._gfh.kappa
            s = float(np.sum(self._weights_flat * rho.reshape(-1) * G * np.exp(k - k.max())))
            energy = safe_exp_times(s, float(k.max())) / (2 * m.beta)
        else:
            energy = direct_energy(self._points_flat, self._weights_flat * rho.reshape(-1), m.B,
                                   m.beta)
        return mass, float(rho.min()), neg, energy

    # ------------------------------------------------------------------ the solve
    def solve(self, density0, times, progress=None, stop_negative_mass=None) -> "SpectralSolution":
        """Evolve density0 (a measure of :mod:`spherepde.measures` or a callable density on S^2)
        and return the states at ``times`` (times[0] is the initial time).

        ``stop_negative_mass``: when set (e.g. 1e-3), a run whose density stops being resolved
        at this lmax (negative mass beyond the bound, or a failed step) ends early with the
        times reached so far, and ``solution.stats["stopped"]`` says why; otherwise it raises."""
        from ..timestepping import _check_times

        times = _check_times(times)
        y0 = self.project(density0)
        if self.filter_strength > 0:
            u0 = float(np.max(np.linalg.norm(self.velocity(y0), axis=-1)))
            rate = self.filter_strength * (u0 if np.isfinite(u0) else 0.0)
            self._nu = hyperviscosity(self.l, self.lmax, rate, self.filter_order)
        else:
            self._nu = np.zeros(self.l.size)
        if self._frame is None:
            states, stats = run_time_loop(self, y0, times, progress, stop_negative_mass)
        else:
            # march rho'(x') = rho(P x') in the frame where B is c times a z-rotation (see
            # _rotation_frame), then rotate each output back: x -> rho'(P^T x)
            P, inner = self._frame, self._inner
            inner._nu = self._nu
            ys, stats = run_time_loop(inner, self.sht.rotate(y0, P.T), times, progress,
                                      stop_negative_mass)
            states = [y0] + [self.sht.rotate(y, P) for y in ys[1:]]
        times = times[: len(states)]
        diag = np.array([self.diagnostics(y) for y in states])
        return SpectralSolution(times, np.array(states), self.lmax, self.model,
                                initial_measure(density0, 3),
                                dict(mass=diag[:, 0], min=diag[:, 1], negative_mass=diag[:, 2],
                                     energy=diag[:, 3]),
                                grid_shape=(self.grid.nlat, self.grid.nlon), sht=self.sht_library,
                                path=self.path, stats=stats)


def _rotation_frame(O):
    """A rotation P with P^T O P = +-(rotation about e_z), or None when O already is one.

    O = +-R with R a rotation about the axis n; P = [u, n x u, n] for any unit u ⊥ n."""
    R = O if np.linalg.det(O) > 0 else -O
    if abs(R[2, 2] - 1.0) < 1e-14 and np.abs(R[2, :2]).max() < 1e-14:
        return None
    w, v = np.linalg.eig(R)
    n = np.real(v[:, int(np.argmin(np.abs(w - 1.0)))])
    n /= np.linalg.norm(n)
    u = np.cross(n, np.eye(3)[int(np.argmin(np.abs(n)))])
    u /= np.linalg.norm(u)
    return np.column_stack([u, np.cross(n, u), n])


class SpectralSolution:
    r"""The densities at the output times of :meth:`SpectralSolver.solve`.

    Attributes
    ----------
    times : (T,)
    coefficients : (T, nlm) complex, real-harmonic coefficients in the m-major layout of
        :func:`spherepde.transforms.sht.lm_arrays`
    lmax : int
    model, initial_measure : the model and the density0 given to ``solve``
    diagnostics : dict of (T,) arrays: ``mass`` (integral of rho), ``min`` (smallest grid value),
        ``negative_mass`` (integral of min(rho, 0) on the dealiased grid, <= 0),
        ``energy`` (:math:`\frac1{2\beta}\iint e^{\beta\langle x,By\rangle}\rho\rho`; NaN at
        beta = 0 or inf)
    stats : steps, rejected steps and right-hand-side evaluations
    """

    def __init__(self, times, coefficients, lmax, model, initial_measure, diagnostics,
                 grid_shape=None, sht="auto", path="", stats=None):
        self.times = np.asarray(times, dtype=np.float64)
        self.coefficients = np.asarray(coefficients)
        self.lmax = int(lmax)
        self.model = model
        self.initial_measure = initial_measure
        self.diagnostics = diagnostics
        self.grid_shape = grid_shape or (self.lmax + 2, fft_size(2 * self.lmax + 2))
        self.sht_library = sht
        self.path = path
        self.stats = stats or {}
        self.l, self.m = lm_arrays(self.lmax)

    def __len__(self):
        return self.times.size

    def density(self, i: int, x) -> np.ndarray:
        """rho at output i, at points x: (..., 3) -> (...)."""
        x = as_points(x, 3)
        return evaluate_points(self.coefficients[i], self.lmax, x)

    def grid_values(self, i: int, nlat: int | None = None, nlon: int | None = None):
        """(GaussGrid, values) of rho at output i on a Gauss grid (default: the solver's
        dealiased grid)."""
        nlat = nlat or self.grid_shape[0]
        nlon = nlon or self.grid_shape[1]
        grid = GaussGrid(nlat, nlon)
        try:
            cls = get_backend(self.sht_library)
        except (ImportError, ValueError):  # saved elsewhere with another SHT library
            cls = get_backend("auto")
        if nlat < max(cls.min_nlat, self.lmax + 1) or nlon < 2 * self.lmax + 1:
            return grid, evaluate_points(self.coefficients[i], self.lmax, grid.points)
        return grid, cls(self.lmax, nlat, nlon).synthesis(self.coefficients[i])

    def measure(self, i: int) -> PointCloud:
        """Output i as a :class:`PointCloud` of the dealiased grid's nodes weighted by quadrature
        weight × density. A truncated spectral density can dip below zero; those nodes get
        weight 0 and the rest is rescaled to total mass 1 (``diagnostics["negative_mass"]``
        says how much was dropped)."""
        grid, vals = self.grid_values(i)
        w = (grid.weights * np.maximum(vals, 0.0)).reshape(-1)
        return PointCloud(grid.points.reshape(-1, 3), w / w.sum())

    def mass(self, i: int) -> float:
        return SQRT_4PI * float(self.coefficients[i][0].real)

    def save(self, path) -> str:
        """Write times, coefficients, diagnostics and the model to ``path`` (.npz), atomically."""
        return save_npz(path, kind=np.str_("S2"), times=self.times,
                        coefficients=self.coefficients, lmax=np.int64(self.lmax),
                        grid_shape=np.array(self.grid_shape), sht=np.str_(self.sht_library),
                        path=np.str_(self.path),
                        **{f"diag_{k}": v for k, v in self.diagnostics.items()},
                        **self.model.to_arrays())

    @classmethod
    def load(cls, path) -> "SpectralSolution":
        """Read a solution written by :meth:`save` (initial_measure is not stored: None)."""
        with np.load(path, allow_pickle=False) as z:
            if str(z["kind"]) != "S2":
                raise ValueError(f"{path} holds a {z['kind']} solution; use FourierSolution.load")
            diag = {k[5:]: z[k] for k in z.files if k.startswith("diag_")}
            return cls(z["times"], z["coefficients"], int(z["lmax"]), Model.from_arrays(z), None,
                       diag, tuple(int(v) for v in z["grid_shape"]), str(z["sht"] if "sht" in z.files else z["backend"]),
                       str(z["path"]))

    def __repr__(self) -> str:
        return (f"SpectralSolution(lmax={self.lmax}, {self.times.size} times in "
                f"[{self.times[0]:g}, {self.times[-1]:g}], path={self.path})")
