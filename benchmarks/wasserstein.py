"""Timings of spherepde.wasserstein (docs/theory.md §4 targets: semi-discrete under a second for a
10^5-node grid density against two atoms; exact network simplex up to ~2e4 points a side).

    .venv/bin/python benchmarks/wasserstein.py            # default sizes
    .venv/bin/python benchmarks/wasserstein.py 1000 5000  # exact emd at chosen sizes

Prints a table; nothing is asserted (timings belong here, not in tests/).
"""
import sys
import time

import numpy as np

import spherepde as sp
from spherepde.sphere import GaussGrid, normalize


def grid_snapshot(nlat, nlon):
    g = GaussGrid(nlat, nlon)
    pts = g.points.reshape(-1, 3)
    rho = 0.6 * sp.measures.VonMisesFisher([0, 0, 1.0], 4.0).density(pts) + 0.4 / (4 * np.pi)
    return sp.PointCloud(pts, g.weights.ravel() * rho, normalize=True)


def best_of(f, repeat=3):
    out, best = None, np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t0)
    return out, best


def main(exact_sizes):
    print("semi-discrete: grid density (nlat x nlon nodes) vs atoms, chordal cost")
    print(f"{'nodes':>8} {'atoms':>6} {'seconds':>9} {'W2':>14} {'error':>9} {'band':>6}")
    e = normalize(np.array([0.3, -0.5, 0.8]))
    for nlat, atoms in ((224, 2), (224, 8), (316, 2)):
        mu = grid_snapshot(nlat, 2 * nlat)
        if atoms == 2:
            nu = sp.PointCloud(np.stack([e, -e]), [0.35, 0.65])
        else:
            rng = np.random.default_rng(0)
            nu = sp.PointCloud(normalize(rng.standard_normal((atoms, 3))), rng.random(atoms) + 0.2,
                               normalize=True)
        r, t = best_of(lambda: sp.w2(mu, nu, method="semidiscrete"))
        print(f"{mu.n:>8} {atoms:>6} {t:>9.3f} {float(r):>14.10f} {r.error:>9.1e} "
              f"{r.details['band_points']:>6}")
    print("\nexact network simplex (POT emd), n points vs n points, chordal cost")
    print(f"{'n':>8} {'seconds':>9} {'W2':>12}")
    for n in exact_sizes:
        mu = sp.PointCloud(sp.measures.VonMisesFisher([0, 0, 1.0], 2.0).sample(n, 1))
        nu = sp.PointCloud(sp.measures.Uniform(3).sample(n, 2))
        r, t = best_of(lambda: sp.w2(mu, nu, method="exact"), repeat=1)
        print(f"{n:>8} {t:>9.3f} {float(r):>12.8f}")
    print("\nsinkhorn (debiased, epsilon = 2e-3 x diameter^2), n vs n, against exact")
    print(f"{'n':>8} {'seconds':>9} {'W2':>12} {'exact':>12} {'error':>9}")
    for n in (500, 2000):
        mu = sp.PointCloud(sp.measures.VonMisesFisher([0, 0, 1.0], 2.0).sample(n, 1))
        nu = sp.PointCloud(sp.measures.Uniform(3).sample(n, 2))
        r, t = best_of(lambda: sp.w2(mu, nu, method="sinkhorn"), repeat=1)
        ex = sp.w2(mu, nu, method="exact")
        print(f"{n:>8} {t:>9.3f} {float(r):>12.8f} {float(ex):>12.8f} {r.error:>9.1e}")


if __name__ == "__main__":
    sizes = [int(s) for s in sys.argv[1:]] or [1000, 2000, 5000]
    main(sizes)
