"""Figures of the main job (matplotlib, Agg backend: no screen needed)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..io import atomic_path  # noqa: E402

__all__ = ["plot_w2_curves", "plot_density_maps", "plot_particles"]


def _save(fig, path):
    with atomic_path(path, ".png") as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    plt.close(fig)
    return Path(path)


def plot_w2_curves(curves: dict, path, gap: float | None = None):
    """W2(rho_t, Pi#rho_0) against t on a log scale, one line per run (solid: particles,
    dashed: spectral), with the zero-temperature prediction ~ e^{-gamma t/2} for reference."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = sorted({k.split("_", 1)[1] for k in curves})
    colors = dict(zip(labels, plt.cm.viridis(np.linspace(0, 0.9, len(labels)))))
    for k, (t, w) in curves.items():
        kind, lab = k.split("_", 1)
        ax.semilogy(t, np.maximum(w, 1e-16), "-" if kind == "particles" else "--",
                    color=colors[lab], label=f"{kind}, {lab.replace('beta=', 'β=')}")
    if gap is not None and "particles_beta=inf" in curves:
        t, w = curves["particles_beta=inf"]
        ax.semilogy(t, w[0] * np.exp(-gap * t / 2), ":", color="k", lw=1, label="e^{-γt/2}")
    ax.set_xlabel("t")
    ax.set_ylabel("W2(ρ_t, Π#ρ_0)  (chordal)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3, which="both")
    return _save(fig, path)


def plot_density_maps(snapshots: dict, path):
    """Spectral densities on a (longitude, colatitude) map at a few times, one row per beta."""
    rows = [(k, v) for k, v in snapshots.items() if k.startswith("spectral") and "densities" in v]
    if not rows:
        fig, ax = plt.subplots(figsize=(5, 2))
        ax.text(0.5, 0.5, "no spectral run", ha="center", va="center")
        ax.axis("off")
        return _save(fig, path)
    ncol = max(len(v["densities"]) for _, v in rows)
    fig, axes = plt.subplots(len(rows), ncol, figsize=(3.2 * ncol, 1.9 * len(rows)), squeeze=False)
    for r, (k, v) in enumerate(rows):
        for c, (dens, t) in enumerate(zip(v["densities"], v["snapshot_times"])):
            ax = axes[r, c]
            im = ax.imshow(dens, extent=[-180, 180, 180, 0], aspect="auto", cmap="magma")
            ax.set_title(f"{k.split('_', 1)[1].replace('beta=', 'β=')}, t={t:.2f}", fontsize=8)
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


def plot_particles(snapshots: dict, x0, e, path):
    """Tokens at a few times, coordinates (<x, e>, <x, f>) with f ⊥ e, one row per beta."""
    rows = [(k, v) for k, v in snapshots.items() if k.startswith("particles") and "positions" in v]
    f = np.linalg.svd(e[None, :])[2][1]
    ncol = max(len(v["positions"]) for _, v in rows) if rows else 1
    fig, axes = plt.subplots(max(1, len(rows)), ncol, figsize=(2.4 * ncol, 2.4 * max(1, len(rows))),
                             squeeze=False)
    for r, (k, v) in enumerate(rows):
        for c, (pos, t) in enumerate(zip(v["positions"], v["snapshot_times"])):
            ax = axes[r, c]
            ax.scatter(pos @ e, pos @ f, s=1, alpha=0.4)
            ax.set_xlim(-1.05, 1.05)
            ax.set_ylim(-1.05, 1.05)
            ax.set_aspect("equal")
            ax.set_title(f"{k.split('_', 1)[1].replace('beta=', 'β=')}, t={t:.2f}", fontsize=8)
            ax.tick_params(labelsize=6)
    fig.suptitle("tokens projected on (<x, e>, <x, f>), e the dominant eigenvector of A, f ⊥ e",
                 fontsize=9)
    fig.tight_layout()
    return _save(fig, path)
