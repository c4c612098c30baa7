"""Finite-volume solver: the cost of a step and the concentration curves. The
transport errors against the standard test cases are validation/transport.py.

1. ``cost``: wall time of the face velocities, of one right-hand side and of one SSPRK3 step
   at n = 32 ... 256 (6·256² = 393 216 cells). At finite beta (default scenario) two velocity
   paths in the same run, at the initial state and at a concentrated one: the reference
   (ducc0's non-equispaced SHT at every call, exact sums past the harmonic module's 1e-10)
   and the default (planned transforms, the flux criterion of ``velocity_tol``); at beta = inf
   the scheme alone, as a ratio to one numpy pass over the cell array.
2. ``concentration``: W2(rho_t, Pi#rho0) (chordal) in the default scenario
   (spherepde.app.config.DEFAULT: B = rotation by 0.9 about (1,1,1), A = diag(1, 0.4, 0),
   vMF(mean (0.4,0.3,1), kappa 1.5)) to t = 14 at several n and beta, each run saved as it
   ends; at beta = inf against the closed form of the zero-temperature flow.
3. ``table``: saved runs of one beta side by side, and whether the finest two agree within
   5% of the curve's minimum at every output time.

Run (from the repository root, so that this checkout's spherepde is imported):
      PYTHONPATH=. .venv/bin/python benchmarks/finite_volume.py cost --beta 16 [--n 32 64]
      PYTHONPATH=. .venv/bin/python benchmarks/finite_volume.py concentration --beta 16 \
          --n 16 32 64 --path harmonic --out runs/fv
      PYTHONPATH=. .venv/bin/python benchmarks/finite_volume.py table runs/fv_beta=16_n=*.npz
"""
from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import numpy as np


def cost(ns, repeat, beta, ref_max_n, ref_max_n_concentrated):
    """Wall time of the face velocities, of one right-hand side and of one SSPRK3 step at
    each n, at beta = inf (the zero-temperature field, computed once) or at a finite beta of
    the default scenario. At finite beta, three states: the initial vMF, a concentrated one
    (two vMF caps of concentration 20 at +-e, e the dominant direction: the shape rho_t
    takes on its way to Pi#rho0) and a late one (caps of concentration 1000 over a floor of
    1e-6 of the mean, as the study's state at beta = 256, t = 8.5), and four velocity paths
    measured in the same run: the reference (ducc0's non-equispaced SHT at every call, exact
    cap sums past the harmonic module's own level 1e-10; up to n = ref_max_n, and
    ref_max_n_concentrated for the other states, where its cap sums cost O(n^4)), the default
    (planned transforms, exact sums past the mesh's default_velocity_tol, the field at 1e-12),
    "tol 1e-7" (the same at the earlier fixed velocity_tol = 1e-7) and "loose field" (1e-7
    with the field built at 1e-9, the choice before that).
    Times are the best of ``repeat``."""
    import numba

    import spherepde as sp
    from spherepde.app.config import DEFAULT
    from spherepde.app.scenario import build_initial, build_model
    from spherepde.density.finite_volume import CellHarmonic, EdgeVelocity, FiniteVolumeSolver

    print(f"numba threads: {numba.get_num_threads()}, beta = {beta:g}")
    def best(fn):
        return min(_timed(fn) for _ in range(repeat))

    if math.isinf(beta):
        model = sp.Model(K=np.eye(3), V=np.diag([1.0, 0.4, 0.0]), beta=math.inf)
        print("| n | cells | mesh build s | rhs ms | SSPRK3 step ms | numpy pass ms | "
              "step / pass |")
        print("|---|---|---|---|---|---|---|")
        for n in ns:
            t0 = time.perf_counter()
            solver = FiniteVolumeSolver(model, n)
            build = time.perf_counter() - t0
            m = solver.initial_masses(sp.measures.VonMisesFisher([0.4, 0.3, 1.0], 1.5))
            un = solver.field(0.0, m)
            solver.fv.tendency(m, un)  # compile
            rhs = best(lambda s=solver, m=m, un=un: s.fv.tendency(m, un))
            dt = solver.cfl / solver.fv.tendency(m, un)[1]
            # one step of the positivity control
            step = best(lambda s=solver, m=m, dt=dt: s.run(m, [0.0, dt]))
            ref = best(lambda m=m: np.sqrt(m * 2.0 + 1.0).sum())
            print(f"| {n} | {solver.mesh.n_cells} | {build:.2f} | {1e3 * rhs:.2f} | "
                  f"{1e3 * step:.2f} | {1e3 * ref:.3f} | {step / ref:.0f} |", flush=True)
        return
    model = build_model(DEFAULT, beta)
    e = model.dominant_subspace()[:, 0]
    vmf = sp.measures.VonMisesFisher
    states = {"initial": build_initial(DEFAULT),
              "concentrated": sp.measures.Mixture([vmf(e, 20.0), vmf(-e, 20.0)], [0.5, 0.5]),
              # what the study's finite-volume state looks like late at beta = 256 (n = 64,
              # t = 8.5: peak 6400x the mean, a floor of ~1e-6 of the mean from the scheme)
              "late": sp.measures.Mixture([vmf(e, 1000.0), vmf(-e, 1000.0), vmf(e, 10.0),
                                           sp.measures.Uniform(3)],
                                          [0.4995, 0.4995, 1e-3 - 1e-6, 1e-6])}
    paths = {"reference": dict(planned=False, velocity_tol=1e-10),
             "default": dict(planned=True, velocity_tol=None),
             "tol 1e-7": dict(planned=True, velocity_tol=1e-7),
             # the field built at velocity_tol / 100, as before: its larger bounds send more
             # edge points to the exact sums
             "loose field": dict(planned=True, velocity_tol=1e-7, field_tol=1e-9)}
    print("| n | cells | state | path | velocity_tol | plan s | velocity ms | rhs ms | "
          "SSPRK3 step ms | exact-sum share | rhs ref/default (other/default) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in ns:
        for state, mu in states.items():
            rhs_of = {}
            for name, kw in paths.items():
                top = ref_max_n if state == "initial" else ref_max_n_concentrated
                if name == "reference" and n > top:
                    continue
                t0 = time.perf_counter()
                solver = FiniteVolumeSolver(model, n, path="harmonic",
                                            planned=kw["planned"], velocity_tol=kw["velocity_tol"])
                if "field_tol" in kw:
                    solver.operator = CellHarmonic(model, solver.mesh, solver.mesh.face_points,
                                                   **kw)
                    solver.field = EdgeVelocity(solver.fv, solver.operator)
                build = time.perf_counter() - t0
                if name == "reference":  # the velocity criterion alone, as before the flux one
                    solver.operator.wants_edge_density = False  # (flux_criterion=False)
                if state == "late":  # caps narrower than a cell: a finer rule, normalized
                    m = solver.mesh.integrate_cells(mu.density, order=8)
                    m /= m.sum()
                else:
                    m = solver.initial_masses(mu)
                op = solver.operator
                solver.field(0.0, m)  # compile
                op.stats.update(queries=0, fallback=0)
                vel = best(lambda s=solver, m=m: s.field(0.0, m))
                share = op.stats["fallback"] / max(op.stats["queries"], 1)
                rhs = best(lambda s=solver, m=m: s.tendency(0.0, m))
                dt = solver.cfl / solver.tendency(0.0, m)[1]
                step = best(lambda s=solver, m=m, dt=dt: s.run(m, [0.0, dt]))
                rhs_of[name] = rhs
                ratio = (f"{rhs_of['reference'] / rhs:.2f}"
                         if name == "default" and "reference" in rhs_of else
                         f"{rhs / rhs_of['default']:.2f}" if name in ("tol 1e-7", "loose field")
                         else "")
                print(f"| {n} | {solver.mesh.n_cells} | {state} | {name} | "
                      f"{solver.operator.velocity_tol:.1e} | {build:.1f} | "
                      f"{1e3 * vel:.1f} | {1e3 * rhs:.1f} | {1e3 * step:.1f} | {share:.3f} | "
                      f"{ratio} |", flush=True)
                del solver, op


def exact_w2_zero_temperature(model, mu0, times, n_phi=256, per_panel=20):
    """W2(rho_t, Pi#rho0) of the zero-temperature closed form (chordal, dim E = 1): the flow
    keeps the sign of <x, e>, so W2² = int (2 - 2|<Phi_t(x0), e>|) rho0(x0) dx0.

    The integrand has a layer of width ~e^{-gamma t} at E^perp ({<x0, e> = 0}, where the
    tokens are slow), so t0 = <x0, e> is integrated by Gauss rules on geometric panels
    [10^-k-1, 10^-k] (k = 0..11, both signs) and the angle around e by the trapezoid rule."""
    import spherepde as sp

    e = model.dominant_subspace()[:, 0]
    u = np.cross(e, np.eye(3)[int(np.argmin(np.abs(e)))])
    u /= np.linalg.norm(u)
    v = np.cross(e, u)
    g, gw = np.polynomial.legendre.leggauss(per_panel)
    edges = np.concatenate([[0.0], 10.0 ** np.arange(-12, 1)])
    panels = list(zip(edges[:-1], edges[1:], strict=True))
    t0 = np.concatenate([0.5 * (b - a) * g + 0.5 * (b + a) for a, b in panels])
    tw = np.concatenate([0.5 * (b - a) * gw for a, b in panels])
    t0, tw = np.concatenate([t0, -t0]), np.concatenate([tw, tw])
    phi = 2 * np.pi * np.arange(n_phi) / n_phi
    r = np.sqrt(1 - t0 ** 2)[:, None]
    x0 = (t0[:, None, None] * e + r[..., None] * (np.cos(phi)[None, :, None] * u
                                                 + np.sin(phi)[None, :, None] * v))
    w = (tw[:, None] * (2 * np.pi / n_phi)) * mu0.density(x0)
    x0 = x0.reshape(-1, 3)
    out = []
    for t in times:
        xt = sp.exact.zero_temperature_flow(model, x0, float(t))
        out.append(math.sqrt(max(float(np.sum(w.reshape(-1) * (2 - 2 * np.abs(xt @ e)))), 0.0)))
    return np.array(out)


def concentration(ns, betas, t_end, n_out, path, velocity_tol, out, segment=4):
    """W2(rho_t, Pi#rho0) in the default scenario (spherepde.app.config.DEFAULT) for each beta
    and n; at beta = inf also its error against the closed form. Each finished run is saved
    at once to ``<out>_beta=<b>_n=<n>.npz`` (times, W2 curve, wall time, steps, fallback)."""
    import spherepde as sp
    from spherepde.app.config import DEFAULT
    from spherepde.app.scenario import build_initial, build_model
    from spherepde.density.finite_volume import FiniteVolumeSolver

    mu0 = build_initial(DEFAULT)
    times = np.linspace(0.0, t_end, n_out)
    print("| beta | n | h | min W2 | t at min | W2(t_end) | max error vs closed form | steps | "
          "exact-sum share of targets | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for beta in betas:
        model = build_model(DEFAULT, beta)
        ref = exact_w2_zero_temperature(model, mu0, times) if math.isinf(beta) else None
        for n in ns:
            solver = FiniteVolumeSolver(model, n, path=path, velocity_tol=velocity_tol)
            t0 = time.perf_counter()
            # in segments of ``segment`` output intervals, each started from the cell averages
            # the last one ended with, so that a run stopped early leaves its curve so far
            vals, steps, state = [], 0, mu0
            for a in range(0, times.size - 1, segment):
                seg = times[a: a + segment + 1]
                sol = solver.solve(state, seg)
                sol.initial_measure = mu0  # W2 to Pi#rho0 of the run's own rho0
                w = np.asarray(sp.w2_to_limit(sol).values)
                vals.extend(w if a == 0 else w[1:])
                steps += sol.stats["steps"]
                state = sol.averages(len(seg) - 1)
                done = times[: len(vals)]
                np.savez(f"{out}_beta={beta:g}_n={n}.partial.npz", times=done, w2=np.array(vals),
                         wall=time.perf_counter() - t0, steps=steps, h=solver.mesh.h)
            wall = time.perf_counter() - t0
            vals = np.array(vals)
            i = int(np.argmin(vals))
            err = "" if ref is None else f"{np.max(np.abs(vals - ref)):.3e}"
            st = getattr(solver.operator, "stats", {})
            share = st.get("fallback", 0) / max(st.get("queries", 0), 1)
            print(f"| {beta:g} | {n} | {solver.mesh.h:.4f} | {vals[i]:.4e} | {times[i]:.2f} | "
                  f"{vals[-1]:.4e} | {err} | {steps} | {share:.3f} | {wall:.0f} |",
                  flush=True)
            np.savez(f"{out}_beta={beta:g}_n={n}.npz", times=times, w2=vals, wall=wall,
                     steps=steps, fallback_share=share, h=solver.mesh.h)
        if ref is not None:
            print("closed form W2(t):", np.array2string(ref, precision=4), flush=True)


def convergence_table(files):
    """The curves of several saved runs (same beta) side by side, over the output times all of
    them reached (a ``.partial`` file holds a run stopped early), and whether the two finest
    differ by at most 5% of the finest curve's minimum there."""
    runs = sorted((float(np.load(f)["h"]), f) for f in files)
    data = [np.load(f) for _, f in runs]
    k = min(d["w2"].size for d in data)
    t = data[0]["times"][:k] if data[0]["times"].size >= k else data[-1]["times"][:k]
    print("| t | " + " | ".join(f"h = {h:.4f}" for h, _ in runs) + " |")
    print("|---" * (len(runs) + 1) + "|")
    for j in range(0, k, max(1, k // 15)):
        print(f"| {t[j]:.2f} | " + " | ".join(f"{d['w2'][j]:.4f}" for d in data) + " |")
    fine, next_ = data[0]["w2"][:k], data[1]["w2"][:k]
    diff = np.abs(fine - next_)
    print(f"finest two up to t = {t[-1]:.2f}: max |difference| {diff.max():.4f} at t = "
          f"{t[np.argmax(diff)]:.2f}; 5% of the finest minimum {0.05 * fine.min():.4f}: "
          f"{'within' if diff.max() <= 0.05 * fine.min() else 'not within'}")
    for (_h, f), d in zip(runs, data, strict=True):
        share = float(d["fallback_share"]) if "fallback_share" in d.files else float("nan")
        print(f"{f}: to t = {d['times'][d['w2'].size - 1]:.2f}, wall {float(d['wall']):.0f} s, "
              f"steps {int(d['steps'])}, exact-sum share {share:.3f}")


STUDY_RUNS = Path(__file__).resolve().parent.parent / "validation/output/low_temperature_runs"


def _default_model(beta):
    from spherepde.app.config import DEFAULT
    from spherepde.app.scenario import build_initial, build_model

    return build_model(DEFAULT, beta), build_initial(DEFAULT)


def _w2_curve(sol, model):
    import spherepde as sp

    limit = model.limit_measure(sol.initial_measure)
    return np.array([float(sp.w2(sol.measure(i), limit)) for i in range(len(sol.times))])


def _committed_deviation(beta, n, times, w):
    """(max |w - committed curve|, convergence threshold = 5% of the committed minimum) against
    the study's committed dim E = 1 finite-volume piece at (beta, n); NaN where there is none."""
    import glob

    ref = sorted(glob.glob(f"{STUDY_RUNS}/E1_finite_volume_beta={beta:g}_res={n}_*.npz"))
    if not ref:
        return float("nan"), float("nan")
    z = np.load(ref[0])
    k = min(len(z["w2"]), len(w))
    if not np.allclose(z["times"][:k], times[:k]):
        return float("nan"), float("nan")
    return float(np.max(np.abs(w[:k] - z["w2"][:k]))), 0.05 * float(np.min(z["w2"]))


def study(ns, beta, t_end, n_out, stepping, out):
    """The study's dim E = 1 piece at beta and each n, in one solve to t_end with ``stepping``,
    against the committed piece (validation/output/low_temperature_runs/): wall time, field
    evaluations, and the largest deviation of the W2 curve in units of the convergence
    threshold (5% of the committed curve's minimum)."""
    from spherepde.density.finite_volume import FiniteVolumeSolver

    model, mu0 = _default_model(beta)
    times = np.linspace(0.0, t_end, n_out)
    rows = []
    for n in ns:
        solver = FiniteVolumeSolver(model, n, stepping=stepping)
        t0, c0 = time.perf_counter(), time.process_time()
        sol = solver.solve(mu0, times)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        w = _w2_curve(sol, model)
        np.savez(f"{out}_beta={beta:g}_n={n}_{stepping}.npz", times=times, w2=w, wall=wall,
                 cpu=cpu, **{k: v for k, v in sol.stats.items() if np.isscalar(v)})
        dev, thr = _committed_deviation(beta, n, times, w)
        st = sol.stats
        rows.append([n, stepping, f"{times[-1]:g}", round(wall, 1), round(cpu, 1),
                     st.get("fevals"), st.get("substeps", st.get("steps")), dev, dev / thr])
        print(rows[-1], flush=True)
    return rows


def multirate(ns, beta, t_end, repeat, per_stage_max_n=64):
    """Per-stage against multirate over [0, t_end] at each n in the same run (default
    scenario): wall time of each, field evaluations, transport steps, the speed-up, the
    deviation of the cell masses and of W2(rho_t_end, Pi#rho0), and the cost of one field
    evaluation and of one transport step (an SSPRK3 step with the velocity held: three
    reconstructions and flux sums), each the best of ``repeat``."""
    from spherepde.density.finite_volume import FiniteVolumeSolver

    model, mu0 = _default_model(beta)
    rows = []
    for n in ns:
        sols, walls = {}, {}
        for stepping in ("per-stage", "multirate") if n <= per_stage_max_n else ():
            solver = FiniteVolumeSolver(model, n, stepping=stepping)
            t0 = time.perf_counter()
            sols[stepping] = solver.solve(mu0, [0.0, t_end])
            walls[stepping] = time.perf_counter() - t0
        if not sols:  # the costs alone, at the initial state
            solver = FiniteVolumeSolver(model, n)
        m = sols["multirate"].masses[-1] if sols else solver.initial_state(mu0)
        u = solver.field(t_end, m)
        field_s = min(_timed(lambda s=solver, m=m: s.field(t_end, m)) for _ in range(repeat))
        step_s = min(_timed(lambda s=solver, m=m, u=u: [s.fv.tendency(m, u) for _ in range(3)])
                     for _ in range(repeat))
        if not sols:
            rows.append([n] + ["-"] * 7 + [round(1e3 * field_s, 2), round(1e3 * step_s, 2),
                                           "-", "-"])
            print(rows[-1], flush=True)
            continue
        mr, ps = sols["multirate"], sols["per-stage"]
        w = [_w2_curve(s, model)[-1] for s in (ps, mr)]
        rows.append([n, round(walls["per-stage"], 2), round(walls["multirate"], 2),
                     round(walls["per-stage"] / walls["multirate"], 2), ps.stats["fevals"],
                     mr.stats["fevals"], ps.stats["steps"], mr.stats["substeps"],
                     round(1e3 * field_s, 2), round(1e3 * step_s, 2),
                     float(np.abs(ps.masses[-1] - mr.masses[-1]).sum()), abs(w[0] - w[1])])
        print(rows[-1], flush=True)
    return rows


def threads(ns, beta, repeat):
    """Ratios in one run: one field evaluation with the planned field's 2-D FFTs through numpy
    against transforms.fourier.fft2 (ducc0, threaded), and one transport step (three
    tendencies) with numba on one thread against all (start with NUMBA_NUM_THREADS >= 2)."""
    import numba

    import spherepde.interaction.harmonic as harmonic
    from spherepde.density.finite_volume import FiniteVolumeSolver
    from spherepde.transforms import fourier

    def numpy_fft2(a, forward=True, nthreads=None):
        return np.fft.fft2(a) if forward else np.fft.ifft2(a) * (a.shape[-2] * a.shape[-1])

    model, mu0 = _default_model(beta)
    most = numba.config.NUMBA_NUM_THREADS
    rows = []
    for n in ns:
        load = _OthersLoad()
        solver = FiniteVolumeSolver(model, n)
        m = solver.initial_state(mu0)
        u = solver.field(0.0, m)
        field_t = {}
        for name, fn in (("numpy", numpy_fft2), ("ducc0", fourier.fft2)):
            harmonic.fft2 = fn
            field_t[name] = min(_timed(lambda s=solver, m=m: s.field(0.0, m))
                                for _ in range(repeat))
        harmonic.fft2 = fourier.fft2
        step_t = {}
        for k in sorted({1, most}):
            numba.set_num_threads(k)
            step_t[k] = min(_timed(lambda s=solver, m=m, u=u: [s.fv.tendency(m, u)
                                                               for _ in range(3)])
                            for _ in range(repeat))
        numba.set_num_threads(most)
        rows.append([n, round(1e3 * field_t["numpy"], 2), round(1e3 * field_t["ducc0"], 2),
                     round(field_t["numpy"] / field_t["ducc0"], 3), round(1e3 * step_t[1], 2),
                     most, round(1e3 * step_t[most], 2), round(step_t[1] / step_t[most], 3),
                     round(load.cores(), 2)])
        print(rows[-1], flush=True)
    return rows


THREADS_HEADER = ["n", "field ms (numpy FFT)", "field ms (ducc0 FFT)", "ratio",
                  "transport step ms (1 thread)", "threads", "transport step ms", "ratio",
                  "cores busy with other jobs"]


class _OthersLoad:
    """How many cores other processes kept busy since construction: the machine's busy time
    (/proc/stat) less this process's CPU time, over the wall time. A thread-scaling ratio
    means something only where this is near 0; elsewhere the parallel loops wait for a core
    another job holds. NaN where /proc/stat cannot be read (not Linux)."""

    def __init__(self):
        self.t0, self.busy0, self.own0 = time.perf_counter(), self._busy(), time.process_time()

    @staticmethod
    def _busy():
        try:
            with open("/proc/stat") as f:
                v = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return math.nan
        return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait

    def cores(self):
        wall = time.perf_counter() - self.t0
        own = time.process_time() - self.own0
        return max((self._busy() - self.busy0 - own) / wall, 0.0)


def report_threads(ns, beta, repeat):
    """The threads table alone, written to docs/benchmarks/finite_volume_threads.md with how
    busy the other jobs kept the machine during each row."""
    from _report import markdown_table, write

    rows = threads(ns, beta, repeat)
    body = (f"Default scenario (dim E = 1), beta = {beta:g}, at the initial state. One field "
            "evaluation with the planned field's 2-D FFTs through numpy against ducc0 "
            "(threaded), and one transport step (three tendencies, velocity held) with numba on "
            "one thread against all of them. 'cores busy with other jobs': the machine's busy "
            "time (/proc/stat) less this process's CPU time, over the row's wall time; a "
            "threads ratio is the second core's gain only where that is near 0.\n\n"
            + markdown_table(THREADS_HEADER, rows) + "\n")
    print(write("finite_volume_threads", "Finite volumes: what the second core gains", body))


def report_multirate(ns, beta, t_end, repeat, report, study_prefix="/tmp/fvstudy/run"):
    """The multirate and threads tables in one run; with ``report`` also written, with the
    study runs saved under ``study_prefix`` (the ``study`` command), to
    docs/benchmarks/finite_volume.md."""
    import glob

    import numba

    # the steppings compared on one numba thread (a shared machine's second core is often
    # busy, and a parallel loop then waits for it); threads() measures the second one apart
    most = numba.get_num_threads()
    numba.set_num_threads(1)
    rows = multirate(ns, beta, t_end, repeat)
    numba.set_num_threads(most)
    trows = threads(ns, beta, repeat)
    if not report:
        return
    from _report import markdown_table, write

    srows = []
    found = glob.glob(f"{study_prefix}_beta={beta:g}_n=*_multirate.npz")
    for f in sorted(found, key=lambda f: int(f.split("_n=")[1].split("_")[0])):
        z = np.load(f)
        n = int(f.split("_n=")[1].split("_")[0])
        dev, thr = _committed_deviation(beta, n, z["times"], z["w2"])
        srows.append([n, float(z["wall"]), float(z["cpu"]), int(z["fevals"]),
                      int(z["substeps"]), dev, dev / thr])
    body = (f"Default scenario (dim E = 1), beta = {beta:g}. The machine is shared with other "
            "jobs: compare ratios within a table, not absolute times.\n\n"
            f"## Multirate against per-stage over t in [0, {t_end:g}], same run, one numba "
            "thread\n\n"
            + markdown_table(MULTIRATE_HEADER, rows)
            + "\n\nField eval: one evaluation of the face velocities at the multirate state "
              "reached (at the initial state where no solve ran); transport step: three "
              "tendencies (one SSPRK3 step) with the velocity held. Deviations: l1 of the "
              "cell masses and |W2 difference| at t_end.\n\n"
            "## Threads and FFT library, same run\n\n" + markdown_table(THREADS_HEADER, trows)
            + "\n\nA threads ratio below 1 means the parallel loops waited for a second core "
              "that another job held: on a shared machine these rows measure its load, and "
              "only an idle machine measures what the second core gains.\n")
    if srows:
        body += ("\n## The study pieces (multirate, one solve each)\n\nFrom `PYTHONPATH=. "
                 f"python benchmarks/finite_volume.py study --beta {beta:g} --n 64 128 --out "
                 f"{study_prefix}` (t = 14, 57 outputs), against the committed per-stage pieces "
                 "of validation/output/low_temperature_runs/; the convergence threshold is 5% "
                 "of the committed curve's minimum.\n\n"
                 + markdown_table(["n", "wall s", "CPU s", "field evals", "substeps",
                                   "max W2 deviation from the committed piece",
                                   "in convergence thresholds"], srows)
                 + "\n")
    print(write("finite_volume", "Finite volumes: multirate stepping and field cost", body))


MULTIRATE_HEADER = ["n", "per-stage s", "multirate s", "speed-up", "field evals per-stage",
                    "field evals multirate", "steps per-stage", "substeps multirate",
                    "field eval ms", "transport step ms", "l1 mass deviation",
                    "W2(t_end) deviation"]


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["cost", "concentration", "table", "study", "multirate",
                                    "threads"])
    p.add_argument("--stepping", default="multirate")
    p.add_argument("--report", action="store_true",
                   help="multirate, threads: write docs/benchmarks/finite_volume(_threads).md")
    p.add_argument("--beta", type=float, nargs="+", default=[math.inf])
    p.add_argument("--t-end", type=float, default=14.0)
    p.add_argument("--n-out", type=int, default=57)
    p.add_argument("--n", type=int, nargs="+")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--path", default="auto")
    p.add_argument("--ref-max-n", type=int, default=128,
                   help="cost: the reference path only up to this n")
    p.add_argument("--ref-max-n-concentrated", type=int, default=32)
    p.add_argument("--velocity-tol", type=float, default=None,
                   help="default: the solver's own, default_velocity_tol(mesh)")
    p.add_argument("--out", default="fv_concentration")
    p.add_argument("files", nargs="*", help="table: the saved runs of one beta")
    a = p.parse_args()
    if a.what == "cost":
        cost(a.n or [32, 64, 128, 256], a.repeat, a.beta[0], a.ref_max_n,
             a.ref_max_n_concentrated)
    elif a.what == "table":
        convergence_table(a.files)
    elif a.what == "study":
        study(a.n or [64, 128], a.beta[0], a.t_end, a.n_out, a.stepping, a.out)
    elif a.what == "multirate":
        report_multirate(a.n or [32, 64, 128, 256], a.beta[0], a.t_end, a.repeat, a.report)
    elif a.what == "threads":
        (report_threads if a.report else threads)(a.n or [64, 128], a.beta[0], a.repeat)
    else:
        concentration(a.n or [32, 64, 128], a.beta, a.t_end, a.n_out, a.path, a.velocity_tol,
                      a.out)
