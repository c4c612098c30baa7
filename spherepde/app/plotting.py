r"""Figures of the main job and of sweeps, drawn from saved results (matplotlib, Agg backend).

Everything here reads an :class:`xarray.Dataset` (``results.nc`` of :mod:`.results`, or
``sweep.nc``), so ``spherepde plot`` redraws without recomputing.

Maps on the sphere (no cartographic library needed):

- **Mollweide** (whole sphere), with the central meridian 90° east of the atom +e, so that
  both atoms ±e lie on the map, never on its seam;
- **orthographic pair**: the hemisphere seen from +e (left disc) and from −e (right disc); the
  rim of both discs is the great circle E^⊥ = {⟨x, e⟩ = 0} that splits the mass between the
  two atoms. Coordinates ⟨x, f⟩ (mirrored on the right disc, as seen from outside) and ⟨x, g⟩,
  with g the direction of the north pole orthogonal to e and f = g × e.

Densities share one colour scale per row (one β across its time panels), logarithmic when the
row spans more than two decades; the colour bar carries the units (per steradian).
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import colors as mcolors  # noqa: E402
from matplotlib import ticker  # noqa: E402

from ..io import atomic_path  # noqa: E402

__all__ = ["plot_results", "plot_w2_curves", "plot_density_maps", "plot_orthographic",
           "plot_particles", "animate_run", "plot_phase_diagram"]

#: Gap between the two discs of an orthographic pair, in disc radii.
_GAP = 0.12
_C = 1.0 + _GAP / 2  # centres of the discs at x = -_C (view from +e) and x = +_C (from -e)
CMAP = "magma"


def _save(fig, path):
    with atomic_path(path, ".png") as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    plt.close(fig)
    return Path(path)


def beta_tex(beta: float) -> str:
    r"""β as mathtext: ``$\beta=16$``, ``$\beta=\infty$``."""
    return r"$\beta=\infty$" if math.isinf(beta) else rf"$\beta={beta:g}$"


# ---------------------------------------------------------------------------- geometry
def view_frame(e) -> np.ndarray:
    """(3, 3) rows e, f, g: g the north pole made orthogonal to e, f = g × e."""
    e = np.asarray(e, dtype=np.float64)
    e = e / np.linalg.norm(e)
    up = np.array([0.0, 0.0, 1.0]) if abs(e[2]) < 0.9 else np.array([1.0, 0.0, 0.0])
    g = up - (up @ e) * e
    g /= np.linalg.norm(g)
    return np.stack([e, np.cross(g, e), g])


def lat_lon(x):
    """Degrees of latitude and longitude of unit vectors x: (..., 3)."""
    x = np.asarray(x, dtype=np.float64)
    return (np.degrees(np.arcsin(np.clip(x[..., 2], -1.0, 1.0))),
            np.degrees(np.arctan2(x[..., 1], x[..., 0])))


def map_sampler(lat, lon, values):
    """Bilinear interpolation x (..., 3) -> value of a field given on a lat/lon grid (degrees;
    any order, longitudes periodic, duplicate seam columns allowed)."""
    from scipy.interpolate import RegularGridInterpolator

    lat, lon, values = np.asarray(lat), np.asarray(lon) % 360.0, np.asarray(values, dtype=float)
    lat_order = np.argsort(lat)
    lon_u, lon_idx = np.unique(lon, return_index=True)
    vals = values[lat_order][:, lon_idx]
    # periodic in longitude: one column on each side
    lon_ext = np.concatenate([[lon_u[-1] - 360.0], lon_u, [lon_u[0] + 360.0]])
    vals = np.concatenate([vals[:, -1:], vals, vals[:, :1]], axis=1)
    lat_s = lat[lat_order]
    interp = RegularGridInterpolator((lat_s, lon_ext), vals, bounds_error=False, fill_value=None)

    def sample(x):
        la, lo = lat_lon(x)
        la = np.clip(la, lat_s[0], lat_s[-1])
        pts = np.stack([la.ravel(), (lo % 360.0).ravel()], axis=-1)
        return interp(pts).reshape(la.shape)

    return sample


def ortho_project(x, frame):
    """Orthographic pair coordinates (X, Y) of points x: (..., 3): the hemisphere ⟨x, e⟩ >= 0
    on the left disc, the other one mirrored on the right disc."""
    x = np.asarray(x, dtype=np.float64)
    a, b, c = x @ frame[0], x @ frame[1], x @ frame[2]
    front = a >= 0
    return np.where(front, b - _C, -b + _C), c


def ortho_raster(frame, n: int = 181):
    """Points (n, 2n', 3) behind the pixels of an orthographic pair image, NaN outside the
    discs, and the image extent."""
    half = _C + 1.0
    xs = np.linspace(-half, half, int(round(n * half)))
    ys = np.linspace(-1.0, 1.0, n)
    X, Y = np.meshgrid(xs, ys)
    front = X < 0
    u = np.where(front, X + _C, -(X - _C))
    r2 = u**2 + Y**2
    w = np.sqrt(np.clip(1.0 - r2, 0.0, None)) * np.where(front, 1.0, -1.0)
    pts = u[..., None] * frame[1] + Y[..., None] * frame[2] + w[..., None] * frame[0]
    pts[r2 > 1.0] = np.nan
    return pts, (-half, half, -1.0, 1.0)


def _mollweide_xy(lat, lon, lon0):
    """Map coordinates (radians) of the shifted Mollweide axes: central meridian lon0."""
    return np.radians((lon - lon0 + 180.0) % 360.0 - 180.0), np.radians(lat)


def _great_circle(normal, n=361):
    """Points of the great circle orthogonal to ``normal``."""
    F = view_frame(normal)
    s = np.linspace(0, 2 * np.pi, n)
    return np.cos(s)[:, None] * F[1] + np.sin(s)[:, None] * F[2]


def _split_jumps(x, y, jump):
    """Insert NaN where consecutive points jump by more than ``jump`` (seam or disc change)."""
    x, y = np.asarray(x, float).copy(), np.asarray(y, float).copy()
    bad = np.nonzero(np.hypot(np.diff(x), np.diff(y)) > jump)[0]
    return np.insert(x, bad + 1, np.nan), np.insert(y, bad + 1, np.nan)


# ---------------------------------------------------------------------------- colour scales
def density_norm(values, decades: float = 2.0, floor: float = 1e-4):
    """One colour scale for all panels of a row: logarithmic when the positive values span more
    than ``decades`` decades (down to ``floor`` times the maximum), linear otherwise."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return mcolors.Normalize(0, 1)
    vmax = float(v.max())
    pos = v[v > 0]
    if vmax > 0 and pos.size and vmax / float(pos.min()) > 10**decades:
        return mcolors.LogNorm(vmin=max(float(pos.min()), vmax * floor), vmax=vmax, clip=True)
    return mcolors.Normalize(vmin=0.0, vmax=max(vmax, 1e-300))


def _cmap():
    return plt.get_cmap(CMAP).with_extremes(bad=(1, 1, 1, 0), under=plt.get_cmap(CMAP)(0.0))


# ---------------------------------------------------------------------------- dataset access
def _atoms(ds):
    pts = ds["limit_points"].values
    w = ds["limit_weights"].values
    return pts, w


def _e(ds):
    return ds["dominant_eigenspace"].values[:, 0]


def _panel_times(ds, max_panels=4):
    """Indices of the snapshot times drawn: where densities exist if any, else tokens."""
    if "snapshot_time" not in ds.coords:
        return np.zeros(0, dtype=int)
    have = None
    if "density" in ds:
        have = np.isfinite(ds["density"].values).any(axis=(0, 2, 3))
    if (have is None or not have.any()) and "positions" in ds:
        have = np.isfinite(ds["positions"].values).any(axis=(0, 2, 3))
    idx = np.nonzero(have)[0] if have is not None else np.zeros(0, dtype=int)
    if idx.size > max_panels:
        idx = idx[np.unique(np.linspace(0, idx.size - 1, max_panels).round().astype(int))]
    return idx


def _density_rows(ds):
    if "density" not in ds:
        return []
    d = ds["density"].values
    return [j for j in range(ds.sizes["beta"]) if np.isfinite(d[j]).any()]


#: How a figure names the solver of a density map, and its resolution.
_DENSITY_SOURCES = {"finite_volume": ("finite volumes", "n"),
                    "spectral": ("spectral solver", "lmax")}


def _density_source(ds, rows) -> str:
    """The solver(s) behind the density rows, for a figure title: e.g. "finite volumes
    (n=32)", or one such name per group of β when the rows mix solvers."""
    if "density_solver" not in ds:  # results written before the source was recorded
        return "spectral solver"
    groups: dict = {}
    for j in rows:
        solver = str(ds["density_solver"].values[j])
        name, symbol = _DENSITY_SOURCES.get(solver, (solver.replace("_", " "), "resolution"))
        res = ""
        if "resolution" in ds and solver in ds["solver"].values:
            res = f" ({symbol}={int(ds['resolution'].sel(solver=solver).values[j])})"
        groups.setdefault(name + res, []).append(beta_tex(float(ds["beta"][j])))
    if len(groups) == 1:
        return next(iter(groups))
    return "; ".join(f"{k} at {', '.join(v)}" for k, v in groups.items())


def _token_rows(ds):
    if "positions" not in ds:
        return []
    p = ds["positions"].values
    return [j for j in range(ds.sizes["beta"]) if np.isfinite(p[j]).any()]


def _tokens_at(ds, j, k, max_tokens=1500):
    """Tokens of row j at snapshot k (at most ``max_tokens`` drawn, a fixed subset), or None."""
    if "positions" not in ds:
        return None
    x = ds["positions"].values[j, k]
    if not np.isfinite(x).all():
        return None
    return x[:: max(1, x.shape[0] // max_tokens)]


# ---------------------------------------------------------------------------- W2 curves
def plot_w2_curves(ds, path):
    r"""W2(ρ_t, Π#ρ_0) against t, log scale: one colour per β (solid: particles, dashed:
    spectral, dash-dotted: finite volumes), × where a run stops being resolved, curves that failed
    the convergence check drawn faint and labelled so, and the zero-temperature rate
    :math:`e^{-\gamma t/2}` for reference."""
    w2 = ds["w2"].values
    if not np.isfinite(w2).any():
        raise FigureDataError("the results hold no finite W2 value (every entry of w2 is NaN)")
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    betas = ds["beta"].values
    palette = plt.get_cmap("tab10")
    style = {"particles": "-", "spectral": "--", "finite_volume": "-."}
    checked = "converged" in ds and "coarse_resolution" in ds
    t = ds["time"].values
    lo, hi = np.inf, 0.0
    marked = False
    for i, solver in enumerate(ds["solver"].values):
        for j, beta in enumerate(betas):
            ok = np.isfinite(w2[i, j])
            if not ok.any():
                continue
            tt, ww = t[ok], np.maximum(w2[i, j][ok], 1e-16)
            lo, hi = min(lo, ww.min()), max(hi, ww.max())
            label = f"{str(solver).replace('_', ' ')}, {beta_tex(float(beta))}"
            faint = False
            if checked and int(ds["coarse_resolution"].values[i, j]) > 0:
                faint = not bool(ds["converged"].values[i, j])
                label += " (not converged)" if faint else " (converged)"
            ax.semilogy(tt, ww, style.get(str(solver), ":"), color=palette(j % 10), lw=1.6,
                        alpha=0.45 if faint else 1.0, label=label)
            tu = float(ds["unresolved_from"].values[i, j])
            if np.isfinite(tu):
                k = int(np.argmin(np.abs(tt - tu)))
                ax.plot(tt[k], ww[k], "X", color=palette(j % 10), ms=9, mec="k", mew=0.6)
                marked = True
    gap = ds.attrs.get("spectral_gap")
    ok = np.zeros(0, dtype=bool)
    if (gap is not None and np.isfinite(gap) and np.isinf(betas).any()
            and "particles" in ds["solver"]):
        i = list(ds["solver"].values).index("particles")
        ok = np.isfinite(w2[i, -1])
    if ok.any():  # the rate line starts on the zero-temperature particle curve
        tt, ww = t[ok], w2[i, -1][ok]
        t0 = float(np.asarray(ds.attrs.get("rate_window", [tt[0]]))[0])
        k = int(np.argmin(np.abs(tt - t0)))
        ax.semilogy(tt, ww[k] * np.exp(-gap * (tt - tt[k]) / 2), ":", color="k", lw=1.2,
                    label=rf"$\propto e^{{-\gamma t/2}}$, $\gamma={gap:.3g}$ "
                          r"(theory, $\beta=\infty$)")
    if marked:
        ax.plot([], [], "X", color="0.5", mec="k", mew=0.6, ms=8,
                label="× unresolved from here on (see summary.md)")
    ax.set_xlabel(r"model time $t$")
    ax.set_ylabel(r"$W_2(\rho_t,\ \Pi_\#\rho_0)$  (chordal cost)")
    if np.isfinite(lo) and hi > 0:
        decades = math.log10(hi / lo) if lo > 0 else 16
        # at least four labelled ticks, not crowded: 1..9 within a decade, 1-2-3-5 within
        # two and a half, 1-2-5 within three, decades beyond
        subs = (np.arange(1.0, 10.0) if decades < 1 else (1.0, 2.0, 3.0, 5.0) if decades < 2.5
                else (1.0, 2.0, 5.0) if decades < 3 else (1.0,))
        ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=subs, numticks=20))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(_tick_label))
        ax.yaxis.set_minor_locator(ticker.LogLocator(base=10, subs=np.arange(2, 10) * 0.1 * 10,
                                                     numticks=20))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_ylim(lo / 1.5, hi * 1.5)
    ax.grid(alpha=0.3, which="major")
    ax.grid(alpha=0.1, which="minor")
    ax.legend(fontsize=7.5, ncol=2, loc="lower left", framealpha=0.9)
    ax.set_title("distance to the projected limit $\\Pi_\\#\\rho_0$ (atoms at ±e)", fontsize=10)
    return _save(fig, path)


# ---------------------------------------------------------------------------- maps
def _mark_mollweide(ax, ds, lon0):
    pts, w = _atoms(ds)
    # the signs name the two atoms of dim E = 1; a circle's atoms beyond two are not labelled
    for p, m, sign in zip(pts, w, ("+", "−"), strict=False):
        la, lo = lat_lon(p)
        x, y = _mollweide_xy(la, lo, lon0)
        ax.plot(x, y, marker="*", ms=11, mfc="cyan", mec="k", mew=0.7, ls="none", zorder=5)
        ax.annotate(f"{sign}e ({m:.2f})", (x, y), xytext=(0, -13), textcoords="offset points",
                    ha="center", fontsize=6, color="k",
                    bbox=dict(boxstyle="round,pad=0.1", fc="w", ec="none", alpha=0.7))
    U = ds["dominant_eigenspace"].values
    # E^perp for dim E = 1 (the boundary between the two basins); E itself for dim E = 2
    circle = (_great_circle(U[:, 0]) if U.shape[1] == 1
              else _great_circle(np.cross(U[:, 0], U[:, 1])))
    la, lo = lat_lon(circle)
    x, y = _split_jumps(*_mollweide_xy(la, lo, lon0), jump=np.pi)
    ax.plot(x, y, "--", color="cyan", lw=0.8, zorder=4)


def _mollweide_axes(fig, spec, lon0):
    ax = fig.add_subplot(spec, projection="mollweide")
    # meridians every 60°; their labels would sit on the atoms, the title gives the centre
    ax.xaxis.set_major_locator(ticker.FixedLocator(np.radians([-120, -60, 0, 60, 120])))
    ax.xaxis.set_major_formatter(ticker.NullFormatter())
    ax.yaxis.set_major_locator(ticker.FixedLocator(np.radians([-60, -30, 0, 30, 60])))
    ax.tick_params(labelsize=5.5)
    ax.grid(alpha=0.2, lw=0.5)
    return ax


def plot_density_maps(ds, path, nlon: int = 360):
    """Mollweide maps of the density (the finite volumes' where they ran at that β, else the
    spectral solver's: ``density_solver``): rows β, columns the snapshot times, one colour
    scale per row, tokens of the particle run at the same β and time overlaid (white dots)."""
    rows, cols = _density_rows(ds), _panel_times(ds)
    if not rows or not cols.size:
        return _placeholder(path, NO_DENSITY)
    e = _e(ds)
    lon0 = float(lat_lon(e)[1]) + 90.0  # +e at -90°, -e at +90°: both inside the map
    sample_lat = np.linspace(-90, 90, nlon // 2 + 1)
    sample_lon = np.linspace(-180, 180, nlon + 1)
    LAc = 0.5 * (sample_lat[1:] + sample_lat[:-1])
    LOc = 0.5 * (sample_lon[1:] + sample_lon[:-1])
    LA, LO = np.meshgrid(LAc, LOc + lon0, indexing="ij")
    xyz = np.stack([np.cos(np.radians(LA)) * np.cos(np.radians(LO)),
                    np.cos(np.radians(LA)) * np.sin(np.radians(LO)),
                    np.sin(np.radians(LA))], -1)
    fig = plt.figure(figsize=(3.3 * len(cols) + 0.8, 1.95 * len(rows) + 0.6))
    gs = fig.add_gridspec(len(rows), len(cols) + 1, width_ratios=[1] * len(cols) + [0.04],
                          wspace=0.08, hspace=0.25, top=0.93)
    dens = ds["density"].values
    lat, lon = ds["lat"].values, ds["lon"].values
    for r, j in enumerate(rows):
        norm = density_norm(dens[j][cols])
        im = None
        for c, k in enumerate(cols):
            ax = _mollweide_axes(fig, gs[r, c], lon0)
            if np.isfinite(dens[j, k]).any():
                vals = map_sampler(lat, lon, dens[j, k])(xyz)
                im = ax.pcolormesh(np.radians(sample_lon), np.radians(sample_lat), vals,
                                   norm=norm, cmap=_cmap(), shading="flat", rasterized=True)
            else:
                ax.text(0, 0, "not reached\n(run stopped)", ha="center", va="center", fontsize=7)
            x = _tokens_at(ds, j, k, max_tokens=800)
            if x is not None:
                la, lo = lat_lon(x)
                ax.scatter(*_mollweide_xy(la, lo, lon0), s=0.4, c="w", alpha=0.55, lw=0,
                           zorder=3)
            _mark_mollweide(ax, ds, lon0)
            ax.set_title(f"{beta_tex(float(ds['beta'][j]))},  "
                         f"$t={float(ds['snapshot_time'][k]):.2f}$", fontsize=8)
            if c > 0:
                ax.set_yticklabels([])
            else:
                ax.tick_params(axis="y", labelsize=5.5)
        if im is not None:
            cb = fig.colorbar(im, cax=fig.add_subplot(gs[r, -1]))
            cb.set_label(r"$\rho_t$ (sr$^{-1}$)", fontsize=7)
            cb.ax.tick_params(labelsize=6)
    fig.suptitle(f"density of the {_density_source(ds, rows)} (Mollweide, central meridian "
                 f"{(lon0 + 180) % 360 - 180:.0f}°); white dots: tokens at the same β and t; "
                 "★ limit atoms ±e (mass), dashed: E$^\\perp$", fontsize=8.5, y=0.995)
    return _save(fig, path)


def _ortho_decor(ax, ds, frame, labels=True):
    s = np.linspace(0, 2 * np.pi, 200)
    for cx in (-_C, _C):
        ax.plot(cx + np.cos(s), np.sin(s), "--", color="cyan", lw=0.8)
    pts, w = _atoms(ds)
    X, Y = ortho_project(pts, frame)
    # the signs name the two atoms of dim E = 1; a circle's atoms beyond two are not labelled
    for x, y, m, sign in zip(X, Y, w, ("+", "−"), strict=False):
        ax.plot(x, y, marker="*", ms=11, mfc="cyan", mec="k", mew=0.7, zorder=5)
        if labels:
            ax.annotate(f"{sign}e ({m:.2f})", (x, y), xytext=(0, -13),
                        textcoords="offset points", ha="center", fontsize=6,
                        bbox=dict(boxstyle="round,pad=0.1", fc="w", ec="none", alpha=0.7))
    U = ds["dominant_eigenspace"].values
    if U.shape[1] >= 2:  # E is a great circle: draw it on both hemispheres
        circ = _great_circle(np.cross(U[:, 0], U[:, 1]))
        X, Y = _split_jumps(*ortho_project(circ, frame), jump=0.5)
        ax.plot(X, Y, "-", color="cyan", lw=0.8)
    ax.set_xlim(-_C - 1.03, _C + 1.03)
    ax.set_ylim(-1.03, 1.03)
    ax.set_aspect("equal")
    ax.set_xticks([-_C - 1, -_C, _C, _C + 1])
    ax.set_xticklabels(["−1", "0", "0", "−1"])
    ax.set_yticks([-1, 0, 1])
    ax.tick_params(labelsize=6)


def _ortho_axes_labels(ax, first_col, last_row):
    if last_row:
        ax.set_xlabel(r"$\langle x,f\rangle$: view from $+e$  |  from $-e$", fontsize=7)
    if first_col:
        ax.set_ylabel(r"$\langle x,g\rangle$", fontsize=7)
    else:
        ax.set_yticklabels([])


def plot_orthographic(ds, path, n: int = 161):
    """The density on an orthographic pair (views from +e and from −e), rows β, columns the
    snapshot times, tokens overlaid; one colour scale per row."""
    rows, cols = _density_rows(ds), _panel_times(ds)
    if not rows or not cols.size:
        return _placeholder(path, NO_DENSITY)
    frame = view_frame(_e(ds))
    pts, extent = ortho_raster(frame, n)
    dens = ds["density"].values
    lat, lon = ds["lat"].values, ds["lon"].values
    fig = plt.figure(figsize=(3.6 * len(cols) + 0.8, 1.95 * len(rows) + 0.7))
    gs = fig.add_gridspec(len(rows), len(cols) + 1, width_ratios=[1] * len(cols) + [0.04],
                          wspace=0.08, hspace=0.3, top=0.92)
    inside = np.isfinite(pts[..., 0])
    for r, j in enumerate(rows):
        norm = density_norm(dens[j][cols])
        im = None
        for c, k in enumerate(cols):
            ax = fig.add_subplot(gs[r, c])
            if np.isfinite(dens[j, k]).any():
                img = np.full(pts.shape[:2], np.nan)
                img[inside] = map_sampler(lat, lon, dens[j, k])(pts[inside])
                im = ax.imshow(np.ma.masked_invalid(img), extent=extent, origin="lower",
                               norm=norm, cmap=_cmap(), interpolation="bilinear")
            x = _tokens_at(ds, j, k, max_tokens=800)
            if x is not None:
                ax.scatter(*ortho_project(x, frame), s=0.4, c="w", alpha=0.55, lw=0, zorder=3)
            _ortho_decor(ax, ds, frame)
            _ortho_axes_labels(ax, c == 0, r == len(rows) - 1)
            ax.set_title(f"{beta_tex(float(ds['beta'][j]))},  "
                         f"$t={float(ds['snapshot_time'][k]):.2f}$", fontsize=8)
        if im is not None:
            cb = fig.colorbar(im, cax=fig.add_subplot(gs[r, -1]))
            cb.set_label(r"$\rho_t$ (sr$^{-1}$)", fontsize=7)
            cb.ax.tick_params(labelsize=6)
    fig.suptitle(f"density of the {_density_source(ds, rows)} seen from the limit atoms: left "
                 "disc from +e, right disc from −e; rims = E$^\\perp$; white dots: tokens",
                 fontsize=8.5, y=0.995)
    return _save(fig, path)


def plot_particles(ds, path):
    """Tokens on the orthographic pair (front and back hemispheres apart), rows β, at the same
    snapshot times as the density figures, plus the last time of the particle runs."""
    rows, cols = _token_rows(ds), _panel_times(ds)
    if not rows or not cols.size:
        return _placeholder(path, "no particle run in these results")
    # the density times, and the particles' horizon when it lies beyond them
    last = ds.sizes["snapshot_time"] - 1
    if last > cols[-1] and np.isfinite(ds["positions"].values[rows[0], last]).all():
        cols = np.append(cols, last)
    frame = view_frame(_e(ds))
    fig, axes = plt.subplots(len(rows), len(cols), figsize=(3.6 * len(cols), 2.2 * len(rows) + 0.5),
                             squeeze=False)
    for r, j in enumerate(rows):
        for c, k in enumerate(cols):
            ax = axes[r, c]
            x = _tokens_at(ds, j, k, max_tokens=4000)
            if x is not None:
                ax.scatter(*ortho_project(x, frame), s=0.6, c="k", alpha=0.5, lw=0)
            s = np.linspace(0, 2 * np.pi, 200)
            for cx in (-_C, _C):
                ax.fill(cx + np.cos(s), np.sin(s), color="0.94", zorder=0)
            _ortho_decor(ax, ds, frame)
            _ortho_axes_labels(ax, c == 0, r == len(rows) - 1)
            ax.set_title(f"{beta_tex(float(ds['beta'][j]))},  "
                         f"$t={float(ds['snapshot_time'][k]):.2f}$", fontsize=8)
    fig.suptitle("tokens of the particle solver: left disc seen from +e, right disc from −e "
                 "(rims = E$^\\perp$); ★ limit atoms (mass)", fontsize=8.5)
    fig.tight_layout()
    return _save(fig, path)


#: The density figures' text when the results hold no density.
NO_DENSITY = ("no density run in these results (spectral.enabled = false and "
              "finite_volume.enabled = false?)")


def _placeholder(path, text):
    fig, ax = plt.subplots(figsize=(5, 1.5))
    ax.text(0.5, 0.5, text, ha="center", va="center")
    ax.axis("off")
    return _save(fig, path)


# ---------------------------------------------------------------------------- animation
def mp4_writer_available() -> bool:
    """True when an ffmpeg executable is at hand for MP4 animations: on the PATH (or matplotlib's
    ``animation.ffmpeg_path``), or the one bundled with the optional ``imageio-ffmpeg`` package
    (``pip install spherepde[video]``), which is then handed to matplotlib."""
    from matplotlib import animation

    if animation.writers.is_available("ffmpeg"):
        return True
    try:
        import imageio_ffmpeg
        exe = imageio_ffmpeg.get_ffmpeg_exe()
    except Exception:  # not installed, or its binary is missing for this platform
        return False
    matplotlib.rcParams["animation.ffmpeg_path"] = exe
    return animation.writers.is_available("ffmpeg")


def animate_run(ds, path, fps: int = 4, n: int = 121, mp4: bool = True, warn=None):
    """GIF (pillow) of the density and tokens over the snapshot times, one orthographic pair per
    β; also an MP4 next to it when ffmpeg is at hand (:func:`mp4_writer_available`). Returns the
    paths written. With ``warn`` (callable warn(text)), an MP4 that ffmpeg fails to write is
    reported to it instead of raising."""

    have_d = _density_rows(ds)
    rows = sorted(set(have_d) | set(_token_rows(ds)))
    if not rows or "snapshot_time" not in ds.coords:
        return []
    frames = np.arange(ds.sizes["snapshot_time"])
    if have_d:  # the density's window (the particles' horizon alone would be a jump in time)
        frames = frames[np.isfinite(ds["density"].values).any(axis=(0, 2, 3))]
    frame = view_frame(_e(ds))
    pts, extent = ortho_raster(frame, n)
    inside = np.isfinite(pts[..., 0])
    lat = ds["lat"].values if have_d else None
    lon = ds["lon"].values if have_d else None
    dens = ds["density"].values if have_d else None
    ncol = min(2, len(rows))
    nrow = math.ceil(len(rows) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.8 * ncol, 2.4 * nrow + 0.4), squeeze=False)
    fig.subplots_adjust(wspace=0.45, hspace=0.45)
    artists = []
    for a, j in enumerate(rows):
        ax = axes.flat[a]
        im = None
        if dens is not None and j in have_d:
            norm = density_norm(dens[j])
            im = ax.imshow(np.full(pts.shape[:2], np.nan), extent=extent, origin="lower",
                           norm=norm, cmap=_cmap(), interpolation="bilinear")
            cb = fig.colorbar(im, ax=ax, fraction=0.025, pad=0.02)
            cb.set_label(r"$\rho_t$ (sr$^{-1}$)", fontsize=6)
            cb.ax.tick_params(labelsize=5)
        sc = ax.scatter([], [], s=0.5, c="w" if im is not None else "k", alpha=0.6, lw=0, zorder=3)
        _ortho_decor(ax, ds, frame, labels=False)
        _ortho_axes_labels(ax, True, True)
        ax.set_title(beta_tex(float(ds["beta"][j])), fontsize=8)
        artists.append((j, im, sc))
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    title = fig.suptitle("", fontsize=9)
    source = f"density: {_density_source(ds, have_d)}   " if have_d else ""

    def draw(k):
        for j, im, sc in artists:
            if im is not None:
                img = np.full(pts.shape[:2], np.nan)
                if np.isfinite(dens[j, k]).any():
                    img[inside] = map_sampler(lat, lon, dens[j, k])(pts[inside])
                im.set_data(np.ma.masked_invalid(img))
            x = _tokens_at(ds, j, k)
            sc.set_offsets(np.column_stack(ortho_project(x, frame)) if x is not None
                           else np.zeros((0, 2)))
        title.set_text(f"t = {float(ds['snapshot_time'][k]):.2f}   {source}(left: seen from "
                       "+e, right: from −e)")
        return []

    # each frame is drawn once and written to both files (drawing is most of the cost)
    fig.set_dpi(ANIMATION_DPI)
    images = []
    for k in frames:
        draw(k)
        fig.canvas.draw()
        images.append(np.asarray(fig.canvas.buffer_rgba())[..., :3].copy())
    plt.close(fig)
    path = Path(path)
    with atomic_path(path) as tmp:
        _write_gif(images, tmp, fps)
    written = [path]
    if mp4 and mp4_writer_available():
        mp4_path = path.with_suffix(".mp4")
        try:
            with atomic_path(mp4_path) as tmp:
                _write_mp4(images, tmp, fps)
            written.append(mp4_path)
        except (OSError, RuntimeError) as exc:  # the GIF is written; the MP4 is optional
            if warn is None:
                raise
            warn(f"{mp4_path.name} was not written: {_reason(exc)}")
    return written


#: Resolution of the animation frames.
ANIMATION_DPI = 90


def _write_gif(images, path, fps):
    from PIL import Image

    first, *rest = [Image.fromarray(im) for im in images]
    first.save(path, format="GIF", save_all=True, append_images=rest,
               duration=round(1000 / fps), loop=0)


def _write_mp4(images, path, fps):
    """H.264 through the ffmpeg that matplotlib uses (yuv420p needs even sides: crop one
    pixel row/column where odd)."""
    import subprocess

    h, w = (s - s % 2 for s in images[0].shape[:2])
    cmd = [matplotlib.rcParams["animation.ffmpeg_path"], "-loglevel", "error", "-f", "rawvideo",
           "-pix_fmt", "rgb24", "-s", f"{w}x{h}", "-framerate", str(fps), "-i", "pipe:",
           "-vcodec", "h264", "-pix_fmt", "yuv420p", "-f", "mp4", "-y", str(path)]
    data = b"".join(np.ascontiguousarray(im[:h, :w]).tobytes() for im in images)
    done = subprocess.run(cmd, input=data, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"ffmpeg could not write {path}: "
                           f"{done.stderr.decode(errors='replace').strip()[-300:]}")


# ---------------------------------------------------------------------------- all of a run
def plot_results(ds, folder, animate: bool = True, warn=None) -> list:
    """Every figure of a run from its results Dataset, into ``folder``; returns the paths written.

    ``warn``: callable warn(text). When given, a figure that cannot be drawn or written (no
    disk space, a read-only folder, a failing ffmpeg, a results file with the data of a figure
    missing) is reported to it in one line and the other figures are still drawn; without it
    the first failure raises.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    steps = [("w2_to_limit.png", plot_w2_curves), ("densities.png", plot_density_maps),
             ("densities_orthographic.png", plot_orthographic), ("particles.png", plot_particles)]
    out = []
    for name, draw in steps:
        written = _guarded(warn, name, draw, ds, folder / name)
        out += [written] if written is not None else []
    if animate:
        out += _guarded(warn, "animation.gif", animate_run, ds, folder / "animation.gif",
                        warn=warn) or []
    return out


def _guarded(report, name, draw, *args, **kwargs):
    """draw(*args, **kwargs), or None with one line to ``report`` when it fails (and report is
    set)."""
    if report is None:
        kwargs.pop("warn", None)
        return draw(*args, **kwargs)
    try:
        return draw(*args, **kwargs)
    except Exception as exc:  # a figure is never worth the results: report it and go on
        plt.close("all")
        report(f"{name} was not written: {_reason(exc)}")
        return None


class FigureDataError(ValueError):
    """The results lack what a figure shows (a hand-edited results.nc): its text is the reason."""


def _reason(exc) -> str:
    """One line on why a figure failed (the file and the system's reason for an OSError)."""
    if isinstance(exc, FigureDataError):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{where}"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


# ---------------------------------------------------------------------------- sweeps
def plot_phase_diagram(da, path, x: str | None = None, y: str | None = None, title: str = "",
                       log_color: bool = False):
    """Heat map of a sweep measure over two of its axes (the other axes must be of size 1 or
    already reduced). ``da``: an :class:`xarray.DataArray` with the two dimensions ``x``, ``y``."""
    da = da.squeeze()
    dims = list(da.dims)
    if len(dims) != 2:
        raise ValueError(f"a phase diagram needs exactly two axes of size > 1; {da.name} has "
                         f"dims {dims}: select or average the others first")
    x = x or dims[1]
    y = y or dims[0]
    da = da.transpose(y, x)
    fig, ax = plt.subplots(figsize=(1.0 + 0.9 * da.sizes[x], 1.0 + 0.7 * da.sizes[y]))
    vals = np.asarray(da.values, dtype=float)
    norm = density_norm(vals) if log_color else None
    im = ax.pcolormesh(np.arange(da.sizes[x] + 1), np.arange(da.sizes[y] + 1), vals,
                       cmap="viridis", norm=norm, shading="flat")
    ax.set_xticks(np.arange(da.sizes[x]) + 0.5)
    ax.set_xticklabels([_tick(v) for v in da[x].values], fontsize=7)
    ax.set_yticks(np.arange(da.sizes[y]) + 0.5)
    ax.set_yticklabels([_tick(v) for v in da[y].values], fontsize=7)
    ax.set_xlabel(da[x].attrs.get("long_name", x))
    ax.set_ylabel(da[y].attrs.get("long_name", y))
    if vals.size <= 200:
        mid = np.nanmean(vals) if np.isfinite(vals).any() else 0
        for (a, b), v in np.ndenumerate(vals):
            if np.isfinite(v):
                ax.text(b + 0.5, a + 0.5, f"{v:.3g}", ha="center", va="center", fontsize=6.5,
                        color="w" if v < mid else "k")
            else:
                ax.text(b + 0.5, a + 0.5, "failed", ha="center", va="center", fontsize=6,
                        color="r")
    cb = fig.colorbar(im, ax=ax)
    units = da.attrs.get("units", "")
    cb.set_label(f"{da.attrs.get('long_name', da.name)}"
                 + (f" ({units})" if units not in ("", "1") else ""), fontsize=8)
    ax.set_title(title or str(da.name), fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def _tick_label(v, _pos=None):
    """A W2 axis label: plain below four digits, mathtext powers of ten beyond."""
    if v <= 0:
        return ""
    k = math.floor(math.log10(v) + 1e-9)
    if -3 <= k <= 3:
        return f"{v:.{max(0, -k)}f}"
    m = v / 10**k
    return rf"${m:g}	imes10^{{{k}}}$" if abs(m - 1) > 1e-9 else rf"$10^{{{k}}}$"


def _tick(v):
    if isinstance(v, (float, np.floating)):
        return "∞" if np.isinf(v) else f"{v:g}"
    return str(v)
