"""Exact W2 between zonal measures (spherepde.wasserstein.zonal): time and certified bracket
against the cell count, for both costs, between two caps about +-e and a cap, and to the limit
measure; and the moment error of the product Gauss quadrature rules against n_theta.

Writes docs/benchmarks/zonal_w2.md. About a minute on one core.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import markdown_table, write

import spherepde as sp
from spherepde.wasserstein import zonal as Z

M = sp.measures


def w2_table(quick):
    e = np.array([0.0, 0.0, 1.0])
    cap = M.VonMisesFisher(e, 5.0)
    caps = M.Mixture([M.VonMisesFisher(e, 20.0), M.VonMisesFisher(-e, 8.0)], [0.3, 0.7])
    limit = Z.ZonalMarginal(thetas=[0.0, np.pi], weights=[0.5, 0.5], d=3)
    rows = []
    for n in ((1000, 4000) if quick else (1000, 4000, 10000)):
        A, B = (Z.ZonalMarginal.from_measure(m, e, n) for m in (cap, caps))
        for cost in ("geodesic", "chordal"):
            for name, other in (("cap vs two caps", B), ("two caps vs limit", limit)):
                first = B if other is limit else A
                t0 = time.perf_counter()
                r = Z.w2_zonal(first, other, cost=cost)
                dt = time.perf_counter() - t0
                lo, up = r.details["atoms_w2_squared_bracket"]
                rows.append([n, cost, name, f"{float(r):.8f}", f"{r.upper - r.lower:.2e}",
                             f"{up - lo:.1e}", f"{dt:.2f}", r.details["solver"].split("(")[0]])
    return markdown_table(["cells", "cost", "pair", "W2", "bracket width",
                           "atoms' W2^2 bracket", "seconds", "solver"], rows)


def quadrature_table():
    rows = []
    for d, kappa in ((2, 40.0), (3, 40.0), (8, 40.0), (64, 40.0)):
        mu = np.zeros(d)
        mu[-1] = 1.0
        cap = M.VonMisesFisher(mu, kappa)
        A = np.exp(M.log_bessel_i(d / 2, kappa) - M.log_bessel_i(d / 2 - 1, kappa))
        errs = []
        for n_t in (8, 16, 32, 64):
            rule = cap.quadrature(1, n_theta=n_t) if d == 2 else cap.quadrature(
                2 * n_t * n_t if d == 3 else 2 * (d - 1) * n_t, n_theta=n_t)
            errs.append(f"{abs(rule.mean() @ mu - A):.1e}")
        rows.append([d, kappa] + errs)
    return markdown_table(["d", "kappa", "n_theta = 8", "16", "32", "64"], rows)


def main(argv=None):
    quick = "--quick" in (argv or sys.argv[1:])
    body = ("## W2 between zonal measures on S^2\n\n"
            "Cells: `ZonalMarginal.from_measure(measure, e, n)` (half uniform on [0, pi], half "
            "on the support). Bracket width: the certified bracket on W2, dominated by the "
            "cells' spread (any law inside a cell). Atoms' W2^2 bracket: that of the 1-D "
            "solver alone (0: exact).\n\n" + w2_table(quick) + "\n\n"
            "## Product Gauss quadrature: error of E<mu, x> for vMF(mu, 40)\n\n"
            "|E_rule<mu, x> - A_d(kappa)| against the number of theta-nodes (d = 3: "
            "2 n_theta azimuths; d >= 4: one rotated cross-polytope per ring).\n\n"
            + quadrature_table())
    print(body)
    write("zonal_w2", "Zonal W2 and quadrature rules", body)


if __name__ == "__main__":
    main()
