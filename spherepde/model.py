r"""The attention model: weights Q, K, V, inverse temperature beta, SA / USA / beta = inf.

B = Q^T K (docs/theory.md), A = V B^T. The velocity of a token at x under a measure mu is

.. math::
    X[\mu](x) = P_x \frac{\int e^{\beta\langle x, By\rangle} V y\, d\mu(y)}
                         {\int e^{\beta\langle x, By\rangle}\, d\mu(y)}

(SA; USA drops the denominator). At beta = inf the local field
:math:`X_\infty(x) = P_x A x/|B^\top x|` is used, or hardmax on request.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import interaction
from .interaction.numerics import LOG_FLOAT_MAX
from .measures import Measure, PointCloud, as_point_cloud
from .sphere import as_points, tangent_projection

__all__ = ["Model", "AssumptionReport", "AssumptionError"]

#: Relative tolerance for "A is symmetric": ||A - A^T||_F <= tol * ||A||_F.
SYMMETRY_RTOL = 1e-10
#: Eigenvalues within this relative distance of mu_1 belong to the dominant eigenspace E.
EIGEN_RTOL = 1e-9
#: B counts as singular when its condition number exceeds this.
COND_MAX = 1e12


class AssumptionError(ValueError):
    """Raised when the projected limit is asked for but its assumptions fail."""


@dataclass
class AssumptionReport:
    """Structured check of the projected-limit assumptions (assumption 1 of the
    low-temperature paper).

    Attributes
    ----------
    B_invertible : bool
    B_condition : float
        2-norm condition number of B.
    A_symmetric : bool
    A_asymmetry : float
        ||A - A^T||_F / ||A||_F.
    symmetry_tol : float
    eigenvalues : (d,) eigenvalues of the symmetric part of A, descending
    gap : float
        gamma = mu_1 - mu_2 (mu_2 the largest eigenvalue outside E; inf if E = R^d).
    dim_E : int
    """

    B_invertible: bool
    B_condition: float
    A_symmetric: bool
    A_asymmetry: float
    symmetry_tol: float
    eigenvalues: np.ndarray
    gap: float
    dim_E: int
    problems: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        lines = [
            f"B invertible: {self.B_invertible} (condition number {self.B_condition:.3e})",
            f"A = V B^T symmetric: {self.A_symmetric} (||A-A^T||/||A|| = {self.A_asymmetry:.1e}, "
            f"tolerance {self.symmetry_tol:.0e})",
            f"eigenvalues of A: {np.array2string(self.eigenvalues, precision=6)}",
            f"spectral gap gamma = {self.gap:.6g}, dim E = {self.dim_E}",
        ]
        if self.problems:
            lines.append("problems: " + "; ".join(self.problems))
        return "\n".join(lines)


def _matrix(M, d, name):
    if M is None:
        return np.eye(d)
    M = np.asarray(M, dtype=np.float64)
    if M.shape != (d, d):
        raise ValueError(f"{name} must have shape (d, d) = ({d}, {d}); got {M.shape}")
    if not np.all(np.isfinite(M)):
        raise ValueError(f"{name} contains NaN or inf")
    return M


class Model:
    r"""Single-head self-attention dynamics on S^{d-1} (docs/theory.md).

    Parameters
    ----------
    Q, K, V : (d, d) arrays, optional
        Query, key and value matrices (default identity).
    beta : float in [0, inf]
        Inverse temperature; ``np.inf`` selects the zero-temperature dynamics.
    d : int
        Ambient dimension (inferred from Q, K or V when given).
    normalized : bool
        True: softmax attention (SA). False: unnormalized attention (USA).
    hardmax : bool
        At beta = inf, use hardmax (argmax over a discrete measure) instead of the local
        field X_inf of full-support measures.
    rescale_time : bool
        USA only. The USA field is of size up to :math:`e^{\beta\|B\|_2}` (the kernel's
        maximum over the sphere), so its time scale shrinks like :math:`e^{-\beta}`; at large
        beta an adaptive solver needs ~e^beta steps. With ``rescale_time=True`` the velocity is
        divided by the kernel's maximum (for B = I this is the rescaling t = tau e^{-beta} used
        for USA in Geshkovski, Letrouit, Polyanskiy, Rigollet, arXiv:2312.10794; see
        docs/theory.md §2.2). The USA field is linear in V, so this is done once: the model
        stores ``V * time_scale`` (``time_scale`` = :math:`e^{-\beta\|B\|_2}`) and every
        solver runs the rescaled dynamics unchanged. The state at time tau of the rescaled
        model is the plain USA state at time ``tau * time_scale``.

    Examples
    --------
    >>> import numpy as np, spherepde as sp
    >>> model = sp.Model(V=np.diag([2.0, 1.0, 0.5]), beta=np.inf)
    >>> model.check_assumptions().dim_E
    1
    """

    def __init__(self, Q=None, K=None, V=None, beta: float = 9.0, d: int | None = None,
                 normalized: bool = True, hardmax: bool = False, rescale_time: bool = False):
        given = [np.asarray(M).shape for M in (Q, K, V) if M is not None]
        if d is None:
            d = given[0][0] if given and len(given[0]) == 2 else 3
        if int(d) != d or d < 2:
            raise ValueError(f"d must be an integer >= 2; got {d!r}")
        d = int(d)
        self.d = d
        self.Q = _matrix(Q, d, "Q")
        self.K = _matrix(K, d, "K")
        self.V = _matrix(V, d, "V")
        try:
            beta = float(beta)
        except (TypeError, ValueError):
            raise ValueError(f"beta must be a number in [0, inf]; got {beta!r}") from None
        if np.isnan(beta) or beta < 0:
            raise ValueError(f"beta must lie in [0, inf] (np.inf for zero temperature); got {beta}")
        if np.isinf(beta) and not normalized and not hardmax:
            raise ValueError("beta = inf is defined for softmax attention only (the USA field "
                             "grows like e^beta); use normalized=True")
        self.beta = beta
        self.normalized = bool(normalized)
        self.hardmax = bool(hardmax)
        with np.errstate(over="ignore", invalid="ignore"):
            self.B = self.Q.T @ self.K
            AB = self.V @ self.B.T
        if not (np.all(np.isfinite(self.B)) and np.all(np.isfinite(AB))):
            big = max(float(np.abs(M).max()) for M in (self.Q, self.K, self.V))
            raise ValueError(f"B = Q^T K or A = V B^T overflows float64 (entries of Q, K, V up "
                             f"to {big:.3g}); scale the matrices down (beta sets the scale of "
                             "the attention)")
        #: Factor of the time change (1 unless ``rescale_time``): model time = USA time / it.
        self.time_scale = 1.0
        if rescale_time:
            if self.normalized:
                raise ValueError("rescale_time applies to USA (normalized=False): the SA field "
                                 "is bounded by |V| at every beta and needs no rescaling")
            log_kmax = beta * float(np.linalg.norm(self.B, 2))
            if log_kmax > LOG_FLOAT_MAX:
                raise ValueError(f"rescale_time: the USA kernel's maximum e^{log_kmax:.4g} "
                                 f"(beta |B|_2 = {log_kmax:.4g}) exceeds e^{LOG_FLOAT_MAX:g}, "
                                 "float64's limit less a margin for the sum over tokens; "
                                 "use normalized=True (SA) for such a cold model")
            self.time_scale = math.exp(-log_kmax)
            self.V = self.V * self.time_scale
        self.A = self.V @ self.B.T
        #: |B|_2: beta·|B|_2 bounds the logits beta <x, By> on the sphere
        self.B_norm = float(np.linalg.norm(self.B, 2))

    # ------------------------------------------------------------------ structure
    @property
    def zero_temperature(self) -> bool:
        return bool(np.isinf(self.beta))

    def check_assumptions(self) -> AssumptionReport:
        """Check the projected-limit assumptions: B invertible, A = V B^T symmetric, spectral
        gap gamma > 0."""
        sv = np.linalg.svd(self.B, compute_uv=False)
        cond = float(sv[0] / sv[-1]) if sv[-1] > 0 else np.inf
        top = float(np.abs(self.A).max())
        An = self.A / top if top > 0 else self.A  # scaled first: no overflow in the norm
        nA = np.linalg.norm(An)
        asym = float(np.linalg.norm(An - An.T) / nA) if nA > 0 else 0.0
        S = 0.5 * (self.A + self.A.T)
        ev = np.linalg.eigvalsh(S)[::-1]
        scale = max(1.0, abs(ev[0]))
        in_E = ev >= ev[0] - EIGEN_RTOL * scale
        dim_E = int(in_E.sum())
        gap = float(ev[0] - ev[dim_E]) if dim_E < self.d else np.inf
        problems = []
        if not cond < COND_MAX:
            problems.append(f"B = Q^T K is singular (condition number {cond:.2e} >= "
                            f"{COND_MAX:.0e})")
        if asym > SYMMETRY_RTOL:
            problems.append(f"A = V B^T is not symmetric (||A-A^T||/||A|| = {asym:.2e} > "
                            f"{SYMMETRY_RTOL:.0e})")
        if dim_E == self.d:
            problems.append("A has a single eigenvalue (no spectral gap): every direction is "
                            "dominant")
        return AssumptionReport(bool(cond < COND_MAX), cond, asym <= SYMMETRY_RTOL, asym,
                                SYMMETRY_RTOL, ev, gap, dim_E, problems)

    def dominant_subspace(self) -> np.ndarray:
        """Orthonormal basis (d, dim E) of E, the eigenspace of the largest eigenvalue of A.

        Raises AssumptionError, naming the failed assumption, when those of
        :meth:`check_assumptions` do not hold.
        """
        rep = self.check_assumptions()
        if not rep.ok:
            raise AssumptionError("the projected limit needs B invertible, A = V B^T symmetric "
                                  "and a spectral gap: "
                                  + "; ".join(rep.problems))
        w, U = np.linalg.eigh(0.5 * (self.A + self.A.T))
        return U[:, ::-1][:, : rep.dim_E]

    # ------------------------------------------------------------------ the limit
    def projection(self, x) -> np.ndarray:
        r"""The projection :math:`\Pi(x) = P_E x / |P_E x|`, x: (..., d) -> (..., d).

        Pi is undefined on E^perp; points there (|P_E x| < 1e-14) map to NaN.
        """
        x = as_points(x, self.d, name="x")
        U = self.dominant_subspace()
        px = (x @ U) @ U.T
        n = np.linalg.norm(px, axis=-1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 1e-14, px / np.where(n > 0, n, 1.0), np.nan)

    def limit_measure(self, mu0) -> PointCloud:
        r"""The projected measure :math:`\Pi_\# \mu_0` as a :class:`PointCloud`.

        When dim E = 1 the result is two atoms +-e carrying the masses of the half-spheres
        {+-<x, e> > 0}: by quadrature when mu0 is a known density, by summing weights when it
        is a point cloud. When dim E > 1, mu0 is (converted to) a point cloud and pushed
        forward point by point.
        """
        U = self.dominant_subspace()
        if isinstance(mu0, Measure):
            if mu0.d != self.d:
                raise ValueError(f"mu0 lives in d = {mu0.d}, the model in d = {self.d}")
            if U.shape[1] == 1:
                e = U[:, 0]
                m_plus = float(mu0.hemisphere_mass(e))
                return PointCloud(np.stack([e, -e]), np.array([m_plus, 1.0 - m_plus]))
        cloud = as_point_cloud(mu0)
        if cloud.d != self.d:
            raise ValueError(f"mu0 lives in d = {cloud.d}, the model in d = {self.d}")
        if U.shape[1] == 1:
            # Pi takes two values, +-e: merge the push-forward into two atoms.
            e = U[:, 0]
            s = cloud.points @ e
            if np.any((np.abs(s) < 1e-14) & (cloud.weights > 0)):
                raise ValueError("some points of mu0 lie on E^perp, where Pi is undefined; "
                                 "perturb them or remove them")
            m_plus = float(cloud.weights[s > 0].sum())
            m_minus = float(cloud.weights[s < 0].sum())
            tot = m_plus + m_minus
            return PointCloud(np.stack([e, -e]), np.array([m_plus, m_minus]) / tot)
        px = self.projection(cloud.points)
        bad = np.isnan(px[:, 0]) & (cloud.weights > 0)
        if np.any(bad):
            raise ValueError(f"{int(bad.sum())} point(s) of mu0 lie on E^perp, where Pi is "
                             "undefined; perturb them or remove them")
        keep = ~np.isnan(px[:, 0])
        w = cloud.weights[keep]
        return PointCloud(px[keep], w / w.sum())

    def _dominant_spectrum_of_V(self):
        """(eigenvalues, right eigenvectors R, R^-1, indices of the dominant ones): V = R Λ R^-1,
        dominant = largest real part (within EIGEN_RTOL)."""
        ev, R = np.linalg.eig(self.V)
        scale = max(1.0, float(np.abs(ev).max()))
        if np.linalg.cond(R) > 1.0 / (EIGEN_RTOL * 1e-3):
            raise AssumptionError("V is not diagonalisable (a Jordan block): the cluster flow's "
                                  "limit is not the projection onto an eigenspace; perturb V")
        top = float(ev.real.max())
        dom = np.flatnonzero(ev.real >= top - EIGEN_RTOL * scale)
        return ev, R, np.linalg.inv(R), dom

    def cluster_flow(self, x, t) -> np.ndarray:
        r"""The flow of a cluster that attends only to itself, :math:`\dot x = P_x V x`.

        Closed form: the normalised linear flow

        .. math:: \Phi_t(x) = e^{tV}x / |e^{tV}x|

        (differentiate: :math:`\dot\Phi = V\Phi - \langle\Phi, V\Phi\rangle\Phi`). At
        ``t = np.inf`` it is the limit, which exists when V's eigenvalues of largest real part
        are one real eigenvalue :math:`\lambda` (any multiplicity, V diagonalisable there):
        :math:`\Phi_\infty(x) = P x/|P x|` with P the spectral projector of V onto the
        eigenspace of :math:`\lambda`. For a simple :math:`\lambda` with right eigenvector v and
        left eigenvector u (:math:`u^\top V = \lambda u^\top`, :math:`\langle u, v\rangle > 0`)
        this is :math:`\mathrm{sign}\langle u, x\rangle\, v`: the side of the invariant
        hyperplane :math:`u^\perp` (not :math:`v^\perp` unless V is normal) decides the sign.
        Under SA (and for one cluster under USA, up to a speed factor) this is the motion
        of an atom whose attention falls on itself alone: docs/theory.md, terminal phase.

        Parameters
        ----------
        x : array_like (..., d)
            Points of the sphere.
        t : float
            Flow time, >= 0, or ``np.inf`` for the limit.

        Returns
        -------
        (..., d) array; NaN rows at ``t = inf`` for points with :math:`Px = 0` (no limit
        on the dominant eigenspace).

        Raises
        ------
        AssumptionError
            At ``t = inf`` when the dominant eigenvalues of V are a complex pair (the flow
            keeps turning in their real invariant plane and has no limit), or V is not
            diagonalisable.

        Examples
        --------
        >>> import numpy as np, spherepde as sp
        >>> m = sp.Model(V=np.diag([2.0, 1.0, 0.5]), beta=np.inf)
        >>> m.cluster_flow([[0.6, 0.8, 0.0]], np.inf)
        array([[1., 0., 0.]])
        """
        x = as_points(x, self.d, name="x")
        t = float(t)
        if not t >= 0:
            raise ValueError(f"t must be >= 0 (or np.inf); got {t}")
        ev, R, Rinv, dom = self._dominant_spectrum_of_V()
        if np.isinf(t):
            if np.abs(ev[dom].imag).max() > EIGEN_RTOL * max(1.0, float(np.abs(ev).max())):
                raise AssumptionError(
                    f"V's dominant eigenvalues {np.round(ev[dom], 6).tolist()} are a complex "
                    "pair: the cluster flow turns in their real invariant plane forever and has "
                    "no limit; ask for a finite t")
            if dom.size == 1:
                # sign<u, x> v exactly, so that the limits of many points coincide bit for bit
                v = np.real(R[:, dom[0]])
                v = v / np.linalg.norm(v)
                u = np.real(Rinv[dom[0], :]) * np.sign(np.real(Rinv[dom[0], :] @ R[:, dom[0]]))
                s = x @ u
                tiny = 1e-12 * np.linalg.norm(u) * np.linalg.norm(x, axis=-1)
                with np.errstate(invalid="ignore"):
                    return np.where((np.abs(s) > tiny)[..., None], np.sign(s)[..., None] * v,
                                    np.nan)
            P = np.real(R[:, dom] @ Rinv[dom, :])
            y = x @ P.T
        else:
            from scipy.linalg import expm

            # shifted by the top growth rate, so that e^{tV} does not overflow for long times
            y = x @ expm(t * (self.V - float(ev.real.max()) * np.eye(self.d))).T
        n = np.linalg.norm(y, axis=-1, keepdims=True)
        tiny = 1e-12 * np.linalg.norm(x, axis=-1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > tiny, y / np.where(n > 0, n, 1.0), np.nan)

    def terminal_measure(self, mu0, t=np.inf) -> PointCloud:
        r"""The conjectured terminal measure :math:`(\Phi_t)_\#\Pi_\#\mu_0`: each atom of the
        projected limit moved by the cluster flow :meth:`cluster_flow`.

        At ``t = np.inf`` (V's dominant eigenvalue real) the atoms land on V's dominant
        eigenspace: for a simple eigenvalue, two atoms :math:`\pm v` carrying the masses of
        :math:`\Pi_\#\mu_0` on the two sides of :math:`u^\perp` (u the left eigenvector). At a
        finite t (any V, a complex dominant pair included) it is the projected limit moved
        for a time t, the orbit along which a lone cluster travels.

        Parameters
        ----------
        mu0 : Measure or PointCloud
            The initial measure (passed to :meth:`limit_measure`).
        t : float
            Flow time >= 0, or ``np.inf``.

        Returns
        -------
        PointCloud, coinciding atoms merged, weights summing to 1.

        Raises
        ------
        ValueError
            When atoms of :math:`\Pi_\#\mu_0` with positive mass lie on :math:`u^\perp`
            (``t = inf``), where the limit is undefined.
        """
        limit = self.limit_measure(mu0)
        y = self.cluster_flow(limit.points, t)
        bad = np.isnan(y[:, 0]) & (limit.weights > 0)
        if np.any(bad):
            raise ValueError(f"{int(bad.sum())} atom(s) of Pi#mu0 lie on the invariant "
                             "hyperplane where the cluster flow has no limit on V's dominant "
                             "eigenspace; perturb mu0 or V")
        keep = ~np.isnan(y[:, 0])
        key = np.round(y[keep], 12)
        _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
        w = np.bincount(inv.ravel(), weights=limit.weights[keep], minlength=first.size)
        return PointCloud(y[keep][first], w / w.sum())

    # ------------------------------------------------------------------ velocity
    def bind(self, points, weights=None, kernel: str = "auto", options=None, *,
             n_queries: int | None = None, profile=None):
        r"""The attention of the measure :math:`\sum_j w_j\delta_{p_j}` (finite beta) as an
        evaluator ``x (m, d) -> (output (m, d) before P_x, stats)``.

        ``kernel``: a name of :data:`spherepde.interaction.KERNELS` or "auto", resolved by
        :func:`spherepde.interaction.resolve_kernel` for ``n_queries`` (default: as many as
        atoms) under ``profile``; ``options``: that kernel's options
        (:class:`spherepde.interaction.HarmonicOptions` for "harmonic"). Returns
        ``(name, evaluator)``."""
        points = np.asarray(points, dtype=np.float64)
        n = points.shape[0]
        if weights is None:
            weights = np.full(n, 1.0 / n)
        problem = interaction.KernelProblem(n if n_queries is None else int(n_queries), n,
                                            self.d, self.beta * self.B_norm)
        name = interaction.resolve_kernel(kernel, problem, profile)
        impl = interaction.KERNELS.get(name)
        return name, impl.bind(self, points, weights,
                               options if name == "harmonic" else None)

    def attention(self, x, points, weights=None, kernel: str = "auto",
                  options=None) -> np.ndarray:
        """Attention output before the tangent projection, x: (m, d) -> (m, d).

        ``kernel``: an interaction kernel of :data:`spherepde.interaction.KERNELS` or "auto"
        (:func:`spherepde.interaction.resolve_kernel`, which also weighs the harmonic kernel
        on S^1 and S^2); ``options``: the harmonic kernel's
        :class:`spherepde.interaction.HarmonicOptions`."""
        if self.zero_temperature and not self.hardmax:
            return interaction.zero_temperature_attention(x, self.A, self.B)
        if self.zero_temperature:
            n = points.shape[0]
            w = np.full(n, 1.0 / n) if weights is None else weights
            return interaction.hardmax_attention(x, points @ self.B.T, points @ self.V.T, w)
        _, evaluate = self.bind(points, weights, kernel, options, n_queries=x.shape[0])
        return evaluate(x)[0]

    def velocity(self, x, points=None, weights=None, kernel: str = "auto") -> np.ndarray:
        r"""The velocity :math:`X[\mu](x)` for :math:`\mu = \sum_j w_j \delta_{p_j}`.

        Parameters
        ----------
        x : (..., d) points on the sphere where the field is evaluated
        points : (n, d) atoms of mu (ignored by the beta = inf local field, may be None there)
        weights : (n,), optional
            Non-negative, summing to 1 (default uniform).
        kernel : str
            Interaction kernel: "auto", or a name of :data:`spherepde.interaction.KERNELS`
            ("numpy", "numba", "torch", "harmonic", ...).

        Returns
        -------
        (..., d) tangent vectors.
        """
        x = as_points(x, self.d, name="x")
        shape = x.shape
        xf = x.reshape(-1, self.d)
        if self.zero_temperature and not self.hardmax:
            out = interaction.zero_temperature_attention(xf, self.A, self.B)
        else:
            if points is None:
                raise ValueError("velocity needs the measure's points (n, d) at finite beta")
            cloud = PointCloud(points, weights)
            if cloud.d != self.d:
                raise ValueError(f"points have d = {cloud.d}, the model d = {self.d}")
            out = self.attention(xf, cloud.points, cloud.weights, kernel=kernel)
        return tangent_projection(xf, out).reshape(shape)

    def to_arrays(self) -> dict:
        """The model as numpy arrays, for saving next to results (see :meth:`from_arrays`).
        V is the V the dynamics uses (already multiplied by ``time_scale``)."""
        return dict(Q=self.Q, K=self.K, V=self.V, beta=np.float64(self.beta),
                    normalized=np.bool_(self.normalized), hardmax=np.bool_(self.hardmax),
                    d=np.int64(self.d), time_scale=np.float64(self.time_scale))

    @classmethod
    def from_arrays(cls, z) -> "Model":
        """Rebuild a model from the arrays of :meth:`to_arrays` (any mapping, e.g. an NpzFile)."""
        hardmax = bool(z["hardmax"]) if "hardmax" in z else False
        model = cls(z["Q"], z["K"], z["V"], beta=float(z["beta"]), d=int(z["Q"].shape[0]),
                    normalized=bool(z["normalized"]), hardmax=hardmax)
        if "time_scale" in z:  # V was saved rescaled: keep the record of the time change
            model.time_scale = float(z["time_scale"])
        return model

    def __repr__(self) -> str:
        kind = "SA" if self.normalized else "USA"
        if self.time_scale != 1.0:
            kind += f", time rescaled by {self.time_scale:.3g}"
        return f"Model(d={self.d}, beta={self.beta:g}, {kind}{', hardmax' if self.hardmax else ''})"
