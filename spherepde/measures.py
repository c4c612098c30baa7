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
]

#: Tolerance on |sum(weights) - 1| for a probability measure.
WEIGHT_SUM_ATOL = 1e-9


class PointCloud:
    """A probability measure sum_i w_i delta_{x_i} on S^{d-1}.

    Parameters
    ----------
    points : array_like, shape (n, d)
        Points on the unit sphere.
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

    def hemisphere_mass(self, e) -> float:
        _unit(e, self.d, "e")
        return 0.5

    def __repr__(self) -> str:
        return f"Uniform(d={self.d})"


class VonMisesFisher(Measure):
    r"""Von Mises–Fisher measure, density :math:`C_d(\kappa) e^{\kappa\langle\mu, x\rangle}`.

    .. math:: C_d(\kappa) = \frac{\kappa^{d/2-1}}{(2\pi)^{d/2} I_{d/2-1}(\kappa)}

    evaluated with exponentially scaled Bessel functions, so kappa up to 1e4 and beyond
    neither overflows nor underflows at the mode.

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
                           - np.log(special.ive(nu, kappa)))

    def density(self, x) -> np.ndarray:
        x = as_points(x, self.d)
        return np.exp(self._log_c + self.kappa * (x @ self.mean - 1.0))

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
        # the heights in decreasing order, as fibonacci_lattice's default z = 1 - 2u
        heights = lambda u: 1.0 + np.log((1.0 - u) + u * np.exp(-2.0 * k)) / k
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
            f = lambda phi: np.exp(k * (np.cos(phi) - 1.0))
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
    f = lambda w: np.exp(k * (w - 1.0) + 0.5 * (d - 3) * np.log(max(1 - w**2, 1e-300)))
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
            raise ValueError(f"all mixture components must live on the same sphere; got d = {sorted(dims)}")
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
        return sum(p * c.density(x) for p, c in zip(self.weights, self.components))

    def sample(self, n: int, seed=None) -> np.ndarray:
        n = _check_n(n)
        rng = np.random.default_rng(seed)
        counts = rng.multinomial(n, self.weights)
        parts = [c.sample(m, rng) for c, m in zip(self.components, counts) if m > 0]
        out = np.concatenate(parts, axis=0)
        return out[rng.permutation(n)]

    def hemisphere_mass(self, e) -> float:
        return float(sum(p * c.hemisphere_mass(e) for p, c in zip(self.weights, self.components)))

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
        clouds = [self.components[k].lattice(int(m)) for k, m in zip(live, counts)]
        pts = np.concatenate([c.points for c in clouds])
        w = np.concatenate([q * c.weights for q, c in zip(p, clouds)])
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
        x = as_points(x, self.d)
        q = np.einsum("...i,ij,...j->...", x, self._inv, x)
        return np.exp(self._log_c - 0.5 * self.d * np.log(q))

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
