"""The main job: the low-temperature concentration experiment of SPEC §3.1 on S^2.

For each inverse temperature of the scenario, the tokens (Lagrangian particles) and the
density (spherical harmonics) are evolved from the same rho_0, and the distance
W2(rho_t, Pi#rho_0) to the projected measure is recorded. Each finished piece of work is
saved atomically under ``<out>/runs/`` and reused when the run is started again with the
same scenario (resume); ``fresh=True`` recomputes everything.

Outputs in ``<out>/``: ``results.npz`` (curves and parameters), ``scenario.json``,
``w2_to_limit.png``, ``densities.png``, ``particles.png`` and ``summary.md``.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path

import numpy as np

from .. import io
from .config import load_config, validate_config
from ..measures import Mixture, PointCloud, Uniform, VonMisesFisher
from ..model import Model

__all__ = ["build_model", "build_initial", "run_scenario"]

#: The spectral runs end once the density's negative mass exceeds this: past it the density is
#: no longer resolved at the chosen lmax, and the curve would measure the truncation instead.
NEGATIVE_MASS_STOP = 1e-3


def rotation_matrix(axis, angle: float) -> np.ndarray:
    """Rotation by ``angle`` about ``axis`` (Rodrigues)."""
    k = np.asarray(axis, dtype=np.float64)
    k = k / np.linalg.norm(k)
    Kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + math.sin(angle) * Kx + (1 - math.cos(angle)) * (Kx @ Kx)


def build_model(cfg: dict, beta: float) -> Model:
    """B = K (Q = I) a rotation O, V = S O with S = diag(eigenvalues), so A = V B^T = S."""
    m = cfg["model"]
    O = rotation_matrix(m["rotation_axis"], m["rotation_angle"])
    S = np.diag(m["eigenvalues"])
    return Model(K=O, V=S @ O, beta=beta, normalized=m["normalized"])


def build_initial(cfg: dict):
    ini = cfg["initial"]
    if ini["kind"] == "uniform":
        return Uniform(3)
    mean = np.asarray(ini["mean"])
    if ini["kind"] == "vmf":
        return VonMisesFisher(mean, ini["kappa"])
    return Mixture([VonMisesFisher(mean, ini["kappa"]), VonMisesFisher(-mean[[1, 2, 0]], ini["kappa"])],
                   [0.6, 0.4])


def _beta_label(beta: float) -> str:
    return "inf" if math.isinf(beta) else f"{beta:g}"


def _key(cfg: dict, *parts) -> str:
    """Hash of the scenario pieces a saved run depends on, to decide whether it can be reused."""
    blob = json.dumps([cfg["model"], cfg["initial"], *parts], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _cached(path: Path, key: str, fresh: bool):
    if fresh or not path.exists():
        return None
    try:
        data = io.load_npz(path)
    except Exception:  # a damaged file is recomputed, not trusted
        return None
    return data if data.get("meta", {}).get("key") == key else None


def run_scenario(cfg: dict | str | Path | None = None, out: str | Path | None = None,
                 fresh: bool = False, progress: bool = True) -> dict:
    """Run a scenario (the default one when ``cfg`` is None) and write its outputs.

    Returns a dict with the output folder, the curves and the headline numbers.
    """
    from tqdm.auto import tqdm

    from ..particles import ParticleSolver
    from ..wasserstein import w2

    if cfg is None or isinstance(cfg, (str, Path)):
        cfg = load_config(cfg)
    else:
        cfg = validate_config(cfg)
    out = Path(out or cfg["output"]["dir"])
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    io.write_json(out / "scenario.json", cfg)

    mu0 = build_initial(cfg)
    r, p, s = cfg["run"], cfg["particles"], cfg["spectral"]
    times = np.linspace(0.0, r["t_end"], r["n_times"])
    x0 = mu0.sample(p["n"], seed=p["seed"])
    betas = r["betas"]
    ref_model = build_model(cfg, math.inf if cfg["model"]["normalized"] else betas[0])
    report = ref_model.check_assumptions()
    limit = ref_model.limit_measure(mu0)  # Pi#rho_0: two atoms, masses by quadrature
    limit_particles = ref_model.limit_measure(PointCloud(x0))  # Pi#mu^N_0
    e = ref_model.dominant_subspace()[:, 0]

    spectral_ok = s["enabled"]
    spectral_note = "disabled in the scenario ([spectral] enabled = false)"
    if spectral_ok:
        try:
            from ..density import SpectralSolver
        except ImportError as exc:  # pragma: no cover - reported in the summary
            spectral_ok = False
            spectral_note = f"unavailable: {exc}"
    n_spec = max(2, int(round(s["t_end"] / r["t_end"] * (r["n_times"] - 1))) + 1)
    t_spec = np.linspace(0.0, min(s["t_end"], r["t_end"]), n_spec)

    tasks = [("particles", b) for b in betas] + ([("spectral", b) for b in betas] if spectral_ok else [])
    curves: dict = {}
    snapshots: dict = {}
    timings: dict = {}
    bar = tqdm(tasks, desc="spherepde run", disable=not progress, unit="run")
    for kind, beta in bar:
        label = f"{kind}_beta={_beta_label(beta)}"
        bar.set_postfix_str(label)
        model = build_model(cfg, beta)
        path = runs / f"{label}.npz"
        if kind == "particles":
            key = _key(cfg, "particles", p, list(times), beta)
        else:
            key = _key(cfg, "spectral", s, list(t_spec), beta)
        data = _cached(path, key, fresh)
        if data is None:
            t0 = time.perf_counter()
            if kind == "particles":
                traj = ParticleSolver(model, rtol=p["rtol"], atol=p["rtol"] * 1e-2).solve(x0, times)
                # Against Pi#mu^N_0 (the empirical half-sphere masses), not Pi#rho_0: the
                # O(N^-1/2) mass mismatch would otherwise put a floor under the curve.
                vals = np.array([float(w2(traj.measure(i), limit_particles).value)
                                 for i in range(len(times))])
                data = {"times": times, "w2": vals, "positions": traj.positions[:: max(1, len(times) // 4)],
                        "snapshot_times": times[:: max(1, len(times) // 4)]}
            else:
                sol = SpectralSolver(model, lmax=s["lmax"]).solve(
                    mu0, t_spec, stop_negative_mass=NEGATIVE_MASS_STOP)
                t_spec_run = sol.times
                vals = np.array([float(w2(sol.measure(i), limit).value) for i in range(len(t_spec_run))])
                idx = np.unique(np.linspace(0, len(t_spec_run) - 1, 4).round().astype(int))
                grid = _plot_grid()
                dens = np.stack([sol.density(int(i), grid) for i in idx])
                diag = getattr(sol, "diagnostics", {}) or {}
                data = {"times": t_spec_run, "w2": vals, "densities": dens,
                        "snapshot_times": t_spec_run[idx], "mass": np.asarray(diag["mass"]),
                        "negative_mass": np.asarray(diag["negative_mass"]),
                        "stopped": np.array(sol.stats.get("stopped", "")),
                        "unresolved": np.array(sol.stats.get("unresolved", ""))}
            data["seconds"] = np.array(time.perf_counter() - t0)
            io.save_npz(path, meta={"key": key, "beta": _beta_label(beta), "kind": kind}, **data)
        curves[label] = (np.asarray(data["times"]), np.asarray(data["w2"]))
        snapshots[label] = data
        timings[label] = float(data["seconds"])

    rate = _fit_zero_temperature_rate(curves, betas, report)
    summary = _write_outputs(out, cfg, curves, snapshots, timings, limit, limit_particles, e,
                             report, rate, x0, None if spectral_ok else spectral_note)
    return {"out": out, "curves": curves, "rate": rate, "summary": summary}


def _plot_grid(n: int = 90):
    th = np.linspace(0, np.pi, n)
    ph = np.linspace(-np.pi, np.pi, 2 * n)
    T, P = np.meshgrid(th, ph, indexing="ij")
    return np.stack([np.sin(T) * np.cos(P), np.sin(T) * np.sin(P), np.cos(T)], -1)


def _fit_zero_temperature_rate(curves, betas, report):
    """Fit log W2 ~ -r t on the second half of the beta = inf particle curve; SPEC §3.1
    predicts r = gamma/2 (c = 1, dim E = 1)."""
    label = "particles_beta=inf"
    if label not in curves:
        return None
    t, w = curves[label]
    sel = (t >= t[-1] / 2) & (w > 0)
    if sel.sum() < 3:
        return None
    slope = np.polyfit(t[sel], np.log(w[sel]), 1)[0]
    return {"fitted": float(-slope), "predicted": float(report.gap / 2),
            "window": [float(t[sel][0]), float(t[sel][-1])]}


def _write_outputs(out, cfg, curves, snapshots, timings, limit, limit_particles, e, report, rate,
                   x0, spectral_note):
    from . import plotting

    arrays = {}
    for label, (t, w) in curves.items():
        arrays[f"{label}/times"] = t
        arrays[f"{label}/w2"] = w
    arrays["limit_points"] = limit.points
    arrays["limit_weights"] = limit.weights
    io.save_npz(out / "results.npz", meta={"scenario": cfg, "cost": "chordal",
                                           "gap": report.gap, "rate": rate}, **arrays)
    plotting.plot_w2_curves(curves, out / "w2_to_limit.png", gap=report.gap)
    plotting.plot_density_maps(snapshots, out / "densities.png")
    plotting.plot_particles(snapshots, x0, e, out / "particles.png")

    lines = ["# spherepde run: low-temperature concentration on S^2", "",
             "Tokens and their density evolve under softmax attention with B = Q^T K a rotation "
             "and A = V B^T symmetric (SPEC §3.1). W2 is the chordal Wasserstein-2 distance "
             "to the projected measure Pi#rho_0 = m+ delta_e + m- delta_{-e}.", "",
             "## Model", "", "```", str(report), "```", "",
             f"Pi#rho_0: e = {np.array2string(e, precision=4)}, m+ = {limit.weights[0]:.6f}, "
             f"m- = {limit.weights[1]:.6f} (half-sphere masses by quadrature). The particles "
             f"are measured against Pi#mu^N_0, whose empirical masses are "
             f"m+ = {limit_particles.weights[0]:.6f}, m- = {limit_particles.weights[1]:.6f} "
             f"(N = {x0.shape[0]}).", "",
             "## W2(rho_t, Pi#rho_0)", "",
             "| run | min W2 | t at min | W2 at last time | last time | seconds |",
             "|---|---|---|---|---|---|"]
    for label, (t, w) in curves.items():
        i = int(np.argmin(w))
        lines.append(f"| {label} | {w[i]:.4g} | {t[i]:.3g} | {w[-1]:.4g} | {t[-1]:.3g} | "
                     f"{timings[label]:.1f} |")
    lines.append("")
    stops = [(k, "ended early", str(v["stopped"])) for k, v in snapshots.items()
             if str(v.get("stopped", ""))]
    stops += [(k, "reached its last time, but", str(v["unresolved"])) for k, v in snapshots.items()
              if str(v.get("unresolved", ""))]
    for k, what, why in stops:
        lines.append(f"- {k} {what}: {why}.")
    if stops:
        lines.append("")
    if rate is not None:
        lines.append(f"Zero-temperature decay: fitted rate {rate['fitted']:.4f} on t in "
                     f"[{rate['window'][0]:.2g}, {rate['window'][1]:.2g}] against the predicted "
                     f"gamma/2 = {rate['predicted']:.4f} (SPEC §3.1).")
    pairs = [(k, k.replace("particles", "spectral")) for k in curves if k.startswith("particles")]
    diffs = []
    for kp, ks in pairs:
        if ks in curves:
            tp, wp = curves[kp]
            ts, ws = curves[ks]
            common = np.interp(ts, tp, wp)
            diffs.append(f"| {kp.split('_', 1)[1]} | {np.max(np.abs(common - ws)):.3g} |")
    if diffs:
        lines += ["", "## Particles against the density", "",
                  "Largest |W2_particles - W2_spectral| over the spectral times (the particle "
                  "curve carries a sampling error of order N^(-1/2)):", "",
                  "| beta | max difference |", "|---|---|", *diffs]
    elif spectral_note:
        lines += ["", f"The spectral solver was not run: {spectral_note}."]
    lines += ["", "Files: results.npz, scenario.json, w2_to_limit.png, densities.png, particles.png, "
              "runs/ (one file per finished run; a rerun reuses them)."]
    text = "\n".join(lines) + "\n"
    io.write_text(out / "summary.md", text)
    return text
