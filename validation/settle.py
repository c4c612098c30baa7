"""Targeted tests of the low-temperature curves before their plateau (dim E = 1 scenario).

Three questions, each answered by runs whose one changed setting is named in the run's key:

A. Which solver is right at beta = 256 (and 1000) for t <= 10? The finite volumes with the
   velocity tolerance and the multirate step refined at fixed n (a floor that refinement in n
   cannot show would move the curve); the particles from quadrature starts with the exact
   direct kernel against the harmonic kernel, and with a tighter step tolerance.
B. Particles from quadrature starts at beta = 16, 64, 256 and three token counts (factor 4):
   their measured order in N, and the window over which they agree with the finite volumes
   within both solvers' errors.
C. The tail mechanism of the departure: rho_0 multiplied by a smooth bump of height f at the
   attention target of the dominant atom (renormalised); does the departure time move by
   log(f) / rate?

Every run is saved atomically under ``validation/output/settle_runs/`` and reused by a rerun;
the report ``validation/output/settle.md`` is written from the saved runs.

Run (one part at a time; each run is a few minutes on one core):
    .venv/bin/python validation/settle.py A     # or B, C
    .venv/bin/python validation/settle.py report
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time

import numpy as np
from _common import OUT
from low_temperature import (_density_row, _merge_atoms, _w2_bracket, initial, model_for,
                             piece)

import spherepde as sp
from spherepde import io

STORE = OUT / "settle_runs"
LT_STORE = OUT / "low_temperature_runs"
#: The low-temperature study's output times (its pieces are compared on them).
LT_TIMES = np.linspace(0.0, 14.0, 57)
#: Output spacing of these runs: the study's, so curves compare sample by sample.
STEP = 0.25
#: Departure: the first time after the minimum where W2 exceeds the minimum by this fraction.
DEPARTURE_FRACTION = 0.05
#: The tail bump: exp(-(1 - <x, c>) / BUMP_WIDTH^2), about 0.3 rad wide.
BUMP_WIDTH = 0.3


def times_until(t_end: float) -> np.ndarray:
    return np.linspace(0.0, t_end, int(round(t_end / STEP)) + 1)


def _key(spec: dict) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]


def stored(name: str, spec: dict, compute):
    """The run ``name`` of description ``spec``: loaded when saved, else computed by
    ``compute()`` (a dict of arrays) and saved atomically with its wall and CPU seconds."""
    path = STORE / f"{name}_{_key(spec)}.npz"
    if path.exists():
        return io.load_npz(path)
    print(f"  running {name} ...", flush=True)
    t0, c0 = time.perf_counter(), time.process_time()
    data = compute()
    data["seconds"] = np.array(time.perf_counter() - t0)
    data["cpu_seconds"] = np.array(time.process_time() - c0)
    io.save_npz(path, meta=spec, **data)
    print(f"    done in {float(data['seconds']):.0f} s", flush=True)
    return io.load_npz(path)


# ------------------------------------------------------------------------------ runners
def tail_bump(model, f: float, width: float = BUMP_WIDTH):
    """rho_0 times 1 + (f - 1) b(x), b = exp(-(1 - <x, c>) / width^2), as a callable density
    f(x), x: (..., 3), not normalised (the solver normalises its initial mass); c is the
    attention target B^T e / |B^T e| of the atom at +e."""
    e = model.dominant_subspace()[:, 0]
    rho0 = initial()
    e = e if rho0.hemisphere_mass(e) >= 0.5 else -e
    c = model.B.T @ e
    c = c / np.linalg.norm(c)

    def density(x):
        x = np.asarray(x, dtype=float)
        bump = np.exp(-(1.0 - x @ c) / width ** 2)
        return rho0.density(x) * (1.0 + (f - 1.0) * bump)
    return density, c


def fv_run(beta, n, t_end, velocity_tol=None, macro_tol=None, stepping="multirate", f=1.0):
    """The finite-volume W2 curve against Pi#rho_0 with the named settings changed; with
    f != 1 the start is :func:`tail_bump`'s and the limit its own. Also the mass within the
    bump's width of the attention target (``tail``) at every output."""
    model = model_for("E1", beta)
    kw = {"velocity_tol": velocity_tol, "stepping": stepping}
    if macro_tol is not None:
        kw["macro_tol"] = macro_tol
    solver = sp.FiniteVolumeSolver(model, n, **kw)
    density, c = tail_bump(model, f)
    start = initial() if f == 1.0 else density
    sol = solver.solve(start, times_until(t_end))
    row = _density_row(model, initial() if f == 1.0 else sol.measure(0))
    rows = np.array([row(sol.measure(i)) for i in range(len(sol.times))])
    tail = np.array([_cap_mass(sol.measure(i), c) for i in range(len(sol.times))])
    return {"times": np.asarray(sol.times), "w2": rows[:, 0], "lower": rows[:, 1],
            "upper": rows[:, 2], "tail": tail, "velocity_tol": np.array(solver.velocity_tol)}


def _cap_mass(measure, c, width=BUMP_WIDTH):
    """Mass within angle ``width`` of c."""
    return float(measure.weights[measure.points @ c >= math.cos(width)].sum())


def particle_run(beta, n, t_end, kernel="auto", rtol=1e-5, velocity_tol=None):
    """The W2 curve of about n tokens at the nodes of rho_0's product Gauss rule, weighted,
    against their own limit."""
    model = model_for("E1", beta)
    cloud = initial().quadrature(n)
    limit = _merge_atoms(model.limit_measure(cloud))
    rows = []

    def on_output(i, t, x):
        rows.append(_w2_bracket(sp.PointCloud(x, cloud.weights), limit))

    kw = {} if velocity_tol is None else {"velocity_tol": velocity_tol}
    solver = sp.ParticleSolver(model, kernel=kernel, rtol=rtol, atol=rtol / 100, **kw)
    times = times_until(t_end)
    traj = solver.solve(cloud.points, times, cloud.weights, callback=on_output,
                        every=len(times), tokens=slice(0, 1))
    arr = np.array(rows)
    return {"times": times, "w2": arr[:, 0], "lower": arr[:, 1], "upper": arr[:, 2],
            "tokens": np.array(len(cloud.weights)), "kernel": repr(solver),
            "rhs_evaluations": np.array(int(traj.stats.get("fevals", -1)))}


def fv(beta, n, t_end, **settings):
    spec = {"solver": "fv", "beta": beta, "n": n, "t_end": t_end, **settings}
    tag = "_".join(f"{k}={v}" for k, v in sorted(settings.items()) if v is not None)
    return stored(f"fv_beta={beta:g}_n={n}_t={t_end:g}{'_' + tag if tag else ''}", spec,
                  lambda: fv_run(beta, n, t_end, **settings))


def particles(beta, n, t_end, **settings):
    spec = {"solver": "particles", "beta": beta, "n": n, "t_end": t_end, "init": "quadrature",
            **settings}
    tag = "_".join(f"{k}={v}" for k, v in sorted(settings.items()) if v is not None)
    return stored(f"particles_beta={beta:g}_n={n}_t={t_end:g}{'_' + tag if tag else ''}",
                  spec, lambda: particle_run(beta, n, t_end, **settings))


def study_fv(beta, n):
    """The low-temperature study's committed finite-volume piece (or None)."""
    return piece(LT_STORE, "E1", "finite_volume", float(beta), n, LT_TIMES, compute=False)


def at(run, t):
    return float(np.interp(t, run["times"], run["w2"]))


# ------------------------------------------------------------------------------ analysis
def departure_time(times, w2, fraction=DEPARTURE_FRACTION) -> float:
    """The first time after the curve's minimum where it exceeds the minimum by ``fraction``
    of it (linear interpolation between outputs); nan when it does not within the window."""
    times, w2 = np.asarray(times, float), np.asarray(w2, float)
    i = int(np.argmin(w2))
    level = w2[i] * (1.0 + fraction)
    above = np.flatnonzero(w2[i:] > level)
    if above.size == 0:
        return math.nan
    k = i + int(above[0])
    return float(np.interp(level, w2[k - 1:k + 1], times[k - 1:k + 1]))


def agreement_end(times, gap, error) -> float:
    """The last output time of the initial stretch where |gap| <= error: how long two curves
    agree within their summed errors (times[-1] when they agree throughout)."""
    bad = np.flatnonzero(np.abs(np.asarray(gap)) > np.asarray(error))
    return float(times[-1] if bad.size == 0 else times[max(int(bad[0]) - 1, 0)])


def decay_rate(times, mass, t0, t1) -> float:
    """The exponential decay rate r of mass ~ e^{-r t} over [t0, t1] (least squares in log)."""
    sel = (times >= t0) & (times <= t1) & (np.asarray(mass) > 0)
    return float(-np.polyfit(times[sel], np.log(np.asarray(mass)[sel]), 1)[0])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["A", "B", "C", "report"])
    ap.add_argument("--only", default=None, help="comma-separated run labels of the part")
    args = ap.parse_args(argv)
    STORE.mkdir(parents=True, exist_ok=True)
    plans = {"A": PART_A, "B": PART_B, "C": PART_C}
    if args.part in plans:
        only = None if args.only is None else set(args.only.split(","))
        for label, job in plans[args.part].items():
            if only is None or label in only:
                job()
    else:
        from settle_report import write_report
        write_report()


PART_A = {
    "fv32": lambda: fv(256.0, 32, 10.0),
    "fv32_vtol": lambda: fv(256.0, 32, 10.0, velocity_tol=1e-7),
    "fv32_macro": lambda: fv(256.0, 32, 10.0, macro_tol=1e-4),
    "p4k_auto": lambda: particles(256.0, 4608, 10.0),
    "p4k_numba": lambda: particles(256.0, 4608, 10.0, kernel="numba"),
    "p4k_rtol": lambda: particles(256.0, 4608, 10.0, kernel="numba", rtol=1e-6),
    "p18k_numba": lambda: particles(256.0, 18432, 10.0, kernel="numba"),
}
PART_B = {f"p{n}_b{b:g}": (lambda b=b, n=n: particles(b, n, 14.0))
          for b in (16.0, 64.0, 256.0) for n in (1152, 4608, 18432)}
PART_C = {f"c_f{f:g}": (lambda f=f: fv(16.0, 32, 14.0, f=f)) for f in (0.1, 1.0, 10.0, 100.0)}

if __name__ == "__main__":
    sys.exit(main())
