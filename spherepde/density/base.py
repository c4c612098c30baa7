r"""One base for every density solver of
:math:`\partial_t\rho + \operatorname{div}(\rho X[\rho]) = 0` and one base for their
solutions. A new discretisation is one file that subclasses both.

What a solver subclass provides (everything else, from the input checks to the time loop and
the resolution stop, is shared):

- class attributes :attr:`DensitySolver.d` (3 for S^2, 2 for S^1) and
  :attr:`DensitySolver.solution_class`;
- ``project(density0) -> y0``: the initial state (coefficients, cell averages, ...) of a
  density given as a callable f(x), x: (..., d) (a measure's ``density``), after checking it
  with :func:`check_values` and :func:`check_mass`;
- ``check_state(y) -> y0``: the same for a state handed over directly (coefficients);
- ``rhs(t, y) -> dy/dt``;
- ``dt_max(t, y) -> float | None``: the stability (CFL) cap of the explicit step at state y
  (:meth:`DensitySolver.max_speed` gives the largest speed);
- ``operator``: the :class:`spherepde.interaction.operators.VelocityOperator` on its nodes,
  built once in ``__init__`` (:func:`spherepde.interaction.operators.choose_operator` checks
  the choice; None for a prescribed velocity, whose energy is then NaN), ``node_weights``
  (the nodes' quadrature weights) and ``values(y)`` (the density at the nodes); from these the
  base computes the diagnostics (mass, min, negative mass, energy). The run stops early
  (``stop_negative_mass``) once |negative mass| exceeds a bound: the density is no longer
  resolved;
- ``mass(y)``;
- ``solution_arrays() -> dict``: what the solution needs besides times, states and
  diagnostics (e.g. ``lmax``, the grid shape).

Optional hooks: ``prepare(y0)`` (e.g. a filter scaled by the initial speed),
``march(y0, times, ...)`` (e.g. marching in a rotated frame) and ``integrate(f, y0, times,
...)``: the step control. The default takes the shared RK registry's steps under the CFL cap
:meth:`DensitySolver.dt_max`; a discretisation whose step follows from another bound
overrides it (finite volumes: dt = cfl/r with r the positivity rate of every stage). The
outputs, the resolution stop and the statistics stay in :meth:`DensitySolver.run` either way.

A solution subclass provides ``density(i, x)`` and ``quadrature(i) -> (points (n, d),
weights (n,) or None, values (n,))``, from which :meth:`DensitySolution.measure` builds the
point cloud, and ``from_arrays`` to load itself.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import timestepping
from ..measures import Measure, PointCloud, as_measure, grid_point_cloud
from ..model import Model

__all__ = ["DensitySolver", "DensitySolution", "Resolution", "check_values", "check_mass",
           "density_callable", "MASS_RTOL"]

#: Default relative tolerance on the mass of the initial density.
MASS_RTOL = 1e-6

_AREA = {3: ("surface area", "1/(4 pi) on S^2"), 2: ("arc length", "1/(2 pi) on S^1")}


def density_callable(density0, d: int):
    """A function x (..., d) -> density values, from a Measure or a callable (checked later)."""
    if isinstance(density0, PointCloud):
        raise TypeError("the density solvers need a density, not a point cloud; smooth it first "
                        "(e.g. a Mixture of VonMisesFisher kernels) or use ParticleSolver")
    if isinstance(density0, Measure):
        if density0.d != d:
            raise ValueError(f"density0 lives in d = {density0.d}; this solver needs d = {d}")
        return density0.density
    if callable(density0):
        return density0
    raise TypeError(f"density0 must be a spherepde measure, a callable density or the solver's "
                    f"coefficients; got {type(density0).__name__}")


def check_values(values, what="density0"):
    """Grid values of a density as float64, refused when not finite or negative."""
    values = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(values)
    if np.any(bad):
        raise ValueError(f"{what} is NaN or inf at {int(bad.sum())} of {values.size} grid nodes; "
                         "repair the density (it must be finite everywhere on the sphere)")
    lo = float(values.min())
    if lo < -1e-12 * float(np.abs(values).max()):
        raise ValueError(f"{what} must be >= 0 (a probability density); its minimum on the grid "
                         f"is {lo:.3e}")
    return values


@dataclass(frozen=True)
class Resolution:
    """How a solver integrated density0, for :func:`check_mass`'s diagnosis of a cap too
    narrow for it: ``grid`` ("the grid of lmax = 8"), ``rule`` with its verb ("its quadrature
    of degree 16 gives"), the ``setting`` that resolves a cap and ``needed(kappa)``, the value
    of that setting a von Mises–Fisher cap of concentration kappa needs, and the ``remedy``."""

    density0: object
    grid: str
    rule: str
    setting: str
    needed: Callable[[float], int]
    remedy: str


def check_mass(mass, rtol, d=3, resolves: Resolution | None = None):
    """Refuse an initial density whose integral is not 1 within ``rtol``.

    ``resolves``: how the integral was taken (:class:`Resolution`). A spherepde measure
    integrates to 1 by construction, so a mass off by more than ``rtol`` then means that the
    grid cannot resolve it (a cap too narrow for it): the error says so, with the value of the
    setting that a von Mises–Fisher cap needs.
    """
    if not abs(mass - 1.0) <= rtol and resolves is not None and \
            isinstance(resolves.density0, Measure):
        density0 = resolves.density0
        kappa = max([float(getattr(c, "kappa", 0.0))
                     for c in getattr(density0, "components", [density0])] or [0.0])
        need = ""
        if kappa > 0:
            need = (f"; a cap of kappa = {kappa:g} needs {resolves.setting} of at least about "
                    f"{resolves.needed(kappa)}")
        raise ValueError(f"{resolves.grid} cannot resolve density0 ({resolves.rule} it mass "
                         f"{mass:.6g} instead of 1){need}; {resolves.remedy}")
    if not abs(mass - 1.0) <= rtol:
        area, uni = _AREA.get(d, ("surface area", "1/|S^(d-1)|"))
        raise ValueError(f"density0 integrates to {mass:.12g}, not 1 (off by {mass - 1:+.2e}, "
                         f"tolerance {rtol:.0e}) against {area}; divide it by its integral "
                         f"(the uniform density is {uni})")


def _check_number(key, val, ok, bound):
    if not (isinstance(val, (int, float)) and math.isfinite(val) and ok(val)):
        raise ValueError(f"{key} must be a finite number {bound}; got {val!r}")


class DensitySolver:
    """Base of the density solvers: input checks, the time loop, resolution stops, diagnostics.

    Every subclass takes the parameters below.

    Parameters
    ----------
    model : :class:`spherepde.Model`
    scheme : name in :data:`spherepde.timestepping.SCHEMES`
        Default "dopri5": adaptive with ``rtol``/``atol`` (atol relative to the largest entry
        of the initial state), steps capped by :meth:`dt_max`.
    dt : float, optional
        Fixed step of the non-adaptive schemes (default: the CFL cap at each output time),
        first trial step of dopri5.
    rtol, atol, cfl : float
    mass_rtol : float
        The initial density must integrate to 1 within this.
    """

    #: ambient dimension: the solver works on S^{d-1}
    d = 3
    #: the class of the solutions :meth:`solve` returns
    solution_class: type = None
    #: False for a solver whose velocity is given rather than computed from a model
    #: (prescribed transport): ``model`` may then be None
    needs_model = True

    def __init__(self, model, *, scheme="dopri5", dt=None, rtol=1e-9, atol=1e-11, cfl=1.0,
                 mass_rtol=MASS_RTOL):
        if not isinstance(model, Model) and (model is not None or self.needs_model):
            raise TypeError(f"model must be a spherepde.Model; got {type(model).__name__}")
        _check_number("rtol", rtol, lambda v: v > 0, "> 0")
        _check_number("atol", atol, lambda v: v >= 0, ">= 0")
        _check_number("cfl", cfl, lambda v: v > 0, "> 0")
        timestepping.get_scheme(scheme)
        self.model = model
        self.scheme, self.dt, self.rtol, self.atol, self.cfl = scheme, dt, rtol, atol, float(cfl)
        self.mass_rtol = mass_rtol

    # ------------------------------------------------------------------ to be provided
    def project(self, density0):
        """The checked initial state of a density callable or measure."""
        raise NotImplementedError

    def check_state(self, y):
        """The checked initial state handed over as an array (e.g. coefficients)."""
        raise NotImplementedError

    def rhs(self, t, y):
        """dy/dt."""
        raise NotImplementedError

    def dt_max(self, t, y):
        """Largest stable explicit step at state y (None: no cap)."""
        return None

    #: the velocity operator the subclass builds in ``__init__``
    operator = None
    #: quadrature weights of the nodes where :meth:`values` lives
    node_weights = None

    def values(self, y):
        """The density at the nodes of :attr:`operator` (shape of :attr:`node_weights`)."""
        raise NotImplementedError

    def mass(self, y) -> float:
        raise NotImplementedError

    def solution_arrays(self) -> dict:
        return {}

    # ------------------------------------------------------------------ derived
    @property
    def path(self) -> str:
        """The name of the velocity operator ("funk_hecke", "direct", ...)."""
        return self.operator.name if self.operator is not None else ""

    def max_speed(self, y) -> float:
        """Largest speed |X[rho]| at the nodes."""
        rho = self.values(y) if self.operator.needs_values else None
        v = self.operator.velocity(rho, y)
        return float(np.max(np.linalg.norm(v, axis=-1)))

    def diagnostics(self, y):
        """(mass, min density, negative mass, energy) of a state, by the nodes' quadrature;
        the negative mass (<= 0) is the integral of min(rho, 0)."""
        rho = self.values(y)
        neg = float(np.sum(self.node_weights * np.minimum(rho, 0.0)))
        energy = self.operator.energy(rho, y) if self.operator is not None else math.nan
        return self.mass(y), float(rho.min()), neg, energy

    # ------------------------------------------------------------------ hooks
    def prepare(self, y0) -> None:
        """Called once with the initial state before marching."""

    def march(self, y0, times, progress=None, stop_negative_mass=None, on_output=None):
        """States at ``times`` and the integrator's statistics (see :meth:`run`)."""
        return self.run(y0, times, progress, stop_negative_mass, on_output)

    # ------------------------------------------------------------------ shared
    def initial_state(self, density0):
        """The initial state of density0: a measure, a callable density f(x), x: (..., d), or
        the solver's own state (an array, e.g. coefficients), each checked."""
        if isinstance(density0, np.ndarray):
            y = self.check_state(density0)
            check_mass(self.mass(y), self.mass_rtol, self.d)
            return y
        return self.project(density0)

    def run(self, y0, times, progress=None, stop_negative_mass=None, on_output=None):
        """March :meth:`rhs` from y0 across all ``times`` in one run of the shared RK registry,
        the step capped by :meth:`dt_max` (consulted at every output time). Returns the list
        of states and the statistics.

        With ``stop_negative_mass`` set, the run ends early instead of raising: at the first
        output whose negative mass exceeds it in size (the density is no longer resolved), or
        when the integrator fails; ``stats["stopped"]`` then says why and the states reached so
        far are returned. A bound first exceeded at the last output is reported in
        ``stats["unresolved"]``. ``on_output(i, t, state)``, when given, sees every output
        state as soon as it is reached."""
        # the registry works on real arrays: march complex coefficients as their float64 view
        cplx = np.iscomplexobj(y0)

        def as_state(yr):
            return yr.view(np.complex128) if cplx else yr

        def f(t, yr):
            if cplx:
                return np.ascontiguousarray(self.rhs(t, yr.view(np.complex128))).view(np.float64)
            return self.rhs(t, yr)

        out = []
        stats = {"steps": 0, "rejected": 0, "fevals": 0}

        def on_output_(i, t, yr):
            out.append(y0 if i == 0 else as_state(yr).copy())
            if on_output is not None:
                on_output(i, t, out[-1])
            if i == 0 or stop_negative_mass is None:
                return False
            neg = abs(self.diagnostics(out[-1])[2])
            if neg <= stop_negative_mass:
                return False
            why = (f"negative mass {neg:.2e} > {stop_negative_mass:.0e} at t = {t:g}: the "
                   "density is no longer resolved at this resolution")
            stats["stopped" if i < len(times) - 1 else "unresolved"] = why
            return True

        y = np.ascontiguousarray(y0).view(np.float64) if cplx else y0
        try:
            self.integrate(f, y, times, on_output_, progress, stats,
                           dt_max=lambda t, yr: self.dt_max(t, as_state(yr)))
        except (RuntimeError, FloatingPointError) as exc:
            if isinstance(exc, timestepping.StepSizeError):  # name the setting to change
                exc = timestepping.StepSizeError(f"{exc}. {self.step_hint()}")
            if stop_negative_mass is None:
                raise exc from None
            t0, t1 = times[len(out) - 1], times[min(len(out), len(times) - 1)]
            stats["stopped"] = f"integration failed between t = {t0:g} and t = {t1:g}: {exc}"
        return out, stats

    def integrate(self, f, y0, times, callback, progress, stats, dt_max=None) -> None:
        """The step control of :meth:`run`: march dy/dt = f(t, y) (y real) from y0 across all
        ``times``, calling ``callback(i, t_i, y_i)`` at every output (i = 0 included; a true
        return ends the run) and ``progress(t)`` after every step, and counting ``steps``,
        ``rejected`` and ``fevals`` in ``stats`` as it goes. Raises RuntimeError or
        FloatingPointError when the run fails.

        Default: :func:`spherepde.timestepping.integrate` with :attr:`scheme`, ``rtol``/``atol``
        (atol relative to the largest entry of y0) and the cap ``dt_max(t, y)``."""
        timestepping.integrate(f, y0, times, self.scheme, dt=self.dt, rtol=self.rtol,
                               atol=self.atol * float(np.max(np.abs(y0))), dt_max=dt_max,
                               callback=callback, progress=progress, keep=lambda i: False,
                               stats=stats)

    def step_hint(self) -> str:
        """What to change when the adaptive step collapses (a subclass names its resolution)."""
        return "The density is likely no longer resolved: refine the discretisation"

    def solve(self, density0, times, progress=None, stop_negative_mass=None, on_output=None):
        """Evolve density0 (a measure of :mod:`spherepde.measures`, a callable density f(x),
        x: (..., d), or the solver's coefficients) and return the states at ``times``
        (times[0] is the initial time).

        ``stop_negative_mass``: when set (e.g. 1e-3), a run whose density stops being resolved
        (negative mass beyond the bound, or a failed step) ends early with the times reached so
        far, and ``solution.stats["stopped"]`` says why; otherwise it raises.

        ``on_output(i, t, solution)``: called as each output time is reached, with a solution
        holding that one state (``solution.measure(0)``, ``solution.save``): what a long run
        needs to save its rows and a checkpoint as it goes, in one solve."""
        times = timestepping._check_times(times)
        y0 = self.initial_state(density0)
        self.prepare(y0)
        each = None
        if on_output is not None:
            def each(i, t, y):
                on_output(i, t, self._solution(np.array([t]), [y], density0, {}))
        states, stats = self.march(y0, times, progress, stop_negative_mass, each)
        return self._solution(times[: len(states)], states, density0, stats)

    def _solution(self, times, states, density0, stats):
        diag = np.array([self.diagnostics(y) for y in states])
        sol = self.solution_class(
            times, np.array(states), self.model, initial_measure(density0, self.d),
            dict(mass=diag[:, 0], min=diag[:, 1], negative_mass=diag[:, 2], energy=diag[:, 3]),
            path=self.path, stats=stats, **self.solution_arrays())
        sol.settings = self.settings()
        return sol

    def settings(self) -> dict:
        """The solver settings a solution records (numbers and names; unset ones left out):
        the time stepping of this base plus the numeric and text attributes a subclass lists in
        :attr:`setting_names`."""
        out = {"solver": type(self).__name__, "path": self.path}
        for name in (*self.time_setting_names, *self.setting_names):
            out[name] = getattr(self, name, None)
        return {k: v for k, v in out.items() if isinstance(v, (str, int, float, np.number))}

    #: the time-stepping attributes recorded by :meth:`settings` (those :meth:`integrate` reads)
    time_setting_names = ("scheme", "dt", "rtol", "atol", "cfl")
    #: further attributes recorded by :meth:`settings` (e.g. the truncation and the filter)
    setting_names = ("degree", "filter_strength", "filter_order", "dealias", "kernel",
                     "sht_library")


class CellMassStepping:
    """The two step controls of the cell-mass solvers (finite volumes on S^2, zonal cells on
    S^{d-1}), each a :class:`spherepde.timestepping.StepController` for the one time driver.

    A subclass provides ``tendency(t, m) -> (dm/dt, r)`` (the field at that state, r the
    largest outflow rate), ``transport(m, u) -> (dm/dt, r)`` (the same for a given field u),
    ``macro_field(t, m) -> u``, ``field_defect(u, u_ref, m) -> float`` (the relative change
    that sizes a macro step) and the attributes ``scheme``, ``cfl``, ``macro_tol`` and
    ``max_steps``."""

    def per_stage_controller(self) -> timestepping.PositivityRate:
        """The field at every Runge–Kutta stage; dt = cfl/r, re-taken with cfl/r' when a later
        stage's rate r' is larger (:class:`~spherepde.timestepping.PositivityRate`)."""
        return timestepping.PositivityRate(self.tendency, timestepping.get_scheme(self.scheme),
                                           self.cfl)

    def multirate_controller(self) -> timestepping.Multirate:
        """The field once per macro step (its length set by ``macro_tol``), the transport
        substepped inside under the positivity bound with the field extrapolated linearly in
        time (:class:`spherepde.timestepping.Multirate`)."""
        tab, transport, cfl = timestepping.get_scheme(self.scheme), self.transport, self.cfl

        def substeps(u_of):
            return timestepping.PositivityRate(lambda s, m: transport(m, u_of(s)), tab, cfl)

        return timestepping.Multirate(self.macro_field, substeps, self.field_defect,
                                      self.macro_tol, max_substeps=self.max_steps)


def initial_measure(density0, d):
    """What a solution keeps as its initial measure: the measure itself, a callable on S^2
    wrapped as a measure, anything else (coefficients, a callable on S^1) as it was given."""
    if isinstance(density0, np.ndarray):
        return None
    try:
        return as_measure(density0, d) if d == 3 or isinstance(density0, Measure) else density0
    except (ValueError, TypeError):
        return density0


#: Long names and units of the per-time diagnostics every density solution carries.
_DIAGNOSTICS = {"mass": ("integral of the density (conserved)", "1"),
                "min": ("smallest value of the density on the solver grid", None),
                "negative_mass": ("integral of min(density, 0): mass lost to truncation", "1"),
                "energy": ("interaction energy (1/2beta) int int exp(beta <x, By>) rho rho", "1")}
#: (units, long name) of a density on S^2 (True) and on S^1 (False).
_DENSITY_UNITS = {True: ("sr-1", "token density against surface area"),
                  False: ("radian-1", "token density against arc length")}


class _Stored(dict):
    """The stored :meth:`DensitySolution.arrays` as a mapping with ``files`` (the interface of
    an NpzFile, which ``from_arrays`` implementations read)."""

    @property
    def files(self):
        return list(self)


class DensitySolution:
    """Base of the solutions of the density solvers: the states at the output times.

    Attributes
    ----------
    times : (T,)
    coefficients : (T, ...) the solver's state at each output time
    model, initial_measure : the model and the density0 given to ``solve``
    diagnostics : dict of (T,) arrays ``mass``, ``min``, ``negative_mass`` (<= 0) and
        ``energy`` (NaN at beta = 0 or inf)
    path : name of the velocity operator the solver used
    stats : steps, rejected steps and right-hand-side evaluations (and why a run stopped)
    """

    #: the tag written by :meth:`save` and checked by :meth:`load`
    kind = "abstract"
    _kinds: dict = {}
    #: the state in :meth:`to_xarray`: (variable name, dimensions after ``time`` or None for
    #: ``state_0, state_1, ...``, units, long name)
    state_variable = ("state", None, "1", "solver state")

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        DensitySolution._kinds[cls.kind] = cls.__name__

    def __init__(self, times, coefficients, model, initial_measure, diagnostics, path="",
                 stats=None):
        self.times = np.asarray(times, dtype=np.float64)
        self.coefficients = np.asarray(coefficients)
        self.model = model
        self.initial_measure = initial_measure
        self.diagnostics = diagnostics
        self.path = path
        self.stats = stats or {}
        #: the solver settings (:meth:`DensitySolver.settings`), set by ``solve``
        self.settings = {}

    def __len__(self):
        return self.times.size

    def density(self, i: int, x) -> np.ndarray:
        """rho at output i at points x: (..., d) -> (...)."""
        raise NotImplementedError

    def quadrature(self, i: int):
        """(points (n, d), weights (n,) or None for equal weights, values (n,)) at output i."""
        raise NotImplementedError

    def measure(self, i: int) -> PointCloud:
        """Output i as a :class:`PointCloud` of quadrature nodes weighted by quadrature weight ×
        density. A truncated density can dip below zero; those nodes get weight 0 and the rest
        is rescaled to total mass 1 (``diagnostics["negative_mass"]`` says how much was
        dropped)."""
        return grid_point_cloud(*self.quadrature(i))

    def arrays(self) -> dict:
        """What identifies the discretisation besides times, states, diagnostics and the model
        (scalars and small arrays; :meth:`to_xarray` stores them as ``grid_*`` attributes)."""
        return {}

    @classmethod
    def from_arrays(cls, z, **common):
        """Rebuild from the stored :meth:`arrays` ``z`` (subclass: read its own)."""
        return cls(**common)

    # ------------------------------------------------------------------ export
    def xarray_space(self):
        """How the density is laid out in :meth:`to_xarray`: (dims, coords, values (T, ...),
        units, long_name). The default lists the quadrature nodes (dimension ``node``, with
        their positions and weights, e.g. the cells of a mesh); a subclass on a lat/lon grid or
        a circle overrides it."""
        pts, w, _ = self.quadrature(0)
        vals = np.stack([np.asarray(self.quadrature(i)[2]).reshape(-1) for i in range(len(self))])
        pts = np.asarray(pts).reshape(-1, pts.shape[-1])
        w = np.full(pts.shape[0], 4 * np.pi / pts.shape[0]) if w is None else np.asarray(w).ravel()
        coords = {"node_position": (("node", "component"), pts,
                                    {"units": "1", "long_name": "quadrature node (unit vector)"}),
                  "node_weight": ("node", w, {"units": "sr" if pts.shape[-1] == 3 else "radian",
                                              "long_name": "quadrature weight (area)"})}
        units, name = _DENSITY_UNITS[pts.shape[-1] == 3]
        return ("node",), coords, vals, units, name

    def to_xarray(self):
        """The solution as an :class:`xarray.Dataset`.

        Variables: ``density`` (time, <space>) on the solver's grid (per steradian on S^2, per
        radian on S^1; see :meth:`xarray_space`); ``state`` (or ``state_real`` and
        ``state_imag`` when complex): the solver's state, which rebuilds the solution exactly;
        the diagnostics ``mass``, ``min``, ``negative_mass``, ``energy`` (time). The model is in
        the ``model_*`` attributes, the discretisation in ``grid_*``, the solver settings in
        ``setting_*``, the time-loop statistics in ``stat_*``. Every density solution inherits
        this; :meth:`from_xarray` reads it back.
        """
        import xarray as xr

        from .. import io

        dims, coords, values, units, long_name = self.xarray_space()
        data = {"density": (("time", *dims), values, {"units": units, "long_name": long_name})}
        state = np.asarray(self.coefficients)
        sname, sdims, sunits, slong = self.state_variable
        sdims = ("time", *(sdims or [f"state_{k}" for k in range(state.ndim - 1)]))
        if np.iscomplexobj(state):
            for part in ("real", "imag"):
                data[f"{sname}_{part}"] = (sdims, getattr(state, part).copy(),
                                           {"units": sunits, "long_name": f"{slong}, {part} part"})
        else:
            data[sname] = (sdims, state, {"units": sunits, "long_name": slong})
        for k, v in (self.diagnostics or {}).items():
            ln, unit = _DIAGNOSTICS.get(k, (k, "1"))
            data[k] = ("time", np.asarray(v, dtype=np.float64),
                       {"long_name": ln, "units": unit or units})
        grid = {k: (np.asarray(v).item() if np.ndim(v) == 0 else np.asarray(v))
                for k, v in self.arrays().items()}
        attrs = {**io.global_attrs(f"density on the sphere ({type(self).__name__})",
                                   f"density solution {self.kind}"),
                 "solution_kind": self.kind, "velocity_path": self.path,
                 **(io.model_attrs(self.model) if self.model is not None else {}),
                 **io.settings_attrs(grid, prefix="grid_"),
                 **io.settings_attrs(getattr(self, "settings", {}) or {}),
                 **io.settings_attrs(self.stats or {}, prefix="stat_")}
        return xr.Dataset(data, coords={"time": io.time_coord(self.times), **coords}, attrs=attrs)

    @classmethod
    def from_xarray(cls, ds, source: str = "the dataset"):
        """Rebuild a solution from :meth:`to_xarray`'s Dataset (``initial_measure`` is None)."""
        from .. import io

        kind = ds.attrs.get("solution_kind")
        if kind != cls.kind:
            other = DensitySolution._kinds.get(kind, "the matching solution class")
            raise ValueError(f"{source} holds a {kind or 'non-spherepde'} solution, not a "
                             f"{cls.kind} one; use {other}.load or {other}.from_xarray")
        name = cls.state_variable[0]
        state = (ds[f"{name}_real"].values + 1j * ds[f"{name}_imag"].values
                 if f"{name}_real" in ds else ds[name].values)
        diag = {k: ds[k].values for k in _DIAGNOSTICS if k in ds}
        # a solution of prescribed transport has no model
        model = io.model_from_attrs(ds.attrs) if f"{io.MODEL_PREFIX}d" in ds.attrs else None
        sol = cls.from_arrays(_Stored(io.settings_from_attrs(ds.attrs, "grid_")),
                              times=ds["time"].values, coefficients=state,
                              model=model, initial_measure=None,
                              diagnostics=diag, path=str(ds.attrs.get("velocity_path", "")),
                              stats=io.settings_from_attrs(ds.attrs, "stat_"))
        sol.settings = io.settings_from_attrs(ds.attrs)
        return sol

    def save(self, path):
        """Write the solution to ``path`` as NetCDF (:meth:`to_xarray`), atomically."""
        from .. import io

        return io.save_dataset(self.to_xarray(), path)

    @classmethod
    def load(cls, path):
        """Read a solution written by :meth:`save` (``initial_measure`` is not stored: None)."""
        from .. import io

        return cls.from_xarray(io.open_dataset(path), source=str(path))

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({len(self)} times in [{self.times[0]:g}, "
                f"{self.times[-1]:g}], path={self.path})")
