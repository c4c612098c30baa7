"""The zonal solver's finite-beta field at many cells: the tabulated kernels against their
Chebyshev interpolant (per-evaluation time at the largest n the table allows, their largest
difference, memory), and whole solves at n = 10^4 cells (β = 64, d = 64, t ∈ [0, 8]) with
the interpolated field and multirate stepping.

Writes docs/benchmarks/zonal_field.md. ``--quick``: the table at n = 3000 (minutes under load
otherwise: the table costs 3n² Bessel evaluations). Run niced, NUMBA_NUM_THREADS=1.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import markdown_table, write

import spherepde as sp
from spherepde.density.zonal import MAX_TABLE_BYTES
from spherepde.interaction.zonal import ChebyshevZonalField, ZonalField

D, BETA, T_END = 64, 64.0, 8.0


def model(d=D, beta=BETA):
    """B = I, V = diag(1, 1/2, ..., 1/2): the Theorem 1 model of validation/high_dimension.py."""
    return sp.Model(V=np.diag([1.0] + [0.5] * (d - 1)), beta=beta, d=d)


def masses_of(n, d=D):
    """Cell masses of vMF(e, sqrt(d)) plus a floor (every cell carries mass)."""
    edges = np.linspace(0.0, np.pi, n + 1)
    th = 0.5 * (edges[1:] + edges[:-1])
    lm = np.sqrt(d) * np.cos(th) + (d - 2) * np.log(np.sin(th))
    m = np.exp(lm - lm.max()) + 1e-6
    return th, edges[1:-1], m / m.sum()


def per_call(f, arg, repeat=5):
    f(arg)
    t0 = time.perf_counter()
    for _ in range(repeat):
        f(arg)
    return (time.perf_counter() - t0) / repeat


def field_rows(n_table, n_big):
    rows = []
    th, faces, m = masses_of(n_table)
    e = np.eye(D)[0]
    t0 = time.perf_counter()
    table = ZonalField(model(), e, faces, th)
    build_table = time.perf_counter() - t0
    t0 = time.perf_counter()
    cheb = ChebyshevZonalField(model(), e, faces, th)
    build_cheb = time.perf_counter() - t0
    ref = table.speed(m)
    diff = np.abs(cheb.speed(m) - ref).max() / np.abs(ref).max()
    tt, tc = per_call(table.speed, m), per_call(cheb.speed, m)
    rows.append(["table", n_table, f"{24.0 * n_table * (n_table - 1) / 1e6:.0f}",
                 f"{build_table:.1f}", f"{1e3 * tt:.1f}", "1", "-"])
    rows.append(["chebyshev", n_table, f"{24.0 * cheb.nodes ** 2 / 1e6:.0f}",
                 f"{build_cheb:.1f}", f"{1e3 * tc:.1f}", f"{tt / tc:.1f}", f"{diff:.1e}"])
    th, faces, m = masses_of(n_big)
    t0 = time.perf_counter()
    big = ChebyshevZonalField(model(), e, faces, th)
    build_big = time.perf_counter() - t0
    tb = per_call(big.speed, m)
    rows.append(["chebyshev", n_big, f"{24.0 * big.nodes ** 2 / 1e6:.0f}", f"{build_big:.1f}",
                 f"{1e3 * tb:.1f}", f"{tt / tb:.1f}", "-"])
    return rows, cheb.nodes


def solve_rows(n, tols):
    rows = []
    rho0 = sp.measures.VonMisesFisher(np.eye(D)[0], np.sqrt(D))
    times = np.linspace(0.0, T_END, 9)
    for tol in tols:
        t0 = time.perf_counter()
        solver = sp.ZonalSolver(model(), n, stepping="multirate", macro_tol=tol)
        setup = time.perf_counter() - t0
        sol = solver.solve(rho0, times)
        wall = time.perf_counter() - t0
        st = sol.stats
        rows.append([n, solver.field_name, f"{tol:g}", st["fevals"], st["substeps"],
                     f"{setup:.1f}", f"{wall:.1f}",
                     f"{abs(sol.masses[-1].sum() - 1):.1e}", f"{sol.masses.min():.1e}"])
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--table-n", type=int, default=int(np.sqrt(MAX_TABLE_BYTES / 24)),
                    help="cells of the table reference (default: the largest it allows)")
    args = ap.parse_args()
    n_table = 3000 if args.quick else args.table_n
    frows, nodes = field_rows(n_table, 10_000)
    srows = solve_rows(10_000, (1e-3,) if args.quick else (1e-3, 1e-4))
    body = (
        f"Model: B = I, V = diag(1, 1/2, ..., 1/2), d = {D}, β = {BETA:g}, SA; masses of "
        f"vMF(e, √d) plus a floor of 1e-6 per cell. The Chebyshev field interpolates on "
        f"N = {nodes} nodes (order 16, bins of width 4/(β(|b1|+|b2|))). Times on 2 cores "
        "shared with other jobs: compare ratios within a run, not absolute figures.\n\n"
        "**One field evaluation** (θ̇ at the n − 1 faces); 'speedup' against the table at "
        "its n; 'max diff' relative to the largest speed.\n\n"
        + markdown_table(["field", "cells n", "tables MB", "build s", "ms / call", "speedup",
                          "max diff vs table"], frows)
        + f"\n\n**Whole solves**, ρ0 = vMF(e, √d), t ∈ [0, {T_END:g}], multirate stepping "
        "(field once per macro step; SSP-RK3 substeps at cfl 0.9): macro steps (field "
        "evaluations), substeps, setup and total wall time, mass error and smallest cell "
        "mass at the end.\n\n"
        + markdown_table(["cells n", "field", "macro_tol", "field evals", "substeps",
                          "setup s", "wall s", "|mass − 1|", "min mass"], srows))
    print(write("zonal_field", "Zonal field: tabulated against Chebyshev-interpolated kernels",
                body))


if __name__ == "__main__":
    main()
