r"""The attention field of a density by the Funk–Hecke theorem (B = c·orthogonal).

When :math:`B = cO` with O orthogonal, the kernel :math:`e^{\beta\langle x, By\rangle} =
e^{\kappa\langle O^\top x, y\rangle}`, :math:`\kappa = \beta c`, is zonal in
:math:`u = O^\top x`, and acts diagonally on harmonics (Funk–Hecke):

.. math::
    \int_{S^2} e^{\kappa\langle u, y\rangle} Y_{\ell m}(y)\, dA(y) = 4\pi\, i_\ell(\kappa)\,
    Y_{\ell m}(u), \qquad
    \int_{S^1} e^{\kappa\cos(u-\varphi)} e^{ik\varphi}\, d\varphi = 2\pi I_k(\kappa) e^{iku},

with :math:`i_\ell` the modified spherical Bessel function of the first kind. For a density
:math:`\rho = \sum \rho_{\ell m} Y_{\ell m}` let :math:`G(u) = \int e^{\kappa\langle u, y\rangle}
\rho(y)\,dy` (extended to :math:`u \in \mathbb{R}^3` by the same integral). Its gradient in
:math:`\mathbb{R}^3` is :math:`\kappa W(u)` with :math:`W(u) = \int e^{\kappa\langle u,y\rangle}
y\,\rho(y)\,dy`; split into radial and surface parts at :math:`|u| = 1`,

.. math::
    W(u) = u \sum_{\ell m} 4\pi\, i_\ell'(\kappa)\rho_{\ell m} Y_{\ell m}(u)
         + \nabla_S \sum_{\ell m} 4\pi\, \frac{i_\ell(\kappa)}{\kappa}\rho_{\ell m} Y_{\ell m}(u).

The attention output is :math:`V W(u)/G(u)` (SA) or :math:`V W(u)` (USA). Evaluating at
:math:`u = O^\top x` is a rotation of the coefficients (for improper O = −R, a rotation
after the parity :math:`(-1)^\ell`), and :math:`W(O^\top x) = O^\top[\dots](x)`, so
:math:`V O^\top = A/c` multiplies the bracket. The cost is one coefficient rotation, a scalar
and a "radial + spheroidal" synthesis: a few transforms.

All multipliers carry the factor :math:`e^{-\kappa}` (exponentially scaled Bessel functions,
``scipy.special.ive`` of half-integer order), so kappa = 1e4 neither overflows nor loses the
ratio; SA never needs the factor back, USA multiplies by :math:`e^{\kappa}` at the end and
raises when that leaves float64.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import ive

from ..sphere import is_z_rotation, orthogonal_factor
from ..transforms.fourier import synthesize_two_sided
from .numerics import check_usa_overflow, usa_scale

__all__ = ["orthogonal_factor", "spherical_multipliers", "circular_multipliers",
           "funk_hecke_fields_s2", "attention_s2", "attention_s1", "GeneralFunkHecke"]


def spherical_multipliers(lmax: int, kappa: float):
    r"""Scaled Funk–Hecke multipliers on S^2 for degrees 0..lmax, each (lmax + 1,):

    ``g = 4 pi e^{-kappa} i_l(kappa)``, ``r = 4 pi e^{-kappa} i_l'(kappa)``,
    ``q = 4 pi e^{-kappa} i_l(kappa)/kappa`` (q_0 = 0: it only multiplies a gradient).

    Uses :math:`i_\ell(\kappa) = \sqrt{\pi/(2\kappa)} I_{\ell+1/2}(\kappa)`,
    :math:`(2\ell+1) i_\ell' = \ell i_{\ell-1} + (\ell+1) i_{\ell+1}` and
    :math:`(2\ell+1) i_\ell/\kappa = i_{\ell-1} - i_{\ell+1}`, all stable as kappa -> 0.
    """
    kappa = float(kappa)
    if not np.isfinite(kappa) or kappa < 0:
        raise ValueError(f"kappa = beta·c must be finite and >= 0; got {kappa}")
    ell = np.arange(lmax + 3, dtype=np.float64)  # i_0 .. i_{lmax+2}
    if kappa == 0.0:
        i = np.zeros_like(ell)
        i[0] = 1.0
    else:
        i = np.sqrt(np.pi / (2.0 * kappa)) * ive(ell + 0.5, kappa)
    lo = np.arange(lmax + 1)
    im1 = np.concatenate([[0.0], i[: lmax]])  # i_{l-1}; unused at l = 0
    ip1 = i[1: lmax + 2]
    g = 4.0 * np.pi * i[: lmax + 1]
    r = 4.0 * np.pi * (lo * im1 + (lo + 1) * ip1) / (2 * lo + 1)
    if kappa == 0.0:
        q = np.zeros(lmax + 1)
        if lmax >= 1:
            q[1] = 4.0 * np.pi / 3.0  # lim i_1(k)/k = 1/3
    else:
        q = 4.0 * np.pi * (im1 - ip1) / (2 * lo + 1)
        q[0] = 0.0
    return g, r, q


def circular_multipliers(kmax: int, kappa: float) -> np.ndarray:
    """Scaled Funk–Hecke multipliers on S^1, ``2 pi e^{-kappa} I_k(kappa)`` for k = 0..kmax."""
    kappa = float(kappa)
    if not np.isfinite(kappa) or kappa < 0:
        raise ValueError(f"kappa = beta·c must be finite and >= 0; got {kappa}")
    return 2.0 * np.pi * ive(np.arange(kmax + 1, dtype=np.float64), kappa)


def funk_hecke_fields_s2(rho_lm: np.ndarray, sht, O: np.ndarray, multipliers,
                         radial: bool = True, partition: bool = True):
    r"""The scaled Funk–Hecke fields on the grid of ``sht``, in the local frame.

    Returns ``(G, Wr, wt, wp)``, each (nlat, nlon): with :math:`u = O^\top x`,
    :math:`e^{-\kappa} G(u)` and the bracket :math:`[\,x\,W_r + w_\theta e_\theta +
    w_\phi e_\phi]` with :math:`e^{-\kappa} W(u) = O^\top[\dots]` (module docstring).
    ``radial=False`` skips Wr (returned as None) for callers whose M = V O^T is a multiple of
    the identity, where the radial part never reaches the tangent plane; ``partition=False``
    skips G (None) for USA, which never divides by it.
    """
    g, r, q = multipliers
    rho = np.asarray(rho_lm, dtype=np.complex128)
    if np.linalg.det(O) < 0:  # O = -R: evaluate at -R^T x, Y_lm(-v) = (-1)^l Y_lm(v)
        R = -O
        rho = np.where(sht.l % 2 == 0, rho, -rho)
    else:
        R = O
    if is_z_rotation(R):
        # a rotation about the z-axis (identity included) is a phase per order m: f(R^T x)
        # has coefficients a_lm e^{-i m alpha}; no Wigner rotation needed
        alpha = math.atan2(R[1, 0], R[0, 0])
        if alpha != 0.0:
            rho = rho * _z_phase(sht, alpha)
    else:
        rho = sht.rotate(rho, R)
    ll = sht.l
    G = sht.synthesis(g[ll] * rho) if partition else None
    Wr = sht.synthesis(r[ll] * rho) if radial else None
    wt, wp = sht.gradient(q[ll] * rho)
    return G, Wr, wt, wp


def _z_phase(sht, alpha: float) -> np.ndarray:
    """e^{-i m alpha} for the coefficients of ``sht``, cached on it (one alpha per solver)."""
    cache = getattr(sht, "_z_phase_cache", None)
    if cache is None or cache[0] != alpha:
        cache = (alpha, np.exp(-1j * alpha * sht.m))
        sht._z_phase_cache = cache
    return cache[1]


def attention_s2(rho_lm: np.ndarray, sht, c: float, O: np.ndarray, V: np.ndarray, beta: float,
                 normalized: bool, multipliers=None):
    r"""Attention output (before the tangent projection) on the grid of ``sht``.

    Parameters
    ----------
    rho_lm : (nlm,) coefficients of the density (layout of ``sht``)
    sht : :class:`spherepde.transforms.sht.SHTBackend` whose grid receives the field
    c, O : B = c·O, c > 0, O (3, 3) orthogonal
    V : (3, 3)
    beta : float, finite
    normalized : SA (True) or USA (False)
    multipliers : optional output of :func:`spherical_multipliers` (cached by the solver)

    Returns
    -------
    att : (nlat, nlon, 3) Cartesian attention output
    G : (nlat, nlon) :math:`e^{-\kappa}\int e^{\beta\langle x, By\rangle}\rho(y)\,dy`
    log_scale : float, kappa (multiply G by e^{log_scale} to undo the scaling)
    """
    kappa = beta * c
    mult = multipliers if multipliers is not None else spherical_multipliers(sht.lmax, kappa)
    G, Wr, wt, wp = funk_hecke_fields_s2(rho_lm, sht, O, mult)
    e_r, e_t, e_p = sht.grid().frame
    W = Wr[..., None] * e_r + wt[..., None] * e_t + wp[..., None] * e_p
    att = W @ (V @ O.T).T  # V O^T = A / c
    if normalized:
        att = att / G[..., None]
    else:
        att = att * usa_scale(kappa, beta)
    return att, G, kappa


def attention_s1(rho_k: np.ndarray, n: int, c: float, O: np.ndarray, V: np.ndarray,
                 beta: float, normalized: bool, multipliers=None):
    r"""Attention output on the S^1 grid :math:`\theta_j = 2\pi j/n`, from the Fourier
    coefficients ``rho_k`` (k = 0..K) of :math:`\rho(\theta) = \sum_{|k|\le K} \rho_k e^{ik\theta}`.

    With :math:`y = e^{i\varphi}` as a complex number,
    :math:`W(u) = \int e^{\kappa\cos(u-\varphi)} y\,\rho\,d\varphi = \sum_k 2\pi I_k(\kappa)
    \rho_{k-1} e^{iku}`, evaluated at :math:`u = O^\top x`.

    Returns
    -------
    att : (n, 2), G : (n,) scaled by e^{-kappa}, log_scale = kappa
    """
    K = rho_k.shape[0] - 1
    kappa = beta * c
    mult = multipliers if multipliers is not None else circular_multipliers(K + 1, kappa)
    # two-sided coefficients of rho, index k + K + 1 for k = -(K+1) .. K+1 (one spare each side)
    full = np.zeros(2 * K + 3, dtype=np.complex128)
    ks = np.arange(-(K + 1), K + 2)
    full[K + 1: 2 * K + 2] = rho_k
    full[1: K + 1] = np.conj(rho_k[1:][::-1])
    absk = np.abs(ks)
    Gk = mult[absk] * full
    shifted = np.zeros_like(full)  # rho_{k-1}
    shifted[1:] = full[:-1]
    Wk = mult[absk] * shifted
    if np.linalg.det(O) > 0:  # rotation by alpha: u = theta - alpha
        alpha = math.atan2(O[1, 0], O[0, 0])
        phase = np.exp(-1j * ks * alpha)
        Gk, Wk = Gk * phase, Wk * phase
    else:  # reflection across the axis at angle a: u = 2a - theta
        two_a = math.atan2(O[1, 0], O[0, 0])
        phase = np.exp(1j * ks * two_a)
        Gk, Wk = (Gk * phase)[::-1], (Wk * phase)[::-1]  # coefficient of e^{ik theta} from -k
    G = synthesize_two_sided(Gk, n).real
    Wc = synthesize_two_sided(Wk, n)
    W = np.stack([Wc.real, Wc.imag], axis=-1)
    att = W @ V.T  # W was evaluated at u = O^T x directly: no frame change here
    if normalized:
        att = att / G[:, None]
    else:
        att = att * usa_scale(kappa, beta)
    return att, G, kappa


class GeneralFunkHecke:
    r"""Sub-quadratic attention on S^2 for a general invertible B.

    With :math:`\kappa(x) = \beta|B^\top x|` and :math:`n(x) = B^\top x/|B^\top x|`, the kernel is
    :math:`e^{\kappa(x)\langle n(x), y\rangle}`: zonal around n(x) with a strength that varies
    with x between :math:`\beta\sigma_{\min}(B)` and :math:`\beta\sigma_{\max}(B)`. The scaled
    Funk–Hecke multipliers (g, r, q of :func:`spherical_multipliers`) are smooth in kappa, so
    they are expanded in P Chebyshev polynomials on that interval (P chosen so that the
    dropped coefficients are below ``tol`` of the largest), and for each term the fields G,
    W_r and grad Q are synthesized at the off-grid directions n(x) with ducc0's general
    (NUFFT-based) synthesis: O(P (L^2 log L + m)) per evaluation instead of O(m n) for the
    direct quadrature.

    Parameters
    ----------
    lmax : int
    points : (m, 3) where the attention is wanted
    B, V : (3, 3)
    beta : float
    normalized : bool
    tol : float
        Relative truncation of the Chebyshev series (and the NUFFT accuracy, >= 2e-13).
    max_terms : int
    """

    def __init__(self, lmax, points, B, V, beta, normalized, tol=1e-13, max_terms=96):
        import ducc0

        self._sht = ducc0.sht
        self.lmax, self.beta, self.normalized = int(lmax), float(beta), bool(normalized)
        self.V = np.asarray(V, dtype=np.float64)
        pts = np.asarray(points, dtype=np.float64).reshape(-1, 3)
        bx = pts @ np.asarray(B, dtype=np.float64)  # rows B^T x
        r = np.linalg.norm(bx, axis=-1)
        if np.any(r == 0):
            raise ValueError("B is singular: B^T x = 0 for some grid point")
        self.kappa = beta * r
        self.n = bx / r[:, None]
        self.loc = np.ascontiguousarray(np.stack(
            [np.arccos(np.clip(self.n[:, 2], -1, 1)),
             np.mod(np.arctan2(self.n[:, 1], self.n[:, 0]), 2 * np.pi)], axis=-1))
        th, ph = self.loc[:, 0], self.loc[:, 1]
        ct, st, cp, sp_ = np.cos(th), np.sin(th), np.cos(ph), np.sin(ph)
        self.e_t = np.stack([ct * cp, ct * sp_, -st], axis=-1)
        self.e_p = np.stack([-sp_, cp, np.zeros_like(cp)], axis=-1)
        self.eps = max(float(tol), 2.1e-13)
        sv = np.linalg.svd(np.asarray(B, dtype=np.float64), compute_uv=False)
        self.kmin, self.kmax_ = beta * sv[-1], beta * sv[0]
        if not normalized:
            check_usa_overflow(self.kmax_, beta)
        self.coef = self._chebyshev(tol, max_terms)  # (3, P, lmax + 1)
        half = 0.5 * (self.kmax_ - self.kmin)
        s = (self.kappa - 0.5 * (self.kmax_ + self.kmin)) / half if half > 0 else 0 * self.kappa
        P = self.coef.shape[1]
        self.T = np.cos(np.arange(P)[:, None] * np.arccos(np.clip(s, -1, 1))[None, :])  # (P, m)
        from ..transforms.sht import lm_arrays

        self.l, _ = lm_arrays(self.lmax)
        self.sq = np.sqrt(self.l * (self.l + 1.0))

    def _chebyshev(self, tol, max_terms):
        if self.kmax_ - self.kmin <= 1e-14 * max(1.0, self.kmax_):
            return np.stack(spherical_multipliers(self.lmax, self.kmin))[:, None, :]
        P = 8
        while True:
            nodes = np.cos(np.pi * (np.arange(P) + 0.5) / P)
            kap = 0.5 * (self.kmax_ + self.kmin) + 0.5 * (self.kmax_ - self.kmin) * nodes
            vals = np.stack([np.stack(spherical_multipliers(self.lmax, k)) for k in kap],
                            axis=1)  # (3, P, L + 1)
            # Chebyshev coefficients by the discrete cosine transform at the Chebyshev nodes
            Tm = np.cos(np.outer(np.arange(P), np.pi * (np.arange(P) + 0.5) / P))  # (P, P)
            c = (2.0 / P) * np.einsum("pj,ajl->apl", Tm, vals)
            c[:, 0] *= 0.5
            scale = np.abs(c).max(axis=1, keepdims=True) + 1e-300
            if np.all(np.abs(c[:, -2:]) <= tol * scale) or P >= max_terms:
                keep = P
                while keep > 1 and np.all(np.abs(c[:, keep - 1]) <= tol * scale[:, 0]):
                    keep -= 1
                return c[:, :keep]
            P *= 2

    def _synth(self, alm, spin):
        if spin == 0:
            return self._sht.synthesis_general(alm=alm[None], spin=0, lmax=self.lmax, loc=self.loc,
                                               epsilon=self.eps)[0]
        return self._sht.synthesis_general(alm=alm[None], spin=1, lmax=self.lmax, loc=self.loc,
                                           epsilon=self.eps, mode="GRAD_ONLY")

    def attention(self, rho_lm, partition: bool | None = None):
        """Attention output (m, 3) before the tangent projection, and the scaled partition
        e^{-kappa(x)} Z(x) (m,) (computed for SA, or when ``partition=True``; else None)."""
        want_G = self.normalized if partition is None else (partition or self.normalized)
        rho = np.asarray(rho_lm, dtype=np.complex128)
        l = self.l
        G = np.zeros(self.kappa.shape)
        Wr = np.zeros_like(G)
        wt = np.zeros_like(G)
        wp = np.zeros_like(G)
        for p in range(self.coef.shape[1]):
            Tp = self.T[p]
            if want_G:
                G += Tp * self._synth(self.coef[0, p][l] * rho, 0)
            Wr += Tp * self._synth(self.coef[1, p][l] * rho, 0)
            v = self._synth(self.coef[2, p][l] * self.sq * rho, 1)
            wt += Tp * v[0]
            wp += Tp * v[1]
        W = self.n * Wr[:, None] + self.e_t * wt[:, None] + self.e_p * wp[:, None]
        att = W @ self.V.T
        if self.normalized:
            return att / G[:, None], G
        return att * np.exp(self.kappa)[:, None], (G if want_G else None)
