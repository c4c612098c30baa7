r"""Finite-volume solver of the mean-field equation on the cubed sphere.

.. math:: \partial_t\rho + \operatorname{div}_S(\rho\, X[\rho]) = 0 .

The state is the vector of cell masses :math:`m_K = \int_K \rho\, dA` on the gnomonic
equiangular cubed sphere (:class:`spherepde.sphere.cubed_sphere.CubedSphere`). One right-hand
side:

1. **Reconstruction.** In every cell a polynomial :math:`\rho_K(x)` with the cell's average
   :math:`\bar\rho_K = m_K/|K|`, fitted by least squares to the averages of a stencil of
   neighbours (:class:`FiniteVolumeScheme`, ``reconstruction``):

   - ``"cubic"`` (default): degree 3 in gnomonic coordinates of the tangent plane at the cell
     centre, from the 8 cells sharing an edge or a vertex and the 4 cells two steps away
     across the edges; edge values O(h⁴), so the upwind scheme's numerical dissipation is
     O(h⁵) instead of the O(h³) of linear or quadratic reconstructions;
   - ``"quadratic"``: degree 2 from the 8 cells sharing an edge or a vertex; edge values O(h³);
   - ``"linear"``: :math:`\bar\rho_K + g_K\cdot(x - \hat x_K)` with the least-squares
     gradient of the four edge neighbours and :math:`\hat x_K` the mean of the eight edge
     quadrature points; edge values O(h²).

   The limiter scales the deviation from the average, :math:`\bar\rho_K + \phi_K(\rho_K(x) -
   \bar\rho_K)` with :math:`\phi_K\in[0,1]` (Barth & Jespersen 1989: the values at the
   quadrature points stay within the range of the cell and its neighbours; or only ≥ 0,
   Zhang & Shu 2010), so the average is kept whatever phi_K is.
2. **Fluxes.** The normal velocity :math:`u = X[\rho]\cdot n` at the two Gauss points of every
   edge (a great-circle arc, so n is exact), and the upwind flux
   :math:`F_e = \tfrac{|e|}{2}\sum_q (u_q^+\rho_{K}(x_q) - u_q^-\rho_{K'}(x_q))`.
3. **Flux form.** :math:`\dot m_K = -\sum_{e\subset\partial K} \pm F_e`: every flux leaves one
   cell and enters its neighbour, so the total mass is conserved to round-off.

**Positivity.** Write the average as a convex combination of the eight edge values and a
remainder, :math:`\bar\rho_K = \omega\sum_{e,q}\rho_K(x_{eq}) + (1 - 8\omega) R_K`. For the
linear reconstruction :math:`\omega = 1/8` and R drops out (its edge-point mean is the
average); for the polynomial ones :math:`\omega` = QUADRATIC_EDGE_WEIGHT = 1/10 and the
limiter also keeps :math:`R_K \ge 0`. With all :math:`\rho_K(x_{eq})\ge 0`, one forward-Euler
step gives

.. math:: m_K^{+}/|K| \ge \sum_{e,q}\rho_K(x_{eq})\Big(\omega - \frac{\Delta t\,|e|\,u_{eq}^+}{2|K|}\Big) + (1 - 8\omega) R_K,

which is ≥ 0 when :math:`\Delta t\, r \le 1` with the *positivity rate*
:math:`r = \max_{K,e,q} |e|u_{eq}^+/(2\omega|K|)`. The strong-stability-preserving Runge–Kutta
schemes (``euler``, ``heun`` = SSPRK2, ``ssprk3``; SSP coefficient 1) are convex combinations
of such steps, so every step is taken with :math:`\Delta t = \mathrm{cfl}/r` (the rate of the
current state) and re-taken with a smaller step if a later stage's rate exceeds 1/Δt. No value
is clipped after the fact.

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

The solvers subclass :class:`spherepde.density.base.DensitySolver` (input checks, outputs,
resolution stop, diagnostics, export); the step control above is their
:meth:`~spherepde.density.base.DensitySolver.integrate`.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .. import timestepping
from ..registry import Registry
from ..interaction.operators import (DirectQuadrature, VelocityOperator, ZeroTemperature,
                                     choose_operator)
from ..sphere.cubed_sphere import PANELS, CubedSphere
from .base import DensitySolution, DensitySolver, check_mass, check_values, density_callable

__all__ = ["FiniteVolumeSolver", "FiniteVolumeSolution", "FiniteVolumeScheme", "TransportSolver",
           "EdgeVelocity", "CellHarmonic", "LIMITERS", "RECONSTRUCTIONS", "SSP_SCHEMES",
           "default_velocity_tol"]

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
#: Reconstructions of FiniteVolumeScheme by polynomial degree: "linear" (least-squares gradient
#: from the four edge neighbours), "quadratic" (least squares over the eight cells sharing an
#: edge or a vertex) and "cubic" (those and the four cells two steps away across the edges);
#: edge values O(h^2), O(h^3), O(h^4).
RECONSTRUCTIONS = ("linear", "quadratic", "cubic")
#: Weight omega of each of the eight edge points in the positivity decomposition of a quadratic
#: cell average, rho_bar = omega·sum_p rho(x_p) + (1 - 8 omega)·R with R >= 0 (module
#: docstring), for the quadratic and cubic reconstructions; the positivity step is
#: 8 omega = 0.8 times the linear one.
QUADRATIC_EDGE_WEIGHT = 0.1
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


def _has_harmonic() -> bool:
    try:
        from ..interaction import harmonic  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------------- kernels
@njit(parallel=True, cache=True)
def _reconstruct(rho, stencil, A, bounds, limiter, omega, vals, theta):
    """Limited edge values of the reconstruction: vals[K, p] = rho_K + theta_K delta_Kp at the
    eight edge points p = 2k + q of cell K, with delta_K = A_K (rho_stencil - rho_K).

    limiter 1 (Barth–Jespersen): the values stay within the range of the cell and its first
    ``bounds`` stencil cells; 2: only >= 0; 0: theta = 1. With omega < 1/8 (a reconstruction
    whose edge-point mean is not the average) a limited theta also keeps
    omega·sum_p vals[K, p] <= rho_K, the remainder of the positivity decomposition."""
    n = rho.shape[0]
    S = stencil.shape[1]
    for i in prange(n):
        r = rho[i]
        lo = r
        hi = r
        for p in range(8):
            vals[i, p] = 0.0
        for j in range(S):
            rj = rho[stencil[i, j]]
            dr = rj - r
            if j < bounds:
                lo = min(lo, rj)
                hi = max(hi, rj)
            for p in range(8):
                vals[i, p] += A[i, p, j] * dr
        phi = 1.0
        tot = 0.0
        for p in range(8):
            d = vals[i, p]
            tot += d
            if limiter == 1:
                if d > 0.0:
                    phi = min(phi, (hi - r) / d)
                elif d < 0.0:
                    phi = min(phi, (lo - r) / d)
            elif limiter == 2:
                if d < 0.0:
                    phi = min(phi, r / -d)
        if limiter != 0:
            if omega < 0.125 and tot > 0.0:
                phi = min(phi, (1.0 - 8.0 * omega) * r / (omega * tot))
            phi = max(phi * (1.0 - LIMITER_MARGIN), 0.0)
        for p in range(8):
            vals[i, p] = r + phi * vals[i, p]
        theta[i] = phi


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
    """dm[K] = -sum of outgoing fluxes; rate[K] = max_{e,q} rate_w[K, e] u^+ (outflow only)."""
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


# ---------------------------------------------------------------------------- reconstructions
def _tangent_frames(c):
    """Orthonormal tangent vectors (t1, t2) at unit vectors c: (N, 3) -> two (N, 3)."""
    t1 = np.cross(c, np.eye(3)[np.argmin(np.abs(c), axis=1)])
    t1 /= np.linalg.norm(t1, axis=1, keepdims=True)
    return t1, np.cross(c, t1)


def _vertex_neighbours(mesh):
    """The cells that share only a vertex with each cell, (n_cells, 4): the cells adjacent to
    two of its edge neighbours. A cell at a cube corner has three (three panels meet there);
    its fourth slot repeats the cell itself."""
    N = mesh.n_cells
    nb = mesh.neighbors
    nn = np.sort(nb[nb].reshape(N, 16), axis=1)
    own = np.arange(N)[:, None]
    twice = (nn[:, 1:] == nn[:, :-1]) & (nn[:, 1:] != own)
    out = np.repeat(own, 4, axis=1)
    rows, cols = np.nonzero(twice)
    slot = np.zeros(N, dtype=np.int64)
    for r, v in zip(rows, nn[:, 1:][rows, cols]):  # at most 4 per cell
        out[r, slot[r]] = v
        slot[r] += 1
    if N > 6 and not np.all((slot == 4) | (slot == 3)):
        raise RuntimeError("cubed-sphere vertex neighbours are broken")  # pragma: no cover
    return out


def _straight_neighbours(mesh):
    """The cell two steps away across each edge, (n_cells, 4): across edge k to the neighbour
    j, then across the edge of j opposite the shared one (cells are quadrilaterals whose edges
    are listed in cyclic order, also across panel edges)."""
    nb = mesh.neighbors
    N = mesh.n_cells
    nbj = nb[nb]                                               # (N, 4, 4)
    back = np.argmax(nbj == np.arange(N)[:, None, None], axis=2)  # where j lists K
    return np.take_along_axis(nbj, ((back + 2) % 4)[..., None], axis=2)[..., 0]


class _Polynomial:
    r"""Least-squares polynomial reconstruction of degree p (2 or 3) in the gnomonic
    coordinates of the tangent plane at the cell centre c_K,

    .. math:: \xi = \frac{x\cdot t_1}{h_K\, x\cdot c_K},\quad
              \eta = \frac{x\cdot t_2}{h_K\, x\cdot c_K},\qquad
              \phi(x) = (\xi^a\eta^b)_{1\le a+b\le p}

    (h_K = |K|^{1/2}): :math:`\rho_K(x) = \bar\rho_K + (\phi(x) - \langle\phi\rangle_K)\cdot
    C_K\,(\bar\rho_j - \bar\rho_K)_j`, with C_K the least-squares solution of
    :math:`(\langle\phi\rangle_j - \langle\phi\rangle_K)\cdot c = \bar\rho_j - \bar\rho_K`
    over the stencil j: the eight cells sharing an edge or a vertex with K (seven at a cube
    corner), and for p = 3 also the four cells two steps away across each edge. Cell means
    :math:`\langle\cdot\rangle` by the 3 × 3 Gauss rule of the mesh. The cell average is kept
    exactly and polynomials of degree p are reproduced, so edge values are accurate to
    O(h^{p+1})."""

    def __init__(self, mesh, degree, chunk=20_000):
        N = mesh.n_cells
        parts = [mesh.neighbors, _vertex_neighbours(mesh)]
        if degree >= 3:
            parts.append(_straight_neighbours(mesh))
        self.stencil = np.ascontiguousarray(np.concatenate(parts, axis=1))
        self.powers = [(i - b, b) for i in range(1, degree + 1) for b in range(i + 1)]
        c = mesh.centers
        self.t1, self.t2 = _tangent_frames(c)
        self.c = c
        self.scale = np.sqrt(mesh.areas)
        P, W = mesh.cell_quadrature(3)
        self._P, self._W = P, W / W.sum(axis=1, keepdims=True)
        edge_pts = mesh.face_points[mesh.cell_faces].reshape(N, 8, 3)
        # only the (8 × stencil) edge-value matrices are kept (300 MB at n = 256); the fit
        # itself is redone for the cells that evaluate() is asked about
        self.A = np.empty((N, 8, self.stencil.shape[1]))
        for a in range(0, N, chunk):
            idx = np.arange(a, min(a + chunk, N))
            mean, C = self.fit(idx)
            E = self._basis(edge_pts[idx], idx[:, None]) - mean[:, None, :]
            self.A[idx] = E @ C

    def fit(self, cells):
        """(<phi>_K (m, nb), C_K (m, nb, S)) of cells (m,)."""
        P, W = self._P, self._W
        mean = np.einsum("bq,bqa->ba", W[cells], self._basis(P[cells], cells[:, None]))
        st = self.stencil[cells]
        other = self._basis(P[st], cells[:, None, None])                  # (m, S, 9, nb)
        M = np.einsum("bjq,bjqa->bja", W[st], other) - mean[:, None, :]
        M[st == cells[:, None]] = 0.0                                     # padded slots
        return mean, np.linalg.pinv(M)

    def _basis(self, x, cells):
        """phi_K(x) for points x: (..., 3) of cells K (broadcast to x's leading shape)."""
        c, t1, t2, s = self.c[cells], self.t1[cells], self.t2[cells], self.scale[cells]
        z = np.sum(x * c, axis=-1) * s
        xi = np.sum(x * t1, axis=-1) / z
        eta = np.sum(x * t2, axis=-1) / z
        return np.stack([xi ** i * eta ** j for i, j in self.powers], axis=-1)

    def deviation(self, x, cells, drho):
        """rho_K(x) - rho_bar_K before limiting, for points x: (m, 3) in cells (m,) and the
        stencil differences drho: (m, S)."""
        out = np.empty(cells.shape[0])
        for a in range(0, cells.shape[0], 20_000):  # bounded memory for the fits
            sl = slice(a, a + 20_000)
            uniq, inv = np.unique(cells[sl], return_inverse=True)
            mean, C = self.fit(uniq)
            phi = self._basis(x[sl], cells[sl]) - mean[inv]
            out[sl] = np.einsum("ma,maj,mj->m", phi, C[inv], drho[sl])
        return out


class _Linear:
    r"""Least-squares gradient reconstruction (tangent at the centre) from the four edge
    neighbours, anchored at the mean :math:`\hat x_K` of the eight edge points, so that the
    edge-point mean of the reconstruction is exactly the cell average."""

    def __init__(self, mesh):
        N = mesh.n_cells
        self.stencil = np.ascontiguousarray(mesh.neighbors)
        pts = mesh.face_points[mesh.cell_faces].reshape(N, 8, 3)
        self.anchor = pts.mean(axis=1)
        t1, t2 = _tangent_frames(mesh.centers)
        d = self.anchor[mesh.neighbors] - self.anchor[:, None, :]  # (N, 4, 3)
        D = np.stack([np.sum(d * t1[:, None], -1), np.sum(d * t2[:, None], -1)], axis=-1)
        w2 = np.linalg.solve(np.einsum("nka,nkb->nab", D, D), D.transpose(0, 2, 1))
        self.grad_w = w2[:, 0, :, None] * t1[:, None] + w2[:, 1, :, None] * t2[:, None]
        self.A = np.einsum("npk,njk->npj", pts - self.anchor[:, None, :], self.grad_w)

    def deviation(self, x, cells, drho):
        g = np.einsum("mjk,mj->mk", self.grad_w[cells], drho)
        return np.sum(g * (x - self.anchor[cells]), axis=-1)


# ---------------------------------------------------------------------------- the scheme
#: The finest mesh a scheme is built for: its reconstruction holds 8 × 12 coefficients per cell
#: (0.3 GB at n = 256, 1.2 GB at n = 512) and a run at n = 512 takes days on a few cores.
MAX_N = 512


def _check_resolution(n: int, reconstruction: str) -> None:
    """Refuse meshes the scheme cannot be built on, naming the limit."""
    if n > MAX_N:
        gb = 6 * n * n * 8 * 12 * 8 / 1e9
        raise ValueError(f"n = {n} is beyond the finest mesh the finite-volume scheme builds "
                         f"(n <= {MAX_N}); its reconstruction alone would take {gb:.1f} GB. "
                         "Choose a smaller n")
    if n < 2 and reconstruction in ("quadratic", "cubic"):
        raise ValueError(f"the {reconstruction} reconstruction needs n >= 2 (at n = 1 a cell has "
                         "no neighbours across a vertex); use n >= 2 or reconstruction='linear'")


class FiniteVolumeScheme:
    r"""The spatial discretisation on a :class:`CubedSphere`: reconstruction, upwind fluxes and
    the flux-form tendency of the cell masses, for given normal velocities at the edge points.

    Parameters
    ----------
    mesh : CubedSphere or int (n)
    limiter : "barth_jespersen" (default), "positivity" or "none"
    reconstruction : "cubic" (default), "quadratic" or "linear" (:class:`_Polynomial`,
        :class:`_Linear`)
        Edge values of the cubic one are O(h⁴), so the upwind fluxes dissipate a thin
        filament far less: on the deformational test cases its errors are 3-4 times smaller
        than the linear one's at the same n (docs/methods.md). The polynomial averages are not
        the mean of their eight edge values, so positivity uses the decomposition with edge
        weight :data:`QUADRATIC_EDGE_WEIGHT` and a step 0.8 times the linear one (module
        docstring).
    """

    def __init__(self, mesh, limiter: str = "barth_jespersen", reconstruction: str = "cubic"):
        n = mesh.n if isinstance(mesh, CubedSphere) else mesh
        if isinstance(n, (int, np.integer)) and not isinstance(n, bool):
            _check_resolution(int(n), reconstruction)
        if not isinstance(mesh, CubedSphere):
            mesh = CubedSphere(mesh)
        if limiter not in LIMITERS:
            raise ValueError(f"unknown limiter {limiter!r}; choose one of {sorted(LIMITERS)}")
        if reconstruction not in RECONSTRUCTIONS:
            raise ValueError(f"unknown reconstruction {reconstruction!r}; choose one of "
                             f"{list(RECONSTRUCTIONS)}")
        self.mesh = m = mesh
        self.limiter = limiter
        self.reconstruction = reconstruction
        self._limiter_code = LIMITERS[limiter]
        N = m.n_cells
        if reconstruction == "linear":
            self._rec = _Linear(m)
            self.omega = 0.125
            self._bounds = 4
        else:
            self._rec = _Polynomial(m, RECONSTRUCTIONS.index(reconstruction) + 1)
            self.omega = QUADRATIC_EDGE_WEIGHT
            self._bounds = 8
        self._stencil = self._rec.stencil
        self._A = np.ascontiguousarray(self._rec.A)
        # position of each edge in its owner's and neighbour's lists
        F = m.n_faces
        self._face_local = np.empty((F, 2), dtype=np.int64)
        ks = np.tile(np.arange(4), N)
        side = np.where(m.cell_signs.reshape(-1) > 0, 0, 1)
        self._face_local[m.cell_faces.reshape(-1), side] = ks
        self._half_len = 0.5 * m.face_lengths
        # positivity rate weight |e|/(2 omega |K|): an outflow u^+ at an edge point removes
        # dt |e| u^+ rho(x)/2 of the omega |K| rho(x) that the decomposition assigns to it
        self._rate_w = np.ascontiguousarray(m.face_lengths[m.cell_faces]
                                            / (2.0 * self.omega * m.areas[:, None]))
        self._vals = np.empty((N, 4, 2))
        self._theta = np.empty(N)
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
        N = self.mesh.n_cells
        _reconstruct(rho, self._stencil, self._A, self._bounds, self._limiter_code, self.omega,
                     self._vals.reshape(N, 8), self._theta)
        return self._vals

    def evaluate(self, masses, x, cells) -> np.ndarray:
        """The limited reconstruction of cell masses at points x: (m, 3) lying in ``cells``
        (m,) (:func:`locate`) -> (m,)."""
        self.edge_values(masses)
        rho = masses / self.mesh.areas
        cells = np.asarray(cells)
        drho = rho[self._stencil[cells]] - rho[cells][:, None]
        return rho[cells] + self._theta[cells] * self._rec.deviation(np.asarray(x), cells, drho)

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
        """r = max |e|u^+/(2 omega |K|) over cells, edges and points (outflow only)."""
        sg = self.mesh.cell_signs[..., None]
        out = np.maximum(sg * un[self.mesh.cell_faces], 0.0)
        return float(np.max(out * self._rate_w[..., None]))


# ---------------------------------------------------------------------------- velocity at the edges
class CellHarmonic(VelocityOperator):
    r"""The attention of the cell measure from its harmonic moments
    (:mod:`spherepde.interaction.harmonic`): cell masses -> moments up to the degree the
    kernel needs -> field at the targets (the edge points).

    Each cell's mass is spread over a q × q Gauss rule on the cell (weights normalized per
    cell, :attr:`cell_nodes`, :attr:`cell_node_weights`), so the moments are those of the
    piecewise-constant density up to O(h^{2q}) per cell; one node per cell (q = 1, at the
    centroid) would leave an O(kappa h^2) error. The nodes are the cell centres with the cell
    areas as weights; ``rho`` are the cell averages.

    Parameters
    ----------
    model, mesh, targets, order : the model, the mesh, the edge points (..., 3), q
    planned : bool
        True (default): the moments and the fields go through transforms planned once for
        the fixed nodes and targets (:class:`spherepde.interaction.harmonic.PlannedField`,
        the same error model); False: ducc0's non-equispaced SHT at every call (the
        reference).
    velocity_tol : float, optional
        The accuracy asked of the field, relative to :math:`\|V\|_2` (SA; USA: to the
        target's own scale), for the cell measure: targets whose a-posteriori bound exceeds
        it (they look into regions of exponentially small mass, where the harmonic sums
        lose their relative accuracy) are summed exactly over the cap of cell nodes that
        carries their kernel, to the same accuracy (:meth:`HarmonicField.exact_at`).
        None (default): the harmonic module's own level ``FALLBACK_FACTOR * tol`` (1e-10);
        :class:`FiniteVolumeSolver` passes its ``velocity_tol`` (default
        :func:`default_velocity_tol`).

    flux_criterion : bool
        Judge a target by the flux it feeds (:meth:`attention`, ``edge_density``; default)
        or by its velocity alone.
    field_tol : float, optional
        The truncation tol of the harmonic field. None (default): the harmonic default
        (1e-12), or velocity_tol / FALLBACK_FACTOR where that is tighter. A looser field does
        not save work: the bounds grow with it and more targets are summed exactly.

    ``stats``: targets evaluated and those summed over caps, cumulative.
    """

    name = "harmonic"

    def __init__(self, model, mesh: CubedSphere, targets, order: int = 2, planned: bool = True,
                 velocity_tol: float | None = None, flux_criterion: bool = True,
                 field_tol: float | None = None):
        from ..interaction.harmonic import (DEFAULT_TOL, FALLBACK_FACTOR, NUFFT_EPS_MIN,
                                            HarmonicField, PlannedField, check_velocity_tol)

        super().__init__(model, mesh.centers, mesh.areas, (), targets)
        if velocity_tol is None:
            velocity_tol = FALLBACK_FACTOR * DEFAULT_TOL
        velocity_tol = check_velocity_tol(velocity_tol)
        # The field is built at least as accurately as the harmonic default, however loose
        # velocity_tol is: a target is summed exactly when (edge density) x (bound) exceeds
        # velocity_tol x (mean density), and the bound is the field's absolute error over the
        # kernel mass G it sees, so a looser field sends the same targets to the exact sums
        # (those where the density exceeds G / mean G) and more. Building the field at 1e-9
        # for velocity_tol = 1e-7 sent 49% of the edge points of a concentrated state to exact
        # sums (2.8 s a right-hand side, n = 64, beta = 256); at 1e-12, 5.5% (0.36 s).
        if field_tol is None:
            field_tol = max(NUFFT_EPS_MIN, min(DEFAULT_TOL, velocity_tol / FALLBACK_FACTOR))
        self.harmonic = HarmonicField.from_model(model, tol=float(field_tol))
        self.velocity_tol = velocity_tol
        self.wants_edge_density = bool(flux_criterion)
        nodes, w = mesh.cell_quadrature(order)
        self.cell_nodes = nodes
        self.cell_node_weights = w / w.sum(axis=1, keepdims=True)
        self._nodes = np.ascontiguousarray(nodes.reshape(-1, 3))
        self._queries = self.targets.reshape(-1, 3)
        self.plan = (PlannedField(self.harmonic, self._queries, self._nodes) if planned
                     else None)
        #: targets evaluated, and those summed exactly over caps, cumulative
        self.stats = {"queries": 0, "fallback": 0}

    def _node_weights(self, rho):
        return (self.weights[:, None] * rho[:, None] * self.cell_node_weights).reshape(-1)

    def _moments(self, rho):
        if self.plan is not None:
            return self.plan.moments(self._node_weights(rho))
        return self.harmonic.moments_of_cells(self.cell_nodes, self.cell_node_weights,
                                              self.weights * rho)

    def attention(self, rho, coefficients=None, edge_density=None):
        """Attention output at the targets (..., 3). With ``edge_density`` (targets' shape,
        >= the upwind density the fluxes multiply the velocity by) and SA, a target whose
        bound exceeds ``velocity_tol`` keeps the harmonic value when its bound is at most 1
        and its flux error, density × bound × |V|_2, is at most velocity_tol·|V|_2 times the
        mean density: the flux density is then within velocity_tol·|V|_2·max(rho, mean rho)
        at every target."""
        hf = self.harmonic
        att, bound = hf.attention(self._queries, self._moments(rho), return_bound=True,
                                  plan=self.plan)
        bad = ~(bound <= self.velocity_tol)
        if edge_density is not None and self.model.normalized and np.any(bad):
            mean = float(np.sum(self.weights * rho)) / (4.0 * np.pi)
            dens = np.abs(np.reshape(edge_density, -1))
            bad &= ~((bound <= 1.0) & (dens * bound <= self.velocity_tol * mean))
        bad = np.nonzero(bad)[0]
        self.stats["queries"] += self._queries.shape[0]
        self.stats["fallback"] += int(bad.size)
        hf.exact_at(att, bad, self._queries, self._nodes, self._node_weights(rho),
                    self.velocity_tol)
        return att.reshape(self.targets.shape), None

    def partition(self, rho, coefficients=None):
        return self.harmonic.partition(self.points, self._moments(rho))


class EdgeVelocity:
    r"""The normal velocity :math:`u_{eq} = \langle v(x_{eq}), n_e\rangle` at the two Gauss
    points of every edge, (n_faces, 2): the one adapter between a velocity and the fluxes of
    :class:`FiniteVolumeScheme`.

    Parameters
    ----------
    scheme : FiniteVolumeScheme
    operator : :class:`spherepde.interaction.operators.VelocityOperator`, optional
        Nodes at the cell centres (weights: the areas), targets at the edge points
        (``mesh.face_points``); it gets the cell averages, clipped at 0 (the positivity step
        control keeps them >= 0; only limiter="none" or cfl > 1 can make one negative). A
        field that does not depend on the density (beta = inf) is computed once.
        An operator with ``wants_edge_density`` also gets :meth:`edge_density` (its accuracy
        criterion is then the flux's, :class:`CellHarmonic`).
    velocity : callable velocity(t, x), x: (..., 3) -> (..., 3), optional
        A prescribed velocity instead (transport test cases).
    """

    def __init__(self, scheme, operator=None, velocity=None):
        if (operator is None) == (velocity is None):
            raise TypeError("pass exactly one of operator and velocity")
        if velocity is not None and not callable(velocity):
            raise TypeError(f"velocity must be a callable velocity(t, x) -> (..., 3); got "
                            f"{type(velocity).__name__}")
        self.scheme, self.operator, self.velocity = scheme, operator, velocity
        self._areas = scheme.mesh.areas
        self._constant = None
        if operator is not None and operator.constant:
            self._constant = np.ascontiguousarray(
                scheme.normal_velocity(operator.attention(None)[0]))

    def __call__(self, t, masses) -> np.ndarray:
        """u: (n_faces, 2) at time t for cell masses (n_cells,)."""
        if self._constant is not None:
            return self._constant
        if self.operator is not None:
            rho = np.maximum(masses, 0.0) / self._areas
            if getattr(self.operator, "wants_edge_density", False):
                v = self.operator.attention(rho, edge_density=self.edge_density(masses))[0]
            else:
                v = self.operator.attention(rho)[0]
        else:
            x = self.scheme.mesh.face_points
            v = np.asarray(self.velocity(t, x), dtype=np.float64)
            if v.shape != x.shape:
                raise ValueError(f"velocity(t, x) must return an array of the shape of x "
                                 f"{x.shape}; got {v.shape}")
        return self.scheme.normal_velocity(v)

    def edge_density(self, masses) -> np.ndarray:
        """max(|rho_K(x_eq)|, |rho_K'(x_eq)|) of the limited reconstructions of the two cells
        of every edge at its points, (n_faces, 2): the upwind flux F(u) = u^+ rho_K + u^- rho_K'
        changes by at most this times the change of u."""
        sc = self.scheme
        vals = sc.edge_values(masses)
        fc, fl = sc.mesh.face_cells, sc._face_local
        return np.maximum(np.abs(vals[fc[:, 0], fl[:, 0]]), np.abs(vals[fc[:, 1], fl[:, 1]]))


# ---------------------------------------------------------------------------- the solution
class FiniteVolumeSolution(DensitySolution):
    r"""Cell masses at the output times of a finite-volume solve.

    Attributes (besides those of :class:`spherepde.density.base.DensitySolution`)
    ------------------------------------------------------------------------------
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
    if limiter not in LIMITERS:
        raise ValueError(f"unknown limiter {limiter!r}; choose one of {sorted(LIMITERS)}")


class _CellMassSolver(DensitySolver):
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
        check_mass(float(masses.sum()), self.mass_rtol)
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

    def per_stage_controller(self) -> timestepping.PositivityRate:
        """The velocity evaluated at every Runge–Kutta stage, every step dt = cfl/r."""
        return timestepping.PositivityRate(self.tendency, timestepping.get_scheme(self.scheme),
                                           self.cfl)

    def multirate_controller(self) -> timestepping.Multirate:
        """The velocity evaluated once per macro step (its length set by ``macro_tol``), the
        transport substepped inside under the positivity bound with the velocity extrapolated
        linearly in time (:class:`spherepde.timestepping.Multirate`)."""
        tab = timestepping.get_scheme(self.scheme)
        fv, cfl = self.fv, self.cfl

        def substeps(u_of):
            return timestepping.PositivityRate(lambda s, m: fv.tendency(m, u_of(s)), tab, cfl)

        return timestepping.Multirate(self.field, substeps, self.velocity_defect, self.macro_tol,
                                      max_substeps=self.max_steps)

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


#: the velocity operators of the finite-volume solver
OPERATORS = ("direct", "harmonic", "zero_temperature")


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
            path = "direct" if self.n <= DIRECT_MAX_N or not _has_harmonic() else "harmonic"
        name, _ = choose_operator(model, path, 3, OPERATORS)
        self.kernel = kernel
        mesh = self.mesh
        pts, w, edges = mesh.centers, mesh.areas, mesh.face_points
        build = {"zero_temperature": lambda: ZeroTemperature(model, pts, w, targets=edges),
                 "direct": lambda: DirectQuadrature(model, pts, w, kernel=kernel, targets=edges),
                 "harmonic": lambda: CellHarmonic(model, mesh, edges, planned=planned,
                                                  velocity_tol=self.velocity_tol)}
        self.operator = build[name]()
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
