"""The late phase of low-temperature self-attention: where the tokens go after t* (docs/theory.md,
§3.4; docs/methods.md, "Terminal measure and late-phase diagnostics").

After the approach to the projected measure Pi#rho_0 (closest near t* ~ log beta), the mass
leaves it. The conjecture: once each cluster attends only to itself it moves by the cluster
flow x' = P_x V x, so the mass ends on the conjectured terminal measure (Phi_inf)#Pi#rho_0,
the atoms of Pi#rho_0 moved to the flow's limit (model.terminal_measure). Three scenarios
separate the phases:

- R1: dim E = 1 (A = diag(1, 0.4, 0), gap 0.6) with V's dominant eigenvalue real and its
  eigenvector v 0.59 rad from E: the terminal atoms +-v are not those of Pi#rho_0.
- E1: the low-temperature study's dim E = 1 scenario (V = S O): V's dominant pair is complex,
  so the flow turns in its invariant plane (which contains e) and has no limit. Its
  diagnostic is the orbit: s*(t) = argmin_s W2(rho_t, Phi_s#Pi#rho_0), the flow time along
  the lone-cluster orbit that best matches rho_t (0 on Pi#rho_0), with the distance there.
- E2: the low-temperature study's dim E = 2 scenario; V's dominant eigenvalue is real, so
  the great-circle measure Pi#rho_0 is pushed to two atoms +-v.

Finite volumes (multirate default) at two or three resolutions per (scenario, beta), one output
interval at a time, each piece checkpointed and saved under validation/output/late_phase_runs/
through the low-temperature study's checkpoint helpers (a rerun resumes or reuses).

Run:
    .venv/bin/python validation/late_phase.py --quick         # 93 CPU s (2 idle cores: minutes)
    .venv/bin/python validation/late_phase.py                 # the full study (hours)
    .venv/bin/python validation/late_phase.py --piece R1 256 128   # one piece (background)
    .venv/bin/python validation/late_phase.py --piece E1 1000 32 --variant linear  # one option
    .venv/bin/python validation/late_phase.py --report-only
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from _common import OUT, linear_fit, table
from low_temperature import (
    _checkpoint,
    _particle_solver,
    _resume,
    beta_label,
    cached_piece,
    initial,
    others,
)
from low_temperature import model_for as low_temperature_model
from scipy.optimize import minimize_scalar

import spherepde as sp
from spherepde import io
from spherepde.density.finite_volume import locate
from spherepde.sphere import rotation_about_axis

VERSION = 1
#: Convergence: two resolutions agree when |fine - coarse| (plus both W2 brackets' widths) is
#: below this fraction of the fine curve's minimum of W2(rho_t, Pi#rho_0), at every output
#: time, for both W2 curves: the low-temperature study's rule, one absolute threshold per curve.
CONVERGED_FRACTION = 0.05
#: t_dep: the first time after t* at which W2(rho_t, Pi#rho_0) exceeds its minimum by this
#: fraction of the minimum.
DEP_FRACTION = 0.5
#: t_term: the first time after t* at which W2(rho_t, terminal measure) has covered all but
#: TERM_FRACTION of its fall from t* to its settled value. At finite beta the mass settles
#: on clusters of width ~ beta^-1/2 about the terminal atoms (measured: W2 to them at the end
#: times sqrt(beta) about constant), so an absolute level is reached only at large beta; it is
#: reported too: t_term(TERM_LEVEL), W2 to the terminal measure first below TERM_LEVEL.
TERM_FRACTION, TERM_LEVEL = 0.1, 0.1
#: t_orbit: the first time at which the best-matching orbit point has turned this far (rad)
#: from e along the lone-cluster orbit (the diagnostic of the complex scenario E1).
ORBIT_ANGLE = 0.5
#: The orbit search: flow times s on [0, s_max], a grid of this step, then refined. s_max is
#: ORBIT_S_MAX for a real dominant eigenvalue of V (the orbit is at its limit to e^{-25} by
#: then in R1), and ORBIT_TURNS of the period 2 pi / omega for a complex pair lambda +- i omega
#: (the orbit returns to e after one period: a longer search would match rho_t near e to the
#: returned orbit as well as to its start).
ORBIT_S_MAX, ORBIT_STEP, ORBIT_TURNS = 30.0, 0.5, 0.75
#: Output spacing, and the snapshot times whose cell averages are saved (for density maps);
#: a window longer than SNAPSHOTS[-1] adds one every LATE_SNAPSHOT_STEP after it.
DT = 0.5
SNAPSHOTS = [0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 70, 80, 90, 100]
LATE_SNAPSHOT_STEP = 25
#: Pieces at most this fine keep their snapshots (float16 cell averages: small files).
SNAPSHOT_MAX_N = 32
MIN_FIT_BETAS = 3
#: dim E = 2: Pi#rho_0 from this many lattice points of rho_0 (diagnostic_start)
E2_LIMIT_POINTS = 1000
#: A piece stops early once it has settled: over the last SETTLE_WINDOW time units its W2 to
#: the terminal measure (dim E = 1 with a complex pair: its orbit distance) moved by less than
#: SETTLE_TOL, and the late phase has begun (W2 to the terminal measure below W2 to Pi#rho_0;
#: for the complex pair, the orbit turned past ORBIT_ANGLE), so that a plateau near Pi#rho_0
#: before the departure does not count as settled.
SETTLE_WINDOW, SETTLE_TOL = 10.0, 1e-3

# R1: A = diag(1, 0.4, 0) (E = e1, gap 0.6) and B symmetric positive definite, |B|_2 = 1, so
# <x, Bx> > 0 on the sphere: a lone cluster's attention falls on itself. V = A B^{-1} is
# similar to B^{-1/2} A B^{-1/2}, so its eigenvalues are real.
R1_A = np.diag([1.0, 0.4, 0.0])
R1_B_EIGENVALUES, R1_B_AXIS, R1_B_ANGLE = [1.0, 0.3, 1.0], [0.0, 0.0, 1.0], 0.3

SCENARIOS = {
    "R1": {"dimE": 1, "V": "real dominant eigenvalue, v 0.59 rad from e"},
    "E1": {"dimE": 1, "V": "complex dominant pair; invariant plane contains e"},
    "E2": {"dimE": 2, "V": "real dominant eigenvalue"},
}


def r1_matrices():
    """(B, V) of scenario R1."""
    R = rotation_about_axis(R1_B_AXIS, R1_B_ANGLE)
    B = R @ np.diag(R1_B_EIGENVALUES) @ R.T
    return B, R1_A @ np.linalg.inv(B)


def model_for(scenario: str, beta: float) -> sp.Model:
    if scenario == "R1":
        B, V = r1_matrices()
        return sp.Model(K=B, V=V, beta=beta)  # Q = I: B = K, A = V B^T = R1_A
    return low_temperature_model(scenario, beta)


def eigen_data(scenario: str) -> dict:
    """A's spectrum, V's spectrum, V's dominant right/left eigenvectors (when real) and the
    angle of v from E (the largest principal angle's complement: arccos |P_E v|)."""
    m = model_for(scenario, math.inf)
    rep = m.check_assumptions()
    ev, R = np.linalg.eig(m.V)
    order = np.argsort(-ev.real)
    ev, R = ev[order], R[:, order]
    out = {"A eigenvalues": rep.eigenvalues, "gap": rep.gap, "dim E": rep.dim_E,
           "V eigenvalues": ev}
    if abs(ev[0].imag) < 1e-12:
        v = np.real(R[:, 0]) / np.linalg.norm(np.real(R[:, 0]))
        evl, L = np.linalg.eig(m.V.T)
        u = np.real(L[:, np.argmax(evl.real)])
        u = u * np.sign(u @ v) / np.linalg.norm(u)
        U = m.dominant_subspace()
        out.update(v=v, u=u, angle_v_E=float(np.arccos(min(1.0, np.linalg.norm(U.T @ v)))))
    return out


# ---------------------------------------------------------------------------- diagnostics
def _w2(mu, nu, **options):
    r = sp.w2(mu, nu, **options)
    return float(r), float(r.lower), float(r.upper)


class Diagnostics:
    """Per-output rows for one model: W2 to Pi#rho_0, to the terminal measure, and (dim E = 1)
    the best-matching point of the lone-cluster orbit."""

    def __init__(self, model, mu0):
        self.model = model
        self.limit = model.limit_measure(mu0)
        U = model.dominant_subspace()
        self.opts = {"plane": U} if U.shape[1] == 2 else {}  # dim E = 2: the circle solver
        try:
            self.terminal = model.terminal_measure(mu0)
        except sp.model.AssumptionError:  # a complex dominant pair: no limit
            self.terminal = None
        self.orbit = U.shape[1] == 1
        if self.orbit:
            self.e = U[:, 0] * np.sign(self.limit.points[0] @ U[:, 0])
            ev = np.linalg.eigvals(model.V)
            omega = abs(ev[np.argmax(ev.real)].imag)
            self.s_max = ORBIT_S_MAX if omega < 1e-12 else ORBIT_TURNS * 2 * np.pi / omega
            # the orbit of e, tabulated once (Phi_s through V's eigen-decomposition, checked
            # against model.cluster_flow): its arc length, the angle turned by s
            s = np.linspace(0.0, self.s_max, 4001)
            x = self.flow_e(s)
            assert np.allclose(x[-1], model.cluster_flow(self.e, s[-1]), atol=1e-9)
            steps = np.arccos(np.clip(np.einsum("ij,ij->i", x[1:], x[:-1]), -1.0, 1.0))
            self.arc = (s, np.concatenate([[0.0], np.cumsum(steps)]))

    def flow_e(self, s) -> np.ndarray:
        """Phi_s(e) for an array of s: (len(s), d), by V = R diag(lambda) R^-1."""
        ev, R = np.linalg.eig(self.model.V)
        c = np.linalg.solve(R, self.e.astype(complex))
        shift = ev.real.max()
        y = np.real(np.exp(np.outer(s, ev - shift)) * c @ R.T)
        return y / np.linalg.norm(y, axis=1, keepdims=True)

    def orbit_measure(self, s):
        """Phi_s#Pi#rho_0: the two atoms +-e moved to +-Phi_s(e) (Phi is odd)."""
        x = self.flow_e(np.atleast_1d(float(s)))[0]
        sign = np.sign(self.limit.points @ self.e)
        return sp.PointCloud(sign[:, None] * x, self.limit.weights)

    def orbit_match(self, mu):
        """(s*, W2 there, the arc length from e to Phi_{s*}(e) along the orbit): the orbit
        point Phi_s#Pi#rho_0 nearest to mu over s in [0, s_max] (a grid, then a bounded scalar
        search around the grid's best)."""
        grid = np.linspace(0.0, self.s_max, int(round(self.s_max / ORBIT_STEP)) + 1)
        vals = np.array([float(sp.w2(mu, self.orbit_measure(s))) for s in grid])
        k = int(np.argmin(vals))
        lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
        s, w = grid[k], vals[k]
        if hi > lo:
            r = minimize_scalar(lambda s_: float(sp.w2(mu, self.orbit_measure(s_))),
                                bounds=(lo, hi), method="bounded", options={"xatol": 1e-4})
            if r.fun < w:
                s, w = float(r.x), float(r.fun)
        return s, w, float(np.interp(s, *self.arc))

    def row(self, mu):
        out = list(_w2(mu, self.limit, **self.opts))
        out += list(_w2(mu, self.terminal)) if self.terminal is not None else [np.nan] * 3
        out += list(self.orbit_match(mu)) if self.orbit else [np.nan] * 3
        return out


COLUMNS = ["w2", "lower", "upper", "w2_term", "lower_term", "upper_term", "orbit_s", "orbit_w2",
           "orbit_angle"]


# ---------------------------------------------------------------------------- the pieces
def diagnostic_start(scenario):
    """rho_0 as the diagnostics see it: the density itself in dim E = 1 (Pi#rho_0 and the
    terminal measure are two atoms with closed-form masses); in dim E = 2 its lattice of
    E2_LIMIT_POINTS equal-weight points, so that Pi#rho_0 on the circle has that many atoms.
    Once the mass leaves the circle the circle solver no longer applies and the general
    solvers' cost grows with the atoms (1.6 s an output against the 20000-point random sample
    at n = 8, 0.2 s against 1000 lattice points, which moved W2 by 3e-4; at n = 16 late, 10 s
    against 2000 lattice points and 1.9 s against 1000, W2 moved by 2e-5)."""
    if SCENARIOS[scenario]["dimE"] == 1:
        return initial()
    return initial().lattice(E2_LIMIT_POINTS)


def settled(times, rows) -> bool:
    """Whether the rows (COLUMNS) up to times[-1] have settled (SETTLE_WINDOW, SETTLE_TOL)."""
    if times[-1] - times[0] < SETTLE_WINDOW:
        return False
    last = times >= times[-1] - SETTLE_WINDOW - 1e-9
    w2, term, orbit_w2, angle = (rows[:, COLUMNS.index(c)]
                                 for c in ("w2", "w2_term", "orbit_w2", "orbit_angle"))
    if np.isfinite(term[-1]):
        late, watched = term[-1] < w2[-1], term[last]
    else:
        late, watched = angle[-1] > ORBIT_ANGLE, orbit_w2[last]
    return bool(late and np.ptp(watched) < SETTLE_TOL and np.ptp(w2[last]) < SETTLE_TOL)


def _piece_data(rows, times, spent, spent_cpu, **extra) -> dict:
    """A piece's saved arrays: the diagnostic rows (COLUMNS) on the times reached."""
    arr = np.array(rows)
    data = {c: arr[:, j] for j, c in enumerate(COLUMNS)}
    data.update(times=times[:len(arr)], resumed_seconds=np.array(spent),
                resumed_cpu_seconds=np.array(spent_cpu), **extra)
    return data


def _saved_and_settled(partial, times, done, rows, state, spent, start) -> bool:
    """After output ``done``: checkpoint the rows and the state to ``partial`` (if any), with
    the seconds spent (wall, CPU) before this sitting plus those since ``start``; return
    whether the piece has :func:`settled`."""
    if partial is not None:
        _checkpoint(partial, times, done, rows, state, spent[0] + time.perf_counter() - start[0],
                    spent[1] + time.process_time() - start[1])
    if settled(times[:done + 1], np.array(rows)):
        print(f"    settled at t = {times[done]:g}", flush=True)
        return True
    return False


def run_particles(scenario, beta, n, times, partial=None):
    """The same diagnostics for n tokens on the product Gauss rule of rho_0
    (``Measure.quadrature``: weighted nodes whose moments match rho_0's), one output interval
    at a time from the last positions, checkpointed and stopped once :func:`settled`, as the
    finite volumes are. Pi#rho_0 and the terminal measure are the density's, so a token curve
    and a finite-volume curve measure the distance to the same target."""
    model = model_for(scenario, beta)
    cloud = initial().quadrature(n)
    diag = Diagnostics(model, diagnostic_start(scenario))
    times = np.asarray(times, dtype=float)
    done, rows, x, spent, spent_cpu = _resume(partial, times, cloud.points, check_shape=True)
    t0, c0 = time.perf_counter(), time.process_time()
    solver = _particle_solver(model)
    if done == 0:
        rows.append(diag.row(cloud))
    while done < len(times) - 1:
        x = solver.solve(x, times[done:done + 2], cloud.weights).positions[-1]
        rows.append(diag.row(sp.PointCloud(x, cloud.weights)))
        done += 1
        if _saved_and_settled(partial, times, done, rows, x, (spent, spent_cpu), (t0, c0)):
            break
    return _piece_data(rows, times, spent, spent_cpu, n=np.array(len(cloud.weights)),
                       kernel=repr(solver))


def snapshot_times(t_end: float) -> list:
    """The snapshot times of a window to ``t_end``: SNAPSHOTS, then every LATE_SNAPSHOT_STEP."""
    late = np.arange(SNAPSHOTS[-1] + LATE_SNAPSHOT_STEP, t_end + 1e-9, LATE_SNAPSHOT_STEP)
    return [s for s in SNAPSHOTS if s <= t_end + 1e-9] + [float(t) for t in late]


def run_finite_volume(scenario, beta, n, times, partial=None, variant=None):
    """The finite-volume diagnostics at ``times``, one output interval at a time from the last
    state, checkpointed to ``partial`` after every interval (and resumed from it); it stops
    early, its ``times`` cut there, once :func:`settled`. ``variant``: a key of VARIANTS, the
    solver's options that differ from its defaults (None: the defaults)."""
    model = model_for(scenario, beta)
    solver = sp.FiniteVolumeSolver(model, n, **VARIANTS[variant] if variant else {})
    diag = Diagnostics(model, diagnostic_start(scenario))
    times = np.asarray(times, dtype=float)
    done, rows, state, spent, spent_cpu = _resume(partial, times, initial())
    t0, c0 = time.perf_counter(), time.process_time()
    keep_snaps = n <= SNAPSHOT_MAX_N
    snap_idx = [int(np.argmin(np.abs(times - s))) for s in snapshot_times(times[-1])]
    snaps = {}
    if keep_snaps and partial is not None and Path(partial).with_suffix(".snaps.npz").exists():
        saved = io.load_npz(Path(partial).with_suffix(".snaps.npz"))
        snaps = {int(k): saved["averages"][j] for j, k in enumerate(saved["index"])}
    while done < len(times) - 1:
        sol = solver.solve(state, times[done:done + 2])
        if done == 0:
            rows.append(diag.row(sol.measure(0)))
            if keep_snaps:
                snaps[0] = sol.averages(0).astype(np.float16)
        rows.append(diag.row(sol.measure(1)))
        state = sol.coefficients[-1] / solver.mesh.areas  # cell averages, what solve takes
        done += 1
        if keep_snaps and done in snap_idx:
            snaps[done] = sol.averages(1).astype(np.float16)
            if partial is not None:
                io.save_npz(Path(partial).with_suffix(".snaps.npz"), index=np.array(sorted(snaps)),
                            averages=np.array([snaps[k] for k in sorted(snaps)]))
        if _saved_and_settled(partial, times, done, rows, state, (spent, spent_cpu), (t0, c0)):
            break
    data = _piece_data(rows, times, spent, spent_cpu, n=np.array(n),
                       velocity_tol=np.array(solver.velocity_tol),
                       final=np.asarray(state, dtype=float))  # cell averages at the end
    if keep_snaps:
        data["snapshot_index"] = np.array(sorted(snaps))
        data["snapshots"] = np.array([snaps[k] for k in sorted(snaps)])
    if partial is not None:
        Path(partial).with_suffix(".snaps.npz").unlink(missing_ok=True)
    return data


#: The solvers of a piece: the runner and the file-name tag.
RUNNERS = {"finite_volume": (run_finite_volume, "fv"), "particles": (run_particles, "particles")}

#: Finite-volume variants: one option of the solver changed from its default at a fixed n, to
#: tell which of the scheme's choices a late-phase time depends on. The default steps with
#: macro_tol = 1e-3 and (harmonic path, n > 24) velocity_tol = 1e-5 at every n up to 64, and
#: reconstructs cubics; a time that moves when one of these is tightened at fixed n rests on
#: that tolerance, whatever refining n shows.
VARIANTS = {
    "macro_tol=1e-4": {"macro_tol": 1e-4},
    "velocity_tol=1e-6": {"velocity_tol": 1e-6},
    "linear": {"reconstruction": "linear"},
    "quadratic": {"reconstruction": "quadratic"},
}


def piece_path(store, scenario, beta, n, times, solver="finite_volume", variant=None):
    if variant is not None and (solver != "finite_volume" or variant not in VARIANTS):
        raise ValueError(f"variant {variant!r}: the finite-volume pieces take one of "
                         f"{sorted(VARIANTS)} (or None, the solver's defaults)")
    spec = {"v": VERSION, "scenario": scenario, "solver": solver,
            "beta": beta_label(beta), "n": n,
            "times": [float(times[0]), float(times[-1]), len(times)],
            "orbit": [ORBIT_S_MAX, ORBIT_STEP], "snapshots": SNAPSHOTS}
    if times[-1] > SNAPSHOTS[-1]:
        spec["late_snapshots"] = LATE_SNAPSHOT_STEP
    if SCENARIOS[scenario]["dimE"] == 2:
        spec["limit"] = f"lattice{E2_LIMIT_POINTS}"
    if scenario == "R1":
        spec["B"] = [R1_B_EIGENVALUES, R1_B_AXIS, R1_B_ANGLE]
        spec["A"] = np.diag(R1_A).tolist()
    if solver == "particles":
        spec["init"] = "quadrature"  # rho_0's product Gauss rule, about n nodes
    tag = RUNNERS[solver][1]
    if variant is not None:  # only then, so that the default pieces keep their names
        spec["options"] = VARIANTS[variant]
        tag += f"-{variant}"
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    return Path(store) / f"{scenario}_{tag}_beta={beta_label(beta)}_n={n}_{key}.npz", spec


def piece(store, scenario, beta, n, times, compute=True, solver="finite_volume", variant=None):
    """One (scenario, beta, n) piece of ``solver`` (n: cells per cube face, or tokens), with
    the finite volumes' ``variant`` (VARIANTS; None: the defaults): loaded when saved, else
    computed and saved atomically (``compute=False``: None when not saved)."""
    path, spec = piece_path(store, scenario, beta, n, times, solver, variant)
    def run(partial):
        extra = {} if variant is None else {"variant": variant}  # finite volumes only
        return RUNNERS[solver][0](scenario, beta, n, times, partial=partial, **extra)

    label = f" ({variant})" if variant else ""
    return cached_piece(path, spec, run, f"{scenario} {solver}{label} beta={beta_label(beta)} "
                        f"n={n} to t={times[-1]:g}", compute=compute)


@dataclass
class Plan:
    betas: list
    t_end: float
    cells: dict                       # scenario -> resolutions, coarse to fine (factor 2)
    scenarios: list = field(default_factory=lambda: ["R1", "E1", "E2"])
    #: scenario -> token counts (N, 4N) of the particle pieces, which cross-check the cells
    tokens: dict = field(default_factory=dict)
    #: (scenario, beta) -> a longer window than t_end, where the late phase has not begun by
    #: t_end (both solvers' pieces of that pair run to it)
    windows: dict = field(default_factory=dict)
    #: (scenario, beta) -> {n: VARIANTS keys}: finite-volume pieces at that n, each with one
    #: option of the solver changed, beside the default piece
    variants: dict = field(default_factory=dict)

    def resolutions(self, scenario, solver):
        return (self.cells if solver == "finite_volume" else self.tokens).get(scenario, [])

    def times(self, scenario, beta) -> np.ndarray:
        """The output times of (scenario, beta): every DT to its window's end."""
        t_end = self.windows.get((scenario, float(beta)), self.t_end)
        return np.linspace(0.0, t_end, int(round(t_end / DT)) + 1)


QUICK = Plan(betas=[16.0, 64.0], t_end=30.0, cells={"R1": [8, 16], "E1": [8, 16], "E2": [8]},
             tokens={"R1": [500, 2000]})
FULL = Plan(betas=[16.0, 64.0, 256.0, 1000.0], t_end=100.0,
            cells={"R1": [16, 32, 64, 128], "E1": [16, 32, 64], "E2": [16, 32, 64]},
            tokens={"R1": [4000, 16000, 64000, 256000, 1000000], "E1": [4000, 16000],
                    "E2": [4000, 16000]},
            # E1 at beta = 1000: the cells hold the plateau to t = 100 at every resolution
            windows={("E1", 1000.0): 200.0},
            # its departure moves later with n: is it set by a tolerance or the reconstruction?
            variants={("E1", 1000.0): {16: ["macro_tol=1e-4", "linear", "quadratic"],
                                       32: ["macro_tol=1e-4", "velocity_tol=1e-6", "linear"]}})


# ---------------------------------------------------------------------------- analysis
@dataclass
class Curve:
    """One (scenario, beta): the finest piece and the next coarser one on common times."""
    scenario: str
    beta: float
    n: int
    data: dict                # the finest piece
    coarse: dict | None       # the next coarser piece
    coarse_n: int | None
    solver: str = "finite_volume"

    @property
    def times(self):
        return self.data["times"]

    def late(self, d=None) -> np.ndarray:
        """The late-phase distance: W2 to the terminal measure, or (no limit) to the orbit."""
        d = self.data if d is None else d
        return d["w2_term"] if np.isfinite(d["w2_term"]).all() else d["orbit_w2"]

    @property
    def threshold(self) -> float:
        return CONVERGED_FRACTION * float(np.min(self.data["w2"]))

    def error(self) -> np.ndarray | None:
        """max over the two curves of |fine - coarse| plus both W2 brackets' widths, on the
        common output times."""
        if self.coarse is None:
            return None
        k = min(len(self.times), len(self.coarse["times"]))
        f, c = self.data, self.coarse
        e1 = (np.abs(f["w2"][:k] - c["w2"][:k]) + (f["upper"] - f["lower"])[:k]
              + (c["upper"] - c["lower"])[:k])
        e2 = np.abs(self.late()[:k] - self.late(c)[:k])
        if np.isfinite(f["w2_term"]).all():
            e2 = e2 + (f["upper_term"] - f["lower_term"])[:k] + (c["upper_term"]
                                                                 - c["lower_term"])[:k]
        return np.maximum(e1, e2)

    def converged_until(self) -> float:
        """The last output time up to which the two resolutions agree (-inf: not at t = 0)."""
        err = self.error()
        if err is None:
            return -math.inf
        bad = np.flatnonzero(err >= self.threshold)
        k = len(err) if bad.size == 0 else int(bad[0])
        return float(self.times[k - 1]) if k > 0 else -math.inf

    def confirmed_until(self, other: Curve) -> float:
        """The last output time up to which this curve and another solver's agree within the
        sum of their own errors (:meth:`error`), or within the threshold that self-convergence
        asks (the smaller of the two curves'), on both W2 curves, from t = 0 on (-inf: not at
        t = 0, or an error not measured). The threshold floor matters where both methods have
        converged: two resolutions' difference can pass through 0 (at R1, beta = 256, cells
        n = 64 and 128 differ by 4e-6 at t = 0.5, the tokens by 2e-7, the methods by 1.3e-5)."""
        mine, theirs = self.error(), other.error()
        if mine is None or theirs is None:
            return -math.inf
        k = min(len(mine), len(theirs))
        gap = np.maximum(np.abs(self.data["w2"][:k] - other.data["w2"][:k]),
                         np.abs(self.late()[:k] - other.late()[:k]))
        floor = min(self.threshold, other.threshold)
        bad = np.flatnonzero(gap > np.maximum(mine[:k] + theirs[:k], floor))
        k = k if bad.size == 0 else int(bad[0])
        return float(self.times[k - 1]) if k > 0 else -math.inf

    def confirmation(self, curves: list[Curve]) -> float | None:
        """:meth:`confirmed_until` by the other solver's curve of the same (scenario, beta)
        among ``curves``; None where there is none."""
        other = next(iter(others(self, curves)), None)
        return None if other is None else self.confirmed_until(other)


def time_scales(times, w2, late, angle, settled_end=True) -> dict:
    """t* (the minimum of W2 to Pi#rho_0, refined by a parabola), t_dep (W2 to Pi#rho_0 first
    back above (1 + DEP_FRACTION) min after t*), t_term (after t*, W2 to the terminal measure
    has covered 1 - TERM_FRACTION of its fall from its value at t* to its settled end value;
    only when the curve settled, ``settled_end``), t_term(TERM_LEVEL) (that W2 first below
    TERM_LEVEL) and t_orbit (after t*, the orbit turned past ORBIT_ANGLE), linearly
    interpolated; NaN
    where not reached in the window."""
    i = int(np.argmin(w2))
    ts, wm = float(times[i]), float(w2[i])
    if 0 < i < len(w2) - 1:
        a, b, c = np.polyfit(times[i - 1:i + 2], w2[i - 1:i + 2], 2)
        if a > 0:
            ts, wm = -b / (2 * a), float(np.polyval([a, b, c], -b / (2 * a)))

    def first_crossing(y, level, above):
        hit = np.flatnonzero((y >= level) if above else (y <= level))
        if hit.size == 0 or not np.isfinite(level):
            return math.nan
        k = int(hit[0])
        if k == 0:
            return float(times[0])
        return float(np.interp(level, *(((y[k - 1], y[k]), (times[k - 1], times[k]))
                                        if above else ((y[k], y[k - 1]),
                                                       (times[k], times[k - 1])))))
    after = times > ts
    tdep = first_crossing(np.where(after, w2, -np.inf), (1 + DEP_FRACTION) * wm, True)
    term = term_abs = math.nan
    if np.isfinite(late).all():
        term_abs = first_crossing(late, TERM_LEVEL, False)
        if settled_end:
            start = float(np.interp(ts, times, late))
            level = late[-1] + TERM_FRACTION * (start - late[-1])
            term = first_crossing(np.where(after, late, np.inf), level, False)
    orbit = math.nan if not np.isfinite(angle).all() else first_crossing(
        np.where(after, angle, -np.inf), ORBIT_ANGLE, True)
    return {"t*": float(ts), "min W2": wm, "t_dep": tdep, "t_term": term,
            f"t_term({TERM_LEVEL:g})": term_abs, "t_orbit": orbit,
            "W2 to terminal at end": float(late[-1]) if np.isfinite(late).all() else math.nan}


def unfinished(store, scenario, beta, n, times, solver="finite_volume",
               variant=None) -> dict | None:
    """A piece's checkpoint as a piece cut at the output it reached (``partial`` set), or
    None: an unfinished piece still compares with a finished one up to there."""
    path = piece_path(store, scenario, beta, n, times, solver, variant)[0]
    partial = path.with_name(path.name[:-len(".npz")] + ".partial.npz")
    if not partial.exists():
        return None
    saved = io.load_npz(partial)
    rows = np.array(saved["rows"])
    d = {c: rows[:, j] for j, c in enumerate(COLUMNS)}
    d.update(times=np.asarray(saved["times"])[:len(rows)], n=np.array(n),
             seconds=saved["seconds"], cpu_seconds=saved["cpu_seconds"], partial=True)
    return d


def saved_piece(store, scenario, beta, n, times, solver="finite_volume",
                variant=None) -> dict | None:
    """A piece as far as it got: finished, else its checkpoint (:func:`unfinished`), else None
    (nothing is computed)."""
    return (piece(store, scenario, beta, n, times, False, solver, variant)
            or unfinished(store, scenario, beta, n, times, solver, variant))


def collect(plan: Plan, store, missing: list) -> list[Curve]:
    """The (scenario, beta) curves of the plan's saved pieces, finished ones first and then
    the checkpoints of unfinished ones; the pieces with neither go to ``missing``."""
    curves = []
    for scenario in plan.scenarios:
        for beta in plan.betas:
            for solver in RUNNERS:
                res = plan.resolutions(scenario, solver)
                times = plan.times(scenario, beta)
                data = {n: saved_piece(store, scenario, beta, n, times, solver) for n in res}
                missing += [f"{scenario} {solver} β={beta_label(beta)} n={n}" + (
                    "" if d is None else f" (unfinished: to t = {float(d['times'][-1]):g})")
                    for n, d in data.items() if d is None or "partial" in d]
                have = [n for n in res if data[n] is not None]
                if not have:
                    continue
                curves.append(Curve(scenario, beta, have[-1], data[have[-1]],
                                    data[have[-2]] if len(have) > 1 else None,
                                    have[-2] if len(have) > 1 else None, solver))
    return curves


def scales_of(d) -> dict:
    """:func:`time_scales` of a saved piece."""
    rows = np.column_stack([d[c] for c in COLUMNS])
    return time_scales(d["times"], d["w2"], d["w2_term"], d["orbit_angle"],
                       "partial" not in d and settled(d["times"], rows))


def scales_rows(curves: list[Curve]):
    """Rows of the time-scale table: each scale at the fine and the coarse resolution, whether
    the pair agrees up to past it (self-converged) and whether the other solver's curve agrees
    with this one within their summed errors up to past it (confirmed); and the points
    (scenario, scale, beta, value, solver, |fine - coarse|) that are either, for the fits."""
    rows, points, every = [], [], []
    for c in curves:
        fine = scales_of(c.data)
        coarse = None if c.coarse is None else scales_of(c.coarse)
        until = c.converged_until()
        confirmed = c.confirmation(curves)
        confirmed = -math.inf if confirmed is None else confirmed
        for key in ("t*", "t_dep", "t_term", f"t_term({TERM_LEVEL:g})", "t_orbit", "min W2"):
            if key.startswith("t_term") and not np.isfinite(c.data["w2_term"]).all():
                continue
            if key == "t_orbit" and not np.isfinite(c.data["orbit_angle"]).all():
                continue
            v = fine[key]
            err = math.nan if coarse is None else abs(v - coarse[key])
            # strictly inside the agreed window: a minimum at the end of an unfinished piece
            # is no minimum; min W2 stands or falls with its time t*. A time that the two
            # resolutions place more than an output interval apart is ill-conditioned even
            # where their curves agree (the argmin of a plateau flat to within the threshold)
            when = fine["t*"] if key == "min W2" else v
            sharp = coarse is not None and abs(
                (fine["t*"] - coarse["t*"]) if key == "min W2" else err) <= DT
            ok = bool(np.isfinite(when) and when < until and sharp)
            ok_other = bool(np.isfinite(when) and when < confirmed and sharp)
            rows.append((c.scenario, beta_label(c.beta), c.solver, key, v,
                         "n/a" if coarse is None else coarse[key], f"{c.coarse_n or 'n/a'}/{c.n}",
                         until, "yes" if ok else "no", confirmed, "yes" if ok_other else "no"))
            if key == "min W2":
                continue
            if ok or ok_other:
                points.append((c.scenario, key, c.beta, v, c.solver, err))
            if np.isfinite(v) and c.solver == "finite_volume":
                every.append((c.scenario, key, c.beta, v, c.solver, err))
    return rows, points, every


def fit_points(points):
    """One value per (scenario, scale, beta) that is self-converged or confirmed by the other
    solver: the finite volumes', else the tokens' (where both are, the time-scale table
    compares them)."""
    best = {}
    for p in points:
        scenario, key, beta, solver = p[0], p[1], p[2], p[4]
        if (scenario, key, beta) not in best or solver == "finite_volume":
            best[scenario, key, beta] = p
    return list(best.values())


def fits(points):
    """Per (scenario, scale) with values at >= MIN_FIT_BETAS betas: the values with their
    |fine - coarse|, and the lines against log beta and against beta, with R²."""
    out = []
    for key in sorted({(p[0], p[1]) for p in points}):
        mine = sorted((p for p in points if (p[0], p[1]) == key), key=lambda p: p[2])
        b = np.array([p[2] for p in mine])
        t = np.array([p[3] for p in mine])
        values = ", ".join(f"{beta_label(p[2])}: {p[3]:.3g} ± {p[5]:.2g}" for p in mine)
        if len(set(b)) < MIN_FIT_BETAS:
            out.append((*key, len(b), values, "n/a", "n/a", "n/a", "n/a"))
            continue
        row = [*key, len(b), values]
        for x in (np.log(b), b):
            p, r2 = linear_fit(x, t)
            row += [f"{p[0]:.4g} x + {p[1]:.4g}", r2]
        out.append(tuple(row))
    return out


# ---------------------------------------------------------------------------- figures
def _colors(plan):
    return {b: plt.cm.viridis(i / max(1, len(plan.betas) - 1)) for i, b in enumerate(plan.betas)}


def curve_figure(plan, curves, scenario):
    """W2 to Pi#rho_0 (solid) and to the terminal measure (dashed; E1: to the orbit), per beta,
    fine and coarse (thin); and (dim E = 1) the angle turned along the orbit."""
    mine = [c for c in curves if c.scenario == scenario]
    dim1 = SCENARIOS[scenario]["dimE"] == 1
    fig, ax = plt.subplots(1, 2 if dim1 else 1, figsize=(13 if dim1 else 7, 4.6), squeeze=False)
    colors = _colors(plan)
    late_name = "orbit" if scenario == "E1" else "terminal measure"
    for c in mine:
        tokens = c.solver == "particles"  # the finest token curve only, dotted
        for d, n, lw in ((c.data, c.n, 1.5), (None if tokens else c.coarse, c.coarse_n, 0.7)):
            if d is None:
                continue
            what = f"N={n}" if tokens else f"n={n}"
            ax[0, 0].semilogy(d["times"], d["w2"], ":" if tokens else "-", color=colors[c.beta],
                              lw=lw, label=f"β={beta_label(c.beta)} {what}: to Π#ρ0")
            ax[0, 0].semilogy(d["times"], c.late(d), ":" if tokens else "--",
                              color=colors[c.beta], lw=lw, marker="." if tokens else None,
                              ms=3, label=f"β={beta_label(c.beta)} {what}: to {late_name}")
            if dim1:
                ax[0, 1].plot(d["times"], d["orbit_angle"], ":" if tokens else "-",
                              color=colors[c.beta], lw=lw, label=f"β={beta_label(c.beta)} {what}")
    ax[0, 0].axhline(TERM_LEVEL, color="0.6", lw=0.7, ls=":")
    ax[0, 0].set_xlabel("t")
    ax[0, 0].set_ylabel("W2 (chordal)")
    ax[0, 0].set_title(f"{scenario}: W2 to Π#ρ0 (solid), to the {late_name} (dashed); "
                       "tokens dotted")
    ax[0, 0].legend(fontsize=6, ncol=2)
    ax[0, 0].grid(alpha=0.3, which="both")
    if dim1:
        ax[0, 1].axhline(ORBIT_ANGLE, color="0.6", lw=0.7, ls=":")
        ax[0, 1].set_xlabel("t")
        ax[0, 1].set_ylabel("arc from e along the orbit (rad)")
        ax[0, 1].set_title(f"{scenario}: best-matching point of the lone-cluster orbit")
        ax[0, 1].legend(fontsize=6)
        ax[0, 1].grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _snapshot_piece(plan, store, scenario, beta):
    for n in reversed(plan.cells[scenario]):
        if n <= SNAPSHOT_MAX_N:
            d = piece(store, scenario, beta, n, plan.times(scenario, beta), compute=False)
            if d is not None and "snapshots" in d:
                return n, d
    return None, None


def _lat_lon(x):
    return np.arcsin(np.clip(x[:, 2], -1, 1)), np.arctan2(x[:, 1], x[:, 0])


def density_figure(plan, store, curves, scenario):
    """Maps of the finite-volume density (cell averages, log colour, one scale per row) at the
    three phases: approach (the snapshot nearest t*/2), departure (nearest t_dep, else t*),
    terminal (the last snapshot), each titled converged where the mapped resolution is one of
    the curve's two and the time lies in their agreement window. Stars: Pi#rho_0's atoms (E2:
    its circle), crosses: the terminal atoms (E1: the orbit of e, dotted)."""
    mine = [c for c in curves if c.scenario == scenario and c.solver == "finite_volume"]
    if not mine:
        return None
    fig = plt.figure(figsize=(13, 3.0 * len(mine)))
    for r, c in enumerate(mine):
        n, d = _snapshot_piece(plan, store, scenario, c.beta)
        if d is None:
            continue
        model = model_for(scenario, c.beta)
        mesh = sp.FiniteVolumeSolver(model, n).mesh
        glat, glon = np.linspace(-np.pi / 2, np.pi / 2, 91), np.linspace(-np.pi, np.pi, 181)
        LA, LO = np.meshgrid(0.5 * (glat[1:] + glat[:-1]), 0.5 * (glon[1:] + glon[:-1]),
                             indexing="ij")
        xyz = np.stack([np.cos(LA) * np.cos(LO), np.cos(LA) * np.sin(LO), np.sin(LA)], -1)
        cell = locate(mesh, xyz.reshape(-1, 3)).reshape(LA.shape)  # the cell under each pixel
        sc = scales_of(d)
        snap_t = d["times"][d["snapshot_index"]]
        want = [("approach", sc["t*"] / 2),
                ("departure" if np.isfinite(sc["t_dep"]) else "closest", sc["t_dep"]
                 if np.isfinite(sc["t_dep"]) else sc["t*"]), ("late", snap_t[-1])]
        vals = d["snapshots"].astype(float)
        lo, hi = np.log10(max(vals.max() * 1e-4, 1e-8)), np.log10(vals.max())
        diag = Diagnostics(model, diagnostic_start(scenario))
        for k, (label, t) in enumerate(want):
            j = int(np.argmin(np.abs(snap_t - t)))
            ax = fig.add_subplot(len(mine), 3, 3 * r + k + 1, projection="mollweide")
            im = ax.pcolormesh(glon, glat, np.log10(np.maximum(vals[j][cell], 10 ** lo)),
                               vmin=lo, vmax=hi, cmap="magma", shading="flat", rasterized=True)
            la, lo_ = _lat_lon(diag.limit.points if diag.limit.n <= 2
                               else diag.limit.points[::50])
            ax.plot(lo_, la, "*" if diag.limit.n <= 2 else ".", color="cyan", ms=8 if
                    diag.limit.n <= 2 else 1)
            if diag.terminal is not None:
                la, lo_ = _lat_lon(diag.terminal.points)
                ax.plot(lo_, la, "x", color="lime", ms=8, mew=2)
            elif diag.orbit:
                orb = np.array([model.cluster_flow(diag.e, s) for s in
                                np.linspace(0, diag.s_max, 200)])
                for sign in (1, -1):
                    la, lo_ = _lat_lon(sign * orb)
                    ax.plot(lo_, la, ".", color="lime", ms=1)
            # a map shows a converged density only inside its curve's agreement window
            ok = n in (c.n, c.coarse_n) and snap_t[j] <= c.converged_until()
            ax.set_title(f"{scenario} β={beta_label(c.beta)} n={n}: {label}, "
                         f"t={snap_t[j]:g} ({'converged' if ok else 'not converged'})",
                         fontsize=8)
            ax.tick_params(labelsize=5)
        fig.colorbar(im, ax=fig.axes[-3:], shrink=0.8, label="log10 ρ")
    return fig



def _fmt_vec(x) -> str:
    return "(" + ", ".join(f"{v:.4g}" for v in np.asarray(x)) + ")"


def eigen_text(plan) -> list[str]:
    lines = ["Scenarios (B = Q^T K with Q = I, A = V B^T; chordal W2 throughout):", ""]
    rows = []
    for scenario in plan.scenarios:
        d = eigen_data(scenario)
        m = model_for(scenario, math.inf)
        ev = ", ".join(f"{z.real:.4g}" + (f"{z.imag:+.4g}i" if abs(z.imag) > 1e-12 else "")
                       for z in d["V eigenvalues"])
        rows.append((scenario, d["dim E"], _fmt_vec(d["A eigenvalues"]), d["gap"], ev,
                     _fmt_vec(d["v"]) if "v" in d else "complex pair",
                     _fmt_vec(d["u"]) if "u" in d else "n/a",
                     d.get("angle_v_E", "n/a"), "; ".join(_fmt_vec(r) for r in m.B)))
    lines.append(table(rows, ["scenario", "dim E", "A eigenvalues", "gap", "V eigenvalues",
                              "v (right)", "u (left)", "angle(v, E) rad", "B rows"]))
    rows = []
    for scenario in plan.scenarios:
        m = model_for(scenario, 64.0)
        mu0 = diagnostic_start(scenario)
        lim = m.limit_measure(mu0)
        try:
            term = m.terminal_measure(mu0)
            t = "; ".join(f"{w:.4f} at {_fmt_vec(x)}" for x, w in zip(term.points, term.weights,
                                                                       strict=True))
        except sp.model.AssumptionError:
            t = "none (complex dominant pair of V: the atoms turn in its invariant plane)"
        pi = ("; ".join(f"{w:.4f} at {_fmt_vec(x)}" for x, w in zip(lim.points, lim.weights,
                                                                     strict=True))
              if lim.n <= 2 else f"{lim.n} atoms on the great circle of E")
        rows.append((scenario, pi, t))
    lines += ["", table(rows, ["scenario", "Π#ρ0", "terminal measure (Φ_∞)#Π#ρ0"])]
    return lines


def end_masses(c, d, settled_snapshot=False):
    """(cell masses, mesh, output index) of a finite-volume piece's final state, or with
    ``settled_snapshot`` the last snapshot of a settled piece that did not save it; None when
    there is neither (token pieces never have one)."""
    if "final" in d:
        avg, i = d["final"], len(d["times"]) - 1
    elif settled_snapshot and "snapshots" in d and np.isfinite(scales_of(d)["t_term"]):
        avg, i = d["snapshots"][-1], int(d["snapshot_index"][-1])
    else:
        return None
    mesh = sp.FiniteVolumeSolver(model_for(c.scenario, c.beta), int(d["n"])).mesh
    return avg.astype(float) * mesh.areas, mesh, i


def side_masses(plan, curves):
    """Rows (scenario, beta, n, t, m+ of the terminal measure, mass of rho_t on that atom's
    side of u^perp at the piece's end, sqrt(4 |difference|), W2 to the terminal measure then):
    the terminal atoms' masses against the ones reached, from :func:`end_masses`."""
    rows = []
    for c in curves:
        model = model_for(c.scenario, c.beta)
        try:
            term = model.terminal_measure(initial())
        except sp.model.AssumptionError:
            continue
        u = eigen_data(c.scenario)["u"]
        for d in (c.coarse, c.data):
            end = None if d is None else end_masses(c, d, settled_snapshot=True)
            if end is None:
                continue
            mass, mesh, i = end
            k = int(np.argmax(term.points @ u))  # the atom on u's side
            reached = float(mass[mesh.centers @ u > 0].sum() / mass.sum())
            rows.append((c.scenario, beta_label(c.beta), int(d["n"]), float(d["times"][i]),
                         float(term.weights[k]), reached,
                         math.sqrt(4 * abs(reached - term.weights[k])),
                         float(d["w2_term"][i])))
    return rows


#: The final clusters: mass gathered within this angle (rad) of the heaviest cell left, in
#: turn, while more than CLUSTER_MIN_MASS is left (at most CLUSTER_MAX of them).
CLUSTER_RADIUS, CLUSTER_MIN_MASS, CLUSTER_MAX = 0.3, 0.02, 6


def final_clusters(mass, centers, v, u) -> list[tuple]:
    """(mass, angle in degrees from the nearer of +-v, side of u^perp) of the clusters of a
    cell-mass field, heaviest first: the heaviest cell left and the mass within CLUSTER_RADIUS
    of it, removed in turn."""
    left = np.asarray(mass, dtype=float) / np.sum(mass)
    out = []
    while left.sum() > CLUSTER_MIN_MASS and len(out) < CLUSTER_MAX:
        near = centers @ centers[int(np.argmax(left))] > math.cos(CLUSTER_RADIUS)
        c = left[near] @ centers[near]
        c = c / np.linalg.norm(c)
        out.append((float(left[near].sum()),
                    math.degrees(math.acos(min(1.0, abs(float(c @ v))))), int(np.sign(c @ u))))
        left[near] = 0.0
    return out


def cluster_rows(curves):
    """Per finite-volume piece that saved its final state and has a real dominant eigenvector:
    its clusters at the end (see :func:`final_clusters`)."""
    rows = []
    for c in curves:
        if c.solver != "finite_volume":
            continue
        data = eigen_data(c.scenario)
        if "v" not in data:
            continue
        for d in (c.coarse, c.data):
            end = None if d is None else end_masses(c, d)
            if end is None:
                continue
            found = final_clusters(end[0], end[1].centers, data["v"], data["u"])
            rows.append((c.scenario, beta_label(c.beta), int(d["n"]), float(d["times"][-1]),
                         "; ".join(f"{m:.3f} at {a:.1f}° ({'+' if s > 0 else '-'})"
                                   for m, a, s in found)))
    return rows


def returns(times, w2, rise=1e-3):
    """The times and values at which W2 to Pi#rho_0 comes back to a minimum below the midpoint
    of its range: the argmin of each run of outputs below the midpoint, kept where the curve
    rises again (by ``rise`` of its range) before the run ends. These are the returns of a
    turning cluster pair to the atoms it left (the first is t*; the swapped pair, half a turn
    on, stays above the midpoint); a curve that only settles has none after t*."""
    w2 = np.asarray(w2, dtype=float)
    lo, hi = np.nanmin(w2), np.nanmax(w2)
    below = np.concatenate([[False], w2 < 0.5 * (lo + hi), [False]])
    starts = np.flatnonzero(~below[:-1] & below[1:])
    ends = np.flatnonzero(below[:-1] & ~below[1:])  # one past each run's last output
    keep = []
    for a, b in zip(starts, ends, strict=True):
        i = a + int(np.argmin(w2[a:b]))
        if w2[b - 1] - w2[i] > rise * (hi - lo):
            keep.append(i)
    return np.asarray(times)[keep], w2[keep]


def recurrence_rows(curves):
    """Where V's dominant pair is complex, a lone cluster turns in its invariant plane with
    period 2 pi / |Im lambda| (the direction of e^{sV} x0 in that plane). Rows per curve and
    resolution: the returns of W2 to Pi#rho_0, the intervals between them, and that period."""
    rows = []
    spectra = {sc: eigen_data(sc)["V eigenvalues"][0] for sc in {c.scenario for c in curves}}
    for c in curves:
        lam = spectra[c.scenario]
        if abs(lam.imag) < 1e-12:
            continue
        period = 2 * math.pi / abs(lam.imag)
        for n, d in ((c.coarse_n, c.coarse), (c.n, c.data)):
            if d is None:
                continue
            t, w = returns(d["times"], d["w2"])
            gaps = np.diff(t)
            rows.append((c.scenario, beta_label(c.beta), c.solver, n,
                         ", ".join(f"{a:g} ({b:.3f})" for a, b in zip(t, w, strict=True)),
                         ", ".join(f"{g:g}" for g in gaps) or "n/a", period,
                         "n/a" if gaps.size == 0 else float(np.mean(gaps) / period)))
    return rows


def _section(intro: str, rows, header) -> list[str]:
    """Report lines: a paragraph and its table (nothing without rows)."""
    return ["", intro, "", table(rows, header)] if rows else []


def mass_section(plan, curves) -> list[str]:
    """The terminal atoms' masses against the ones reached, and per scenario the misplaced
    mass's power of beta (finest resolution each)."""
    masses = side_masses(plan, curves)
    text = _section("The terminal atoms' masses: the conjectured m+ (Π#ρ0's mass carried to the "
                    "atom on u's side of u^⊥) against ρ_t's mass on that side at the piece's end. "
                    "A mass δm on the wrong side alone puts W2 to the terminal measure at about "
                    "sqrt(4 δm) (chordal distance 2 between ±v).", masses,
                    ["scenario", "beta", "n", "t", "conjectured m+", "reached m+", "sqrt(4 δm)",
                     "W2 to terminal"])
    for scenario in plan.scenarios:
        reached = {}  # beta -> (conjectured, reached) per resolution, coarse to fine
        for r in masses:
            if r[0] == scenario and math.isfinite(float(r[1])):
                reached.setdefault(float(r[1]), []).append((r[4], r[5]))
        finest = {b: abs(v[-1][1] - v[-1][0]) for b, v in reached.items()}
        if len(finest) >= MIN_FIT_BETAS and min(finest.values()) > 0:
            b = np.array(sorted(finest))
            p = np.polyfit(np.log(b), np.log([finest[x] for x in b]), 1)
            # a fit is only as good as the reached masses: how far the two finest apart are
            spread = max((abs(v[-1][1] - v[-2][1]) for v in reached.values() if len(v) > 1),
                         default=math.nan)
            text += ["", f"{scenario}: the misplaced mass δm ∝ β^{p[0]:.2f} over β = "
                     f"{', '.join(f'{x:g}' for x in b)} (finest resolution each; the two finest "
                     f"resolutions' reached m+ differ by up to {spread:.2g})."]
    return text


def variant_rows(plan, store):
    """Per planned variant: its minimum of W2 to Π#ρ0, t* and t_dep beside the default piece's
    at the same n, and how far its W2 to Π#ρ0 strays from the default's (before the default's
    t_dep, and over the whole window)."""
    rows = []
    for (scenario, beta), by_n in plan.variants.items():
        times = plan.times(scenario, beta)
        for n, names in by_n.items():
            base = piece(store, scenario, beta, n, times, compute=False)
            if base is None:
                continue
            b = scales_of(base)
            rows.append((scenario, beta_label(beta), n, "default", b["min W2"], b["t*"],
                         b["t_dep"], 0.0, 0.0, 0.0, f"{float(base['seconds']):.0f}"))
            for v in names:
                d = saved_piece(store, scenario, beta, n, times, variant=v)
                if d is None:
                    rows.append((scenario, beta_label(beta), n, v, *["not computed"] * 7))
                    continue
                sc, m = scales_of(d), len(d["w2"])
                gap = np.abs(d["w2"] - base["w2"][:m])
                before = gap[d["times"] <= b["t_dep"]] if math.isfinite(b["t_dep"]) else gap
                cut = f" (to t = {float(d['times'][-1]):g})" if "partial" in d else ""
                rows.append((scenario, beta_label(beta), n, v + cut, sc["min W2"], sc["t*"],
                             sc["t_dep"], sc["t_dep"] - b["t_dep"],
                             float(before.max()) if before.size else math.nan,
                             float(gap.max()), f"{float(d['seconds']):.0f}"))
    return rows


def variant_section(plan, store) -> list[str]:
    return _section("One option of the finite volumes changed at a fixed n (VARIANTS: "
                    "macro_tol, the multirate step's tolerance, 1e-3 by default at every n; "
                    "velocity_tol, the harmonic field's, 1e-5 at every n up to 64 (the direct "
                    "path, n ≤ 24, has none); the reconstruction, cubic by default): a time that "
                    "moves with one of them at fixed n rests on that choice, whatever refining n "
                    "shows. |ΔW2|: the largest difference from the default piece's W2 to Π#ρ0, "
                    "up to the default's t_dep and over the whole window.",
                    variant_rows(plan, store),
                    ["scenario", "beta", "n", "variant", "min W2", "t*", "t_dep",
                     "t_dep − default's", "max |ΔW2| to t_dep", "max |ΔW2|", "cost (s)"])


def recurrence_section(curves) -> list[str]:
    return _section("Returns of a turning pair (complex dominant pair of V): the times (W2) at "
                    "which W2 to Π#ρ0 comes back to a local minimum below the midpoint of its "
                    "range, the intervals between them, and the lone-cluster period 2π/|Im λ| "
                    "(half a period on, the swapped pair gives the maxima in between).",
                    recurrence_rows(curves),
                    ["scenario", "beta", "solver", "n", "returns: t (W2)", "intervals",
                     "period 2π/|Im λ|", "mean interval / period"])


def report_all(plan, store, mode, name, wall, out=None):
    """The report of the plan's saved pieces: tables of the scenarios, runs, time scales, fits
    and terminal masses, and the figures (under ``out``, default validation/output)."""
    missing = []
    curves = collect(plan, store, missing)
    rows, points, every = scales_rows(curves)
    fit_rows = fits(fit_points(points))
    text = [f"Mode `{mode}`; this invocation {wall:.0f} s (saved pieces count with the time "
            "they took). Finite volumes, multirate stepping (the solver's defaults), output every "
            f"{DT:g}; a piece stops early once settled (W2 moved < {SETTLE_TOL:g} over "
            f"{SETTLE_WINDOW:g} time units after the late phase began). Window: t = "
            f"{plan.t_end:g}" + "".join(f"; {sc} at β = {beta_label(b)}: t = {t:g}"
                                        for (sc, b), t in plan.windows.items()) + ".", ""]
    if missing:
        text += [f"**Partial:** {len(missing)} pieces of the `{mode}` plan are not computed or "
                 "unfinished; the curves use the two finest saved resolutions (an unfinished "
                 "one up to where it stopped): " + "; ".join(missing) + ".", ""]
    text += eigen_text(plan)
    text += ["", "Runs (wall / CPU seconds per resolution; 'agree until': the last output time "
             "up to which the two finest resolutions agree within the threshold, "
             f"{CONVERGED_FRACTION:.0%} of the fine curve's min W2 to Π#ρ0, on both W2 curves, "
             "brackets included; 'confirmed by the other solver until': the last output time "
             "up to which the finite volumes and the tokens (on ρ0's product Gauss rule) agree "
             "within the sum of their own errors, on both W2 curves, from t = 0 on):", ""]
    run_rows = []
    for c in curves:
        secs = ", ".join(f"n={d['n'] if 'n' in d else '?'}: {float(d['seconds']):.0f}/"
                         f"{float(d['cpu_seconds']):.0f} s to t={float(d['times'][-1]):g}"
                         for d in (c.coarse, c.data) if d is not None)
        err = c.error()
        confirmed = c.confirmation(curves)
        run_rows.append((c.scenario, beta_label(c.beta), c.solver,
                         f"{c.coarse_n or 'n/a'}/{c.n}", c.threshold,
                         "n/a" if err is None else float(np.max(err)), c.converged_until(),
                         "n/a" if confirmed is None else confirmed,
                         float(c.data["w2"][-1]), float(c.late()[-1]), secs))
    text.append(table(run_rows, ["scenario", "beta", "solver", "n (cells/face or tokens)",
                                 "threshold", "max error", "agree until",
                                 "confirmed by the other solver until", "W2 to Π#ρ0 at end",
                                 "W2 to terminal (E1: orbit) at end", "cost"]))
    text += ["", f"Time scales (fine resolution; 'self-converged': the two resolutions agree "
             "up to past it; 'confirmed': the other solver agrees within the summed errors up "
             f"to past it; either needs the two resolutions' values within one output interval, "
             f"{DT:g}, and min W2 counts at t*). t* = argmin W2(ρ_t, Π#ρ0); t_dep: W2 to Π#ρ0 "
             "back above "
             f"{1 + DEP_FRACTION:g}× its minimum; t_term: W2 to the terminal measure has covered "
             f"{1 - TERM_FRACTION:.0%} of its fall from t* to its settled value (only for a "
             f"settled piece); t_term({TERM_LEVEL:g}): it falls below {TERM_LEVEL:g}; "
             f"t_orbit: the best-matching orbit point {ORBIT_ANGLE:g} rad along the "
             "lone-cluster orbit from e. NaN: not reached in the window.", "",
             table(rows, ["scenario", "beta", "solver", "scale", "fine", "coarse", "n",
                          "agree until", "self-converged", "confirmed by the other solver until",
                          "confirmed"]), "",
             f"Fits (at least {MIN_FIT_BETAS} distinct β) over the values that are "
             "self-converged or confirmed by the other solver: the finite volumes' value where "
             "it is, else the tokens'; ± is |fine - coarse|:", "",
             table(fit_rows, ["scenario", "scale", "points", "values", "against log β", "R²",
                              "against β", "R²"]), "",
             "**Orientation only:** the same fits over the finite volumes' finest values, "
             "whether or not they are converged or confirmed (these are not results):", "",
             table(fits(every), ["scenario", "scale", "points", "values", "against log β",
                                 "R²", "against β", "R²"])]
    text += mass_section(plan, curves) + recurrence_section(curves)
    text += variant_section(plan, store)
    text += _section("The clusters at a finite-volume piece's end: mass within "
                     f"{CLUSTER_RADIUS:g} rad of the heaviest cell left, in turn; the angle "
                     "from the nearer terminal atom ±v, and the side of u^⊥ (+: the side of "
                     "u, whose atom carries the conjectured m+).", cluster_rows(curves),
                     ["scenario", "beta", "n", "t", "clusters: mass at angle from ±v (side)"])
    write_outputs(plan, store, curves, name, text, OUT if out is None else Path(out))
    return curves


def write_outputs(plan, store, curves, name, text, folder):
    """The figures (one per scenario, and its density maps) and the markdown report, written
    atomically under ``folder``."""
    figs = {f"{name}_{sc}": curve_figure(plan, curves, sc) for sc in plan.scenarios
            if any(c.scenario == sc for c in curves)}
    for sc in plan.scenarios:
        f = density_figure(plan, store, curves, sc)
        if f is not None:
            figs[f"{name}_{sc}_maps"] = f
    body = "\n".join(text) + "\n\n" + "\n\n".join(f"![{k}]({k}.png)" for k in figs)
    for k, f in figs.items():
        with io.atomic_path(folder / f"{k}.png", ".png") as tmp:
            f.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
        plt.close(f)
    io.write_text(folder / f"{name}.md", "# The late phase: from Π#ρ0 to the terminal measure "
                  f"(docs/theory.md §3.4)\n\n{body}\n")
    print(body)


def pieces_of(plan: Plan):
    """(scenario, beta, n, solver) of every piece, all scenarios' coarsest first, then finer;
    the finite volumes' pieces of a depth before the tokens'."""
    depth = max(len(r) for r in [*plan.cells.values(), *plan.tokens.values()])
    for k in range(depth):
        for solver in RUNNERS:
            for scenario in plan.scenarios:
                res = plan.resolutions(scenario, solver)
                for beta in plan.betas:
                    if k < len(res):
                        yield scenario, beta, res[k], solver


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small resolutions (minutes, 2 cores)")
    ap.add_argument("--report-only", action="store_true",
                    help="compute nothing: report from the pieces saved so far")
    ap.add_argument("--piece", nargs=3, metavar=("SCENARIO", "BETA", "N"),
                    help="compute one piece of the plan and stop")
    ap.add_argument("--solver", choices=list(RUNNERS), default="finite_volume",
                    help="the solver of --piece (N: cells per cube face, or tokens)")
    ap.add_argument("--variant", choices=list(VARIANTS), default=None,
                    help="a finite-volume --piece with this one option changed from the "
                         "solver's default")
    ap.add_argument("--store", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--t-end", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    plan, mode = (QUICK, "quick") if args.quick else (FULL, "full")
    if args.t_end is not None:  # the fast test's tiny window
        plan = Plan(plan.betas[:1], args.t_end, {s: r[:2] for s, r in plan.cells.items()},
                    plan.scenarios, {s: r[:2] for s, r in plan.tokens.items()},
                    {k: args.t_end for k in plan.windows})
    name = "late_phase" if mode == "full" else f"late_phase_{mode}"
    store = args.store or OUT / f"{name}_runs"
    store.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if args.piece:
        scenario, beta, n = args.piece[0], float(args.piece[1]), int(args.piece[2])
        piece(store, scenario, beta, n, plan.times(scenario, beta), solver=args.solver,
              variant=args.variant)
        return
    if not args.report_only:
        for scenario, beta, n, solver in pieces_of(plan):
            piece(store, scenario, beta, n, plan.times(scenario, beta), solver=solver)
        for (scenario, beta), by_n in plan.variants.items():
            for n, names in by_n.items():
                for v in names:
                    piece(store, scenario, beta, n, plan.times(scenario, beta), variant=v)
    report_all(plan, store, mode, name, time.perf_counter() - t0, out=args.store)


if __name__ == "__main__":
    main()
