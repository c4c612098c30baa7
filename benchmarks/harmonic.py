"""Speed and memory of the harmonic kernel against the fused numba kernel (issue 9's targets).

All ratios are measured in the same run on the same machine; absolute times on a shared
2-core machine are noisy, the ratios less so. The model is the default scenario's
(B = rotation by 0.9 rad about (1, 1, 1), V = diag(1, 0.4, 0) B, SA) and the tokens are drawn
from its initial vMF(mean (0.4, 0.3, 1), kappa 1.5).

1. ``--ratio``: one right-hand side (the velocities of all N tokens) at N = 2^18, beta = 256:
   harmonic vs numba. numba is timed on a subset of queries against all N keys and scaled
   by N / subset (its cost is exactly proportional to the number of queries).
2. ``--big``: one right-hand side at N = 10^6, beta = 1000 (median of 5), in a fresh
   subprocess whose peak resident memory (VmHWM) is reported, with the fused numba kernel's
   time for the same right-hand side (from 1024 queries, scaled) as the reference.
3. ``--crossover``: per beta, the N above which the harmonic right-hand side beats numba.
4. ``--full-run``: the default scenario at beta = 1000 with N tokens (default 10^6) to
   t = 14 with ``ParticleSolver(model, kernel="harmonic")``: wall time, steps, the share of
   queries the error bound sent to the exact cap sums (``fallback``) and the atoms summed
   per fallback query (``cap_atoms``; a query among at most 128 counts all N), per output
   time and every 5 steps. Long: run it with nohup and a log.

Usage: python benchmarks/harmonic.py [--ratio] [--big] [--crossover] [--full-run]
       [--n-full 1000000] [--json out.json]   (no flag: the first three)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from spherepde.app.config import DEFAULT  # noqa: E402
from spherepde.app.scenario import build_initial, build_model  # noqa: E402

from particles import best_time  # noqa: E402  (benchmarks/particles.py)


def tokens(n, seed=0):
    return build_initial(DEFAULT).sample(n, seed=seed)


def harmonic_rhs(model, x, w):
    from spherepde.interaction.harmonic import field_for
    from spherepde.sphere import tangent_projection

    field = field_for(model.B, model.V, model.beta, model.normalized)
    return tangent_projection(x, field.attention_of_points(x, x, w)), field


def numba_rhs_time(model, x, w, subset, repeat):
    """Seconds for all N queries, from `subset` queries against all N keys."""
    from spherepde.interaction.fused import attention_numba

    keys, values = x @ model.B.T, x @ model.V.T
    q = x[:subset]
    attention_numba(q[:64], keys, values, w, model.beta, model.normalized)  # compile
    t, out = best_time(lambda: attention_numba(q, keys, values, w, model.beta,
                                               model.normalized), repeat)
    return t * x.shape[0] / subset, out


def ratio(n=1 << 18, beta=256.0, subset=4096, repeat=3):
    model = build_model(DEFAULT, beta)
    x = tokens(n)
    w = np.full(n, 1.0 / n)
    harmonic_rhs(model, x[:1000], w[:1000] * n / 1000)  # warm-up: field set-up, ducc0 plans
    t_h, (v, field) = best_time(lambda: harmonic_rhs(model, x, w), repeat)
    t_n, ref = numba_rhs_time(model, x, w, subset, repeat)
    from spherepde.sphere import tangent_projection

    err = float(np.abs(v[:subset] - tangent_projection(x[:subset], ref)).max())
    out = dict(n=n, beta=beta, degree=field.degree, harmonic_s=t_h, numba_s=t_n,
               numba_subset=subset, speedup=t_n / t_h, max_abs_diff=err,
               fallback_share=field.stats["fallback"] / max(field.stats["queries"], 1))
    print(f"[ratio] N = {n}, beta = {beta:g}, L = {field.degree}: harmonic {t_h:.3f} s, numba "
          f"{t_n:.2f} s (timed on {subset} queries, scaled): {t_n / t_h:.1f}x; "
          f"max |diff| = {err:.1e}; fallback share {out['fallback_share']:.4f}")
    return out


_BIG = r"""
import json, os, sys, time, numpy as np
sys.path.insert(0, {root!r})
from spherepde.app.config import DEFAULT
from spherepde.app.scenario import build_initial, build_model
from spherepde.interaction.harmonic import field_for
from spherepde.sphere import tangent_projection
model = build_model(DEFAULT, {beta})
x = build_initial(DEFAULT).sample({n}, seed=0)
w = np.full({n}, 1.0 / {n})
field = field_for(model.B, model.V, model.beta, model.normalized)
field.attention_of_points(x[:1000], x[:1000], w[:1000] * {n} / 1000)
times = []
for _ in range({repeat}):
    t = time.perf_counter()
    v = tangent_projection(x, field.attention_of_points(x, x, w))
    times.append(time.perf_counter() - t)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
# the reference in the same process: the fused numba kernel on {subset} queries against all
# N keys, scaled to N queries (its cost is proportional to the queries), right after the
# harmonic runs so that both see about the same machine load
from spherepde.interaction.fused import attention_numba
keys, values = x @ model.B.T, x @ model.V.T
attention_numba(x[:64], keys, values, w, model.beta, model.normalized)
ref = []
for _ in range({repeat_ref}):
    t = time.perf_counter()
    attention_numba(x[:{subset}], keys, values, w, model.beta, model.normalized)
    ref.append((time.perf_counter() - t) * {n} / {subset})
print(json.dumps(dict(seconds=float(np.median(times)), all_seconds=times,
                      vm_hwm_mb=int(hwm) / 1024, degree=field.degree,
                      fallback=field.stats["fallback"], numba_seconds=float(np.median(ref)),
                      numba_all_seconds=ref, load_average=os.getloadavg())))
"""


def big(n=10**6, beta=1000.0, repeat=5, subset=1024, repeat_ref=3):
    """One right-hand side at N = n (median of `repeat`), its peak memory, and the fused
    kernel's time for the same right-hand side as the reference (from `subset` queries)."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    code = _BIG.format(root=root, beta=beta, n=n, repeat=repeat, subset=subset,
                       repeat_ref=repeat_ref)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out.update(n=n, beta=beta)
    print(f"[big] N = {n}, beta = {beta:g}, L = {out['degree']}: one right-hand side "
          f"{out['seconds']:.2f} s (median of {repeat}: {np.round(out['all_seconds'], 2)}), "
          f"peak RSS {out['vm_hwm_mb']:.0f} MB, fallback queries {out['fallback']}; numba "
          f"{out['numba_seconds']:.0f} s (from {subset} queries, scaled): "
          f"{out['numba_seconds'] / out['seconds']:.0f}x; load average {out['load_average']}")
    return out


def crossover(betas=(16.0, 64.0, 256.0, 1000.0), sizes=tuple(1 << k for k in range(8, 16)),
              repeat=2):
    """Time both kernels for the particle right-hand side (m = n = N; numba on at most 2048
    queries, scaled) and locate the first N where harmonic wins, by log-linear interpolation
    of the time ratio."""
    rows = []
    for beta in betas:
        model = build_model(DEFAULT, beta)
        ratios = []
        for n in sizes:
            x = tokens(n, seed=1)
            w = np.full(n, 1.0 / n)
            harmonic_rhs(model, x, w)
            t_h, _ = best_time(lambda: harmonic_rhs(model, x, w), repeat)
            t_n, _ = numba_rhs_time(model, x, w, min(n, 2048), repeat)
            ratios.append(t_n / t_h)
            print(f"[crossover] beta = {beta:g}, N = {n}: numba {t_n * 1e3:.1f} ms, harmonic "
                  f"{t_h * 1e3:.1f} ms, ratio {t_n / t_h:.2f}", flush=True)
        r = np.log(np.array(ratios))
        n_cross = float(sizes[0]) if r[0] >= 0 else None
        for i in range(len(sizes) - 1):
            if n_cross is None and r[i] < 0 <= r[i + 1]:
                f = -r[i] / (r[i + 1] - r[i])
                n_cross = float(np.exp(np.log(sizes[i]) + f * np.log(sizes[i + 1] / sizes[i])))
        rows.append(dict(beta=beta, sizes=list(sizes), ratio_numba_over_harmonic=ratios,
                         crossover_n=n_cross))
        where = f">{sizes[-1]}" if n_cross is None else (f"<={sizes[0]}" if r[0] >= 0
                                                          else str(round(n_cross)))
        print(f"[crossover] beta = {beta:g}: harmonic is faster from N ~ {where}", flush=True)
    return rows


def full_run(n=10**6, beta=1000.0, t_end=14.0, n_times=15):
    """The default scenario at beta with n tokens to t_end (15 output times)."""
    import spherepde as sp
    from spherepde.interaction.harmonic import field_for

    model = build_model(DEFAULT, beta)
    x0 = tokens(n)
    solver = sp.ParticleSolver(model, kernel="harmonic")
    print(f"[full-run] {solver!r}, N = {n}", flush=True)
    field = field_for(model.B, model.V, model.beta, model.normalized)
    t0 = time.time()
    last = [0, 0, 0]
    log = []

    def callback(i, t, x):
        q = field.stats["queries"] - last[0]
        fb = field.stats["fallback"] - last[1]
        atoms = field.stats["cap_atoms"] - last[2]
        last[:] = [field.stats["queries"], field.stats["fallback"], field.stats["cap_atoms"]]
        row = dict(t=float(t), wall_s=time.time() - t0, rhs=q // n, fallback_share=fb / max(q, 1),
                   cap_atoms_per_fallback=atoms / max(fb, 1))
        log.append(row)
        print(f"[full-run] t = {t:5.2f}  wall {row['wall_s']:8.1f} s  right-hand sides "
              f"{row['rhs']:4d}  fallback share {row['fallback_share']:.4f}  atoms per fallback "
              f"query {row['cap_atoms_per_fallback']:.0f} (of N = {n})", flush=True)

    steps = [0]

    def progress(t):
        steps[0] += 1
        if steps[0] % 5 == 0:
            print(f"[full-run]   step {steps[0]:5d}  t = {t:.4f}  wall {time.time() - t0:8.1f} s  "
                  f"queries {field.stats['queries']}  fallback {field.stats['fallback']}  "
                  f"cap atoms {field.stats['cap_atoms']}",
                  flush=True)

    traj = solver.solve(x0, np.linspace(0.0, t_end, n_times), callback=callback,
                        progress=progress, tokens=slice(0, 2000))
    wall = time.time() - t0
    print(f"[full-run] done in {wall:.0f} s; stats {traj.stats}")
    return dict(n=n, beta=beta, t_end=t_end, wall_s=wall, stats=traj.stats, log=log)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--ratio", action="store_true")
    p.add_argument("--big", action="store_true")
    p.add_argument("--crossover", action="store_true")
    p.add_argument("--full-run", action="store_true")
    p.add_argument("--n-full", type=int, default=10**6)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if not (a.ratio or a.big or a.crossover or a.full_run):
        a.ratio = a.big = a.crossover = True
    print(f"machine: {os.cpu_count()} CPUs (shared with other jobs: compare ratios, not times)")
    out = {}
    if a.ratio:
        out["ratio"] = ratio()
    if a.big:
        out["big"] = big()
    if a.crossover:
        out["crossover"] = crossover()
    if a.full_run:
        out["full_run"] = full_run(n=a.n_full)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
