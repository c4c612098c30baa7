r"""Exact W2 between zonal measures: a 1-D transport problem between their theta-marginals.

A measure on S^{d-1} invariant under the rotations fixing a unit axis e is determined by the
law of :math:`\theta = \angle(x, e) \in [0, \pi]` (its theta-marginal). Between two such
measures (docs/theory.md, "W2 between zonal measures")

.. math:: W_2(\mu, \nu)^2 = \min_{\gamma \in \Pi(\mu_\theta, \nu_\theta)}
          \int h(|\theta - \theta'|)\, d\gamma, \qquad
          h(u) = u^2 \ \text{(geodesic)}, \quad h(u) = 2 - 2\cos u \ \text{(chordal)}:

couplings along meridians reach the right side, and no coupling does better because the
distance between x and y is at least that between their latitudes.

How the 1-D problem is solved, and how certain the answer is:

- A theta-marginal is a :class:`ZonalMarginal`: cells ``[edges[k], edges[k+1]]`` carrying
  ``masses[k]`` (a finite-volume state knows the cell masses, not how the mass lies inside a
  cell) and atoms (``thetas``, ``weights``: the limit measure, a Dirac at a pole, a ring).
  Each cell is replaced by one atom at its barycentre under the constant-density law
  :math:`\propto \sin^{d-2}\theta`. Moving a cell's mass to that atom costs at most
  :math:`h(\max(\bar\theta - a, b - \bar\theta))` per unit mass, whatever the law inside the
  cell, so :math:`\delta = (\sum_k m_k h(\cdot))^{1/2} \ge W_2(\text{cells}, \text{atoms})`
  and, W2 being a metric, the answer for the atoms widened by :math:`\delta_\mu + \delta_\nu`
  brackets W2 of the cell measures for ANY law inside the cells (first order in the cell
  width; the value itself is second order for the constant-density law).
- Between atoms, geodesic: the monotone (quantile) coupling is optimal (h convex); its cost is
  summed exactly, O((n + m) log(n + m)).
- Between atoms, chordal: h is concave beyond pi/2, and the monotone coupling is not always
  optimal (mass near one pole against mass near the other: crossing pairs are cheaper). The
  solver takes the monotone coupling (an upper bound), builds dual potentials on its support,
  and computes their exact double c-transform (a lower bound, O(n m) in blocks). When the two
  meet to round-off the monotone coupling is certified optimal. Otherwise the network simplex
  (POT ``emd``) solves the discrete problem exactly up to ``ZONAL_EXACT_PAIRS`` pairs; beyond,
  between groups of consecutive atoms (at most ``ZONAL_GROUP_ATOMS`` of mass and as many of
  width a side), certified on the atoms themselves: the group plan glued back to the atoms
  is a feasible coupling (its exact cost above), and the groups' dual potentials double
  c-transformed over all atom pairs are dual feasible (below). Both are second order in the
  group size, so the bracket stays far inside the cell spread.

All values are :class:`~spherepde.wasserstein.result.W2Result` with method ``"zonal"``.

For a token cloud against a zonal density, the theta-marginal distance is only a LOWER bound
(the cloud is not zonal): :func:`w2_cloud_zonal_bound` says so in its result.
"""
from __future__ import annotations

import numpy as np

from ..measures import WEIGHT_SUM_ATOL, Measure, PointCloud, _check_edges, _unit
from .costs import check_cost
from .result import W2Result, bracket_result

__all__ = ["ZonalMarginal", "w2_zonal", "w2_zonal_dirac", "w2_cloud_zonal_bound",
           "w2_to_limit_zonal", "theta_of", "ZONAL_EXACT_PAIRS", "ZONAL_GROUP_ATOMS",
           "ZONAL_DUAL_PAIRS"]

#: The network simplex solves the discrete 1-D chordal problem exactly up to this many atom
#: pairs (2000 a side: ~7 s and ~180 MB on a shared core, docs/benchmarks/zonal_w2.md).
ZONAL_EXACT_PAIRS = 4_000_000
#: Beyond that, it runs between groups of consecutive atoms: at most this many of mass 1/k
#: and as many of width pi/k a side (10^4 cells a side: ~7 s in all, with the certificates).
ZONAL_GROUP_ATOMS = 1000
#: The dual certificate of the monotone coupling (an exact c-transform over all pairs, in blocks
#: of BLOCK_PAIRS) is computed up to this many pairs (10^4 cells a side: ~2 s).
ZONAL_DUAL_PAIRS = 200_000_000
BLOCK_PAIRS = 4_000_000
#: The monotone coupling counts as optimal when its cost exceeds the dual bound by less than
#: this, relative to 1 + cost (the c-transforms are exact; this is round-off of the sums).
CERTIFICATE_RTOL = 1e-12
#: Default number of theta-cells for a measure given as a density.
DEFAULT_CELLS = 4096


def _h(u, cost):
    """The 1-D cost of an angle difference u in [0, pi]: u^2 or 2 - 2 cos u = 4 sin^2(u/2)."""
    u = np.abs(u)
    return u * u if cost == "geodesic" else 4.0 * np.sin(0.5 * u) ** 2


def theta_of(points, axis) -> np.ndarray:
    """Angles to the axis, points: (n, d) -> (n,) in [0, pi], accurate near both poles."""
    x = np.asarray(points, dtype=np.float64)
    c = x @ axis
    s = np.linalg.norm(x - c[:, None] * axis, axis=1)
    return np.arctan2(s, c)


class ZonalMarginal:
    r"""The theta-marginal of a zonal measure: mass in theta-cells and/or at atoms.

    Parameters
    ----------
    edges : (n+1,) array, optional
        Increasing cell edges in [0, pi].
    masses : (n,) array, optional
        The mass of each cell (not a density), >= 0.
    thetas, weights : (k,) arrays, optional
        Atoms: all the mass of the measure at latitude theta (the pole for 0 and pi, a uniform
        ring on S^{d-2} between), and their masses.
    d : int, optional
        The dimension of R^d; fixes the law inside a cell used for the value
        (:math:`\propto \sin^{d-2}\theta`, a constant density on the sphere). Without it the
        cells' midpoints are used. The bracket does not depend on it.

    Cells and atoms together must carry mass 1 (to 1e-9); they are rescaled to exactly 1.
    """

    def __init__(self, edges=None, masses=None, thetas=None, weights=None, d: int | None = None):
        if (edges is None) != (masses is None):
            raise ValueError("pass edges and masses together (theta cells and their masses)")
        if (thetas is None) != (weights is None):
            raise ValueError("pass thetas and weights together (atoms and their masses)")
        if edges is None and thetas is None:
            raise ValueError("a ZonalMarginal needs cells (edges, masses) or atoms "
                             "(thetas, weights)")
        self.d = None if d is None else int(d)
        self.edges = np.empty(0) if edges is None else _check_edges(edges)
        self.masses = np.empty(0) if masses is None else _nonneg(masses, "masses")
        if edges is not None and self.masses.shape != (self.edges.size - 1,):
            raise ValueError(f"masses must have shape (n,) = ({self.edges.size - 1},) for "
                             f"{self.edges.size} edges; got {self.masses.shape}")
        self.thetas = (np.empty(0) if thetas is None
                       else np.asarray(thetas, dtype=np.float64).ravel())
        self.weights = np.empty(0) if weights is None else _nonneg(weights, "weights").ravel()
        if self.thetas.shape != self.weights.shape:
            raise ValueError(f"thetas and weights must have the same shape; got "
                             f"{self.thetas.shape} and {self.weights.shape}")
        if self.thetas.size and (not np.all(np.isfinite(self.thetas)) or self.thetas.min() < 0
                                 or self.thetas.max() > np.pi * (1 + 1e-15)):
            raise ValueError("atom angles (thetas) must lie in [0, pi]")
        self.thetas = np.minimum(self.thetas, np.pi)
        total = float(self.masses.sum() + self.weights.sum())
        if abs(total - 1.0) > WEIGHT_SUM_ATOL:
            raise ValueError(f"the cell masses and atom weights must sum to 1 (they sum to "
                             f"{total:.12g}); divide them by their sum")
        self.masses = self.masses / total
        self.weights = self.weights / total

    @classmethod
    def from_measure(cls, measure: Measure, axis=None, n: int = DEFAULT_CELLS) -> ZonalMarginal:
        """The exact cell masses of a zonal sp.measures measure on n cells: half uniform on
        [0, pi], half uniform on the support of its theta-density (where the mass is)."""
        marginal = measure.theta_marginal(axis)
        lo, hi = marginal.support()
        half = max(int(n) // 2, 1)
        edges = np.unique(np.concatenate([np.linspace(0.0, np.pi, half + 1),
                                          np.linspace(lo, hi, half + 1)]))
        return cls(edges, marginal.cell_masses(edges), d=measure.d)

    @classmethod
    def from_points(cls, points, weights, axis) -> ZonalMarginal:
        """The theta-marginal of a weighted point cloud (atoms at its angles to the axis)."""
        return cls(thetas=theta_of(points, axis), weights=weights, d=np.shape(points)[1])

    def atoms(self):
        """(theta (k,), mass (k,), spread (k,)): one atom per cell at its barycentre under the
        constant-density law, and the given atoms, sorted by theta, zero masses dropped;
        ``spread`` is the largest distance from an atom to a point of its cell."""
        a, b = self.edges[:-1], self.edges[1:]
        bar = _cell_barycentres(a, b, self.d) if a.size else np.empty(0)
        th = np.concatenate([bar, self.thetas])
        m = np.concatenate([self.masses, self.weights])
        sp = np.concatenate([np.maximum(bar - a, b - bar), np.zeros(self.thetas.size)])
        keep = m > 0
        # atoms at the same angle (a ring of a product rule) are one atom of the marginal
        th, inv = np.unique(th[keep], return_inverse=True)
        mass = np.bincount(inv, weights=m[keep], minlength=th.size)
        spread = np.zeros(th.size)
        np.maximum.at(spread, inv, sp[keep])
        return th, mass, spread

    def spread(self, cost: str) -> float:
        r""":math:`\delta = (\sum_k m_k h(s_k))^{1/2} \ge W_2` (1-D, cost h) from these cells to
        their atoms, whatever the law inside each cell."""
        _, m, s = self.atoms()
        return float(np.sqrt(max(m @ _h(s, cost), 0.0)))

    def mean_cos(self) -> float:
        """E[cos theta] of the atoms (the component of the barycentre along the axis)."""
        th, m, _ = self.atoms()
        return float(m @ np.cos(th))

    def __repr__(self) -> str:
        return (f"ZonalMarginal({self.masses.size} cells, {self.thetas.size} atoms, "
                f"d={self.d})")


def _nonneg(v, name):
    v = np.asarray(v, dtype=np.float64)
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} contain NaN or inf")
    if np.any(v < 0):
        raise ValueError(f"{name} must be >= 0; the smallest is {v.min():.3e}")
    return v


def _cell_barycentres(a, b, d):
    """Mean of theta on each cell [a, b] under the law ~ sin^{d-2} theta (8-point Gauss)."""
    if d is None or d == 2:
        return 0.5 * (a + b)
    xg, wg = np.polynomial.legendre.leggauss(8)
    t = 0.5 * (a + b)[:, None] + 0.5 * (b - a)[:, None] * xg
    with np.errstate(divide="ignore"):
        lw = (d - 2) * np.log(np.sin(t))
    lw = lw - lw.max(axis=1, keepdims=True)
    w = wg * np.exp(lw)
    return np.clip((w * t).sum(1) / w.sum(1), a, b)


def as_zonal_marginal(obj, axis=None, d=None, n: int = DEFAULT_CELLS) -> ZonalMarginal:
    """A ZonalMarginal from a ZonalMarginal, an (edges, masses) pair or a zonal Measure."""
    if isinstance(obj, ZonalMarginal):
        return obj
    if isinstance(obj, Measure):
        return ZonalMarginal.from_measure(obj, axis, n)
    if isinstance(obj, tuple) and len(obj) == 2:
        return ZonalMarginal(obj[0], obj[1], d=d)
    raise TypeError(f"cannot read a theta-marginal from {type(obj).__name__}; pass a "
                    "ZonalMarginal, an (edges, masses) pair, or a zonal spherepde measure")


# --------------------------------------------------------------------------- the 1-D solvers
def _monotone_pieces(wa, wb):
    """The monotone coupling of masses wa (n,) and wb (m,) (both sorted by theta, sum 1):
    pieces (i, j, mass) in order."""
    ca, cb = np.cumsum(wa), np.cumsum(wb)
    ca[-1] = cb[-1] = 1.0
    u = np.union1d(ca, cb)
    mass = np.diff(np.concatenate([[0.0], u]))
    mid = u - 0.5 * mass
    i = np.minimum(np.searchsorted(ca, mid), wa.size - 1)
    j = np.minimum(np.searchsorted(cb, mid), wb.size - 1)
    keep = mass > 0
    return i[keep], j[keep], mass[keep]


def _monotone_cost(ta, wa, tb, wb, cost):
    i, j, mass = _monotone_pieces(wa, wb)
    return float(mass @ _h(ta[i] - tb[j], cost)), (i, j, mass)


def _staircase_psi(ta, tb, i, j, cost):
    """Potentials psi on the atoms b with phi_i + psi_j = c_ij on the monotone coupling's
    support (a path: fixed up to a constant). Where both indices advance at once the path is
    continued through the zero-mass pair (i_new, j_old), a degenerate basis of the same plan."""
    n, m = ta.size, tb.size
    phi = np.zeros(n)
    psi = np.zeros(m)

    def c(p, q):
        return _h(ta[p] - tb[q], cost)

    phi[i[0]] = c(i[0], j[0])
    for k in range(1, i.size):
        p, q, p0, q0 = int(i[k]), int(j[k]), int(i[k - 1]), int(j[k - 1])
        if p != p0:
            phi[p] = c(p, q0) - psi[q0]
        if q != q0:
            psi[q] = c(p, q) - phi[p]
    return psi


def _c_transform(ts, tt, pot, cost):
    """f(s) = min_t c(s, t) - pot(t) for every s in ts (exact, in blocks)."""
    out = np.empty(ts.size)
    rows = max(1, BLOCK_PAIRS // max(tt.size, 1))
    for s in range(0, ts.size, rows):
        C = _h(ts[s:s + rows, None] - tt[None, :], cost)
        out[s:s + rows] = np.min(C - pot[None, :], axis=1)
    return out


def _dual_bound(ta, wa, tb, wb, psi, cost):
    """sum_i a_i phi_i + sum_j b_j psi'_j with phi = psi^c and psi' = phi^c: a lower bound on
    W2^2 for any psi (phi_i + psi'_j <= c_ij by construction)."""
    phi = _c_transform(ta, tb, psi, cost)
    psi2 = _c_transform(tb, ta, phi, cost)
    return float(wa @ phi + wb @ psi2)


def _groups(th, w, k):
    """Group index (n,) of consecutive atoms: a new group where the cumulative mass crosses a
    multiple of 1/k or theta crosses a multiple of pi/k (so at most 2k groups, each of mass
    <= 1/k or width <= pi/k), numbered 0, 1, ..."""
    key = np.stack([np.floor((np.cumsum(w) - 0.5 * w) * k), np.floor(th * (k / np.pi))])
    new = np.concatenate([[True], np.any(np.diff(key, axis=1) != 0, axis=0)])
    return np.cumsum(new) - 1


def _emd_plan(ta, wa, tb, wb, cost):
    import ot

    M = _h(ta[:, None] - tb[None, :], cost)
    it = max(1_000_000, 100 * (ta.size + tb.size) ** 2)
    G, log = ot.emd(wa, wb, M, numItermax=it, log=True)
    if log["result_code"] != 1:
        raise RuntimeError(f"network simplex stopped without an optimum: {log['warning']}")
    return G, float(log["cost"]), np.asarray(log["v"], dtype=np.float64)


def _grouped_bracket(ta, wa, tb, wb, cost):
    """Network simplex between groups of consecutive atoms, certified on the atoms: the plan
    glued back to the atoms (each group pair's mass spread over its members in proportion)
    is a feasible coupling, its exact cost an upper bound; the groups' dual potentials, given
    to their members and double c-transformed over all pairs, a lower bound."""
    ga, gb = _groups(ta, wa, ZONAL_GROUP_ATOMS), _groups(tb, wb, ZONAL_GROUP_ATOMS)
    Wa, Wb = np.bincount(ga, weights=wa), np.bincount(gb, weights=wb)
    Ta, Tb = np.bincount(ga, weights=wa * ta) / Wa, np.bincount(gb, weights=wb * tb) / Wb
    G, _, v = _emd_plan(Ta, Wa, Tb, Wb, cost)
    lower = _dual_bound(ta, wa, tb, wb, v[gb], cost)
    sa = np.searchsorted(ga, np.arange(Wa.size + 1))
    sb = np.searchsorted(gb, np.arange(Wb.size + 1))
    upper = 0.0
    for g, k in zip(*np.nonzero(G > 0), strict=True):
        ia, ib = slice(sa[g], sa[g + 1]), slice(sb[k], sb[k + 1])
        C = _h(ta[ia, None] - tb[None, ib], cost)
        upper += G[g, k] * (wa[ia] @ C @ wb[ib]) / (Wa[g] * Wb[k])
    return lower, upper, (Wa.size, Wb.size)


def _w2sq_atoms(ta, wa, tb, wb, cost):
    """A bracket (lower, upper, value) on the 1-D transport cost between two sets of atoms,
    and how it was found."""
    up, (i, j, _) = _monotone_cost(ta, wa, tb, wb, cost)
    if cost == "geodesic" or ta.size == 1 or tb.size == 1:
        why = ("monotone coupling (h convex: optimal)" if cost == "geodesic"
               else "one atom: the only coupling")
        return up, up, up, why
    lo = 0.0
    n, m = ta.size, tb.size
    if n * m <= ZONAL_DUAL_PAIRS:
        psi = _staircase_psi(ta, tb, i, j, cost)
        lo = max(_dual_bound(ta, wa, tb, wb, psi, cost), 0.0)
        if up - lo > CERTIFICATE_RTOL * (1.0 + up):
            # the other side's path potentials, transformed in the other order: a wrong
            # potential on a far, light atom spoils one order's transform more than the other's
            phi = np.full(n, -np.inf)
            np.maximum.at(phi, i, _h(ta[i] - tb[j], cost) - psi[j])
            lo = max(lo, _dual_bound(tb, wb, ta, wa, phi, cost))
        if up - lo <= CERTIFICATE_RTOL * (1.0 + up):
            return lo, up, up, "monotone coupling, certified optimal by its dual"
    if n * m <= ZONAL_EXACT_PAIRS:
        val = _emd_plan(ta, wa, tb, wb, cost)[1]
        return val, val, val, (f"network simplex on {n} x {m} atoms (the monotone coupling "
                               f"costs {up:.6g}, its dual {lo:.6g}: not optimal)")
    if n * m > ZONAL_DUAL_PAIRS:
        raise ValueError(f"the chordal 1-D problem has {n} x {m} atoms, beyond "
                         f"ZONAL_DUAL_PAIRS = {ZONAL_DUAL_PAIRS:.0e} for its certificate; use "
                         "fewer cells, or cost='geodesic' (exact in O(n + m))")
    glo, gup, sizes = _grouped_bracket(ta, wa, tb, wb, cost)
    lower, upper = max(lo, glo), min(up, gup)
    return lower, upper, upper, (
        f"network simplex on {sizes[0]} x {sizes[1]} groups of consecutive atoms, certified "
        "on the atoms (glued plan above, double c-transform of its duals below)")


def _result(A: ZonalMarginal, B: ZonalMarginal, cost, extra=None) -> W2Result:
    ta, wa, _ = A.atoms()
    tb, wb, _ = B.atoms()
    lo, up, val, how = _w2sq_atoms(ta, wa, tb, wb, cost)
    delta = A.spread(cost) + B.spread(cost)
    upper = np.sqrt(max(up, 0.0)) + delta
    lower = max(np.sqrt(max(lo, 0.0)) - delta, 0.0)
    details = {"reduction": "1-D transport of the theta-marginals, cost h(|theta - theta'|)",
               "solver": how, "atoms": (ta.size, tb.size), "cell_spread": delta,
               "atoms_w2_squared_bracket": (lo, up)}
    details.update(extra or {})
    return bracket_result(upper**2, lower**2, cost, "zonal", details, value_sq=val)


# --------------------------------------------------------------------------- public
def w2_zonal(mu, nu, cost: str = "chordal", axis=None, n: int = DEFAULT_CELLS) -> W2Result:
    r"""W2 between two zonal measures on S^{d-1} about the same axis, as a certified bracket.

    Parameters
    ----------
    mu, nu : ZonalMarginal, (edges, masses) pair, or zonal sp.measures Measure
        An (edges, masses) pair is theta-cell edges (n+1,) and cell masses (n,); a Measure
        must be zonal about ``axis`` (:meth:`~spherepde.measures.Measure.check_zonal` says
        what breaks the symmetry) and is cut into ``n`` cells with exact masses.
    cost : {"chordal", "geodesic"}
    axis : (d,), optional
        The common axis of Measure inputs (default: mu's own axis, e.g. a vMF's mean).
    n : int
        Cells for Measure inputs.

    Returns
    -------
    W2Result (method "zonal"): ``lower <= W2 <= upper`` holds for any law of the mass inside
    the cells; the value takes the constant density inside each cell.

    Examples
    --------
    >>> import numpy as np
    >>> north = ZonalMarginal(thetas=[0.0], weights=[1.0])
    >>> south = ZonalMarginal(thetas=[np.pi], weights=[1.0])
    >>> float(w2_zonal(north, south)), float(w2_zonal(north, south, cost="geodesic")) == np.pi
    (2.0, True)
    """
    check_cost(cost)
    if axis is None:
        for m in (mu, nu):
            if isinstance(m, Measure):
                axis = m.default_axis()
                break
    A = as_zonal_marginal(mu, axis, None, n)
    B = as_zonal_marginal(nu, axis, None, n)
    if A.d is not None and B.d is not None and A.d != B.d:
        raise ValueError(f"the two measures live in different dimensions: d = {A.d} and {B.d}")
    if A.d is None or B.d is None:
        d = A.d if A.d is not None else B.d
        A.d = B.d = d
    return _result(A, B, cost)


def w2_zonal_dirac(mu, z, axis=None, cost: str = "chordal", n: int = DEFAULT_CELLS) -> W2Result:
    r"""W2 between a zonal measure and the Dirac mass at a unit vector z (d,).

    There is one coupling, so :math:`W_2^2 = \int c(x, z)\, d\mu(x)`. Chordal, any z:
    :math:`2 - 2\cos\theta_z\, E_\mu[\cos\theta]` (the mean of a zonal measure lies on the
    axis); the bracket takes cos theta anywhere in each cell. Geodesic: z = +-axis only (then
    it is a 1-D problem with an atom at 0 or pi).
    """
    check_cost(cost)
    z = np.asarray(z, dtype=np.float64)
    if axis is None and isinstance(mu, Measure):
        axis = mu.default_axis()
    A = as_zonal_marginal(mu, axis, z.shape[0], n)
    if axis is None:
        raise ValueError("pass axis= (the symmetry axis of mu), a (d,) vector")
    axis = _unit(axis, z.shape[0], "axis")
    z = _unit(z, axis.shape[0], "z")
    tz = float(theta_of(z[None], axis)[0])
    pole = min(tz, np.pi - tz) <= 1e-15
    if pole:
        return _result(A, ZonalMarginal(thetas=[0.0 if tz < 1 else np.pi], weights=[1.0]), cost,
                       {"dirac_theta": tz})
    if cost == "geodesic":
        raise NotImplementedError("the geodesic W2 to a Dirac off the axis is not reduced to 1-D "
                                  "here; use cost='chordal', or sp.w2 on a quadrature of mu")
    ct = np.cos(tz)
    a, b = A.edges[:-1], A.edges[1:]
    # cos is decreasing on [0, pi]: on a cell it lies in [cos b, cos a]
    lo_c = A.masses @ np.where(ct >= 0, np.cos(b), np.cos(a)) + A.weights @ np.cos(A.thetas)
    hi_c = A.masses @ np.where(ct >= 0, np.cos(a), np.cos(b)) + A.weights @ np.cos(A.thetas)
    val = 2.0 - 2.0 * ct * A.mean_cos()
    upper, lower = 2.0 - 2.0 * ct * lo_c, 2.0 - 2.0 * ct * hi_c
    return bracket_result(upper, lower, cost, "zonal", {
        "reduction": "one coupling: W2^2 = 2 - 2 cos(theta_z) E[cos theta]", "dirac_theta": tz},
        value_sq=val)


def w2_cloud_zonal_bound(cloud, mu, axis=None, cost: str = "chordal",
                         n: int = DEFAULT_CELLS) -> W2Result:
    r"""A certified LOWER bound on W2 between a token cloud and a zonal measure.

    The cloud is not zonal, so only half of the reduction holds: any coupling costs at least
    the 1-D transport between the theta-marginals, and the returned value is that lower bound
    (``details["lower_bound_only"] = True``). The upper end of the bracket is a feasible
    coupling's cost: chordal, each token's mass spread uniformly over the latitude sphere the
    1-D plan sends it to, which costs :math:`2 - 2\cos\theta\cos\theta'` per unit mass (its
    minimum over plans is the monotone one in cos theta); geodesic, the diameter pi.
    """
    check_cost(cost)
    cloud = cloud if isinstance(cloud, PointCloud) else PointCloud(*cloud) if isinstance(
        cloud, tuple) else PointCloud(cloud)
    if axis is None and isinstance(mu, Measure):
        axis = mu.default_axis()
    if axis is None:
        raise ValueError("pass axis= (the symmetry axis of mu), a (d,) vector")
    axis = _unit(axis, cloud.d, "axis")
    A = ZonalMarginal.from_points(cloud.points, cloud.weights, axis)
    B = as_zonal_marginal(mu, axis, cloud.d, n)
    r = _result(A, B, cost)
    lower = r.lower
    if cost == "chordal":
        ta, wa, _ = A.atoms()
        tb, wb, sb = B.atoms()
        i, j, mass = _monotone_pieces(wa, wb)
        # the cells' atoms stand for mass anywhere in the cell: take the worst cos theta'
        ct = np.cos(ta[i])
        far = np.where(ct >= 0, np.minimum(tb[j] + sb[j], np.pi), np.maximum(tb[j] - sb[j], 0.0))
        upper = float(np.sqrt(max(mass @ (2.0 - 2.0 * ct * np.cos(far)), 0.0)))
    else:
        upper = np.pi
    upper = max(upper, lower)
    details = dict(r.details, lower_bound_only=True, note=(
        "the token cloud is not zonal: the value is the theta-marginal distance, a certified "
        "LOWER bound on W2; the upper bound is a latitude-spreading coupling's cost"))
    return W2Result(lower, cost, "zonal-lower-bound", upper - lower,
                    dict(details, w2_bracket=(lower, upper),
                         w2_squared_bracket=(lower**2, upper**2)))


def _limit_marginal(model, axis, d, masses0, edges, mu0):
    """Pi#rho0 as a ZonalMarginal, and as a PointCloud on S^{d-1}."""
    U = model.dominant_subspace()
    k = U.shape[1]
    along = np.linalg.norm(U.T @ axis)
    if k == 1 and abs(along - 1.0) <= 1e-9:
        if isinstance(mu0, Measure):
            m_plus = float(mu0.theta_marginal(axis).cdf(0.5 * np.pi))
        else:
            # cell masses below pi/2; a cell straddling it is split by its constant-density law
            a, b = edges[:-1], edges[1:]
            frac = np.clip((0.5 * np.pi - a) / (b - a), 0.0, 1.0)
            st = (a < 0.5 * np.pi) & (b > 0.5 * np.pi)
            if np.any(st):
                frac[st] = _straddle_fraction(a[st], b[st], d)
            m_plus = float(masses0 @ frac)
        atoms = ZonalMarginal(thetas=[0.0, np.pi], weights=[m_plus, 1.0 - m_plus], d=d)
        cloud = PointCloud(np.stack([axis, -axis]), np.array([m_plus, 1.0 - m_plus]))
        return atoms, cloud
    if k == d - 1 and along <= 1e-9:
        # E = axis^perp: Pi sends every x off the poles to the equator, uniformly by symmetry
        ring = ZonalMarginal(thetas=[0.5 * np.pi], weights=[1.0], d=d)
        # the cloud stands for the ring (for plots): +- an orthonormal basis of axis^perp
        basis = np.linalg.svd(np.eye(d) - np.outer(axis, axis))[0][:, : d - 1]
        return ring, PointCloud(np.concatenate([basis.T, -basis.T]))
    raise ValueError(f"the model's dominant subspace E (dim {k}) is neither the axis nor its "
                     "orthogonal complement: the model is not axially symmetric about the "
                     "solution's axis, so Pi#rho0 is not zonal")


def _straddle_fraction(a, b, d):
    """Fraction of a cell's constant-density law below pi/2 (16-point Gauss on each part)."""
    xg, wg = np.polynomial.legendre.leggauss(16)

    def mass(lo, hi):
        t = 0.5 * (lo + hi)[:, None] + 0.5 * (hi - lo)[:, None] * xg
        return 0.5 * (hi - lo) * (np.sin(t) ** (d - 2) @ wg)

    below = mass(a, np.full_like(a, 0.5 * np.pi))
    return below / (below + mass(np.full_like(b, 0.5 * np.pi), b))


def w2_to_limit_zonal(solution, model=None, cost: str = "chordal"):
    r"""t -> W2(rho_t, Pi#rho0) for a zonal solution, exact up to its cell bracket.

    Parameters
    ----------
    solution :
        Has ``theta_edges`` (n+1,), ``cell_masses(i)`` (n,), ``times``, ``axis``, ``d`` and
        ``model``; ``initial_measure``, when it is a Measure zonal about the axis, gives the
        limit's masses exactly; otherwise they are the first cell masses on either side of
        pi/2 (a cell across it split by its constant-density law).
    model : Model, optional
    cost : {"chordal", "geodesic"}

    Returns
    -------
    W2Curve with ``method`` "zonal" at every time. dim E = 1 along the axis: Pi#rho0 is two
    atoms at +-axis with the masses of the half-spheres; E = axis^perp: the uniform measure on
    the equator (one atom at theta = pi/2; ``limit`` holds +- a basis of axis^perp, a
    3-design of the equator, for display only). Against these the 1-D coupling is monotone and
    optimal (a two-atom target is split at one threshold), so the bracket is the cell spread
    of the solution alone: the largest cell's half width, at most.
    """
    from .limit import W2Curve

    check_cost(cost)
    model = getattr(solution, "model", None) if model is None else model
    if model is None:
        raise ValueError("w2_to_limit needs a model (pass model=, or a solution that carries one)")
    edges = np.asarray(solution.theta_edges, dtype=np.float64)
    axis = np.asarray(solution.axis, dtype=np.float64)
    d = int(getattr(solution, "d", axis.size))
    mu0 = getattr(solution, "initial_measure", None)
    limit, cloud = _limit_marginal(model, axis, d, np.asarray(solution.cell_masses(0)), edges,
                                   mu0 if isinstance(mu0, Measure) and mu0.is_zonal(axis)
                                   else None)
    times = np.asarray(solution.times, dtype=np.float64)
    results = [_result(ZonalMarginal(edges, solution.cell_masses(i), d=d), limit, cost)
               for i in range(times.size)]
    return W2Curve(times, np.array([float(r) for r in results]),
                   np.array([r.error for r in results]), [r.method for r in results], cost,
                   cloud, None, results, np.array([r.lower for r in results]),
                   np.array([r.upper for r in results]))
