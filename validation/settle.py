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
import math
import sys

import numpy as np
from _common import OUT, stored_run, table
from low_temperature import (
    CONVERGED_FRACTION,
    _density_row,
    _merge_atoms,
    _w2_bracket,
    initial,
    model_for,
    piece,
)

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


def stored(name: str, spec: dict, compute):
    """The run ``name`` of description ``spec`` under STORE (see ``_common.stored_run``)."""
    return stored_run(STORE, name, spec, compute)


# ------------------------------------------------------------------------------ runners
def tail_bump(model, f: float, width: float = BUMP_WIDTH):
    """rho_0 times 1 + (f - 1) b(x), b = exp(-(1 - <x, c>) / width^2), renormalised, as a
    callable density f(x), x: (..., 3), against surface area; c is the attention target
    B^T e / |B^T e| of the atom e that carries the larger mass of Pi#rho_0."""
    e = model.dominant_subspace()[:, 0]
    rho0 = initial()
    e = e if rho0.hemisphere_mass(e) >= 0.5 else -e
    c = model.B.T @ e
    c = c / np.linalg.norm(c)

    def unnormalised(x):
        x = np.asarray(x, dtype=float)
        bump = np.exp(-(1.0 - x @ c) / width ** 2)
        return rho0.density(x) * (1.0 + (f - 1.0) * bump)

    # the mass by a product Gauss rule about c (80000 nodes: the bump, 0.3 rad wide, and the
    # cap of kappa = 1.5 are resolved to round-off, far below the solvers' mass tolerance)
    rule = sp.measures.Uniform(3).quadrature(80000, axis=c)
    mass = 4.0 * math.pi * float(rule.weights @ unnormalised(rule.points))

    def density(x):
        return unnormalised(x) / mass
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


def split_rule(measure, e, n: int) -> sp.PointCloud:
    """About n weighted nodes of a product rule about the unit vector e (d = 3) whose rings
    never straddle the great circle <x, e> = 0: Gauss–Legendre in w = <x, e> on [-1, 0] and on
    [0, 1] separately (k nodes each), n_phi = 4k equispaced angles, k = round(sqrt(n / 8)).
    Node weights are the density times the product weights, normalised. The mass of each
    hemisphere {+-<x, e> > 0} is then a Gauss rule of a smooth function, exact to the rule's
    spectral accuracy, where a rule about another axis cuts the boundary through its rings
    (an O(1/n_theta) error in the limit's masses)."""
    k = max(1, round(math.sqrt(n / 8)))
    g, gw = np.polynomial.legendre.leggauss(k)
    w = np.concatenate([(g - 1) / 2, (g + 1) / 2])  # [-1, 0] then [0, 1]
    ww = np.concatenate([gw, gw]) / 2
    phi = 2 * np.pi * np.arange(4 * k) / (4 * k)
    e = np.asarray(e, float) / np.linalg.norm(e)
    u1 = np.linalg.svd(e[None, :])[2][1]
    u2 = np.cross(e, u1)
    r = np.sqrt(1 - w ** 2)[:, None, None]
    x = (w[:, None, None] * e + r * (np.cos(phi)[None, :, None] * u1
                                     + np.sin(phi)[None, :, None] * u2)).reshape(-1, 3)
    weights = (ww[:, None] * np.ones(phi.size)).ravel() * measure.density(x)
    return sp.PointCloud(x, weights / weights.sum())


def particle_run(beta, n, t_end, kernel="auto", rtol=1e-5, velocity_tol=None, init=None):
    """The W2 curve of about n tokens at the nodes of rho_0's product Gauss rule (about its
    mean; ``init="split"``: :func:`split_rule` about the dominant eigenvector e), weighted,
    against their own limit."""
    model = model_for("E1", beta)
    cloud = (initial().quadrature(n) if init is None
             else split_rule(initial(), model.dominant_subspace()[:, 0], n))
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


# ------------------------------------------------------------------------------ report
A_TIMES = (4.0, 6.0, 8.0, 10.0)


def _saved(name_prefix):
    """The saved runs whose file name starts with ``name_prefix`` + "_" (newest last)."""
    return [io.load_npz(p) for p in sorted(STORE.glob(f"{name_prefix}_*.npz"))
            if p.name[len(name_prefix) + 1:].count("=") == 0]


def _one(prefix):
    runs = _saved(prefix)
    return runs[-1] if runs else None


def report_a(beta=256.0) -> str:
    """Part A's table: W2 at A_TIMES per run, and each changed setting's largest effect."""
    rows, b = [], f"{beta:g}"
    for n in (32, 64, 128, 256):
        d = study_fv(beta, n)
        if d is not None:
            rows.append((f"finite volumes n = {n} (study piece)", *[at(d, t) for t in A_TIMES],
                         "", f"{float(d['cpu_seconds']):.0f}"))
    runs = [(f"finite volumes n = {n}", f"fv_beta={b}_n={n}_t=10", "") for n in (32, 64, 128, 256)]
    for n in (32, 64, 128):
        base = f"fv_beta={b}_n={n}_t=10"
        runs += [(f"  n = {n}, velocity_tol 1e-7", f"{base}_velocity_tol=1e-07", base),
                 (f"  n = {n}, macro_tol 1e-4", f"{base}_macro_tol=0.0001", base),
                 (f"  n = {n}, per-stage velocity", f"{base}_stepping=per-stage", base)]
    for n in (288, 1152, 4608, 18432):
        runs.append((f"particles N = {n} (kernel auto)", f"particles_beta={b}_n={n}_t=10", ""))
    for n in (1152, 4608, 18432):
        runs.append((f"particles N = {n} (split rule)", f"particles_beta={b}_n={n}_t=10_init=split",
                     ""))
    for n in (4608, 18432):
        base = f"particles_beta={b}_n={n}_t=10"
        runs += [(f"  N = {n}, harmonic kernel", f"{base}_kernel=harmonic", base),
                 (f"  N = {n}, exact direct kernel", f"{base}_kernel=numba", base),
                 (f"  N = {n}, direct kernel, rtol 1e-6", f"{base}_kernel=numba_rtol=1e-06",
                  f"{base}_kernel=numba"),
                 (f"  N = {n}, rtol 1e-6", f"{base}_rtol=1e-06", base)]
    for label, name, ref in runs:
        d = _one(name)
        if d is None:
            continue
        r = _one(ref) if ref else None
        if r is None and ref.startswith("fv_"):  # the study's piece at the default settings
            r = study_fv(beta, int(ref.split("_n=")[1].split("_")[0]))
        k = len(d["w2"])
        effect = (f"{np.max(np.abs(d['w2'] - r['w2'][:k])):.2e}" if r is not None
                  and len(r["w2"]) >= k else "")
        rows.append((label, *[at(d, t) for t in A_TIMES], effect,
                     f"{float(d['cpu_seconds']):.0f}"))
    header = [f"run (beta = {b}, E1)", *[f"W2 t={t:g}" for t in A_TIMES],
              "max abs change vs the default run at its resolution", "CPU s"]
    return table(rows, header)


def _pairs(beta, t_end, init=""):
    """Part B's runs at beta: {N: run} over B_TOKENS (``init``: the name's suffix of another
    start)."""
    return {n: d for n in B_TOKENS
            if (d := _one(f"particles_beta={beta:g}_n={n}_t={t_end:g}{init}")) is not None}


GAP_TIMES = (2.0, 4.0, 6.0, 8.0, 10.0)


def report_gaps() -> str:
    """W_N - W_FV(n = 128) at GAP_TIMES per beta and N: how the particles approach the finite
    volumes, time by time."""
    rows = []
    for beta, t_end in B_WINDOWS.items():
        fine = study_fv(beta, 128)
        if fine is None:
            continue
        for init in ("", "_init=split"):
            for n, d in sorted(_pairs(beta, t_end, init).items()):
                rows.append((f"{beta:g}", n, init[6:] or "mean axis",
                             *[at(d, t) - at(fine, t) if t <= t_end else "" for t in GAP_TIMES]))
    return table(rows, ["beta", "N", "rule", *[f"W_N - W_FV t={t:g}" for t in GAP_TIMES]])


def report_b() -> str:
    """Per beta: the particles' errors |W_N - W_{N/4}|, their order in N, and how long they
    agree with the finite volumes (n = 128, error |128 - 64|) within the two errors."""
    rows = []
    for (beta, t_end), init in ((bt, init) for init in ("", "_init=split")
                                for bt in B_WINDOWS.items()):
        runs = _pairs(beta, t_end, init)
        fine, coarse = study_fv(beta, 128), study_fv(beta, 64)
        if fine is None or coarse is None or len(runs) < 2:
            continue
        k = int(round(t_end / STEP)) + 1
        t = fine["times"][:k]
        fv_err = np.abs(fine["w2"][:k] - coarse["w2"][:k]) + (fine["upper"] - fine["lower"])[:k]
        ns = sorted(runs)
        prev_err = None
        for lo, hi in zip(ns, ns[1:], strict=False):
            w, w4 = runs[hi]["w2"][:k], runs[lo]["w2"][:k]
            err = np.abs(w - w4) + (runs[hi]["upper"] - runs[hi]["lower"])[:k]
            order = ("" if prev_err is None else
                     f"{math.log(np.max(prev_err) / np.max(err)) / math.log(4):.2f}")
            gap = w - fine["w2"][:k]
            rows.append((f"{beta:g}", hi, init[6:] or "mean axis", float(np.max(err)), order, *[
                float(np.interp(s, t, w)) for s in (4.0, 8.0)],
                float(np.interp(8.0, t, fine["w2"][:k])), agreement_end(t, gap, err + fv_err),
                agreement_end(t, gap, CONVERGED_FRACTION * np.min(fine["w2"][:k]))))
            prev_err = err
    lines = []
    for beta in B_WINDOWS:
        for rule in ("mean axis", "split"):
            mine = [r for r in rows if r[:3:2] == (f"{beta:g}", rule)]
            for col, what in ((8, "summed errors"), (9, "5% of the FV minimum")):
                ends = [r[col] for r in mine]
                if len(ends) < 2:
                    continue
                steps = ", ".join(f"{b - a:+.2f}" for a, b in zip(ends, ends[1:], strict=False))
                lines.append(f"- beta = {beta:g}, {rule} rule, within {what}: agreement ends "
                             f"at t = {', '.join(f'{e:g}' for e in ends)} (N = "
                             f"{', '.join(str(r[1]) for r in mine)}); steps per factor 4 in N: "
                             f"{steps}")
    header = ["beta", "N", "rule", "max_t abs(W_N - W_N/4)", "order in N of that max",
              "W_N t=4", "W_N t=8", "FV n=128 t=8", "agrees with FV within the summed errors "
              "until t =", "within 5% of the FV minimum until t ="]
    return table(rows, header) + "\n\n" + "\n".join(lines)


def report_c() -> str:
    """Per beta and tail factor f: t*, min W2, t_dep and its shift, against log(f) / rate with
    the rate of the f = 1 run's tail mass near the attention target."""
    rows = []
    for (beta, n), factors in C_RUNS.items():
        runs = {f: d for f in factors
                if (d := _one(f"fv_beta={beta:g}_n={n}_t=14_f={f}")) is not None}
        if 1.0 not in runs:
            continue
        base = runs[1.0]
        t0 = departure_time(base["times"], base["w2"])
        rate = decay_rate(base["times"], base["tail"], 1.0, t0 if math.isfinite(t0) else 14.0)
        for f, d in sorted(runs.items()):
            td = departure_time(d["times"], d["w2"])
            i = int(np.argmin(d["w2"]))
            memory = [float(np.interp(t, d["times"], d["tail"]) /
                            np.interp(t, base["times"], base["tail"])) for t in (0.0, 2.0, 4.0)]
            rows.append((f"{beta:g}", n, f"{f:g}", float(d["times"][i]), float(d["w2"][i]), td,
                         td - t0, math.log(f) / rate, rate, *memory))
    header = ["beta", "n", "f", "t* (output)", "min W2", "t_dep", "t_dep - t_dep(f=1)",
              "log(f)/rate", "tail decay rate (f = 1)", "tail/tail(f=1) t=0", "t=2", "t=4"]
    return table(rows, header) + "\n\n" + "\n".join(_c_fits(rows))


def _c_fits(rows):
    """Per beta, the least-squares slope of t_dep against log f over 1/4 <= f <= 4 (the
    perturbations that leave Pi#rho_0 within a few percent), with its R^2, against the
    hypothesis's +-1/rate."""
    lines = []
    for beta, n in C_RUNS:
        sel = [(math.log(float(r[2])), r[5], r[8]) for r in rows if r[:2] == (f"{beta:g}", n)
               and 0.25 <= float(r[2]) <= 4.0 and math.isfinite(r[5])]
        if len(sel) < 3:
            continue
        x, y, rate = (np.array(v) for v in zip(*sel, strict=True))
        slope, icpt = np.polyfit(x, y, 1)
        r2 = 1.0 - np.sum((y - (slope * x + icpt)) ** 2) / np.sum((y - y.mean()) ** 2)
        lines.append(f"- beta = {beta:g}, n = {n}: d t_dep / d log f = {slope:+.4f} "
                     f"(R^2 = {r2:.3f}, {len(x)} factors in [1/4, 4]); the hypothesis: +-1/rate = "
                     f"{1.0 / rate[0]:.3f} ({abs(slope) * rate[0]:.2f} of it).")
    return lines


INTRO = """Dim E = 1 scenario of the low-temperature study (`validation/low_temperature.py`:
`model_for("E1", beta)`, rho_0 its von Mises-Fisher cap). W2 is W2(rho_t, Pi#rho_0); the
particles' is against their own limit Pi#mu^N_0. The finite-volume reference is the study's
committed n = 128 piece, with error |W_128 - W_64| (plus its W2 bracket). Particles start at
the weighted nodes of a product Gauss rule: about the cap's mean (`quadrature(n)`, "mean axis")
or `split_rule` about the dominant eigenvector e (Gauss nodes on each hemisphere separately:
Pi#rho_0's masses exact). A particle curve's error is |W_N - W_N/4| (plus its bracket); "order
in N" is log4 of the ratio of successive maxima over the window. t_dep: the first time after
the minimum where W2 is 5% above it. Part C starts from rho_0 (1 + (f - 1) b), b = exp(-(1 -
<x, c>) / 0.3^2) at the attention target c = B^T e / |B^T e|, renormalised; "tail" is the mass
within 0.3 rad of c; the rate is the f = 1 tail's exponential decay rate over [1, t_dep]."""


def write_report():
    body = "\n\n".join([INTRO,
        "## A. beta = 256 and 1000 before the plateau: one setting changed at a time",
        report_a(256.0), report_a(1000.0),
        "## B. Particles from quadrature starts: order in N and agreement window", report_b(),
        report_gaps(),
        "## C. The tail at the attention target: departure against log(f)", report_c()])
    io.write_text(OUT / "settle.md", "# Settling the low-temperature curves\n\n" + body + "\n")
    print(body)


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
        write_report()


PART_A = {
    "fv32": lambda: fv(256.0, 32, 10.0),
    "fv32_vtol": lambda: fv(256.0, 32, 10.0, velocity_tol=1e-7),
    "fv32_macro": lambda: fv(256.0, 32, 10.0, macro_tol=1e-4),
    "fv32_perstage": lambda: fv(256.0, 32, 10.0, stepping="per-stage"),
    "fv64": lambda: fv(256.0, 64, 10.0),
    "fv64_vtol": lambda: fv(256.0, 64, 10.0, velocity_tol=1e-7),
    "fv64_macro": lambda: fv(256.0, 64, 10.0, macro_tol=1e-4),
    "fv128_macro": lambda: fv(256.0, 128, 10.0, macro_tol=1e-4),
    "fv32_b1000": lambda: fv(1000.0, 32, 10.0),
    "fv32_vtol_b1000": lambda: fv(1000.0, 32, 10.0, velocity_tol=1e-7),
    "fv32_macro_b1000": lambda: fv(1000.0, 32, 10.0, macro_tol=1e-4),
    "p4k_split": lambda: particles(256.0, 4608, 10.0, init="split"),
    "p18k_split": lambda: particles(256.0, 18432, 10.0, init="split"),
    "s1152_b1000": lambda: particles(1000.0, 1152, 10.0, init="split"),
    "s4608_b1000": lambda: particles(1000.0, 4608, 10.0, init="split"),
    "s18432_b1000": lambda: particles(1000.0, 18432, 10.0, init="split"),
    "p4k_auto": lambda: particles(256.0, 4608, 10.0),
    "p4k_numba": lambda: particles(256.0, 4608, 10.0, kernel="numba"),
    "p4k_harmonic": lambda: particles(256.0, 4608, 10.0, kernel="harmonic"),
    "p4k_rtol": lambda: particles(256.0, 4608, 10.0, kernel="numba", rtol=1e-6),
    "p18k_auto": lambda: particles(256.0, 18432, 10.0),
    "p18k_rtol": lambda: particles(256.0, 18432, 10.0, rtol=1e-6),
    "p18k_numba": lambda: particles(256.0, 18432, 10.0, kernel="numba"),
}
#: Part B's token counts (factor 4) and windows: beta = 256 to t = 10 (before its plateau; its
#: 4608-token run is part A's).
B_TOKENS = (288, 1152, 4608, 18432)
B_WINDOWS = {16.0: 14.0, 64.0: 14.0, 256.0: 10.0}
PART_B = {f"p{n}_b{b:g}": (lambda b=b, n=n: particles(b, n, B_WINDOWS[b]))
          for b in B_WINDOWS for n in B_TOKENS}
#: the separatrix-aligned start (split_rule) at the three largest counts
PART_B.update({f"s{n}_b{b:g}": (lambda b=b, n=n: particles(b, n, B_WINDOWS[b], init="split"))
               for b in B_WINDOWS for n in B_TOKENS[-3:]})
#: Part C: the tail factors, at the betas whose curves rise after their minimum within t = 14.
C_FACTORS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 10.0)
#: (beta, cells) of part C: n = 32 for all factors; n = 64 at beta = 64 for three of them, to
#: check that the slope of t_dep against log f is resolved.
C_RUNS = {(16.0, 32): C_FACTORS, (64.0, 32): C_FACTORS, (64.0, 64): (0.25, 1.0, 4.0)}
PART_C = {f"c_b{b:g}_n{n}_f{f:g}": (lambda b=b, n=n, f=f: fv(b, n, 14.0, f=f))
          for (b, n), factors in C_RUNS.items() for f in factors}

if __name__ == "__main__":
    sys.exit(main())
