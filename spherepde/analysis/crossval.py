r"""Cross-validation of the particle and density solvers.

Particles (N tokens sampled from rho_0) and the spectral solver (degree lmax) start from the
same rho_0 and evolve under the same model; the discrepancy

.. math:: D(N, L, t) = W_2(\mu^N_t, \rho^L_t)

is measured with the exact network simplex between the tokens and the spectral density on a
fixed Gauss evaluation grid (nodes weighted by quadrature weight × density). Two errors make
up D: the sampling error of the tokens, which for the empirical measure of N samples on a
2-dimensional sphere behaves like :math:`\sqrt{\log N / N}` (Ajtai–Komlós–Tusnády), and the
truncation error of the spectral solution, which falls geometrically in L. A convergence study
varies both; a passing study shows D falling at the empirical-measure rate in N once L is
large enough, and flat in L once the sampling error dominates.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..measures import PointCloud, as_measure, grid_point_cloud
from ..sphere import GaussGrid

__all__ = ["CrossValidation", "cross_validate", "grid_cloud", "empirical_rate"]


def grid_cloud(density, nlat: int = 48) -> PointCloud:
    """A density on S^2 as a point cloud on a Gauss grid (nlat x 2 nlat nodes), weights =
    quadrature weight × max(density, 0), renormalized to mass 1.

    ``density`` is a callable f(x), x: (..., 3), such as ``solution.density`` bound to a time.
    """
    g = GaussGrid(nlat, 2 * nlat)
    return grid_point_cloud(g.points, g.weights, density(g.points))


def empirical_rate(n) -> float:
    r"""Local log-log slope of :math:`\sqrt{\log N / N}` at N: :math:`-1/2 + 1/(2\log N)`,
    the rate of E W2(mu^N, mu) for N samples of a density on a 2-D manifold (AKT)."""
    return -0.5 + 0.5 / np.log(n)


@dataclass
class CrossValidation:
    """Result of :func:`cross_validate`.

    Attributes
    ----------
    times : (T,)
    n_particles : (P,) numbers of tokens
    lmax : (L,) spectral degrees
    discrepancy : (L, P, S, T) W2 between tokens (seed s) and the spectral density
    spectral_self : (L, T) total-variation distance between each spectral solution and the
        finest one on the evaluation grid (the spectral part of the error; W2 <= 2 sqrt(TV))
    """

    times: np.ndarray
    n_particles: np.ndarray
    lmax: np.ndarray
    seeds: np.ndarray
    discrepancy: np.ndarray
    spectral_self: np.ndarray
    cost: str = "chordal"
    info: dict = field(default_factory=dict)

    def mean_discrepancy(self) -> np.ndarray:
        """(L, P, T) mean over seeds."""
        return self.discrepancy.mean(axis=2)

    def rate_in_n(self, i_time: int = -1, i_lmax: int = -1) -> float:
        """Fitted slope of log mean D against log N at one time and degree."""
        d = self.mean_discrepancy()[i_lmax, :, i_time]
        return float(np.polyfit(np.log(self.n_particles), np.log(d), 1)[0])

    def table(self) -> str:
        """Markdown table of the seed-averaged discrepancy at the last time."""
        head = "| lmax \\ N | " + " | ".join(str(n) for n in self.n_particles) + " |"
        lines = [head, "|" + "---|" * (len(self.n_particles) + 1)]
        for i, L in enumerate(self.lmax):
            row = self.mean_discrepancy()[i, :, -1]
            lines.append(f"| {L} | " + " | ".join(f"{v:.4g}" for v in row) + " |")
        return "\n".join(lines)


def cross_validate(model, density0, times, n_particles=(250, 500, 1000), lmax=(24, 48),
                   seeds=(0, 1), eval_nlat: int = 48, cost: str = "chordal",
                   particle_options=None, spectral_options=None) -> CrossValidation:
    """Run particles and spectral solutions from the same rho_0 and measure their distance.

    Parameters
    ----------
    model : Model on S^2 (d = 3)
    density0 : a Measure of :mod:`spherepde.measures` or a callable density on S^2
    times : (T,) output times (times[0] = 0 is the initial time)
    n_particles : numbers of tokens N (each sampled with every seed)
    lmax : spectral degrees L
    seeds : sampling seeds
    eval_nlat : Gauss grid on which spectral densities are compared (nlat x 2 nlat nodes)
    cost : "chordal" or "geodesic"

    Returns
    -------
    CrossValidation
    """
    from ..density import SpectralSolver
    from ..particles import ParticleSolver
    from ..wasserstein import w2

    if model.d != 3:
        raise ValueError(f"cross-validation runs on S^2 (d = 3); the model has d = {model.d}")
    rho0 = as_measure(density0, 3)
    times = np.asarray(times, dtype=np.float64)
    n_particles = np.asarray(sorted(n_particles), dtype=int)
    lmax = np.asarray(sorted(lmax), dtype=int)
    seeds = np.asarray(seeds, dtype=int)
    popt = dict(particle_options or {})
    sopt = dict(spectral_options or {})

    spectral = []
    for L in lmax:
        sol = SpectralSolver(model, lmax=int(L), **sopt).solve(rho0, times)
        spectral.append([grid_cloud(lambda x, i=i, sol=sol: sol.density(i, x), eval_nlat)
                         for i in range(len(times))])
    tokens = {}
    for n in n_particles:
        for s in seeds:
            traj = ParticleSolver(model, **popt).solve(rho0.sample(int(n), seed=int(s)), times)
            tokens[n, s] = traj
    D = np.empty((len(lmax), len(n_particles), len(seeds), len(times)))
    for a, _ in enumerate(lmax):
        for b, n in enumerate(n_particles):
            for c, s in enumerate(seeds):
                for k in range(len(times)):
                    D[a, b, c, k] = float(w2(tokens[n, s].measure(k), spectral[a][k], cost=cost,
                                             method="exact"))
    # Spectral solutions live on the same grid: their total-variation distance is cheap and
    # bounds W2 (W2^2 <= diam^2 * TV, diam^2 = 4 chordal).
    self_err = np.array([[0.5 * float(np.abs(spectral[a][k].weights
                                             - spectral[-1][k].weights).sum())
                          for k in range(len(times))] for a in range(len(lmax))])
    return CrossValidation(times, n_particles, lmax, seeds, D, self_err, cost,
                           {"eval_grid": (eval_nlat, 2 * eval_nlat)})
