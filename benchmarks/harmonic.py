"""Speed and memory of the harmonic kernel against the fused numba kernel.

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
   t = 14 with ``ParticleSolver(model, kernel=--kernel)``: wall time, steps, the share of
   queries the error bound sent to the fallback (``fallback``) and the work per fallback
   query (``fallback_work``: exact plus far-field expansion terms), per output time and
   every 5 steps; ``--save-dir`` keeps the clouds. Long: run it with nohup and a log.
5. ``--late [CLOUD ...]``: one right-hand side at each N of ``--n-late`` on the initial
   cloud and on late clouds resampled from saved ones (``resample``; a cloud may be a .npy
   array or a study checkpoint .npz, and N = 0 takes it as saved), in fresh subprocesses:
   time, peak memory, the far-field fallback against the exact cap sums it replaced on the
   same queries, and the fused numba kernel; ``--velocity-tols`` repeats each at the given
   accuracies (what a particle run at rtol R asks: R/100). ``--farfield CLOUD ...``: the far
   field's split rule with and without its lookahead on each cloud's fallback queries.
6. ``--tolerances``: the right-hand sides a run of 2048 tokens at beta = 1000 to t = 14 needs
   at rtol 1e-6, 1e-7 and 1e-9, and how far each W2 curve is from the rtol 1e-9 one: what a
   looser tolerance would save the N = 10^6 run; ``--norms max rms`` adds the rms error norm
   (``--n-tol``, ``--rtols`` set the tokens and tolerances). ``--jacobian``: whether that run is
   stiff (the eigenvalues of the velocity's Jacobian at five times, beside the steps taken).

Usage: python benchmarks/harmonic.py [--ratio] [--big] [--crossover] [--full-run]
       [--n-full 1000000] [--kernel auto] [--rtol R] [--error-norm rms] [--save-dir DIR]
       [--late [CLOUD ...]] [--n-late 262144 1000000] [--velocity-tols 1e-7]
       [--farfield CLOUD ...] [--tolerances] [--norms max rms]
       [--n-tol 2048] [--rtols 1e-5 1e-6] [--jacobian] [--json out.json]
       (no flag: the first three)
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

from particles import best_time  # noqa: E402  (benchmarks/particles.py)

from spherepde.app.config import DEFAULT  # noqa: E402
from spherepde.app.scenario import build_initial, build_model  # noqa: E402


def tokens(n, seed=0):
    return build_initial(DEFAULT).sample(n, seed=seed)


def harmonic_rhs(model, x, w):
    from spherepde.interaction.harmonic import field_for
    from spherepde.sphere import tangent_projection

    field = field_for(model.B, model.V, model.beta, model.normalized)
    att, stats = field.evaluate(x, x, w)
    return tangent_projection(x, att), (field, stats)


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
    t_h, (v, (field, stats)) = best_time(lambda m=model, x=x, w=w: harmonic_rhs(m, x, w), repeat)
    t_n, ref = numba_rhs_time(model, x, w, subset, repeat)
    from spherepde.sphere import tangent_projection

    err = float(np.abs(v[:subset] - tangent_projection(x[:subset], ref)).max())
    out = dict(n=n, beta=beta, degree=field.degree, harmonic_s=t_h, numba_s=t_n,
               numba_subset=subset, speedup=t_n / t_h, max_abs_diff=err,
               fallback_share=stats["fallback"] / max(stats["queries"], 1))
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
    att, stats = field.evaluate(x, x, w)
    v = tangent_projection(x, att)
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
                      fallback=stats["fallback"], numba_seconds=float(np.median(ref)),
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
            t_h, _ = best_time(lambda m=model, x=x, w=w: harmonic_rhs(m, x, w), repeat)
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


def full_run(n=10**6, beta=1000.0, t_end=14.0, n_times=15, kernel="harmonic", save_dir=None,
             rtol=None, error_norm="max"):
    """The default scenario at beta with n tokens to t_end (15 output times); with
    ``kernel="auto"`` the timed chooser (``adaptive_kernel=True``) runs, and its switches and
    evaluations are in the stats, with the harmonic kernel's queries and fallback counts
    (``kernel_*``). With save_dir the whole cloud is saved at every output time (the late
    clouds of ``--late``)."""
    import spherepde as sp

    model = build_model(DEFAULT, beta)
    x0 = tokens(n)
    solver = sp.ParticleSolver(model, kernel=kernel, error_norm=error_norm,
                               adaptive_kernel=kernel == "auto",
                               **({} if rtol is None else dict(rtol=rtol, atol=rtol / 100)))
    if save_dir:
        os.makedirs(save_dir, exist_ok=True)
    print(f"[full-run] {solver!r}, N = {n}", flush=True)
    t0 = time.time()
    log = []

    def callback(i, t, x):
        row = dict(t=float(t), wall_s=time.time() - t0)
        log.append(row)
        print(f"[full-run] t = {t:5.2f}  wall {row['wall_s']:8.1f} s", flush=True)
        if save_dir:
            np.save(os.path.join(save_dir, f"cloud_n{n}_beta{beta:g}_t{t:g}.npy"), x)

    steps = [0]

    def progress(t):
        steps[0] += 1
        if steps[0] % 5 == 0:
            print(f"[full-run]   step {steps[0]:5d}  t = {t:.4f}  wall {time.time() - t0:8.1f} s",
                  flush=True)

    traj = solver.solve(x0, np.linspace(0.0, t_end, n_times), callback=callback,
                        progress=progress, tokens=slice(0, 2000))
    wall = time.time() - t0
    print(f"[full-run] done in {wall:.0f} s; stats {traj.stats}")
    return dict(n=n, beta=beta, t_end=t_end, kernel=kernel, wall_s=wall, stats=traj.stats,
                log=log)


def tolerances(n=2048, beta=1000.0, rtols=(1e-6, 1e-7, 1e-9), t_end=14.0, n_times=15,
               norms=("max",)):
    """How many right-hand sides the run to t_end needs at each rtol and error norm
    (atol = rtol/100, fused kernel: the count, not the kernel, is the point) and how far each
    W2(mu_t, Pi#mu_0) curve is from the one at the tightest rtol in the max norm."""
    import spherepde as sp

    model = build_model(DEFAULT, beta)
    x0 = tokens(n)
    times = np.linspace(0.0, t_end, n_times)
    limit = model.limit_measure(sp.PointCloud(x0, np.full(n, 1.0 / n)))
    rows = []
    settings = [("max", min(rtols))] + [(norm, rtol) for norm in norms
                                         for rtol in sorted(rtols, reverse=True)
                                         if (norm, rtol) != ("max", min(rtols))]
    for norm, rtol in settings:
        t0 = time.time()
        traj = sp.ParticleSolver(model, kernel="numba", rtol=rtol, atol=rtol / 100,
                                 error_norm=norm).solve(x0, times)
        w2 = [float(sp.w2(traj.measure(i), limit)) for i in range(len(times))]
        rows.append(dict(rtol=rtol, norm=norm, wall_s=time.time() - t0, w2=w2,
                         **{k: int(traj.stats[k]) for k in ("steps", "rejected", "fevals")}))
    ref = np.array(rows[0]["w2"])
    for r in rows:
        r["max_w2_change"] = float(np.max(np.abs(np.array(r["w2"]) - ref)))
        print(f"[tolerances] N = {n}, beta = {beta:g}, {r['norm']} norm, rtol {r['rtol']:g}: "
              f"{r['fevals']} "
              f"right-hand sides ({r['steps']} steps, {r['rejected']} rejected), "
              f"{r['wall_s']:.0f} s; W2 curve moves by {r['max_w2_change']:.2g} against rtol "
              f"{min(rtols):g} (5% of its minimum: {0.05 * ref.min():.3g})", flush=True)
    return rows


def jacobian_spectrum(n=2048, beta=1000.0, rtol=1e-6, out_times=(1.0, 3.0, 6.0, 10.0, 14.0)):
    """Whether the particle ODE is stiff: the eigenvalues of the velocity's Jacobian in the
    2N tangent directions (forward differences, eps = 1e-7, one right-hand side per column)
    at the given times of one run, beside the median accepted step before each. dopri5's
    stability region reaches ~3.3 along the negative real axis: h·max|λ| far below that
    means the steps are set by accuracy, not stability."""
    import spherepde as sp

    model = build_model(DEFAULT, beta)
    x0, w = tokens(n), np.full(n, 1.0 / n)
    solver = sp.ParticleSolver(model, kernel="numba", rtol=rtol, atol=rtol / 100)
    steps, snaps = [], {}
    solver.solve(x0, np.array((0.0,) + tuple(out_times)), progress=steps.append,
                 callback=lambda i, t, x: snaps.__setitem__(float(t), x.copy()))
    steps = np.array(steps)
    rows = []
    for t in out_times:
        x = snaps[float(t)]
        a = np.where(np.abs(x[:, :1]) < 0.9, [[1.0, 0.0, 0.0]], [[0.0, 1.0, 0.0]])
        e1 = a - (a * x).sum(1, keepdims=True) * x
        e1 /= np.linalg.norm(e1, axis=1, keepdims=True)
        basis = (e1, np.cross(x, e1))
        f0, eps = solver.velocity(x, w), 1e-7
        J = np.empty((2 * n, 2 * n))
        for j in range(n):
            for k in range(2):
                xp = x.copy()
                xp[j] += eps * basis[k][j]
                xp[j] /= np.linalg.norm(xp[j])
                df = (solver.velocity(xp, w) - f0) / eps
                J[0::2, 2 * j + k] = (df * basis[0]).sum(1)
                J[1::2, 2 * j + k] = (df * basis[1]).sum(1)
        lam = np.linalg.eigvals(J)
        before = np.diff(steps[(steps > t - 0.3) & (steps <= t)])
        h = float(np.median(before)) if before.size else float("nan")
        rows.append(dict(t=float(t), max_abs=float(np.abs(lam).max()),
                         min_re=float(lam.real.min()), max_re=float(lam.real.max()),
                         max_abs_im=float(np.abs(lam.imag).max()), h_median=h,
                         h_times_max_abs=h * float(np.abs(lam).max())))
        print(f"[jacobian] t = {t:g}: Re λ in [{rows[-1]['min_re']:.3g}, "
              f"{rows[-1]['max_re']:.3g}], max |Im λ| {rows[-1]['max_abs_im']:.3g}; median step "
              f"{h:.3g}, h·max|λ| = {rows[-1]['h_times_max_abs']:.3g}", flush=True)
    return rows


def resample(cloud, n, seed=0, k=5, jitter=0.3):
    """n points drawn from a small cloud (m, 3): each a copy of a random point of it moved by
    a Gaussian of `jitter` times the distance to that point's k-th neighbour (its local
    spacing), so that clusters, arcs and tails keep their scales."""
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(seed)
    dist, _ = cKDTree(cloud).query(cloud, k + 1)
    pick = rng.integers(0, cloud.shape[0], n)
    y = cloud[pick] + jitter * dist[pick, -1:] * rng.standard_normal((n, 3))
    return y / np.linalg.norm(y, axis=1, keepdims=True)


def load_cloud(path, n=0, seed=1):
    """A saved cloud: a .npy array or a study checkpoint .npz (its tokens); n > 0 resamples it
    to n tokens (:func:`resample`), n <= 0 keeps it as saved."""
    x = np.load(path)
    x = x["state"] if hasattr(x, "files") else x
    return x if n <= 0 else resample(x, n, seed=seed)


def fallback_queries(field, x, w, threshold, mom=None):
    """The tokens of x (also the atoms, weights w) whose harmonic bound exceeds `threshold`,
    and their far-field query vectors kappa n(x): (indices, (m, 3))."""
    from spherepde.interaction.harmonic import _directions

    mom = field.moments(x, w) if mom is None else mom
    _, bound = field.attention(x, mom, return_bound=True)
    bad = np.nonzero(~(bound <= threshold))[0]
    nx, kap = np.empty((bad.size, 3)), np.empty(bad.size)
    _directions(np.ascontiguousarray(x[bad]), field.B, field.beta, nx, kap)
    return bad, kap[:, None] * nx


def farfield_rules(cloud, n=0, beta=1000.0, velocity_tol=1e-7, repeat=2):
    """The far field's split rule with and without its one-level lookahead
    (``FarFieldOptions.lookahead``), alternated `repeat` times on the same fallback queries of one
    right-hand side of `cloud` (:func:`load_cloud`): seconds, expansion and exact terms, and
    the largest difference of the SA means a/s."""
    import spherepde.interaction.farfield as ff
    from spherepde.interaction.harmonic import field_for

    x = load_cloud(cloud, n)
    w = np.full(x.shape[0], 1.0 / x.shape[0])
    model = build_model(DEFAULT, beta)
    field = field_for(model.B, model.V, model.beta, model.normalized)
    bad, q = fallback_queries(field, x, w, velocity_tol)
    fars = {k: ff.FarField(x, w, ff.FarFieldOptions(lookahead=k)) for k in (False, True)}
    for far in fars.values():
        far.sums(q[:1000], velocity_tol)  # compile, build the tree
    rows, means = [], {}
    for _ in range(repeat):
        for lookahead in (False, True):
            t = time.perf_counter()
            s, a, _, st = fars[lookahead].sums(q, velocity_tol)
            rows.append(dict(lookahead=lookahead, seconds=time.perf_counter() - t,
                             expansion_terms=st["expansion_terms"],
                             direct_terms=st["direct_terms"]))
            means[lookahead] = a / s[:, None]
    sec = {k: float(np.median([r["seconds"] for r in rows if r["lookahead"] == k]))
           for k in (False, True)}
    out = dict(cloud=cloud, n=int(x.shape[0]), fallback=int(bad.size), rows=rows,
               ratio=sec[False] / sec[True],
               max_diff=float(np.abs(means[True] - means[False]).max()))
    print(f"[farfield] {cloud} N = {out['n']}, {bad.size} fallback queries at velocity_tol "
          f"{velocity_tol:g}: without lookahead {sec[False]:.2f} s, with {sec[True]:.2f} s "
          f"({out['ratio']:.2f}x); expansion terms {rows[0]['expansion_terms']:.3g} -> "
          f"{rows[1]['expansion_terms']:.3g}; means differ by {out['max_diff']:.1e}", flush=True)
    return out


_LATE = r"""
import json, os, sys, time, numpy as np
sys.path.insert(0, {root!r})
sys.path.insert(0, {bench!r})
from harmonic import load_cloud, tokens
from spherepde.app.config import DEFAULT
from spherepde.app.scenario import build_model
from spherepde.interaction.harmonic import FALLBACK_FACTOR, field_for, _directions
from spherepde.interaction.caps import CapSums
from spherepde.interaction.farfield import FarField
model = build_model(DEFAULT, {beta})
n = {n}
x = tokens(n) if {cloud!r} is None else load_cloud({cloud!r}, n)
n = x.shape[0]
vt = {velocity_tol!r}
w = np.full(n, 1.0 / n)
field = field_for(model.B, model.V, model.beta, model.normalized)
field.attention_of_points(x[:2000], x[:2000], w[:2000] * n / 2000)  # compile, plan
times = []
for _ in range({repeat}):
    t = time.perf_counter()
    v, st = field.evaluate(x, x, w, velocity_tol=vt)
    times.append(time.perf_counter() - t)
fb = st["fallback"]
work = st["fallback_work"]
hwm = int([l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]) / 1024
# the parts: the harmonic expansion with its bound, then each fallback on the same queries
mom = field.moments(x, w)
t = time.perf_counter()
_, bound = field.attention(x, mom, return_bound=True)
t_harm = time.perf_counter() - t + 0.0
bad = np.nonzero(~(bound <= (FALLBACK_FACTOR * field.tol if vt is None else vt)))[0]
nx = np.empty((bad.size, 3)); kap = np.empty(bad.size)
_directions(np.ascontiguousarray(x[bad]), field.B, field.beta, nx, kap)
t = time.perf_counter()
s, a, sh, st = FarField(x, w).sums(kap[:, None] * nx, field.tol if vt is None else vt)
t_far = time.perf_counter() - t
# the cap sums they replace (before): the sort, then a subset of the queries, scaled
sub = min(bad.size, {cap_subset})
t = time.perf_counter()
caps = CapSums(x, w)
t_sort = time.perf_counter() - t
pick = np.random.default_rng(0).choice(bad.size, sub, replace=False) if sub else np.arange(0)
t = time.perf_counter()
s2, a2, sh2, cnt = caps.sums(nx[pick], kap[pick], field.tol)
t_caps = t_sort + (time.perf_counter() - t) * bad.size / max(sub, 1)
err_caps = float(np.abs(a[pick] / s[pick, None] - a2 / s2[:, None]).max()) if sub else 0.0
# the fused numba kernel for the whole right-hand side, from {subset} queries, scaled
from spherepde.interaction.fused import attention_numba
keys, values = x @ model.B.T, x @ model.V.T
q = x[np.random.default_rng(2).choice(n, {subset}, replace=False)]
attention_numba(q[:64], keys, values, w, model.beta, model.normalized)
t = time.perf_counter()
ref = attention_numba(q, keys, values, w, model.beta, model.normalized)
t_numba = (time.perf_counter() - t) * n / {subset}
print(json.dumps(dict(n=n, seconds=float(np.median(times)), all_seconds=times, vm_hwm_mb=hwm,
                      fallback=int(fb), fallback_share=fb / n, fallback_work=int(work),
                      harmonic_part_s=t_harm, farfield_s=t_far, farfield_stats=st,
                      caps_s=t_caps, caps_sort_s=t_sort,
                      caps_atoms_mean=float(cnt.mean()) if sub else 0.0,
                      farfield_vs_caps_max_diff=err_caps, numba_s=t_numba,
                      load_average=os.getloadavg())))
"""


def late(n=10**6, beta=1000.0, cloud=None, repeat=3, subset=512, cap_subset=512,
         velocity_tol=None):
    """One right-hand side at N = n on the initial cloud (cloud=None) or on a late cloud
    resampled from a saved one (:func:`resample`), in a fresh subprocess (peak memory):
    its time (median of `repeat`), the harmonic part alone, the far-field fallback alone and
    the exact cap sums it replaced on the same queries (the sort plus `cap_subset` queries,
    scaled), and the fused numba kernel (from `subset` queries, scaled). `cloud` may be a
    study checkpoint (.npz, its tokens) and n <= 0 takes the cloud as saved; velocity_tol is
    the accuracy asked of the evaluation (None: the field's default, 100 tol)."""
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    code = _LATE.format(root=root, bench=os.path.dirname(os.path.abspath(__file__)), beta=beta,
                        n=n, cloud=cloud, repeat=repeat, subset=subset, cap_subset=cap_subset,
                        velocity_tol=velocity_tol)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if res.returncode:
        raise RuntimeError(res.stderr[-3000:])
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out.update(beta=beta, cloud=cloud or "initial", velocity_tol=velocity_tol)
    print(f"[late] N = {out['n']}, beta = {beta:g}, cloud {out['cloud']}, velocity_tol "
          f"{velocity_tol}: one right-hand side "
          f"{out['seconds']:.2f} s, peak RSS {out['vm_hwm_mb']:.0f} MB, fallback share "
          f"{out['fallback_share']:.4f}; far field {out['farfield_s']:.2f} s vs cap sums "
          f"{out['caps_s']:.1f} s ({out['caps_s'] / max(out['farfield_s'], 1e-9):.0f}x); numba "
          f"{out['numba_s']:.0f} s ({out['numba_s'] / out['seconds']:.0f}x); load "
          f"{out['load_average']}", flush=True)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--ratio", action="store_true")
    p.add_argument("--big", action="store_true")
    p.add_argument("--crossover", action="store_true")
    p.add_argument("--full-run", action="store_true")
    p.add_argument("--n-full", type=int, default=10**6)
    p.add_argument("--kernel", default="harmonic", help="--full-run's kernel (harmonic, auto)")
    p.add_argument("--save-dir", default=None, help="--full-run saves its clouds here")
    p.add_argument("--late", nargs="*", default=None, metavar="CLOUD.npy",
                   help="one right-hand side on the initial cloud and on these late clouds")
    p.add_argument("--n-late", type=int, nargs="+", default=[1 << 18, 10**6],
                   help="--late: tokens resampled from each cloud (0: the cloud as saved)")
    p.add_argument("--velocity-tols", type=float, nargs="+", default=None,
                   help="--late: the accuracies asked of the evaluation (default: the field's "
                        "100 tol only)")
    p.add_argument("--farfield", nargs="+", default=None, metavar="CLOUD",
                   help="the far field with and without its lookahead on each cloud's fallback "
                        "queries (--n-late's first N, 0: as saved; --velocity-tols' first)")
    p.add_argument("--tolerances", action="store_true",
                   help="right-hand sides to t = 14 and the W2 curve's change at rtol 1e-6/7/9")
    p.add_argument("--norms", nargs="+", default=["max"], choices=["max", "rms"],
                   help="--tolerances: the step's error norms to compare")
    p.add_argument("--n-tol", type=int, default=2048, help="--tolerances: tokens")
    p.add_argument("--rtols", type=float, nargs="+", default=[1e-6, 1e-7, 1e-9],
                   help="--tolerances: the tolerances (the smallest, max norm, is the reference)")
    p.add_argument("--rtol", type=float, default=None, help="--full-run's rtol (atol = rtol/100)")
    p.add_argument("--error-norm", default="max", choices=["max", "rms"],
                   help="--full-run's error norm")
    p.add_argument("--jacobian", action="store_true",
                   help="the particle ODE's Jacobian spectrum along a beta = 1000 run (N = 2048)")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    if not (a.ratio or a.big or a.crossover or a.full_run or a.tolerances or a.jacobian
            or a.farfield or a.late is not None):
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
        out["full_run"] = full_run(n=a.n_full, kernel=a.kernel, save_dir=a.save_dir,
                                   rtol=a.rtol, error_norm=a.error_norm)
    if a.farfield:
        vt = 1e-7 if a.velocity_tols is None else a.velocity_tols[0]
        out["farfield"] = [farfield_rules(c, n=a.n_late[0], velocity_tol=vt) for c in a.farfield]
    if a.tolerances:
        out["tolerances"] = tolerances(n=a.n_tol, rtols=tuple(a.rtols), norms=tuple(a.norms))
    if a.jacobian:
        out["jacobian"] = jacobian_spectrum()
    if a.late is not None:
        vts = [None] if a.velocity_tols is None else a.velocity_tols
        # the initial cloud is drawn at each N > 0 (N = 0 means a saved cloud as it is)
        out["late"] = [late(n=n, cloud=c, velocity_tol=vt) for c in [None] + a.late
                       for n in a.n_late for vt in vts if c is not None or n > 0]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
