r"""Finite-volume solvers of the mean-field equation on the cubed sphere.

.. math:: \partial_t\rho + \operatorname{div}_S(\rho\, X[\rho]) = 0 .

The state is the vector of cell masses :math:`m_K = \int_K \rho\, dA` on the gnomonic
equiangular cubed sphere; the spatial scheme (reconstruction, limiter, upwind fluxes, flux
form, the positivity rate r) is :class:`spherepde.density.fv_scheme.FiniteVolumeScheme`.

The velocity at the edge points is a velocity operator of
:mod:`spherepde.interaction.operators` chosen once, at construction, with its nodes at the cell
centres (weights: the areas) and its targets at the edge points; :class:`EdgeVelocity` turns it
into normal velocities. The operators: the zero-temperature field (beta = inf, fixed in time),
the attention of the cell masses placed at the cell centres (direct quadrature, O(faces ×
cells) per evaluation; the centroid rule is exact for affine kernels, so its error is O(h²),
the order of the scheme), or that of the cell measure from its harmonic moments
(:class:`CellHarmonic`, for fine meshes: transforms planned once for the fixed edge points
and cell nodes, and exact cap sums where the harmonic sums cannot certify the solver's
``velocity_tol``).

Time stepping (:data:`STEPPINGS`): "multirate" (default) evaluates the velocity once per macro
step and substeps the transport inside it under the positivity bound dt·r <= cfl
(:class:`spherepde.timestepping.Multirate`); "per-stage" evaluates it at every stage of every
step (:class:`spherepde.timestepping.PositivityRate`). Both keep the mass to round-off and every
cell mass >= 0 (cfl <= 1, SSP schemes); nothing is clipped. docs/methods.md, "Multirate finite
volumes", gives the error model of the macro steps.

The solvers subclass :class:`spherepde.density.base.DensitySolver` (input checks, outputs,
resolution stop, diagnostics, export); the time stepping is their
:meth:`~spherepde.density.base.DensitySolver.integrate`, one call of
:func:`spherepde.timestepping.march`.
"""
from __future__ import annotations

import math

import numpy as np

from .. import timestepping
from ..interaction.cell_measures import CellHarmonic, EdgeVelocity
from ..interaction.operators import DirectQuadrature, ZeroTemperature, choose_operator
from ..registry import Registry
from ..sphere.cubed_sphere import PANELS, CubedSphere
from .base import (
    CellMassStepping,
    DensitySolution,
    DensitySolver,
    Resolution,
    check_mass,
    check_values,
    density_callable,
)
from .fv_scheme import (  # noqa: F401 - re-exported
    LIMITERS,
    MAX_N,
    QUADRATIC_EDGE_WEIGHT,
    RECONSTRUCTIONS,
    FiniteVolumeScheme,
)

__all__ = ["FiniteVolumeSolver", "FiniteVolumeSolution", "FiniteVolumeScheme", "TransportSolver",
           "EdgeVelocity", "CellHarmonic", "LIMITERS", "RECONSTRUCTIONS", "SSP_SCHEMES",
           "default_velocity_tol", "STEPPINGS", "DEFAULT_MACRO_TOL", "locate"]

#: Registry schemes that are convex combinations of forward-Euler steps, with their SSP
#: coefficient (the largest step, in units of the forward-Euler bound, that keeps positivity).
SSP_SCHEMES = {"euler": 1.0, "heun": 1.0, "ssprk3": 1.0}
#: The face velocities' own discretisation error: the field of the cell measure is off from
#: that of the smooth density by about FIELD_ERROR_H2 · h² (max over the edge points; measured
#: 3.1e-4, 7.8e-5, 2.0e-5 at n = 16, 32, 64 in the default scenario, h = mesh.h ≈ 2.2/n).
FIELD_ERROR_H2 = 0.017
#: The accuracy FiniteVolumeSolver asks of the harmonic field by default (CellHarmonic's
#: flux criterion, relative to |V|_2): this share of that discretisation error ...
VELOCITY_TOL_SHARE = 0.5
#: ... and never looser than this (the largest value whose effect on a study curve was
#: measured: docs/methods.md, "How accurate the edge velocities must be").
VELOCITY_TOL_MAX = 1e-5


def default_velocity_tol(mesh: CubedSphere) -> float:
    """The default ``velocity_tol`` of :class:`FiniteVolumeSolver` on ``mesh``:
    min(VELOCITY_TOL_MAX, VELOCITY_TOL_SHARE · FIELD_ERROR_H2 · h²), half the error the cell
    measure's own field has at a smooth state (1e-5 up to n = 64, 2.5e-6 at n = 128, 6.3e-7
    at n = 256)."""
    return min(VELOCITY_TOL_MAX, VELOCITY_TOL_SHARE * FIELD_ERROR_H2 * mesh.h ** 2)


#: path="auto" uses direct quadrature up to this n (O(n^4) work, 0.2 s per evaluation at
#: n = 24 on one core) and the harmonic field beyond.
DIRECT_MAX_N = 24


#: Multirate stepping: the default ``macro_tol`` (docs/methods.md, "Multirate finite volumes").
DEFAULT_MACRO_TOL = 1e-3


# ---------------------------------------------------------------------------- the solution
class FiniteVolumeSolution(DensitySolution):
    r"""Cell masses at the output times of a finite-volume solve.

    Besides those of :class:`spherepde.density.base.DensitySolution`, it has these attributes.

    Attributes
    ----------
    masses : (T, n_cells) cell masses :math:`\int_K\rho_t\, dA` (the ``coefficients``)
    n : int, the mesh (``mesh`` builds it on first use)
    limiter, reconstruction : the scheme's reconstruction and limiter (used by :meth:`density`)
    model : None for prescribed transport
    stats : steps, rejected steps, right-hand-side evaluations, largest dt·r reached
        (``max_courant``)
    """

    kind = "FV"
    state_variable = ("cell_mass", ("cell",), "1",
                      "mass of each cell (integral of the density over the cell)")

    def __init__(self, times, coefficients, model, initial_measure, diagnostics, path="",
                 stats=None, n=None, limiter="barth_jespersen", mesh=None,
                 reconstruction="cubic"):
        super().__init__(times, np.asarray(coefficients, dtype=np.float64), model,
                         initial_measure, diagnostics, path, stats)
        cells = self.coefficients.shape[-1]
        self.n = int(n) if n is not None else int(round(math.sqrt(cells / 6)))
        if 6 * self.n ** 2 != cells:
            raise ValueError(f"{cells} cell masses do not fit a cubed sphere of n = {self.n} "
                             f"(6 n^2 = {6 * self.n ** 2} cells)")
        self.limiter = limiter
        self.reconstruction = reconstruction
        self._mesh = mesh
        self._scheme = None

    @property
    def masses(self) -> np.ndarray:
        return self.coefficients

    @property
    def mesh(self) -> CubedSphere:
        if self._mesh is None:
            self._mesh = CubedSphere(self.n)
        return self._mesh

    def averages(self, i: int) -> np.ndarray:
        """Cell averages of rho at output i, (n_cells,)."""
        return self.masses[i] / self.mesh.areas

    def mass(self, i: int) -> float:
        return float(self.masses[i].sum())

    def quadrature(self, i: int):
        """The cell centres weighted by the cell areas, with the cell averages: the cell masses
        at the centres (W2 to the true rho_t is at most about the cell diameter h)."""
        return self.mesh.centers, self.mesh.areas, self.averages(i)

    def density(self, i: int, x) -> np.ndarray:
        """rho at output i at points x: (..., 3) -> (...), from the limited reconstruction of
        the cell containing x (the solver's, ``reconstruction``). The limiter keeps it >= 0 at
        the edge points; towards a cell corner it can extrapolate below 0, and such values are
        returned as 0 (the evolved cell masses are never altered)."""
        from ..sphere import as_points

        x = as_points(x, 3)
        shape = x.shape[:-1]
        xf = x.reshape(-1, 3)
        if self._scheme is None:
            self._scheme = FiniteVolumeScheme(self.mesh, self.limiter, self.reconstruction)
        out = self._scheme.evaluate(self.masses[i], xf, locate(self.mesh, xf))
        return np.maximum(out, 0.0).reshape(shape) if self.limiter != "none" else out.reshape(shape)

    def xarray_space(self):
        """The cell averages on dimension ``cell``, with the cell centres' latitude and
        longitude (degrees), their CF bounds (the four corners, counter-clockwise seen from
        outside the sphere) and the cell areas (sr) as coordinates."""
        mesh = self.mesh

        def lat_lon(x):
            return (np.degrees(np.arcsin(np.clip(x[..., 2], -1.0, 1.0))),
                    np.degrees(np.arctan2(x[..., 1], x[..., 0])))

        lat, lon = lat_lon(mesh.centers)
        lat_b, lon_b = lat_lon(mesh.corners)
        coords = {"lat": ("cell", lat, {"units": "degrees_north", "standard_name": "latitude",
                                        "long_name": "latitude of the cell centre",
                                        "bounds": "lat_bounds"}),
                  "lon": ("cell", lon, {"units": "degrees_east", "standard_name": "longitude",
                                        "long_name": "longitude of the cell centre",
                                        "bounds": "lon_bounds"}),
                  # CF: a bounds variable takes its units from its coordinate
                  "lat_bounds": (("cell", "vertex"), lat_b),
                  "lon_bounds": (("cell", "vertex"), lon_b),
                  "cell_area": ("cell", mesh.areas,
                                {"units": "sr", "standard_name": "cell_area",
                                 "long_name": "area of the cell on the unit sphere"})}
        return (("cell",), coords, self.masses / mesh.areas, "sr-1",
                "token density against surface area, cell average")

    def arrays(self) -> dict:
        return dict(n=np.int64(self.n), limiter=np.str_(self.limiter),
                    reconstruction=np.str_(self.reconstruction))

    @classmethod
    def from_arrays(cls, z, **common):
        # files written before the quadratic reconstruction existed hold linear solutions
        rec = str(z["reconstruction"]) if "reconstruction" in z.files else "linear"
        return cls(**common, n=int(z["n"]), limiter=str(z["limiter"]), reconstruction=rec)

    def __repr__(self) -> str:
        return (f"FiniteVolumeSolution(n={self.n}, {self.times.size} times in "
                f"[{self.times[0]:g}, {self.times[-1]:g}], limiter={self.limiter})")


# ---------------------------------------------------------------------------- solvers
def _check_common(scheme_name, cfl, limiter):
    timestepping.get_scheme(scheme_name)
    if scheme_name not in SSP_SCHEMES:
        raise ValueError(f"scheme {scheme_name!r} is not strong-stability preserving, so it would "
                         f"not keep the density >= 0; use one of {sorted(SSP_SCHEMES)} "
                         "(default 'ssprk3')")
    if not (isinstance(cfl, (int, float)) and math.isfinite(cfl) and cfl > 0):
        raise ValueError(f"cfl must be a finite number > 0 (<= 1 keeps the density >= 0); "
                         f"got {cfl!r}")
    LIMITERS.check(limiter)


class _CellMassSolver(CellMassStepping, DensitySolver):
    """What the two finite-volume solvers share: the mesh and the scheme, the state (cell
    masses), the initial cell integrals and the positivity step control (:meth:`integrate`).
    A subclass sets :attr:`field` (an :class:`EdgeVelocity`) and, for the diagnostics'
    energy, :attr:`operator`."""

    d = 3
    solution_class = FiniteVolumeSolution
    time_setting_names = ("scheme", "cfl", "stepping", "macro_tol")
    setting_names = ("n", "limiter", "reconstruction", "quadrature_order", "kernel",
                     "velocity_tol")
    #: the step control gives up after this many steps (a field far too fast for the mesh)
    max_steps = timestepping.DEFAULT_MAX_STEPS

    def __init__(self, model, n, scheme, cfl, limiter, quadrature_order, mass_rtol,
                 reconstruction="cubic", stepping="multirate", macro_tol=DEFAULT_MACRO_TOL):
        _check_common(scheme, cfl, limiter)
        STEPPINGS.get(stepping)
        if not (isinstance(macro_tol, (int, float)) and math.isfinite(macro_tol)
                and 0.0 < macro_tol < 1.0):
            raise ValueError(f"macro_tol must be a number in (0, 1) (the velocity's relative "
                             f"change a macro step may leave unresolved); got {macro_tol!r}")
        super().__init__(model, scheme=scheme, cfl=cfl, mass_rtol=float(mass_rtol))
        self.stepping = stepping
        self.macro_tol = float(macro_tol)
        if model is not None and model.d != 3:
            raise ValueError(f"the finite-volume solver works on S^2 (d = 3); the model has "
                             f"d = {model.d}")
        self.quadrature_order = int(quadrature_order)
        if self.quadrature_order < 1:
            raise ValueError(f"quadrature_order must be >= 1; got {quadrature_order!r}")
        self.fv = FiniteVolumeScheme(n, limiter, reconstruction)
        self.mesh = self.fv.mesh
        self.n = self.mesh.n
        self.limiter = limiter
        self.reconstruction = reconstruction
        self.node_weights = self.mesh.areas
        self._edge_area = self.mesh.face_lengths ** 2
        self.field = None

    # ------------------------------------------------------------------ the state
    def values(self, masses):
        """Cell averages (n_cells,)."""
        return masses / self.mesh.areas

    def mass(self, masses) -> float:
        return float(np.sum(masses))

    def project(self, density0) -> np.ndarray:
        """Cell masses of a measure or callable density, integrated over each cell with a
        tensor Gauss rule of ``quadrature_order`` points a side (a list or tuple is taken as
        cell averages)."""
        if isinstance(density0, (list, tuple)):
            return self.initial_state(np.asarray(density0, dtype=np.float64))
        f = density_callable(density0, 3)
        P, W = self.mesh.cell_quadrature(self.quadrature_order)
        vals = np.asarray(f(P), dtype=np.float64)
        if vals.shape != P.shape[:-1]:
            raise ValueError(f"the density callable must map points (..., 3) to values (...);"
                             f" got output shape {vals.shape} for input {P.shape}")
        masses = np.sum(check_values(vals) * W, axis=1)
        # a Gauss rule needs a few points per width 1/sqrt(kappa) of a cap: measured,
        # q >= 1.3 h sqrt(kappa) + 3 with h the cell size, at n = 16 and 64, kappa = 1e2..1e4
        h = 1.52 / self.n  # the mean cell diameter
        check_mass(float(masses.sum()), self.mass_rtol, resolves=Resolution(
            density0, f"the cells of n = {self.n} (about {h:.3g} rad across) with "
            f"quadrature_order = {self.quadrature_order}", "its cell integrals give",
            "quadrature_order", lambda kappa: math.ceil(1.3 * h * math.sqrt(kappa)) + 3,
            "raise quadrature_order (or n), or widen the initial density"))
        return np.maximum(masses, 0.0)

    def check_state(self, y) -> np.ndarray:
        """Cell masses from an array of cell averages (n_cells,)."""
        avg = np.asarray(y, dtype=np.float64)
        mesh = self.mesh
        if avg.shape != (mesh.n_cells,):
            raise ValueError(f"an array density0 must hold the {mesh.n_cells} cell averages "
                             f"of this mesh (n = {mesh.n}); got shape {avg.shape}")
        return np.maximum(check_values(avg) * mesh.areas, 0.0)

    def initial_masses(self, density0) -> np.ndarray:
        """Cell masses (n_cells,) of density0: a measure or callable, or an array of cell
        averages (n_cells,), each checked."""
        return self.initial_state(density0)

    def solution_arrays(self) -> dict:
        return dict(n=self.n, limiter=self.limiter, mesh=self.mesh,
                    reconstruction=self.reconstruction)

    # ------------------------------------------------------------------ the dynamics
    def tendency(self, t, masses):
        """(dm/dt (n_cells,), positivity rate r) at time t."""
        return self.fv.tendency(masses, self.field(t, masses))

    def rhs(self, t, masses) -> np.ndarray:
        """dm/dt of the cell masses (n_cells,)."""
        return self.tendency(t, masses)[0]

    def integrate(self, f, y0, times, callback, progress, stats, dt_max=None) -> None:
        """The step control of :meth:`run`: :func:`spherepde.timestepping.march` with the
        controller of :attr:`stepping` (:data:`STEPPINGS`), replacing the base's CFL-capped
        registry steps. ``f`` and ``dt_max`` are not used: the positivity control needs the
        rate that :meth:`tendency` returns with dm/dt. ``stats["max_courant"]`` is the largest
        dt·r reached (<= 1 keeps every cell mass >= 0)."""
        controller = STEPPINGS.get(self.stepping)(self)
        timestepping.march(controller, y0, times, callback=callback, progress=progress,
                           keep=lambda i: False, stats=stats, max_steps=self.max_steps)

    def transport(self, masses, u):
        """(dm/dt, positivity rate) of the cell masses under the edge velocities u."""
        return self.fv.tendency(masses, u)

    def macro_field(self, t, masses):
        """The edge velocities of a macro step (:class:`CellMassStepping`)."""
        return self.field(t, masses)

    def field_defect(self, u, u_ref, masses) -> float:
        """:meth:`velocity_defect`, the change that sizes a macro step."""
        return self.velocity_defect(u, u_ref, masses)

    def velocity_defect(self, u, u_ref, masses) -> float:
        r"""The density-weighted RMS of u - u_ref relative to that of u,

        .. math:: e = \Big(\frac{\sum_{e,q} w_{eq} (u_{eq} - u^{ref}_{eq})^2}
                  {\sum_{e,q} w_{eq}\, u_{eq}^2}\Big)^{1/2},\qquad w_{eq} = |e|^2\,\rho_{eq},

        with :math:`\rho_{eq}` the larger of the two limited reconstructions at the edge point
        (:meth:`EdgeVelocity.edge_density`) and :math:`|e|^2` the area an edge stands for: an
        estimate of :math:`\|u - u^{ref}\|_{L^2(\rho)} / \|u\|_{L^2(\rho)}`, the relative
        rate at which W2 between the two flows can grow."""
        w = self.field.edge_density(masses) * self._edge_area[:, None]
        norm2 = float(np.sum(w * u * u))
        diff2 = float(np.sum(w * (u - u_ref) ** 2))
        if norm2 == 0.0:
            return 0.0 if diff2 == 0.0 else math.inf
        return math.sqrt(diff2 / norm2)

#: How a cell-mass solver steps in time: name -> controller factory of the solver.
STEPPINGS = Registry("finite-volume time stepping")
STEPPINGS.register("multirate", _CellMassSolver.multirate_controller)
STEPPINGS.register("per-stage", _CellMassSolver.per_stage_controller)


class TransportSolver(_CellMassSolver):
    r"""Finite-volume transport :math:`\partial_t\rho + \operatorname{div}_S(\rho v) = 0` by a
    prescribed velocity v(t, x) (the standard test cases of the field).

    Parameters
    ----------
    n : int
        Cells along a cube edge (6 n² cells).
    velocity : callable velocity(t, x), x: (..., 3) -> (..., 3) tangent vectors
    scheme, cfl, limiter, quadrature_order, mass_rtol, reconstruction, stepping, macro_tol : as
        :class:`FiniteVolumeSolver`
    """

    needs_model = False

    def __init__(self, n, velocity, scheme="ssprk3", cfl=0.9, limiter="barth_jespersen",
                 quadrature_order=3, mass_rtol=1e-6, reconstruction="cubic",
                 stepping="multirate", macro_tol=DEFAULT_MACRO_TOL):
        super().__init__(None, n, scheme, cfl, limiter, quadrature_order, mass_rtol,
                         reconstruction, stepping, macro_tol)
        self.field = EdgeVelocity(self.fv, velocity=velocity)


def _direct(s, model, fac):
    """Direct quadrature over the cell centres, at the edge points."""
    mesh = s.mesh
    return DirectQuadrature(model, mesh.centers, mesh.areas, kernel=s.kernel,
                            targets=mesh.face_points)


def _harmonic(s, model, fac):
    """The harmonic field of the cell measure (cell masses -> moments -> field)."""
    return CellHarmonic(model, s.mesh, s.mesh.face_points, planned=s.planned,
                        velocity_tol=s.velocity_tol)


def _zero_temperature(s, model, fac):
    """The zero-temperature (beta = inf) field at the edge points."""
    mesh = s.mesh
    return ZeroTemperature(model, mesh.centers, mesh.areas, targets=mesh.face_points)


#: The velocity operators of :class:`FiniteVolumeSolver`: name -> build(solver, model, fac)
#: (fac: the (c, O) of B = c·O, or None); "harmonic" needs ducc0.
OPERATORS = Registry("velocity operator of FiniteVolumeSolver")
OPERATORS.register("direct", _direct)
OPERATORS.register("harmonic", _harmonic, requires="spherepde.interaction.harmonic")
OPERATORS.register("zero_temperature", _zero_temperature)


class FiniteVolumeSolver(_CellMassSolver):
    r"""Finite-volume solver of :math:`\partial_t\rho + \operatorname{div}_S(\rho X[\rho]) = 0`
    on the gnomonic equiangular cubed sphere (docs/methods.md says why this mesh).

    Conservative (flux form: the mass is constant to round-off), at least second order in
    smooth regions (limited least-squares cubic reconstruction, two-point Gauss fluxes), and
    positivity preserving (cell masses stay >= 0 for cfl <= 1 with an SSP scheme; nothing is
    clipped).

    Parameters
    ----------
    model : Model (d = 3), SA or USA, any B; beta = inf uses the zero-temperature field
    n : int
        Cells along a cube edge: 6 n² cells of mean diameter h ≈ 1.52/n.
    scheme : "ssprk3" (default), "heun" or "euler" (the SSP tableaus of the registry)
    cfl : float
        Each step is dt = cfl / r with r the positivity rate of the current state
        (``FiniteVolumeScheme.tendency``); cfl <= 1 keeps the density >= 0.
    limiter : "barth_jespersen" (default), "positivity" or "none"
    reconstruction : "cubic" (default), "quadratic" or "linear" (:class:`FiniteVolumeScheme`)
    path : "auto", "direct", "harmonic" or "zero_temperature"
        The velocity operator at the edge points (module docstring): "auto" takes the
        zero-temperature field at beta = inf, direct quadrature up to n = DIRECT_MAX_N and the
        harmonic field (cell masses -> moments -> field) beyond.
    kernel : interaction kernel of :func:`spherepde.interaction.attention` (direct path)
    quadrature_order : Gauss points a side per cell for the initial cell integrals
    mass_rtol : tolerance on the mass of density0
    velocity_tol : float, optional
        Harmonic path: the accuracy of the face velocities for the cell measure, relative to
        |V|_2 (:class:`CellHarmonic`'s flux criterion). None (default):
        :func:`default_velocity_tol`, half the O(h²) error the cell measure's own field has.
    planned : bool
        Harmonic path: planned transforms (default) or ducc0's non-equispaced SHT at every
        call (the reference; same results to ~1e-13).
    stepping : "multirate" (default) or "per-stage" (:data:`STEPPINGS`)
        "multirate": the velocity is evaluated once per macro step, whose length keeps the
        velocity's unresolved change in time below ``macro_tol``, and the transport substeps
        under the positivity bound inside it with the velocity extrapolated linearly in time
        (:class:`spherepde.timestepping.Multirate`); "per-stage": the velocity at every stage
        of every positivity-bounded step (the reference).
    macro_tol : float
        Multirate: the accepted defect of the extrapolated velocity at the end of a macro
        step, :meth:`velocity_defect` (relative, density-weighted RMS); docs/methods.md, "Multirate
        finite volumes", maps it to the error of a W2 curve.

    Examples
    --------
    >>> import numpy as np, spherepde as sp
    >>> model = sp.Model(V=np.diag([1.0, 0.4, 0.0]), beta=np.inf)
    >>> sol = sp.FiniteVolumeSolver(model, 8).solve(sp.measures.Uniform(3), [0.0, 0.5])
    >>> abs(sol.mass(1) - 1) < 1e-13
    True
    """

    def __init__(self, model, n, scheme="ssprk3", cfl=0.9, limiter="barth_jespersen",
                 path="auto", kernel="auto", quadrature_order=3, mass_rtol=1e-6,
                 reconstruction="cubic", velocity_tol=None, planned=True, stepping="multirate",
                 macro_tol=DEFAULT_MACRO_TOL):
        super().__init__(model, n, scheme, cfl, limiter, quadrature_order, mass_rtol,
                         reconstruction, stepping, macro_tol)
        if velocity_tol is None:
            velocity_tol = default_velocity_tol(self.mesh)
        if not (isinstance(velocity_tol, (int, float)) and 0.0 < velocity_tol < 1.0):
            raise ValueError(f"velocity_tol must be a number in (0, 1) (the accuracy of the "
                             f"face velocities relative to |V|); got {velocity_tol!r}")
        self.velocity_tol = float(velocity_tol)
        if path == "auto" and not model.zero_temperature:
            harmonic = OPERATORS.installed("harmonic")
            path = "direct" if self.n <= DIRECT_MAX_N or not harmonic else "harmonic"
        name, fac = choose_operator(model, path, 3, OPERATORS)
        self.kernel = kernel
        self.planned = planned
        self.operator = OPERATORS.get(name)(self, model, fac)
        self.field = EdgeVelocity(self.fv, self.operator)

def locate(mesh: CubedSphere, x) -> np.ndarray:
    """Index of the cell containing each point x: (m, 3) -> (m,) (ties to the lower index)."""
    x = np.asarray(x, dtype=np.float64)
    n = mesh.n
    c, e1, e2 = PANELS[:, 0], PANELS[:, 1], PANELS[:, 2]
    proj = x @ c.T  # (m, 6): the panel is the one whose centre is most aligned
    p = np.argmax(proj, axis=1)
    z = proj[np.arange(x.shape[0]), p]
    a = np.arctan2(np.sum(x * e1[p], axis=1), z)
    b = np.arctan2(np.sum(x * e2[p], axis=1), z)
    da = 0.5 * np.pi / n
    i = np.clip(np.floor((a + 0.25 * np.pi) / da).astype(np.int64), 0, n - 1)
    j = np.clip(np.floor((b + 0.25 * np.pi) / da).astype(np.int64), 0, n - 1)
    return p * n * n + j * n + i
