r"""Wasserstein-2 distances between measures on S^{d-1}.

.. math:: W_2(\mu, \nu)^2 = \min_{\pi \in \Pi(\mu, \nu)} \int c(x, y)\, d\pi(x, y),

with the chordal cost :math:`c = |x - y|^2` (default) or the geodesic cost
:math:`c = \arccos(\langle x, y\rangle)^2`. Every measure enters as a weighted
:class:`~spherepde.measures.PointCloud` (particles, atoms, grid or mesh snapshots), so every
value is the transport cost between two discrete measures; how a snapshot approximates a
density is the snapshot's business, not this package's.

Every solver returns a :class:`W2Result`: a float with a certified bracket
``lower <= W2 <= upper`` (a dual-feasible value below, the cost of a feasible coupling
above), its cost and the method that produced it.

``exact`` (:mod:`.exact`)
    Network simplex (POT ``emd``) on the full cost matrix; exact up to round-off. Memory
    n·m·45 bytes: up to ~2·10^4 points a side.
``semidiscrete`` (:mod:`.semidiscrete`)
    One side has few atoms: Newton on the semi-dual, then an exact repair of the points on
    Laguerre-cell boundaries; certified to round-off.
``circle`` (:mod:`.circle`)
    One side lies on a great circle (the dim E = 2 limit): chordal W2 reduces to a planar
    problem between the projected points and the circle, solved by alternating angular
    north-west couplings (above) with exact c-transforms (below) in O((n + m) log(n + m)).
``quantized`` (:mod:`.quantized`, chordal cost)
    The network simplex between clusterings of the two clouds (as many cluster pairs as
    ``QUANTIZED_MAX_PAIRS``), certified on the original points: the composed coupling's cost
    above (exact from the barycentres), doubly c-transformed duals below. Its width is about
    (δ_x² + δ_y²)/W2 for quantization errors δ, whatever the shape of the measures: it is
    what "auto" falls back to where the multiscale bracket misses tol on concentrated
    measures.
``sparse`` (:mod:`.sparse`)
    The network simplex (POT ``emd`` on a sparse cost matrix) on a support of a few arcs
    per point, coarse to fine (the pairs whose clusters the coarser solve couples, and near
    neighbours), grown by exact pricing (c-transforms over all pairs) until the bracket
    closes: the plan's cost above, the priced duals below, exact when no pair is violated.
    No ε, so no breakdown on concentrated measures: it is what "auto" falls back to where the
    multiscale bracket misses tol.
``multiscale`` (:mod:`.multiscale`)
    ε-scaling log-domain Sinkhorn on a hierarchy of clusterings with a truncated (sparse)
    kernel, and Newton on the semi-dual (:mod:`.newton`) at the final levels of large
    problems; memory O((n + m)·k). The bracket is computed on the original measures: the
    rounded plan's cost above, doubly c-transformed potentials below. ``"sinkhorn"`` is
    accepted as another name for it.

The methods are the entries of the registry :data:`W2_METHODS`. ``method="auto"`` walks the
ordered list :data:`AUTO` of entries, each with an applicability test, and runs the first
that applies, then the next applicable fallback while the bracket is wider than ``tol``
(see :func:`w2`); ``details["auto"]`` records why. The iterative solvers stop at a time
budget given by the deterministic cost model :class:`W2Budget` (seconds per point that
carries mass), whether "auto" chose them or the caller did; a caller overrides it with
``max_seconds`` or ``budget=W2Budget(...)``.

References
----------
Peyré & Cuturi, Computational Optimal Transport (2019), §2.4 (semi-dual), §4.2 (log domain).
Schmitzer, SIAM J. Sci. Comput. 41 (2019) (sparse multiscale scaling).
Altschuler, Weed & Rigollet, NeurIPS 2017 (rounding onto the transport polytope).
Mérigot, "A multiscale approach to optimal transport", 2011 (semi-discrete Newton).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..measures import as_point_cloud
from ..registry import Registry
from . import circle as _circle
from . import exact as _exact
from . import multiscale as _multiscale
from . import quantized as _quantized
from . import semidiscrete as _semidiscrete
from . import sparse as _sparse
from .costs import COSTS, check_cost, cost_matrix
from .limit import W2Curve, coupling_bound
from .limit import w2_to_limit as _w2_to_limit_clouds
from .result import W2Result, bracket_result

__all__ = [
    "AUTO",
    "COSTS",
    "DEFAULT_BUDGET",
    "METHODS",
    "W2_METHODS",
    "W2Budget",
    "W2Curve",
    "W2Result",
    "cost_matrix",
    "coupling_bound",
    "w2",
    "w2_to_limit",
]

#: Default target width of the bracket on W2 for the iterative solvers.
DEFAULT_TOL = 1e-3


def w2_to_limit(solution_or_trajectory, model=None, cost: str = "chordal", method: str = "auto",
                bound: bool = True, **options):
    """The curve t -> W2(rho_t, Pi#rho0). A zonal solution (one with ``theta_edges`` and
    ``cell_masses``) goes to the exact 1-D solver,
    :func:`~spherepde.wasserstein.zonal.w2_to_limit_zonal`; everything else to the point-cloud
    solvers, :func:`~spherepde.wasserstein.limit.w2_to_limit` (see there)."""
    obj = solution_or_trajectory
    if hasattr(obj, "theta_edges") and hasattr(obj, "cell_masses"):
        from .zonal import w2_to_limit_zonal

        return w2_to_limit_zonal(obj, model, cost)
    return _w2_to_limit_clouds(obj, model, cost, method, bound, **options)


@dataclass(frozen=True)
class W2Budget:
    r"""The time budgets of the iterative W2 solvers: a deterministic cost model.

    A solve of ``p`` points that carry mass (weight above ``heavy_weight``, both sides
    together) gets

    .. math:: T = \max(t_\min, s\,p)

    seconds (s, t_min: ``seconds_per_point``, ``min_seconds`` for the circle and multiscale
    solvers, ``sparse_seconds_per_point``, ``sparse_min_seconds`` for the sparse one), after
    which it stops with the bracket certified so far (``details["stopped"]`` says so) and
    "auto" moves on to its next fallback. The budget depends on the problem's size only, so
    the same call makes the same choices; only a solve that runs out of time depends on the
    machine. The defaults were fitted on a 2-core machine: broad 10^5-point clouds end in
    seconds, 10^6 tokens against a 6·256² mesh in 208-308 s of a 418 s budget; the sparse
    solver gets four times as long (its pricing rounds on 10^5 x 10^5 two-cap tokens took
    78 s of 240 s, and the fallback after it, between clusterings, is quick). A user on
    another machine passes ``w2(..., budget=W2Budget(seconds_per_point=...))``, or
    ``W2Budget(**json.load(f))`` for a profile of their own.

    Parameters
    ----------
    seconds_per_point, min_seconds : float
        The circle and multiscale solvers' s and t_min.
    sparse_seconds_per_point, sparse_min_seconds : float
        The sparse solver's.
    heavy_weight : float
        Points lighter than this (of total mass 1) do not count: a mesh snapshot of a
        concentrated density is mostly cells of < 1e-30, which every solver prunes.
    auto_exact_pairs : int
        "auto" solves exactly up to this many pairs n·m (and the multiscale solver beyond):
        the crossover measured by benchmarks/wasserstein.py, where the network simplex and
        the multiscale solver at tol = 1e-3 take about the same time (2000-3000 points a
        side).
    multiscale_min_tol : float
        Below this tol (bracket width on W2) "auto" prefers the exact solver wherever its
        memory is available: the multiscale bracket closes like eps, and eps is limited by
        the point spacing.
    auto_exact_fallback_pairs : int
        When the multiscale bracket chosen by "auto" misses tol, and so does the exact solve
        between clusterings (:mod:`.quantized`), the exact LP is run up to this many pairs
        (10^4 points a side: ~1 minute and 4.5 GB), memory permitting. The multiscale solver
        misses tol where the truncated kernel cuts a measure into pieces whose masses differ
        on the two sides (two separated concentrations sampled unevenly): its Sinkhorn
        sweeps cannot move the difference across.
    auto_quantized_pairs : int
        The largest exact solve between clusterings that "auto" runs as a fallback (cluster
        pairs; the explicit ``method="quantized"`` keeps its own ``max_pairs``). The network
        simplex's time is not predictable from its size: on a concentrated dim E = 2 mesh
        snapshot (24k cells carrying mass) against 20000 atoms on the limit circle, a solve
        of 4.2e6 pairs took 8 s and one of 5e7 did not end in 20 minutes.
    """

    seconds_per_point: float = 3e-4
    min_seconds: float = 30.0
    sparse_seconds_per_point: float = 1.2e-3
    sparse_min_seconds: float = 120.0
    heavy_weight: float = 1e-12
    auto_exact_pairs: int = 6_000_000
    multiscale_min_tol: float = 1e-5
    auto_exact_fallback_pairs: int = 100_000_000
    auto_quantized_pairs: int = 8_000_000

    def __post_init__(self):
        for name in ("seconds_per_point", "min_seconds", "sparse_seconds_per_point",
                     "sparse_min_seconds", "heavy_weight", "auto_exact_pairs",
                     "multiscale_min_tol", "auto_exact_fallback_pairs",
                     "auto_quantized_pairs"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and np.isfinite(value) and value >= 0):
                raise ValueError(f"W2Budget.{name} must be a finite number >= 0; got {value!r}")

    def seconds(self, method: str, a: np.ndarray, b: np.ndarray) -> float:
        """The budget in seconds of ``method`` between weights ``a: (n,)`` and ``b: (m,)``."""
        heavy = int(np.count_nonzero(a > self.heavy_weight)
                    + np.count_nonzero(b > self.heavy_weight))
        if method == "sparse":
            return max(self.sparse_min_seconds, self.sparse_seconds_per_point * heavy)
        return max(self.min_seconds, self.seconds_per_point * heavy)


#: The cost model that :func:`w2` uses unless a caller passes its own ``budget``.
DEFAULT_BUDGET = W2Budget()

#: Methods that take a time budget (the others finish in a time set by their size).
_TIMED = ("circle", "multiscale", "sparse")


@dataclass
class _Problem:
    """One W2 call: the two clouds (zero weights dropped, renormalized), the cost, tol, the
    budget model, the great-circle side if any, and the caller's options."""

    x: np.ndarray
    a: np.ndarray
    y: np.ndarray
    b: np.ndarray
    cost: str
    tol: float
    budget: W2Budget
    options: dict
    nu_levels: object = None
    plane: object = None
    on_circle: object = None

    @property
    def n(self):
        return len(self.a)

    @property
    def m(self):
        return len(self.b)

    def max_seconds(self, method):
        """The caller's max_seconds, else the cost model's budget for ``method``."""
        if "max_seconds" in self.options:
            return self.options["max_seconds"]
        return self.budget.seconds(method, self.a, self.b)


def _prepare(mu, nu):
    mu, nu = as_point_cloud(mu), as_point_cloud(nu)
    if mu.d != nu.d:
        raise ValueError(f"the two measures live in different dimensions: d = {mu.d} and "
                         f"d = {nu.d}; W2 compares measures on the same sphere S^(d-1)")
    # Zero-weight points carry no mass; dropping them shrinks the problem.
    out = []
    for c in (mu, nu):
        keep = c.weights > 0
        x, w = c.points[keep], c.weights[keep]
        out.append((x, w / w.sum()))
    return out


def _exact_fits(n, m, max_pairs):
    """Whether the exact LP on n x m points stays within max_pairs and the free memory."""
    avail = _exact._available_memory()
    return n * m <= max_pairs and (avail is None or _exact.EXACT_BYTES_PER_PAIR * n * m <= avail)


def _intersect(first, second):
    """Both brackets are certified, so their intersection is too: the result of the one with
    the narrower bracket, with the other's bound where it is better (both recorded)."""
    narrower = second.upper - second.lower <= first.upper - first.lower
    best, other = (second, first) if narrower else (first, second)
    lower, upper = max(best.lower, other.lower), min(best.upper, other.upper)
    if (lower == best.lower and upper == best.upper) or lower > upper:
        return best  # (crossed bounds: round-off between two solvers that both closed)
    details = dict(best.details, intersected_with=(other.method, other.lower, other.upper))
    r = bracket_result(upper**2, lower**2, best.cost, best.method, details)
    if "tol" in details:
        r.details["tol_met"] = bool(r.upper - r.lower <= details["tol"])
    return r


def _circle_side(x, y, plane):
    """Which side lies on a great circle: (source, circle side, plane basis) or None.

    With ``plane`` given, the side that lies in it; otherwise a plane fitted to each side."""
    for src, circ in ((x, y), (y, x)):
        if plane is not None:
            U = _circle._check_plane(plane, circ[0].shape[1])
            off = circ[0] - (circ[0] @ U) @ U.T
            if np.max(np.einsum("md,md->m", off, off)) <= _circle.CIRCLE_PLANE_ATOL**2:
                return src, circ, U
        else:
            U = _circle.great_circle_plane(circ[0])
            if U is not None:
                return src, circ, U
    return None


# ------------------------------------------------------------------------------ the methods
#: The W2 methods by name: each entry is ``solve(problem, options) -> W2Result``, with
#: ``options`` the caller's options meant for it.
W2_METHODS = Registry("W2 method")


@W2_METHODS.register("exact")
def _solve_exact(p, options):
    return _exact.w2_exact(p.x, p.a, p.y, p.b, p.cost, **options)


@W2_METHODS.register("semidiscrete")
def _solve_semidiscrete(p, options):
    # The cost is symmetric, so the smaller side can always play the atoms.
    if p.m <= p.n:
        return _semidiscrete.w2_semidiscrete(p.x, p.a, p.y, p.b, p.cost, **options)
    return _semidiscrete.w2_semidiscrete(p.y, p.b, p.x, p.a, p.cost, **options)


@W2_METHODS.register("circle")
def _solve_circle(p, options):
    if p.on_circle is None:
        p.on_circle = _circle_side((p.x, p.a), (p.y, p.b), p.plane)
    if p.on_circle is None:
        raise ValueError("method='circle' needs one measure on a great circle (all its "
                         "points within 1e-9 of a plane through 0"
                         + (", the plane given" if p.plane is not None else "")
                         + "); use method='auto'")
    (xs, as_), (yc, bc), U = p.on_circle
    options["max_seconds"] = p.max_seconds("circle")
    return _circle.w2_circle(xs, as_, yc, bc, p.cost, plane=U, tol=p.tol, **options)


@W2_METHODS.register("multiscale")
def _solve_multiscale(p, options):
    options["max_seconds"] = p.max_seconds("multiscale")
    return _multiscale.w2_multiscale_result(p.x, p.a, p.y, p.b, p.cost, tol=p.tol,
                                            nu_levels=p.nu_levels, **options)


W2_METHODS.register("sinkhorn", _solve_multiscale)


@W2_METHODS.register("sparse")
def _solve_sparse(p, options):
    options["max_seconds"] = p.max_seconds("sparse")
    return _sparse.w2_sparse(p.x, p.a, p.y, p.b, p.cost, tol=p.tol, **options)


@W2_METHODS.register("quantized")
def _solve_quantized(p, options):
    return _quantized.w2_quantized(p.x, p.a, p.y, p.b, p.cost, tol=p.tol, **options)


METHODS = ("auto",) + tuple(W2_METHODS.names())


# ------------------------------------------------------------------------------- "auto"
@dataclass(frozen=True)
class AutoEntry:
    """One step of "auto": run ``method`` where ``applies(problem)`` returns a reason (None:
    skip), with the caller's ``options`` named in ``own`` (all when None) over the ones
    ``limits(problem)`` sets. ``last``: the walk ends with it whatever its width;
    ``intersect``: it runs only to refine a bracket that an earlier entry left wider than tol
    (a fallback), never as the first choice. Every bracket after the first is intersected
    with the ones before: all are certified, so a later solver can only narrow it."""

    method: str
    applies: Callable[[_Problem], str | None]
    last: bool = False
    intersect: bool = False
    own: tuple | None = None
    limits: Callable[[_Problem], dict] | None = None


def _few_atoms(p):
    if (min(p.n, p.m) <= _semidiscrete.SEMIDISCRETE_MAX_ATOMS
            and p.n * p.m <= _semidiscrete.SEMIDISCRETE_MAX_PAIRS):
        return f"min(n, m) = {min(p.n, p.m)} atoms: exact semi-discrete solver"
    return None


def _exact_first(p):
    pairs, min_tol = p.budget.auto_exact_pairs, p.budget.multiscale_min_tol
    if p.n * p.m <= pairs:
        return f"n*m = {p.n * p.m:.1e} <= {pairs:.0e}: the network simplex is faster"
    if p.tol < min_tol and _exact_fits(p.n, p.m, _exact.EXACT_MAX_PAIRS):
        return f"tol = {p.tol:.0e} < {min_tol:.0e}: only the exact LP closes the bracket"
    return None


def _on_great_circle(p):
    if p.cost != "chordal" or min(p.n, p.m) <= _semidiscrete.SEMIDISCRETE_MAX_ATOMS:
        return None
    p.on_circle = _circle_side((p.x, p.a), (p.y, p.b), p.plane)
    if p.on_circle is None:
        return None
    if p.tol < p.budget.multiscale_min_tol and _exact_first(p) is not None:
        return None  # only the exact LP closes such a tol
    return "one side lies on a great circle: the planar circle solver"


def _beyond_exact(p):
    return f"n*m = {p.n * p.m:.1e}: multiscale Sinkhorn to a bracket of width <= {p.tol:.0e}"


def _always_sparse(p):
    return "the network simplex on a priced sparse support"


def _chordal_clusterings(p):
    return "the exact solve between clusterings" if p.cost == "chordal" else None


def _exact_fallback(p):
    pairs = p.budget.auto_exact_fallback_pairs
    if _exact_fits(p.n, p.m, pairs):
        return f"the exact LP (n*m = {p.n * p.m:.1e} <= {pairs:.0e})"
    return None


#: The ordered entries of "auto": semidiscrete against a few atoms; for the chordal cost the
#: circle solver when a side lies on a great circle (its options: rounds, verbose,
#: max_seconds); the exact LP up to ``W2Budget.auto_exact_pairs`` (or when tol <
#: ``W2Budget.multiscale_min_tol`` and memory allows); the multiscale solver; then, while the
#: bracket is wider than tol, the sparse solver, the exact solve between clusterings
#: (chordal) and the exact LP up to ``W2Budget.auto_exact_fallback_pairs``.
AUTO = (
    AutoEntry("semidiscrete", _few_atoms, last=True),
    AutoEntry("circle", _on_great_circle, own=("rounds", "verbose", "max_seconds")),
    AutoEntry("exact", _exact_first, last=True),
    AutoEntry("multiscale", _beyond_exact),
    AutoEntry("sparse", _always_sparse, intersect=True, own=("seed", "max_seconds")),
    AutoEntry("quantized", _chordal_clusterings, intersect=True, own=("seed",),
              limits=lambda p: {"max_pairs": p.budget.auto_quantized_pairs}),
    AutoEntry("exact", _exact_fallback, last=True, own=()),
)


def _entry_options(entry, p, taken):
    """The caller's options that ``entry`` receives: its own, or (a primary solver) all that
    no earlier entry consumed (the circle's rounds are its own)."""
    limits = entry.limits(p) if entry.limits is not None else {}
    if entry.own is not None:
        return limits | {k: p.options[k] for k in entry.own if k in p.options}
    opts = limits | {k: v for k, v in p.options.items() if k not in taken}
    if entry.method in ("exact", "semidiscrete") and "max_seconds" in opts:
        opts.pop("max_seconds")
    return opts


def _auto(p):
    """Walk :data:`AUTO`: the first applicable entry, then the next applicable ones while the
    bracket misses tol. ``details["auto"]`` says what ran and why."""
    result, reason, taken = None, "", set()
    for entry in AUTO:
        if result is None and entry.intersect:
            continue  # a fallback refines a bracket; there is none yet
        why = entry.applies(p)
        if why is None:
            continue
        r = W2_METHODS.get(entry.method)(p, _entry_options(entry, p, taken))
        if entry.method == "circle":
            taken.add("rounds")
        if result is None:
            reason = why
        else:
            width = result.upper - result.lower
            stop = f" ({result.details['stopped']})" if "stopped" in result.details else ""
            reason += (f"; its bracket {width:.1e} > tol = {p.tol:.0e}{stop}, so {why} "
                       f"(bracket {r.upper - r.lower:.1e})")
        if entry.method in ("exact", "semidiscrete") and entry.own is None \
                and "max_seconds" in p.options:
            # A time budget bounds the iterative solvers; the direct ones finish in a time
            # set by their size, so the budget is not theirs.
            reason += " (max_seconds applies to the iterative solvers only; not used)"
        result = r if result is None else _intersect(result, r)
        if entry.last or result.upper - result.lower <= p.tol:
            break
    result.details["auto"] = reason
    return result


def w2(mu, nu, cost: str = "chordal", method: str = "auto", tol: float | None = None,
       budget: W2Budget | None = None, **options) -> W2Result:
    r"""Wasserstein-2 distance between two measures on S^{d-1}, with a certified bracket.

    Parameters
    ----------
    mu, nu : PointCloud or convertible
        Anything :func:`~spherepde.measures.as_point_cloud` accepts: PointClouds, objects with
        ``to_point_cloud()``, ``(points, weights)`` pairs, (n, d) arrays.
    cost : {"chordal", "geodesic"}
        :math:`|x-y|^2` or :math:`\arccos(\langle x,y\rangle)^2`.
    method : str
        A name in :data:`W2_METHODS` ("sinkhorn" is the multiscale solver), or "auto", which
        walks :data:`AUTO`: semidiscrete against at most 64 atoms; then, for the chordal
        cost, circle when a side lies on a great circle (in ``plane`` when given) unless
        tol < 1e-5 asks for the exact LP, falling back to the next choice when its bracket is
        wider than tol; exact up to n·m = ``budget.auto_exact_pairs`` (or when tol < 1e-5 and memory
        allows), multiscale beyond, and, when the multiscale bracket is wider than tol, the
        network simplex on a priced sparse support ("sparse"), then the exact solve between
        clusterings ("quantized", chordal), each bracket intersected with the ones before,
        and if that still misses tol the exact LP up to n·m = ``budget.auto_exact_fallback_pairs``;
        ``details["auto"]`` says why.
    tol : float, optional
        Target width ``upper - lower`` of the bracket on W2 (default 1e-3) for the iterative
        solvers; the exact solvers close it to round-off.
    budget : W2Budget, optional
        The cost model of the iterative solvers' time budgets and of "auto"'s choice between
        the exact and the iterative solvers (default :data:`DEFAULT_BUDGET`). The circle,
        multiscale and sparse solvers stop at it, chosen by "auto" or by name, with the
        bracket certified so far and ``details["stopped"]`` saying so.
    **options
        exact: ``numItermax``. semidiscrete: ``gap_tol`` (certificate gap on W2^2).
        circle: ``plane`` ((d, 2) basis of the circle's plane; also steers "auto"),
        ``rounds`` (plan/dual alternations at most), ``max_seconds``.
        multiscale: ``epsilon`` (final ε instead of the tol-driven schedule), ``theta``
        (truncation), ``max_iter`` (per final stage), ``max_seconds``, ``check_chunk``
        (iterations before the first bracket test), ``quantize`` (largest quantization error
        of a side stopped at a clustering; default from tol and a coarse lower bound on W2,
        and 1.5 tol for a side of more than 500,000 points; recorded in
        ``details["quantize"]``), ``newton`` (solve the final levels' stages by Newton
        instead of Sinkhorn sweeps; default when a side has 32768 points), ``prune`` (largest
        mass of a side's lightest points left out of the solve; the bracket is widened by
        what it can move W2), ``seed``, ``verbose``.
        quantized: ``max_pairs`` (cluster pairs given to the network simplex; default
        ``QUANTIZED_MAX_PAIRS``, capped by half the free memory), ``seed``.
        sparse: ``k`` (neighbours per point in the supports), ``max_seconds``, ``seed``.
        ``max_seconds`` (the iterative solvers) overrides the budget; None: no limit. The
        direct solvers (exact, semidiscrete, quantized) reject it, and "auto" leaves it out
        where it picks them.

    Returns
    -------
    W2Result
        A float (the distance, not squared) with ``lower``, ``upper`` (certified bracket),
        ``error`` (half-width: a bound on |value - W2|), ``cost``, ``method``, ``details``.

    Examples
    --------
    >>> import numpy as np, spherepde as sp
    >>> e = np.eye(3)
    >>> sp.w2(sp.PointCloud(e[:1]), sp.PointCloud(e[1:2]))
    W2Result(1.414213562, cost='chordal', method='semidiscrete', error=0.0e+00)
    """
    check_cost(cost)
    if method != "auto" and method not in W2_METHODS:
        raise ValueError(f"unknown method {method!r}; allowed: {', '.join(map(repr, METHODS))}")
    tol = DEFAULT_TOL if tol is None else float(tol)
    if not tol > 0:
        raise ValueError(f"tol must be > 0 (a bracket width on W2); got {tol!r}")
    if budget is not None and not isinstance(budget, W2Budget):
        raise TypeError(f"budget must be a W2Budget; got {type(budget).__name__}")
    (x, a), (y, b) = _prepare(mu, nu)
    # nu_levels: a clustering of nu computed once by a caller that compares many measures to
    # the same nu (w2_to_limit); only the multiscale solver uses it.
    p = _Problem(x, a, y, b, cost, tol, budget or DEFAULT_BUDGET, options,
                 nu_levels=options.pop("nu_levels", None), plane=options.pop("plane", None))
    if method == "auto":
        return _auto(p)
    return W2_METHODS.get(method)(p, dict(options))
