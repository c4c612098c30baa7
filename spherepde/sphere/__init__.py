"""Geometry of the unit sphere S^{d-1} in R^d.

Tangent projection, the retraction used by every integrator, input validation for points,
rotations, the Gauss–Legendre grid on S^2 and the equispaced grid on S^1 (each built by one
class here).

Conventions: points are arrays of shape ``(..., d)`` with unit Euclidean norm.
Colatitude ``theta`` runs from 0 (north pole, +z) to pi, longitude ``phi`` from 0 to 2 pi.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from scipy.special import gammaln

__all__ = [
    "as_points",
    "normalize",
    "tangent_projection",
    "retract",
    "random_rotation",
    "rotation_about_axis",
    "rotation_to_pole",
    "rotation_axis_frame",
    "check_rotation",
    "euler_zyz",
    "is_z_rotation",
    "orthogonal_factor",
    "GaussGrid",
    "integrate_s2",
    "CircleGrid",
    "hemisphere_quadrature",
    "fibonacci_lattice",
    "log_sphere_area",
]

#: Largest deviation of |x| from 1 of points used as given.
UNIT_NORM_ATOL = 1e-8
#: Largest deviation of |x| from 1 accepted at all: float32 rounding of unit vectors (float32's
#: machine epsilon 1.2e-7, times a few for the d coordinates and the norm; measured up to
#: 1e-7 at d = 512). Points between the two tolerances are normalised in float64, so that float32
#: data need no ``normalize=True``; points further off are refused.
FLOAT32_UNIT_NORM_ATOL = 1e-6


def as_points(x, d: int | None = None, *, name: str = "x", normalize: bool = False,
              atol: float = FLOAT32_UNIT_NORM_ATOL) -> np.ndarray:
    """Validate an array of points on the sphere and return it as float64.

    Points with ``| |x| - 1 | <= UNIT_NORM_ATOL`` (1e-8) are returned as given; points
    within ``atol`` (default :data:`FLOAT32_UNIT_NORM_ATOL`, 1e-6: the rounding of unit vectors
    stored in float32) are normalised in float64, :math:`x/|x|`; points further off are refused
    (or projected, with ``normalize=True``).

    Parameters
    ----------
    x : array_like, shape (..., d)
    d : int, optional
        Expected ambient dimension.
    name : str
        Name used in error messages.
    normalize : bool
        Project the points to the sphere instead of rejecting points off it.
    atol : float
        Tolerance on | |x| - 1 | of the points accepted without ``normalize``.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 0:
        raise ValueError(f"{name} must have shape (..., d); got a scalar")
    if d is not None and x.shape[-1] != d:
        raise ValueError(f"{name} must have last dimension d = {d}; got shape {x.shape}")
    if x.shape[-1] < 2:
        raise ValueError(f"{name} must have last dimension d >= 2; got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        bad = int(np.count_nonzero(~np.isfinite(x).all(axis=-1)))
        raise ValueError(f"{name} contains NaN or inf in {bad} point(s); remove or repair them")
    norms = np.linalg.norm(x, axis=-1)
    if normalize:
        if np.any(norms == 0):
            raise ValueError(f"{name} contains the zero vector, which has no direction")
        return x / norms[..., None]
    dev = float(np.max(np.abs(norms - 1.0))) if norms.size else 0.0
    if dev > atol:
        raise ValueError(
            f"{name} must lie on the unit sphere (max | |x|-1 | = {dev:.1e} > {atol:.0e}); "
            "pass normalize=True to project them"
        )
    if dev > UNIT_NORM_ATOL:  # float32 rounding: the solvers want unit vectors to float64
        return x / norms[..., None]
    return x


def normalize(x: np.ndarray) -> np.ndarray:
    """Radial projection x / |x| onto the sphere, x: (..., d)."""
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def tangent_projection(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    r"""Project v onto the tangent space at x: :math:`P_x v = v - \langle x, v\rangle x`.

    x, v: (..., d); x is assumed to have unit norm.
    """
    return v - np.sum(x * v, axis=-1, keepdims=True) * x


def retract(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Projective retraction R_x(v) = (x + v)/|x + v|; x, v: (..., d).

    It agrees with the exponential map to second order, which is all a Runge–Kutta
    method with a final projection needs to keep its order (Hairer–Lubich–Wanner,
    Geometric Numerical Integration, Thm. IV.4.1).
    """
    return normalize(x + v)


def random_rotation(d: int, seed=None) -> np.ndarray:
    """A Haar-random rotation in SO(d) (QR of a Gaussian matrix with sign fix)."""
    rng = np.random.default_rng(seed)
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    q = q * np.sign(np.diag(r))
    if np.linalg.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


def rotation_about_axis(axis, angle: float) -> np.ndarray:
    r"""The rotation (3, 3) by ``angle`` (radians, counter-clockwise seen from the tip of
    ``axis``) about ``axis`` (3,), any non-zero length: Rodrigues' formula
    :math:`R = I + \sin\theta\, K + (1 - \cos\theta) K^2` with K the cross-product matrix
    of the unit axis."""
    k = np.asarray(axis, dtype=np.float64)
    if k.shape != (3,) or not np.all(np.isfinite(k)) or not np.any(k):
        raise ValueError(f"axis must be a finite non-zero vector of shape (3,); got {axis!r}")
    k = k / np.abs(k).max()  # first by the largest entry: no overflow for entries near 1e308
    k = k / np.linalg.norm(k)
    K = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + math.sin(angle) * K + (1.0 - math.cos(angle)) * (K @ K)


class GaussGrid:
    r"""Gauss–Legendre grid on S^2: ``nlat`` Gauss nodes in :math:`\cos\theta`, ``nlon``
    equispaced longitudes.

    Exact for spherical harmonics of degree up to ``min(2*nlat - 1, nlon - 1)`` and so for
    products of two band-limited fields when ``nlat >= lmax + 1`` and ``nlon >= 2*lmax + 1``.

    Attributes
    ----------
    cost : (nlat,) cos(theta), descending (north to south)
    theta : (nlat,) colatitudes, ascending
    phi : (nlon,) longitudes 2 pi k / nlon
    points : (nlat, nlon, 3) unit vectors
    weights : (nlat, nlon) quadrature weights, summing to 4 pi
    """

    def __init__(self, nlat: int, nlon: int):
        if nlat < 1 or nlon < 1:
            raise ValueError(f"a Gauss grid needs nlat, nlon >= 1; got {nlat}, {nlon}")
        x, w = np.polynomial.legendre.leggauss(int(nlat))
        order = np.argsort(-x)
        self.nlat, self.nlon = int(nlat), int(nlon)
        self.cost = x[order]
        self.theta = np.arccos(self.cost)
        self.phi = 2.0 * np.pi * np.arange(self.nlon) / self.nlon
        sint = np.sqrt(1.0 - self.cost**2)
        self.points = np.stack(
            [
                sint[:, None] * np.cos(self.phi)[None, :],
                sint[:, None] * np.sin(self.phi)[None, :],
                np.broadcast_to(self.cost[:, None], (self.nlat, self.nlon)),
            ],
            axis=-1,
        )
        self.weights = np.broadcast_to((w[order] * (2.0 * np.pi / self.nlon))[:, None],
                                       (self.nlat, self.nlon)).copy()

    def integrate(self, values: np.ndarray) -> np.ndarray:
        """Integral over S^2 of grid values of shape (..., nlat, nlon)."""
        return np.sum(values * self.weights, axis=(-2, -1))

    @functools.cached_property
    def frame(self):
        r"""The local frame :math:`(e_r, e_\theta, e_\phi)` at the nodes, each (nlat, nlon, 3):
        e_theta points south, e_phi east (the components of the SHT's vector fields)."""
        ct = self.cost[:, None]
        st = np.sqrt(1.0 - ct**2)
        cp, sp_ = np.cos(self.phi)[None, :], np.sin(self.phi)[None, :]
        zero = np.zeros((self.nlat, self.nlon))
        e_t = np.stack([ct * cp, ct * sp_, -st + zero], axis=-1)
        e_p = np.stack([-sp_ + zero, cp + zero, zero], axis=-1)
        return self.points, e_t, e_p

    def __repr__(self) -> str:
        return f"GaussGrid(nlat={self.nlat}, nlon={self.nlon})"


def integrate_s2(f, nlat: int = 256, nlon: int | None = None) -> float:
    """Integral of a callable f(x), x: (..., 3), over S^2 on a Gauss grid (nlat x nlon)."""
    grid = GaussGrid(nlat, nlon or 2 * nlat)
    return float(grid.integrate(np.asarray(f(grid.points), dtype=np.float64)))


class CircleGrid:
    r"""The equispaced grid :math:`\theta_j = 2\pi j/n` on S^1, whose trapezoid rule (weights
    2 pi/n) is exact for trigonometric polynomials of degree < n.

    Attributes
    ----------
    n : int
    theta : (n,) angles
    points : (n, 2) unit vectors (cos theta, sin theta)
    weights : (n,) quadrature weights 2 pi / n, summing to 2 pi
    e_theta : (n, 2) unit tangents (-sin theta, cos theta)
    """

    def __init__(self, n: int):
        if int(n) != n or n < 1:
            raise ValueError(f"a circle grid needs n >= 1 points; got {n!r}")
        self.n = int(n)
        self.theta = 2.0 * np.pi * np.arange(self.n) / self.n
        self.points = np.stack([np.cos(self.theta), np.sin(self.theta)], axis=-1)
        self.weights = np.full(self.n, 2.0 * np.pi / self.n)
        self.e_theta = np.stack([-np.sin(self.theta), np.cos(self.theta)], axis=-1)

    def __repr__(self) -> str:
        return f"CircleGrid(n={self.n})"


def fibonacci_lattice(n: int, axis=None, cosines=None) -> np.ndarray:
    r"""The spherical Fibonacci lattice: n points of S^2, each owning area 4 pi/n.

    Point i sits at height :math:`z_i = 1 - 2 u_i`, :math:`u_i = (i + 1/2)/n`, along ``axis``
    (default +z) and at longitude :math:`2\pi i/\varphi^2` (the golden angle). The map
    (u, phi) -> x preserves area, so the Fibonacci lattice of the unit square becomes a
    low-discrepancy set on the sphere: its equal-weight rule integrates smooth functions with
    an error that falls much faster than the n^{-1/2} of random points (Marques et al. 2013).

    Parameters
    ----------
    n : int >= 1
    axis : array_like (3,), optional
        The lattice's polar axis.
    cosines : callable, optional
        Maps the n values u_i in (0, 1) to the heights <x, axis> in [-1, 1] (default
        z = 1 - 2u). A measure whose law of <x, axis> has the inverse distribution function
        G(1 - u) puts its lattice here: equal weights, points dense where the mass is.

    Returns
    -------
    (n, 3) unit vectors.

    Examples
    --------
    >>> x = fibonacci_lattice(1000)
    >>> x.shape, bool(abs(x[:, 2].mean()) < 1e-12)
    ((1000, 3), True)
    """
    if int(n) != n or n < 1:
        raise ValueError(f"a Fibonacci lattice needs n >= 1 points; got {n!r}")
    n = int(n)
    u = (np.arange(n) + 0.5) / n
    z = 1.0 - 2.0 * u if cosines is None else np.clip(np.asarray(cosines(u), float), -1.0, 1.0)
    phi = 2.0 * np.pi * ((np.arange(n) * (2.0 - 0.5 * (1.0 + math.sqrt(5.0)))) % 1.0)
    s = np.sqrt(np.clip(1.0 - z * z, 0.0, None))
    local = np.stack([s * np.cos(phi), s * np.sin(phi), z], axis=-1)
    if axis is None:
        return local
    R = rotation_to_pole(np.asarray(axis, dtype=np.float64))  # R axis = e_3, R = R^T
    return normalize(local @ R)


def rotation_to_pole(e: np.ndarray) -> np.ndarray:
    """An orthogonal matrix R (d, d) with R e = e_d (the last basis vector)."""
    e = np.asarray(e, dtype=np.float64)
    e = e / np.linalg.norm(e)
    d = e.shape[0]
    # Householder reflection that maps e to e_d, then fix the determinant sign irrelevant
    # for integration purposes (reflections preserve the surface measure).
    target = np.zeros(d)
    target[-1] = 1.0
    u = e - target
    nu = np.linalg.norm(u)
    if nu < 1e-15:
        return np.eye(d)
    u /= nu
    return np.eye(d) - 2.0 * np.outer(u, u)


def hemisphere_quadrature(e: np.ndarray, n_t: int = 400, n_phi: int = 800):
    r"""Quadrature nodes and weights on S^2 split by the sign of :math:`\langle x, e\rangle`.

    Gauss–Legendre in :math:`t = \langle x, e\rangle` on (0, 1) and (-1, 0), trapezoid in the
    azimuth around e (spectrally accurate for smooth periodic integrands).

    Returns
    -------
    points_plus, weights_plus, points_minus, weights_minus :
        (n_t, n_phi, 3) and (n_t, n_phi) arrays; the weights of each half sum to 2 pi.
    """
    e = np.asarray(e, dtype=np.float64)
    if e.shape != (3,):
        raise ValueError(f"hemisphere quadrature is on S^2: e must have shape (3,), got {e.shape}")
    rot = rotation_to_pole(e)  # R e = e_z, so x = R^T x_local
    xg, wg = np.polynomial.legendre.leggauss(n_t)
    phi = 2.0 * np.pi * np.arange(n_phi) / n_phi
    out = []
    for sign in (+1.0, -1.0):
        t = sign * 0.5 * (xg + 1.0)
        s = np.sqrt(np.clip(1.0 - t**2, 0.0, None))
        local = np.stack([s[:, None] * np.cos(phi)[None, :], s[:, None] * np.sin(phi)[None, :],
                          np.broadcast_to(t[:, None], (n_t, n_phi))], axis=-1)
        pts = local @ rot  # rows: R^T x_local
        w = np.broadcast_to((0.5 * wg * 2.0 * np.pi / n_phi)[:, None], (n_t, n_phi)).copy()
        out.extend([pts, w])
    return tuple(out)


def log_sphere_area(d: int) -> float:
    """log |S^{d-1}|."""
    return math.log(2.0) + 0.5 * d * math.log(math.pi) - float(gammaln(0.5 * d))


#: B counts as c·O (O orthogonal) when max |O^T O - I| <= this.
ORTHOGONAL_RTOL = 1e-12


def orthogonal_factor(B: np.ndarray, rtol: float = ORTHOGONAL_RTOL):
    """Return (c, O) with B = c·O, c > 0 and O orthogonal, or None when B is not of that form.

    This is the case where the attention kernel e^{beta <x, By>} is a rotated zonal kernel:
    the Funk–Hecke fast path and the explicit zero-temperature density apply.
    """
    B = np.asarray(B, dtype=np.float64)
    d = B.shape[0]
    c2 = float(np.trace(B.T @ B)) / d
    if c2 <= 0:
        return None
    c = math.sqrt(c2)
    O = B / c
    if float(np.abs(O.T @ O - np.eye(d)).max()) > rtol:
        return None
    return c, O


def check_rotation(R) -> np.ndarray:
    """R as a float64 (3, 3) rotation (R R^T = I, det R = +1), or a ValueError saying why not."""
    R = np.asarray(R, dtype=np.float64)
    if R.shape != (3, 3):
        raise ValueError(f"a rotation of S^2 must have shape (3, 3); got {R.shape}")
    err = float(np.abs(R @ R.T - np.eye(3)).max())
    if err > 1e-10 or np.linalg.det(R) < 0:
        raise ValueError(f"R must be a rotation (R R^T = I, det R = +1); |R R^T - I| = {err:.1e}, "
                         f"det R = {np.linalg.det(R):.3f}")
    return R


def euler_zyz(R: np.ndarray):
    r"""Euler angles (a, b, c) with :math:`R = R_z(a) R_y(b) R_z(c)` for a rotation R (3, 3)."""
    R = np.asarray(R, dtype=np.float64)
    b = math.acos(max(-1.0, min(1.0, R[2, 2])))
    if abs(math.sin(b)) > 1e-12:
        a = math.atan2(R[1, 2], R[0, 2])
        c = math.atan2(R[2, 1], -R[2, 0])
    elif R[2, 2] > 0:  # b = 0: a pure z rotation by a + c
        a, c = math.atan2(R[1, 0], R[0, 0]), 0.0
    else:  # b = pi: R_z(a) diag(-1, 1, -1)
        a, c = math.atan2(-R[1, 0], -R[0, 0]), 0.0
    return a, b, c


def is_z_rotation(R, tol: float = 1e-14) -> bool:
    """Whether the rotation R (3, 3) fixes e_z (a rotation about the z-axis)."""
    return abs(R[2, 2] - 1.0) < tol and float(np.abs(R[2, :2]).max()) < tol


def rotation_axis_frame(O):
    """A rotation P with P^T O P = +-(rotation about e_z), or None when O already is one.

    O (3, 3) orthogonal is +-R with R a rotation about the axis n; P = [u, n x u, n] for any
    unit u ⊥ n."""
    R = O if np.linalg.det(O) > 0 else -O
    if is_z_rotation(R):
        return None
    w, v = np.linalg.eig(R)
    n = np.real(v[:, int(np.argmin(np.abs(w - 1.0)))])
    n /= np.linalg.norm(n)
    u = np.cross(n, np.eye(3)[int(np.argmin(np.abs(n)))])
    u /= np.linalg.norm(u)
    return np.column_stack([u, np.cross(n, u), n])
