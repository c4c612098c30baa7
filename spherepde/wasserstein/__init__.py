r"""Wasserstein-2 distances between measures on S^{d-1} (docs/theory.md §4).

.. math:: W_2(\mu, \nu)^2 = \min_{\pi \in \Pi(\mu, \nu)} \int c(x, y)\, d\pi(x, y),

with the chordal cost :math:`c = |x - y|^2` (default) or the geodesic cost
:math:`c = \arccos(\langle x, y\rangle)^2`. Every measure enters as a weighted
:class:`~spherepde.measures.PointCloud` (particles, atoms, grid snapshots), so every value is
the transport cost between two discrete measures; how a grid snapshot approximates a density
is the snapshot's business, not this module's.

Three solvers, each returning a :class:`W2Result` that names its cost and method:

``exact``
    Network simplex (POT ``emd``) on the full cost matrix; exact up to round-off.
``semidiscrete``
    One side has few atoms. Maximizes the semi-dual
    :math:`F(\psi) = \sum_i a_i \min_j (c_{ij} - \psi_j) + \sum_j b_j \psi_j` over the atoms'
    potentials (Newton on its softmin smoothing, with continuation), then closes the gap
    exactly: points whose Laguerre cell is unambiguous are assigned to it, the points in a
    band around the cell boundaries (where ties live, e.g. a ring of grid nodes on the
    boundary plane) are split by an exact network simplex. The dual value F(psi) and the
    cost of that coupling bracket W2^2; the result is certified when they agree to
    round-off, and the bracket is returned as the error.
``sinkhorn``
    Debiased entropic estimate (log-domain Sinkhorn, POT) for problems too large for the
    others. Its stated error is a certified bracket: the cost of the rounded entropic
    coupling is an upper bound on W2^2 and the c-transformed dual potentials a lower bound.

``method="auto"`` picks semidiscrete when one side has at most
:data:`SEMIDISCRETE_MAX_ATOMS` atoms, else exact when the cost matrix has at most
:data:`EXACT_AUTO_PAIRS` entries, else Sinkhorn (``method="exact"`` goes up to
:data:`EXACT_MAX_PAIRS`, 2e4 points a side, where the memory is there).

References
----------
Peyré & Cuturi, Computational Optimal Transport (2019), §2.4 (semi-dual), §4.2 (log domain).
Feydy et al., "Interpolating between OT and MMD using Sinkhorn divergences", AISTATS 2019.
Altschuler, Weed & Rigollet, "Near-linear time approximation algorithms for optimal
transport via Sinkhorn iteration", NeurIPS 2017 (rounding onto the transport polytope).
Mérigot, "A multiscale approach to optimal transport", 2011 (semi-discrete Newton).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..measures import PointCloud, as_point_cloud

__all__ = ["W2Result", "W2Curve", "w2", "w2_to_limit", "coupling_bound", "cost_matrix",
           "COSTS", "METHODS"]

COSTS = ("chordal", "geodesic")
METHODS = ("auto", "exact", "semidiscrete", "sinkhorn")

#: Largest cost matrix (n*m entries) the exact solver accepts: 2e4 points a side. POT's
#: network simplex holds the cost matrix, the plan and per-arc state, about 44 bytes per entry
#: (measured: 4.4 GB peak and 18 s for 1e4 x 1e4 points), so a problem is also refused when
#: the machine does not have that much memory available.
EXACT_MAX_PAIRS = 400_000_000
#: "auto" picks the exact solver up to this many entries (about 20 s and 4.4 GB).
EXACT_AUTO_PAIRS = 100_000_000
#: Bytes per cost-matrix entry that the network simplex needs (measured, with a margin).
EXACT_BYTES_PER_PAIR = 45
#: "auto" uses the semi-discrete solver when one side has at most this many atoms.
SEMIDISCRETE_MAX_ATOMS = 64
#: Largest cost matrix the semi-discrete solver builds (it holds c_ij for all pairs).
SEMIDISCRETE_MAX_PAIRS = 50_000_000
#: Sinkhorn keeps the full cost matrix up to this many entries, then goes block by block.
SINKHORN_DENSE_PAIRS = 25_000_000
#: Default entropic regularization, relative to the cost's diameter^2 (4 chordal, pi^2 geodesic).
SINKHORN_EPSILON = 2e-3
#: Above this cosine, |x - y|^2 is recomputed from the difference to avoid cancellation.
_NEAR_COS = 0.9


# ---------------------------------------------------------------------------------- costs
def _check_cost(cost: str) -> str:
    if cost not in COSTS:
        raise ValueError(f"unknown cost {cost!r}; allowed: {', '.join(map(repr, COSTS))}")
    return cost


def _cost_diameter(cost: str) -> float:
    """sup of the cost on the sphere: |x - y|^2 <= 4, arccos^2 <= pi^2."""
    return 4.0 if cost == "chordal" else np.pi**2


def cost_matrix(x, y, cost: str = "chordal") -> np.ndarray:
    r"""Pairwise cost between points on the sphere, x: (n, d), y: (m, d) -> (n, m).

    chordal: :math:`|x - y|^2 = 2 - 2\langle x, y\rangle`; geodesic:
    :math:`\theta^2 = (2 \arcsin(|x - y|/2))^2`. Near-coincident (and, for the geodesic cost,
    near-antipodal) pairs are recomputed from the difference vector, so small costs keep full
    relative accuracy instead of the 1e-16 absolute accuracy of 2 - 2<x, y>.
    """
    _check_cost(cost)
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    g = x @ y.T
    c = 2.0 - 2.0 * g
    i, j = np.nonzero(g > _NEAR_COS)
    if i.size:
        diff = x[i] - y[j]
        c[i, j] = np.einsum("kd,kd->k", diff, diff)
    np.clip(c, 0.0, 4.0, out=c)
    if cost == "chordal":
        return c
    theta = 2.0 * np.arcsin(np.minimum(np.sqrt(c) * 0.5, 1.0))
    i, j = np.nonzero(g < -_NEAR_COS)
    if i.size:
        s = x[i] + y[j]
        theta[i, j] = np.pi - 2.0 * np.arcsin(np.minimum(0.5 * np.sqrt(np.einsum("kd,kd->k", s, s)), 1.0))
    return theta**2


# ---------------------------------------------------------------------------------- results
class W2Result(float):
    """A W2 distance (a float) that remembers how it was computed.

    Attributes
    ----------
    value : float
        The distance W2 (not squared).
    cost : str
        "chordal" or "geodesic".
    method : str
        "exact", "semidiscrete" or "sinkhorn" (never "auto").
    error : float
        Bound on |value - W2|: 0 for the exact LP (round-off only), the certified dual/primal
        bracket for the other two.
    details : dict
        Method-specific figures (epsilon, bracket, iterations, timings, sizes).
    """

    def __new__(cls, value, cost, method, error=0.0, details=None):
        obj = super().__new__(cls, value)
        obj.cost = cost
        obj.method = method
        obj.error = float(error)
        obj.details = dict(details or {})
        return obj

    @property
    def value(self) -> float:
        return float(self)

    @property
    def squared(self) -> float:
        return float(self) ** 2

    def __repr__(self) -> str:
        return (f"W2Result({float(self):.10g}, cost={self.cost!r}, method={self.method!r}, "
                f"error={self.error:.1e})")

    def __reduce__(self):
        return (W2Result, (float(self), self.cost, self.method, self.error, self.details))


def _result(w2sq_upper, w2sq_lower, cost, method, details, value_sq=None):
    """Build a W2Result from a bracket L <= W2^2 <= U (and an estimate inside it)."""
    upper = np.sqrt(max(w2sq_upper, 0.0))
    lower = np.sqrt(max(min(w2sq_lower, w2sq_upper), 0.0))
    value = upper if value_sq is None else min(max(np.sqrt(max(value_sq, 0.0)), lower), upper)
    error = max(upper - value, value - lower)
    details = dict(details, w2_bracket=(lower, upper))
    return W2Result(value, cost, method, error, details)


# ---------------------------------------------------------------------------------- inputs
def _prepare(mu, nu):
    mu, nu = as_point_cloud(mu), as_point_cloud(nu)
    if mu.d != nu.d:
        raise ValueError(f"the two measures live in different dimensions: d = {mu.d} and "
                         f"d = {nu.d}; W2 compares measures on the same sphere S^(d-1)")
    # Zero-weight points carry no mass; dropping them shrinks the cost matrix.
    out = []
    for c in (mu, nu):
        keep = c.weights > 0
        x, w = c.points[keep], c.weights[keep]
        out.append((x, w / w.sum()))
    return out


# ---------------------------------------------------------------------------------- exact
def _available_memory():
    """Bytes of memory available now (Linux /proc/meminfo), or None where unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _w2_exact(x, a, y, b, cost, numItermax=None, **unused):
    import ot

    _reject_options(unused, "exact")
    n, m = len(a), len(b)
    if n * m > EXACT_MAX_PAIRS:
        raise ValueError(
            f"the exact solver needs n*m <= {EXACT_MAX_PAIRS:.0e} (network simplex memory); got "
            f"n*m = {n}*{m} = {n * m:.2e}. Use method='semidiscrete' when one side has few atoms "
            "(it handles 10^5-point grids), or method='sinkhorn' (an entropic estimate with a "
            "certified error); or, with ~45 bytes of memory per pair to spare, raise "
            "spherepde.wasserstein.EXACT_MAX_PAIRS")
    need, avail = EXACT_BYTES_PER_PAIR * n * m, _available_memory()
    if avail is not None and need > avail:
        raise MemoryError(
            f"the exact solver needs about {need / 2**30:.1f} GiB for n*m = {n}*{m} pairs; "
            f"{avail / 2**30:.1f} GiB are available. Use method='semidiscrete' when one side has "
            "few atoms, method='sinkhorn', or subsample the clouds")
    t0 = time.perf_counter()
    M = cost_matrix(x, y, cost)
    it = int(numItermax) if numItermax is not None else max(1_000_000, 100 * (n + m) ** 2)
    it = min(it, 2**62)
    val, log = ot.emd2(a, b, M, numItermax=it, log=True)
    if log["result_code"] != 1:
        raise RuntimeError(f"network simplex stopped without an optimum: {log['warning']} "
                           f"(numItermax = {it}); pass a larger numItermax")
    details = {"n": n, "m": m, "seconds": time.perf_counter() - t0, "w2_squared": float(val),
               "numItermax": it}
    return W2Result(np.sqrt(max(float(val), 0.0)), cost, "exact", 0.0, details)


def _reject_options(unused, method):
    if unused:
        raise TypeError(f"unknown option(s) for method={method!r}: {', '.join(sorted(unused))}")


# ---------------------------------------------------------------------------------- semidiscrete
def _semidual(C, a, b, psi):
    """Exact semi-dual F(psi) = sum_i a_i min_j (C_ij - psi_j) + <b, psi> (a lower bound)."""
    return float(a @ np.min(C - psi, axis=1) + b @ psi)


def _smoothed_semidual(C, a, b, psi, eps):
    """Softmin smoothing F_eps <= F <= F_eps + eps log m: value, gradient, Hessian, P."""
    Z = (psi - C) / eps
    zmax = Z.max(axis=1, keepdims=True)
    E = np.exp(Z - zmax)
    s = E.sum(axis=1, keepdims=True)
    P = E / s
    val = float(-eps * (a @ (zmax[:, 0] + np.log(s[:, 0]))) + b @ psi)
    mass = a @ P
    grad = b - mass
    H = -(np.diag(mass) - P.T @ (a[:, None] * P)) / eps
    return val, grad, H


def _newton_semidual(C, a, b, psi, eps, tol, maxiter=60):
    """Maximize the smoothed semi-dual by damped Newton in the gauge psi_0 = 0."""
    m = len(b)
    val, grad, H = _smoothed_semidual(C, a, b, psi, eps)
    it = 0
    for it in range(1, maxiter + 1):
        if np.abs(grad).sum() <= tol:
            break
        Hr = H[1:, 1:]
        # Levenberg shift keeps the step defined when a cell is (nearly) empty.
        shift = 1e-12 * max(1.0, np.abs(np.diag(Hr)).max()) / eps
        try:
            step = np.linalg.solve(Hr - shift * np.eye(m - 1), -grad[1:])
        except np.linalg.LinAlgError:
            step = grad[1:] * eps
        direction = np.concatenate([[0.0], step])
        slope = float(grad @ direction)
        t = 1.0
        while t > 1e-12:
            cand = psi + t * direction
            v2, g2, H2 = _smoothed_semidual(C, a, b, cand, eps)
            if v2 >= val + 1e-4 * t * slope:
                break
            t *= 0.5
        else:
            break
        psi, val, grad, H = cand, v2, g2, H2
    return psi, it


def _w2_semidiscrete(x, a, y, b, cost, tol=None, **unused):
    """x, a: the large ("continuous") side; y, b: the atoms."""
    import ot

    _reject_options(unused, "semidiscrete")
    n, m = len(a), len(b)
    t0 = time.perf_counter()
    if n * m > SEMIDISCRETE_MAX_PAIRS:
        raise ValueError(f"the semi-discrete solver holds the n x m cost matrix and needs "
                         f"n*m <= {SEMIDISCRETE_MAX_PAIRS:.0e}; got {n}*{m}. Use method='sinkhorn'")
    C = cost_matrix(x, y, cost)
    scale = _cost_diameter(cost)
    # Round-off in sums of n terms of size <= scale; the certificate must close to this.
    tol = 1e-13 * scale * max(1.0, np.sqrt(n)) if tol is None else float(tol)
    details = {"n": n, "atoms": m}
    if m == 1:
        val = float(a @ C[:, 0])
        return _result(val, val, cost, "semidiscrete", dict(details, certified=True, gap=0.0,
                                                             seconds=time.perf_counter() - t0))
    psi = np.zeros(m)
    newton_iters = 0
    eps = 0.1 * scale
    eps_final = 1e-4 * scale
    while True:
        psi, it = _newton_semidual(C, a, b, psi, eps, tol=1e-3 * eps / scale)
        newton_iters += it
        if eps <= eps_final:
            break
        eps = max(eps * 0.1, eps_final)
    # Exact repair: fix the points whose cell is unambiguous at margin tau, split the band.
    lower = _semidual(C, a, b, psi)
    best_psi = psi
    tau = 20.0 * eps_final
    rounds = 0
    while True:
        rounds += 1
        R = C - best_psi
        order = np.argsort(R, axis=1)
        first = order[:, 0]
        r0 = np.take_along_axis(R, order[:, :1], axis=1)[:, 0]
        r1 = np.take_along_axis(R, order[:, 1:2], axis=1)[:, 0]
        band = (r1 - r0) <= tau
        fixed_mass = np.bincount(first[~band], weights=a[~band], minlength=m)
        residual = b - fixed_mass
        if residual.min() < -1e-14 and not band.all():
            tau *= 4.0
            continue
        residual = np.clip(residual, 0.0, None)
        fixed_cost = float(a[~band] @ C[~band, first[~band]])
        ab = a[band]
        if ab.size and residual.sum() > 0:
            # Rescale the tiny round-off mismatch so POT accepts the marginals.
            rb = residual * (ab.sum() / residual.sum()) if residual.sum() > 0 else residual
            band_cost, log = ot.emd2(ab, rb, C[band], numItermax=max(1_000_000, 50 * ab.size * m),
                                     log=True)
            if log["result_code"] != 1:
                raise RuntimeError(f"network simplex on the boundary band failed: {log['warning']}")
            # The band's dual potentials are a candidate for the global semi-dual: at the
            # optimum they certify the coupling (complementary slackness on all points).
            v = np.asarray(log["v"], dtype=np.float64)
            cand = _semidual(C, a, b, v)
            if cand >= lower:
                lower, best_psi = cand, v
        else:
            # No band mass left to split (round-off only): send it to its own cell.
            band_cost = float(ab @ C[band, first[band]])
        upper = fixed_cost + float(band_cost)
        gap = upper - lower
        if gap <= tol or band.all():
            break
        tau *= 4.0
    details.update(certified=bool(gap <= tol), gap=float(gap), band_points=int(band.sum()),
                   repair_rounds=rounds, newton_iterations=newton_iters,
                   w2_squared=float(upper), potentials=best_psi,
                   seconds=time.perf_counter() - t0)
    return _result(upper, lower, cost, "semidiscrete", details)


# ---------------------------------------------------------------------------------- sinkhorn
def _blocks(n, size):
    return [(s, min(s + size, n)) for s in range(0, n, size)]


def _epsilon_schedule(cost, eps):
    """epsilon-scaling: halve from the squared diameter down to eps (Schmitzer 2019, §3.2)."""
    schedule = []
    e = _cost_diameter(cost)
    while e > eps:
        schedule.append(e)
        e *= 0.5
    schedule.append(eps)
    return schedule


def _entropic_potentials(x, a, y, b, cost, eps, numItermax, stopThr, batch, stage_iters=30):
    """KL-normalized potentials (F, G): pi_ij = a_i b_j exp((F_i + G_j - C_ij)/eps).

    epsilon-scaling: POT's log-domain Sinkhorn is run at eps_k = diam/2^k, warm-started from
    the previous stage, down to eps; this cuts the iteration count by an order of magnitude.
    """
    import warnings

    import ot

    n, m = len(a), len(b)
    dense = n * m <= SINKHORN_DENSE_PAIRS
    if not dense and cost != "chordal":
        raise ValueError(
            f"the block-wise (lazy) Sinkhorn is available for the chordal cost only (squared "
            f"Euclidean in R^d); n*m = {n * m:.2e} exceeds the dense limit "
            f"{SINKHORN_DENSE_PAIRS:.0e}. Use cost='chordal' or subsample")
    M = cost_matrix(x, y, cost) if dense else None
    schedule = _epsilon_schedule(cost, eps)
    F = np.zeros(n)
    G = np.zeros(m)
    niter = 0
    converged = False
    for k, e in enumerate(schedule):
        final = k == len(schedule) - 1
        iters = numItermax if final else stage_iters
        thr = stopThr if final else 0.0
        # Potentials in POT's units: log_u = F/e + log a.
        start = (F / e + np.log(a), G / e + np.log(b))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if dense:
                _, log = ot.bregman.sinkhorn_log(a, b, M, e, numItermax=iters, stopThr=thr,
                                                 log=True, warmstart=start)
                log_u, log_v = log["log_u"], log["log_v"]
            else:
                log_u, log_v, log = ot.bregman.empirical_sinkhorn(
                    x, y, e, a=a, b=b, metric="sqeuclidean", numIterMax=iters, stopThr=thr,
                    isLazy=True, batchSize=batch, log=True, warmstart=start)
        niter += int(log.get("niter", iters)) + 1
        F = e * (np.asarray(log_u) - np.log(a))
        G = e * (np.asarray(log_v) - np.log(b))
        if final:
            converged = not any("converge" in str(w.message) for w in caught)
    return F, G, niter, converged


def _symmetric_potential(x, a, cost, eps, numItermax, stopThr, batch):
    """Self-transport potential F (pi_ij = a_i a_j exp((F_i + F_j - C_ij)/eps)) for debiasing.

    Alternating Sinkhorn oscillates on symmetric problems; the averaged fixed-point iteration
    F <- (F + T(F))/2, T(F)_i = -eps log sum_j a_j exp((F_j - C_ij)/eps), converges in a few
    dozen steps per stage (Feydy et al. 2019, §3.1). Same epsilon-scaling as the main problem.
    """
    from scipy.special import logsumexp

    n = len(a)
    dense = n * n <= SINKHORN_DENSE_PAIRS
    M = cost_matrix(x, x, cost) if dense else None
    blocks = [(0, n)] if dense else _blocks(n, batch)
    loga = np.log(a)

    def T(F, e):
        out = np.empty(n)
        for s, t in blocks:
            C = M if dense else cost_matrix(x[s:t], x, cost)
            out[s:t] = -e * logsumexp(loga[None, :] + (F[None, :] - C) / e, axis=1)
        return out

    schedule = _epsilon_schedule(cost, eps)
    F = np.zeros(n)
    niter, converged = 0, False
    for k, e in enumerate(schedule):
        final = k == len(schedule) - 1
        for _ in range(numItermax if final else 30):
            Fn = 0.5 * (F + T(F, e))
            niter += 1
            change = float(np.max(np.abs(Fn - F)))
            F = Fn
            if final and change <= stopThr * e:
                converged = True
                break
    return F, niter, converged


def _entropic_value(x, a, y, b, cost, F, G, eps, batch):
    """Dual value OT_eps = <a,F> + <b,G> - eps (sum pi - 1) (exact at any F, G)."""
    total = 0.0
    for s, e in _blocks(len(a), batch):
        C = cost_matrix(x[s:e], y, cost)
        total += float(np.sum(a[s:e, None] * b[None, :] * np.exp((F[s:e, None] + G[None, :] - C) / eps)))
    return float(a @ F + b @ G - eps * (total - 1.0))


def _sinkhorn_bracket(x, a, y, b, cost, F, G, eps, batch):
    """Certified L <= W2^2 <= U from entropic potentials.

    L: the better of the two c-transform semi-duals. U: the cost of the entropic plan rounded
    onto the transport polytope (Altschuler, Weed & Rigollet 2017, Algorithm 2).
    """
    n, m = len(a), len(b)
    blocks = _blocks(n, batch)
    row = np.empty(n)
    gct = np.full(m, np.inf)
    fct = np.empty(n)

    def plan(s, e, C):
        return a[s:e, None] * b[None, :] * np.exp((F[s:e, None] + G[None, :] - C) / eps)

    for s, e in blocks:
        C = cost_matrix(x[s:e], y, cost)
        row[s:e] = plan(s, e, C).sum(axis=1)
        fct[s:e] = np.min(C - G[None, :], axis=1)
        gct = np.minimum(gct, np.min(C - F[s:e, None], axis=0))
    lower = max(float(a @ fct + b @ G), float(a @ F + b @ gct))
    xs = np.minimum(a / np.where(row > 0, row, np.inf), 1.0)
    col = np.zeros(m)
    for s, e in blocks:
        col += (xs[s:e, None] * plan(s, e, cost_matrix(x[s:e], y, cost))).sum(axis=0)
    ys = np.minimum(b / np.where(col > 0, col, np.inf), 1.0)
    err_c = b - ys * col
    upper = 0.0
    err_r = np.empty(n)
    Cerr = np.empty(n)
    for s, e in blocks:
        C = cost_matrix(x[s:e], y, cost)
        P = xs[s:e, None] * plan(s, e, C) * ys[None, :]
        upper += float(np.sum(P * C))
        err_r[s:e] = a[s:e] - P.sum(axis=1)
        Cerr[s:e] = C @ err_c
    mass = err_r.sum()
    if mass > 0:
        upper += float(err_r @ Cerr) / mass
    return lower, upper


def _w2_sinkhorn(x, a, y, b, cost, epsilon=None, numItermax=2000, stopThr=1e-7,
                 debias=True, batch=2000, **unused):
    _reject_options(unused, "sinkhorn")
    t0 = time.perf_counter()
    eps = SINKHORN_EPSILON * _cost_diameter(cost) if epsilon is None else float(epsilon)
    if not eps > 0:
        raise ValueError(f"epsilon must be > 0; got {epsilon!r}")
    F, G, niter, conv = _entropic_potentials(x, a, y, b, cost, eps, numItermax, stopThr, batch)
    ot_ab = _entropic_value(x, a, y, b, cost, F, G, eps, batch)
    lower, upper = _sinkhorn_bracket(x, a, y, b, cost, F, G, eps, batch)
    estimate = ot_ab
    details = {"n": len(a), "m": len(b), "epsilon": eps, "iterations": niter,
               "converged": conv, "entropic_ot": ot_ab, "debiased": bool(debias)}
    if debias:
        Fa, _, ca = _symmetric_potential(x, a, cost, eps, numItermax, stopThr, batch)
        Fb, _, cb = _symmetric_potential(y, b, cost, eps, numItermax, stopThr, batch)
        ot_aa = _entropic_value(x, a, x, a, cost, Fa, Fa, eps, batch)
        ot_bb = _entropic_value(y, b, y, b, cost, Fb, Fb, eps, batch)
        estimate = ot_ab - 0.5 * (ot_aa + ot_bb)
        details.update(sinkhorn_divergence=estimate, converged=conv and ca and cb)
    details.update(
        w2_squared_bracket=(lower, upper), seconds=time.perf_counter() - t0,
        bias=("the debiased Sinkhorn divergence S_eps differs from W2^2 by O(eps^2) for smooth "
              "densities (Chizat et al. 2020) and O(eps log(1/eps)) in general; error is the "
              "certified bracket from the rounded plan (upper) and c-transformed potentials "
              "(lower), not the asymptotic bias"))
    return _result(upper, lower, cost, "sinkhorn", details, value_sq=estimate)


# ---------------------------------------------------------------------------------- public
def w2(mu, nu, cost: str = "chordal", method: str = "auto", **options) -> W2Result:
    r"""Wasserstein-2 distance between two measures on S^{d-1}.

    Parameters
    ----------
    mu, nu : PointCloud or convertible
        Anything :func:`~spherepde.measures.as_point_cloud` accepts: PointClouds, objects with
        ``to_point_cloud()``, ``(points, weights)`` pairs, (n, d) arrays.
    cost : {"chordal", "geodesic"}
        :math:`|x-y|^2` or :math:`\arccos(\langle x,y\rangle)^2`.
    method : {"auto", "exact", "semidiscrete", "sinkhorn"}
    **options
        exact: ``numItermax``. semidiscrete: ``tol`` (certificate gap on W2^2).
        sinkhorn: ``epsilon`` (default ``2e-3`` x cost diameter^2), ``numItermax``,
        ``stopThr``, ``debias`` (default True), ``batch``.

    Returns
    -------
    W2Result
        A float (the distance, not squared) with ``cost``, ``method``, ``error`` (bound on
        |value - W2|) and ``details``.

    Examples
    --------
    >>> import numpy as np, spherepde as sp
    >>> e = np.eye(3)
    >>> sp.w2(sp.PointCloud(e[:1]), sp.PointCloud(e[1:2]))
    W2Result(1.414213562, cost='chordal', method='semidiscrete', error=0.0e+00)
    """
    _check_cost(cost)
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; allowed: {', '.join(map(repr, METHODS))}")
    (x, a), (y, b) = _prepare(mu, nu)
    n, m = len(a), len(b)
    if method == "auto":
        if min(n, m) <= SEMIDISCRETE_MAX_ATOMS and n * m <= SEMIDISCRETE_MAX_PAIRS:
            method = "semidiscrete"
        elif n * m <= EXACT_AUTO_PAIRS:
            method = "exact"
        else:
            method = "sinkhorn"
    if method == "exact":
        return _w2_exact(x, a, y, b, cost, **options)
    if method == "semidiscrete":
        # The cost is symmetric, so the smaller side can always play the atoms.
        if m <= n:
            return _w2_semidiscrete(x, a, y, b, cost, **options)
        return _w2_semidiscrete(y, b, x, a, cost, **options)
    return _w2_sinkhorn(x, a, y, b, cost, **options)


def coupling_bound(trajectory_or_points, model, weights=None) -> np.ndarray:
    r"""The particle bound of docs/theory.md §4 (chordal cost), for each time of a trajectory:

    .. math:: W_2(\mu^N_t, \Pi_\#\mu^N_0)^2 \le \sum_i w_i |x_i(t) - \Pi(x_i(0))|^2,

    the cost of the coupling that sends each particle to the projection of its start.

    Parameters
    ----------
    trajectory_or_points : Trajectory or array_like (T, N, d)
        A particle trajectory (``positions`` (T, N, d), ``weights`` (N,)) or positions whose
        first slice is the initial configuration.
    model : Model
        Supplies Pi (docs/theory.md §3.1); defaults to ``trajectory.model``.
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
    errors : (T,) array of the methods' stated errors
    methods : list of str, the method used at each time
    cost : str
    limit : PointCloud, the limit measure Pi#rho0
    bound : (T,) array or None, the particle coupling bound (trajectories only)
    results : list of W2Result
    """

    times: np.ndarray
    values: np.ndarray
    errors: np.ndarray
    methods: list
    cost: str
    limit: PointCloud
    bound: np.ndarray | None = None
    results: list = field(default_factory=list, repr=False)

    def __repr__(self) -> str:
        return (f"W2Curve(T={len(self.times)}, cost={self.cost!r}, methods={sorted(set(self.methods))}, "
                f"min W2={np.min(self.values):.4g})")


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
    r"""The curve :math:`t \mapsto W_2(\rho_t, \Pi_\#\rho_0)` (docs/theory.md §3.1) for either solver.

    Parameters
    ----------
    solution_or_trajectory :
        Anything with ``times``, ``measure(i)`` (a PointCloud at ``times[i]``) and
        ``initial_measure`` (the rho0 it started from): a particle Trajectory or a spectral
        solution.
    model : Model, optional
        Defaults to ``solution_or_trajectory.model``.
    cost, method, **options :
        Passed to :func:`w2` at every time.
    bound : bool
        For particle trajectories (objects with ``positions``), also return the coupling bound.

    Returns
    -------
    W2Curve
    """
    obj = solution_or_trajectory
    model = getattr(obj, "model", None) if model is None else model
    if model is None:
        raise ValueError("w2_to_limit needs a model (pass model=, or a solution that carries one)")
    for attr in ("times", "measure", "initial_measure"):
        if not hasattr(obj, attr):
            raise TypeError(f"{type(obj).__name__} has no {attr!r}; pass a particle Trajectory or "
                            "a spectral solution")
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
    results = [w2(obj.measure(i), limit, cost=cost, method=method, **options)
               for i in range(len(times))]
    cb = None
    if bound and hasattr(obj, "positions") and cost == "chordal":
        cb = coupling_bound(obj, model)
    return W2Curve(times, np.array([float(r) for r in results]),
                   np.array([r.error for r in results]), [r.method for r in results], cost, limit,
                   cb, results)
