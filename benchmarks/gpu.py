"""The finite-volume field evaluation on a CUDA device against the CPU path, in one run.

The finite-volume solver's expensive step is the attention field at the edge points of the
cubed sphere from the current cell masses (``CellHarmonic``: cell masses spread over a q x q
Gauss rule per cell -> harmonic moments -> field, exact sums where the harmonic bound is too
loose). On a GPU the same quantity can be summed directly: every edge point against every
cell node, the log-sum-exp softmax of ``spherepde.interaction.torch_backend``. This script
times both on the same mesh, state and model (the default scenario at beta = 1000), and
reports the GPU sum's difference to the CPU field relative to |V|_2, which the CPU path
guarantees to its ``velocity_tol``.

States: the initial vMF density, and a concentrated one (two vMF caps of concentration 100
at +-e, the shape rho_t takes near the plateau). At n = 256 the GPU sum is timed on all
queries; the CPU path once (it takes seconds).

Run (from the repository root; needs torch with CUDA):
      PYTHONPATH=. python benchmarks/gpu.py [--n 64 128 256] [--out DIR]
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def _states(model, mesh, mu0):
    import spherepde as sp

    e = model.dominant_subspace()[:, 0]
    caps = sp.measures.Mixture([sp.measures.VonMisesFisher(e, 100.0),
                                sp.measures.VonMisesFisher(-e, 100.0)], [0.6, 0.4])
    return {"initial": mu0, "concentrated": caps}


def _gpu_field(op, rho, dtype, repeat):
    """The attention at the operator's queries by direct summation on the GPU, and the best
    wall time of ``repeat`` (synchronised)."""
    import torch

    from spherepde.interaction.torch_backend import attention_tensors

    model = op.model
    B, V = np.asarray(model.B, float), np.asarray(model.V, float)
    nodes = op._nodes
    w = op._node_weights(rho)
    keep = w > 0
    dev = torch.device("cuda")
    q = torch.as_tensor(op._queries, dtype=dtype, device=dev)
    keys = torch.as_tensor(nodes[keep] @ B.T, dtype=dtype, device=dev)
    vals = torch.as_tensor(nodes[keep] @ V.T, dtype=dtype, device=dev)
    logw = torch.as_tensor(np.log(w[keep]), dtype=dtype, device=dev)
    best, out = np.inf, None
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out, _ = attention_tensors(q, keys, vals, logw, float(model.beta), model.normalized)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return out.double().cpu().numpy(), best


def field(ns, beta, repeat):
    import torch

    import spherepde as sp
    from spherepde.app.config import DEFAULT
    from spherepde.app.scenario import build_initial, build_model

    model = build_model(DEFAULT, beta)
    mu0 = build_initial(DEFAULT)
    vnorm = float(np.linalg.norm(np.asarray(model.V, float), 2))
    rows = []
    for n in ns:
        solver = sp.FiniteVolumeSolver(model, n, path="harmonic")
        op, mesh = solver.operator, solver.mesh
        for name, mu in _states(model, mesh, mu0).items():
            nodes, wq = mesh.cell_quadrature(4)
            masses = np.sum(wq * mu.density(nodes), axis=1)
            rho = masses / masses.sum() / mesh.areas  # the cap's quadrature, renormalised
            op.attention(rho)  # plans and caches warm
            t0 = time.perf_counter()
            cpu, _ = op.attention(rho)
            t_cpu = time.perf_counter() - t0
            cpu = cpu.reshape(-1, 3)
            for label, dtype in (("float64", torch.float64), ("float32", torch.float32)):
                _gpu_field(op, rho, dtype, 1)  # warm up
                gpu, t_gpu = _gpu_field(op, rho, dtype, repeat)
                # compare the tangent parts, as the fluxes see them
                x = op._queries
                diff = gpu - cpu
                diff -= np.sum(diff * x, axis=1, keepdims=True) * x
                err = float(np.abs(diff).max()) / vnorm
                rows.append([n, mesh.n_cells, op._queries.shape[0], op._nodes.shape[0], name,
                             label, t_cpu, t_gpu, t_cpu / t_gpu, err, solver.velocity_tol])
                print(rows[-1], flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--beta", type=float, default=1000.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None, help="folder for gpu_field.md (default docs/benchmarks)")
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("torch is not installed: nothing to measure", file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 0
    import numba
    from _report import markdown_table, write

    rows = field(args.n, args.beta, args.repeat)
    header = ["n", "cells", "queries", "cell nodes", "state", "GPU dtype", "CPU s", "GPU s",
              "CPU / GPU", "max |GPU - CPU| / |V|", "CPU velocity_tol"]
    body = (f"Device: {torch.cuda.get_device_name()}; CPU path with {numba.get_num_threads()} "
            f"numba threads on the same machine; beta = {args.beta:g}, default scenario.\n\n"
            + markdown_table(header, rows))
    print(body)
    write("gpu_field", "Finite-volume field evaluation: GPU direct sums against the CPU path",
          body, directory=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
