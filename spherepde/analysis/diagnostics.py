r"""Diagnostics of a token configuration mu = sum_i w_i delta_{x_i} on S^{d-1}.

- :func:`interaction_energy` — :math:`E_\beta(\mu) = \frac{1}{2\beta}\iint e^{\beta\langle x,y
  \rangle}\,d\mu\,d\mu` (:mod:`spherepde.interaction.energy`), non-decreasing along SA and USA
  with Q = K = V = I.
- :func:`mean_inner_product` — average of :math:`\langle x_i, x_j\rangle` over pairs.
- :func:`cluster_count` — number of clusters at a stated chordal threshold.
- :func:`common_hemisphere` — do all tokens lie in one open hemisphere?

Everything runs in O(N) memory (the energy through the fused log-partition kernel).

>>> import numpy as np, spherepde as sp
>>> x = np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
>>> sp.diagnostics.cluster_count(x)
2
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import linprog

from ..interaction.energy import energy_from_partition, log_partition
from ..measures import PointCloud

__all__ = ["interaction_energy", "log_partition", "mean_inner_product", "cluster_count",
           "clusters", "common_hemisphere", "w2_to_nearest_dirac", "CLUSTER_TOL"]

#: Default cluster threshold: chordal distance |x - y| below which two tokens are one cluster.
CLUSTER_TOL = 1e-3


def _cloud(mu, weights=None) -> PointCloud:
    if isinstance(mu, PointCloud):
        if weights is not None:
            raise ValueError("pass weights either in the PointCloud or separately, not both")
        return mu
    return PointCloud(mu, weights)


def interaction_energy(mu, weights=None, beta: float = 1.0, log: bool = False) -> float:
    r"""Interaction energy :math:`E_\beta(\mu) = \frac{1}{2\beta}\sum_{i,j} w_i w_j
    e^{\beta\langle x_i, x_j\rangle}` (Q = K = V = I; docs/theory.md).

    Parameters
    ----------
    mu : PointCloud or (N, d) points
    weights : (N,), optional (default uniform)
    beta : float > 0
        At beta = 0 the energy is infinite; use :func:`mean_inner_product`, whose
        :math:`\frac12|\int x\,d\mu|^2` is the beta -> 0 limit of E_beta - 1/(2 beta).
    log : bool
        Return log E_beta instead (no overflow for large beta).

    Returns
    -------
    float
    """
    cloud = _cloud(mu, weights)
    beta = float(beta)
    if not np.isfinite(beta) or beta <= 0:
        raise ValueError(f"the energy E_beta needs a finite beta > 0; got {beta}")
    lz = log_partition(cloud.points, cloud.points, cloud.weights, beta)
    w = cloud.weights
    alive = w > 0
    top = float(lz[alive].max())
    return energy_from_partition(w[alive], np.exp(lz[alive] - top), top, beta, log=log)


def mean_inner_product(mu, weights=None, exclude_diagonal: bool = True) -> float:
    r"""Weighted mean of :math:`\langle x_i, x_j\rangle` over pairs, in O(N).

    With ``exclude_diagonal`` (default) the pairs i != j:
    :math:`(|\sum_i w_i x_i|^2 - \sum_i w_i^2)/(1 - \sum_i w_i^2)`, which for equiangular tokens
    is their common inner product rho. Otherwise :math:`|\sum_i w_i x_i|^2` (all pairs).
    """
    cloud = _cloud(mu, weights)
    m = cloud.weights @ cloud.points
    total = float(m @ m)
    if not exclude_diagonal:
        return total
    w2 = float(np.sum(cloud.weights ** 2))
    if w2 >= 1.0 - 1e-15:
        raise ValueError("a single token of weight 1 has no pairs i != j")
    return (total - w2) / (1.0 - w2)


def clusters(mu, tol: float = CLUSTER_TOL, weights=None):
    """Greedy leader clustering at chordal threshold ``tol``.

    Tokens are visited in order; each joins the first leader within chordal distance
    ``tol`` or becomes a new leader. When every cluster has diameter below ``tol`` and
    clusters are more than ``2 tol`` apart, this is exactly the partition into connected
    components at scale ``tol``. Cost O(N·K) time, O(N + K) memory (K clusters).

    Returns
    -------
    labels : (N,) int cluster index of every token
    leaders : (K, d) one representative per cluster
    masses : (K,) total weight of each cluster
    """
    cloud = _cloud(mu, weights)
    tol = float(tol)
    if not tol > 0:
        raise ValueError(f"tol must be > 0; got {tol}")
    # |x - y|^2 = 2 - 2<x, y> for unit vectors: compare inner products
    cos_min = 1.0 - 0.5 * tol * tol
    x = cloud.points
    labels = np.full(cloud.n, -1, dtype=np.int64)
    leaders: list[int] = []
    unassigned = np.arange(cloud.n)
    while unassigned.size:
        lead = unassigned[0]
        near = x[unassigned] @ x[lead] >= cos_min
        near[0] = True  # the leader itself, even when <x, x> rounds below cos_min
        labels[unassigned[near]] = len(leaders)
        leaders.append(lead)
        unassigned = unassigned[~near]
    masses = np.bincount(labels, weights=cloud.weights, minlength=len(leaders))
    return labels, x[leaders], masses


def cluster_count(mu, tol: float = CLUSTER_TOL, weights=None) -> int:
    """Number of clusters: groups of tokens within chordal distance ``tol`` (default
    :data:`CLUSTER_TOL` = 1e-3) of their leader; see :func:`clusters`."""
    return int(clusters(mu, tol, weights)[1].shape[0])


def common_hemisphere(mu, weights=None, margin: float = 1e-12):
    r"""Do all tokens of positive weight lie in one open hemisphere {x : <v, x> > 0}?

    Solves the linear program max t s.t. <v, x_i> >= t for all i, |v_k| <= 1 (O(N·d) memory);
    the answer is yes iff t* > ``margin``. A quick test with v = sum_i w_i x_i comes first.

    Returns
    -------
    (bool, v) : the answer and, when yes, a unit vector v with min_i <v, x_i> > 0 (else None).
    """
    cloud = _cloud(mu, weights)
    x = cloud.points[cloud.weights > 0]
    m = cloud.weights[cloud.weights > 0] @ x
    nm = np.linalg.norm(m)
    if nm > 0 and np.min(x @ m) > margin * nm:
        return True, m / nm
    d = x.shape[1]
    c = np.zeros(d + 1)
    c[-1] = -1.0  # maximize t
    A = np.hstack([-x, np.ones((x.shape[0], 1))])  # t - <v, x_i> <= 0
    res = linprog(c, A_ub=A, b_ub=np.zeros(x.shape[0]),
                  bounds=[(-1.0, 1.0)] * d + [(None, 1.0)], method="highs")
    if not res.success:
        raise RuntimeError(f"hemisphere linear program failed: {res.message}")
    t = -res.fun
    if t > margin:
        v = res.x[:d]
        return True, v / np.linalg.norm(v)
    return False, None


def w2_to_nearest_dirac(mu, weights=None) -> float:
    r"""Chordal W2 distance from mu to the nearest point mass on the sphere (the set of single
    clusters):

    .. math:: \min_{|y|=1} W_2(\mu, \delta_y)^2 = \min_y \int |x - y|^2 d\mu
              = 2 - 2\,\Big|\int x\,d\mu\Big|,

    attained at y = m/|m|, m the mean of mu (every coupling with a Dirac is the product one).
    It is 0 exactly when mu is a single cluster. Evaluated as the sum of |x_i - y|^2, not as
    2 - 2|m|, which loses all digits near a cluster (2 - 2|m| ~ 1e-16 for a spread ~ 1e-8).
    """
    cloud = _cloud(mu, weights)
    m = cloud.weights @ cloud.points
    norm = float(np.linalg.norm(m))
    if norm == 0.0:  # balanced: every point mass is at the same distance, sqrt(2)
        return float(np.sqrt(2.0))
    diff = cloud.points - m / norm
    return float(np.sqrt(cloud.weights @ np.einsum("ij,ij->i", diff, diff)))
