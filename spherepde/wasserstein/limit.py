"""W2 to the projected limit Pi#rho0, and the particle coupling bound."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..measures import PointCloud

__all__ = ["coupling_bound", "W2Curve", "w2_to_limit"]


def coupling_bound(trajectory_or_points, model, weights=None) -> np.ndarray:
    r"""The particle coupling bound (chordal cost), for each time of a trajectory:

    .. math:: W_2(\mu^N_t, \Pi_\#\mu^N_0)^2 \le \sum_i w_i |x_i(t) - \Pi(x_i(0))|^2,

    the cost of the coupling that sends each particle to the projection of its start.

    Parameters
    ----------
    trajectory_or_points : Trajectory or array_like (T, N, d)
        A particle trajectory (``positions`` (T, N, d), ``weights`` (N,)) or positions whose
        first slice is the initial configuration.
    model : Model
        Supplies Pi (docs/theory.md); defaults to ``trajectory.model``.
    weights : (N,), optional
        Particle weights for an array input (default uniform).

    Returns
    -------
    (T,) array of upper bounds on W2 (not squared).
    """
    obj = trajectory_or_points
    if hasattr(obj, "positions"):
        X = np.asarray(obj.positions, dtype=np.float64)
        if weights is None:
            weights = getattr(obj, "weights", None)
        if model is None:
            model = obj.model
    else:
        X = np.asarray(obj, dtype=np.float64)
    if model is None:
        raise ValueError("coupling_bound needs a model (for the projection Pi)")
    if X.ndim == 2:
        X = X[None]
    if X.ndim != 3:
        raise ValueError(f"positions must have shape (T, N, d); got {X.shape}")
    N = X.shape[1]
    w = np.full(N, 1.0 / N) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (N,):
        raise ValueError(f"weights must have shape ({N},); got {w.shape}")
    # A trajectory that kept a subset of tokens stores their weights as they were (summing to
    # k/N): the bound is for the subset's own probability measure.
    w = w / w.sum()
    target = model.projection(X[0])
    bad = np.isnan(target[:, 0]) & (w > 0)
    if np.any(bad):
        raise ValueError(f"{int(bad.sum())} initial particle(s) lie on E^perp, where Pi is "
                         "undefined; perturb them")
    target = np.where(np.isnan(target), 0.0, target)
    sq = np.einsum("tnd,tnd->tn", X - target, X - target)
    return np.sqrt(sq @ w)


@dataclass
class W2Curve:
    """t -> W2(rho_t, Pi#rho0), as returned by :func:`w2_to_limit`.

    Attributes
    ----------
    times : (T,) array
    values : (T,) array of W2 (not squared)
    errors : (T,) array of the methods' stated errors (half-widths of the brackets)
    methods : list of str, the method used at each time
    cost : str
    limit : PointCloud, the limit measure Pi#rho0
    bound : (T,) array or None, the particle coupling bound (trajectories only)
    results : list of W2Result
    lower, upper : (T,) arrays, the certified brackets lower <= W2 <= upper (for particles the
        upper bound is also capped by the coupling bound, itself a feasible coupling's cost)
    """

    times: np.ndarray
    values: np.ndarray
    errors: np.ndarray
    methods: list
    cost: str
    limit: PointCloud
    bound: np.ndarray | None = None
    results: list = field(default_factory=list, repr=False)
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None

    def __repr__(self) -> str:
        return (f"W2Curve(T={len(self.times)}, cost={self.cost!r}, "
                f"methods={sorted(set(self.methods))}, min W2={np.min(self.values):.4g})")


def _merge_atoms(cloud: PointCloud, decimals: int = 12) -> PointCloud:
    """Merge points that coincide to ``decimals`` digits (e.g. N projected particles at +-e)."""
    key = np.round(cloud.points, decimals)
    _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
    if first.size == cloud.n:
        return cloud
    w = np.bincount(inv.ravel(), weights=cloud.weights, minlength=first.size)
    return PointCloud(cloud.points[first], w / w.sum())


def w2_to_limit(solution_or_trajectory, model=None, cost: str = "chordal", method: str = "auto",
                bound: bool = True, **options) -> W2Curve:
    r"""The curve :math:`t \mapsto W_2(\rho_t, \Pi_\#\rho_0)` for either solver, with bounds.

    Parameters
    ----------
    solution_or_trajectory :
        Anything with ``times``, ``measure(i)`` (a PointCloud at ``times[i]``) and
        ``initial_measure`` (the rho0 it started from): a particle Trajectory or a density
        solution.
    model : Model, optional
        Defaults to ``solution_or_trajectory.model``.
    cost, method, **options :
        Passed to :func:`~spherepde.wasserstein.w2` at every time (e.g. ``tol``).
    bound : bool
        For particle trajectories (objects with ``positions``), also return the coupling bound.

    Returns
    -------
    W2Curve
        ``values`` with certified ``lower`` / ``upper`` arrays. When dim E = 1 the limit is
        two atoms (semi-discrete, exact); when dim E = 2 it is a measure on the great circle
        of E, and the chordal cost goes to the circle solver with E's basis as its plane
        (the geodesic cost to the multiscale solver, which clusters the limit once for all
        times).
    """
    from . import w2
    from .multiscale import hierarchy

    obj = solution_or_trajectory
    model = getattr(obj, "model", None) if model is None else model
    if model is None:
        raise ValueError("w2_to_limit needs a model (pass model=, or a solution that carries one)")
    for attr in ("times", "measure", "initial_measure"):
        if not hasattr(obj, attr):
            raise TypeError(f"{type(obj).__name__} has no {attr!r}; pass a particle Trajectory or "
                            "a density solution")
    mu0 = obj.initial_measure
    if mu0 is None:
        raise ValueError(f"this {type(obj).__name__} carries no initial measure (a solution read "
                         "back with load() does not store it); compute the curve on the solution "
                         "returned by solve(), or set its initial_measure")
    idx = getattr(obj, "token_index", None)
    if idx is not None and hasattr(mu0, "n") and len(idx) < mu0.n:
        mu0 = obj.measure(0)  # a trajectory that kept a subset of tokens: its own start
    # Projected particles pile up on few points (two when dim E = 1): merging them lets the
    # semi-discrete solver treat them as atoms.
    limit = _merge_atoms(model.limit_measure(mu0))
    times = np.asarray(obj.times, dtype=np.float64)
    results = []
    levels = None
    # dim E = 2: the limit lies on the great circle of E, known here without fitting a plane.
    U = model.dominant_subspace()
    circle = (U.shape[1] == 2 and cost == "chordal" and method in ("auto", "circle")
              and "plane" not in options)
    for i in range(len(times)):
        mu = obj.measure(i)
        opts = dict(options)
        if circle:
            opts["plane"] = U
        elif method in ("auto", "multiscale", "sinkhorn") and limit.n > 64 and \
                mu.n * limit.n > _auto_exact_pairs(opts) and "nu_levels" not in opts:
            # The limit side's clustering is the same at every time: build it once.
            if levels is None:
                levels = hierarchy(limit.points, limit.weights, cost)
            opts["nu_levels"] = levels
        results.append(w2(mu, limit, cost=cost, method=method, **opts))
    cb = None
    if bound and hasattr(obj, "positions") and cost == "chordal":
        cb = coupling_bound(obj, model)
    lower = np.array([r.lower for r in results])
    upper = np.array([r.upper for r in results])
    if cb is not None:
        upper = np.minimum(upper, cb)
    return W2Curve(times, np.array([float(r) for r in results]),
                   np.array([r.error for r in results]), [r.method for r in results], cost, limit,
                   cb, results, lower, upper)


def _auto_exact_pairs(options):
    """Up to how many pairs "auto" solves exactly, by the caller's budget or the default."""
    from . import DEFAULT_BUDGET

    return (options.get("budget") or DEFAULT_BUDGET).auto_exact_pairs
