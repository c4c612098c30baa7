"""The low-temperature concentration of Alcalde–Bungert–Riedl–Roith (docs/theory.md, §3.1–3.2).

SA with B = Q^T K a rotation O (c = 1) and A = V B^T symmetric. The mean-field density
rho^beta_t approaches the projected measure Pi#rho_0 while t <~ log beta, comes closest near
t* ~ log beta, and then leaves it (the bound W2 <~ sqrt(log(beta+1)/beta) e^{C1 t} + e^{-ct});
late, mass gathers on the dominant eigenspace of V itself (the terminal phase).

Three solvers compute the curve t -> W2(rho_t, Pi#rho_0) from one rho_0 (a von Mises–Fisher
cap): particles with the harmonic field (N tokens on rho_0's Fibonacci lattice), the
finite-volume density (n cells along a cube edge) and the spectral density (while it is
resolved). A curve is *converged* when two
resolutions of one solver (N and 4N, or n and 2n) differ by less than 5% of its minimum over the
whole interval, each difference widened by the two W2 brackets; a converged curve is then
compared with the other solvers. Fits use converged curves only.

Every finished (scenario, solver, beta, resolution) piece is saved atomically under
``validation/output/low_temperature[_quick|_medium]_runs/`` and reused by a rerun (``--fresh``
recomputes); each records its wall and CPU seconds. The full study's store is committed, so
that a clone regenerates its report (``--report-only``) and continues the study where it
stopped: the finished pieces (a few KB each: the curves, not the states) and the checkpoint
of a finite-volume piece that a sitting left unfinished (``*.partial.npz``: its rows and the
state it reached, 0.75 MB at n = 128), from which the next run resumes.

Run:
    .venv/bin/python validation/low_temperature.py --quick    # 6 min on 2 busy cores (load 2-3.5)
    .venv/bin/python validation/low_temperature.py --medium   # 4x the tokens of --quick
    .venv/bin/python validation/low_temperature.py            # the full study (many hours)
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from _common import OUT, linear_fit, publish, table

import spherepde as sp
from spherepde import io
from spherepde.analysis.convergence import resolution_error, richardson
from spherepde.sphere import rotation_about_axis
from spherepde.wasserstein.limit import _merge_atoms

#: A curve is converged when its two finest resolutions differ by less than this fraction of
#: its minimum, at every time.
CONVERGED_FRACTION = 0.05
#: The particle curves' W2 brackets: this fraction of the previous output's W2 (far below
#: CONVERGED_FRACTION of any value), and never below W2_MIN_TOL, under which "auto" leaves the
#: circle solver for an exact LP.
W2_REL_TOL, W2_MIN_TOL = 2e-3, 1e-5
#: Terminal phase: mass within this angle (radians) of V's dominant invariant subspace.
TERMINAL_DELTA = 0.1
#: Time budget of each W2 row's iterative solvers (circle rounds, multiscale, sparse). In dim
#: E = 2 the circle solver's bracket stalls near 2e-3 on late, spread mesh snapshots, and
#: auto's fallbacks do not narrow it (measured at n = 128, beta = 16, t = 10.25: circle 7 s,
#: [0.87433, 0.87640]; sparse 120 s, [0.61, 1.11]; clusterings at 4e6 pairs 15 s,
#: [0.87328, 0.87632]). The width is recorded with the row and counted in the curve's error.
W2_MAX_SECONDS = 20.0
#: A fit of t*(beta) and min W2(beta) needs converged curves at this many distinct betas.
MIN_FIT_BETAS = 3
#: The sensitivity runs: tokens, and the size of the change of their start.
SENSITIVITY_TOKENS, SENSITIVITY_EPS = 2000, 1e-6
# bump when the meaning of a saved piece changes (2: kernel="auto" re-chosen in runs;
# 3: particle rtol 1e-5)
VERSION = 3

SCENARIOS = {
    # dim E = 1: A = diag(1, 0.4, 0), gap 0.6, Pi#rho_0 = m+ delta_e + m- delta_-e.
    "E1": {"eigenvalues": [1.0, 0.4, 0.0], "gap": 0.6, "dimE": 1},
    # dim E = 2: A = diag(1, 1, 0.4), gap 0.6, Pi#rho_0 lives on the great circle x3 = 0.
    "E2": {"eigenvalues": [1.0, 1.0, 0.4], "gap": 0.6, "dimE": 2},
}
AXIS, ANGLE = [1.0, 1.0, 1.0], 0.9
MEAN, KAPPA = [0.4, 0.3, 1.0], 1.5


@dataclass
class Plan:
    """What to run: betas, output times, and the resolutions of each solver."""
    betas: list
    t_end: float
    n_times: int
    particles: list | dict   # token counts, coarse to fine (factor 4); or beta -> counts
    #: cells along a cube edge, coarse to fine (factor 2); or per beta, or per (scenario, beta)
    finite_volume: list | dict
    spectral: list           # lmax values
    scenarios: list = field(default_factory=lambda: ["E1", "E2"])
    e2_betas: list | None = None  # betas for the dim E = 2 scenario (default: all)
    fv_betas: list | None = None  # betas of the finite-volume runs (default: all)
    e2_fv_betas: list | None = None  # the same for the dim E = 2 scenario (default: fv_betas)
    #: longer windows, (scenario, beta) -> (t_end, {solver: resolutions}): extra curves at the
    #: same output spacing, for curves still falling at t_end (their minimum may lie beyond)
    windows: dict = field(default_factory=dict)

    @property
    def times(self):
        return np.linspace(0.0, self.t_end, self.n_times)

    def times_until(self, t_end: float) -> np.ndarray:
        """Output times on [0, t_end] at the plan's spacing."""
        step = self.t_end / (self.n_times - 1)
        return np.linspace(0.0, t_end, int(round(t_end / step)) + 1)

    @staticmethod
    def _at(resolutions, beta, scenario=None) -> list:
        if not isinstance(resolutions, dict):
            return resolutions
        return resolutions.get((scenario, beta), resolutions.get(beta))

    def tokens(self, beta) -> list:
        """The token counts of the particle runs at this beta."""
        return self._at(self.particles, beta)

    def cells(self, beta, scenario=None) -> list:
        """The cube-edge cell counts of the finite-volume runs at this beta (and scenario)."""
        return self._at(self.finite_volume, beta, scenario)


#: --quick: small enough for 2 cores in minutes; its finite-volume pair (n = 12, 24) resolves
#: the curve only where the density stays wider than a few cells.
QUICK = Plan(betas=[4.0, 16.0, 64.0, 256.0, 1000.0, math.inf], t_end=14.0, n_times=57,
             particles=[1000, 4000], finite_volume=[8, 16], spectral=[32, 64],
             e2_betas=[16.0, math.inf], fv_betas=[16.0, math.inf], e2_fv_betas=[math.inf])
#: --medium: four times the tokens and 1.5x the cells of --quick.
MEDIUM = Plan(betas=[4.0, 16.0, 64.0, 256.0, math.inf], t_end=14.0, n_times=57,
              particles=[4000, 16000], finite_volume=[12, 24], spectral=[32, 64],
              e2_betas=[16.0, math.inf], fv_betas=[16.0, 256.0, math.inf],
              e2_fv_betas=[math.inf])
#: The full study. The kernel's width beta^-1/2 sets the tokens each beta needs; from beta = 256
#: on the late phase amplifies perturbations ~100-fold by t = 14 (measured), hence 10^6 tokens.
#: In dim E = 1 the finite volumes at beta = 256 have flattened by t = 14 (-0.04% over [13, 14])
#: but not turned; over a window to t = 20 at n = 32, 64 (4.3% apart) they stay within their
#: own error of their minimum from t = 9.5 on: a plateau, so t* is still not located there.
#: At beta = inf the curves still fall at t = 14, where their level is set by the resolution:
#: the finite volumes need n = 512 there (n = 128 against 256 differ by 1.9x the threshold,
#: 256 against 512 by 0.51x: converged in dim E = 1).
FULL = Plan(betas=[4.0, 16.0, 64.0, 256.0, 1000.0, math.inf], t_end=14.0, n_times=57,
            particles={4.0: [16000, 64000], 16.0: [16000, 64000], 64.0: [16000, 64000],
                       256.0: [16000, 64000, 256000], 1000.0: [64000, 256000, 1000000],
                       math.inf: [16000, 64000, 256000, 1024000]},
            finite_volume={**{b: [32, 64, 128] for b in (4.0, 16.0, 64.0, 256.0, 1000.0)},
                           math.inf: [128, 256, 512],
                           # a third resolution where the curve concentrates most: the
                           # observed order and a Richardson extrapolation
                           **{("E1", b): [32, 64, 128, 256] for b in (64.0, 256.0, 1000.0)},
                           **{("E2", b): [32, 64, 128, 256] for b in (16.0, 64.0, 256.0, 1000.0)}},
            spectral=[64, 128],
            windows={("E1", 256.0): (20.0, {"finite_volume": [32, 64]})})


def model_for(scenario: str, beta: float) -> sp.Model:
    O = rotation_about_axis(AXIS, ANGLE)
    S = np.diag(SCENARIOS[scenario]["eigenvalues"])
    return sp.Model(K=O, V=S @ O, beta=beta)


def initial():
    return sp.measures.VonMisesFisher(MEAN, KAPPA)


def beta_label(beta) -> str:
    return "inf" if math.isinf(beta) else f"{beta:g}"


def dominant_invariant_subspace(V: np.ndarray) -> np.ndarray:
    """Orthonormal basis (d, k) of V's dominant invariant subspace (largest real part): the
    eigenvector when that eigenvalue is real, the real plane of a complex pair otherwise."""
    ev, evec = np.linalg.eig(V)
    k = int(np.argmax(ev.real))
    if abs(ev[k].imag) < 1e-12:
        v = np.real(evec[:, k])
        return (v / np.linalg.norm(v))[:, None]
    return np.linalg.qr(np.column_stack([evec[:, k].real, evec[:, k].imag]))[0]


def terminal_fraction(points, weights, basis, delta=TERMINAL_DELTA) -> float:
    """Mass within angle delta of the great sphere span(basis) ∩ S^2: |P_perp x| <= sin(delta)."""
    perp = points - (points @ basis) @ basis.T
    return float(weights[np.linalg.norm(perp, axis=1) <= math.sin(delta)].sum())


def _w2_bracket(mu, limit, **options):
    r = sp.w2(mu, limit, **options)
    lo = getattr(r, "lower", None)
    hi = getattr(r, "upper", None)
    err = float(getattr(r, "error", 0.0))
    v = float(r)
    return v, (v - err if lo is None else float(lo)), (v + err if hi is None else float(hi))


# ---------------------------------------------------------------------------- the pieces
def _particle_start(scenario, beta, n):
    """The model, the n starting tokens and their own limit Pi#mu^N_0.

    The tokens start on rho_0's Fibonacci lattice (equal weights), not a random sample: N and
    4N then differ by a quadrature error, not by two independent O(N^-1/2) sampling errors
    that the dynamics amplify (beta = 16: 0.003 for N = 4000 vs 16000, against 0.047 for
    random samples of 2000 vs 8000)."""
    model = model_for(scenario, beta)
    cloud = initial().lattice(n)
    limit = model.limit_measure(cloud)
    limit = _merge_atoms(limit) if SCENARIOS[scenario]["dimE"] == 1 else limit
    return model, cloud, limit


def _particle_solver(model):
    # rtol 1e-5: against 1e-6 the W2 curves move by <= 6.3e-6 (N = 4000, beta = 64 and 256,
    # measured on the main job's scenario), far below the N vs 4N differences that decide
    # convergence. The harmonic kernel's velocities are then asked for rtol/100 = 1e-7 (the
    # solver's default_velocity_tol); pieces run before that default existed asked for 1e-10,
    # and the N = 10^6, beta = 1000 piece's W2 rows over [0, 3.25] came out the same under
    # both to 7e-16, at 1/50 of the cost. The saved pieces were computed with kernel="auto"
    # switching by measured time (adaptive_kernel): it records the evaluations per kernel.
    return sp.ParticleSolver(model, kernel="auto", rtol=1e-5, atol=1e-7, adaptive_kernel=True)


def _resume(partial, times, state, check_shape=False):
    """(done, rows, state, seconds, CPU seconds) from a piece's checkpoint when it is for these
    output times (and, with check_shape, a state of ``state``'s shape), else a fresh start
    from ``state``."""
    if partial is not None and Path(partial).exists():
        try:
            saved = io.load_npz(partial)
            if np.array_equal(saved["times"], times) and (
                    not check_shape or saved["state"].shape == np.shape(state)):
                # all read before any is taken: a checkpoint missing a part is not half-used
                out = (int(saved["done"]), [tuple(r) for r in saved["rows"]], saved["state"],
                       float(saved["seconds"]), float(saved["cpu_seconds"]))
                print(f"    resuming at t = {times[out[0]]:g} ({out[0]}/{len(times) - 1} "
                      f"intervals, {out[3]:.0f} s spent)", flush=True)
                return out
        except Exception as exc:  # a damaged checkpoint is ignored, never trusted
            print(f"    {Path(partial).name}: unreadable ({exc}); starting over", file=sys.stderr)
    return 0, [], state, 0.0, 0.0


def _checkpoint(partial, times, done, rows, state, seconds, cpu_seconds):
    """Save a piece's progress atomically: the rows of outputs 0..done and the state there."""
    io.save_npz(partial, times=times, done=np.array(done), rows=np.array(rows), state=state,
                seconds=np.array(seconds), cpu_seconds=np.array(cpu_seconds))


def run_particles(scenario, beta, n, times, partial=None):
    """The particle curve. With ``partial`` (a path) the tokens and the rows so far are saved
    there atomically at every output time, and a later call resumes from the last one: at
    beta >= 256 a piece of 64000 tokens or more takes longer than one sitting. An uninterrupted
    run is one solve over all times, as before checkpoints existed; a resumed one restarts the
    adaptive step (and the kernel choice) once, at the output it resumes from, so it agrees
    with an uninterrupted run to the step tolerance, not to round-off (tested)."""
    model, cloud, limit = _particle_start(scenario, beta, n)
    x, w = cloud.points, cloud.weights
    basis = dominant_invariant_subspace(model.V)
    times = np.asarray(times, dtype=float)
    done, rows, x, spent, spent_cpu = _resume(partial, times, x, check_shape=True)
    t0, c0 = time.perf_counter(), time.process_time()
    start = done
    # dim E = 2: the tokens against their own projection, N points a side. On the spread early
    # clouds "auto"'s multiscale solver is fastest (< 1 s an output at N = 16000, beta = 16;
    # the clusterings take 11 s); the gathered late clouds defeat it and the sparse solver
    # (68 s an output at t = 10 under auto's own budget), where the clusterings close the
    # bracket (4e-4) in 1.8 s. So each gets 5 s before the next is tried. (Where "auto" picks
    # a direct solver, the semi-discrete one against dim E = 1's two atoms or the exact LP at
    # --quick's sizes, it leaves the limit out.)
    # The bracket asked for is W2_REL_TOL of the last output's W2 (the widths count in the
    # curve's error): at beta = 4 the spread late clouds leave the multiscale solver at
    # 1.6e-3 on W2 ~ 1, short of the absolute default 1e-3, and the fallback that closes it
    # then took 650 s an output at 64000 tokens.
    options = {"max_seconds": 5.0}

    def on_output(i, t, x_now):
        k = start + i  # the output's index in times
        if k < len(rows):  # the row of the output resumed from is saved already
            return
        tol = None if not rows else max(W2_MIN_TOL, W2_REL_TOL * rows[-1][0])
        rows.append((*_w2_bracket(sp.PointCloud(x_now, w), limit, tol=tol, **options),
                     terminal_fraction(x_now, w, basis)))
        if partial is not None and 0 < k < len(times) - 1:
            _checkpoint(partial, times, k, rows, x_now, spent + time.perf_counter() - t0,
                        spent_cpu + time.process_time() - c0)

    solver = _particle_solver(model)
    rest = times[start:]
    traj = solver.solve(x, rest, w, callback=on_output, every=len(rest), tokens=slice(0, 1))
    arr = np.array(rows)
    return {"times": times, "w2": arr[:, 0], "lower": arr[:, 1], "upper": arr[:, 2],
            "terminal": arr[:, 3],
            "kernel": repr(solver),
            # counts of the last sitting, which began at resumed_from
            "resumed_from": np.array(times[start]),
            "rhs_evaluations": int(traj.stats.get("fevals", -1)),
            "harmonic_evaluations": int(traj.stats.get("evaluations_harmonic", 0)),
            "numba_evaluations": int(traj.stats.get("evaluations_numba", 0)),
            "resumed_seconds": np.array(spent), "resumed_cpu_seconds": np.array(spent_cpu)}


def _density_row(model, mu0):
    """row(measure) -> (W2, lower, upper, terminal fraction) against the limit of mu0."""
    limit = model.limit_measure(mu0)
    basis = dominant_invariant_subspace(model.V)

    def row(m):
        return (*_w2_bracket(m, limit, max_seconds=W2_MAX_SECONDS),
                terminal_fraction(m.points, m.weights, basis))
    return row


def _density_rows(sol, model):
    row = _density_row(model, sol.initial_measure)
    return np.array([row(sol.measure(i)) for i in range(len(sol.times))])


def run_finite_volume(scenario, beta, n, times, partial=None):
    """The finite-volume curve, in one solve over all output times. With ``partial`` (a path),
    the rows and the state reached are saved there atomically at every output time, and a
    later call resumes from them in one solve over the remaining times: a piece at n = 256
    takes longer than one sitting. (A resumed run restarts the macro step once, at the output
    it resumes from, so it agrees with an uninterrupted one to the step control's tolerance.)"""
    model = model_for(scenario, beta)
    solver = sp.FiniteVolumeSolver(model, n)
    row = _density_row(model, initial())
    times = np.asarray(times, dtype=float)
    done, rows, state, spent, spent_cpu = _resume(partial, times, initial())
    t0, c0 = time.perf_counter(), time.process_time()

    def reached(i, t, one):
        if i == 0 and done > 0:  # the resumed state's row is already saved
            return
        rows.append(row(one.measure(0)))
        if partial is not None and i > 0:
            _checkpoint(partial, times, done + i, rows, one.coefficients[0] / solver.mesh.areas,
                        spent + time.perf_counter() - t0, spent_cpu + time.process_time() - c0)

    # the solver takes cell averages; a checkpoint stores them
    solver.solve(state, times[done:], on_output=reached)
    arr = np.array(rows)
    return {"times": times, "w2": arr[:, 0], "lower": arr[:, 1], "upper": arr[:, 2],
            "terminal": arr[:, 3], "cells": solver.mesh.n_cells,
            # the face-velocity accuracy of the last sitting (the solver's mesh default; pieces
            # from before it were computed at 1e-7: docs/methods.md, "How accurate the edge
            # velocities must be")
            "velocity_tol": np.array(solver.velocity_tol),
            "resumed_seconds": np.array(spent), "resumed_cpu_seconds": np.array(spent_cpu)}


def run_spectral(scenario, beta, lmax, times):
    model = model_for(scenario, beta)
    sol = sp.SpectralSolver(model, lmax=lmax).solve(initial(), times, stop_negative_mass=1e-3)
    arr = _density_rows(sol, model)
    return {"times": np.asarray(sol.times), "w2": arr[:, 0], "lower": arr[:, 1],
            "upper": arr[:, 2], "terminal": arr[:, 3],
            "stopped": str(sol.stats.get("stopped", ""))}


def run_sensitivity(scenario, beta, n, times):
    """How much the particle dynamics amplify a small change of the start: two runs of n
    tokens from rho_0's lattice, one moved by SENSITIVITY_EPS (Gaussian, seeded, then back onto
    the sphere); max_t |W2 - W2'| / eps is the amplification that any discretisation error of
    the start suffers by the end."""
    model, cloud, limit = _particle_start(scenario, beta, n)
    rng = np.random.default_rng(1)
    moved = cloud.points + SENSITIVITY_EPS * rng.standard_normal(cloud.points.shape)
    moved /= np.linalg.norm(moved, axis=1, keepdims=True)
    curves = []
    for x0 in (cloud.points, moved):
        rows = []
        solver = _particle_solver(model)
        solver.solve(x0, times, cloud.weights, every=len(times), tokens=slice(0, 1),
                     callback=lambda i, t, x, rows=rows: rows.append(float(sp.w2(sp.PointCloud(
                         x, cloud.weights), limit))))
        curves.append(np.array(rows))
    return {"times": times, "w2": curves[0], "w2_moved": curves[1],
            "eps": np.array(SENSITIVITY_EPS)}


#: The runners that save their progress within a piece (``partial=``) and resume from it.
CHECKPOINTED = {"finite_volume", "particles"}
RUNNERS = {"particles": run_particles, "finite_volume": run_finite_volume, "spectral": run_spectral,
           "sensitivity": run_sensitivity}


def piece_path(store, scenario, solver, beta, res, times):
    """Where a piece is saved, and its description (part of the file name's hash)."""
    spec = {"v": VERSION, "scenario": scenario, "solver": solver, "beta": beta_label(beta),
            "res": res, "times": [float(times[0]), float(times[-1]), len(times)],
            "model": SCENARIOS[scenario], "axis": AXIS, "angle": ANGLE, "mean": MEAN,
            "kappa": KAPPA}
    if solver in ("particles", "sensitivity"):
        spec["init"] = "lattice"  # the tokens' start (random samples before; a new piece)
    if solver == "sensitivity":
        spec["eps"] = SENSITIVITY_EPS
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    return store / f"{scenario}_{solver}_beta={beta_label(beta)}_res={res}_{key}.npz", spec


def piece(store, scenario, solver, beta, res, times, fresh=False, compute=True):
    """One (scenario, solver, beta, resolution) curve, computed once and saved atomically
    (``compute=False``: the saved piece, or None when there is none)."""
    path, spec = piece_path(store, scenario, solver, beta, res, times)

    def run(partial):
        if solver in CHECKPOINTED:
            return RUNNERS[solver](scenario, beta, res, times, partial=partial)
        return RUNNERS[solver](scenario, beta, res, times)

    return cached_piece(path, spec, run, f"{scenario} {solver} beta={beta_label(beta)} res={res}",
                        fresh, compute)


def cached_piece(path, spec, run, label, fresh=False, compute=True):
    """The piece saved at ``path`` when it is readable (and not ``fresh``), else None with
    ``compute=False``, else ``run(partial)`` (partial: the path of its checkpoint) saved
    atomically by :func:`save_piece` and returned as saved."""
    if path.exists() and not fresh:
        try:
            return io.load_npz(path)
        except Exception as exc:  # a damaged piece is recomputed, never trusted
            print(f"  {path.name}: unreadable ({exc}); recomputing", file=sys.stderr)
    if not compute:
        return None
    print(f"  running {label} ...", flush=True)
    t0, c0 = time.perf_counter(), time.process_time()
    partial = path.with_name(path.name[:-len(".npz")] + ".partial.npz")
    return save_piece(path, spec, run(partial), t0, c0, partial)


def save_piece(path, spec, data, t0, c0, partial):
    """Save a finished piece atomically with its wall and CPU seconds since (t0, c0), plus
    those of its earlier sittings (a resumed piece counts them too), drop its checkpoint and
    return the piece as saved."""
    data["seconds"] = np.array(time.perf_counter() - t0 + float(data.pop("resumed_seconds", 0.0)))
    data["cpu_seconds"] = np.array(time.process_time() - c0
                                   + float(data.pop("resumed_cpu_seconds", 0.0)))
    io.save_npz(path, meta=spec, **data)
    partial.unlink(missing_ok=True)
    print(f"    done in {float(data['seconds']):.1f} s (CPU {float(data['cpu_seconds']):.1f} s)",
          flush=True)
    return io.load_npz(path)


# ---------------------------------------------------------------------------- analysis
@dataclass
class Curve:
    scenario: str
    solver: str
    beta: float
    res: int              # the finest resolution
    times: np.ndarray
    w2: np.ndarray        # at the finest resolution
    coarse: np.ndarray | None  # the next-finer-but-one resolution, on the same times
    seconds: dict         # resolution -> (wall seconds, CPU seconds over all threads)
    terminal: np.ndarray
    #: the W2 brackets' widths (upper - lower), fine plus coarse, at each time: a W2 solver
    #: that stops at a bracket leaves each value uncertain by up to its width
    widths: np.ndarray | None = None
    #: the resolution below ``coarse``, when the plan has three or more (observed order)
    third: np.ndarray | None = None

    def extrapolated(self):
        """(order, Richardson curve, its error bar) from the three finest resolutions over the
        times all three reached (:func:`spherepde.analysis.convergence.richardson`), or None
        with fewer than three."""
        if self.third is None or self.coarse is None:
            return None
        n = min(len(self.w2), len(self.coarse), len(self.third))
        return richardson(self.third[:n], self.coarse[:n], self.w2[:n])

    @property
    def error(self) -> np.ndarray | None:
        """|W2_fine - W2_coarse| at each time, plus the two W2 brackets' widths: the most the
        two resolutions' true distances can differ, the curve's own measured error."""
        if self.coarse is None:
            return None
        n = min(len(self.w2), len(self.coarse))  # the two runs share the plan's output times
        return resolution_error(self.times, self.w2, self.times[:n], self.coarse[:n],
                                self.widths)[1]

    @property
    def point_converged(self) -> np.ndarray:
        err = self.error
        if err is None:
            return np.zeros(len(self.w2), bool)
        ok = np.zeros(len(self.w2), bool)
        ok[:len(err)] = err < CONVERGED_FRACTION * np.min(self.w2)
        return ok

    @property
    def converged(self) -> bool:
        err = self.error
        return (err is not None and len(err) == len(self.times)
                and bool(np.all(err < CONVERGED_FRACTION * np.min(self.w2))))

    def minimum_band(self) -> np.ndarray:
        """The output times where the curve lies within its own measured error (the largest
        |fine - coarse|, brackets included; 0 without a coarse partner) of its minimum: where
        the minimum may lie, as far as the two resolutions can tell."""
        err = self.error
        tol = 0.0 if err is None else float(np.max(err))
        return self.times[self.w2 <= np.min(self.w2) + tol]

    @property
    def interior_minimum(self) -> bool:
        """Whether the minimum is located inside the window: the curve climbs above its
        minimum by more than its own error on both sides. Otherwise it is still falling at
        the window's end, or has flattened there to within its error (a plateau), and t* is
        not located: somewhere past the band's start, perhaps past the window."""
        band = self.minimum_band()
        return band[0] > self.times[0] and band[-1] < self.times[-1]

    def minimum(self):
        """(t*, min W2), the minimum refined by a parabola through the three nearest samples."""
        i = int(np.argmin(self.w2))
        t, w = self.times, self.w2
        if 0 < i < len(w) - 1:
            a, b, _ = np.polyfit(t[i - 1:i + 2], w[i - 1:i + 2], 2)
            if a > 0:
                ts = -b / (2 * a)
                return float(ts), float(np.polyval([a, b, _], ts))
        return float(t[i]), float(w[i])


def curves_of(plan: Plan):
    """(scenario, solver, beta, resolutions, output times) of every curve of the plan, the
    longer windows last."""
    for scenario in plan.scenarios:
        betas = plan.betas if scenario == "E1" or plan.e2_betas is None else plan.e2_betas
        for beta in betas:
            runs = [("particles", plan.tokens(beta)),
                    ("finite_volume", plan.cells(beta, scenario)),
                    ("spectral", plan.spectral)]
            for solver, resolutions in runs:
                if not resolutions:
                    continue
                fv_betas = plan.e2_fv_betas if scenario == "E2" and plan.e2_fv_betas is not None \
                    else plan.fv_betas
                if solver == "finite_volume" and fv_betas is not None and beta not in fv_betas:
                    continue
                yield scenario, solver, beta, resolutions, plan.times
    for (scenario, beta), (t_end, runs) in plan.windows.items():
        for solver, resolutions in runs.items():
            yield scenario, solver, beta, resolutions, plan.times_until(t_end)


def _pool_init():
    import numba

    numba.set_num_threads(1)


def _compute(args):
    store, scenario, solver, beta, res, times, fresh = args
    piece(store, scenario, solver, beta, res, times, fresh)
    return scenario, solver, beta, res


def _cost(job) -> float:
    """A rough relative cost, to start the longest pieces first."""
    _, scenario, solver, beta, res, _, _ = job
    b = 1.0 if math.isinf(beta) else beta
    if solver in ("particles", "sensitivity"):
        return res ** 2 * b ** 0.5 * (1 + (SCENARIOS[scenario]["dimE"] == 2)) * (
            2 if solver == "sensitivity" else 1)
    return res ** 3 * 1e3 if solver == "finite_volume" else res ** 3 * 10


def compute_pieces(plan: Plan, store, fresh=False, only_betas=None, workers=None) -> int:
    """Compute the plan's missing pieces, ``workers`` processes side by side (one numba thread
    each; default one per core), longest first. Each piece is saved by the process that computed
    it, atomically, so an interrupted study keeps every finished piece. Returns how many were
    computed."""
    import multiprocessing as mp
    import os

    jobs = []
    wanted = [(scenario, solver, beta, r, times) for scenario, solver, beta, resolutions, times
              in curves_of(plan) for r in resolutions]
    wanted += [("E1", "sensitivity", beta, SENSITIVITY_TOKENS, plan.times) for beta in plan.betas
               if math.isfinite(beta)]
    for scenario, solver, beta, r, times in wanted:
        if only_betas is not None and beta not in only_betas:
            continue
        if fresh or not piece_path(store, scenario, solver, beta, r, times)[0].exists():
            jobs.append((store, scenario, solver, beta, r, times, fresh))
    jobs.sort(key=_cost, reverse=True)
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    if workers == 1:
        for job in jobs:
            _compute(job)
        return len(jobs)
    with mp.get_context("spawn").Pool(workers, initializer=_pool_init) as pool:
        for _ in pool.imap_unordered(_compute, jobs):
            pass
    return len(jobs)


def collect(plan: Plan, store, fresh=False, compute=True, missing=None,
            only_betas=None) -> list[Curve]:
    """The curves of the plan. With ``compute=False`` only saved pieces are used: a curve whose
    finest piece is missing falls back to the finest saved one (without a coarse partner it
    cannot be converged), and the missing pieces are appended to ``missing``."""
    curves = []
    for scenario, solver, beta, resolutions, times in curves_of(plan):
        run_it = compute and (only_betas is None or beta in only_betas)
        data = {r: piece(store, scenario, solver, beta, r, times, fresh, run_it)
                for r in resolutions}
        window = "" if times[-1] == plan.t_end else f" to t={times[-1]:g}"
        for r, d in data.items():
            if d is None and missing is not None:
                missing.append(f"{scenario} {solver} β={beta_label(beta)} res={r}{window}")
        data = {r: d for r, d in data.items() if d is not None}
        if not data:
            continue
        have = [r for r in resolutions if r in data]
        fine = data[have[-1]]
        coarse = data[have[-2]]["w2"] if len(have) > 1 else None
        widths = None
        if coarse is not None:
            n = min(len(fine["w2"]), len(coarse))
            widths = sum(np.maximum(d["upper"][:n] - d["lower"][:n], 0.0)
                         for d in (fine, data[have[-2]]))
        curves.append(Curve(scenario, solver, beta, have[-1], fine["times"],
                            fine["w2"], coarse,
                            {r: (float(d["seconds"]), float(d.get("cpu_seconds", np.nan)))
                             for r, d in data.items()},
                            fine["terminal"], widths,
                            data[have[-3]]["w2"] if len(have) > 2 else None))
    return curves


def sensitivities(plan: Plan, store, curves: list[Curve]):
    """Rows (beta, amplification, its time, the particle curve's own N vs 4N difference and its
    threshold) from the saved sensitivity pieces of the dim E = 1 scenario."""
    rows = []
    for beta in plan.betas:
        if not math.isfinite(beta):
            continue
        d = piece(store, "E1", "sensitivity", beta, SENSITIVITY_TOKENS, plan.times,
                  compute=False)
        if d is None:
            continue
        diff = np.abs(d["w2_moved"] - d["w2"])
        i = int(np.argmax(diff))
        c = next((c for c in curves if c.scenario == "E1" and c.solver == "particles"
                  and c.beta == beta), None)
        own = "n/a" if c is None or c.error is None else float(np.max(c.error))
        thr = "n/a" if c is None else CONVERGED_FRACTION * float(np.min(c.w2))
        rows.append((beta_label(beta), diff[i] / float(d["eps"]), float(d["times"][i]), own, thr))
    return rows


def others(c: Curve, curves: list[Curve]):
    """The curves of the other solvers at c's scenario and beta."""
    return [o for o in curves
            if o.solver != c.solver and o.scenario == c.scenario and o.beta == c.beta]


def agreement(curves: list[Curve]):
    """For each converged curve, the largest distance to every other solver's finest curve
    (same scenario and beta) beside that solver's own measured error, over the times where
    that error is measured: the output times both of the other solver's resolutions reached.
    (The spectral solver stops once its density is no longer resolved, the coarse run first:
    its last samples before the fine run's stop carry no error estimate, and at β = 1000 the
    last one was off by 0.0024 where the two resolutions had agreed to 3e-5 until then.)"""
    rows = []
    for c in curves:
        if not c.converged:
            continue
        for o in others(c, curves):
            measured = len(o.w2) if o.error is None else len(o.error)  # o.error: its common times
            n = min(measured, len(c.w2))
            diff = float(np.max(np.abs(o.w2[:n] - c.w2[:n])))
            own = None if o.error is None else float(np.max(o.error[:n]))
            rows.append((c.scenario, beta_label(c.beta), c.solver, o.solver, float(c.times[n - 1]),
                         diff, "n/a" if own is None else own,
                         "n/a" if own is None else ("yes" if diff <= own else "no")))
    return rows


def confirmed_until(c: Curve, curves: list[Curve]) -> tuple[float, str]:
    """(t, other solver): how long an independent solver confirms curve c. From t = 0 on, at
    every output time where both curves' own errors are measured (each |fine − coarse| plus its
    brackets), the two must agree within the sum of those errors; t is the last time before
    the first disagreement (or the end of the common times), maximised over the other solvers.
    (-inf, "") when no other solver has an error estimate at c's start."""
    best, by = -math.inf, ""
    err_c = c.error
    if err_c is None:
        return best, by
    for o in others(c, curves):
        err_o = o.error
        if err_o is None:
            continue
        n = min(len(err_c), len(err_o))
        gap = np.abs(c.w2[:n] - o.w2[:n]) > err_c[:n] + err_o[:n]
        k = int(np.argmax(gap)) if gap.any() else n
        if k > 0 and c.times[k - 1] > best:
            best, by = float(c.times[k - 1]), o.solver
    return best, by


def richardson_rows(curves: list[Curve]):
    """One row per curve with three resolutions: its observed order and extrapolated curve."""
    rows = []
    for c in curves:
        ext = c.extrapolated()
        if ext is None:
            continue
        p, R, err = ext
        n = len(R)
        res = sorted(c.seconds)[-3:]
        if math.isnan(p):
            rows.append((c.scenario, c.solver, beta_label(c.beta), ", ".join(map(str, res)),
                         "none (the differences do not shrink, or oscillate)", "", "", "", "", ""))
            continue
        i = int(np.argmin(R))
        rows.append((c.scenario, c.solver, beta_label(c.beta), ", ".join(map(str, res)), p,
                     float(np.max(np.abs(c.w2[:n] - c.coarse[:n]))), float(np.max(err)),
                     f"{R[i]:.5g} ± {err[i]:.2g}", float(c.times[i]),
                     f"{R[-1]:.5g} ± {err[-1]:.2g}"))
    return rows


def fit_rate(t, w, t0, t1, sqrt_t=False):
    sel = (t >= t0) & (t <= t1) & (w > 0)
    if sel.sum() < 3:
        return float("nan")
    y = np.log(w[sel]) - (0.5 * np.log(t[sel]) if sqrt_t else 0.0)
    return float(-np.polyfit(t[sel], y, 1)[0])


def depth_scale(beta):
    """sqrt(log(beta + 1) / beta), the theorem's scale of the closest approach."""
    return np.sqrt(np.log(beta + 1) / beta)


def fit_minima(curves: list[Curve], scenario: str):
    """The closest approach of one scenario's converged finite-beta curves (particles or
    finite volumes): points (solver, beta, t*, min W2), one per converged curve whose minimum
    is interior; the censored ones (solver, beta, t_from, t_end), whose curve is within its
    own error of its minimum from t_from up to the window's end t_end (still falling, or a
    plateau), so that t* is not located; and the fit t* = slope log beta + intercept
    with its R², and min W2 = e^log_prefactor sqrt(log(beta+1)/beta)^exponent, or None
    with fewer than MIN_FIT_BETAS distinct betas (through two, any line fits exactly and
    R² = 1 says nothing). Where a (solver, beta) has converged curves over several windows,
    the longest one counts."""
    longest = {}
    for c in curves:
        if (c.scenario == scenario and c.solver != "spectral" and c.converged
                and math.isfinite(c.beta)):
            key = (c.solver, c.beta)
            if key not in longest or c.times[-1] > longest[key].times[-1]:
                longest[key] = c
    fitted = list(longest.values())
    pts = [(c.solver, c.beta, *c.minimum()) for c in fitted if c.interior_minimum]
    censored = [(c.solver, c.beta, float(c.minimum_band()[0]), float(c.times[-1]))
                for c in fitted if not c.interior_minimum]
    if len({p[1] for p in pts}) < MIN_FIT_BETAS:
        return pts, censored, None
    _, b, ts, wm = (np.array(v) for v in zip(*pts, strict=True))
    p, r2 = linear_fit(np.log(b), ts)
    q = np.polyfit(np.log(depth_scale(b)), np.log(wm), 1)
    return pts, censored, {"slope": p[0], "intercept": p[1], "r2": r2, "exponent": q[0],
                           "log_prefactor": q[1]}


def report(plan: Plan, curves: list[Curve], wall: float, mode: str, sensitivity=()):
    colors = {b: plt.cm.viridis(i / max(1, len(plan.betas) - 1)) for i, b in enumerate(plan.betas)}
    colors[math.inf] = "k"
    styles = {"particles": "-", "finite_volume": "--", "spectral": ":"}
    fig, ax = plt.subplots(2, 3, figsize=(17, 9.5))
    for k, scenario in enumerate(["E1", "E2"]):
        a = ax[0, k]
        for c in curves:
            if c.scenario != scenario:
                continue
            lab = f"{c.solver} β={beta_label(c.beta)}" + ("" if c.converged else " (not converged)")
            a.semilogy(c.times, c.w2, styles[c.solver], color=colors[c.beta],
                       alpha=1.0 if c.converged else 0.45, label=lab, lw=1.3)
        g = SCENARIOS[scenario]["gap"]
        t = plan.times[plan.times > 0]  # sqrt(t) vanishes at 0: a log axis starts after it
        ref = np.exp(-g * t / 2) if scenario == "E1" else np.sqrt(t) * np.exp(-g * t)
        a.semilogy(t, 0.6 * ref / ref[3], color="0.5", lw=0.8,
                   label=r"$e^{-\gamma t/2}$" if scenario == "E1" else r"$\sqrt{t}\,e^{-\gamma t}$")
        a.set_xlabel("t")
        a.set_ylabel(r"$W_2(\rho_t, \Pi_\#\rho_0)$, chordal")
        a.set_title(f"dim E = {SCENARIOS[scenario]['dimE']}")
        a.legend(fontsize=6, ncol=2)
        a.grid(alpha=0.3, which="both")

    # Closest approach and depth per scenario, from its converged finite-beta curves,
    # whichever solver converged (fit_minima).
    fits = {scenario: fit_minima(curves, scenario) for scenario in ("E1", "E2")}
    marks = {"E1": "o", "E2": "s"}
    for scenario, (pts, _, fit) in fits.items():
        if fit is not None:
            b = np.array([p_[1] for p_ in pts])
            grid = np.linspace(np.log(b).min(), np.log(b).max(), 50)
            eps = depth_scale(b)
            ax[0, 2].plot(grid, fit["slope"] * grid + fit["intercept"], color="0.5", lw=0.8,
                          ls="-" if scenario == "E1" else "--", label=(
                              f"dim E = {SCENARIOS[scenario]['dimE']}: t* = {fit['slope']:.2f} "
                              f"log β + {fit['intercept']:.2f}, R² = {fit['r2']:.3f}"))
            ax[1, 0].loglog(eps, np.exp(fit["log_prefactor"]) * eps ** fit["exponent"],
                            color="0.5", lw=0.8, ls="-" if scenario == "E1" else "--",
                            label=f"dim E = {SCENARIOS[scenario]['dimE']}: exponent "
                                  f"{fit['exponent']:.2f}")
        for solver in ("particles", "finite_volume"):
            mine = [(b, ts, wm) for s_, b, ts, wm in pts if s_ == solver]
            if mine:
                b, ts, wm = (np.array(v) for v in zip(*mine, strict=True))
                lab = f"{solver}, dim E = {SCENARIOS[scenario]['dimE']}"
                ax[0, 2].plot(np.log(b), ts, marks[scenario], label=lab,
                              color="C0" if solver == "particles" else "C1")
                ax[1, 0].loglog(depth_scale(b), wm, marks[scenario], label=lab,
                                color="C0" if solver == "particles" else "C1")
    ax[0, 2].set_xlabel(r"$\log\beta$")
    ax[0, 2].set_ylabel(r"$t^* = \arg\min_t W_2$")
    ax[0, 2].set_title("closest approach (converged curves)")
    ax[0, 2].legend(fontsize=7)
    ax[1, 0].set_xlabel(r"$\sqrt{\log(\beta+1)/\beta}$")
    ax[1, 0].set_ylabel(r"$\min_t W_2$")
    ax[1, 0].set_title("depth of the minimum")
    ax[1, 0].legend(fontsize=7)

    # Early-phase rate per beta against the zero-temperature prediction.
    rate_rows = []
    for c in curves:
        # a longer window repeats its early phase, already fitted on the plan's window
        if c.solver == "spectral" or c.times[-1] > plan.t_end:
            continue
        g = SCENARIOS[c.scenario]["gap"]
        tmin = c.minimum()[0]
        t1 = 8.0 if math.isinf(c.beta) else max(1.5, 0.6 * tmin)
        r = fit_rate(c.times, c.w2, 1.0, t1, sqrt_t=c.scenario == "E2")
        pred = g / 2 if c.scenario == "E1" else g
        rate_rows.append((c.scenario, c.solver, beta_label(c.beta), r, pred, f"[1, {t1:.2g}]",
                          "yes" if c.converged else "no"))
        if c.converged:
            x = 1e4 if math.isinf(c.beta) else c.beta
            ax[1, 1].semilogx(x, r / pred, "o" if c.scenario == "E1" else "s",
                              color="C0" if c.solver == "particles" else "C1")
    ax[1, 1].axhline(1.0, color="0.5", lw=0.8)
    ax[1, 1].set_xlabel(r"$\beta$ ($\infty$ drawn at $10^4$)")
    ax[1, 1].set_ylabel("early rate / prediction")
    ax[1, 1].set_title(r"early phase: $\gamma/2$ (dim E = 1, o), $\gamma$ (dim E = 2, s)")

    for c in curves:
        if c.scenario == "E1" and c.solver != "spectral":
            ax[1, 2].plot(c.times, c.terminal, styles[c.solver], color=colors[c.beta],
                          label=f"{c.solver} β={beta_label(c.beta)}")
    ax[1, 2].set_xlabel("t")
    ax[1, 2].set_ylabel(f"mass within {TERMINAL_DELTA} rad of V's dominant subspace")
    ax[1, 2].set_title("terminal phase (dim E = 1 scenario)")
    ax[1, 2].legend(fontsize=6, ncol=2)
    fig.tight_layout()

    rows = []
    for c in curves:
        ts, wm = c.minimum()
        err = c.error
        until, by = confirmed_until(c, curves)
        confirmed = ("no" if until == -math.inf else
                     "whole window" if until >= c.times[-1] else f"until t = {until:g}")
        rows.append((c.scenario, c.solver, beta_label(c.beta), c.res, wm, ts, float(c.w2[-1]),
                     float(c.times[-1]), "n/a" if err is None else float(np.max(err)),
                     "yes" if c.converged else "no",
                     confirmed + (f" ({by})" if by else ""),
                     ", ".join(f"{r}: {w:.0f} s ({cpu:.0f} CPU s)"
                               for r, (w, cpu) in c.seconds.items())))
    text = [f"Mode `{mode}`; total wall time of this invocation {wall:.0f} s (pieces reused from "
            "earlier runs count with the wall time they took). W2 is chordal, computed against "
            "the solver's own Π#ρ0 (particles: the empirical half-sphere masses of their start).",
            "", "Self-converged: the two finest resolutions of one solver (N and 4N tokens; n and "
            f"2n cells along a cube edge) differ by less than {CONVERGED_FRACTION:.0%} of the "
            "curve's minimum at every output time; each difference is widened by both W2 "
            "brackets (upper − lower), the most the true distances can differ. A solver can "
            "converge under its own refinement and still be wrong, so a curve is only "
            "**confirmed** where an independent solver agrees with it within the sum of the two "
            "curves' own errors: 'confirmed' gives the time up to which one does (from t = 0, "
            "and by which solver). Only a self-converged curve confirmed over its whole window "
            "counts as converged without qualification; the fits below use self-converged "
            "curves and say how far each is confirmed.", "",
            table(rows, ["scenario", "solver", "beta", "finest res", "min W2", "t*",
                         "W2 at end", "end", "max \\|fine−coarse\\|", "self-converged",
                         "confirmed", "wall time"])]
    orders = richardson_rows(curves)
    if orders:
        text += ["", "Observed order and Richardson extrapolation from the three finest "
                 "resolutions (one order per curve, from the max-norm differences; the "
                 "extrapolant's error bar is its correction |R − fine|; "
                 "`spherepde.analysis.convergence.richardson`). Cells refine by 2 per level, "
                 "tokens by 4, so a particle order is in N^(-1/2):", "",
                 table(orders, ["scenario", "solver", "beta", "resolutions", "order",
                                r"max \|fine−coarse\|", "max error bar", "min R", "t* (R)",
                                "R at end"])]
    agree = agreement(curves)
    if agree:
        text += ["", "Agreement of converged curves with the other solvers (max over the times, "
                 "up to 'until t', where both of the other solver's resolutions exist; its own "
                 "error is its max |fine−coarse| there, brackets included):", "",
                 table(agree, ["scenario", "beta", "converged solver", "other", "until t",
                               "max \\|diff\\|", "other's error", "within"])]
    for scenario, (pts, censored, fit) in fits.items():
        dim = SCENARIOS[scenario]["dimE"]
        def confirmation(solver, beta, scenario=scenario):
            c = max((c for c in curves if (c.scenario, c.solver, c.beta) ==
                     (scenario, solver, beta)), key=lambda c: c.times[-1])
            until, by = confirmed_until(c, curves)
            return ("not confirmed" if until == -math.inf else
                    f"confirmed by {by} until t = {until:g}")

        listed = "; ".join(f"{s_} β = {b:g}: t* = {ts:.3f}, min W2 = {wm:.4f} "
                           f"({confirmation(s_, b)})" for s_, b, ts, wm in pts) or "none"
        if censored:
            listed += (" (left out, converged but within their own error of their minimum up "
                       "to the window's end, still falling or flat, so that t* is not located: "
                       + "; ".join(f"{s_} β = {b:g} over [{t0:g}, {te:g}]"
                                   for s_, b, t0, te in censored) + ")")
        if fit is None:
            text += ["", f"Self-converged finite-β curves (dim E = {dim}): {listed}. Fewer than "
                     f"{MIN_FIT_BETAS} distinct β: no fit of t*(β) or min W2(β)."]
        else:
            text += ["", f"Self-converged finite-β curves (dim E = {dim}): {listed}. Fit: t* = "
                     f"{fit['slope']:.3f} log β + {fit['intercept']:.3f} (R² = "
                     f"{fit['r2']:.4f}); min W2 ∝ sqrt(log(β+1)/β)^{fit['exponent']:.3f}."]
    if sensitivity:
        text += ["", f"Amplification of a change of the start (dim E = 1, {SENSITIVITY_TOKENS} "
                 f"tokens from the lattice, one run moved by ε = {SENSITIVITY_EPS:g}): "
                 "max_t |W2 − W2′| / ε, beside the particle curve's own N vs 4N difference. A "
                 "discretisation error of the start grows by about this factor by the time "
                 "given, so the whole-interval rule asks the start to be that much more "
                 "accurate than the threshold. More tokens resolve finer, faster-growing "
                 "perturbations, so at larger N the factor is larger (docs/methods.md).", "",
                 table(sensitivity, ["beta", "amplification", "at t",
                                     r"particles: max \|N − 4N\|", "threshold"])]
    text += ["", "Early-phase rates (fitted log-slope; dim E = 2 fits log W2 − ½ log t):", "",
             table(rate_rows, ["scenario", "solver", "beta", "rate", "prediction", "window",
                               "converged"])]
    return fig, "\n".join(text)


def write_points(curves: list[Curve], path):
    """Every point of every curve, marked converged or not."""
    lines = ["scenario,solver,beta,window_end,t,w2_fine,w2_coarse,abs_diff,converged"]
    for c in curves:
        err = c.error
        ok = c.point_converged
        for i, t in enumerate(c.times):
            coarse = "" if c.coarse is None or i >= len(c.coarse) else f"{c.coarse[i]:.8g}"
            d = "" if err is None or i >= len(err) else f"{err[i]:.3g}"
            lines.append(f"{c.scenario},{c.solver},{beta_label(c.beta)},{c.times[-1]:g},"
                         f"{t:.6g},{c.w2[i]:.8g},"
                         f"{coarse},{d},{int(ok[i])}")
    io.write_text(path, "\n".join(lines) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    scale = ap.add_mutually_exclusive_group()
    scale.add_argument("--quick", action="store_true", help="small resolutions (< 10 min, 2 cores)")
    scale.add_argument("--medium", action="store_true",
                       help="4x the tokens of --quick, 1.5x the cells")
    ap.add_argument("--fresh", action="store_true", help="recompute every piece")
    ap.add_argument("--workers", type=int, default=None,
                    help="processes computing pieces side by side (default: one per core)")
    ap.add_argument("--report-only", action="store_true",
                    help="compute nothing: report from the pieces saved so far, listing the rest")
    ap.add_argument("--only-betas", nargs="+", metavar="BETA",
                    help="compute only these betas (e.g. inf 16); report the others from saved "
                         "pieces, like --report-only")
    args = ap.parse_args(argv)
    only = None if args.only_betas is None else [float(b) for b in args.only_betas]
    plan, mode = ((QUICK, "quick") if args.quick else (MEDIUM, "medium") if args.medium
                  else (FULL, "full"))
    name = "low_temperature" if mode == "full" else f"low_temperature_{mode}"
    store = OUT / f"{name}_runs"
    store.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    missing = []
    if not args.report_only:
        compute_pieces(plan, store, args.fresh, only_betas=only, workers=args.workers)
    # every piece this invocation computes is saved by now: collect only reads, and lists the
    # pieces left out (--report-only, --only-betas) as missing
    curves = collect(plan, store, compute=False, missing=missing)
    fig, text = report(plan, curves, time.perf_counter() - t0, mode,
                       sensitivities(plan, store, curves))
    if missing:
        text = (f"**Partial:** {len(missing)} pieces of the `{mode}` plan were not computed "
                "(`--report-only` / `--only-betas`); their curves are missing or fall back to the "
                f"coarser piece and cannot count as converged: {'; '.join(missing)}.\n\n" + text)
    write_points(curves, OUT / f"{name}_points.csv")
    publish(name, fig, "Low-temperature concentration (docs/theory.md §3.1–3.2)", text)


if __name__ == "__main__":
    main()
