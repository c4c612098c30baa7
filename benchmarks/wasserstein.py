"""Timings of spherepde.wasserstein: the exact solver and the multiscale bracket.

    .venv/bin/python benchmarks/wasserstein.py                  # clouds, 1e4 and 1e5 a side
    .venv/bin/python benchmarks/wasserstein.py --large          # + 1e6 tokens vs a circle
    .venv/bin/python benchmarks/wasserstein.py --mesh           # + 1e6 tokens vs a 4e5-cell mesh
                                                                #   (broad density; two caps;
                                                                #   --mesh-tokens for other sizes)
    .venv/bin/python benchmarks/wasserstein.py --threads 2      # numba threads per case
    .venv/bin/python benchmarks/wasserstein.py --circle         # tokens vs a great circle:
                                                                #   circle solver vs multiscale
    .venv/bin/python benchmarks/wasserstein.py --limit 1000000  # w2_to_limit on an N-token
                                                                #   trajectory, dim E = 1 and 2
    .venv/bin/python benchmarks/wasserstein.py --sparse         # concentrated pairs: sparse vs
                                                                #   quantized, exact at 1e4
    .venv/bin/python benchmarks/wasserstein.py --sweep 10000 100000
                                                                # seeded broad and concentrated
                                                                #   pairs under "auto": time,
                                                                #   width, the method it ended
                                                                #   with (docs/benchmarks/
                                                                #   wasserstein.md)

Every case runs in its own process, so the peak memory (max RSS) printed is that case's.
Times are wall and CPU seconds. "ratio" is multiscale / exact at the same size; "/ref" is
the case's time over the exact solve of the largest size exact runs at (1e4 by default), in
the same run: the machine may be shared, so compare ratios, not seconds. Nothing is asserted
(timings belong here, not in tests/).
"""
import argparse
import multiprocessing as mp
import os
import resource
import time

import numpy as np

import spherepde as sp
from spherepde.sphere import normalize
from spherepde.sphere.cubed_sphere import CubedSphere


def mesh_snapshot(n=256):
    """A finite-volume snapshot: cell masses rho(centre) x area on the solver's cubed-sphere
    mesh (6 n^2 = 393,216 cells at n = 256), for a smooth rho (no solve needed)."""
    mesh = CubedSphere(n)
    rho = (0.6 * sp.measures.VonMisesFisher([0, 0, 1.0], 4.0).density(mesh.centers)
           + 0.4 / (4 * np.pi))
    return sp.PointCloud(mesh.centers, rho * mesh.areas, normalize=True)


def two_caps():
    """Tokens of a run that has clustered: two von Mises-Fisher caps (kappa 100 and 60) near
    two antipodal directions."""
    d1, d2 = normalize(np.array([0.2, 0.1, 1.0])), normalize(np.array([-0.1, 0.3, -1.0]))
    return sp.measures.Mixture([sp.measures.VonMisesFisher(d1, 100.0),
                                sp.measures.VonMisesFisher(d2, 60.0)], [0.55, 0.45])


def caps_mesh_snapshot(n=256):
    """The two-cap law integrated on the cells (cell masses at the cell centres, the
    finite-volume solution's measure); most cells carry < 1e-30 of the mass."""
    mesh = CubedSphere(n)
    return sp.PointCloud(mesh.centers, mesh.integrate_cells(two_caps().density), normalize=True)


def circle(n, seed=3):
    """n tokens pushed onto the equator by Pi(x) = P_E x/|P_E x| (the dim E = 2 limit)."""
    x = sp.measures.VonMisesFisher([0.3, 0.2, 1.0], 1.0).sample(n, seed)
    p = x.copy()
    p[:, 2] = 0.0
    return sp.PointCloud(normalize(p))


def make_case(name, n):
    if name == "clouds":
        mu = sp.PointCloud(sp.measures.VonMisesFisher([0, 0, 1.0], 2.0).sample(n, 1))
        nu = sp.PointCloud(sp.measures.Uniform(3).sample(n, 2))
    elif name == "tokens-mesh":
        nu = mesh_snapshot(256)
        mix = sp.measures.Mixture([sp.measures.VonMisesFisher([0, 0, 1.0], 4.0),
                                   sp.measures.Uniform(3)], [0.6, 0.4])
        mu = sp.PointCloud(mix.sample(n, 5))
    elif name.startswith("caps-mesh"):
        # "caps-mesh" on the 6 x 256^2 mesh, "caps-mesh64" on 6 x 64^2 cells (the study's)
        nu = caps_mesh_snapshot(int(name[len("caps-mesh"):] or 256))
        mu = sp.PointCloud(two_caps().sample(n, 5))
    elif name == "caps-clouds":
        # two concentrated clouds, sampled independently from the same two-cap law
        mu = sp.PointCloud(two_caps().sample(n, 5))
        nu = sp.PointCloud(two_caps().sample(n, 7))
    elif name == "vmf-45":
        # broad and 45 degrees apart (W2 ~ 0.57): large transport over the cluster spacing
        mu = sp.PointCloud(sp.measures.VonMisesFisher([0, 0, 1.0], 2.0).sample(n, 3))
        nu = sp.PointCloud(sp.measures.VonMisesFisher([0, 1.0, 1.0], 3.0).sample(n, 4))
    elif name == "vmf-near":
        # broad and close: vMF kappa 2 against the uniform measure
        mu = sp.PointCloud(sp.measures.VonMisesFisher([0, 0, 1.0], 2.0).sample(n, 1))
        nu = sp.PointCloud(sp.measures.Uniform(3).sample(n, 2))
    elif name == "caps-45":
        # concentrated (kappa 100) and 45 degrees apart
        mu = sp.PointCloud(sp.measures.VonMisesFisher([0, 0, 1.0], 100.0).sample(n, 3))
        nu = sp.PointCloud(sp.measures.VonMisesFisher([0, 1.0, 1.0], 100.0).sample(n, 4))
    elif name == "tokens-circle":
        mu = sp.PointCloud(sp.measures.VonMisesFisher([0.3, 0.2, 1.0], 1.0).sample(n, 4))
        nu = circle(n)
    else:
        raise ValueError(name)
    return mu, nu


def run(name, n, method, tol, threads, options, queue):
    if threads:
        import numba

        numba.set_num_threads(threads)
    mu, nu = make_case(name, n)
    w0, c0 = time.perf_counter(), time.process_time()
    r = sp.w2(mu, nu, method=method, tol=tol, **(options or {}))
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    queue.put((float(r), r.lower, r.upper, r.method, wall, cpu, rss, mu.n, nu.n,
               r.details.get("auto", "")))


def _spawned(target, *args):
    """target(*args, queue) in a fresh process (its own peak memory); what it puts."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=target, args=(*args, q))
    p.start()
    out = q.get()
    p.join()
    return out


def in_child(name, n, method, tol, threads, options=None):
    return _spawned(run, name, n, method, tol, threads, options)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="*", default=[10000, 100000])
    ap.add_argument("--large", action="store_true", help="1e6 tokens vs a great circle")
    ap.add_argument("--mesh", action="store_true",
                    help="tokens vs a 393,216-cell mesh: a broad density and two concentrated caps")
    ap.add_argument("--mesh-tokens", type=int, nargs="*", default=[1_000_000],
                    help="token counts of the --mesh cases")
    ap.add_argument("--mesh-quantize", type=float, default=0.0,
                    help="quantize= for the --mesh cases (0: the solver's own choice, which "
                         "stops more than 500,000 tokens at a clustering of quantization error "
                         "<= 1.5 tol; see docs/methods.md)")
    ap.add_argument("--circle", type=int, nargs="*", default=None,
                    help="tokens vs a great circle at these sizes (default 1e4 1e5 1e6): the "
                         "circle solver against the multiscale path it replaces, in one run")
    ap.add_argument("--circle-old-max", type=int, default=1_000_000,
                    help="largest size at which the multiscale path also runs")
    ap.add_argument("--limit", type=int, nargs="*", default=None,
                    help="w2_to_limit on N-token trajectories, dim E = 1 and 2 (default N = 1e6)")
    ap.add_argument("--quantized", type=int, nargs="*", default=None,
                    help="two-cap tokens (default 1e5 1e6) against the caps' cell masses on "
                         "the 6 x 64^2 mesh: the exact solve between clusterings beside the "
                         "multiscale solver, in one run")
    ap.add_argument("--sparse", type=int, nargs="*", default=None,
                    help="token counts: the sparse and quantized solvers on two-cap clouds and "
                         "two-cap tokens against the 6 x 256^2 mesh (default 1e5)")
    ap.add_argument("--sparse-cases", nargs="*", default=["caps-clouds", "caps-mesh"])
    ap.add_argument("--sweep", type=int, nargs="*", default=None,
                    help="seeded broad and concentrated pairs under auto at these sizes")
    ap.add_argument("--sweep-cases", nargs="*", default=["vmf-near", "vmf-45", "caps-45",
                                                          "caps-clouds"])
    ap.add_argument("--tol", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=0,
                    help="numba threads per case (0: numba's default)")
    ap.add_argument("--exact-max", type=int, default=10000, help="largest n solved exactly")
    args = ap.parse_args()
    print(f"multiscale (tol = {args.tol:g} on the W2 bracket) against exact emd, chordal cost, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'case':>14} {'n':>8} {'m':>8} {'method':>10} {'wall s':>8} {'cpu s':>8} "
          f"{'GiB':>5} {'W2':>10} {'width':>9} {'ratio':>6} {'/ref':>6}")
    cases = [("clouds", n) for n in args.sizes]
    if args.large:
        cases += [("tokens-circle", 1_000_000)]
    if args.mesh:
        cases += [(name, n) for name in ("tokens-mesh", "caps-mesh") for n in args.mesh_tokens]
    if args.circle is not None:
        circle_cases(args.circle or [10_000, 100_000, 1_000_000], args)
        return
    if args.limit is not None:
        limit_cases(args.limit or [1_000_000], args)
        return
    if args.sparse is not None:
        sparse_cases(args.sparse or [100_000], args)
        return
    if args.sweep is not None:
        sweep_cases(args.sweep or [10_000, 100_000], args)
        return
    if args.quantized is not None:
        for n in args.quantized or [100_000, 1_000_000]:
            for method in ("quantized", "multiscale"):
                r = in_child("caps-mesh64", n, method, args.tol, args.threads)
                print(f"{'caps-mesh64':>14} {r[7]:>8} {r[8]:>8} {method:>10} {r[4]:>8.2f} "
                      f"{r[5]:>8.2f} {r[6]:>5.2f} {r[0]:>10.6f} {r[2] - r[1]:>9.1e}  "
                      f"[{r[1]:.6f}, {r[2]:.6f}]", flush=True)
        return
    ref = None
    for name, n in cases:
        ex = None
        if name == "clouds" and n <= args.exact_max:
            ex = in_child(name, n, "exact", args.tol, args.threads)
            ref = ex[4]  # sizes ascend: the largest exact solve is the reference
            print(f"{name:>14} {ex[7]:>8} {ex[8]:>8} {'exact':>10} {ex[4]:>8.2f} {ex[5]:>8.2f} "
                  f"{ex[6]:>5.2f} {ex[0]:>10.6f} {0.0:>9.1e}")
        opts = ({"quantize": args.mesh_quantize} if name.endswith("mesh") and args.mesh_quantize > 0
                else None)
        ms = in_child(name, n, "multiscale", args.tol, args.threads, opts)
        ratio = f"{ms[4] / ex[4]:>6.2f}" if ex else f"{'':>6}"
        vs_ref = f"{ms[4] / ref:>6.2f}" if ref else f"{'':>6}"
        inside = "" if ex is None else ("  exact inside" if ms[1] <= ex[0] <= ms[2]
                                        else "  EXACT OUTSIDE")
        print(f"{name:>14} {ms[7]:>8} {ms[8]:>8} {'multiscale':>10} {ms[4]:>8.2f} {ms[5]:>8.2f} "
              f"{ms[6]:>5.2f} {ms[0]:>10.6f} {ms[2] - ms[1]:>9.1e} {ratio} {vs_ref}{inside}",
              flush=True)


def sweep_cases(sizes, args):
    """Each pair under method="auto" at the default tol (1e-3): wall time, bracket width, the
    method it ended with and whether tol was met; the table goes to docs/benchmarks/."""
    from _report import markdown_table, write

    rows = []
    load0 = os.getloadavg()[0]
    for n in sizes:
        for name in args.sweep_cases:
            r = in_child(name, n, "auto", 1e-3, args.threads)
            width = r[2] - r[1]
            rows.append([name, n, r[3], round(r[4], 1), f"{width:.1e}", width <= 1e-3,
                         f"[{r[1]:.5f}, {r[2]:.5f}]", round(os.getloadavg()[0], 1)])
            print(*rows[-1], r[9], sep="  ", flush=True)
    header = ["pair", "n = m", "auto ended with", "wall s", "width", "tol met", "bracket",
              "load"]
    body = (f"Seeded pairs (benchmarks/wasserstein.py make_case) under method=\"auto\", chordal "
            f"cost, tol = 1e-3, each in its own process, one after the other. The machine was "
            f"shared ({os.cpu_count()} CPUs, load average {load0:.1f} at the start; the last "
            f"column is the load when each case ended): compare the rows with each other, not "
            f"with another machine.\n\n" + markdown_table(header, rows))
    print(write("wasserstein", "W2 under \"auto\": broad and concentrated pairs", body))


def limit_run(n, dim_e, threads, queue):
    """w2_to_limit on a zero-temperature trajectory of n tokens (default scenario's B, vMF
    start) at t = 0, 2, 6, 14, where the cloud goes from broad to concentrated on the limit."""
    if threads:
        import numba

        numba.set_num_threads(threads)
    from spherepde.sphere import rotation_about_axis

    O = rotation_about_axis([1.0, 1.0, 1.0], 0.9)
    S = np.diag([1.0, 0.4, 0.0] if dim_e == 1 else [1.0, 1.0, 0.4])
    model = sp.Model(K=O, V=S @ O, beta=np.inf)
    x0 = sp.measures.VonMisesFisher([0.4, 0.3, 1.0], 1.5).sample(n, 1)
    w0 = time.perf_counter()
    traj = sp.ParticleSolver(model, rtol=1e-5, atol=1e-7).solve(x0, [0.0, 2.0, 6.0, 14.0])
    w1, c1 = time.perf_counter(), time.process_time()
    curve = sp.w2_to_limit(traj)
    wall, cpu = time.perf_counter() - w1, time.process_time() - c1
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    queue.put((w1 - w0, wall, cpu, rss, np.asarray(curve.values), np.asarray(curve.lower),
               np.asarray(curve.upper), list(curve.methods)))


def limit_cases(sizes, args):
    """W2(mu^N_t, Pi#mu^N_0) along an N-token trajectory, dim E = 1 (two atoms) and 2 (a
    great circle), each case in its own process; "ratio" is the w2_to_limit time over the
    particle run's."""
    print(f"{'dim E':>5} {'N':>8} {'solve s':>8} {'limit s':>8} {'CPU s':>7} {'GiB':>5} "
          f"{'ratio':>6}  W2 [width] at t = 0, 2, 6, 14; methods")
    for n in sizes:
        for dim_e in (1, 2):
            solve, wall, cpu, rss, val, lo, hi, methods = _spawned(limit_run, n, dim_e,
                                                                   args.threads)
            # one value and one bracket per time of the same curve
            pts = ", ".join(f"{v:.6f} [{h - l:.1e}]"
                            for v, l, h in zip(val, lo, hi, strict=True))
            print(f"{dim_e:>5} {n:>8} {solve:>8.1f} {wall:>8.1f} {cpu:>7.1f} {rss:>5.2f} "
                  f"{wall / solve:>6.2f}  {pts}; {', '.join(sorted(set(methods)))}", flush=True)


def sparse_cases(sizes, args):
    """Concentrated pairs (the study's late snapshots), where the multiscale solver breaks down:
    the network simplex on a priced sparse support against the exact solve between
    clusterings, each in its own process; the reference is the exact LP on 10^4 two-cap
    clouds, in the same run ("/ref" is a case's wall time over it)."""
    ref = in_child("caps-clouds", 10_000, "exact", args.tol, args.threads)
    print(f"{'caps-clouds':>14} {ref[7]:>8} {ref[8]:>8} {'exact':>10} {ref[4]:>8.2f} "
          f"{ref[5]:>8.2f} {ref[6]:>5.2f} {ref[0]:>10.6f} {0.0:>9.1e} {'':>6} {1.0:>6.2f}",
          flush=True)
    sp_ = in_child("caps-clouds", 10_000, "sparse", args.tol, args.threads)
    inside = "exact inside" if sp_[1] <= ref[0] <= sp_[2] else "EXACT OUTSIDE"
    print(f"{'caps-clouds':>14} {sp_[7]:>8} {sp_[8]:>8} {'sparse':>10} {sp_[4]:>8.2f} "
          f"{sp_[5]:>8.2f} {sp_[6]:>5.2f} {sp_[0]:>10.6f} {sp_[2] - sp_[1]:>9.1e} {'':>6} "
          f"{sp_[4] / ref[4]:>6.2f}  {inside}", flush=True)
    for name in args.sparse_cases:
        for n in sizes:
            for method in ("sparse", "quantized"):
                r = in_child(name, n, method, args.tol, args.threads)
                print(f"{name:>14} {r[7]:>8} {r[8]:>8} {method:>10} {r[4]:>8.2f} {r[5]:>8.2f} "
                      f"{r[6]:>5.2f} {r[0]:>10.6f} {r[2] - r[1]:>9.1e} {'':>6} "
                      f"{r[4] / ref[4]:>6.2f}  [{r[1]:.6f}, {r[2]:.6f}]", flush=True)


def circle_cases(sizes, args):
    """n vMF tokens against n atoms on a great circle (the projection of other tokens, the
    dim E = 2 limit): the circle solver, and the multiscale solver that auto used before it,
    each in its own process; "ratio" is circle / multiscale wall time."""
    print(f"\n{'case':>14} {'n':>8} {'m':>8} {'method':>10} {'wall s':>8} {'cpu s':>8} "
          f"{'GiB':>5} {'W2':>10} {'width':>9} {'ratio':>6}")
    for n in sizes:
        new = in_child("tokens-circle", n, "circle", args.tol, args.threads)
        old = (in_child("tokens-circle", n, "multiscale", args.tol, args.threads)
               if n <= args.circle_old_max else None)
        for label, res in (("circle", new), ("multiscale", old)):
            if res is None:
                continue
            ratio = f"{new[4] / old[4]:>6.3f}" if (old and label == "circle") else f"{'':>6}"
            print(f"{'tokens-circle':>14} {res[7]:>8} {res[8]:>8} {label:>10} {res[4]:>8.2f} "
                  f"{res[5]:>8.2f} {res[6]:>5.2f} {res[0]:>10.6f} {res[2] - res[1]:>9.1e} {ratio}",
                  flush=True)
        if old:
            agree = max(new[1], old[1]) <= min(new[2], old[2])
            print(f"{'':>14} brackets {'overlap' if agree else 'DISAGREE'}: circle "
                  f"[{new[1]:.6f}, {new[2]:.6f}], multiscale [{old[1]:.6f}, {old[2]:.6f}]",
                  flush=True)


if __name__ == "__main__":
    main()
