"""Semi-discrete W2: a cloud against a few atoms, certified by the semi-dual and an exact
repair of the Laguerre-cell boundaries."""
from __future__ import annotations

import time

import numpy as np

from .costs import cost_diameter, cost_matrix
from .result import bracket_result, reject_options

__all__ = ["w2_semidiscrete", "SEMIDISCRETE_MAX_ATOMS", "SEMIDISCRETE_MAX_PAIRS"]

#: "auto" uses the semi-discrete solver when one side has at most this many atoms.
SEMIDISCRETE_MAX_ATOMS = 64
#: Largest cost matrix the semi-discrete solver builds (it holds c_ij for all pairs).
SEMIDISCRETE_MAX_PAIRS = 50_000_000


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
    for it in range(1, maxiter + 1):  # noqa: B007 (the count is returned)
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


def _two_atoms(C, a, b) -> float:
    """The exact optimal cost against two atoms: with d_i = C_i0 - C_i1, every plan costs
    sum_i a_i C_i1 + sum_i p_i d_i where p_i <= a_i is the mass point i sends to atom 0 and
    sum p_i = b_0; this is least when the points of smallest d_i fill atom 0 (an exchange
    argument), the last of them possibly in part. O(n log n)."""
    d = C[:, 0] - C[:, 1]
    order = np.argsort(d, kind="stable")
    mass = a[order]
    before = np.concatenate([[0.0], np.cumsum(mass)[:-1]])
    sent = np.clip(b[0] - before, 0.0, mass)  # what each point in that order sends to atom 0
    return float(a @ C[:, 1] + sent @ d[order])


def w2_semidiscrete(x, a, y, b, cost, gap_tol=None, **unused):
    """x, a: the large ("continuous") side; y, b: the atoms."""
    import ot

    reject_options(unused, "semidiscrete")
    n, m = len(a), len(b)
    t0 = time.perf_counter()
    if n * m > SEMIDISCRETE_MAX_PAIRS:
        raise ValueError(f"the semi-discrete solver holds the n x m cost matrix and needs "
                         f"n*m <= {SEMIDISCRETE_MAX_PAIRS:.0e}; got {n}*{m}. "
                         "Use method='multiscale'")
    C = cost_matrix(x, y, cost)
    scale = cost_diameter(cost)
    # Round-off in sums of n terms of size <= scale; the certificate must close to this.
    tol = 1e-13 * scale * max(1.0, np.sqrt(n)) if gap_tol is None else float(gap_tol)
    details = {"n": n, "atoms": m}
    if m == 1:
        val = float(a @ C[:, 0])
        return bracket_result(val, val, cost, "semidiscrete", dict(details, certified=True, gap=0.0,
                                                             seconds=time.perf_counter() - t0))
    if m == 2:
        val = _two_atoms(C, a, b)
        return bracket_result(val, val, cost, "semidiscrete", dict(details, certified=True, gap=0.0,
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
    return bracket_result(upper, lower, cost, "semidiscrete", details)

