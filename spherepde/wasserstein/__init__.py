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

``method="auto"`` picks the fastest that meets ``tol`` (see :func:`w2`) and records why in
``details["auto"]``.

References
----------
Peyré & Cuturi, Computational Optimal Transport (2019), §2.4 (semi-dual), §4.2 (log domain).
Schmitzer, SIAM J. Sci. Comput. 41 (2019) (sparse multiscale scaling).
Altschuler, Weed & Rigollet, NeurIPS 2017 (rounding onto the transport polytope).
Mérigot, "A multiscale approach to optimal transport", 2011 (semi-discrete Newton).
"""
from __future__ import annotations

import numpy as np

from ..measures import as_point_cloud
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

__all__ = ["W2Result", "W2Curve", "w2", "w2_to_limit", "coupling_bound", "cost_matrix",
           "COSTS", "METHODS", "AUTO_EXACT_PAIRS", "AUTO_EXACT_FALLBACK_PAIRS"]

METHODS = ("auto", "exact", "semidiscrete", "circle", "multiscale", "sinkhorn", "quantized",
           "sparse")

#: "auto" solves exactly up to this many pairs n·m (and the multiscale solver beyond): the
#: crossover measured by benchmarks/wasserstein.py, where the network simplex and the
#: multiscale solver at tol = 1e-3 take about the same time (2000-3000 points a side).
AUTO_EXACT_PAIRS = 6_000_000
#: Below this tol (bracket width on W2) "auto" prefers the exact solver wherever its memory
#: is available: the multiscale bracket closes like eps, and eps is limited by the point
#: spacing.
MULTISCALE_MIN_TOL = 1e-5
#: When the multiscale bracket chosen by "auto" misses tol, and so does the exact solve
#: between clusterings (:mod:`.quantized`), the exact LP is run up to this many pairs (10^4
#: points a side: ~1 minute and 4.5 GB), memory permitting. The
#: multiscale solver misses tol where the truncated kernel cuts a measure into pieces whose
#: masses differ on the two sides (two separated concentrations sampled unevenly): its
#: Sinkhorn sweeps cannot move the difference across (measured: 1500 x 1000 tokens of two
#: caps, bracket [0.176, 0.210] in 4.6 s around the exact 0.1909, found in 0.44 s).
AUTO_EXACT_FALLBACK_PAIRS = 100_000_000
#: "auto" gives the multiscale solver this many seconds per point (n + m, those heavier than
#: AUTO_HEAVY_WEIGHT), at least
#: AUTO_MULTISCALE_MIN_SECONDS, before it falls back (a caller's ``max_seconds`` wins). On
#: broad measures it ends well within that (10^5 clouds a side: 4-13 s; 10^6 tokens against the
#: 6·256² mesh: 208-308 s, budget 418 s); on two concentrated clouds of 10^5 it ran for more
#: than 11 minutes without meeting tol or giving up, where the sparse solver takes 78 s.
AUTO_MULTISCALE_SECONDS_PER_POINT = 3e-4
AUTO_MULTISCALE_MIN_SECONDS = 30.0
#: The sparse fallback's time budget under "auto" (a caller's ``max_seconds`` wins), four times
#: the multiscale one: on clustered clouds its pricing rounds could run for many minutes where
#: the exact solve between clusterings, the next fallback, closes tol in seconds (16000 tokens
#: gathered near a great circle against their projection onto it, dim E = 2 at beta = 16,
#: t = 10: unbounded, the sparse rounds had not ended after 7 minutes on a loaded machine;
#: with a 60 s budget "auto" returned in 69 s, the clusterings giving a 4e-4 bracket in
#: 1.8 s). The sparse solves measured to their end (docs/methods.md: 78 s for 10^5 x 10^5
#: two-cap tokens, 146 s for 10^5 tokens against the ~127,000 cells that carry a concentrated
#: mesh density) fit in it (~240 s and ~270 s). Past it the sparse bracket so far is kept,
#: intersected, and the next fallback tried.
AUTO_SPARSE_SECONDS_PER_POINT = 4 * AUTO_MULTISCALE_SECONDS_PER_POINT
AUTO_SPARSE_MIN_SECONDS = 4 * AUTO_MULTISCALE_MIN_SECONDS
#: Points lighter than this (of total mass 1) do not count towards that budget.
AUTO_HEAVY_WEIGHT = 1e-12
#: Default target width of the bracket on W2 for the multiscale solver.
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
    if lower == best.lower and upper == best.upper:
        return best
    details = dict(best.details, intersected_with=(other.method, other.lower, other.upper))
    r = bracket_result(upper**2, lower**2, best.cost, best.method, details)
    if "tol" in details:
        r.details["tol_met"] = bool(r.upper - r.lower <= details["tol"])
    return r


#: The direct solvers: they take no ``max_seconds``, which "auto" then leaves out.
_NO_TIME_BUDGET = ("exact", "semidiscrete")


def _choose(n, m, cost, tol):
    """The fastest method that meets tol, and why."""
    if (min(n, m) <= _semidiscrete.SEMIDISCRETE_MAX_ATOMS
            and n * m <= _semidiscrete.SEMIDISCRETE_MAX_PAIRS):
        return "semidiscrete", f"min(n, m) = {min(n, m)} atoms: exact semi-discrete solver"
    if n * m <= AUTO_EXACT_PAIRS:
        return "exact", f"n*m = {n * m:.1e} <= {AUTO_EXACT_PAIRS:.0e}: the network simplex is faster"
    if tol < MULTISCALE_MIN_TOL and _exact_fits(n, m, _exact.EXACT_MAX_PAIRS):
        return "exact", f"tol = {tol:.0e} < {MULTISCALE_MIN_TOL:.0e}: only the exact LP closes the bracket"
    return "multiscale", f"n*m = {n * m:.1e}: multiscale Sinkhorn to a bracket of width <= {tol:.0e}"


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


def w2(mu, nu, cost: str = "chordal", method: str = "auto", tol: float | None = None,
       **options) -> W2Result:
    r"""Wasserstein-2 distance between two measures on S^{d-1}, with a certified bracket.

    Parameters
    ----------
    mu, nu : PointCloud or convertible
        Anything :func:`~spherepde.measures.as_point_cloud` accepts: PointClouds, objects with
        ``to_point_cloud()``, ``(points, weights)`` pairs, (n, d) arrays.
    cost : {"chordal", "geodesic"}
        :math:`|x-y|^2` or :math:`\arccos(\langle x,y\rangle)^2`.
    method : str
        One of "auto", "exact", "semidiscrete", "circle", "multiscale", "sinkhorn",
        "quantized", "sparse". "sinkhorn" is the multiscale solver. "auto" picks semidiscrete against at most 64
        atoms; then, for the chordal cost, circle when a side lies on a great circle (in
        ``plane`` when given) unless tol < 1e-5 asks for the exact LP, falling back to the
        next choice when its bracket is wider than tol; exact up to n·m =
        ``AUTO_EXACT_PAIRS`` (or when tol < 1e-5 and memory allows), multiscale beyond,
        and, when the multiscale bracket is wider than tol, the network simplex on a priced
        sparse support ("sparse"), then the exact solve between clusterings ("quantized",
        chordal), each bracket intersected with the ones before, and if that still misses
        tol the exact LP up to n·m = ``AUTO_EXACT_FALLBACK_PAIRS``; ``details["auto"]`` says
        why.
    tol : float, optional
        Target width ``upper - lower`` of the bracket on W2 (default 1e-3) for the multiscale
        solver; the exact solvers close it to round-off.
    **options
        exact: ``numItermax``. semidiscrete: ``gap_tol`` (certificate gap on W2^2).
        circle: ``plane`` ((d, 2) basis of the circle's plane; also steers "auto"),
        ``rounds`` (plan/dual alternations at most), ``max_seconds`` (start no round that
        would end after this long; under "auto" the same budget as the fallback's).
        multiscale: ``epsilon`` (final ε instead of the tol-driven schedule), ``theta``
        (truncation), ``max_iter`` (per final stage), ``max_seconds`` (give up after this
        long with the bracket so far; under "auto" by default 3e-4 s per point, at least
        30 s, before the fallbacks; "auto" drops it when it picks a direct solver), ``check_chunk`` (iterations before the
        first bracket test), ``quantize`` (largest quantization error of a side stopped at a
        clustering; default from tol and a coarse lower bound on W2, and 1.5 tol for a side
        of more than 500,000 points; recorded in ``details["quantize"]``), ``newton`` (solve the
        final levels' stages by Newton instead of Sinkhorn sweeps; default when a side has 32768
        points), ``prune`` (largest mass of a side's lightest points left out of the solve; the
        bracket is widened by what it can move W2), ``seed``, ``verbose``.
        quantized: ``max_pairs`` (cluster pairs given to the network simplex; default
        ``QUANTIZED_MAX_PAIRS``, capped by half the free memory), ``seed``.
        sparse: ``k`` (neighbours per point in the supports), ``max_seconds`` (stop the
        pricing rounds after this long, with the bracket so far), ``seed``.

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
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; allowed: {', '.join(map(repr, METHODS))}")
    tol = DEFAULT_TOL if tol is None else float(tol)
    if not tol > 0:
        raise ValueError(f"tol must be > 0 (a bracket width on W2); got {tol!r}")
    (x, a), (y, b) = _prepare(mu, nu)
    n, m = len(a), len(b)
    # A clustering of nu computed once by a caller that compares many measures to the same nu
    # (w2_to_limit); only the multiscale solver uses it.
    nu_levels = options.pop("nu_levels", None)
    plane = options.pop("plane", None)
    reason = None
    on_circle = None
    if method == "circle" or (method == "auto" and cost == "chordal"
                              and min(n, m) > _semidiscrete.SEMIDISCRETE_MAX_ATOMS):
        on_circle = _circle_side((x, a), (y, b), plane)
        if method == "circle" and on_circle is None:
            raise ValueError("method='circle' needs one measure on a great circle (all its "
                             "points within 1e-9 of a plane through 0"
                             + (", the plane given" if plane is not None else "")
                             + "); use method='auto'")
    if method == "auto":
        # the circle solver iterates: a time budget is its even where the fallback is direct
        copts = {k: options[k] for k in ("rounds", "verbose", "max_seconds") if k in options}
        method, reason = _choose(n, m, cost, tol)
        if method in _NO_TIME_BUDGET and "max_seconds" in options:
            # A time budget bounds the iterative solvers that "auto" may pick; the direct ones
            # it picked instead finish in a time set by their size, so the budget is not theirs.
            options.pop("max_seconds")
            reason += " (max_seconds applies to the iterative solvers only; not used)"
        if on_circle is not None and (tol >= MULTISCALE_MIN_TOL or method == "multiscale"):
            fallback, why = method, reason
            (xs, as_), (yc, bc), U = on_circle
            # only the circle solver's own options (copts): the others belong to the fallback
            r = _circle.w2_circle(xs, as_, yc, bc, cost, plane=U, tol=tol, **copts)
            reason = "one side lies on a great circle: the planar circle solver"
            if r.upper - r.lower <= tol:
                r.details["auto"] = reason
                return r
            stop = f" ({r.details['stopped']})" if "stopped" in r.details else ""
            reason += (f", whose bracket {r.upper - r.lower:.1e} > tol = {tol:.0e}{stop}; "
                       "then " + why)
            method = fallback
            options.pop("rounds", None)
    if method == "sinkhorn":
        method = "multiscale"
    if method == "circle":
        (xs, as_), (yc, bc), U = on_circle
        r = _circle.w2_circle(xs, as_, yc, bc, cost, plane=U, tol=tol, **options)
    elif method == "exact":
        r = _exact.w2_exact(x, a, y, b, cost, **options)
    elif method == "quantized":
        r = _quantized.w2_quantized(x, a, y, b, cost, tol=tol, **options)
    elif method == "sparse":
        r = _sparse.w2_sparse(x, a, y, b, cost, tol=tol, **options)
    elif method == "semidiscrete":
        # The cost is symmetric, so the smaller side can always play the atoms.
        r = (_semidiscrete.w2_semidiscrete(x, a, y, b, cost, **options) if m <= n
             else _semidiscrete.w2_semidiscrete(y, b, x, a, cost, **options))
    else:
        sparse_seconds = options.get("max_seconds")
        if reason is not None and "max_seconds" not in options:
            # points that carry mass (a mesh snapshot of a concentrated density is mostly
            # cells of < 1e-30, which every solver prunes)
            heavy = int(np.count_nonzero(a > AUTO_HEAVY_WEIGHT)
                        + np.count_nonzero(b > AUTO_HEAVY_WEIGHT))
            options["max_seconds"] = max(AUTO_MULTISCALE_MIN_SECONDS,
                                         AUTO_MULTISCALE_SECONDS_PER_POINT * heavy)
            sparse_seconds = max(AUTO_SPARSE_MIN_SECONDS, AUTO_SPARSE_SECONDS_PER_POINT * heavy)
        r = _multiscale.w2_multiscale_result(x, a, y, b, cost, tol=tol, nu_levels=nu_levels,
                                             **options)
        if reason is not None and r.upper - r.lower > tol:
            width = r.upper - r.lower
            q = _sparse.w2_sparse(x, a, y, b, cost, tol=tol, seed=options.get("seed", 0),
                                  max_seconds=sparse_seconds)
            why = (f" (it gave up: {r.details['stopped']})" if "stopped" in r.details else "")
            reason += (f"; its bracket {width:.1e} > tol = {tol:.0e}{why}, so the network "
                       f"simplex on a priced sparse support (bracket {q.upper - q.lower:.1e})")
            r = _intersect(r, q)
        if reason is not None and r.upper - r.lower > tol and cost == "chordal":
            width = r.upper - r.lower
            q = _quantized.w2_quantized(x, a, y, b, cost, tol=tol, seed=options.get("seed", 0))
            reason += (f"; still {width:.1e} > tol = {tol:.0e}, so the exact solve "
                       f"between clusterings (bracket {q.upper - q.lower:.1e})")
            r = _intersect(r, q)
        if reason is not None and r.upper - r.lower > tol and _exact_fits(n, m, AUTO_EXACT_FALLBACK_PAIRS):
            width = r.upper - r.lower
            r = _exact.w2_exact(x, a, y, b, cost)  # options were the multiscale solver's
            reason += (f"; its bracket {width:.1e} > tol = {tol:.0e}, so the exact LP "
                       f"(n*m = {n * m:.1e} <= {AUTO_EXACT_FALLBACK_PAIRS:.0e})")
    if reason is not None:
        r.details["auto"] = reason
    return r
