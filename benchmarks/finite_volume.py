"""Finite-volume solver (issue 10): the cost of a step and the concentration curves. The
transport errors against the standard test cases are validation/transport.py.

1. ``cost``: wall time of one right-hand side (reconstruction + fluxes) and of one SSPRK3
   step of the zero-temperature dynamics at n = 64 ... 256 (6·256² = 393 216 cells), as a
   ratio to one numpy pass over the cell array (a memory-bound reference measured in the
   same run), with the numba thread count.
2. ``concentration``: W2(rho_t, Pi#rho0) (chordal) in the default scenario (B = rotation by
   0.9 about (1,1,1), A = diag(1, 0.4, 0), vMF(mean (0.4,0.3,1), kappa 1.5)) to t = 14 at
   several n and beta; at beta = inf against the closed form of the zero-temperature flow.

Run (from the repository root, so that this checkout's spherepde is imported):
      PYTHONPATH=. .venv/bin/python benchmarks/finite_volume.py cost [--n 64 128 256]
      PYTHONPATH=. .venv/bin/python benchmarks/finite_volume.py concentration [--beta inf 16]
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np


def cost(ns, repeat):
    import numba

    import spherepde as sp
    from spherepde.density.finite_volume import FiniteVolumeSolver

    model = sp.Model(K=np.eye(3), V=np.diag([1.0, 0.4, 0.0]), beta=math.inf)
    print(f"numba threads: {numba.get_num_threads()}")
    print("| n | cells | mesh build s | rhs ms | SSPRK3 step ms | numpy pass ms | step / pass |")
    print("|---|---|---|---|---|---|---|")
    for n in ns:
        t0 = time.perf_counter()
        solver = FiniteVolumeSolver(model, n)
        build = time.perf_counter() - t0
        m = solver.initial_masses(sp.measures.VonMisesFisher([0.4, 0.3, 1.0], 1.5))
        un = solver.field(0.0, m)
        solver.fv.tendency(m, un)  # compile
        best = lambda fn: min(_timed(fn) for _ in range(repeat))
        rhs = best(lambda: solver.fv.tendency(m, un))
        dt = solver.cfl / solver.fv.tendency(m, un)[1]
        step = best(lambda: solver.run(m, [0.0, dt]))  # one step of the positivity control
        ref = best(lambda: np.sqrt(m * 2.0 + 1.0).sum())
        print(f"| {n} | {solver.mesh.n_cells} | {build:.2f} | {1e3 * rhs:.2f} | "
              f"{1e3 * step:.2f} | {1e3 * ref:.3f} | {step / ref:.0f} |", flush=True)


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
    t0 = np.concatenate([0.5 * (b - a) * g + 0.5 * (b + a) for a, b in zip(edges[:-1], edges[1:])])
    tw = np.concatenate([0.5 * (b - a) * gw for a, b in zip(edges[:-1], edges[1:])])
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


def concentration(ns, betas, t_end, n_out):
    """W2(rho_t, Pi#rho0) in the default scenario for each beta and n; at beta = inf also its
    error against the closed form."""
    import spherepde as sp
    from spherepde.sphere import rotation_about_axis
    from spherepde.density.finite_volume import FiniteVolumeSolver

    O = rotation_about_axis([1, 1, 1], 0.9)
    mu0 = sp.measures.VonMisesFisher([0.4, 0.3, 1.0], 1.5)
    times = np.linspace(0.0, t_end, n_out)
    print("| beta | n | h | min W2 | t at min | W2(t_end) | max error vs closed form | steps | "
          "wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    curves = {}
    for beta in betas:
        model = sp.Model(K=O, V=np.diag([1.0, 0.4, 0.0]) @ O, beta=beta)
        ref = exact_w2_zero_temperature(model, mu0, times) if math.isinf(beta) else None
        for n in ns:
            solver = FiniteVolumeSolver(model, n)
            t0 = time.perf_counter()
            sol = solver.solve(mu0, times)
            wall = time.perf_counter() - t0
            vals = np.asarray(sp.w2_to_limit(sol).values)
            curves[(beta, n)] = vals
            i = int(np.argmin(vals))
            err = "" if ref is None else f"{np.max(np.abs(vals - ref)):.3e}"
            print(f"| {beta:g} | {n} | {solver.mesh.h:.4f} | {vals[i]:.4e} | {times[i]:.2f} | "
                  f"{vals[-1]:.4e} | {err} | {sol.stats['steps']} | {wall:.0f} |", flush=True)
        if ref is not None:
            print("closed form W2(t):", np.array2string(ref, precision=4), flush=True)
    np.savez("fv_concentration.npz", times=times,
             **{f"beta={b:g}_n={n}": v for (b, n), v in curves.items()})


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["cost", "concentration"])
    p.add_argument("--beta", type=float, nargs="+", default=[math.inf])
    p.add_argument("--t-end", type=float, default=14.0)
    p.add_argument("--n-out", type=int, default=57)
    p.add_argument("--n", type=int, nargs="+")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    if a.what == "cost":
        cost(a.n or [64, 128, 256], a.repeat)
    else:
        concentration(a.n or [32, 64, 128], a.beta, a.t_end, a.n_out)
