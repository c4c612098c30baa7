r"""The gnomonic equiangular cubed sphere: the finite-volume mesh of S^2.

Each of the six faces of the cube [-1, 1]^3 (a *panel*) is cut into n × n cells along lines of
constant central angle :math:`\alpha, \beta \in [-\pi/4, \pi/4]` and projected radially
(gnomonically) onto the sphere. A panel with centre c and in-plane axes e1, e2 (e1 × e2 = c)
maps (alpha, beta) to

.. math:: x(\alpha, \beta) = \frac{c + \tan\alpha\, e_1 + \tan\beta\, e_2}
                               {\sqrt{1 + \tan^2\alpha + \tan^2\beta}},

with area element

.. math:: dA = \frac{\sec^2\alpha\,\sec^2\beta}{(1 + \tan^2\alpha + \tan^2\beta)^{3/2}}
               \, d\alpha\, d\beta .

Lines of constant alpha or beta are straight on the cube, so every cell edge is a great-circle
arc: edge lengths, normals and the cell moments below are exact. The cells are quadrilaterals
whose areas vary by a factor of at most about 1.3 (equiangular spacing), there are no poles,
and every cell has exactly four edge neighbours, also across panel edges.

Numbering: cell ``p n^2 + j n + i`` is column i (alpha), row j (beta) of panel p; corners are
listed counter-clockwise seen from outside the sphere.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.spatial import cKDTree

__all__ = ["CubedSphere", "PANELS"]

#: (centre, e1, e2) of the six panels, right-handed: e1 × e2 = centre.
PANELS = np.array([
    [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
    [[0, 1, 0], [-1, 0, 0], [0, 0, 1]],
    [[-1, 0, 0], [0, -1, 0], [0, 0, 1]],
    [[0, -1, 0], [1, 0, 0], [0, 0, 1]],
    [[0, 0, 1], [0, 1, 0], [-1, 0, 0]],
    [[0, 0, -1], [0, 1, 0], [1, 0, 0]],
], dtype=np.float64)

#: Two-point Gauss–Legendre rule on [0, 1]: nodes and weights (exact for cubics along an edge).
EDGE_NODES = np.array([0.5 - 0.5 / math.sqrt(3.0), 0.5 + 0.5 / math.sqrt(3.0)])
EDGE_WEIGHTS = np.array([0.5, 0.5])


def _tan_grid(n: int) -> np.ndarray:
    """tan of the n + 1 equiangular nodes in [-pi/4, pi/4], exactly odd and exactly ±1 at the ends
    (so that the vertices on shared panel edges coincide bit for bit)."""
    t = np.tan(np.linspace(-0.25 * np.pi, 0.25 * np.pi, n + 1))
    t = 0.5 * (t - t[::-1])
    t[0], t[-1] = -1.0, 1.0
    if n % 2 == 0:
        t[n // 2] = 0.0
    return t


def _rectangle_area(x1, x2, y1, y2):
    r"""Exact area of the gnomonic rectangle [x1, x2] × [y1, y2] (x = tan alpha, y = tan beta):
    the difference of :math:`F(x, y) = \arctan(xy/\sqrt{1 + x^2 + y^2})`."""
    def F(x, y):
        return np.arctan(x * y / np.sqrt(1.0 + x * x + y * y))

    return F(x2, y2) - F(x1, y2) - F(x2, y1) + F(x1, y1)


def _slerp(a, b, s):
    """Points at fraction s of the great-circle arc from a to b; a, b: (..., 3), s: (k,)
    -> (..., k, 3)."""
    cosang = np.clip(np.sum(a * b, axis=-1), -1.0, 1.0)
    ang = np.arctan2(np.linalg.norm(np.cross(a, b), axis=-1), cosang)[..., None]
    sin = np.sin(ang)
    wa = np.sin((1.0 - s) * ang) / sin
    wb = np.sin(s * ang) / sin
    return wa[..., None] * a[..., None, :] + wb[..., None] * b[..., None, :]


def _panel_vertices(t):
    """Vertices of every panel, V (6, n+1, n+1, 3) indexed [p, j, i], and the gnomonic
    coordinates X[j, i] = t[i], Y[j, i] = t[j] of the nodes ``t`` (n+1,)."""
    X, Y = np.meshgrid(t, t)
    c, e1, e2 = PANELS[:, 0], PANELS[:, 1], PANELS[:, 2]
    V = (c[:, None, None, :] + X[None, :, :, None] * e1[:, None, None, :]
         + Y[None, :, :, None] * e2[:, None, None, :])
    V /= np.sqrt(1.0 + X * X + Y * Y)[None, :, :, None]
    return V, X, Y


def _cell_vertex_ids(V, n):
    """One id per geometric vertex (a vertex on a panel edge is listed by two or three panels),
    as the (n_cells, 4) ids of each cell's corners, counter-clockwise."""
    flat = V.reshape(-1, 3)
    tree = cKDTree(flat)
    dist, idx = tree.query(flat, k=min(3, flat.shape[0]))
    tol = 1e-9 / n
    idx = np.where(dist <= tol, idx, flat.shape[0])
    rep = idx.min(axis=1)
    _, vid = np.unique(rep, return_inverse=True)
    vid = vid.reshape(6, n + 1, n + 1)
    return np.stack([vid[:, :-1, :-1], vid[:, :-1, 1:], vid[:, 1:, 1:], vid[:, 1:, :-1]],
                    axis=3).reshape(-1, 4)


class CubedSphere:
    """Gnomonic equiangular cubed-sphere mesh with n × n cells per panel (6 n² cells).

    Parameters
    ----------
    n : int >= 1
        Cells along a cube edge.

    Attributes
    ----------
    n, n_cells, n_faces : int
        n, 6 n², 12 n².
    corners : (n_cells, 4, 3)
        Cell corners, counter-clockwise seen from outside.
    areas : (n_cells,)
        Exact spherical areas; they sum to 4 pi to round-off.
    centers : (n_cells, 3)
        Cell centroids projected to the sphere, c_K = m_K/|m_K| with the exact first moment
        :math:`m_K = \\int_K x\\, dA` (:attr:`moments`).
    moments : (n_cells, 3)
        :math:`\\int_K x\\, dA`, exact (Stokes: half the sum of edge length × edge-plane normal).
    h : float
        Mean cell diameter (geodesic length of the longer diagonal), the mesh size of the
        convergence studies.
    face_cells : (n_faces, 2)
        (owner, neighbour) of every edge; the normal points out of the owner.
    face_normals : (n_faces, 3)
        Unit normal of the edge's great-circle plane, pointing out of the owner; it is tangent
        to the sphere and normal to the edge at every point of the edge.
    face_lengths : (n_faces,)
        Geodesic edge lengths.
    face_midpoints : (n_faces, 3)
    face_points : (n_faces, 2, 3)
        Two-point Gauss–Legendre nodes along each edge (weights ``face_lengths/2`` each).
    cell_faces, cell_signs, neighbors : (n_cells, 4)
        The four edges of each cell (counter-clockwise, starting with the edge from corner 0 to
        corner 1), +1 where the cell owns the edge and -1 otherwise, and the cell across it.
    """

    def __init__(self, n: int):
        try:
            nn = int(n)
        except (TypeError, ValueError):
            raise ValueError(f"n (cells along a cube edge) must be an integer >= 1; got {n!r}") \
                from None
        if nn != n or nn < 1:
            raise ValueError(f"n (cells along a cube edge) must be an integer >= 1; got {n!r}")
        self.n = n = nn
        self.n_cells = 6 * n * n
        self.n_faces = 12 * n * n
        t = _tan_grid(n)
        self._t = t
        V, X, Y = _panel_vertices(t)
        corners = np.stack([V[:, :-1, :-1], V[:, :-1, 1:], V[:, 1:, 1:], V[:, 1:, :-1]], axis=3)
        self.corners = np.ascontiguousarray(corners.reshape(-1, 4, 3))
        ar = _rectangle_area(X[:-1, :-1], X[:-1, 1:], Y[:-1, :-1], Y[1:, :-1])
        self.areas = np.tile(ar.reshape(-1), 6)
        first = self._connect(_cell_vertex_ids(V, n))
        self._edge_geometry(first)
        self._moments()

    def _connect(self, cv) -> np.ndarray:
        """Edges and neighbours from the cells' vertex ids ``cv`` (n_cells, 4): sets
        ``cell_faces``, ``cell_signs``, ``face_cells`` and ``neighbors``, and returns, for every
        edge, its first position in the flat (cell, corner) list, the owner's copy of it."""
        # edges: (corner k -> corner k+1) of every cell; each geometric edge appears twice
        a_id, b_id = cv, np.roll(cv, -1, axis=1)
        key = (np.minimum(a_id, b_id).astype(np.int64) * (int(cv.max()) + 1)
               + np.maximum(a_id, b_id)).reshape(-1)
        uniq, first, inv, count = np.unique(key, return_index=True, return_inverse=True,
                                            return_counts=True)
        if uniq.size != self.n_faces or np.any(count != 2):
            raise RuntimeError("cubed-sphere connectivity is broken: every edge must be shared by "
                               "exactly two cells")  # pragma: no cover - a bug, not user input
        cell_of = np.repeat(np.arange(self.n_cells), 4)
        self.cell_faces = inv.reshape(-1, 4)
        owner = cell_of[first]
        self.cell_signs = np.where(owner[self.cell_faces] == np.arange(self.n_cells)[:, None],
                                   1, -1).astype(np.int8)
        other = np.empty(self.n_faces, dtype=np.int64)
        pos = np.arange(4 * self.n_cells)
        mask = np.ones(4 * self.n_cells, dtype=bool)
        mask[first] = False
        other[inv[pos[mask]]] = cell_of[pos[mask]]
        self.face_cells = np.stack([owner, other], axis=1)
        self.neighbors = np.where(self.cell_signs > 0, other[self.cell_faces],
                                  owner[self.cell_faces])
        return first

    def _edge_geometry(self, first) -> None:
        """Lengths, outward normals, Gauss nodes and midpoints of the edges, each taken from
        its owner's orientation (a -> b counter-clockwise); ``first`` as from :meth:`_connect`."""
        ca = self.corners.reshape(-1, 3)
        cb = np.roll(self.corners, -1, axis=1).reshape(-1, 3)
        a, b = ca[first], cb[first]
        cross = np.cross(a, b)
        sin = np.linalg.norm(cross, axis=-1)
        self.face_lengths = np.arctan2(sin, np.sum(a * b, axis=-1))
        # outward from the owner: the owner lies to the left of a -> b, on the side of a × b
        self.face_normals = -cross / sin[:, None]
        self.face_points = _slerp(a, b, EDGE_NODES)
        self.face_midpoints = _slerp(a, b, np.array([0.5]))[:, 0]

    def _moments(self) -> None:
        """Exact first moments, the centres and the mesh size h."""
        # by Stokes: int_K x dA = 1/2 sum_edges length · (a × b)/|a × b|
        ca = self.corners.reshape(-1, 3)
        cb = np.roll(self.corners, -1, axis=1).reshape(-1, 3)
        ang = np.arctan2(np.linalg.norm(np.cross(ca, cb), axis=-1), np.sum(ca * cb, axis=-1))
        mom = 0.5 * ang[:, None] * np.cross(ca, cb) / np.linalg.norm(np.cross(ca, cb), axis=-1,
                                                                      keepdims=True)
        self.moments = mom.reshape(-1, 4, 3).sum(axis=1)
        self.centers = self.moments / np.linalg.norm(self.moments, axis=-1, keepdims=True)
        d1 = np.arccos(np.clip(np.sum(self.corners[:, 0] * self.corners[:, 2], -1), -1, 1))
        d2 = np.arccos(np.clip(np.sum(self.corners[:, 1] * self.corners[:, 3], -1), -1, 1))
        self.h = float(np.mean(np.maximum(d1, d2)))

    # ------------------------------------------------------------------ quadrature
    def cell_quadrature(self, order: int = 3):
        r"""Tensor Gauss–Legendre nodes and weights in (alpha, beta) on every cell.

        Returns
        -------
        points : (n_cells, order², 3)
        weights : (n_cells, order²), area weights (the equiangular Jacobian included),
            rescaled per cell to sum to the exact area, so that constants are integrated exactly;
            a smooth f is integrated with error O(h^{2·order}) per unit area.
        """
        n = self.n
        g, w = np.polynomial.legendre.leggauss(int(order))
        da = 0.5 * np.pi / n
        a0 = -0.25 * np.pi + da * np.arange(n)
        al = (a0[:, None] + 0.5 * da * (g[None, :] + 1.0)).reshape(-1)  # (n·order,)
        wl = np.tile(0.5 * da * w, n)
        tx = np.tan(al)
        X, Y = np.meshgrid(tx, tx)  # [row (beta), col (alpha)]
        r2 = 1.0 + X * X + Y * Y
        jac = (1.0 + X * X) * (1.0 + Y * Y) / r2 ** 1.5 * np.outer(wl, wl)
        c, e1, e2 = PANELS[:, 0], PANELS[:, 1], PANELS[:, 2]
        P = (c[:, None, None, :] + X[None, ..., None] * e1[:, None, None, :]
             + Y[None, ..., None] * e2[:, None, None, :]) / np.sqrt(r2)[None, ..., None]
        q = int(order)
        # [p, j, qb, i, qa, :] -> [p, j, i, qb, qa, :]
        P = P.reshape(6, n, q, n, q, 3).transpose(0, 1, 3, 2, 4, 5).reshape(self.n_cells, q * q, 3)
        W = np.broadcast_to(jac.reshape(n, q, n, q).transpose(0, 2, 1, 3)[None],
                            (6, n, n, q, q)).reshape(self.n_cells, q * q)
        W = W * (self.areas / W.sum(axis=1))[:, None]
        return P, np.ascontiguousarray(W)

    def integrate_cells(self, f, order: int = 3) -> np.ndarray:
        """Integrals of a callable f(x), x: (..., 3) -> (...), over every cell: (n_cells,)."""
        P, W = self.cell_quadrature(order)
        vals = np.asarray(f(P), dtype=np.float64)
        if vals.shape != P.shape[:-1]:
            raise ValueError(f"the density callable must map points (..., 3) to values (...); "
                             f"got output shape {vals.shape} for input {P.shape}")
        return np.sum(vals * W, axis=1)

    def __repr__(self) -> str:
        return f"CubedSphere(n={self.n}, {self.n_cells} cells, h={self.h:.4g})"
