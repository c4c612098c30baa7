"""Speed and memory of the particle interaction kernels, each against a reference in the same run.

1. The fused numba kernel vs the naive dense numpy N×N implementation researchers write,
   N = 16384, d = 3, float64, SA, measured in the same run (target: >= 10x).
2. Peak memory of an N = 10^5 particle run (one explicit Euler step of ParticleSolver with the
   numba backend), measured in a fresh subprocess by its VmHWM (target: < 300 MB) and with
   tracemalloc for the numpy allocations.
3. With a CUDA GPU and torch: pair interactions per second of the torch kernel in float32 and
   float64 at N = 2^18 and 2^20, d = 3, and the float32 max abs error against float64
   (target: >= 0.5e12 pairs/s, error <= 1e-5). Skipped without; ``--gpu`` runs only this.

4. ``--numpy-crossover``: the library's numpy reference kernel against the fused numba kernel
   for N = 64 .. 2048 at beta = 4, 64, 1000 (best of 7, same run), which places
   ``AutoProfile.numba_min_pairs`` (spherepde.interaction.options).

5. ``--vector-width``: the fused kernel with numba's default 256-bit vectors against the
   512-bit ones ``spherepde`` asks for on AVX-512 hosts (``spherepde._numba_target``), each
   in a fresh subprocess (the features are fixed per process), alternated A B A B, one
   thread, N = 4000, beta = 4, 256, 1000; prints pairs/s and the ratio per beta.

6. ``--highd``: the tiled BLAS kernel (``spherepde.interaction.tiled``) against the fused numba
   kernel and the plain chunked numpy softmax at d = 16, 64, 512, 1024, N = 10^4, beta = 4,
   SA, float64 (interleaved repeats, same run), with the fraction of the BLAS peak measured by
   a large dgemm in the same run; and the fused/tiled crossover in d and N that places
   ``spherepde.interaction.options.AutoProfile.tiled_min_dim``. Written to
   docs/benchmarks/particles.md.

7. ``--gpu-highd``: the torch kernel on CUDA (float32, float64) at d = 16, 64, 512, 1024,
   N = 10^4 and 10^5, against the CPU tiled kernel on the same inputs (N = 10^4 on the CPU;
   its N = 10^5 time is the N = 10^4 one times 100, the cost being N^2); a markdown table.
   Exits with a message where torch or CUDA is missing.

Usage: python benchmarks/particles.py [--n 16384] [--n-memory 100000] [--repeat 3]
       [--numpy-crossover] [--vector-width] [--highd] [--gpu-highd]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from functools import partial

import numpy as np


def naive_dense(x, B, V, beta):
    """What a one-off script does: the full N×N logits, softmax, matrix product."""
    S = beta * (x @ B @ x.T)  # <x_i, B x_j>
    S = S - S.max(axis=1, keepdims=True)
    W = np.exp(S)
    W = W / W.sum(axis=1, keepdims=True)
    return W @ (x @ V.T)


def best_time(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def speed(n, d, beta, repeat):
    from spherepde.interaction.fused import attention_numba

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    B = np.eye(d) + 0.1 * rng.standard_normal((d, d))
    V = np.eye(d) + 0.1 * rng.standard_normal((d, d))
    w = np.full(n, 1.0 / n)
    attention_numba(x[:64], x[:64] @ B.T, x[:64] @ V.T, w[:64] * n / 64, beta, True)  # compile
    t_fused, out_fused = best_time(
        lambda: attention_numba(x, x @ B.T, x @ V.T, w, beta, True), repeat)
    t_naive, out_naive = best_time(lambda: naive_dense(x, B, V, beta), max(1, repeat - 1))
    err = float(np.abs(out_fused - out_naive).max())
    return t_fused, t_naive, err


_MEMORY_CHILD = r"""
import json, sys, tracemalloc, time
import numpy as np
import spherepde as sp

def hwm_mb():
    # VmHWM: peak resident set of this process image (reset by exec, unlike ru_maxrss)
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024

n, d = int(sys.argv[1]), 3
model = sp.Model(beta=1.0, d=d)
solver = sp.ParticleSolver(model, scheme="euler", dt=0.01, kernel="numba")
solver.solve(sp.measures.Uniform(d).sample(256, seed=0), [0.0, 0.01])  # import, compile
base = hwm_mb()
x0 = sp.measures.Uniform(d).sample(n, seed=1)
tracemalloc.start()
t = time.perf_counter()
traj = solver.solve(x0, [0.0, 0.01])
wall = time.perf_counter() - t
_, traced = tracemalloc.get_traced_memory()
peak = hwm_mb()
print(json.dumps(dict(base_mb=base, peak_mb=peak, traced_mb=traced / 2**20, wall_s=wall)))
"""


def memory(n):
    res = subprocess.run([sys.executable, "-c", _MEMORY_CHILD, str(n)], capture_output=True,
                         text=True, check=True, env=dict(os.environ))
    return json.loads(res.stdout.strip().splitlines()[-1])


def gpu(n=1 << 20, d=3, beta=5.0, repeat=3):
    """pairs/s of the torch kernel on a CUDA device in float32 and float64 (best of
    ``repeat``), and the float32 output's max abs error against float64; None without one."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    from spherepde.interaction.torch_backend import attention_tensors

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn((n, d), device="cuda", dtype=torch.float64, generator=g)
    x /= x.norm(dim=1, keepdim=True)
    logw = torch.full((n,), -np.log(n), device="cuda", dtype=torch.float64)
    res = dict(device=torch.cuda.get_device_name(), n=n, beta=beta)
    outs = {}
    for name, dtype in (("float64", torch.float64), ("float32", torch.float32)):
        xt, lw = x.to(dtype), logw.to(dtype)
        attention_tensors(xt[:4096], xt[:4096], xt[:4096], lw[:4096], beta, True)  # warm up
        best = np.inf
        for _ in range(repeat):
            torch.cuda.synchronize()
            t = time.perf_counter()
            outs[name], _ = attention_tensors(xt, xt, xt, lw, beta, True)
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t)
        res[f"{name}_pairs_per_s"] = n * n / best
    res["max_abs_err"] = float((outs["float32"].double() - outs["float64"]).abs().max())
    return res


def numpy_crossover(repeat=7):
    """Seconds of the numpy reference and the fused numba kernel, N x N, per (beta, N)."""
    from spherepde.interaction.fused import attention_numba
    from spherepde.interaction.reference import attention_numpy

    rng = np.random.default_rng(0)
    rows = []
    for beta in (4.0, 64.0, 1000.0):
        for n in (64, 128, 256, 512, 1024, 2048):
            x = rng.normal(size=(n, 3))
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            w = np.full(n, 1.0 / n)
            attention_numba(x, x, x, w, beta, True)  # compile / warm the threads
            t_np, _ = best_time(partial(attention_numpy, x, x, x, w, beta, True), repeat)
            t_nb, _ = best_time(partial(attention_numba, x, x, x, w, beta, True), repeat)
            rows.append((beta, n, t_np, t_nb))
    return rows


def plain_numpy(x, keys, values, w, beta, chunk=1024):
    """The ten-line chunked softmax a researcher writes: logits by matmul, max shift, exp,
    a second matmul (SA)."""
    out = np.empty((x.shape[0], values.shape[1]))
    logw = np.log(w)
    for s in range(0, x.shape[0], chunk):
        logits = beta * (x[s:s + chunk] @ keys.T) + logw
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        out[s:s + chunk] = (e @ values) / e.sum(axis=1, keepdims=True)
    return out


def interleaved(fns, repeat):
    """Best time of each of ``fns`` over ``repeat`` rounds, the calls alternated within each
    round so that a change of the machine's load hits them all alike."""
    best = [np.inf] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t)
    return best


def sphere_cloud(n, d, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def highd(n=10_000, dims=(16, 64, 512, 1024), beta=4.0, repeat=3, fused_max_d=512,
          peak_size=3000):
    """Per-evaluation seconds of tiled (threads over query tiles, one-thread BLAS per tile),
    the plain numpy softmax, the fused
    numba kernel (up to ``fused_max_d``: beyond it one evaluation takes minutes), and a
    ``peak_size``² dgemm interleaved with them (the BLAS peak under the same load)."""
    from spherepde.interaction.fused import attention_numba
    from spherepde.interaction.tiled import attention_tiled

    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, peak_size, peak_size))
    rows = []
    for d in dims:
        x = sphere_cloud(n, d)
        w = np.full(n, 1.0 / n)
        fns = [lambda: a @ b,
               partial(attention_tiled, x, x, x, w, beta, True),
               partial(plain_numpy, x, x, x, w, beta)]
        # fused beyond d = 64 costs minutes per call: one call, in the last round
        t_fused = np.nan
        if d <= fused_max_d:
            attention_numba(x[:64], x[:64], x[:64], w[:64], beta, True)  # compile
            if d <= 64:
                fns.append(partial(attention_numba, x, x, x, w, beta, True))
            else:
                (t_fused,) = interleaved([partial(attention_numba, x, x, x, w, beta, True)], 1)
        times = interleaved(fns, repeat) + [t_fused] * (4 - len(fns))
        err = float(np.abs(attention_tiled(x, x, x, w, beta, True)
                           - plain_numpy(x, x, x, w, beta)).max())
        rows.append({"d": d, "peak": 2.0 * peak_size ** 3 / times[0], "tiled": times[1],
                     "numpy": times[2], "fused": times[3],
                     "flops": 2.0 * n * n * (2 * d), "err": err})
    return rows


def tiled_crossover(dims=(3, 4, 6, 8, 16, 32, 64), sizes=(500, 1000, 2000, 8000), beta=4.0,
                    repeat=5):
    """fused / tiled time (> 1: tiled faster) per (N, d), N x N, interleaved."""
    from spherepde.interaction.fused import attention_numba
    from spherepde.interaction.tiled import attention_tiled

    rows = []
    for n in sizes:
        row = [n]
        for d in dims:
            x = sphere_cloud(n, d, seed=d)
            w = np.full(n, 1.0 / n)
            attention_numba(x[:64], x[:64], x[:64], w[:64], beta, True)
            t_f, t_t = interleaved([partial(attention_numba, x, x, x, w, beta, True),
                                    partial(attention_tiled, x, x, x, w, beta, True)],
                                   repeat if n <= 2000 else 3)
            row.append(t_f / t_t)
        rows.append(row)
    return dims, rows


_CROSSOVER_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
import particles
print(json.dumps(particles.tiled_crossover()))
"""


def tiled_crossover_one_thread():
    """:func:`tiled_crossover` in a fresh process with one numba and one BLAS thread."""
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-c", _CROSSOVER_CHILD,
                          os.path.dirname(os.path.abspath(__file__))],
                         capture_output=True, text=True, check=True, env=env)
    return json.loads(run.stdout.strip().splitlines()[-1])


def report_highd(args):
    """Run ``--highd`` and write docs/benchmarks/particles.md."""
    import numba

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _report import markdown_table, write

    load = os.getloadavg()
    rows = highd(n=args.n_highd, repeat=args.repeat)
    dims, cross = tiled_crossover()
    _, cross1 = tiled_crossover_one_thread()
    load_after = os.getloadavg()
    table = markdown_table(
        ["d", "numpy / tiled", "fused / tiled",
         "dgemm peak GFLOP/s", "tiled GFLOP/s", "tiled / peak", "numpy / peak",
         "max abs diff vs numpy"],
        [[r["d"], r["numpy"] / r["tiled"],
          "not run" if np.isnan(r["fused"]) else r["fused"] / r["tiled"],
          r["peak"] / 1e9, r["flops"] / r["tiled"] / 1e9,
          r["flops"] / r["tiled"] / r["peak"], r["flops"] / r["numpy"] / r["peak"],
          f"{r['err']:.1e}"] for r in rows])
    cross_table = markdown_table(["N"] + [f"d = {d}" for d in dims], cross)
    cross1_table = markdown_table(["N"] + [f"d = {d}" for d in dims], cross1)
    body = f"""## High dimension: tiled BLAS kernel vs fused numba vs plain numpy

N = {args.n_highd} tokens (queries = keys), beta = 4, SA, float64, uniform on S^(d-1),
values = keys. numba threads: {numba.get_num_threads()}. 1-minute load average
{load[0]:.1f} before, {load_after[0]:.1f} after, on {os.cpu_count()} cores (other jobs show
there): read the ratios measured in this run (calls interleaved, best of {args.repeat}; fused
beyond d = 64 one call), not the absolute times.

- *tiled*: threads over query tiles, each with a one-thread BLAS (the default); the tiles
  put the BLAS's thread count back when they end, so the numpy calls after them get the
  BLAS's own threads.
- *plain numpy*: the ten-line chunked softmax (1024 queries × all keys, matmul, max shift,
  exp, matmul), with the BLAS's own threads.
- BLAS peak: a 3000 × 3000 dgemm (numpy matmul, OPENBLAS_NUM_THREADS =
  {os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}), interleaved with the kernels of each
  row, best of the same rounds: the peak attainable under the same load. The kernels' flops
  are their two matrix products, 4·N²·d (the exponentials are not counted).
- fused is not run at d = 1024 (one evaluation takes minutes).

{table}

### Crossover: fused numba time / tiled time (> 1: tiled is faster), N × N, beta = 4

Interleaved, best of 5 (N <= 2000) or 3. With {numba.get_num_threads()} threads:

{cross_table}

With one thread (numba and BLAS), in a fresh process:

{cross1_table}
"""
    print(body)
    path = write("particles", "Particle interaction kernels in high dimension", body)
    print(f"written to {path}")


def gpu_highd(dims=(16, 64, 512, 1024), sizes=(10_000, 100_000), beta=4.0, cpu_n=10_000,
              repeat=3):
    """Seconds per evaluation of the torch kernel on CUDA (float32, float64) against the CPU
    tiled kernel on the same inputs; None without torch or CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    from spherepde.interaction.tiled import attention_tiled
    from spherepde.interaction.torch_backend import attention_tensors

    rows = []
    for d in dims:
        xc = sphere_cloud(cpu_n, d)
        wc = np.full(cpu_n, 1.0 / cpu_n)
        cpu_out = []
        attention_tiled(xc[:64], xc, xc, wc, beta, True)  # compile before timing
        (t_cpu,) = interleaved([lambda xc=xc, wc=wc, cpu_out=cpu_out: cpu_out.append(
            attention_tiled(xc, xc, xc, wc, beta, True))], 1)
        for n in sizes:
            x = sphere_cloud(n, d)
            row = {"d": d, "n": n, "cpu": t_cpu * (n / cpu_n) ** 2, "cpu_n": cpu_n}
            outs = {}
            for name, dtype in (("float64", torch.float64), ("float32", torch.float32)):
                xt = torch.as_tensor(x, dtype=dtype, device="cuda")
                lw = torch.full((n,), -np.log(n), dtype=dtype, device="cuda")
                attention_tensors(xt[:256], xt[:256], xt[:256], lw[:256], beta, True)  # warm up

                def run(outs=outs, name=name, xt=xt, lw=lw):
                    outs[name] = attention_tensors(xt, xt, xt, lw, beta, True)[0]
                    torch.cuda.synchronize()
                torch.cuda.synchronize()
                (row[name],) = interleaved([run], repeat)
            row["err32"] = float((outs["float32"].double() - outs["float64"]).abs().max())
            if n == cpu_n:  # the same inputs (same seed) as the CPU timing
                row["err_cpu"] = float(np.abs(outs["float64"].cpu().numpy()
                                              - cpu_out[0]).max())
            rows.append(row)
            outs.clear()  # free the GPU outputs before the next size
            torch.cuda.empty_cache()
    return torch.cuda.get_device_name(), rows


def print_gpu_highd():
    from _report import markdown_table

    res = gpu_highd()
    if res is None:
        print("--gpu-highd: no CUDA device (or no torch) here; nothing measured")
        return
    device, rows = res
    print(f"torch kernel on {device} vs the CPU tiled kernel ({os.cpu_count()} cores, "
          f"N = {rows[0]['cpu_n']} measured, larger N scaled by N^2), beta = 4, SA\n")
    print(markdown_table(
        ["d", "N", "CPU tiled f64 [s]", "GPU f64 [s]", "GPU f32 [s]", "CPU/GPU f64",
         "CPU/GPU f32", "f32 max abs err vs f64", "GPU f64 vs CPU max abs diff"],
        [[r["d"], r["n"], r["cpu"], r["float64"], r["float32"], r["cpu"] / r["float64"],
          r["cpu"] / r["float32"], f"{r['err32']:.1e}",
          f"{r['err_cpu']:.1e}" if "err_cpu" in r else "-"] for r in rows]))


_WIDTH_CHILD = """
import json, time, numpy as np
import spherepde  # sets numba's target features (or not) before numba compiles
import numba
from spherepde.interaction.fused import attention_numba
n = 4000
rng = np.random.default_rng(0)
x = rng.normal(size=(n, 3)); x /= np.linalg.norm(x, axis=1, keepdims=True)
w = np.full(n, 1.0 / n)
out = {"features": numba.config.CPU_FEATURES or "default"}
for beta in (4.0, 256.0, 1000.0):
    attention_numba(x, x, x, w, beta, True)
    best = np.inf
    for _ in range(7):
        t0 = time.perf_counter()
        attention_numba(x, x, x, w, beta, True)
        best = min(best, time.perf_counter() - t0)
    out[str(beta)] = n * n / best
print(json.dumps(out))
"""


def vector_width(rounds=2):
    """pairs/s of the fused kernel with 256-bit (numba's default) and 512-bit vectors."""
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    env.pop("NUMBA_CPU_FEATURES", None)
    res = {"256": [], "512": []}
    for _ in range(rounds):
        for label, wide in (("256", "0"), ("512", "1")):
            run = subprocess.run([sys.executable, "-c", _WIDTH_CHILD], capture_output=True,
                                 text=True, check=True, env=dict(env, SPHEREPDE_NUMBA_WIDE=wide))
            res[label].append(json.loads(run.stdout.strip().splitlines()[-1]))
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--d", type=int, default=3)
    ap.add_argument("--beta", type=float, default=5.0)
    ap.add_argument("--n-memory", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--numpy-crossover", action="store_true",
                    help="only the numpy-vs-numba timings that place AutoProfile.numba_min_pairs")
    ap.add_argument("--gpu", action="store_true", help="only the GPU (torch, CUDA) figures")
    ap.add_argument("--vector-width", action="store_true",
                    help="only the fused kernel with 256-bit against 512-bit vectors")
    ap.add_argument("--highd", action="store_true",
                    help="only the high-dimension kernels (tiled, fused, numpy) and crossover")
    ap.add_argument("--n-highd", type=int, default=10_000)
    ap.add_argument("--gpu-highd", action="store_true",
                    help="only the torch kernel on CUDA in high dimension vs the CPU tiled one")
    args = ap.parse_args(argv)
    import numba

    if args.highd:
        report_highd(args)
        return
    if args.gpu_highd:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        print_gpu_highd()
        return

    if args.gpu:
        _print_gpu()
        return
    if args.vector_width:
        res = vector_width()
        print("fused kernel, N = 4000, d = 3, one thread, best of 7, pairs/s (two rounds)")
        print(f"{'beta':>6}{'256-bit':>22}{'512-bit':>22}{'ratio':>8}")
        for beta in ("4.0", "256.0", "1000.0"):
            a = [r[beta] for r in res["256"]]
            b = [r[beta] for r in res["512"]]
            print(f"{float(beta):>6g}{a[0]:>11.3e}{a[1]:>11.3e}{b[0]:>11.3e}{b[1]:>11.3e}"
                  f"{max(b) / max(a):>8.2f}")
        if res["512"][0]["features"] == "default":
            print("(this host has no AVX-512: both runs used numba's default features)")
        return

    if args.numpy_crossover:
        print(f"{'beta':>6}{'N':>6}{'numpy [ms]':>12}{'numba [ms]':>12}{'numpy/numba':>13}")
        for beta, n, a, b in numpy_crossover():
            print(f"{beta:>6g}{n:>6}{a * 1e3:>12.3f}{b * 1e3:>12.3f}{a / b:>13.2f}")
        return

    print(f"# particles benchmark: {os.cpu_count()} CPU(s), numba {numba.__version__} with "
          f"{numba.config.NUMBA_NUM_THREADS} threads, numpy {np.__version__}")
    mem = memory(args.n_memory)
    print(f"N = {args.n_memory}, one Euler step of ParticleSolver (numba): "
          f"{mem['wall_s']:.2f} s")
    print(f"peak RSS {mem['peak_mb']:.0f} MB (interpreter + libraries after warm-up: "
          f"{mem['base_mb']:.0f} MB); numpy/python allocations during the run (tracemalloc): "
          f"{mem['traced_mb']:.1f} MB; target < 300 MB")

    t_fused, t_naive, err = speed(args.n, args.d, args.beta, args.repeat)
    pairs = args.n ** 2
    head = f"N = {args.n}, d = {args.d}, float64, SA"
    print(f"\n{head:<40}{'time [s]':>10}{'pairs/s':>12}")
    print(f"{'naive dense numpy N x N':<40}{t_naive:>10.3f}{pairs / t_naive:>12.3e}")
    print(f"{'fused numba kernel, O(N) memory':<40}{t_fused:>10.3f}{pairs / t_fused:>12.3e}")
    print(f"speed-up {t_naive / t_fused:.1f}x (target >= 10x); max |fused - naive| = {err:.1e}")

    _print_gpu()


def _print_gpu():
    for n in (1 << 18, 1 << 20):
        g = gpu(n)
        if g is None:
            print("\nGPU: no CUDA device (or no torch): the GPU figures are not measured here")
            return
        print(f"GPU {g['device']}, torch kernel, N = {n}, d = 3, beta = {g['beta']:g}: "
              f"float32 {g['float32_pairs_per_s']:.3e} pairs/s, float64 "
              f"{g['float64_pairs_per_s']:.3e} pairs/s; float32 max abs error vs float64 "
              f"{g['max_abs_err']:.1e} (targets 0.5e12 pairs/s, 1e-5)")


if __name__ == "__main__":
    main()
