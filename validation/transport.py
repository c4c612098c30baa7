"""Finite-volume transport on the cubed sphere against the standard test cases.

Normalized l1/l2/linf errors of the cell averages (Williamson et al. 1992, eq. 82-84, area
weights) and the measured orders at n = 20, 40, 80 cells per cube edge for:

- Williamson et al. (1992) test 1: solid-body rotation of a cosine bell, one revolution in
  T = 12, over the poles (alpha = pi/2) and along a tilted path (alpha = pi/2 - 0.05);
- Lauritzen et al. (2012) nondivergent flow (= Nair & Lauritzen 2010 case 4, k = 2, T = 5):
  Gaussian hills and cosine bells;
- Lauritzen et al. (2012) divergent flow (k = 1, T = 5): Gaussian hills;

and, to show where the asymptotic regime starts, the nondivergent flow stopped at t = 1 (exact
solution by characteristics), as in tests/test_finite_volume.py. Every case returns to its
initial state at T, so the exact cell averages are those of the initial data, by the same 3 × 3
Gauss rule. Each row also gives the relative mass change, the smallest cell average (over the
largest exact one), the number of steps, and the wall and CPU time of the solve (the machine
may be shared: compare CPU times within one run only).

Run from the repository root (about 15 min of CPU on one core for the default runs):

    NUMBA_NUM_THREADS=1 .venv/bin/python validation/transport.py [--n 20 40 80] [--quick]
        [--reconstruction cubic] [--limiter positivity] [--cases ...]
"""
from __future__ import annotations

import argparse
import math
import time

import matplotlib.pyplot as plt
import numpy as np
from _common import publish, table

from spherepde.analysis import transport_cases as tc
from spherepde.density.finite_volume import TransportSolver

CASES = {
    # name: (velocity factory, initial field, end time, label)
    "sbr_poles_bell": (lambda: tc.solid_body_rotation(math.pi / 2), tc.cosine_bell, 12.0,
                       "Williamson 1, cosine bell, α = π/2"),
    "sbr_tilted_bell": (lambda: tc.solid_body_rotation(math.pi / 2 - 0.05), tc.cosine_bell, 12.0,
                        "Williamson 1, cosine bell, α = π/2 − 0.05"),
    "nondiv_gaussian": (tc.nondivergent_flow, tc.gaussian_hills, 5.0,
                        "nondivergent, Gaussian hills"),
    "nondiv_cosine_bells": (tc.nondivergent_flow, tc.cosine_bells, 5.0,
                            "nondivergent, cosine bells"),
    "div_gaussian": (tc.divergent_flow, tc.gaussian_hills, 5.0, "divergent, Gaussian hills"),
    "nondiv_gaussian_t1": (tc.nondivergent_flow, tc.gaussian_hills, 1.0,
                           "nondivergent, Gaussian hills, t = 1"),
}


def run(case, n, rec, limiter):
    vel_factory, f, T, _ = CASES[case]
    vel = vel_factory()
    s = TransportSolver(n, vel, limiter=limiter, reconstruction=rec, mass_rtol=math.inf)
    P, W = s.mesh.cell_quadrature(3)
    avg0 = np.sum(f(P) * W, axis=1) / s.mesh.areas
    w0, c0 = time.perf_counter(), time.process_time()
    sol = s.solve(avg0, [0.0, T])
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    if case.endswith("_t1"):
        x0 = tc.departure_points(tc.nondivergent_flow(), P.reshape(-1, 3), T, 25)
        exact = np.sum(f(x0).reshape(W.shape) * W, axis=1) / s.mesh.areas
    else:
        exact = avg0
    errs = tc.error_norms(sol.averages(1), exact, s.mesh.areas)
    dmass = abs(sol.mass(1) - sol.mass(0)) / sol.mass(0)
    return dict(errs=errs, h=s.mesh.h, dmass=dmass, min=float(sol.averages(1).min() / exact.max()),
                steps=sol.stats["steps"], wall=wall, cpu=cpu)


def main(ns, quick, runs):
    runs = runs if not quick else [("nondiv_gaussian_t1", "cubic", "positivity")]
    rows, curves = [], {}
    for case, rec, lim in runs:
        prev = None
        for n in ns:
            r = run(case, n, rec, lim)
            o = (["", "", ""] if prev is None else
                 [f"{math.log(p / e) / math.log(prev['h'] / r['h']):.2f}"
                  for p, e in zip(prev["errs"], r["errs"], strict=True)])
            prev = r
            curves.setdefault((case, rec, lim), []).append((n, r["errs"][1]))
            rows.append([CASES[case][3], rec, lim, n, *[float(e) for e in r["errs"]], *o,
                         f"{r['dmass']:.0e}", f"{r['min']:.1e}", r["steps"], f"{r['wall']:.0f}",
                         f"{r['cpu']:.0f}"])
            print(rows[-1], flush=True)
        report(ns, quick, rows, curves)


def report(ns, quick, rows, curves):
    """Write the table and the figure of the runs so far (after every case, so that a long
    run leaves its finished cases behind)."""
    header = ["case", "reconstruction", "limiter", "n", "l1", "l2", "linf", "order l1",
              "order l2", "order linf", "mass change", "min/max", "steps", "wall s", "CPU s"]
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for (case, rec, lim), pts in curves.items():
        n, e = np.array(pts).T
        ax.loglog(n, e, "o-", label=f"{CASES[case][3]} ({rec}, {lim})")
    n = np.array(ns, dtype=float)
    ax.loglog(n, 0.3 * (n / n[0]) ** -2.0, "k--", label="h²")
    ax.set_xlabel("n (cells per cube edge)")
    ax.set_ylabel("normalized l2 error")
    ax.legend(fontsize=6)
    text = (f"Normalized errors of the cell averages at the end time, cfl 0.9, SSPRK3, "
            f"n = {ns}; orders from consecutive n (h = mean cell diameter). Mass changes are "
            "relative; min/max is the smallest cell average over the largest exact one "
            "(≥ 0: positivity).\n\n" + table(rows, header))
    publish("transport" if not quick else "transport_quick", fig,
            "Finite-volume transport: standard test cases", text)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, nargs="+", default=[20, 40, 80])
    p.add_argument("--quick", action="store_true", help="only the t = 1 Gaussian hills")
    p.add_argument("--reconstruction", default="cubic", choices=["cubic", "quadratic", "linear"])
    # the default limiter only keeps positivity: smooth extrema are not clipped, as in the
    # unlimited convergence studies of the papers
    p.add_argument("--limiter", default="positivity",
                   choices=["positivity", "barth_jespersen", "none"])
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    a = p.parse_args()
    main(a.n, a.quick, [(c, a.reconstruction, a.limiter) for c in a.cases])
