r"""Probability measures on S^{d-1}: densities, samplers and weighted point clouds.

Densities are taken relative to the surface-area measure (docs/theory.md §1), so the uniform
density on S^2 is 1/(4 pi). Every measure can be handed over as a weighted
:class:`PointCloud`, the common currency of the Wasserstein tools.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from scipy import integrate, special

from .sphere import (
    CircleGrid,
    as_points,
    fibonacci_lattice,
    hemisphere_quadrature,
    log_sphere_area,
    normalize,
    rotation_to_pole,
)

__all__ = [
    "PointCloud",
    "as_point_cloud",
    "grid_point_cloud",
    "Measure",
    "Uniform",
    "VonMisesFisher",
    "Mixture",
    "ACG",
    "CallableDensity",
    "as_measure",
    "ThetaMarginal",
    "log_bessel_i",
    "ZONAL_TAIL_LOG",
]

#: The theta-rules of :meth:`Measure.quadrature` leave out the tails where the theta-density is
#: below exp(-ZONAL_TAIL_LOG) times its maximum: their mass is < pi max(f) e^{-45}, 1e-19
#: relative to a density of height 1, far below the rules' own error.
ZONAL_TAIL_LOG = 45.0
#: A measure counts as zonal about an axis when its defining directions are parallel to it to
#: within this (a unit vector built from rounded input is off by ~1e-16).
ZONAL_ATOL = 1e-12

#: Tolerance on |sum(weights) - 1| for a probability measure.
WEIGHT_SUM_ATOL = 1e-9


class PointCloud:
    """A probability measure sum_i w_i delta_{x_i} on S^{d-1}.

    Parameters
    ----------
    points : array_like, shape (n, d)
        Points on the unit sphere, stored as float64. Unit vectors rounded to float32
        (| |x| - 1 | up to :data:`spherepde.sphere.FLOAT32_UNIT_NORM_ATOL` = 1e-6) are
        normalised in float64; points further off are refused unless ``normalize``.
    weights : array_like, shape (n,), optional
        Non-negative weights summing to 1 (default: uniform 1/n).
    normalize : bool
        Project points to the sphere and rescale weights to sum 1 instead of rejecting them.

    Examples
    --------
    >>> import numpy as np, spherepde as sp
    >>> mu = sp.PointCloud(np.eye(3)[:2], [0.25, 0.75])
    >>> mu.n, mu.d
    (2, 3)
    """

    def __init__(self, points, weights=None, *, normalize: bool = False):
        pts = np.asarray(points, dtype=np.float64)
        if pts.ndim != 2:
            raise ValueError(f"points must have shape (n, d); got shape {pts.shape}")
        if pts.shape[0] == 0:
            raise ValueError("a point cloud needs at least one point")
        pts = as_points(pts, name="points", normalize=normalize)
        n = pts.shape[0]
        if weights is None:
            w = np.full(n, 1.0 / n)
        else:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != (n,):
                raise ValueError(f"weights must have shape (n,) = ({n},) to match points; "
                                 f"got shape {w.shape}")
            if not np.all(np.isfinite(w)):
                raise ValueError("weights contain NaN or inf")
            if np.any(w < 0):
                raise ValueError(f"weights must be >= 0; the smallest is {w.min():.3e}")
            total = float(w.sum())
            if normalize:
                if total <= 0:
                    raise ValueError("weights sum to 0; there is no mass to normalize")
                w = w / total
            elif abs(total - 1.0) > WEIGHT_SUM_ATOL:
                raise ValueError(f"weights must sum to 1 (they sum to {total:.12g}, off by "
                                 f"{total - 1:.1e}); pass normalize=True to rescale them")
        self.points = pts
        self.weights = w

    @property
    def n(self) -> int:
        return self.points.shape[0]

    @property
    def d(self) -> int:
        return self.points.shape[1]

    def mean(self) -> np.ndarray:
        """Barycenter sum_i w_i x_i in R^d (not on the sphere)."""
        return self.weights @ self.points

    def to_point_cloud(self) -> "PointCloud":
        return self

    def __repr__(self) -> str:
        return f"PointCloud(n={self.n}, d={self.d})"


def grid_point_cloud(points, weights, values) -> PointCloud:
    """A density sampled on a quadrature grid as a point cloud: node i gets the weight
    quadrature weight × max(value, 0), renormalized to mass 1.

    Parameters
    ----------
    points : (..., d) nodes on the sphere
    weights : (...) quadrature weights, or None for equal weights (an equispaced grid)
    values : (...) density values; negative values (a truncated density's undershoots) get
        weight 0

    Returns
    -------
    PointCloud of the nodes, flattened to (n, d)
    """
    points = np.asarray(points, dtype=np.float64)
    w = np.maximum(np.asarray(values, dtype=np.float64), 0.0)
    if weights is not None:
        w = weights * w
    w = w.reshape(-1)
    total = w.sum()
    if not total > 0:
        raise ValueError("the density is <= 0 at every grid node: there is no mass to sample")
    return PointCloud(points.reshape(-1, points.shape[-1]), w / total)


def as_point_cloud(obj, **kwargs) -> PointCloud:
    """Convert a measure-like object to a :class:`PointCloud`.

    Accepts a PointCloud, anything with ``to_point_cloud(**kwargs)``, a pair
    ``(points, weights)``, or an (n, d) array of equally weighted points.
    """
    if isinstance(obj, PointCloud):
        return obj
    if hasattr(obj, "to_point_cloud"):
        return obj.to_point_cloud(**kwargs)
    if isinstance(obj, tuple) and len(obj) == 2:
        return PointCloud(obj[0], obj[1])
    if isinstance(obj, np.ndarray) and obj.ndim == 2:
        return PointCloud(obj)
    raise TypeError(f"cannot convert {type(obj).__name__} to a PointCloud; pass a PointCloud, "
                    "a (points, weights) pair, or an object with to_point_cloud()")


class Measure:
    """Base class of absolutely continuous probability measures on S^{d-1}.

    Subclasses provide ``d``, ``density(x)`` and ``sample(n, seed)``.
    """

    d: int

    def density(self, x) -> np.ndarray:
        raise NotImplementedError

    def sample(self, n: int, seed=None) -> np.ndarray:
        raise NotImplementedError

    def __call__(self, x) -> np.ndarray:
        return self.density(x)

    def hemisphere_mass(self, e) -> float:
        r"""Mass of the open half-sphere :math:`\{\langle x, e\rangle > 0\}` by quadrature.

        The generic implementation integrates the density on S^2 with Gauss–Legendre nodes in
        :math:`\langle x, e\rangle` and the trapezoid rule around e, doubling the resolution until
        two successive values agree to 1e-12.
        """
        e = _unit(e, self.d, "e")
        if self.d != 3:
            raise NotImplementedError(
                f"{type(self).__name__}.hemisphere_mass is implemented on S^2 only (d = 3); "
                f"got d = {self.d}. Use a point-cloud limit measure instead.")
        prev = None
        n_t, n_phi = 64, 128
        for _ in range(8):
            pp, wp, pm, wm = hemisphere_quadrature(e, n_t, n_phi)
            m_plus = float(np.sum(self.density(pp) * wp))
            m_minus = float(np.sum(self.density(pm) * wm))
            val = m_plus / (m_plus + m_minus)
            if prev is not None and abs(val - prev) < 1e-12:
                return val
            prev = val
            n_t, n_phi = 2 * n_t, 2 * n_phi
        raise RuntimeError(f"hemisphere mass quadrature did not converge (last change "
                           f"{abs(val - prev):.1e}); the density may be too concentrated")

    def to_point_cloud(self, n: int = 20000, seed=0) -> PointCloud:
        """A sample of n equally weighted points (seeded, reproducible)."""
        return PointCloud(self.sample(n, seed))

    def lattice(self, n: int) -> PointCloud:
        r"""A deterministic n-point discretisation: the measure on a low-discrepancy lattice.

        On S^2 the points are the spherical Fibonacci lattice (:func:`fibonacci_lattice`), on
        S^1 the equispaced grid; each point carries the mass density(x_i) |S|/n, normalised.
        Measures with a known inverse distribution function override this with an
        equal-weight lattice that is dense where the mass is (:class:`VonMisesFisher`).

        Why: a particle run started from a random sample carries a sampling error of order
        n^{-1/2} that the dynamics amplify; from a lattice the initial error is that of a
        quadrature rule, so runs at n and 4n agree far more closely (the low-temperature
        study measures both). Available on S^1 and S^2.
        """
        n = _check_n(n)
        if self.d == 3:
            x = fibonacci_lattice(n)
        elif self.d == 2:
            x = CircleGrid(n).points
        else:
            raise NotImplementedError(
                f"lattices are built on S^1 and S^2 (d = 2, 3); got d = {self.d}. "
                "Draw a random sample with sample(n, seed) instead.")
        w = np.asarray(self.density(x), dtype=np.float64)
        if not np.all(np.isfinite(w)) or w.sum() <= 0:
            raise ValueError(f"{self!r}: the density vanishes or is not finite on the {n}-point "
                             "lattice; use more points or sample(n, seed)")
        return PointCloud(x, w / w.sum())

    # ------------------------------------------------------------------ zonal structure
    def log_density(self, x) -> np.ndarray:
        """log of :meth:`density` (``-inf`` where it vanishes), x: (..., d) -> (...)."""
        with np.errstate(divide="ignore"):
            return np.log(self.density(x))

    def default_axis(self):
        """The measure's own symmetry axis (a unit (d,) vector), or None when it has none."""

    def zonal_obstruction(self, axis) -> str | None:
        """Why this measure is not invariant under the rotations of S^{d-1} fixing ``axis``,
        or None when it is. Subclasses that know their symmetry override it."""
        return (f"{type(self).__name__} carries no symmetry this library can verify; give the "
                "initial data as a zonal measure (Uniform, VonMisesFisher about +-axis, or a "
                "Mixture of them)")

    def is_zonal(self, axis) -> bool:
        """Whether the measure is invariant under every rotation fixing ``axis`` (d,)."""
        return self.zonal_obstruction(_unit(axis, self.d, "axis")) is None

    def check_zonal(self, axis) -> np.ndarray:
        """The unit axis, or a ValueError naming what breaks the symmetry about it."""
        axis = _unit(axis, self.d, "axis")
        why = self.zonal_obstruction(axis)
        if why is not None:
            raise ValueError(f"{self!r} is not zonal about the axis {np.round(axis, 6).tolist()} "
                             f"(not invariant under the rotations fixing it): {why}")
        return axis

    def theta_marginal(self, axis=None) -> ThetaMarginal:
        r"""The law of :math:`\theta = \angle(x, e)` for x drawn from this zonal measure.

        Its density against :math:`d\theta` on [0, pi] is
        :math:`f(\theta) = |S^{d-2}| \sin^{d-2}\theta\, \rho(\cos\theta\, e + \sin\theta\, u)`
        (any unit u orthogonal to e), evaluated in log form from :meth:`log_density`.

        Parameters
        ----------
        axis : (d,), optional
            The axis e (default: :meth:`default_axis`). The measure must be zonal about it
            (:meth:`check_zonal`).
        """
        axis = self._axis_or_default(axis)
        self.check_zonal(axis)
        u = _orthogonal_unit(axis)
        log_area = log_sphere_area(self.d - 1)
        d = self.d

        def log_pdf(theta):
            theta = np.asarray(theta, dtype=np.float64)
            x = np.cos(theta)[..., None] * axis + np.sin(theta)[..., None] * u
            out = self.log_density(normalize(x)) + log_area
            if d > 2:
                with np.errstate(divide="ignore"):
                    out = out + (d - 2) * np.log(np.sin(theta))
            return out

        return ThetaMarginal(log_pdf, d, axis, source=repr(self))

    def _axis_or_default(self, axis):
        if axis is None:
            axis = self.default_axis()
            if axis is None:
                raise ValueError(f"{self!r} has no axis of its own; pass axis= (a (d,) vector)")
        return _unit(axis, self.d, "axis")

    def quadrature(self, n: int, axis=None, *, n_theta: int | None = None, seed=0) -> PointCloud:
        r"""About n weighted nodes of a product Gauss rule: this measure as a PointCloud.

        Nodes :math:`x = w e + \sqrt{1 - w^2}\, u` with :math:`w = \cos\theta` about the axis e:

        - in w, Gauss–Jacobi with weight :math:`(1 - w)^a (1 + w)^a`, a = (d - 3)/2, the
          surface measure's :math:`\sin^{d-2}\theta\, d\theta`: Gauss–Legendre in
          :math:`\cos\theta` on S^2 (a = 0). For a measure zonal about e the rule covers only
          the theta-interval where the theta-density exceeds e^{-45} of its maximum
          (:data:`ZONAL_TAIL_LOG`), so its nodes sit where the mass is; an end of that
          interval at a pole keeps its Jacobi factor, an interior end is smooth.
        - in u on S^{d-2}: the two points +-1 (S^1, d = 2); n_phi = 2 n_theta equispaced
          angles (S^2: the trapezoid rule, exact for trigonometric polynomials of degree
          < n_phi); for d >= 4, on each ring the 2(d-1) vertices +-e_i of a cross-polytope
          turned by its own Haar-random rotation (seeded). Each is a spherical 3-design, so
          polynomials of degree <= 3 in x are integrated to the accuracy of the theta-rule;
          degree >= 4 in u are not exact: a structured, not an exact, rule on S^{d-2}.

        Node (i, j) carries :math:`\rho(x_{ij})` times the product weight, normalised to sum 1.
        For densities analytic in w (vMF, uniform) the moments of the rule converge
        exponentially in n_theta; the normalisation takes out the rule's error on the mass.

        Parameters
        ----------
        n : int
            About how many nodes (n_theta rings times the directions per ring).
        axis : (d,), optional
            The rule's axis (default: :meth:`default_axis`, e.g. a vMF's mean). The measure
            need not be zonal about it: the rule then spans all of [-1, 1] in w.
        n_theta : int, optional
            Rings in theta (default: sqrt(n / 2) on S^2, n / 2 on S^1, n / (2(d-1)) for
            d >= 4).
        seed : int
            Seeds the rotations of the cross-polytopes (d >= 4).

        Examples
        --------
        >>> import numpy as np, spherepde as sp
        >>> cap = sp.measures.VonMisesFisher([0, 0, 1.0], 4.0).quadrature(800)
        >>> bool(abs(cap.mean()[2] - (1 / np.tanh(4.0) - 1 / 4.0)) < 1e-13)
        True

        Returns
        -------
        PointCloud of n_theta * (directions per ring) nodes, shape (~n, d).
        """
        n = _check_n(n)
        axis = self._axis_or_default(axis)
        d = self.d
        n_t, dirs, log_wdir = _ring_directions(n, d, n_theta, seed)
        if self.is_zonal(axis):
            lo, hi = self.theta_marginal(axis).support()
        else:
            lo, hi = 0.0, np.pi
        w, log_wt = _theta_rule(n_t, lo, hi, d)
        R = rotation_to_pole(axis)  # R = R^T, R axis = e_d
        s = np.sqrt(np.clip(1.0 - w * w, 0.0, None))
        local = np.concatenate([s[:, None, None] * dirs,
                                np.broadcast_to(w[:, None, None], (n_t, dirs.shape[1], 1))],
                               axis=-1).reshape(-1, d)
        pts = normalize(local @ R)
        logw = (log_wt[:, None] + log_wdir[None, :]).reshape(-1) + self.log_density(pts)
        if not np.any(np.isfinite(logw)):
            raise ValueError(f"{self!r}: the density vanishes at every node of the rule; pass "
                             "a larger n or the measure's own axis")
        wts = np.exp(logw - special.logsumexp(logw))
        return PointCloud(pts, wts / wts.sum())


def _unit(v, d, name):
    v = np.asarray(v, dtype=np.float64)
    if v.shape != (d,):
        raise ValueError(f"{name} must have shape ({d},); got {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} contains NaN or inf")
    nv = np.linalg.norm(v)
    if nv == 0:
        raise ValueError(f"{name} must be a nonzero vector")
    return v / nv


def _check_dim(d) -> int:
    if int(d) != d or d < 2:
        raise ValueError(f"d must be an integer >= 2 (the sphere S^(d-1) in R^d); got {d!r}")
    return int(d)


def _check_n(n) -> int:
    if int(n) != n or n < 1:
        raise ValueError(f"the number of samples must be a positive integer; got {n!r}")
    return int(n)


def _orthogonal_unit(axis) -> np.ndarray:
    """A unit vector orthogonal to ``axis`` (d >= 2)."""
    k = int(np.argmin(np.abs(axis)))
    v = -axis[k] * axis
    v[k] += 1.0
    return v / np.linalg.norm(v)


def _ring_directions(n, d, n_theta, seed):
    """(n_theta, directions (n_theta, m, d-1) on S^{d-2} (ring i's in row i), their m log
    weights, summing to |S^{d-2}|)."""
    if d == 2:
        n_t = max(1, n // 2) if n_theta is None else int(n_theta)
        dirs = np.array([[1.0], [-1.0]])
    elif d == 3:
        n_t = max(1, round(np.sqrt(n / 2.0))) if n_theta is None else int(n_theta)
        n_phi = max(1, round(n / n_t))
        phi = 2.0 * np.pi * np.arange(n_phi) / n_phi
        dirs = np.stack([np.cos(phi), np.sin(phi)], axis=1)
    else:
        m = 2 * (d - 1)
        n_t = max(1, n // m) if n_theta is None else int(n_theta)
        from .sphere import random_rotation

        # one cross-polytope {+-e_i} per ring, each turned by its own Haar rotation: a
        # 3-design on every ring, and no meridian shared by two rings
        cross = np.concatenate([np.eye(d - 1), -np.eye(d - 1)])
        dirs = np.stack([cross @ random_rotation(d - 1, seed=(seed, j)).T for j in range(n_t)])
        log_w = np.full(m, log_sphere_area(d - 1) - np.log(m))
        return n_t, dirs, log_w
    if n_t < 1:
        raise ValueError(f"n_theta must be a positive integer; got {n_theta!r}")
    log_w = np.full(dirs.shape[0], log_sphere_area(d - 1) - np.log(dirs.shape[0]))
    return n_t, np.broadcast_to(dirs, (n_t,) + dirs.shape), log_w


def _theta_rule(n_t, lo, hi, d):
    r"""Nodes w = cos(theta) and log weights of an n_t-point rule for
    :math:`\int_{\cos hi}^{\cos lo} g(w) (1 - w^2)^{(d-3)/2} dw`: Gauss–Jacobi, the factor
    (1 -+ w)^a in the Jacobi weight at an end that is a pole, in the node weights otherwise."""
    a = 0.5 * (d - 3)
    # An end within half the interval's width of a pole is moved to it: the factor (1 - w)^a
    # of even d is not smooth there, and a rule that stops just short of it converges slowly.
    if lo <= 0.5 * (hi - lo):
        lo = 0.0
    if np.pi - hi <= 0.5 * (hi - lo):
        hi = np.pi
    at_north, at_south = lo == 0.0, hi == np.pi
    w_lo, w_hi = np.cos(hi), np.cos(lo)
    if at_north:
        w_hi = 1.0
    if at_south:
        w_lo = -1.0
    x, W = special.roots_jacobi(n_t, a if at_north else 0.0, a if at_south else 0.0)
    half = 0.5 * (w_hi - w_lo)
    w = w_lo + half * (x + 1.0)
    log_wt = np.log(W) + np.log(half)
    log_wt += a * np.log(half) if at_north else a * np.log1p(-w)
    log_wt += a * np.log(half) if at_south else a * np.log1p(w)
    return w, log_wt


def log_bessel_i(nu: float, x: float, scaled: bool = False) -> float:
    r"""log I_nu(x) for nu >= 0, x > 0, without underflow (``scaled``: log(I_nu(x) e^{-x}),
    which keeps full relative accuracy at large x).

    scipy's exponentially scaled :func:`scipy.special.ive` underflows to 0 at large order and
    small argument (ive(255, 1) = 0): there the power series
    :math:`I_\nu(x) = \sum_k (x/2)^{2k+\nu} / (k!\,\Gamma(k+\nu+1))` is summed in log form;
    its terms fall by at least the factor x^2 / (4 (nu + 1)) < 1 per step in that regime.
    """
    nu, x = float(nu), float(x)
    if not (nu >= 0 and x > 0 and np.isfinite(x)):
        raise ValueError(f"log_bessel_i needs nu >= 0 and 0 < x < inf; got nu={nu}, x={x}")
    v = special.ive(nu, x)
    if np.isfinite(v) and v > 1e-250:
        return float(np.log(v)) if scaled else float(np.log(v) + x)
    k = np.arange(0, int(64 + 4 * x))
    terms = (2 * k + nu) * np.log(0.5 * x) - special.gammaln(k + 1) - special.gammaln(k + nu + 1)
    out = float(special.logsumexp(terms))
    return out - x if scaled else out


class ThetaMarginal:
    r"""The law of :math:`\theta = \angle(x, e) \in [0, \pi]` under a zonal measure on S^{d-1}.

    A measure invariant under the rotations fixing e has a density :math:`\rho(\theta)`;
    in the coordinates :math:`x = \cos\theta\, e + \sin\theta\, u`, :math:`u \in S^{d-2}`, the
    surface measure is :math:`\sin^{d-2}\theta\, d\theta\, d\sigma_{d-2}(u)`, so theta has the
    density :math:`f(\theta) = |S^{d-2}| \sin^{d-2}\theta\, \rho(\theta)` against dtheta.

    Parameters
    ----------
    log_pdf : callable
        theta (...) -> log f(theta) (...), ``-inf`` where f vanishes.
    d : int
    axis : (d,) unit vector e
    source : str, optional
        What it is the marginal of (for messages).
    """

    #: sub-intervals of the support, and Gauss–Legendre nodes on each, of the mass integrals
    N_SUB, N_GAUSS = 2048, 16

    def __init__(self, log_pdf, d: int, axis, source: str = ""):
        self._log_pdf = log_pdf
        self.d = int(d)
        self.axis = np.asarray(axis, dtype=np.float64)
        self.source = source
        self._support = None

    def log_pdf(self, theta) -> np.ndarray:
        return np.asarray(self._log_pdf(np.asarray(theta, dtype=np.float64)), dtype=np.float64)

    def pdf(self, theta) -> np.ndarray:
        """f(theta), the density against dtheta."""
        return np.exp(self.log_pdf(theta))

    def support(self, tail: float = ZONAL_TAIL_LOG):
        """(lo, hi): the theta-interval outside which f < e^{-tail} max f, found on a grid of
        8192 cells and widened by one cell each side."""
        if self._support is not None and tail == ZONAL_TAIL_LOG:
            return self._support
        grid = np.linspace(0.0, np.pi, 8193)
        lp = self.log_pdf(grid)
        top = np.max(lp[np.isfinite(lp)]) if np.any(np.isfinite(lp)) else None
        if top is None:
            raise ValueError(f"the theta-density of {self.source} is 0 everywhere")
        keep = np.flatnonzero(lp > top - tail)
        out = (float(grid[max(keep[0] - 1, 0)]), float(grid[min(keep[-1] + 1, grid.size - 1)]))
        if tail == ZONAL_TAIL_LOG:
            self._support = out
        return out

    def cdf(self, theta) -> np.ndarray:
        r"""F(theta) = P(angle <= theta), by composite Gauss–Legendre (16 nodes on each of
        2048 pieces of the support, plus the given points as breakpoints): exact to round-off
        for the smooth densities of this module."""
        theta = np.asarray(theta, dtype=np.float64)
        if np.any(~np.isfinite(theta)):
            raise ValueError("theta contains NaN or inf")
        t = np.clip(theta, 0.0, np.pi)
        lo, hi = self.support()
        bps = np.unique(np.concatenate([[0.0, np.pi], np.linspace(lo, hi, self.N_SUB + 1),
                                        t.ravel()]))
        xg, wg = np.polynomial.legendre.leggauss(self.N_GAUSS)
        a, b = bps[:-1], bps[1:]
        nodes = 0.5 * (a + b)[:, None] + 0.5 * (b - a)[:, None] * xg
        lp = self.log_pdf(nodes)
        top = np.max(lp[np.isfinite(lp)])
        part = 0.5 * (b - a) * (np.exp(lp - top) @ wg)
        cum = np.concatenate([[0.0], np.cumsum(part)])
        self.total_mass = float(cum[-1] * np.exp(top))
        return (cum[np.searchsorted(bps, t)] / cum[-1]).reshape(theta.shape)

    def cell_masses(self, edges) -> np.ndarray:
        """The mass of each theta-cell [edges[k], edges[k+1]], edges (n+1,) increasing in
        [0, pi] -> (n,)."""
        edges = _check_edges(edges)
        return np.diff(self.cdf(edges))

    def __repr__(self) -> str:
        return f"ThetaMarginal(of {self.source}, d={self.d})"


def _check_edges(edges) -> np.ndarray:
    e = np.asarray(edges, dtype=np.float64)
    if e.ndim != 1 or e.size < 2:
        raise ValueError(f"theta edges must be a 1-D array of n+1 >= 2 values; got shape {e.shape}")
    if not np.all(np.isfinite(e)):
        raise ValueError("theta edges contain NaN or inf")
    if np.any(np.diff(e) <= 0):
        raise ValueError("theta edges must be strictly increasing")
    if e[0] < 0 or e[-1] > np.pi * (1 + 1e-15):
        raise ValueError(f"theta edges must lie in [0, pi]; got [{e[0]}, {e[-1]}]")
    return np.minimum(e, np.pi)


class Uniform(Measure):
    r"""The uniform probability measure on S^{d-1}, density :math:`1/|S^{d-1}|`."""

    def __init__(self, d: int = 3):
        self.d = _check_dim(d)

    def density(self, x) -> np.ndarray:
        x = as_points(x, self.d)
        return np.full(x.shape[:-1], np.exp(-log_sphere_area(self.d)))

    def sample(self, n: int, seed=None) -> np.ndarray:
        rng = np.random.default_rng(seed)
        return normalize(rng.standard_normal((_check_n(n), self.d)))

    def log_density(self, x) -> np.ndarray:
        x = as_points(x, self.d)
        return np.full(x.shape[:-1], -log_sphere_area(self.d))

    def default_axis(self):
        """e1: the uniform measure is zonal about every axis; rules and marginals use e1."""
        e = np.zeros(self.d)
        e[0] = 1.0
        return e

    def zonal_obstruction(self, axis):
        return None

    def hemisphere_mass(self, e) -> float:
        _unit(e, self.d, "e")
        return 0.5

    def __repr__(self) -> str:
        return f"Uniform(d={self.d})"


class VonMisesFisher(Measure):
    r"""Von Mises–Fisher measure, density :math:`C_d(\kappa) e^{\kappa\langle\mu, x\rangle}`.

    .. math:: C_d(\kappa) = \frac{\kappa^{d/2-1}}{(2\pi)^{d/2} I_{d/2-1}(\kappa)}

    evaluated in log form (:func:`log_bessel_i`), so kappa up to 1e4 and beyond, and any
    dimension d (where I_{d/2-1} underflows at small kappa), neither overflow nor underflow
    at the mode. A vMF is zonal about +-mean: :meth:`theta_marginal` and :meth:`quadrature`
    use its mean as their axis.

    Parameters
    ----------
    mean : array_like, shape (d,)
        Mean direction (normalized).
    kappa : float >= 0
        Concentration; kappa = 0 is the uniform measure.
    """

    def __init__(self, mean, kappa: float):
        mean = np.asarray(mean, dtype=np.float64)
        if mean.ndim != 1:
            raise ValueError(f"mean must be a vector of shape (d,); got shape {mean.shape}")
        self.d = _check_dim(mean.shape[0])
        self.mean = _unit(mean, self.d, "mean")
        kappa = float(kappa)
        if not np.isfinite(kappa) or kappa < 0:
            raise ValueError(f"kappa must be finite and >= 0; got {kappa}")
        self.kappa = kappa
        nu = 0.5 * self.d - 1.0
        if kappa == 0:
            self._log_c = -log_sphere_area(self.d)
        else:
            # log C_d(kappa) + kappa: the density is exp(_log_c + kappa (<mu,x> - 1)).
            self._log_c = (nu * np.log(kappa) - 0.5 * self.d * np.log(2 * np.pi)
                           - log_bessel_i(nu, kappa, scaled=True))

    def density(self, x) -> np.ndarray:
        return np.exp(self.log_density(x))

    def log_density(self, x) -> np.ndarray:
        x = as_points(x, self.d)
        return self._log_c + self.kappa * (x @ self.mean - 1.0)

    def default_axis(self):
        return self.mean.copy()

    def zonal_obstruction(self, axis):
        c = float(np.clip(self.mean @ axis, -1.0, 1.0))
        if self.kappa == 0 or 1.0 - abs(c) <= ZONAL_ATOL:
            return None
        ang = float(np.arccos(c))
        return (f"its mean direction lies {ang:.6g} rad ({np.degrees(ang):.4g} deg) from the "
                "axis, and the rotations fixing the axis move it (a cap about a point off the "
                "axis); put the mean on +-axis, or pass axis=mean")

    def sample(self, n: int, seed=None) -> np.ndarray:
        n = _check_n(n)
        rng = np.random.default_rng(seed)
        if self.kappa == 0:
            return normalize(rng.standard_normal((n, self.d)))
        w = self._sample_cosine(n, rng)
        # Uniform direction orthogonal to the mean.
        v = rng.standard_normal((n, self.d))
        v -= (v @ self.mean)[:, None] * self.mean
        v = normalize(v)
        return normalize(w[:, None] * self.mean + np.sqrt(np.clip(1 - w**2, 0, None))[:, None] * v)

    def lattice(self, n: int) -> PointCloud:
        r"""n equally weighted points on S^2: the Fibonacci lattice about the mean direction
        with its heights u -> w mapped through the inverse distribution function of
        w = <mu, x>, :math:`w = 1 + \log(u + (1-u)e^{-2\kappa})/\kappa`. That map carries
        the uniform measure to this one, so the lattice keeps its low discrepancy and is
        dense where the mass is. Other dimensions: :meth:`Measure.lattice`.

        Examples
        --------
        >>> cloud = VonMisesFisher([0, 0, 1], 4.0).lattice(2000)
        >>> bool(abs(cloud.points[:, 2].mean() - (1 / np.tanh(4.0) - 1 / 4.0)) < 1e-5)
        True
        """
        if self.d != 3 or self.kappa == 0:
            return super().lattice(n)
        n = _check_n(n)
        k = self.kappa

        def heights(u):
            # the heights in decreasing order, as fibonacci_lattice's default z = 1 - 2u
            return 1.0 + np.log((1.0 - u) + u * np.exp(-2.0 * k)) / k

        return PointCloud(fibonacci_lattice(n, axis=self.mean, cosines=heights))

    def _sample_cosine(self, n, rng) -> np.ndarray:
        """Samples of w = <mu, x>; exact inversion on S^2, Wood's (1994) rejection otherwise."""
        k, d = self.kappa, self.d
        if d == 3:
            u = rng.random(n)
            # w = 1 + log(u + (1-u) e^{-2k}) / k, written to stay accurate for large k.
            return 1.0 + np.log(u + (1.0 - u) * np.exp(-2.0 * k)) / k
        b = (d - 1) / (2 * k + np.sqrt(4 * k**2 + (d - 1) ** 2))
        x0 = (1 - b) / (1 + b)
        c = k * x0 + (d - 1) * np.log(1 - x0**2)
        out = np.empty(0)
        while out.size < n:
            m = 2 * (n - out.size) + 16
            z = rng.beta(0.5 * (d - 1), 0.5 * (d - 1), m)
            w = (1 - (1 + b) * z) / (1 - (1 - b) * z)
            u = rng.random(m)
            ok = k * w + (d - 1) * np.log(1 - x0 * w) - c >= np.log(u)
            out = np.concatenate([out, w[ok]])
        return out[:n]

    def hemisphere_mass(self, e) -> float:
        r"""Mass of :math:`\{\langle x, e\rangle > 0\}`, by a 1-D integral over w = <mu, x>.

        Given w, x = w mu + sqrt(1-w^2) u with u uniform on the unit sphere of mu^perp, and
        <x, e> > 0 iff <u, e'> > -w c / (sqrt(1-w^2) sqrt(1-c^2)), c = <mu, e>; the
        conditional probability is a Beta tail. Exact up to the 1-D quadrature (1e-12).
        """
        e = _unit(e, self.d, "e")
        c = float(np.clip(self.mean @ e, -1.0, 1.0))
        if self.kappa == 0:
            return 0.5
        if 1 - abs(c) < 1e-14:
            # e parallel to mu: mass of the cap {sign(c) w > 0}.
            upper = _vmf_cosine_cdf_upper(0.0, self.kappa, self.d)
            return upper if c > 0 else 1.0 - upper
        d, k = self.d, self.kappa
        if d == 2:
            # On S^1 the half-circle {<x, e> > 0} is the arc of angles psi +- pi/2 from the mean,
            # psi the angle of e: integrate e^{k (cos phi - 1)} over it.
            psi = np.arccos(c)

            def f(phi):
                return np.exp(k * (np.cos(phi) - 1.0))

            num = integrate.quad(f, psi - np.pi / 2, psi + np.pi / 2, epsabs=0, epsrel=1e-13)[0]
            return num / (2 * np.pi * special.ive(0, k))
        s_c = np.sqrt(1 - c**2)

        def cond(w):
            # P(<u, e_perp> > thr), with <u, e_perp> ~ 2 Beta((d-2)/2,(d-2)/2) - 1 on S^{d-2}.
            thr = -w * c / (np.sqrt(max(1 - w**2, 1e-300)) * s_c)
            thr = min(max(thr, -1.0), 1.0)
            a = 0.5 * (d - 2)
            # the Beta(a, a) tail at (thr + 1)/2 is I_{(1 - thr)/2}(a, a) (symmetry): the ufunc
            # is 13x cheaper per call than stats.beta.sf, which quad calls ~10^3 times
            return special.betainc(a, a, 0.5 * (1.0 - thr))

        def log_dens(w):
            # log of the density of w, normalized below by the same integral
            return k * (w - 1.0) + 0.5 * (d - 3) * np.log(max(1 - w**2, 1e-300))

        scale = min(1.0, 20.0 / k)
        pts = sorted({max(-1.0, 1 - scale), 1 - 0.1 * scale, -1.0 + 1e-12, 1.0 - 1e-12})
        num = integrate.quad(lambda w: cond(w) * np.exp(log_dens(w)), -1, 1, points=pts[1:-1],
                             limit=400, epsabs=0, epsrel=1e-13)[0]
        den = integrate.quad(lambda w: np.exp(log_dens(w)), -1, 1, points=pts[1:-1],
                             limit=400, epsabs=0, epsrel=1e-13)[0]
        return num / den

    def __repr__(self) -> str:
        return f"VonMisesFisher(mean={self.mean.tolist()}, kappa={self.kappa})"


def _vmf_cosine_cdf_upper(w0, k, d) -> float:
    """P(<mu, x> > w0) under vMF(mu, k) in R^d."""

    def f(w):
        return np.exp(k * (w - 1.0) + 0.5 * (d - 3) * np.log(max(1 - w**2, 1e-300)))

    num = integrate.quad(f, w0, 1, limit=400, epsrel=1e-13, epsabs=0)[0]
    den = num + integrate.quad(f, -1, w0, limit=400, epsrel=1e-13, epsabs=0)[0]
    return num / den


class Mixture(Measure):
    """A finite mixture sum_k p_k mu_k of measures on the same sphere.

    Parameters
    ----------
    components : sequence of Measure
    weights : array_like, shape (K,), optional
        Mixture weights, >= 0, summing to 1 (default: equal).
    """

    def __init__(self, components: Sequence[Measure], weights=None):
        components = list(components)
        if not components:
            raise ValueError("a mixture needs at least one component")
        for c in components:
            if not isinstance(c, Measure):
                raise TypeError(f"mixture components must be spherepde measures (Uniform, "
                                f"VonMisesFisher, ...); got {type(c).__name__}")
        dims = {c.d for c in components}
        if len(dims) != 1:
            raise ValueError(f"all mixture components must live on the same sphere; "
                             f"got d = {sorted(dims)}")
        self.d = dims.pop()
        self.components = components
        k = len(components)
        w = np.full(k, 1.0 / k) if weights is None else np.asarray(weights, dtype=np.float64)
        if w.shape != (k,):
            raise ValueError(f"mixture weights must have shape ({k},); got {w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("mixture weights must be finite and >= 0")
        if abs(w.sum() - 1) > WEIGHT_SUM_ATOL:
            raise ValueError(f"mixture weights must sum to 1 (they sum to {w.sum():.12g})")
        self.weights = w

    def density(self, x) -> np.ndarray:
        return sum(p * c.density(x) for p, c in zip(self.weights, self.components, strict=True))

    def log_density(self, x) -> np.ndarray:
        live = [(p, c) for p, c in zip(self.weights, self.components, strict=True) if p > 0]
        logs = np.stack([np.log(p) + c.log_density(x) for p, c in live])
        return special.logsumexp(logs, axis=0)

    def default_axis(self):
        """The axis of the first component that has one, when every component is zonal about
        it (two caps about +-e: e); otherwise None."""
        for c in self.components:
            e = c.default_axis()
            if e is not None:
                return e if self.is_zonal(e) else None
        return None

    def zonal_obstruction(self, axis):
        for k, (p, c) in enumerate(zip(self.weights, self.components, strict=True)):
            why = c.zonal_obstruction(axis) if p > 0 else None
            if why is not None:
                return f"component {k} ({c!r}, weight {p:.4g}): {why}"
        return None

    def quadrature(self, n: int, axis=None, *, n_theta: int | None = None, seed=0) -> PointCloud:
        """Without ``axis``: each component's own rule (:meth:`Measure.quadrature`, about its
        own axis) with n_k ~ p_k n nodes, weighted p_k: two caps about +-e each get a rule
        about +-e. With ``axis``: the product rule of the mixture density about it."""
        if axis is not None:
            return super().quadrature(n, axis, n_theta=n_theta, seed=seed)
        n = _check_n(n)
        live = np.flatnonzero(self.weights > 0)
        clouds = [self.components[k].quadrature(max(1, round(self.weights[k] * n)),
                                                n_theta=n_theta, seed=seed) for k in live]
        pts = np.concatenate([c.points for c in clouds])
        w = np.concatenate([self.weights[k] * c.weights for k, c in zip(live, clouds, strict=True)])
        return PointCloud(pts, w / w.sum())

    def sample(self, n: int, seed=None) -> np.ndarray:
        n = _check_n(n)
        rng = np.random.default_rng(seed)
        counts = rng.multinomial(n, self.weights)
        parts = [c.sample(m, rng) for c, m in zip(self.components, counts, strict=True) if m > 0]
        out = np.concatenate(parts, axis=0)
        return out[rng.permutation(n)]

    def hemisphere_mass(self, e) -> float:
        return float(sum(p * c.hemisphere_mass(e)
                         for p, c in zip(self.weights, self.components, strict=True)))

    def lattice(self, n: int) -> PointCloud:
        """Each component's lattice with n_k ~ p_k n points (largest remainders, so the n_k
        sum to n), its points weighted p_k / n_k: the mixture of the components' rules."""
        n = _check_n(n)
        live = np.flatnonzero(self.weights > 0)
        if n < live.size:
            raise ValueError(f"a lattice of this mixture needs n >= {live.size} points (one per "
                             f"component of positive weight); got {n}")
        p = self.weights[live]
        counts = np.maximum(np.floor(p * n).astype(int), 1)
        while counts.sum() > n:  # the max(., 1) overshot: take back from the largest
            counts[np.argmax(counts)] -= 1
        rest = p * n - counts
        for i in np.argsort(-rest)[: n - counts.sum()]:
            counts[i] += 1
        clouds = [self.components[k].lattice(int(m)) for k, m in zip(live, counts, strict=True)]
        pts = np.concatenate([c.points for c in clouds])
        w = np.concatenate([q * c.weights for q, c in zip(p, clouds, strict=True)])
        return PointCloud(pts, w / w.sum())

    def __repr__(self) -> str:
        return f"Mixture({len(self.components)} components, d={self.d})"


class ACG(Measure):
    r"""Angular central Gaussian: the law of z/|z| for z ~ N(0, Sigma).

    Density :math:`|S^{d-1}|^{-1} \det(\Sigma)^{-1/2} (x^\top\Sigma^{-1}x)^{-d/2}`.
    """

    def __init__(self, Sigma):
        S = np.asarray(Sigma, dtype=np.float64)
        if S.ndim != 2 or S.shape[0] != S.shape[1]:
            raise ValueError(f"Sigma must be a square (d, d) matrix; got shape {S.shape}")
        if not np.all(np.isfinite(S)):
            raise ValueError("Sigma contains NaN or inf")
        if not np.allclose(S, S.T, rtol=1e-10, atol=1e-12 * np.abs(S).max()):
            raise ValueError("Sigma must be symmetric")
        self.d = _check_dim(S.shape[0])
        try:
            self._chol = np.linalg.cholesky(S)
        except np.linalg.LinAlgError:
            raise ValueError("Sigma must be positive definite") from None
        self.Sigma = S
        self._inv = np.linalg.inv(S)
        self._log_c = -log_sphere_area(self.d) - np.sum(np.log(np.diag(self._chol)))

    def density(self, x) -> np.ndarray:
        return np.exp(self.log_density(x))

    def log_density(self, x) -> np.ndarray:
        x = as_points(x, self.d)
        q = np.einsum("...i,ij,...j->...", x, self._inv, x)
        return self._log_c - 0.5 * self.d * np.log(q)

    def zonal_obstruction(self, axis):
        # zonal iff Sigma = s1 e e^T + s2 (I - e e^T): Sigma e = s1 e and Sigma acts as s2 on e^perp
        S = self.Sigma
        s1 = float(axis @ S @ axis)
        P = np.eye(self.d) - np.outer(axis, axis)
        s2 = float(np.trace(P @ S @ P)) / max(self.d - 1, 1)
        off = np.abs(S - (s1 * np.outer(axis, axis) + s2 * P)).max()
        if off <= ZONAL_ATOL * np.abs(S).max():
            return None
        return (f"Sigma is not of the form s1 e e^T + s2 (I - e e^T) about the axis (off by "
                f"{off:.3g}): the axis is not an eigenvector of Sigma, or Sigma is not isotropic "
                "on the axis's orthogonal complement")

    def sample(self, n: int, seed=None) -> np.ndarray:
        rng = np.random.default_rng(seed)
        return normalize(rng.standard_normal((_check_n(n), self.d)) @ self._chol.T)

    def __repr__(self) -> str:
        return f"ACG(d={self.d})"


class CallableDensity(Measure):
    """A density on S^2 given as a Python callable f(x), x: (..., 3) -> (...).

    The callable must be non-negative and integrate to 1 against surface area; this is checked
    on a Gauss grid at construction (``check=True``). Sampling is by rejection against the
    maximum found on that grid times a safety factor.
    """

    def __init__(self, f: Callable, d: int = 3, *, check: bool = True, nlat: int = 128,
                 rtol: float = 1e-6):
        if not callable(f):
            raise TypeError("CallableDensity needs a callable f(x) -> density values")
        if d != 3:
            raise ValueError("callable densities are supported on S^2 (d = 3) only")
        self.d = 3
        self._f = f
        from .sphere import GaussGrid

        grid = GaussGrid(nlat, 2 * nlat)
        vals = np.asarray(f(grid.points), dtype=np.float64)
        if vals.shape != grid.points.shape[:-1]:
            raise ValueError(f"the density callable must map points (..., 3) to values (...); "
                             f"got output shape {vals.shape} for input {grid.points.shape}")
        if not np.all(np.isfinite(vals)):
            raise ValueError("the density callable returned NaN or inf on the sphere")
        if np.any(vals < 0):
            raise ValueError(f"the density must be >= 0; its minimum on a grid is {vals.min():.3e}")
        self.mass = float(grid.integrate(vals))
        if check and abs(self.mass - 1) > rtol:
            raise ValueError(
                f"the density integrates to {self.mass:.10g}, not 1 (off by {self.mass - 1:.2e}) "
                "against surface area; divide it by its integral, or pass check=False")
        self._max = float(vals.max())

    def density(self, x) -> np.ndarray:
        x = as_points(x, 3)
        return np.asarray(self._f(x), dtype=np.float64)

    def sample(self, n: int, seed=None) -> np.ndarray:
        n = _check_n(n)
        rng = np.random.default_rng(seed)
        bound = 1.25 * self._max
        out = []
        have = 0
        while have < n:
            m = max(64, int(2 * (n - have) * bound * 4 * np.pi))
            x = normalize(rng.standard_normal((m, 3)))
            f = self.density(x)
            if np.any(f > bound):
                raise RuntimeError("the density exceeds the rejection bound found on the grid; "
                                   "pass a larger nlat")
            keep = x[rng.random(m) * bound < f]
            out.append(keep)
            have += keep.shape[0]
        return np.concatenate(out)[:n]


def as_measure(obj, d: int = 3) -> Measure:
    """A Measure from a Measure or a callable density on S^2."""
    if isinstance(obj, Measure):
        return obj
    if callable(obj):
        return CallableDensity(obj, d)
    raise TypeError(f"expected a spherepde measure or a callable density; got {type(obj).__name__}")
