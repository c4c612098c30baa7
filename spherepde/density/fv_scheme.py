r"""The finite-volume scheme on the cubed sphere: reconstruction, limiter, upwind fluxes and the
flux-form tendency of cell masses for given normal velocities at the edge points, reused by every
cell-mass solver (:mod:`spherepde.density.finite_volume`).

The state is the vector of cell masses :math:`m_K = \int_K \rho\, dA` on the gnomonic
equiangular cubed sphere (:class:`spherepde.sphere.cubed_sphere.CubedSphere`). One right-hand
side, for normal velocities u at the edge points:

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

.. math:: m_K^{+}/|K| \ge \sum_{e,q}\rho_K(x_{eq})
          \Big(\omega - \frac{\Delta t\,|e|\,u_{eq}^+}{2|K|}\Big) + (1 - 8\omega) R_K,

which is ≥ 0 when :math:`\Delta t\, r \le 1` with the *positivity rate*
:math:`r = \max_{K,e,q} |e|u_{eq}^+/(2\omega|K|)`. The strong-stability-preserving Runge–Kutta
schemes (``euler``, ``heun`` = SSPRK2, ``ssprk3``; SSP coefficient 1) are convex combinations
of such steps, so every step is taken with :math:`\Delta t = \mathrm{cfl}/r` (the rate of the
current state) and re-taken with a smaller step if a later stage's rate exceeds 1/Δt. No value
is clipped after the fact.
"""
from __future__ import annotations

from typing import Final

import numpy as np
from numba import njit, prange

from ..registry import Registry
from ..sphere.cubed_sphere import CubedSphere

__all__ = ["FiniteVolumeScheme", "LIMITERS", "RECONSTRUCTIONS", "QUADRATIC_EDGE_WEIGHT", "MAX_N"]

#: Limiters by name -> kernel code (a Registry). "barth_jespersen": edge values within the
#: range of the cell and its neighbours (monotone, positive); "positivity": only edge values
#: >= 0 (second order at smooth extrema, not monotone); "none": unlimited (not positive).
LIMITERS = Registry("limiter")
LIMITERS.register("none", 0)
LIMITERS.register("barth_jespersen", 1)
LIMITERS.register("positivity", 2)
#: The limiter keeps edge values this far (relative) inside their bounds, so that rounding in
#: rho + phi·delta cannot cross a bound of 0. Compile-time (read by the numba reconstruction):
#: Final.
LIMITER_MARGIN: Final = 1e-12
#: Reconstructions of FiniteVolumeScheme by name -> polynomial degree (a Registry): "linear"
#: (least-squares gradient from the four edge neighbours), "quadratic" (least squares over the
#: eight cells sharing an edge or a vertex) and "cubic" (those and the four cells two steps away
#: across the edges);
#: edge values O(h^2), O(h^3), O(h^4).
RECONSTRUCTIONS = Registry("reconstruction")
RECONSTRUCTIONS.register("linear", 1)
RECONSTRUCTIONS.register("quadratic", 2)
RECONSTRUCTIONS.register("cubic", 3)
#: Weight omega of each of the eight edge points in the positivity decomposition of a quadratic
#: cell average, rho_bar = omega·sum_p rho(x_p) + (1 - 8 omega)·R with R >= 0 (module
#: docstring), for the quadratic and cubic reconstructions; the positivity step is
#: 8 omega = 0.8 times the linear one.
QUADRATIC_EDGE_WEIGHT = 0.1

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
    for r, v in zip(rows, nn[:, 1:][rows, cols], strict=True):  # at most 4 per cell
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
        LIMITERS.check(limiter)
        RECONSTRUCTIONS.check(reconstruction)
        self.mesh = m = mesh
        self.limiter = limiter
        self.reconstruction = reconstruction
        self._limiter_code = LIMITERS.get(limiter)
        N = m.n_cells
        if reconstruction == "linear":
            self._rec = _Linear(m)
            self.omega = 0.125
            self._bounds = 4
        else:
            self._rec = _Polynomial(m, RECONSTRUCTIONS.get(reconstruction))
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
