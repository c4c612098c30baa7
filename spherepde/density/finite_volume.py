r"""Finite-volume solver of the mean-field equation on the cubed sphere.

.. math:: \partial_t\rho + \operatorname{div}_S(\rho\, X[\rho]) = 0 .

The state is the vector of cell masses :math:`m_K = \int_K \rho\, dA` on the gnomonic
equiangular cubed sphere (:class:`spherepde.sphere.cubed_sphere.CubedSphere`). One right-hand
side:

1. **Reconstruction.** In every cell, :math:`\rho_K(x) = \bar\rho_K + \phi_K\, g_K\cdot(x - \hat x_K)`
   with :math:`\bar\rho_K = m_K/|K|`, g_K the least-squares gradient (tangent at the cell
   centre) of the averages of the four edge neighbours, and :math:`\hat x_K` the mean of the
   eight edge quadrature points of K. Because the reconstruction is affine in x, its mean over
   those eight points is exactly :math:`\bar\rho_K`, whatever the limiter factor
   :math:`\phi_K\in[0,1]` is. The limiter chooses phi_K (Barth & Jespersen 1989: the values at
   the quadrature points stay within the neighbours' range; or only ≥ 0, Zhang & Shu 2010).
2. **Fluxes.** The normal velocity :math:`u = X[\rho]\cdot n` at the two Gauss points of every
   edge (a great-circle arc, so n is exact), and the upwind flux
   :math:`F_e = \tfrac{|e|}{2}\sum_q (u_q^+\rho_{K}(x_q) - u_q^-\rho_{K'}(x_q))`.
3. **Flux form.** :math:`\dot m_K = -\sum_{e\subset\partial K} \pm F_e`: every flux leaves one
   cell and enters its neighbour, so the total mass is conserved to round-off.

**Positivity.** With :math:`\bar\rho_K = \frac18\sum_{e,q}\rho_K(x_{eq})` and all
:math:`\rho_K(x_{eq})\ge 0`, one forward-Euler step gives

.. math:: m_K^{+}/|K| \ge \sum_{e,q}\rho_K(x_{eq})\Big(\frac18 - \frac{\Delta t\,|e|\,u_{eq}^+}{2|K|}\Big),

which is ≥ 0 when :math:`\Delta t\, r \le 1` with the *positivity rate*
:math:`r = \max_{K,e,q} 4|e|u_{eq}^+/|K|`. The strong-stability-preserving Runge–Kutta schemes
(``euler``, ``heun`` = SSPRK2, ``ssprk3``; SSP coefficient 1) are convex combinations of such
steps, so every step is taken with :math:`\Delta t = \mathrm{cfl}/r` (the rate of the current
state) and re-taken with a smaller step if a later stage's rate exceeds 1/Δt. No value is
clipped after the fact.

The velocity at the edge points is chosen once, at construction: the zero-temperature field
(beta = inf, fixed in time), or the attention of the cell masses placed at the cell centres
(direct quadrature, O(faces × cells) per evaluation; the centroid rule is exact for affine
kernels, so its error is O(h²), the order of the scheme).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .. import interaction, timestepping
from ..interaction.operators import check_zero_temperature
from ..measures import Measure, PointCloud
from ..sphere.cubed_sphere import PANELS, CubedSphere
from .base import check_mass, check_values, density_callable, initial_measure

__all__ = ["FiniteVolumeSolver", "FiniteVolumeSolution", "FiniteVolumeScheme", "TransportSolver",
           "LIMITERS", "SSP_SCHEMES"]

#: Limiters by name -> kernel code. "barth_jespersen": edge values within the range of the
#: cell and its four neighbours (monotone, positive); "positivity": only edge values >= 0
#: (second order at smooth extrema, not monotone); "none": unlimited (not positive).
LIMITERS = {"barth_jespersen": 1, "positivity": 2, "none": 0}
#: Registry schemes that are convex combinations of forward-Euler steps, with their SSP
#: coefficient (the largest step, in units of the forward-Euler bound, that keeps positivity).
SSP_SCHEMES = {"euler": 1.0, "heun": 1.0, "ssprk3": 1.0}
#: The limiter keeps edge values this far (relative) inside their bounds, so that rounding in
#: rho + phi·delta cannot cross a bound of 0.
LIMITER_MARGIN = 1e-12
#: path="auto" uses direct quadrature up to this n (O(n^4) work, 0.2 s per evaluation at
#: n = 24 on one core) and the harmonic field beyond.
DIRECT_MAX_N = 24


def _has_harmonic() -> bool:
    try:
        from ..interaction import harmonic  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------------- kernels
@njit(parallel=True, cache=True)
def _reconstruct(rho, neighbors, grad_w, offsets, limiter, vals, slope):
    """Limited edge values vals[K, k, q] of the piecewise-linear reconstruction and its
    limited gradient slope[K] = phi_K g_K."""
    n = rho.shape[0]
    for i in prange(n):
        r = rho[i]
        gx = 0.0
        gy = 0.0
        gz = 0.0
        lo = r
        hi = r
        for k in range(4):
            rj = rho[neighbors[i, k]]
            dr = rj - r
            gx += grad_w[i, k, 0] * dr
            gy += grad_w[i, k, 1] * dr
            gz += grad_w[i, k, 2] * dr
            lo = min(lo, rj)
            hi = max(hi, rj)
        phi = 1.0
        for k in range(4):
            for q in range(2):
                d = gx * offsets[i, k, q, 0] + gy * offsets[i, k, q, 1] + gz * offsets[i, k, q, 2]
                vals[i, k, q] = d
                if limiter == 1:
                    if d > 0.0:
                        phi = min(phi, (hi - r) / d)
                    elif d < 0.0:
                        phi = min(phi, (lo - r) / d)
                elif limiter == 2:
                    if d < 0.0:
                        phi = min(phi, r / -d)
        if limiter != 0:
            phi = max(phi * (1.0 - LIMITER_MARGIN), 0.0)
        for k in range(4):
            for q in range(2):
                vals[i, k, q] = r + phi * vals[i, k, q]
        slope[i, 0] = phi * gx
        slope[i, 1] = phi * gy
        slope[i, 2] = phi * gz


@njit(parallel=True, cache=True)
def _fluxes(vals, face_cells, face_local, un, half_len, flux):
    """Upwind edge fluxes F_e (out of the owner) from the limited edge values."""
    for f in prange(flux.shape[0]):
        o = face_cells[f, 0]
        b = face_cells[f, 1]
        ko = face_local[f, 0]
        kb = face_local[f, 1]
        s = 0.0
        for q in range(2):
            u = un[f, q]
            if u > 0.0:
                s += u * vals[o, ko, q]
            else:
                s += u * vals[b, kb, q]
        flux[f] = half_len[f] * s


@njit(parallel=True, cache=True)
def _divergence(flux, un, cell_faces, cell_signs, rate_w, dm, rate):
    """dm[K] = -sum of outgoing fluxes; rate[K] = max_{e,q} 4|e|u^+/|K| (outflow only)."""
    for i in prange(dm.shape[0]):
        s = 0.0
        r = 0.0
        for k in range(4):
            f = cell_faces[i, k]
            sg = cell_signs[i, k]
            s -= sg * flux[f]
            for q in range(2):
                r = max(r, sg * un[f, q] * rate_w[i, k])
        dm[i] = s
        rate[i] = r


# ---------------------------------------------------------------------------- the scheme
class FiniteVolumeScheme:
    r"""The spatial discretisation on a :class:`CubedSphere`: reconstruction, upwind fluxes and
    the flux-form tendency of the cell masses, for given normal velocities at the edge points.

    Parameters
    ----------
    mesh : CubedSphere or int (n)
    limiter : "barth_jespersen" (default), "positivity" or "none"
    """

    def __init__(self, mesh, limiter: str = "barth_jespersen"):
        if not isinstance(mesh, CubedSphere):
            mesh = CubedSphere(mesh)
        if limiter not in LIMITERS:
            raise ValueError(f"unknown limiter {limiter!r}; choose one of {sorted(LIMITERS)}")
        self.mesh = m = mesh
        self.limiter = limiter
        self._limiter_code = LIMITERS[limiter]
        N = m.n_cells
        # edge points of each cell [K, k, q] and their mean, the reconstruction's anchor
        pts = m.face_points[m.cell_faces]  # (N, 4, 2, 3)
        self.anchor = pts.reshape(N, 8, 3).mean(axis=1)
        self._offsets = np.ascontiguousarray(pts - self.anchor[:, None, None, :])
        # least-squares gradient in the tangent plane at the centre: g = sum_k w_k (rho_k - rho_K)
        c = m.centers
        t1 = np.cross(c, np.eye(3)[np.argmin(np.abs(c), axis=1)])
        t1 /= np.linalg.norm(t1, axis=1, keepdims=True)
        t2 = np.cross(c, t1)
        d = self.anchor[m.neighbors] - self.anchor[:, None, :]  # (N, 4, 3)
        D = np.stack([np.sum(d * t1[:, None], -1), np.sum(d * t2[:, None], -1)], axis=-1)
        M = np.einsum("nka,nkb->nab", D, D)
        w2 = np.linalg.solve(M, D.transpose(0, 2, 1))  # (N, 2, 4)
        self._grad_w = np.ascontiguousarray(w2[:, 0, :, None] * t1[:, None]
                                            + w2[:, 1, :, None] * t2[:, None])
        # position of each edge in its owner's and neighbour's lists
        F = m.n_faces
        self._face_local = np.empty((F, 2), dtype=np.int64)
        cells = np.repeat(np.arange(N), 4)
        ks = np.tile(np.arange(4), N)
        side = np.where(m.cell_signs.reshape(-1) > 0, 0, 1)
        self._face_local[m.cell_faces.reshape(-1), side] = ks
        del cells
        self._half_len = 0.5 * m.face_lengths
        self._rate_w = np.ascontiguousarray(4.0 * m.face_lengths[m.cell_faces] / m.areas[:, None])
        self._vals = np.empty((N, 4, 2))
        self._slope = np.empty((N, 3))
        self._flux = np.empty(F)
        self._rate = np.empty(N)

    def normal_velocity(self, att) -> np.ndarray:
        """Normal components u[e, q] = <v(x_eq), n_e> of vectors at the edge points,
        att: (n_faces, 2, 3) -> (n_faces, 2). The normal is tangent at x_eq, so the radial part of
        an unprojected attention output drops out."""
        return np.einsum("fqk,fk->fq", att, self.mesh.face_normals)

    def edge_values(self, masses) -> np.ndarray:
        """Limited reconstruction at the edge points, (n_cells, 4, 2) [cell, edge, point]."""
        rho = np.ascontiguousarray(masses / self.mesh.areas)
        _reconstruct(rho, self.mesh.neighbors, self._grad_w, self._offsets, self._limiter_code,
                     self._vals, self._slope)
        return self._vals

    def reconstruction(self, masses):
        """(averages (n_cells,), limited gradients (n_cells, 3)): in cell K the density is
        rho_K(x) = averages[K] + gradients[K]·(x - anchor[K])."""
        self.edge_values(masses)
        return masses / self.mesh.areas, self._slope.copy()

    def tendency(self, masses, un):
        """(dm/dt (n_cells,), positivity rate r) for cell masses and normal velocities
        un: (n_faces, 2). A forward-Euler step dt <= 1/r keeps every cell mass >= 0."""
        vals = self.edge_values(masses)
        _fluxes(vals, self.mesh.face_cells, self._face_local, np.ascontiguousarray(un),
                self._half_len, self._flux)
        dm = np.empty(self.mesh.n_cells)
        _divergence(self._flux, un, self.mesh.cell_faces, self.mesh.cell_signs, self._rate_w, dm,
                    self._rate)
        return dm, float(self._rate.max())

    def positivity_rate(self, un) -> float:
        """r = max 4|e|u^+/|K| over cells, edges and points (outflow only)."""
        sg = self.mesh.cell_signs[..., None]
        out = np.maximum(sg * un[self.mesh.cell_faces], 0.0)
        return float(np.max(out * self._rate_w[..., None]))


# ---------------------------------------------------------------------------- velocity fields
class _PrescribedField:
    """Normal velocities from a callable velocity(t, x): (..., 3) -> (..., 3)."""

    time_dependent = True

    def __init__(self, scheme, velocity):
        if not callable(velocity):
            raise TypeError(f"velocity must be a callable velocity(t, x) -> (..., 3); got "
                            f"{type(velocity).__name__}")
        self.scheme, self.velocity = scheme, velocity

    def __call__(self, t, masses):
        v = np.asarray(self.velocity(t, self.scheme.mesh.face_points), dtype=np.float64)
        if v.shape != self.scheme.mesh.face_points.shape:
            raise ValueError(f"velocity(t, x) must return an array of the shape of x "
                             f"{self.scheme.mesh.face_points.shape}; got {v.shape}")
        return self.scheme.normal_velocity(v)


class _ZeroTemperatureField:
    """beta = inf: the local field A x/|B^T x|, independent of rho (computed once)."""

    time_dependent = False

    def __init__(self, scheme, model):
        pts = scheme.mesh.face_points.reshape(-1, 3)
        att = interaction.zero_temperature_attention(pts, model.A, model.B)
        self.un = np.ascontiguousarray(scheme.normal_velocity(att.reshape(-1, 2, 3)))

    def __call__(self, t, masses):
        return self.un


class _DirectField:
    """Attention of the cell masses placed at the cell centres, at every edge point."""

    time_dependent = False

    def __init__(self, scheme, model, kernel="auto"):
        self.scheme, self.model, self.kernel = scheme, model, kernel
        c = scheme.mesh.centers
        self.keys = c @ model.B.T
        self.values = c @ model.V.T
        self.pts = scheme.mesh.face_points.reshape(-1, 3)

    def __call__(self, t, masses):
        m = self.model
        att = interaction.attention(self.pts, self.keys, self.values, np.maximum(masses, 0.0),
                                    m.beta, m.normalized, kernel=self.kernel)
        return self.scheme.normal_velocity(att.reshape(-1, 2, 3))


class _HarmonicField:
    """Attention of the cell measure from its harmonic moments (spherepde.interaction.harmonic):
    cell masses -> moments up to the degree the kernel needs -> field at every edge point.

    Each cell's mass is spread over a q × q Gauss rule on the cell (weights normalized per
    cell), so the moments are those of the piecewise-constant density up to O(h^{2q}) per cell;
    one node per cell (q = 1, at the centroid) would leave an O(kappa h^2) error. Edge points
    whose a-posteriori bound exceeds the harmonic module's fallback level (queries that look
    into regions of exponentially small mass) are computed by the direct kernel."""

    time_dependent = False

    def __init__(self, scheme, model, order=2):
        from ..interaction.harmonic import FALLBACK_FACTOR, HarmonicField

        self.scheme, self.model = scheme, model
        self.harmonic = HarmonicField.from_model(model)
        self.fallback = FALLBACK_FACTOR * self.harmonic.tol
        nodes, w = scheme.mesh.cell_quadrature(order)
        self.nodes = nodes
        self.node_weights = w / w.sum(axis=1, keepdims=True)
        self.pts = scheme.mesh.face_points.reshape(-1, 3)
        c = scheme.mesh.centers
        self.keys, self.values = c @ model.B.T, c @ model.V.T
        self.stats = {"queries": 0, "fallback": 0}

    def __call__(self, t, masses):
        m = np.maximum(masses, 0.0)
        mom = self.harmonic.moments_of_cells(self.nodes, self.node_weights, m)
        att, bound = self.harmonic.attention(self.pts, mom, return_bound=True)
        bad = ~(bound <= self.fallback)
        self.stats["queries"] += self.pts.shape[0]
        if np.any(bad):
            self.stats["fallback"] += int(bad.sum())
            att[bad] = interaction.attention(self.pts[bad], self.keys, self.values, m,
                                             self.model.beta, self.model.normalized)
        return self.scheme.normal_velocity(att.reshape(-1, 2, 3))


# ---------------------------------------------------------------------------- time loop
def _march(scheme, field, m0, times, tab_name, cfl, progress=None, max_steps=10_000_000):
    """March cell masses over ``times`` with the registry's tableau ``tab_name``; every step
    is dt = cfl/r at the current state (r the positivity rate), redone with a smaller dt when
    a later stage's rate exceeds 1/dt. Returns (states, stats)."""
    tab = timestepping.get_scheme(tab_name)
    cache = {}
    stage_rate = [0.0]

    def f(t, y):
        hit = cache.get("y")
        if hit is y and cache["t"] == t:
            return cache["k"]
        dm, r = scheme.tendency(y, field(t, y))
        stage_rate[0] = max(stage_rate[0], r)
        return dm

    out = [m0.copy()]
    stats = {"steps": 0, "rejected": 0, "fevals": 0, "max_courant": 0.0}
    y = m0
    t = float(times[0])
    for t1 in times[1:]:
        t1 = float(t1)
        while t < t1:
            if stats["steps"] + stats["rejected"] >= max_steps:
                raise RuntimeError(f"more than {max_steps} steps; reduce n or raise cfl")
            un = field(t, y)
            k1, r = scheme.tendency(y, un)
            stats["fevals"] += 1
            cache.update(y=y, t=t, k=k1)
            dt = cfl / r if r > 0 else t1 - t
            last = t + dt >= t1 - 1e-12 * max(1.0, abs(t1))
            if last:
                dt = t1 - t
            while True:
                stage_rate[0] = r
                y_new, _ = timestepping.rk_step(f, t, y, dt, tab)
                stats["fevals"] += tab.stages - 1
                # positivity needs dt·r <= 1 at every stage (only a cfl > 1 or a velocity that
                # grows within the step gets here)
                if stage_rate[0] * dt <= 1.0 + 1e-12 or cfl > 1.0:
                    break
                stats["rejected"] += 1
                dt = cfl / stage_rate[0]
                last = False
            stats["max_courant"] = max(stats["max_courant"], stage_rate[0] * dt)
            y = y_new
            t = t1 if last else t + dt
            stats["steps"] += 1
            if progress is not None:
                progress(t)
        if not np.all(np.isfinite(y)):
            raise FloatingPointError(f"the cell masses became NaN/inf before t = {t1}")
        out.append(y.copy())
    return out, stats


# ---------------------------------------------------------------------------- solvers
def _check_common(scheme_name, cfl, limiter):
    tab = timestepping.get_scheme(scheme_name)
    if scheme_name not in SSP_SCHEMES:
        raise ValueError(f"scheme {scheme_name!r} is not strong-stability preserving, so it would "
                         f"not keep the density >= 0; use one of {sorted(SSP_SCHEMES)} "
                         "(default 'ssprk3')")
    if not (isinstance(cfl, (int, float)) and math.isfinite(cfl) and cfl > 0):
        raise ValueError(f"cfl must be a finite number > 0 (<= 1 keeps the density >= 0); "
                         f"got {cfl!r}")
    if limiter not in LIMITERS:
        raise ValueError(f"unknown limiter {limiter!r}; choose one of {sorted(LIMITERS)}")
    return tab


class _Base:
    """What the two finite-volume solvers share: the mesh, the scheme, initial cell masses."""

    def __init__(self, n, scheme, cfl, limiter, quadrature_order, mass_rtol):
        _check_common(scheme, cfl, limiter)
        self.scheme = scheme
        self.cfl = float(cfl)
        self.quadrature_order = int(quadrature_order)
        if self.quadrature_order < 1:
            raise ValueError(f"quadrature_order must be >= 1; got {quadrature_order!r}")
        self.mass_rtol = float(mass_rtol)
        self.fv = FiniteVolumeScheme(n, limiter)
        self.mesh = self.fv.mesh
        self.limiter = limiter

    def initial_masses(self, density0) -> np.ndarray:
        """Cell masses (n_cells,) of density0: a measure or callable (integrated over each cell
        with a tensor Gauss rule of ``quadrature_order`` points a side), or an array of cell
        averages (n_cells,)."""
        mesh = self.mesh
        if isinstance(density0, np.ndarray) or (isinstance(density0, (list, tuple))):
            avg = np.asarray(density0, dtype=np.float64)
            if avg.shape != (mesh.n_cells,):
                raise ValueError(f"an array density0 must hold the {mesh.n_cells} cell averages "
                                 f"of this mesh (n = {mesh.n}); got shape {avg.shape}")
            avg = check_values(avg)
            masses = avg * mesh.areas
        else:
            f = density_callable(density0, 3)
            P, W = mesh.cell_quadrature(self.quadrature_order)
            vals = np.asarray(f(P), dtype=np.float64)
            if vals.shape != P.shape[:-1]:
                raise ValueError(f"the density callable must map points (..., 3) to values (...);"
                                 f" got output shape {vals.shape} for input {P.shape}")
            masses = np.sum(check_values(vals) * W, axis=1)
        check_mass(float(masses.sum()), self.mass_rtol)
        return np.maximum(masses, 0.0)


class TransportSolver(_Base):
    r"""Finite-volume transport :math:`\partial_t\rho + \operatorname{div}_S(\rho v) = 0` by a
    prescribed velocity v(t, x) (the standard test cases of the field).

    Parameters
    ----------
    n : int
        Cells along a cube edge (6 n² cells).
    velocity : callable velocity(t, x), x: (..., 3) -> (..., 3) tangent vectors
    scheme, cfl, limiter, quadrature_order, mass_rtol : as :class:`FiniteVolumeSolver`
    """

    def __init__(self, n, velocity, scheme="ssprk3", cfl=0.9, limiter="barth_jespersen",
                 quadrature_order=3, mass_rtol=1e-6):
        super().__init__(n, scheme, cfl, limiter, quadrature_order, mass_rtol)
        self.field = _PrescribedField(self.fv, velocity)

    def solve(self, density0, times, progress=None) -> "FiniteVolumeSolution":
        from ..timestepping import _check_times

        times = _check_times(times)
        m0 = self.initial_masses(density0)
        states, stats = _march(self.fv, self.field, m0, times, self.scheme, self.cfl, progress)
        return FiniteVolumeSolution(times, np.array(states), self.mesh.n, None,
                                    initial_measure(density0, 3), _diagnostics(states),
                                    limiter=self.limiter, stats=stats)


class FiniteVolumeSolver(_Base):
    r"""Finite-volume solver of :math:`\partial_t\rho + \operatorname{div}_S(\rho X[\rho]) = 0`
    on the gnomonic equiangular cubed sphere (docs/methods.md says why this mesh).

    Conservative (flux form: the mass is constant to round-off), second order in smooth
    regions (limited piecewise-linear reconstruction, two-point Gauss fluxes), and
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
    path : "auto", "direct", "harmonic" or "zero_temperature"
        How the attention at the edge points is computed (module docstring): "auto" takes the
        zero-temperature field at beta = inf, direct quadrature up to n = DIRECT_MAX_N and the
        harmonic field (cell masses -> moments -> field) beyond.
    kernel : interaction kernel of :func:`spherepde.interaction.attention` (direct path)
    quadrature_order : Gauss points a side per cell for the initial cell integrals
    mass_rtol : tolerance on the mass of density0

    Examples
    --------
    >>> import numpy as np, spherepde as sp
    >>> model = sp.Model(V=np.diag([1.0, 0.4, 0.0]), beta=np.inf)
    >>> sol = sp.FiniteVolumeSolver(model, 8).solve(sp.measures.Uniform(3), [0.0, 0.5])
    >>> abs(sol.mass(1) - 1) < 1e-13
    True
    """

    def __init__(self, model, n, scheme="ssprk3", cfl=0.9, limiter="barth_jespersen",
                 path="auto", kernel="auto", quadrature_order=3, mass_rtol=1e-6):
        from ..model import Model

        if not isinstance(model, Model):
            raise TypeError(f"model must be a spherepde.Model; got {type(model).__name__}")
        if model.d != 3:
            raise ValueError(f"the finite-volume solver works on S^2 (d = 3); the model has "
                             f"d = {model.d}")
        super().__init__(n, scheme, cfl, limiter, quadrature_order, mass_rtol)
        self.model = model
        if model.zero_temperature:
            check_zero_temperature(model, path)
            self.path = "zero_temperature"
            self.field = _ZeroTemperatureField(self.fv, model)
        else:
            if path not in ("auto", "direct", "harmonic"):
                raise ValueError(f"unknown path {path!r}; choose 'auto', 'direct' or "
                                 "'harmonic' (finite beta) or 'zero_temperature' (beta = inf)")
            if path == "auto":
                path = "direct" if self.mesh.n <= DIRECT_MAX_N or not _has_harmonic() \
                    else "harmonic"
            self.path = path
            if path == "harmonic":
                self.field = _HarmonicField(self.fv, model)
            else:
                self.field = _DirectField(self.fv, model, kernel)

    def rhs(self, t, masses) -> np.ndarray:
        """d m / dt of the cell masses (n_cells,)."""
        return self.fv.tendency(masses, self.field(t, masses))[0]

    def solve(self, density0, times, progress=None) -> "FiniteVolumeSolution":
        """Evolve density0 (a measure of :mod:`spherepde.measures`, a callable density on S^2,
        or an array of cell averages) and return the states at ``times`` (times[0] is the
        initial time)."""
        from ..timestepping import _check_times

        times = _check_times(times)
        m0 = self.initial_masses(density0)
        states, stats = _march(self.fv, self.field, m0, times, self.scheme, self.cfl, progress)
        return FiniteVolumeSolution(times, np.array(states), self.mesh.n, self.model,
                                    initial_measure(density0, 3), _diagnostics(states),
                                    limiter=self.limiter, path=self.path, stats=stats,
                                    mesh=self.mesh)


def _diagnostics(states):
    S = np.asarray(states)
    return dict(mass=S.sum(axis=1), min=S.min(axis=1))


# ---------------------------------------------------------------------------- the solution
class FiniteVolumeSolution:
    r"""Cell masses at the output times of a finite-volume solve.

    Attributes
    ----------
    times : (T,)
    masses : (T, n_cells) cell masses :math:`\int_K\rho_t\, dA`
    n : int, the mesh (``mesh`` builds it on first use)
    model, initial_measure : as given to the solver (model None for prescribed transport)
    diagnostics : dict of (T,) arrays: ``mass`` (sum of the cell masses) and ``min`` (smallest
        cell mass)
    stats : steps, rejected steps, right-hand-side evaluations, largest dt·r reached
    """

    def __init__(self, times, masses, n, model, initial_measure, diagnostics,
                 limiter="barth_jespersen", path="", stats=None, mesh=None):
        self.times = np.asarray(times, dtype=np.float64)
        self.masses = np.asarray(masses, dtype=np.float64)
        self.n = int(n)
        self.model = model
        self.initial_measure = initial_measure
        self.diagnostics = diagnostics
        self.limiter = limiter
        self.path = path
        self.stats = stats or {}
        self._mesh = mesh
        self._scheme = None

    @property
    def mesh(self) -> CubedSphere:
        if self._mesh is None:
            self._mesh = CubedSphere(self.n)
        return self._mesh

    def __len__(self):
        return self.times.size

    def averages(self, i: int) -> np.ndarray:
        """Cell averages of rho at output i, (n_cells,)."""
        return self.masses[i] / self.mesh.areas

    def mass(self, i: int) -> float:
        return float(self.masses[i].sum())

    def measure(self, i: int) -> PointCloud:
        """Output i as a :class:`PointCloud`: the cell masses at the cell centres (all >= 0;
        W2 to the true rho_t is at most about the cell diameter h)."""
        m = np.maximum(self.masses[i], 0.0)
        return PointCloud(self.mesh.centers, m / m.sum())

    def density(self, i: int, x) -> np.ndarray:
        """rho at output i at points x: (..., 3) -> (...), from the limited piecewise-linear
        reconstruction of the cell containing x (second order where rho is smooth). The limiter
        keeps it >= 0 at the edge points; towards a cell corner the affine function can
        extrapolate below 0, and such values are returned as 0 (the evolved cell masses are
        never altered)."""
        from ..sphere import as_points

        x = as_points(x, 3)
        shape = x.shape[:-1]
        xf = x.reshape(-1, 3)
        if self._scheme is None:
            self._scheme = FiniteVolumeScheme(self.mesh, self.limiter)
        sch = self._scheme
        cell = locate(self.mesh, xf)
        rho, g = sch.reconstruction(self.masses[i])
        out = rho[cell] + np.sum(g[cell] * (xf - sch.anchor[cell]), axis=-1)
        return np.maximum(out, 0.0).reshape(shape) if self.limiter != "none" else out.reshape(shape)

    def save(self, path):
        """Write times, masses, diagnostics and the model to ``path`` (.npz), atomically."""
        from ..io import save_npz

        model = self.model.to_arrays() if self.model is not None else {}
        return save_npz(path, kind=np.str_("FV"), times=self.times, masses=self.masses,
                        n=np.int64(self.n), limiter=np.str_(self.limiter),
                        path=np.str_(self.path),
                        **{f"diag_{k}": v for k, v in self.diagnostics.items()}, **model)

    @classmethod
    def load(cls, path) -> "FiniteVolumeSolution":
        """Read a solution written by :meth:`save` (initial_measure is not stored: None)."""
        from ..model import Model

        with np.load(path, allow_pickle=False) as z:
            if str(z["kind"]) != "FV":
                raise ValueError(f"{path} holds a {z['kind']} solution, not a finite-volume one")
            diag = {k[5:]: z[k] for k in z.files if k.startswith("diag_")}
            model = Model.from_arrays(z) if "Q" in z.files else None
            return cls(z["times"], z["masses"], int(z["n"]), model, None, diag,
                       str(z["limiter"]), str(z["path"]))

    def __repr__(self) -> str:
        return (f"FiniteVolumeSolution(n={self.n}, {self.times.size} times in "
                f"[{self.times[0]:g}, {self.times[-1]:g}], limiter={self.limiter})")


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
