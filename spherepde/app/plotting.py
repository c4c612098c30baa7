"""Figures of the main job (matplotlib, Agg backend: no screen needed)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..io import atomic_path  # noqa: E402
from .config import beta_text  # noqa: E402

__all__ = ["plot_w2_curves", "plot_density_maps", "plot_particles"]


def _save(fig, path):
    with atomic_path(path, ".png") as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    plt.close(fig)
    return Path(path)


def plot_w2_curves(runs, path, gap: float | None = None):
    """W2(rho_t, Pi#rho_0) against t on a log scale, one line per run (solid: particles,
    dashed: spectral), with the zero-temperature prediction ~ e^{-gamma t/2} for reference.

    ``runs``: :class:`spherepde.app.scenario.Run` records."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    betas = sorted({r.beta for r in runs})
    colors = dict(zip(betas, plt.cm.viridis(np.linspace(0, 0.9, len(betas)))))
    for r in runs:
        ax.semilogy(r.times, np.maximum(r.w2, 1e-16), "-" if r.solver == "particles" else "--",
                    color=colors[r.beta], label=r.title)
    zero_t = [r for r in runs if r.solver == "particles" and np.isinf(r.beta)]
    if gap is not None and zero_t:
        t, w = zero_t[0].times, zero_t[0].w2
        ax.semilogy(t, w[0] * np.exp(-gap * t / 2), ":", color="k", lw=1, label="e^{-γt/2}")
    ax.set_xlabel("t")
    ax.set_ylabel("W2(ρ_t, Π#ρ_0)  (chordal)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3, which="both")
    return _save(fig, path)


def plot_density_maps(runs, path):
    """Spectral densities on a (longitude, colatitude) map at a few times, one row per beta."""
    rows = [r for r in runs if r.densities is not None]
    if not rows:
        fig, ax = plt.subplots(figsize=(5, 2))
        ax.text(0.5, 0.5, "no spectral run", ha="center", va="center")
        ax.axis("off")
        return _save(fig, path)
    ncol = max(len(run.densities) for run in rows)
    fig, axes = plt.subplots(len(rows), ncol, figsize=(3.2 * ncol, 1.9 * len(rows)), squeeze=False)
    for r, run in enumerate(rows):
        for c, (dens, t) in enumerate(zip(run.densities, run.snapshot_times)):
            ax = axes[r, c]
            im = ax.imshow(dens, extent=[-180, 180, 180, 0], aspect="auto", cmap="magma")
            ax.set_title(f"β={beta_text(run.beta)}, t={t:.2f}", fontsize=8)
            ax.tick_params(labelsize=6)
            if c == 0:
                ax.set_ylabel("colatitude (°)", fontsize=7)
            if r == len(rows) - 1:
                ax.set_xlabel("longitude (°)", fontsize=7)
            cb = fig.colorbar(im, ax=ax, fraction=0.046)
            cb.ax.tick_params(labelsize=6)
    fig.suptitle("ρ_t from the spectral solver (density relative to surface area)", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def plot_particles(runs, x0, e, path):
    """Tokens at a few times, coordinates (<x, e>, <x, f>) with f ⊥ e, one row per beta."""
    rows = [r for r in runs if r.positions is not None]
    f = np.linalg.svd(e[None, :])[2][1]
    ncol = max(len(run.positions) for run in rows) if rows else 1
    fig, axes = plt.subplots(max(1, len(rows)), ncol, figsize=(2.4 * ncol, 2.4 * max(1, len(rows))),
                             squeeze=False)
    for r, run in enumerate(rows):
        for c, (pos, t) in enumerate(zip(run.positions, run.snapshot_times)):
            ax = axes[r, c]
            ax.scatter(pos @ e, pos @ f, s=1, alpha=0.4)
            ax.set_xlim(-1.05, 1.05)
            ax.set_ylim(-1.05, 1.05)
            ax.set_aspect("equal")
            ax.set_title(f"β={beta_text(run.beta)}, t={t:.2f}", fontsize=8)
            ax.tick_params(labelsize=6)
    fig.suptitle("tokens projected on (<x, e>, <x, f>), e the dominant eigenvector of A, f ⊥ e",
                 fontsize=9)
    fig.tight_layout()
    return _save(fig, path)
