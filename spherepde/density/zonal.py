r"""Zonal densities on S^{d-1}, any d: finite volumes in the angle θ to an axis e.

For a model with B = b1 eeᵀ + b2 (I − eeᵀ) and V = v1 eeᵀ + v2 (I − eeᵀ), a density that
is invariant under the rotations fixing e stays so (docs/theory.md §6). With
f(θ) = |S^{d-2}| sin^{d-2}θ ρ(θ), the θ-marginal (mass per radian), the mean-field equation
is the 1-D conservation law

.. math:: \partial_t f + \partial_\theta (f\,\dot\theta[f]) = 0, \qquad \theta \in [0, \pi],

with θ̇ = 0 at the poles. The state is the vector of cell masses on n equal cells of [0, π];
the fluxes use a limited linear reconstruction of f (MC limiter) and upwinding, and every step
is dt = cfl/r, r the largest outflow rate (outflow / mass) of a cell, re-taken when a later
stage's rate is larger: every stage is then a positive forward-Euler step of the SSP scheme,
so cell masses stay >= 0 without clipping and their sum is conserved to round-off
(docs/methods.md, "Zonal finite volumes").

The velocity: :mod:`spherepde.interaction.zonal` (exact over each latitude's (d−2)-sphere,
the midpoint rule over the cells in θ'); local at β = ∞.
"""
from __future__ import annotations

from typing import Final

import numpy as np
from numba import njit
from scipy import special

from .. import timestepping
from ..interaction.zonal import (
    CHEBYSHEV_ORDER,
    ChebyshevZonalField,
    ZonalField,
    axial_coefficients,
    chebyshev_bins,
    zero_temperature_speed,
)
from ..measures import Measure, PointCloud
from ..registry import Registry
from ..sphere import log_sphere_area
from .base import (
    MASS_RTOL,
    CellMassStepping,
    DensitySolution,
    DensitySolver,
    check_mass,
    density_callable,
)

__all__ = ["ZonalSolution", "ZonalSolver", "FIELDS", "STEPPINGS"]

#: the time-stepping schemes that are convex combinations of forward-Euler steps (positivity)
SSP_SCHEMES = ("euler", "heun", "ssprk3")
#: the finite-beta kernels are tabulated (faces x cells, three tables): their size limit
MAX_TABLE_BYTES = 1.5e9
#: Gauss-Legendre nodes per cell for the initial cell masses
QUADRATURE_ORDER = 8
#: cells with less mass send none (their subnormal arithmetic is slow; the loss is < 1e-300);
#: compile-time (read by the numba tendency): Final
_TINY_MASS: Final = 1e-300
#: relative difference of rho0 between two directions of e^perp that counts as non-zonal
ZONAL_RTOL = 1e-8
#: multirate stepping: the default macro_tol (the velocity's relative change per macro step);
#: the W2 error it leaves grows linearly with it (1.5e-4 at 1e-4 by t = 4, d = 8, β = 16),
#: below the spatial error of n = 400 cells there (docs/methods.md)
DEFAULT_MACRO_TOL = 1e-4
#: field="auto" interpolates (Chebyshev) when its nodes are at most this share of the cells
AUTO_CHEBYSHEV_SHARE = 0.5
#: ... and when no kernel value falls below e^-660 of its row's largest (no flushed entries)
AUTO_CHEBYSHEV_MAX_RANGE = 660.0

#: field="chebyshev": bytes per cell of its stencils and their temporaries (memory check)
STENCIL_BYTES_PER_CELL = 64.0 * CHEBYSHEV_ORDER

#: How the finite-beta field is evaluated: name -> class (model, axis, faces, cells).
FIELDS = Registry("zonal field")
FIELDS.register("table", ZonalField)
FIELDS.register("chebyshev", ChebyshevZonalField)


@njit(cache=True, inline="always")
def _mc_slope(a, b):  # pragma: no cover - numba
    """The MC limiter of the one-sided differences a, b (0 where they differ in sign or are
    not finite in product)."""
    if not a * b > 0:
        return 0.0
    s = min(2.0 * abs(a), 2.0 * abs(b), 0.5 * abs(a + b))
    return -s if a < 0 else s


@njit(cache=True)
def muscl_tendency(m, v, h, geometry):  # pragma: no cover - numba
    """dm/dt and the largest outflow rate for cell masses m (n,), face speeds v (n-1,) at the
    interior faces (zero at the poles), cell width h, and ``geometry`` (4, n): the ratios
    w_i/w_{i+1} and w_i/w_{i-1} of the cells' surface measures (1 past the ends), and the
    face weights |S^{d-2}| sin^{d-2} at the cell's left and right faces over w_i
    (:func:`cell_geometry`).

    Each cell reconstructs, with the MC limiter on relative differences (mirror ghosts at the
    poles), either the marginal f = m/h or the density rho = m/w, whichever is flatter there
    (smaller relative slope): rho near the poles, where f ~ theta^{d-2} is steep and rho is
    smooth; f in the bulk of high d, where rho varies like e^{O(d)}. Both give face values in
    [0, 2x] of the cell's value (rho's then times the exact face weight), so the upwind fluxes
    keep the forward-Euler step positive when dt·rate <= 1, the rate of a cell being its
    outflow over its mass. A numba loop: it is the whole cost of a zero-temperature step."""
    n = m.size
    lo = np.zeros(n)
    hi = np.zeros(n)
    for i in range(n):
        if m[i] <= _TINY_MASS:  # no outflow from a cell below 1e-300 (subnormals are slow)
            continue
        # ratios of the neighbours' marginal and density to this cell's (mirror at the poles)
        fr = m[i + 1] / m[i] if i < n - 1 else 1.0
        fl = m[i - 1] / m[i] if i > 0 else 1.0
        sf = _mc_slope(fr - 1.0, 1.0 - fl)
        sr = _mc_slope(fr * geometry[0, i] - 1.0, 1.0 - fl * geometry[1, i])
        if abs(sr) < abs(sf):
            lo[i] = m[i] * geometry[2, i] * (1.0 - 0.5 * sr)
            hi[i] = m[i] * geometry[3, i] * (1.0 + 0.5 * sr)
        else:
            lo[i] = m[i] / h * (1.0 - 0.5 * sf)
            hi[i] = m[i] / h * (1.0 + 0.5 * sf)
    dm = np.zeros(n)
    out = np.zeros(n)
    for j in range(n - 1):  # face between cells j and j+1
        vj = v[j]
        if vj > 0:
            flux = vj * hi[j]
            out[j] += flux
        else:
            flux = vj * lo[j + 1]
            out[j + 1] -= flux
        dm[j] -= flux
        dm[j + 1] += flux
    rate = 0.0
    for i in range(n):
        if out[i] > 0:
            rate = max(rate, out[i] / m[i])
    return dm, rate


def _unit_axis(axis, d):
    if axis is None:
        e = np.zeros(d)
        e[0] = 1.0
        return e
    e = np.asarray(axis, dtype=np.float64)
    if e.shape != (d,) or not np.all(np.isfinite(e)) or np.linalg.norm(e) == 0:
        raise ValueError(f"axis must be a nonzero finite vector of shape ({d},) (d = model.d); "
                         f"got shape {e.shape}")
    return e / np.linalg.norm(e)


def _perpendicular(e, rng=None):
    """A unit vector orthogonal to e: the basis vector least aligned with e, or random."""
    v = np.zeros_like(e)
    if rng is None:
        v[np.argmin(np.abs(e))] = 1.0
    else:
        v = rng.standard_normal(e.size)
    v -= (v @ e) * e
    return v / np.linalg.norm(v)


def log_cell_measures(edges, d, order=QUADRATURE_ORDER):
    """log of |S^{d-2}| ∫ sin^{d-2}θ dθ over each cell, (n,), and the Gauss nodes (n, order)
    with their log weights (n, order) (Gauss-Legendre in θ, log form: no underflow at large d)."""
    g, w = np.polynomial.legendre.leggauss(order)
    lo, hi = edges[:-1, None], edges[1:, None]
    th = 0.5 * (lo + hi) + 0.5 * (hi - lo) * g[None, :]
    with np.errstate(divide="ignore"):
        lw = (np.log(0.5 * (hi - lo) * w[None, :]) + log_sphere_area(d - 1)
              + (d - 2) * np.log(np.sin(th)))
    return special.logsumexp(lw, axis=1), th, lw


def cell_geometry(edges, d):
    """(4, n): w_i/w_{i+1}, w_i/w_{i-1} (1 past the ends), and the face weights
    |S^{d-2}| sin^{d-2}θ at each cell's left and right faces over w_i, w the cells' surface
    measures; formed from logs (w underflows at large d), ratios capped at e^{±700}."""
    lw = log_cell_measures(edges, d)[0]
    with np.errstate(divide="ignore"):  # -inf at the poles for d > 2 (no flux there)
        sin_power = (d - 2) * np.log(np.sin(edges)) if d > 2 else 0.0
    lsf = log_sphere_area(d - 1) + sin_power + 0 * edges
    out = np.ones((4, lw.size))
    out[0, :-1] = np.exp(np.clip(lw[:-1] - lw[1:], -700, 700))
    out[1, 1:] = np.exp(np.clip(lw[1:] - lw[:-1], -700, 700))
    out[2] = np.exp(np.minimum(lsf[:-1] - lw, 700))
    out[3] = np.exp(np.minimum(lsf[1:] - lw, 700))
    return out


class ZonalSolver(CellMassStepping, DensitySolver):
    r"""Finite volumes in θ for zonal densities on S^{d-1}, any d >= 2 (module docstring).

    Parameters
    ----------
    model : :class:`spherepde.Model`, d = model.d, with B and V of the form
        c1 eeᵀ + c2 (I − eeᵀ) (else ValueError naming the matrix); SA or USA, β finite or inf
    n : int
        Cells in θ ∈ [0, π] (width π/n).
    axis : (d,), optional
        The symmetry axis e (default e1).
    scheme : "ssprk3" (default), "heun" or "euler": the strong-stability-preserving schemes
    cfl : float in (0, 1]
        dt·r <= cfl with r the largest cell outflow rate (cfl <= 1 keeps masses >= 0).
    mass_rtol : float
        rho0 must integrate to 1 within this.
    field : "auto" (default), "table" or "chebyshev" (:data:`FIELDS`)
        "table": the kernels tabulated faces × cells, 3·(n−1)·n doubles and as many Bessel
        evaluations, a step three matrix-vector products (n <= 7905). "chebyshev": their
        tensor Chebyshev interpolant on N ≈ 12.6 β(|b1|+|b2|) nodes (3N² doubles, O(n) work
        per cell count), equal to the table to ~1e-14. "auto": "chebyshev" when N <= n/2.
    stepping : "per-stage" (default) or "multirate" (:data:`STEPPINGS`)
        "multirate" evaluates the field once per macro step (length set by ``macro_tol``)
        and moves the masses by positive substeps in between: the choice for many cells.

    At β = ∞ the field is local and a step is O(n).

    Examples
    --------
    >>> import numpy as np, spherepde as sp
    >>> model = sp.Model(V=np.diag([1.0] + [0.5] * 15), beta=np.inf)
    >>> sol = sp.ZonalSolver(model, 200).solve(sp.measures.Uniform(16), [0.0, 1.0])
    >>> bool(abs(sol.cell_masses(1).sum() - 1) < 1e-13)
    True
    """

    needs_model = True
    setting_names = ("n", "quadrature_order", "field_name")
    time_setting_names = ("scheme", "cfl", "stepping", "macro_tol")

    def __init__(self, model, n: int, axis=None, *, scheme="ssprk3", cfl=0.9,
                 mass_rtol=MASS_RTOL, max_steps: int = 10_000_000, field="auto",
                 stepping="per-stage", macro_tol=DEFAULT_MACRO_TOL):
        super().__init__(model, scheme=scheme, cfl=cfl, mass_rtol=mass_rtol)
        if scheme not in SSP_SCHEMES:
            raise ValueError(f"ZonalSolver keeps cell masses >= 0 only with the SSP schemes "
                             f"{SSP_SCHEMES}; got scheme={scheme!r}")
        if not 0 < cfl <= 1:
            raise ValueError(f"cfl must lie in (0, 1] (dt·rate <= 1 keeps masses >= 0); got {cfl}")
        if int(n) != n or n < 2:
            raise ValueError(f"n (cells in theta) must be an integer >= 2; got {n!r}")
        if model.hardmax:
            raise ValueError("hardmax acts on discrete measures; the zonal solver evolves a "
                             "density: use Model(hardmax=False) (beta = inf gives X_inf)")
        STEPPINGS.get(stepping)  # an unknown name fails here, listing the choices
        if not (isinstance(macro_tol, (int, float)) and 0.0 < macro_tol < 1.0):
            raise ValueError(f"macro_tol must be a number in (0, 1) (the velocity's relative "
                             f"change a macro step may leave unresolved); got {macro_tol!r}")
        self.stepping, self.macro_tol = stepping, float(macro_tol)
        self.n, self.d = int(n), model.d
        self.axis = _unit_axis(axis, self.d)
        self.coefficients_axial = axial_coefficients(model, self.axis)
        self.quadrature_order = QUADRATURE_ORDER
        self.max_steps = int(max_steps)
        self.edges = np.linspace(0.0, np.pi, self.n + 1)
        self.theta = 0.5 * (self.edges[1:] + self.edges[:-1])
        self.h = np.pi / self.n
        self._geometry = cell_geometry(self.edges, self.d)
        faces = self.edges[1:-1]
        if model.zero_temperature:
            self.field = None
            self._fixed_speed = zero_temperature_speed(faces, *self.coefficients_axial)
        else:
            self.field_name = self._choose_field(field)
            self.field = FIELDS.get(self.field_name)(model, self.axis, faces, self.theta)
            self._fixed_speed = None

    def _choose_field(self, field) -> str:
        """The field's name: ``field`` itself, or for "auto" the Chebyshev interpolation when
        its N nodes are at most half the cells and no kernel entry is flushed, else the
        table; a table beyond MAX_TABLE_BYTES is refused."""
        b1, b2, _, _ = self.coefficients_axial
        nodes = CHEBYSHEV_ORDER * chebyshev_bins(self.model, self.axis)
        if field == "auto":
            spread = self.model.beta * (2 * abs(b1) + abs(b2))
            field = ("chebyshev" if nodes <= AUTO_CHEBYSHEV_SHARE * self.n
                     and spread <= AUTO_CHEBYSHEV_MAX_RANGE else "table")
        FIELDS.get(field)
        # the interpolant: its node tables, and per cell and face 16 stencil entries (index
        # and weight) with their construction's temporaries, about 1 kB a cell
        size = (24.0 * (self.n - 1) * self.n if field == "table"
                else 24.0 * nodes ** 2 + STENCIL_BYTES_PER_CELL * self.n)
        if size > MAX_TABLE_BYTES:
            cheb_max = max(0, int((MAX_TABLE_BYTES - 24.0 * nodes ** 2) / STENCIL_BYTES_PER_CELL))
            raise ValueError(f"the {field!r} field needs {size / 1e9:.1f} GB of kernel tables "
                             f"(limit {MAX_TABLE_BYTES / 1e9:.1f} GB) at n = {self.n} cells, "
                             f"beta = {self.model.beta:g}: field='table' allows n <= "
                             f"{int(np.sqrt(MAX_TABLE_BYTES / 24))}, field='chebyshev' "
                             f"({nodes} nodes here) n <= {cheb_max}; use fewer cells")
        return field

    solution_class = None  # set below

    @property
    def path(self) -> str:
        return "zonal_zero_temperature" if self.field is None else "zonal"

    # ------------------------------------------------------------------ state
    def face_speed(self, m) -> np.ndarray:
        """θ̇ at the n−1 interior cell faces, from the cell masses m (n,)."""
        return self._fixed_speed if self.field is None else self.field.speed(m)

    def tendency(self, t, m):
        """(dm/dt (n,), r): the finite-volume tendency and the largest outflow rate."""
        return muscl_tendency(np.ascontiguousarray(m), self.face_speed(m), self.h,
                              self._geometry)

    def rhs(self, t, y):
        return self.tendency(t, y)[0]

    def mass(self, y) -> float:
        return float(np.sum(y))

    def diagnostics(self, y):
        """(mass, smallest cell mass, negative mass, energy): the energy is not computed (NaN)."""
        return float(np.sum(y)), float(np.min(y)), float(np.sum(np.minimum(y, 0.0))), np.nan

    def solution_arrays(self) -> dict:
        return {"axis": self.axis}

    def check_state(self, y):
        y = np.asarray(y, dtype=np.float64)
        if y.shape != (self.n,):
            raise ValueError(f"cell masses must have shape ({self.n},); got {y.shape}")
        if not np.all(np.isfinite(y)) or np.any(y < 0):
            raise ValueError("cell masses must be finite and >= 0")
        return y

    def project(self, density0):
        """Cell masses of rho0 (a measure or a callable density on S^{d-1}, checked zonal about
        the axis): Gauss-Legendre in θ per cell, in log form, rescaled to sum 1 once the mass
        is checked."""
        logf = _log_density_callable(density0, self.d, self.axis)
        e = self.axis
        _, th, lw = log_cell_measures(self.edges, self.d, self.quadrature_order)
        u = _perpendicular(e)
        lrho = logf(np.cos(th)[..., None] * e + np.sin(th)[..., None] * u)
        _check_zonal(logf, e, th, lrho, self.d)
        bad = np.isnan(lrho) | (lrho == np.inf)
        if np.any(bad):
            raise ValueError(f"density0 is NaN or inf at {int(bad.sum())} quadrature nodes; it "
                             "must be finite on the sphere")
        with np.errstate(under="ignore"):
            m = np.exp(special.logsumexp(lrho + lw, axis=1))
        check_mass(float(m.sum()), self.mass_rtol, self.d)
        return m / m.sum()

    # ------------------------------------------------------------------ time stepping
    def integrate(self, f, y0, times, callback, progress, stats, dt_max=None) -> None:
        """The step control of :attr:`stepping` (:data:`STEPPINGS`) through the one time
        driver, :func:`spherepde.timestepping.march`; outputs are landed on exactly. ``f`` and
        ``dt_max`` are not used (the positivity control needs the rate that :meth:`tendency`
        returns with dm/dt)."""
        name = "per-stage" if self.field is None else self.stepping  # β = ∞: a fixed field
        controller = STEPPINGS.get(name)(self)
        timestepping.march(controller, y0, times, callback=callback, progress=progress,
                           keep=lambda i: False, stats=stats, max_steps=self.max_steps)

    def transport(self, masses, u):
        """(dm/dt, positivity rate) of the cell masses under the face speeds u."""
        return muscl_tendency(np.ascontiguousarray(masses), u, self.h, self._geometry)

    def macro_field(self, t, masses):
        """The face speeds of a macro step (:class:`CellMassStepping`)."""
        return self.face_speed(masses)

    def field_defect(self, u, u_ref, masses) -> float:
        """:meth:`speed_defect`, the change that sizes a macro step."""
        return self.speed_defect(u, u_ref, masses)

    @staticmethod
    def speed_defect(u, u_ref, masses) -> float:
        r"""The mass-weighted RMS of u − u_ref at the faces relative to that of u,
        :math:`(\sum_f w_f (u_f - u^{ref}_f)^2 / \sum_f w_f u_f^2)^{1/2}` with w_f the mass of
        the face's two cells: the relative rate at which W2 between the two flows can grow."""
        w = masses[:-1] + masses[1:]
        norm2 = float(np.sum(w * u * u))
        diff2 = float(np.sum(w * (u - u_ref) ** 2))
        if norm2 == 0.0:
            return 0.0 if diff2 == 0.0 else np.inf
        return float(np.sqrt(diff2 / norm2))

    def step_hint(self) -> str:
        return f"Refine the cells in theta (n = {self.n})"


def _log_density_callable(density0, d, axis):
    """x (..., d) -> log rho0(x): the object's ``log_density`` when it has one (no
    under/overflow at large d: 1/|S^511| = e^864), else the log of its density or of the
    callable. A measure that knows its own symmetry (``zonal_obstruction``) is asked first."""
    if isinstance(density0, PointCloud):
        raise TypeError("ZonalSolver needs a zonal density, not a point cloud; smooth it first "
                        "or use ParticleSolver")
    if getattr(density0, "d", d) != d:
        raise ValueError(f"density0 lives in d = {density0.d}; the model in d = {d}")
    own = getattr(type(density0), "zonal_obstruction", None)
    if own is not None and own is not getattr(Measure, "zonal_obstruction", None):
        why = density0.zonal_obstruction(axis)
        if why is not None:
            raise ValueError(f"density0 ({type(density0).__name__}) is not zonal about the "
                             f"axis: {why}")
    if hasattr(density0, "log_density"):
        return density0.log_density
    f = density_callable(density0, d)

    def logf(x):
        with np.errstate(divide="ignore"):
            return np.log(np.asarray(f(x), dtype=np.float64))
    return logf


def _check_zonal(logf, e, th, lrho, d):
    """Refuse a rho0 whose values at the same θ differ between two directions of e^⊥."""
    u2 = _perpendicular(e, np.random.default_rng(12345))
    other = logf(np.cos(th)[..., None] * e + np.sin(th)[..., None] * u2)
    both = np.isfinite(lrho) & np.isfinite(other)
    top = max(float(np.max(lrho[both])) if np.any(both) else 0.0,
              float(np.max(other[both])) if np.any(both) else 0.0)
    # compare rho values relative to the largest one (small densities need not agree in log)
    with np.errstate(under="ignore"):
        diff = np.abs(np.exp(lrho - top) - np.exp(other - top))
    diff = np.where(np.isnan(diff), 0.0, diff)
    k = int(np.argmax(diff))
    if diff.flat[k] > ZONAL_RTOL or np.any(np.isfinite(lrho) != np.isfinite(other)):
        raise ValueError(
            f"density0 is not zonal about the axis: at theta = {th.flat[k]:.4f} rad its value "
            f"differs by {diff.flat[k]:.2e} (relative to its maximum) between two directions "
            "orthogonal to the axis (e.g. a cap centred off the axis); give a density that "
            "depends on <x, axis> only, or pass axis= its symmetry axis")


class ZonalSolution(DensitySolution):
    """The cell masses of a :class:`ZonalSolver` run at the output times.

    Attributes
    ----------
    theta_edges : (n+1,) cell edges in θ (uniform on [0, π]); theta : (n,) centres
    masses : (T, n) cell masses (the state; same array as ``coefficients``)
    axis : (d,) ; d : int
    """

    kind = "zonal"
    state_variable = ("cell_mass", ("theta",), "1", "mass of each theta cell")

    def __init__(self, times, coefficients, model, initial_measure, diagnostics, path="",
                 stats=None, axis=None):
        super().__init__(times, coefficients, model, initial_measure, diagnostics, path, stats)
        self.d = model.d
        self.axis = _unit_axis(axis, self.d)
        n = self.coefficients.shape[1]
        self.theta_edges = np.linspace(0.0, np.pi, n + 1)
        self.theta = 0.5 * (self.theta_edges[1:] + self.theta_edges[:-1])
        self._log_cells = log_cell_measures(self.theta_edges, self.d)[0]

    @property
    def masses(self) -> np.ndarray:
        return self.coefficients

    def cell_masses(self, i: int) -> np.ndarray:
        """Cell masses (n,) at output i (>= 0, sum 1 to round-off)."""
        return self.coefficients[i]

    def density(self, i: int, x) -> np.ndarray:
        """rho at output i at x: (..., d) -> (...): the cell mass over the cell's surface
        measure (constant in θ within a cell)."""
        x = np.asarray(x, dtype=np.float64)
        th = np.arccos(np.clip(x @ self.axis / np.linalg.norm(x, axis=-1), -1.0, 1.0))
        n = self.theta.size
        k = np.clip((th / (np.pi / n)).astype(int), 0, n - 1)
        with np.errstate(divide="ignore", under="ignore"):
            return np.exp(np.log(self.coefficients[i][k]) - self._log_cells[k])

    def measure(self, i: int, directions: int | None = None, seed=0):
        """Output i: the θ-marginal ``(theta_edges, cell masses)`` by default; with
        ``directions = k`` a :class:`PointCloud` on S^{d-1}: at each cell's centre latitude,
        k directions of e^⊥ (uniform at random, in antipodal pairs, k even), each carrying
        1/k of the cell's mass."""
        m = self.cell_masses(i)
        if directions is None:
            return self.theta_edges, m.copy()
        k = int(directions)
        if k < 2 or k % 2:
            raise ValueError(f"directions must be an even integer >= 2; got {directions!r}")
        rng = np.random.default_rng(seed)
        e = self.axis
        v = rng.standard_normal((self.theta.size, k // 2, self.d))
        v -= (v @ e)[..., None] * e
        v /= np.linalg.norm(v, axis=-1, keepdims=True)
        v = np.concatenate([v, -v], axis=1)
        pts = np.cos(self.theta)[:, None, None] * e + np.sin(self.theta)[:, None, None] * v
        w = np.repeat(m / k, k)
        keep = w > 0
        return PointCloud(pts.reshape(-1, self.d)[keep], w[keep] / w[keep].sum())

    def xarray_space(self):
        """The θ-marginal density (mass per radian) on the cells: dim ``theta``."""
        h = np.pi / self.theta.size
        coords = {"theta": ("theta", self.theta,
                            {"units": "radian", "long_name": "angle to the axis (cell centre)"}),
                  "theta_edge": ("theta_edge", self.theta_edges,
                                 {"units": "radian", "long_name": "cell edge in theta"})}
        return (("theta",), coords, self.coefficients / h, "radian-1",
                "theta-marginal density (mass per radian of the angle to the axis)")

    def arrays(self) -> dict:
        return {"axis": self.axis}

    @classmethod
    def from_arrays(cls, z, **common):
        return cls(**common, axis=np.atleast_1d(np.asarray(z["axis"], dtype=np.float64)))

    def __repr__(self) -> str:
        return (f"ZonalSolution(d={self.d}, n={self.theta.size}, {self.times.size} times in "
                f"[{self.times[0]:g}, {self.times[-1]:g}], path={self.path})")


ZonalSolver.solution_class = ZonalSolution

#: How a ZonalSolver steps in time at finite β: name -> controller factory of the solver.
STEPPINGS = Registry("zonal time stepping")
STEPPINGS.register("per-stage", ZonalSolver.per_stage_controller)
STEPPINGS.register("multirate", ZonalSolver.multirate_controller)
