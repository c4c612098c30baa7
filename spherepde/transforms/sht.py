r"""A thin layer over the spherical-harmonic transform (SHT) libraries: shtns when importable,
ducc0 otherwise.

Conventions shared by every backend (and checked against each other in
``tests/test_sht_backends.py``):

- Real fields on a Gauss–Legendre grid of ``nlat`` colatitudes (theta ascending, i.e.
  :math:`\cos\theta` descending, as :class:`spherepde.sphere.GaussGrid`) and ``nlon``
  longitudes :math:`\phi_k = 2\pi k/n_{lon}`; arrays have shape ``(nlat, nlon)``.
- Orthonormal complex harmonics with the Condon–Shortley phase; a real field is stored by its
  coefficients :math:`a_{\ell m}`, :math:`m \ge 0`, so that
  :math:`f = \sum_\ell a_{\ell 0} Y_{\ell 0} + 2\,\mathrm{Re}\sum_{m>0} a_{\ell m} Y_{\ell m}`,
  in the m-major ("healpy") order (0,0), (1,0), …, (L,0), (1,1), …, (L,L); see :func:`lm_arrays`.
- Tangent vector fields are given by their components ``(v_theta, v_phi)`` on the unit vectors
  :math:`e_\theta` (pointing south) and :math:`e_\phi` (pointing east). The spheroidal/toroidal
  split is :math:`v = \nabla S + \hat r\times\nabla T`, so :math:`\operatorname{div} v =
  \Delta S = -\ell(\ell+1) S_{\ell m}`.
- :meth:`SHTBackend.rotate` returns the coefficients of :math:`x \mapsto f(R^\top x)` for a
  rotation R (the active rotation of f by R).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..registry import Registry
from ..sphere import check_rotation, euler_zyz

__all__ = ["SHTBackend", "ShtnsBackend", "Ducc0Backend", "SHT_LIBRARIES", "available_backends",
           "get_backend", "lm_arrays", "fft_size", "evaluate_points", "ducc0_locations"]


def lm_arrays(lmax: int):
    """Degree and order (l, m) of every coefficient in the m-major layout, each (nlm,)."""
    ls = np.concatenate([np.arange(m, lmax + 1) for m in range(lmax + 1)])
    ms = np.concatenate([np.full(lmax + 1 - m, m) for m in range(lmax + 1)])
    return ls, ms


def fft_size(n: int) -> int:
    """The smallest even integer >= n whose prime factors are 2, 3 and 5 (fast FFTs)."""
    n = max(2, int(n))
    while True:
        k = n
        for p in (2, 3, 5):
            while k % p == 0:
                k //= p
        if k == 1 and n % 2 == 0:
            return n
        n += 1


class SHTBackend:
    """Real scalar and vector spherical-harmonic transforms on one Gauss–Legendre grid.

    Parameters
    ----------
    lmax : int
        Largest degree (triangular truncation, mmax = lmax).
    nlat, nlon : int
        Grid size; exactness of the analysis needs ``nlat >= lmax + 1``, ``nlon >= 2 lmax + 1``
        for band-limited fields (more for products, see the solver's 3/2 rule).
    """

    name = "abstract"
    #: The smallest number of latitudes the library accepts.
    min_nlat = 1

    def __init__(self, lmax: int, nlat: int, nlon: int):
        lmax, nlat, nlon = int(lmax), int(nlat), int(nlon)
        if lmax < 0:
            raise ValueError(f"lmax must be >= 0; got {lmax}")
        if nlat < max(lmax + 1, self.min_nlat) or nlon < 2 * lmax + 1:
            raise ValueError(f"a degree-{lmax} transform needs nlat >= "
                             f"{max(lmax + 1, self.min_nlat)} and nlon >= {2 * lmax + 1} with the "
                             f"{self.name} backend; got nlat = {nlat}, nlon = {nlon}")
        self.lmax, self.nlat, self.nlon = lmax, nlat, nlon
        self.l, self.m = lm_arrays(lmax)
        self.nlm = self.l.size
        self.llp1 = (self.l * (self.l + 1)).astype(np.float64)
        self._grid = None

    # --- to be provided by subclasses
    def analysis(self, f: np.ndarray) -> np.ndarray:
        """Coefficients (nlm,) complex of a real field f: (nlat, nlon)."""
        raise NotImplementedError

    def synthesis(self, alm: np.ndarray) -> np.ndarray:
        """Real field (nlat, nlon) from coefficients (nlm,)."""
        raise NotImplementedError

    def vector_synthesis(self, slm: np.ndarray, tlm: np.ndarray | None = None):
        r"""(v_theta, v_phi) of :math:`\nabla S + \hat r\times\nabla T`, each (nlat, nlon)."""
        raise NotImplementedError

    def vector_analysis(self, vt: np.ndarray, vp: np.ndarray):
        """Spheroidal and toroidal coefficients (S, T), each (nlm,), of a tangent field."""
        raise NotImplementedError

    def rotate(self, alm: np.ndarray, R: np.ndarray) -> np.ndarray:
        r"""Coefficients of :math:`x\mapsto f(R^\top x)`; R: (3, 3) rotation."""
        raise NotImplementedError

    # --- derived operations
    def gradient(self, alm: np.ndarray):
        """Surface gradient (v_theta, v_phi) of the field with coefficients alm."""
        return self.vector_synthesis(alm, None)

    def divergence(self, vt: np.ndarray, vp: np.ndarray) -> np.ndarray:
        r"""Coefficients of :math:`\operatorname{div}_S v` (exact for band-limited v)."""
        s, _ = self.vector_analysis(vt, vp)
        return -self.llp1 * s

    def grid(self):
        """The transform's Gauss grid (:class:`spherepde.sphere.GaussGrid`), built once."""
        if self._grid is None:
            from ..sphere import GaussGrid

            self._grid = GaussGrid(self.nlat, self.nlon)
        return self._grid

    def __repr__(self) -> str:
        return f"{type(self).__name__}(lmax={self.lmax}, nlat={self.nlat}, nlon={self.nlon})"


def _import_shtns():
    """Import shtns, silencing the version banner its import prints (through Python's stdout
    or C's, depending on the build)."""
    import contextlib
    import io
    import os
    import sys

    mod = sys.modules.get("shtns")
    if mod is not None:
        return mod
    if "shtns" in sys.modules:  # set to None: import blocked (as in the fallback test)
        raise ImportError("shtns import is blocked")
    saved = None
    try:
        sys.stdout.flush()
        saved = os.dup(1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no usable fd 1: let the banner through
        saved = None
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            import shtns
    finally:
        if saved is not None:
            try:
                import ctypes

                ctypes.CDLL(None).fflush(None)
            except Exception:
                pass
            os.dup2(saved, 1)
            os.close(saved)
    return shtns


class ShtnsBackend(SHTBackend):
    """shtns (Schaeffer 2013), orthonormal harmonics with Condon–Shortley phase."""

    name = "shtns"
    min_nlat = 32  # shtns refuses smaller Gauss grids

    def __init__(self, lmax, nlat, nlon, nthreads: int = 1):
        super().__init__(lmax, nlat, nlon)
        shtns = _import_shtns()
        self._shtns = shtns
        # One thread by default: shtns' OpenMP threads spin-wait, and on a loaded machine
        # (or inside a parallel test run) that made one transform 80x slower (measured).
        sh = shtns.sht(self.lmax, self.lmax, 1, shtns.sht_orthonormal, int(nthreads))
        # sht_quick_init: Gauss grid, no timing-based algorithm choice (deterministic set-up)
        sh.set_grid(self.nlat, self.nlon, shtns.sht_quick_init | shtns.SHT_PHI_CONTIGUOUS, 1e-10)
        if sh.nlat != self.nlat or sh.nphi != self.nlon:
            raise RuntimeError(f"shtns changed the grid to {sh.nlat} x {sh.nphi}")
        self._sh = sh
        self._rot = None

    def analysis(self, f):
        return self._sh.analys(np.ascontiguousarray(f, dtype=np.float64))

    def synthesis(self, alm):
        return self._sh.synth(np.ascontiguousarray(alm, dtype=np.complex128))

    def vector_synthesis(self, slm, tlm=None):
        slm = np.ascontiguousarray(slm, dtype=np.complex128)
        if tlm is None:
            return self._sh.synth_grad(slm)
        # shtns' toroidal part is curl(T r) = -r x grad T: flip T to our convention
        return self._sh.synth(slm, -np.ascontiguousarray(tlm, dtype=np.complex128))

    def vector_analysis(self, vt, vp):
        s, t = self._sh.analys(np.ascontiguousarray(vt, dtype=np.float64),
                               np.ascontiguousarray(vp, dtype=np.float64))
        return s, -t

    #: Rotate coefficients with ducc0 when it imports: same layout and conventions (both paths
    #: are tested against direct evaluation), and 5x faster than shtns' rotation at L = 255.
    rotate_with_ducc0 = True

    def rotate(self, alm, R):
        R = check_rotation(R)
        a, b, c = euler_zyz(R)
        if self.rotate_with_ducc0:
            import ducc0

            return ducc0.sht.rotate_alm(np.ascontiguousarray(alm, dtype=np.complex128),
                                        self.lmax, c, b, a)
        rot = self._shtns.rotation(self.lmax)
        # shtns takes the angles in the opposite order for the same active rotation
        # R = Rz(a) Ry(b) Rz(c) (checked against direct evaluation in the tests).
        rot.set_angles_ZYZ(c, b, a)
        return rot.apply_real(np.ascontiguousarray(alm, dtype=np.complex128))


class Ducc0Backend(SHTBackend):
    """ducc0.sht (Reinecke), the healpy conventions; spin-1 transforms for vector fields."""

    name = "ducc0"

    def __init__(self, lmax, nlat, nlon, nthreads: int = 1):
        super().__init__(lmax, nlat, nlon)
        import ducc0

        self._sht = ducc0.sht
        self.nthreads = int(nthreads)
        self._sq = np.sqrt(self.llp1)
        self._inv_sq = np.where(self.l > 0, 1.0 / np.where(self.l > 0, self._sq, 1.0), 0.0)
        self._kw = dict(lmax=self.lmax, geometry="GL", nthreads=self.nthreads)

    def analysis(self, f):
        f = np.ascontiguousarray(f, dtype=np.float64)[None]
        return self._sht.analysis_2d(map=f, spin=0, **self._kw)[0]

    def synthesis(self, alm):
        alm = np.ascontiguousarray(alm, dtype=np.complex128)[None]
        return self._sht.synthesis_2d(alm=alm, spin=0, ntheta=self.nlat, nphi=self.nlon,
                                      **self._kw)[0]

    def vector_synthesis(self, slm, tlm=None):
        # ducc0's spin-1 E/B coefficients are sqrt(l(l+1)) times the spheroidal/toroidal ones.
        e = np.asarray(slm, dtype=np.complex128) * self._sq
        b = np.zeros_like(e) if tlm is None else np.asarray(tlm, dtype=np.complex128) * self._sq
        v = self._sht.synthesis_2d(alm=np.stack([e, b]), spin=1, ntheta=self.nlat,
                                   nphi=self.nlon, **self._kw)
        return v[0], v[1]

    def vector_analysis(self, vt, vp):
        v = np.stack([np.asarray(vt, dtype=np.float64), np.asarray(vp, dtype=np.float64)])
        eb = self._sht.analysis_2d(map=v, spin=1, **self._kw)
        return eb[0] * self._inv_sq, eb[1] * self._inv_sq

    def rotate(self, alm, R):
        R = check_rotation(R)
        a, b, c = euler_zyz(R)
        # ducc0: active rotation R_z(phi) R_y(theta) R_z(psi), called as (psi, theta, phi).
        return self._sht.rotate_alm(np.ascontiguousarray(alm, dtype=np.complex128), self.lmax,
                                    c, b, a)


#: The SHT libraries, preferred first ("auto" takes the first installed one).
SHT_LIBRARIES = Registry("SHT library")
SHT_LIBRARIES.register("shtns", ShtnsBackend, requires=_import_shtns)
SHT_LIBRARIES.register("ducc0", Ducc0Backend, requires="ducc0")


def available_backends() -> list[str]:
    """Names of the SHT libraries that import here, preferred first."""
    return SHT_LIBRARIES.available()


def get_backend(name: str = "auto"):
    """The transform class for the SHT library ``name`` ("auto": shtns when importable, ducc0
    otherwise)."""
    if name == "auto":
        avail = available_backends()
        if not avail:
            raise ImportError("the spectral solver needs shtns or ducc0: pip install ducc0")
        return SHT_LIBRARIES.get(avail[0])
    return SHT_LIBRARIES.get(name)


#: evaluate_points(method="auto") sums directly below this many point·coefficient products
#: and uses ducc0's non-equispaced synthesis above (the direct sum is a Python loop over
#: lmax^2 terms: 4.9 s for a 90 x 180 plot grid at lmax = 128).
DIRECT_EVALUATION_MAX = 1 << 22
#: Accuracy asked of ducc0.sht.synthesis_general (relative to the coefficients' l1 size; the
#: smallest it accepts in double precision is about 2e-13).
GENERAL_SYNTHESIS_EPS = 1e-12


def evaluate_points(alm: np.ndarray, lmax: int, x: np.ndarray, method: str = "auto") -> np.ndarray:
    r"""Evaluate the real field with coefficients ``alm`` (layout of :func:`lm_arrays`) at
    arbitrary points x: (..., 3) on the unit sphere. Returns (...).

    ``method="direct"``: a library-independent direct sum, O(lmax^2) per point, by the
    standard stable three-term recursion for orthonormal associated Legendre functions (with
    Condon–Shortley phase); the reference the transform libraries are tested against.
    ``method="ducc0"``: ducc0's non-equispaced synthesis (same layout and conventions),
    O(lmax^2 log lmax + points), accurate to about :data:`GENERAL_SYNTHESIS_EPS` relative to
    the coefficients. ``"auto"`` takes the direct sum for small problems
    (:data:`DIRECT_EVALUATION_MAX`). ``alm`` may carry leading axes: (k, nlm) gives (k, ...).
    """
    if method not in ("auto", "direct", "ducc0"):
        raise ValueError(f"method must be 'auto', 'direct' or 'ducc0'; got {method!r}")
    x = np.asarray(x, dtype=np.float64)
    npts = int(np.prod(x.shape[:-1]))
    if method == "ducc0" or (method == "auto" and npts * (lmax + 1) ** 2 > DIRECT_EVALUATION_MAX):
        return _evaluate_ducc0(alm, lmax, x)
    return _evaluate_direct(alm, lmax, x)


def ducc0_locations(n: np.ndarray) -> np.ndarray:
    """(theta, phi) of unit vectors n: (m, 3), as ducc0 wants them: (m, 2) contiguous, phi in
    [0, 2 pi)."""
    loc = np.empty((n.shape[0], 2))
    _colatitude_longitude(np.ascontiguousarray(n), loc)
    return loc


@njit(parallel=True, cache=True)
def _colatitude_longitude(n, loc):
    two_pi = 2.0 * np.pi
    for i in prange(n.shape[0]):
        loc[i, 0] = np.arccos(min(1.0, max(-1.0, n[i, 2])))
        phi = np.arctan2(n[i, 1], n[i, 0])
        loc[i, 1] = phi + two_pi if phi < 0 else phi


def _evaluate_ducc0(alm, lmax, x):
    import ducc0

    shape = x.shape[:-1]
    xf = x.reshape(-1, 3)
    loc = ducc0_locations(xf / np.linalg.norm(xf, axis=1, keepdims=True))
    alm = np.asarray(alm, dtype=np.complex128)
    lead = alm.shape[:-1]
    a2 = alm.reshape(-1, alm.shape[-1])
    out = np.stack([ducc0.sht.synthesis_general(alm=np.ascontiguousarray(a)[None], spin=0,
                                                lmax=lmax, loc=loc, epsilon=GENERAL_SYNTHESIS_EPS,
                                                nthreads=0)[0] for a in a2])
    return out.reshape(lead + shape)


def _evaluate_direct(alm, lmax, x):
    shape = x.shape[:-1]
    xf = x.reshape(-1, 3)
    ct = np.clip(xf[:, 2], -1.0, 1.0)
    st = np.sqrt(np.maximum(0.0, 1.0 - ct * ct))
    phi = np.arctan2(xf[:, 1], xf[:, 0])
    alm = np.asarray(alm, dtype=np.complex128)
    lead = alm.shape[:-1]
    a2 = alm.reshape(-1, alm.shape[-1])
    out = np.zeros((a2.shape[0], xf.shape[0]))
    pmm = np.full(xf.shape[0], 1.0 / math.sqrt(4.0 * math.pi))
    start = 0
    for m in range(lmax + 1):
        if m > 0:
            pmm = -math.sqrt((2 * m + 1) / (2.0 * m)) * st * pmm
        nl = lmax + 1 - m
        coef = a2[:, start:start + nl]
        start += nl
        p_prev2, p_prev = None, pmm
        acc = coef[:, :1] * p_prev[None, :]
        if nl > 1:
            p = math.sqrt(2 * m + 3) * ct * pmm
            acc = acc + coef[:, 1:2] * p[None, :]
            p_prev2, p_prev = pmm, p
            for j in range(2, nl):
                ell = m + j
                a = math.sqrt((4.0 * ell * ell - 1.0) / (ell * ell - m * m))
                b = math.sqrt(((ell - 1.0) ** 2 - m * m) / (4.0 * (ell - 1.0) ** 2 - 1.0))
                p = a * (ct * p_prev - b * p_prev2)
                acc = acc + coef[:, j:j + 1] * p[None, :]
                p_prev2, p_prev = p_prev, p
        if m == 0:
            out += acc.real
        else:
            out += 2.0 * (acc * np.exp(1j * m * phi)[None, :]).real
    return out.reshape(lead + shape)
