r"""The attention field of any measure on S^1 or S^2 from its harmonic moments.

The kernel :math:`e^{\beta\langle x, By\rangle} = e^{\kappa(x)\langle n(x), y\rangle}`, with
:math:`\kappa(x) = \beta|B^\top x|` and :math:`n(x) = B^\top x/|B^\top x|`, is zonal around
n(x). By Funk–Hecke it acts on spherical harmonics (S^2) or Fourier modes (S^1) diagonally,
and its multipliers fall like :math:`e^{-\ell^2/(2\kappa)}`: the attention field of *any*
measure :math:`\mu`, however sharp, depends only on the moments of :math:`\mu` up to a degree
:math:`L \approx \sqrt{2\kappa\log(1/\mathrm{tol})}`. Two steps, each O(N + L^2 log L) with
ducc0's non-equispaced transforms (the fast summation of radial functions on the sphere):

1. *measure -> moments* (:meth:`HarmonicField.moments`, an adjoint synthesis at the atoms;
   :meth:`HarmonicField.moments_of_coefficients` for a density given by its coefficients;
   :meth:`HarmonicField.moments_of_cells` for cell masses with quadrature nodes):

   .. math:: S^2:\ \rho_{\ell m} = \int \overline{Y_{\ell m}}\,d\mu, \qquad
             S^1:\ \rho_k = \frac{1}{2\pi}\int e^{-ik\theta}\,d\mu(\theta),

   the coefficients of :math:`\mu` seen as a density against the surface measure (the layout
   of :mod:`spherepde.transforms.sht` and of the S^1 Fourier solver).
2. *moments -> field at arbitrary points* (:meth:`HarmonicField.attention`). On S^2, with
   the scaled multipliers :math:`g_\ell, r_\ell, q_\ell` of
   :func:`spherepde.interaction.funk_hecke.spherical_multipliers` (Bessel functions times
   :math:`e^{-\kappa}`),

   .. math:: G(u) = \sum g_\ell\rho_{\ell m}Y_{\ell m}(u), \quad
             W(u) = u\sum r_\ell\rho_{\ell m}Y_{\ell m}(u)
                    + \nabla_S\sum q_\ell\rho_{\ell m}Y_{\ell m}(u),

   are :math:`e^{-\kappa}\int e^{\kappa\langle u,y\rangle}d\mu` and
   :math:`e^{-\kappa}\int e^{\kappa\langle u,y\rangle}y\,d\mu`; the attention output is
   :math:`V W(n(x))/G(n(x))` (SA) or :math:`e^{\kappa(x)} V W(n(x))` (USA). On S^1,
   :math:`G(u) = \sum_k 2\pi e^{-\kappa}I_k(\kappa)\rho_k e^{iku}` and
   :math:`W(u) = \sum_k 2\pi e^{-\kappa}I_k(\kappa)\rho_{k-1}e^{iku}` with
   :math:`y = e^{i\varphi}` read as a complex number.

At points that never move (a finite-volume mesh's edge points and cell nodes),
:class:`PlannedField` does both steps through transforms planned once: a small equiangular
grid, the 2-D FFT of the doubled sphere, and a planned NUFFT at the fixed points.

When B = c·O (O orthogonal) :math:`\kappa = \beta c` is one number. For a general invertible
B the multipliers are expanded in Chebyshev polynomials of :math:`\kappa` on
:math:`[\beta\sigma_{\min}(B), \beta\sigma_{\max}(B)]`, one synthesis per term (the expansion
of :class:`spherepde.interaction.funk_hecke.GeneralFunkHecke`, here at arbitrary points).

Error model
-----------
For a measure of total variation :math:`|\mu|` the addition theorem
(:math:`|\sum_m Y_{\ell m}(u)\overline{Y_{\ell m}(y)}| \le (2\ell+1)/4\pi`) and Bernstein's
inequality (:math:`|\tfrac{d}{d\theta}P_\ell(\cos\theta)| \le \ell`) bound what the
truncation at L drops, uniformly in u:

.. math:: |G - G_L| + |W - W_L| \le |\mu|\,E(L), \qquad
          E(L) = \sum_{\ell > L}\frac{2\ell+1}{4\pi}\big(|g_\ell| + |r_\ell| + \ell|q_\ell|\big)

(on S^1 the same with :math:`\sum_{|k|>K}` and :math:`2\pi e^{-\kappa}I_k`). L is the smallest
degree with :math:`E(L) \le \mathrm{tol}\cdot\bar G`, where
:math:`\bar G = e^{-\kappa}i_0(\kappa)` (S^2) or :math:`e^{-\kappa}I_0(\kappa)` (S^1) is the
average of G over the sphere for *every* probability measure. Since :math:`|W| \le G` for a
positive measure, the SA output at x is then off by at most

.. math:: \|V\|_2\,\frac{|\mu|\,E_{\mathrm{tot}}}{G(x)} \;\lesssim\;
          \|V\|_2\,\mathrm{tol}\cdot\frac{\bar G}{G(x)}

(:math:`E_{\mathrm{tot}}` adds the Chebyshev and NUFFT errors): relative error tol where the
measure seen by the kernel at x is at least as dense as the uniform one, and growing like
:math:`\bar G/G(x)` where it is thinner. At low temperature a query can look into a region
that holds exponentially little mass (:math:`G(x)/\bar G \sim e^{-\kappa\delta^2/2}` at distance
δ from the support): no double-precision harmonic expansion resolves that. The transforms
add a floor of a few ``nufft_eps`` (2.1e-13 at best) times the field's largest value
(:meth:`HarmonicField._numerical_error`), so on a concentrated measure, whose G peaks at
10^2-10^3 times its mean, the bound of a query that sees less than the mean mass is that
floor over its own G whatever tol is: tol moves L, not the bound. Every evaluation
therefore returns this bound per query, and :meth:`HarmonicField.attention_of_points`
computes the queries whose bound exceeds the accuracy asked of it (``velocity_tol``; by
default ``FALLBACK_FACTOR * tol``) another way: a few (at
most ``direct_fallback_max`` of :class:`~spherepde.interaction.options.HarmonicTuning`) by
full sums over the atoms
(:func:`spherepde.interaction.caps.full_sums`), more by the dual-tree far-field expansion of
:mod:`spherepde.interaction.farfield`. Late in a low-temperature run nearly every query falls
back (the tokens have gathered and n(x) looks away from them); the queries are then clustered
like the atoms, and the interaction of a cluster of queries with a cluster of atoms is a
short Taylor series in the cross term :math:`\langle\delta q, \delta y\rangle` only. Its
bound is a priori: the expansions and the atoms they drop change s and a by at most
0.45 tol of s each, so the SA output is off by at most :math:`\|V\|_2\,\mathrm{tol}` (USA:
tol of the query's own :math:`\|V\|_2\,s`), the guarantee the exact cap sums of
:mod:`spherepde.interaction.caps` gave. :meth:`HarmonicField.evaluate` returns, with the
output, the number of fallback queries and ``fallback_work``: the exact terms plus the
expansions' terms summed for them.

Cell averages (for a finite-volume solver)
------------------------------------------
The moments are linear in the measure, so a density that is constant on each cell is exact
through :meth:`HarmonicField.moments_of_cells`: give, per cell, quadrature nodes on the cell
and their weights (normalized to sum 1 on each cell; exact for polynomials of degree >= L on
the cell for exact cell integrals, or one node at the centroid for the point-mass
approximation, whose error is the second moment of the cell times the largest multiplier
curvature, about :math:`\kappa\,h^2` for cells of diameter h) together with the cell masses.
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from typing import Final

import numpy as np
from numba import njit, prange

from ..sphere import orthogonal_factor
from ..transforms.fourier import fft2
from ..transforms.sht import ducc0_locations as _loc
from ..transforms.sht import fft_size, lm_arrays
from . import Kernel, register_kernel
from .funk_hecke import circular_multipliers, spherical_multipliers
from .numerics import LOG_FLOAT_MAX, usa_overflow_error
from .options import DEFAULT_TOL, FALLBACK_FACTOR, HarmonicOptions, HarmonicTuning

__all__ = ["HarmonicField", "PlannedField", "Moments", "HarmonicKernel", "field_for",
           "DEFAULT_TOL", "FALLBACK_FACTOR", "check_velocity_tol"]
#: The smallest accuracy ducc0 accepts for double-precision non-equispaced transforms: a
#: limit of the library, not a setting (Final: nothing may rebind it).
NUFFT_EPS_MIN: Final = 2.1e-13


def check_velocity_tol(velocity_tol) -> float:
    """``velocity_tol`` as a float in (0, 1), or a ValueError that says what to pass."""
    value = float(velocity_tol)
    if not 0.0 < value < 1.0:
        raise ValueError(f"velocity_tol must lie in (0, 1) (an accuracy relative to |V|_2); "
                         f"got {velocity_tol!r}")
    return value


def _physical_memory() -> float:
    """Bytes of physical memory (4 GiB where the OS does not say)."""
    try:
        return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover (not POSIX)
        return 4.0 * 2**30


#: Threads of the spreading (adjoint) transforms: one, for bit-for-bit reproducible runs
#: (see :meth:`HarmonicField.moments`); an invariant, not a setting.
SPREAD_THREADS: Final = 1

def _default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover (not Linux)
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Moments:
    r"""The harmonic moments of a (signed) measure up to a degree.

    Attributes
    ----------
    d : 3 (S^2) or 2 (S^1)
    degree : int, L (S^2) or K (S^1)
    coefficients : complex array
        S^2: (nlm,) :math:`\rho_{\ell m} = \int\overline{Y_{\ell m}}\,d\mu` for
        :math:`0 \le m \le \ell \le L` in the m-major layout of
        :func:`spherepde.transforms.sht.lm_arrays`. S^1: (K + 1,)
        :math:`\rho_k = \frac{1}{2\pi}\int e^{-ik\theta}d\mu`, k = 0..K.
    mass : float
        Total variation :math:`|\mu|` (the sum of |weights|), which scales the error bound.
    """

    d: int
    degree: int
    coefficients: np.ndarray
    mass: float


def _suffix_sums(terms):
    """out[l] = sum of terms[l:] (the tail beyond l - 1)."""
    return np.cumsum(terms[::-1])[::-1]


# Per-point assembly, fused and parallel: on (N, 3) arrays numpy's temporaries and its BLAS
# calls for 3x3 products cost more than the transforms themselves (measured at N = 10^6).
@njit(parallel=True, cache=True)
def _directions(x, B, beta, nx, kappa):
    """nx_i = B^T x_i / |B^T x_i| and kappa_i = beta |B^T x_i| for x: (m, d)."""
    m, d = x.shape
    for i in prange(m):
        r2 = 0.0
        for a in range(d):
            v = 0.0
            for b in range(d):
                v += x[i, b] * B[b, a]
            nx[i, a] = v
            r2 += v * v
        r = np.sqrt(r2)
        kappa[i] = beta * r
        inv = 1.0 / r if r > 0 else 1.0
        for a in range(d):
            nx[i, a] *= inv


@njit(parallel=True, cache=True)
def _add_w_s2(nx, wr, vt, vp, T, W):
    """W_i += T_i (n_i W_r + e_theta v_theta + e_phi v_phi) at the unit vectors n_i; T may
    be empty (factor 1). e_theta, e_phi are those of ducc0's (theta, phi) of n_i."""
    for i in prange(nx.shape[0]):
        z = nx[i, 2]
        st = np.sqrt(nx[i, 0] ** 2 + nx[i, 1] ** 2)
        cp, sp = (nx[i, 0] / st, nx[i, 1] / st) if st > 0 else (1.0, 0.0)  # phi = 0 at a pole
        t = T[i] if T.size else 1.0
        a, b, c = wr[i], vt[i], vp[i]
        W[i, 0] += t * (nx[i, 0] * a + z * cp * b - sp * c)
        W[i, 1] += t * (nx[i, 1] * a + z * sp * b + cp * c)
        W[i, 2] += t * (z * a - st * b)


@njit(parallel=True, cache=True, error_model="numpy")  # 1/0 -> inf: G <= 0 is flagged by the bound
def _output(W, V, G, kappa, normalized, out):
    """out_i = V W_i / G_i (SA) or e^{kappa_i} V W_i (USA, e^kappa in two factors: alone it
    may overflow where the result does not)."""
    m, d = W.shape
    for i in prange(m):
        if normalized:
            f1, f2 = 1.0 / G[i], 1.0
        else:
            k1 = min(kappa[i], LOG_FLOAT_MAX)
            f1, f2 = np.exp(kappa[i] - k1), np.exp(k1)
        for a in range(d):
            v = 0.0
            for b in range(d):
                v += V[a, b] * W[i, b]
            out[i, a] = (v * f1) * f2


class HarmonicField:
    r"""The attention field :math:`X[\mu]` on S^1 or S^2 from the moments of :math:`\mu`.

    Parameters
    ----------
    B, V : (d, d), d = 2 or 3
        B = Q^T K invertible (any; B = c·O is the fast case) and the value matrix.
    beta : float
        Finite inverse temperature, >= 0.
    normalized : bool
        SA (True) or USA (False).
    tol : float
        Truncation tolerance; the degree L is the smallest with :math:`E(L) \le
        \mathrm{tol}\cdot\bar G` (module docstring). The SA output is then accurate to about
        tol relative to :math:`\|V\|_2` wherever the kernel sees at least the uniform mass.
    max_memory : float, optional
        Bytes the transforms may use (default: half of the physical memory).
    nthreads : int, optional
        Threads of the ducc0 transforms (default: the CPUs this process may use).
    tuning : HarmonicTuning, optional
        Work trade-offs (fallback by full sums, NUFFT accuracy, exact S^1 sums).

    Attributes
    ----------
    degree : int
        L (S^2) or K (S^1).
    kappa_range : (float, float)
        :math:`\beta\sigma_{\min}(B)`, :math:`\beta\sigma_{\max}(B)`.
    n_terms : int
        Chebyshev terms in kappa (1 when B = c·O).
    error_level : float
        E(L) plus the Chebyshev truncation, per unit mass, in the units of the scaled G.

    Examples
    --------
    >>> import numpy as np
    >>> from spherepde.interaction.harmonic import HarmonicField
    >>> field = HarmonicField(np.eye(3), np.eye(3), beta=16.0)
    >>> field.degree
    36
    >>> y = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    >>> mom = field.moments(y, np.array([0.5, 0.5]))
    >>> out = field.attention(y, mom)  # SA: e^-16/(1 + e^-16) = 1.125e-07 towards the other
    >>> bool(abs(out[0, 0] - np.exp(-16) / (1 + np.exp(-16))) < 1e-12), float(out[0, 2].round(6))
    (True, 1.0)
    """

    def __init__(self, B, V, beta: float, normalized: bool = True, *, tol: float = DEFAULT_TOL,
                 max_memory: float | None = None, nthreads: int | None = None,
                 tuning: HarmonicTuning | None = None):
        B = np.asarray(B, dtype=np.float64)
        V = np.asarray(V, dtype=np.float64)
        if B.ndim != 2 or B.shape[0] != B.shape[1] or B.shape[0] not in (2, 3):
            raise ValueError(f"the harmonic kernel works on S^1 and S^2: B must be (2, 2) or "
                             f"(3, 3); got shape {B.shape}. Use kernel='numba' in higher d")
        if V.shape != B.shape:
            raise ValueError(f"V must have the shape of B, {B.shape}; got {V.shape}")
        beta = float(beta)
        if not np.isfinite(beta) or beta < 0:
            raise ValueError(f"the harmonic kernel needs a finite beta >= 0; got {beta} (beta = "
                             "inf is the local zero-temperature field, no kernel needed)")
        tol = float(tol)
        if not (NUFFT_EPS_MIN <= tol < 1):
            raise ValueError(f"tol must lie in [{NUFFT_EPS_MIN:g}, 1); got {tol}")
        self.d = B.shape[0]
        self.tuning = HarmonicTuning() if tuning is None else tuning
        self.B, self.V, self.beta, self.normalized, self.tol = B, V, beta, bool(normalized), tol
        self.nthreads = _default_threads() if nthreads is None else int(nthreads)
        sv = np.linalg.svd(B, compute_uv=False)
        if not sv[-1] > 1e-12 * sv[0]:
            raise ValueError(f"B must be invertible for the harmonic kernel (singular values "
                             f"{sv}); use kernel='numba'")
        self.kappa_range = (beta * float(sv[-1]), beta * float(sv[0]))
        fac = orthogonal_factor(B)
        self.zonal = fac is not None
        self.norm_V = float(np.linalg.norm(V, 2))
        self.max_memory = 0.5 * _physical_memory() if max_memory is None else float(max_memory)
        # the transforms need not be more accurate than the truncation they serve
        self.nufft_eps = max(NUFFT_EPS_MIN, self.tuning.nufft_eps_fraction * tol)
        self.degree = self._choose_degree()
        self._coef = self._kappa_expansion()
        self.n_terms = self._coef.shape[0]
        if self.d == 3:
            self._l, self._m = lm_arrays(self.degree)
            self._sqrt_llp1 = np.sqrt(self._l * (self._l + 1.0))
        self.error_level = self._error_level()

    @classmethod
    def from_model(cls, model, **kw) -> "HarmonicField":
        """The field of a :class:`spherepde.Model` (its B, V, beta, SA/USA)."""
        return cls(model.B, model.V, model.beta, model.normalized, **kw)

    # ------------------------------------------------------------------ set-up
    def _multipliers(self, kappa, n):
        """Scaled multipliers at kappa for degrees 0..n: (3, n + 1) on S^2, (1, n + 1) on S^1."""
        if self.d == 3:
            return np.stack(spherical_multipliers(n, kappa))
        return circular_multipliers(n, kappa)[None]

    def _tails(self, kappa, n):
        """(tail, mean of G) at kappa: tail[L] = E(L) for L = 0..n - 1, from multipliers up to
        degree n + 2 + 8·sqrt(kappa + 1) (beyond, e^{-l^2/(2 kappa)} < e^{-32} of what is kept)."""
        top = n + 2 + int(8.0 * math.sqrt(kappa + 1.0))
        mult = self._multipliers(kappa, top)
        if self.d == 3:
            g, r, q = np.abs(mult)
            ell = np.arange(g.size)
            cum = _suffix_sums((2 * ell + 1) / (4.0 * np.pi) * (g + r + ell * q))
            return cum[1: n + 1], mult[0, 0] / (4.0 * np.pi)  # E(L) sums l > L
        # S^1: G drops |k| > K; W pairs e^{-kappa} I_k with rho_{k-1} and drops k > K and
        # k = -K, ...; each term is at most e^{-kappa} I_|k| per unit mass
        cum = _suffix_sums(np.abs(mult[0]))
        K = np.arange(n)
        return (3.0 * cum[K + 1] + cum[K]) / (2.0 * np.pi), mult[0, 0] / (2.0 * np.pi)

    def _tail(self, kappa, L):
        """(E(L), mean of G) at kappa."""
        tail, Gbar = self._tails(kappa, L + 1)
        return tail[L], Gbar

    def _choose_degree(self) -> int:
        """The smallest L with E(L) <= tol · mean G over the kappa range (checked at its ends
        and its middle: the relative tail grows with kappa)."""
        kmin, kmax = self.kappa_range
        # the tail is ~ e^{-L^2/(2 kappa)} and the mean of G ~ 1/(2 kappa): L is below
        # sqrt(2 kappa (log(1/tol) + log(2 kappa) + 8)) + 16
        n = int(math.sqrt(2.0 * kmax * (math.log(1.0 / self.tol) + math.log(2.0 * kmax + 2.0)
                                        + 8.0))) + 16
        L = 1
        for k in sorted({kmin, 0.5 * (kmin + kmax), kmax}):
            tail, Gbar = self._tails(k, n)
            good = np.nonzero(tail <= self.tol * Gbar)[0]
            if good.size == 0:  # pragma: no cover (the estimate of n failed)
                raise RuntimeError(f"no degree below {n} meets tol = {self.tol} at kappa = {k}")
            L = max(L, int(good[0]))
        self._check_memory(L)
        return L

    def _check_memory(self, L):
        if self.d != 3:
            need = 64.0 * (L + 1)  # S^1: a few arrays of 2K + 3 modes
        else:
            need = self.tuning.bytes_per_degree2 * (L + 1) ** 2
        if need > self.max_memory:
            raise MemoryError(
                f"the harmonic kernel needs degree L = {L} for beta = {self.beta:g} "
                f"(beta·|B| = {self.kappa_range[1]:.4g}) at tol = {self.tol:g}: about "
                f"{need / 2**30:.1f} GiB, more than the {self.max_memory / 2**30:.1f} GiB allowed. "
                "Use kernel='numba' (direct, O(N^2) time, O(N) memory), a larger tol, or "
                "max_memory=... if the machine has the memory")

    def _kappa_expansion(self) -> np.ndarray:
        """Chebyshev coefficients (P, ncomp, L + 1) in s in [-1, 1], kappa = mid + half·s, of
        the scaled multipliers; P = 1 (the multipliers themselves) when kappa is one number."""
        L = self.degree
        kmin, kmax = self.kappa_range
        if self.zonal or kmax - kmin <= 1e-14 * max(1.0, kmax):
            return self._multipliers(0.5 * (kmin + kmax), L)[None]
        mid, half = 0.5 * (kmax + kmin), 0.5 * (kmax - kmin)
        weight = self._bound_weights(L)
        # each (component, degree) may drop up to its share of tol · mean G (at kmax, where it
        # is smallest), but need not go below the accuracy (~1e-13 relative, scipy's ive at
        # large orders, measured) of its own largest coefficient
        share = 0.5 * self.tol * self._tail(kmax, L)[1] / weight.sum()

        def values(s):
            return np.stack([self._multipliers(mid + half * si, L).ravel() for si in s])

        P = 8
        while True:
            c = np.polynomial.chebyshev.chebinterpolate(values, P - 1).reshape(P, -1, L + 1)
            floor = np.maximum(share, 1e-13 * np.abs(c).max(axis=0))
            small = np.abs(c) <= floor  # (P, ncomp, L + 1)
            if small[-2:].all() or P >= self.tuning.max_chebyshev_terms:
                # keep up to the last term that is not negligible somewhere
                big = np.nonzero(~small.all(axis=(1, 2)))[0]
                keep = int(big[-1]) + 1 if big.size else 1
                # dropped terms above the accuracy floor count in the uniform bound; those at
                # the floor are a relative error of each multiplier, counted with the
                # numerical error (relative to the field's size, see _numerical_error)
                rest = np.abs(c[keep:])
                at_floor = rest <= 1e-13 * np.abs(c).max(axis=0)
                self._cheb_error = float((np.where(at_floor, 0.0, rest) * weight).sum())
                if not small[-2:].all():
                    # capped before the coefficients fell below their share: the terms
                    # beyond P are unknown, so measure the interpolant against the
                    # multipliers themselves between its nodes and count that instead
                    self._cheb_error += self._interpolation_defect(c[:keep], values, weight)
                scale = np.abs(c).max(axis=0)
                self._cheb_rel = float(np.max(np.where(at_floor, rest, 0.0).sum(axis=0)
                                              / np.where(scale > 0, scale, 1.0), initial=0.0))
                return c[:keep]
            P *= 2

    @staticmethod
    def _interpolation_defect(c, values, weight) -> float:
        """Σ weight · max_s |values(s) − Σ_k c_k T_k(s)| over 4P points in [-1, 1] (between
        the P interpolation nodes as well as on them): the measured error of an expansion in
        kappa that the cap stopped before it converged."""
        m = 4 * c.shape[0]
        s = np.cos(np.pi * (np.arange(m) + 0.25) / m)
        exact = values(s).reshape(m, *c.shape[1:])
        approx = np.moveaxis(np.polynomial.chebyshev.chebval(s, c), -1, 0)
        return float((np.abs(exact - approx).max(axis=0) * weight).sum())

    def _bound_weights(self, L):
        """Per (component, degree) factors of the uniform bound: (2l+1)/4pi · (1, 1, l) on S^2,
        2/(2 pi) for each of G and W on S^1 (modes +-k)."""
        ell = np.arange(L + 1)
        if self.d == 3:
            w = (2 * ell + 1) / (4.0 * np.pi)
            return np.stack([w, w, ell * w])
        return np.full((1, L + 1), 4.0 / (2.0 * np.pi))

    def _error_level(self) -> float:
        """E(L) + the Chebyshev truncation, per unit mass (largest over the kappa range)."""
        kmin, kmax = self.kappa_range
        trunc = max(self._tail(k, self.degree)[0] for k in {kmin, 0.5 * (kmin + kmax), kmax})
        return trunc + getattr(self, "_cheb_error", 0.0)

    def _numerical_error(self, mom: Moments, G) -> float:
        """What the non-equispaced transforms and round-off add to |G - G_L| + |W - W_L|.

        ducc0's error, measured against exact sums at kappa = 16..4000 for spread and for
        clustered measures (L up to 530), stays below ``nufft_eps`` times the larger of the
        RMS of the field over the sphere and its largest value (at most half of it); G, W_r and
        the two gradient components are each counted, the RMS of the Chebyshev terms add up,
        and the Chebyshev coefficients' own accuracy floor (relative) adds to eps."""
        rms = 0.0
        power = np.abs(mom.coefficients) ** 2
        for c in self._coef[:, 0]:  # the G component of every Chebyshev term
            if self.d == 3:
                wm = np.where(self._m == 0, 1.0, 2.0)
                rms += math.sqrt(float(np.sum(wm * c[self._l] ** 2 * power)) / (4.0 * np.pi))
            else:
                a = c ** 2 * power
                rms += math.sqrt(float(a[0] + 2.0 * a[1:].sum()))
        top = float(np.max(np.abs(G), initial=0.0)) if G is not None else 0.0
        rel = self.nufft_eps + getattr(self, "_cheb_rel", 0.0)
        return 4.0 * rel * max(rms, top)

    # ------------------------------------------------------------------ measure -> moments
    def moments(self, points, weights=None) -> Moments:
        r"""Moments up to :attr:`degree` of :math:`\mu = \sum_j w_j\delta_{y_j}`.

        Parameters
        ----------
        points : (n, d) unit vectors
        weights : (n,) real, optional (default 1/n); signed weights are allowed

        Returns
        -------
        Moments
        """
        y = np.asarray(points, dtype=np.float64)
        if y.ndim != 2 or y.shape[1] != self.d:
            raise ValueError(f"points must have shape (n, {self.d}); got {y.shape}")
        n = y.shape[0]
        w = np.full(n, 1.0 / max(n, 1)) if weights is None else np.asarray(weights, np.float64)
        if w.shape != (n,):
            raise ValueError(f"weights must have shape ({n},); got {w.shape}")
        mass = float(np.abs(w).sum())
        L = self.degree
        if self.d == 3:
            import ducc0

            # spreading (adjoint) transforms run on one thread: with several, ducc0 adds the
            # points' contributions in an order set by how the threads share them, so the
            # moments' round-off, and a trajectory's last bits, would depend on the machine's
            # load; a run must be reproducible bit for bit
            a = ducc0.sht.adjoint_synthesis_general(
                map=w[None], spin=0, lmax=L, loc=_loc(y), epsilon=self.nufft_eps,
                nthreads=SPREAD_THREADS)[0]
            return Moments(3, L, a, mass)
        theta = np.arctan2(y[:, 1], y[:, 0])
        if n * (L + 1) <= self.tuning.s1_exact_max:
            rho = np.exp(-1j * np.outer(np.arange(L + 1), theta)) @ w
        else:
            import ducc0

            full = ducc0.nufft.nu2u(points=w.astype(np.complex128), coord=theta[:, None],
                                    forward=True, epsilon=self.nufft_eps,
                                    nthreads=SPREAD_THREADS,
                                    out=np.empty(2 * L + 1, dtype=np.complex128))
            rho = full[L:]  # modes -L..L; keep k >= 0
        return Moments(2, L, rho / (2.0 * np.pi), mass)

    def moments_of_cells(self, nodes, node_weights, masses) -> Moments:
        r"""Moments of a measure given by cell masses and per-cell quadrature.

        Parameters
        ----------
        nodes : (ncell, q, d) quadrature nodes on each cell (unit vectors)
        node_weights : (ncell, q) non-negative, each row summing to 1 (the cell's quadrature
            weights divided by its area)
        masses : (ncell,) mass of each cell

        The measure :math:`\sum_c m_c \sum_q w_{cq}\delta_{x_{cq}}` has the moments of the
        piecewise-constant density :math:`m_c/|c|` up to the quadrature error on each cell
        (exact to degree L when the rule is). One node per cell at its centroid is the
        point-mass approximation.
        """
        nodes = np.asarray(nodes, dtype=np.float64)
        node_weights = np.asarray(node_weights, dtype=np.float64)
        masses = np.asarray(masses, dtype=np.float64)
        if nodes.ndim != 3 or nodes.shape[-1] != self.d or node_weights.shape != nodes.shape[:2] \
                or masses.shape != nodes.shape[:1]:
            raise ValueError(f"nodes must be (ncell, q, {self.d}), node_weights (ncell, q), "
                             f"masses (ncell,); got {nodes.shape}, {node_weights.shape}, "
                             f"{masses.shape}")
        row = node_weights.sum(axis=1)
        if np.abs(row - 1.0).max(initial=0.0) > 1e-10:
            raise ValueError("node_weights must sum to 1 on every cell (divide the quadrature "
                             "weights by the cell area); worst row sum "
                             f"{row[np.argmax(np.abs(row - 1))]}")
        w = (masses[:, None] * node_weights).reshape(-1)
        return self.moments(nodes.reshape(-1, self.d), w)

    def moments_of_coefficients(self, coefficients, mass: float | None = None) -> Moments:
        r"""Moments of a density given by its coefficients (a spectral solver's state).

        Parameters
        ----------
        coefficients : complex
            S^2: (nlm,) in the m-major layout of :func:`spherepde.transforms.sht.lm_arrays`
            for some lmax (the :class:`spherepde.density.SpectralSolver` state); S^1: (K + 1,)
            for k = 0..K (the :class:`spherepde.density.FourierSolver` state). Truncated or
            zero-padded to :attr:`degree`.
        mass : float, optional
            :math:`\int|\rho|` for the error bound (default: the integral of rho).
        """
        c = np.asarray(coefficients, dtype=np.complex128)
        L = self.degree
        if self.d == 3:
            lmax = int(round((math.sqrt(8 * c.size + 1) - 3) / 2))
            if (lmax + 1) * (lmax + 2) // 2 != c.size:
                raise ValueError(f"{c.size} is not the number of coefficients of a triangular "
                                 "truncation (lmax + 1)(lmax + 2)/2")
            l_in, m_in = lm_arrays(lmax)
            keep = l_in <= L
            out = np.zeros(self._l.size, dtype=np.complex128)
            # index of (l, m) in the m-major layout of degree L
            idx = m_in[keep] * (2 * L + 3 - m_in[keep]) // 2 + (l_in[keep] - m_in[keep])
            out[idx] = c[keep]
            default_mass = math.sqrt(4.0 * math.pi) * float(c[0].real)
        else:
            out = np.zeros(L + 1, dtype=np.complex128)
            k = min(L + 1, c.size)
            out[:k] = c[:k]
            default_mass = 2.0 * math.pi * float(c[0].real)
        return Moments(self.d, L, out, abs(default_mass) if mass is None else float(mass))

    # ------------------------------------------------------------------ moments -> field
    def _fields(self, x, mom: Moments, want_G: bool, plan=None):
        """Scaled G (m,) or None and W (m, d) at the queries x, with kappa(x) (m,); with a
        :class:`PlannedField` ``plan`` at its fixed queries (x is not read)."""
        if mom.d != self.d or mom.degree != self.degree:
            raise ValueError(f"these moments are of degree {mom.degree} on S^{mom.d - 1}; this "
                             f"field needs degree {self.degree} on S^{self.d - 1} (compute them "
                             "with this field's moments methods)")
        if plan is None:
            m = x.shape[0]
            nx = np.empty((m, self.d))
            kappa = np.empty(m)
            _directions(x, self.B, self.beta, nx, kappa)
        else:
            nx, kappa = plan.nx, plan.kappa
            m = nx.shape[0]
        P = self.n_terms
        if P > 1:
            kmin, kmax = self.kappa_range
            s = np.clip((kappa - 0.5 * (kmax + kmin)) / (0.5 * (kmax - kmin)), -1.0, 1.0)
        G = np.zeros(m) if want_G else None
        W = np.zeros((m, self.d))
        T_prev = T = None
        if plan is not None:
            synth = plan.synth
        else:
            synth = self._synth_s2(nx) if self.d == 3 else self._synth_s1(nx, m)
        no_factor = np.empty(0)
        for p in range(P):
            # Chebyshev polynomials of s by their recurrence, one term at a time
            if P == 1:
                Tp = no_factor
            elif p == 0:
                Tp = np.ones(m)
            elif p == 1:
                Tp = s
            else:
                Tp = 2.0 * s * T - T_prev
            T_prev, T = T, Tp
            g = synth(self._coef[p], mom.coefficients, want_G, Tp, W)
            if want_G:
                G += g if P == 1 else Tp * g
        return G, W, kappa

    def _synth_s2(self, nx):
        import ducc0

        kw = dict(lmax=self.degree, loc=_loc(nx), epsilon=self.nufft_eps, nthreads=self.nthreads)
        l, sq = self._l, self._sqrt_llp1

        def synth(coef, rho, want_G, T, W):
            """Adds T·W of this term to W; returns its G (or None)."""
            g = None
            if want_G:
                g = ducc0.sht.synthesis_general(alm=(coef[0][l] * rho)[None], spin=0, **kw)[0]
            wr = ducc0.sht.synthesis_general(alm=(coef[1][l] * rho)[None], spin=0, **kw)[0]
            # spin-1 gradient: ducc0's E-mode is sqrt(l(l+1)) times the spheroidal potential
            vt, vp = ducc0.sht.synthesis_general(alm=(coef[2][l] * sq * rho)[None], spin=1,
                                                 mode="GRAD_ONLY", **kw)
            _add_w_s2(nx, wr, vt, vp, T, W)
            return g

        return synth

    def _synth_s1(self, nx, m):
        K = self.degree
        u = np.arctan2(nx[:, 1], nx[:, 0])
        ks = np.arange(-K, K + 1)
        inside = np.abs(ks)
        if u.size * ks.size <= self.tuning.s1_exact_max:
            basis = np.exp(1j * np.outer(ks, u))  # (2K + 1, m), shared by every term

            def at_points(c):
                return c @ basis
        else:
            import ducc0

            def at_points(c):  # type-2 NUFFT: sum_k c_k e^{+iku_j}
                return ducc0.nufft.u2nu(grid=np.ascontiguousarray(c), coord=u[:, None],
                                        forward=False, epsilon=self.nufft_eps,
                                        nthreads=self.nthreads)

        def synth(coef, rho, want_G, T, W):
            """Adds T·W of this term to W; returns its G (or None)."""
            mult = coef[0][inside]  # 2 pi e^{-kappa} I_|k|, k = -K..K
            full = np.concatenate([np.conj(rho[1:][::-1]), rho])  # rho_k, k = -K..K
            shifted = np.concatenate([[0.0], full[:-1]])  # rho_{k-1}; rho_{-K-1} is dropped
            Wk = mult * shifted
            vals = at_points(np.stack([mult * full, Wk]) if want_G else Wk[None])
            w = vals[-1] if T.size == 0 else T * vals[-1]
            W[:, 0] += w.real
            W[:, 1] += w.imag
            return vals[0].real if want_G else None

        return synth

    def attention(self, x, moments: Moments, *, return_bound: bool = False, plan=None):
        r"""Attention output (before the tangent projection) at arbitrary points.

        Parameters
        ----------
        x : (m, d) unit vectors where the field is wanted
        moments : :class:`Moments` of this field's degree
        return_bound : bool
            Also return the per-query bound of the module docstring.
        plan : :class:`PlannedField`, optional
            Evaluate at the plan's fixed queries through its precomputed transforms (x must
            be the plan's queries; the same error model holds, see :class:`PlannedField`).

        Returns
        -------
        att : (m, d)
        bound : (m,), with ``return_bound``: the error bound relative to :math:`\|V\|_2`
            (SA) or to the query's own :math:`e^{\kappa(x)} G(x)\|V\|_2` (USA); inf where the
            computed G is not positive.
        """
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.d:
            raise ValueError(f"x must have shape (m, {self.d}); got {x.shape}")
        if plan is not None and x.shape != plan.x.shape:
            raise ValueError(f"a plan evaluates at its own {plan.x.shape[0]} queries; got x of "
                             f"shape {x.shape}")
        want_G = self.normalized or return_bound or self._usa_may_overflow(moments)
        G, W, kappa = self._fields(x, moments, want_G, plan)
        if not self.normalized and G is not None and x.shape[0]:
            top = float(np.max(kappa + np.log(np.maximum(G, 1e-300))))
            if top > LOG_FLOAT_MAX:
                raise usa_overflow_error(top, self.beta)
        att = np.empty_like(W)
        _output(W, self.V, G if G is not None else kappa, kappa, self.normalized, att)
        if not return_bound:
            return att
        E = moments.mass * self.error_level + self._numerical_error(moments, G)
        with np.errstate(divide="ignore"):
            bound = np.where(G > 0, E / np.where(G > 0, G, 1.0), np.inf)
        return att, bound

    def _usa_may_overflow(self, moments) -> bool:
        # the scaled G is at most the mass: below the threshold no query can overflow
        return (not self.normalized and
                self.kappa_range[1] + math.log(max(moments.mass, 1e-300)) > LOG_FLOAT_MAX)

    def partition(self, x, moments: Moments):
        r"""The partition :math:`Z(x) = \int e^{\beta\langle x, By\rangle}d\mu(y) =
        e^{\kappa(x)}G(n(x))` at points x (m, d), as (p (m,), s) with Z = p e^{s} and s the
        largest kappa(x) (what :func:`spherepde.interaction.energy.energy_from_partition`
        takes)."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.d:
            raise ValueError(f"x must have shape (m, {self.d}); got {x.shape}")
        G, _, kappa = self._fields(x, moments, True)
        top = float(np.max(kappa, initial=0.0))
        return G * np.exp(kappa - top), top

    def velocity(self, x, moments: Moments) -> np.ndarray:
        r"""The velocity :math:`P_x\,\mathrm{attention}`, (m, d)."""
        att = self.attention(x, moments)
        x = np.asarray(x, dtype=np.float64)
        return att - np.sum(att * x, axis=-1, keepdims=True) * x

    def attention_of_points(self, x, points, weights=None, *,
                            velocity_tol: float | None = None) -> np.ndarray:
        """The output of :meth:`evaluate` without its statistics, (m, d)."""
        return self.evaluate(x, points, weights, velocity_tol=velocity_tol)[0]

    def evaluate(self, x, points, weights=None, *, velocity_tol: float | None = None):
        r"""Attention output at x (m, d) of the measure :math:`\sum_j w_j\delta_{y_j}`, and
        the statistics of this evaluation.

        Every row is accurate to ``velocity_tol`` relative to :math:`\|V\|_2` (SA; USA:
        relative to the query's own scale). Queries whose error bound exceeds it are computed
        by :meth:`exact_at` (the far-field expansion of :mod:`spherepde.interaction.farfield`
        at tol = ``velocity_tol``; at most ``tuning.direct_fallback_max`` of them by full sums
        over the atoms). None (default): ``FALLBACK_FACTOR * tol`` (1e-10 at the default tol)
        for the harmonic rows, the field's ``tol`` for the far field. A caller that needs
        less (a particle solver stepping at rtol 1e-5) passes its own level: on a concentrated
        cloud the bound is the transforms' error floor over the little kernel mass a query
        sees, so ``velocity_tol`` and not ``tol`` decides how many queries fall back (module
        docstring). Weights must be non-negative (as for every kernel).

        Returns
        -------
        att : (m, d)
        stats : dict
            ``queries``, ``fallback`` (queries computed by the far-field fallback) and
            ``fallback_work`` (the exact terms plus the expansion terms summed for them).
        """
        x = np.asarray(x, dtype=np.float64)
        points = np.asarray(points, dtype=np.float64)
        if velocity_tol is None:
            threshold, far_tol = FALLBACK_FACTOR * self.tol, self.tol
        else:
            threshold = far_tol = check_velocity_tol(velocity_tol)
        mom = self.moments(points, weights)
        att, bound = self.attention(x, mom, return_bound=True)
        bad = np.nonzero(~(bound <= threshold))[0]
        w = (np.full(points.shape[0], 1.0 / points.shape[0]) if weights is None
             else np.asarray(weights, dtype=np.float64))
        work = self.exact_at(att, bad, x, points, w, far_tol)
        return att, {"queries": int(x.shape[0]), "fallback": int(bad.size),
                     "fallback_work": work}

    def exact_at(self, att, bad, x, points, weights, tol):
        r"""Replaces the rows ``bad`` of ``att`` (the output at x: (m, d)) by the sums of
        :class:`spherepde.interaction.farfield.FarField` (a few, at most
        ``tuning.direct_fallback_max``, by full sums over all atoms), accurate to
        :math:`\|V\|_2\,\mathrm{tol}` (SA; USA relative to the query's own scale) for the
        measure :math:`\sum_j w_j\delta_{y_j}`, w >= 0, in place; returns the work spent (exact
        terms plus expansion terms)."""
        bad = np.asarray(bad)
        if bad.size == 0:
            return 0
        w = weights
        tol = float(tol)
        from .caps import full_sums
        from .farfield import FarField

        xb = np.ascontiguousarray(x[bad])
        nx = np.empty_like(xb)
        kappa = np.empty(bad.size)
        _directions(xb, self.B, self.beta, nx, kappa)
        if bad.size <= self.tuning.direct_fallback_max:
            s, a, shift = full_sums(points, w, nx, kappa)
            work = int(bad.size) * points.shape[0]
        else:
            s, a, shift, st = FarField(points, w).sums(kappa[:, None] * nx, tol)
            work = int(st["direct_terms"] + st["expansion_terms"])
        if self.normalized:
            att[bad] = (a / s[:, None]) @ self.V.T
        else:
            top = float(np.max(shift + np.log(s)))
            if top > LOG_FLOAT_MAX:
                raise usa_overflow_error(top, self.beta)
            out = np.empty_like(a)
            # e^shift V a, with e^shift in two factors as in _output
            _output(a, self.V, s, shift, False, out)
            att[bad] = out
        return work

    def __repr__(self) -> str:
        kind = "SA" if self.normalized else "USA"
        shape = "B = c·O" if self.zonal else f"general B, {self.n_terms} Chebyshev terms"
        deg = "L" if self.d == 3 else "K"
        return (f"HarmonicField(S^{self.d - 1}, beta={self.beta:g}, {kind}, {shape}, "
                f"{deg}={self.degree}, tol={self.tol:g})")


class PlannedField:
    r"""A :class:`HarmonicField` on S^2 at fixed queries, and moments of measures on fixed
    atoms, through transforms planned once (the finite-volume solver's edge points and cell
    nodes never move).

    :meth:`HarmonicField.attention` synthesizes at arbitrary points with ducc0's
    non-equispaced SHT, which re-plans (sorts the points, sizes its grid) at every call.
    Here the band-limited fields are synthesized on a small regular grid and interpolated
    to the fixed points by a planned non-uniform FFT:

    1. *Grid.* Each Cartesian component of :math:`G_L` and :math:`W_L` is a polynomial of
       degree at most L + 1 restricted to the sphere. It is synthesized (``ducc0.sht``) on the
       equiangular Clenshaw–Curtis grid :math:`\theta_j = \pi j/(n_\theta - 1)`,
       :math:`\varphi_k = 2\pi k/n_\varphi`, and extended to the doubled sphere
       :math:`f(2\pi - \theta, \varphi) = f(\theta, \varphi + \pi)`: a trigonometric
       polynomial of degree L + 1 in both angles on the torus :math:`[0, 2\pi)^2`, whose
       Fourier coefficients the 2-D FFT of the :math:`2(n_\theta - 1)\times n_\varphi` grid
       gives exactly when :math:`2(n_\theta - 1), n_\varphi \ge 2L + 4` (no aliasing).
    2. *Interpolation.* The torus series is summed at the queries' :math:`(\theta, \varphi)`
       by a type-2 NUFFT planned once (``ducc0.nufft.plan``: an oversampled grid, a kernel
       of local support, its weights found once per point), two real components per complex
       transform (G + iW_x, W_y + iW_z).
    3. *Moments* (the adjoint): the type-1 NUFFT of the atoms' weights gives the torus sums
       :math:`F_k = \sum_j w_j e^{-ik\cdot x_j}`; since :math:`\overline{Y_{\ell m}}` has the
       exact torus expansion of step 1, :math:`\rho_{\ell m} = \frac1M\sum_g
       \overline{Y_{\ell m}(g)}\,H_g` with :math:`H = \sum_k F_k e^{ik\cdot g}` on the doubled
       grid (M points), folded onto the sphere grid and summed by ducc0's adjoint synthesis.

    Steps 1 and 3 are exact up to round-off; the only approximation is the NUFFT's, at the
    field's ``nufft_eps`` (the same accuracy as the non-equispaced SHT that ducc0 builds the
    same way), so the error model and the per-query bound of :class:`HarmonicField` hold
    unchanged (measured against the unplanned path in ``tests/test_harmonic.py``).

    Parameters
    ----------
    field : HarmonicField on S^2
    x : (m, 3) unit vectors, the fixed queries
    nodes : (n, 3) unit vectors, optional: the fixed atoms of :meth:`moments`
    """

    def __init__(self, field: "HarmonicField", x, nodes=None):
        import ducc0

        if field.d != 3:
            raise ValueError("PlannedField works on S^2 (B of shape (3, 3)); on S^1 the "
                             "harmonic field is already a plain FFT sum")
        self.field = field
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != 3:
            raise ValueError(f"x must have shape (m, 3); got {x.shape}")
        self.x = x
        m = x.shape[0]
        self.nx = np.empty((m, 3))
        self.kappa = np.empty(m)
        _directions(x, field.B, field.beta, self.nx, self.kappa)
        L = field.degree
        # torus sizes: both even, >= 2(L + 1) + 2 so that degree L + 1 is not aliased
        half = fft_size(2 * L + 4) // 2
        self.ntheta, self.nphi = half + 1, fft_size(2 * L + 4)
        self.shape = (2 * half, self.nphi)
        th = np.pi * np.arange(self.ntheta) / (self.ntheta - 1)
        ph = 2.0 * np.pi * np.arange(self.nphi) / self.nphi
        st, ct = np.sin(th)[:, None], np.cos(th)[:, None]
        sp_, cp = np.sin(ph)[None, :], np.cos(ph)[None, :]
        # u, e_theta, e_phi on the grid, each (3, ntheta, nphi)
        self._u = np.stack(np.broadcast_arrays(st * cp, st * sp_, ct + 0 * cp))
        self._et = np.stack(np.broadcast_arrays(ct * cp, ct * sp_, -st + 0 * cp))
        self._ep = np.stack(np.broadcast_arrays(-sp_ + 0 * ct, cp + 0 * ct, 0 * ct + 0 * cp))
        self._threads = field.nthreads
        kw = dict(grid_shape=self.shape, epsilon=field.nufft_eps, nthreads=self._threads)
        self._plan_q = ducc0.nufft.plan(nu2u=False, coord=_loc(self.nx), **kw)
        self._plan_n = None
        if nodes is not None:
            nodes = np.ascontiguousarray(nodes, dtype=np.float64)
            if nodes.ndim != 2 or nodes.shape[1] != 3:
                raise ValueError(f"nodes must have shape (n, 3); got {nodes.shape}")
            self.n_nodes = nodes.shape[0]
            self._plan_n = ducc0.nufft.plan(nu2u=True, coord=_loc(nodes),
                                            **{**kw, "nthreads": SPREAD_THREADS})

    # ------------------------------------------------------------------ torus <-> sphere grid
    def _double(self, f):
        """Values on the doubled sphere, (..., 2(ntheta - 1), nphi), of grid values f
        (..., ntheta, nphi): rows past the south pole are f(2 pi - theta, phi + pi)."""
        back = np.roll(f[..., -2:0:-1, :], self.nphi // 2, axis=-1)
        return np.concatenate([f, back], axis=-2)

    def _fold(self, H):
        """The adjoint of :meth:`_double`: (..., 2(ntheta - 1), nphi) -> (..., ntheta, nphi)."""
        nt = self.ntheta
        f = H[..., :nt, :].copy()
        f[..., -2:0:-1, :] += np.roll(H[..., nt:, :], -(self.nphi // 2), axis=-1)
        return f

    def _centered_coefficients(self, D):
        """Torus Fourier coefficients of doubled-grid values D (..., M1, M2), in the centred
        order of the NUFFT (index 0 = mode -M/2), the unused Nyquist modes set to 0."""
        c = np.fft.fftshift(fft2(D, nthreads=self._threads), axes=(-2, -1)) \
            / (D.shape[-2] * D.shape[-1])
        c[..., 0, :] = 0.0
        c[..., :, 0] = 0.0
        return c

    # ------------------------------------------------------------------ moments -> field
    def synth(self, coef, rho, want_G, T, W):
        """The contract of HarmonicField's synthesis functions: adds T·W of this term at the
        queries to W (m, 3); returns its G (or None)."""
        import ducc0

        f = self.field
        l, sq, L = f._l, f._sqrt_llp1, f.degree
        kw = dict(lmax=L, geometry="CC", ntheta=self.ntheta, nphi=self.nphi, nthreads=self._threads)
        g = ducc0.sht.synthesis_2d(alm=(coef[0][l] * rho)[None], spin=0, **kw)[0] \
            if want_G else 0.0
        wr = ducc0.sht.synthesis_2d(alm=(coef[1][l] * rho)[None], spin=0, **kw)[0]
        vt, vp = ducc0.sht.synthesis_2d(alm=(coef[2][l] * sq * rho)[None], spin=1,
                                        mode="GRAD_ONLY", **kw)
        Wc = self._u * wr + self._et * vt + self._ep * vp  # (3, ntheta, nphi) Cartesian
        grid = np.empty((2, self.ntheta, self.nphi), dtype=np.complex128)
        grid[0] = g + 1j * Wc[0]
        grid[1] = Wc[1] + 1j * Wc[2]
        c = self._centered_coefficients(self._double(grid))
        out = self._plan_q.u2nu(grid=c, forward=False)
        t = T if T.size else 1.0
        W[:, 0] += t * out[0].imag
        W[:, 1] += t * out[1].real
        W[:, 2] += t * out[1].imag
        return out[0].real.copy() if want_G else None

    # ------------------------------------------------------------------ measure -> moments
    def moments(self, weights) -> Moments:
        r"""Moments up to the field's degree of :math:`\sum_j w_j\delta_{y_j}` on the plan's
        nodes, weights: (n,) real (signed allowed)."""
        import ducc0

        if self._plan_n is None:
            raise ValueError("this plan has no nodes: build it with nodes=... to take moments")
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (self.n_nodes,):
            raise ValueError(f"weights must have shape ({self.n_nodes},); got {w.shape}")
        F = self._plan_n.nu2u(points=w.astype(np.complex128), forward=True)
        F[0, :] = 0.0  # the Nyquist modes: no Y_lm of degree <= L has them
        F[:, 0] = 0.0
        M = self.shape[0] * self.shape[1]
        H = fft2(np.fft.ifftshift(F), forward=False, nthreads=self._threads).real
        a = ducc0.sht.adjoint_synthesis_2d(map=self._fold(H)[None], spin=0, lmax=self.field.degree,
                                           geometry="CC", nthreads=self._threads)[0]
        return Moments(3, self.field.degree, a / M, float(np.abs(w).sum()))


@functools.lru_cache(maxsize=16)
def _cached_field(Bb: bytes, Vb: bytes, d: int, beta: float, normalized: bool, tol: float,
                  tuning: HarmonicTuning):
    B = np.frombuffer(Bb).reshape(d, d)
    V = np.frombuffer(Vb).reshape(d, d)
    return HarmonicField(B, V, beta, normalized, tol=tol, tuning=tuning)


def field_for(B, V, beta, normalized, tol=DEFAULT_TOL,
              tuning: HarmonicTuning | None = None) -> HarmonicField:
    """A cached :class:`HarmonicField`: the degree and the multipliers are computed once
    per (B, V, beta, SA/USA, tol). Sharing is safe: a field is never changed after
    construction (evaluations return their statistics)."""
    B = np.ascontiguousarray(B, dtype=np.float64)
    V = np.ascontiguousarray(V, dtype=np.float64)
    return _cached_field(B.tobytes(), V.tobytes(), B.shape[0], float(beta), bool(normalized),
                         float(tol), HarmonicTuning() if tuning is None else tuning)


class HarmonicKernel(Kernel):
    """The harmonic kernel under the kernel contract: ``bind`` takes the model's B, V, beta
    and SA/USA and the atoms; options are a :class:`HarmonicOptions`."""

    name = "harmonic"

    def bind(self, model, points, weights, options=None):
        opts = HarmonicOptions() if options is None else options
        if not isinstance(opts, HarmonicOptions):
            raise TypeError(f"the harmonic kernel takes HarmonicOptions; got {type(opts).__name__}")
        field = field_for(model.B, model.V, model.beta, model.normalized, opts.tol, opts.tuning)
        vt = opts.velocity_tol

        def evaluate(x):
            return field.evaluate(x, points, weights, velocity_tol=vt)

        evaluate.field = field  # the degree L, for a solver's repr and settings
        return evaluate


register_kernel("harmonic", HarmonicKernel())
