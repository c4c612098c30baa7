"""Speed and memory of the particle interaction (issue 3's performance targets).

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

Usage: python benchmarks/particles.py [--n 16384] [--n-memory 100000] [--repeat 3]
       [--numpy-crossover] [--vector-width]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

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
            t_np, _ = best_time(lambda: attention_numpy(x, x, x, w, beta, True), repeat)
            t_nb, _ = best_time(lambda: attention_numba(x, x, x, w, beta, True), repeat)
            rows.append((beta, n, t_np, t_nb))
    return rows


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
    args = ap.parse_args(argv)
    import numba

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
