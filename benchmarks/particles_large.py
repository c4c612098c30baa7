"""10^5 tokens in d = 64: one field evaluation and one solver step, 1 thread against 2.

For each thread count k (a fresh process with NUMBA_NUM_THREADS = OPENBLAS_NUM_THREADS =
OMP_NUM_THREADS = k: the counts are fixed per process), on the same N tokens uniform on
S^{d-1}, beta = 4, SA, Q = K = V = I, float64, in this order:

- ``Model.velocity(q, x, kernel="auto")`` for the first ``--queries`` tokens q against all N:
  the kernel "auto" picks (the BLAS-tiled one at this d), its time scaled by N/queries to one
  whole evaluation (the cost is linear in the queries: ~4·N·d flops and N exponentials each);
- the plain chunked numpy softmax (logits by matmul, max shift, exp, a second matmul, 256
  queries a chunk: 200 MB of logits) on the same queries: the reference;
- for the thread counts in ``--solve-threads``: ``ParticleSolver(model, scheme="euler",
  dt=0.01).solve(x, [0, 0.01])`` on all N tokens, one step (one whole evaluation, the
  retraction, the solution's bookkeeping), unscaled.

Each is timed once (a whole evaluation costs minutes on one core); the ratios numpy / auto
and the 2-thread speed-ups are the figures to read, the absolute times depend on the
machine's load (reported). Writes docs/benchmarks/particles_large.md.

Usage: PYTHONPATH=. python benchmarks/particles_large.py [--n 100000] [--d 64]
       [--queries 10000] [--solve-threads 2]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import timeit

_CHILD = """
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
from particles_large import measure
print(json.dumps(measure(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                         sys.argv[5] == "1")))
"""


def plain_numpy(q, x, beta, chunk=256):
    """The reference: chunked softmax attention of queries q with keys = values = x, uniform
    weights."""
    import numpy as np

    out = np.empty_like(q)
    for s in range(0, q.shape[0], chunk):
        logits = beta * (q[s:s + chunk] @ x.T)
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        out[s:s + chunk] = (e @ x) / e.sum(axis=1, keepdims=True)
    return out


def measure(n, d, queries, solve, beta=4.0):
    """Seconds of the "auto" field evaluation and of the numpy reference for ``queries`` of the
    n tokens against all n (scaled by n/queries to one whole evaluation: the cost is linear
    in the queries), of a one-step solve of all n tokens when ``solve``, the kernel "auto"
    chose, and the largest difference of the attention outputs."""
    import numpy as np

    import spherepde as sp
    from spherepde.interaction import KernelProblem, resolve_kernel

    x = np.random.default_rng(0).standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    model = sp.Model(beta=beta, d=d)
    q = x[:queries]
    model.velocity(q[:256], x[:256], kernel="auto")  # compile outside the timing
    t0 = time.perf_counter()
    model.velocity(q, x, kernel="auto")
    t_auto = (time.perf_counter() - t0) * n / queries
    t0 = time.perf_counter()
    ref = plain_numpy(q, x, beta)
    t_numpy = (time.perf_counter() - t0) * n / queries
    t_solve = float("nan")
    if solve:
        t0 = time.perf_counter()
        sp.ParticleSolver(model, scheme="euler", dt=0.01).solve(sp.measures.PointCloud(x),
                                                                [0.0, 0.01])
        t_solve = time.perf_counter() - t0
    err = float(np.abs(model.attention(q[:512], x, kernel="auto") - ref[:512]).max())
    a = np.random.default_rng(1).random((4000, 4000))
    peak = 2 * 4000**3 / min(timeit.repeat(lambda: a @ a, number=1, repeat=3)) / 1e9
    chosen = resolve_kernel("auto", KernelProblem(n, n, d, beta * float(np.linalg.norm(
        model.B, 2))))
    return {"auto": t_auto, "numpy": t_numpy, "solve": t_solve, "kernel": chosen, "err": err,
            "peak": peak, "gflops": 4.0 * n * n * d / t_auto / 1e9}


#: Field evaluations of the d = 64 cross-check run (validation/zonal_particles.py: RK4,
#: dt = 0.1, to t = 8): 80 steps of 4.
RUN_EVALUATIONS = 320


def run_child(threads, n, d, queries, solve):
    env = dict(os.environ, NUMBA_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    load = os.getloadavg()[0]
    out = subprocess.run([sys.executable, "-c", _CHILD, os.path.dirname(os.path.abspath(__file__)),
                          str(n), str(d), str(queries), "1" if solve else "0"],
                         capture_output=True, text=True, check=True, env=env)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result.update(threads=threads, load=(load, os.getloadavg()[0]))
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--queries", type=int, default=10_000,
                    help="queries timed against all n keys (scaled to n)")
    ap.add_argument("--solve-threads", type=int, nargs="*", default=[2],
                    help="thread counts that also time a one-step solve of all n tokens")
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _report import markdown_table, write

    rows = []
    for threads in (1, 2):
        r = run_child(threads, args.n, args.d, args.queries, threads in args.solve_threads)
        print(r, flush=True)
        rows.append(r)
    one = rows[0]
    table = markdown_table(
        ["threads", "kernel", "auto eval s", "numpy eval s", "one-step solve s",
         "numpy / auto", "speed-up of auto vs 1 thread", "speed-up of the solve",
         "max abs diff", "load before / after", "auto GFLOP/s", "dgemm peak GFLOP/s",
         f"run of {RUN_EVALUATIONS} evaluations h"],
        [[r["threads"], r["kernel"], r["auto"], r["numpy"], r["solve"], r["numpy"] / r["auto"],
          one["auto"] / r["auto"], one["solve"] / r["solve"], f"{r['err']:.1e}",
          "{:.1f} / {:.1f}".format(*r["load"]), r["gflops"], r["peak"],
          RUN_EVALUATIONS * r["auto"] / 3600] for r in rows])
    body = f"""## N = {args.n} tokens in d = {args.d}: one field evaluation and a one-step solve

Tokens uniform on S^(d-1), beta = 4, SA, Q = K = V = I, float64. Each thread count runs in a
fresh process (NUMBA_NUM_THREADS = OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = threads), each
call timed once. *auto*: `Model.velocity(q, x, kernel="auto")` for {args.queries} queries
against all N keys, scaled by N/{args.queries} to one whole evaluation; *numpy*: the plain
chunked softmax on the same queries (256 a chunk, logits by matmul, max shift, exp, second
matmul), scaled alike; *solve*: `ParticleSolver(model, scheme="euler",
dt=0.01).solve(x, [0, 0.01])` on all N tokens, one step, unscaled (nan: not run). The machine
has {os.cpu_count()} cores; the 1-minute load average before and after each process is in the
table (other jobs' load shows there). "max abs diff": auto's attention output against numpy's
on 512 queries. auto GFLOP/s counts the two matrix products, 4·N²·d flops (not the
exponentials); the dgemm peak is a 4000 × 4000 numpy matmul in the same process, best of 3.
The last column: the cross-check run of validation/zonal_particles.py (RK4, dt = 0.1, to
t = 8) at this N, {RUN_EVALUATIONS} evaluations at the auto time.

{table}
"""
    print(body)
    print(f"written to {write('particles_large', 'Particles at N = 10^5 in d = 64', body)}")


if __name__ == "__main__":
    main()
