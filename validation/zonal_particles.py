"""Particles against the zonal solver in d = 8 and 64 at β = 16 and 64, t ∈ [0, 8].

The comparison is made where it can work. A token's own term in the softmax weighs e^{β}/N;
the rest weigh about e^{β}·N·E[e^{−β|x−y|²/2}] ≈ e^{β}·N·(1 + 2β/κ)^{−(d−1)/2} for tokens
drawn from vMF(e, κ). Below N ≈ (1 + 2β/κ)^{(d−1)/2} each token attends mostly to itself and
the cloud is no sample of the mean field (docs/methods.md, "Particles at β = 64 in high d").
So the start is vMF(e, κ) with κ = β(d − 1)/ln(N_ref/100), N_ref = 1000: then
(1 + 2β/κ)^{(d−1)/2} ≈ N_ref/100, about 100 tokens share each token's attention at
N = N_ref and the self term carries ~1% of it, ~4% at N = 250 (measured: "self share").

Model: Q = K = I (B = I), V = diag(v1, v2, ..., v2) = diag(0.3, 0.2, ..., 0.2), SA; both
commute with the rotations fixing e = e1, as the zonal solver requires. Near e a token's θ
decays at the rate ≈ v1 − v2 β/(β + κ) (the softmax-weighted mean of V x_j has the axial part
v1 cos θ̄ e and the perpendicular part v2 β/(β + κ) sin θ u of a Gaussian cap), so the cap
shrinks about tenfold by t = 8, and e is the stable top eigenvector of V (the cloud's mean,
off the axis by ~θ/√N, returns at the rate v1 − v2). With v2 > v1 the zonal state is
unstable: a cloud collapses about its own mean, which P_x V x then drives away from e.
β/(β + κ) = L/(d − 1 + L), L = ln(N_ref/100): the perpendicular coupling b2 (the Bessel
factor of the zonal field) moves the rate by v2·L/(d − 1 + L), a quarter of it at d = 8 and
1/30 at d = 64, which the particles resolve only in low d; the column "b2 = 0" measures it.

Compared: the θ-marginals, by the exact 1-D geodesic W2 (w2_zonal: monotone coupling;
between a cloud and cells the value takes the constant density inside each cell, and the
bracket holds for any law inside them):

    D(t) = W2_θ(particles 4N, zonal fine)        against
    E(t) = W2_θ(particles N, particles 4N) + W2_θ(zonal coarse, zonal fine),

the particles' sampling error (the N cloud's, about twice the 4N cloud's) plus the cells'.
"confirmed" where D(t) <= E(t) at every output time. Particles: RK4, dt = 0.1 (the field's
rates are <= 1: a step error ~1e-6 relative, far below the sampling error ~N^{-1/2}); the two
clouds are independent samples.

Run: .venv/bin/python validation/zonal_particles.py --quick   (N = 250/1000, n = 800/1600)
     .venv/bin/python validation/zonal_particles.py           (N = 1000/4000, n = 1600/3200)
"""
import argparse
import math
import time

import matplotlib.pyplot as plt
import numpy as np
from _common import publish, table
from scipy import special

import spherepde as sp
from spherepde.wasserstein.zonal import ZonalMarginal, theta_of, w2_zonal

#: κ is set so that N_REF tokens give each token about NEIGHBOURS others to attend to
N_REF, NEIGHBOURS = 1000, 100
V_AXIS, V_PERP = 0.3, 0.2
DIMS, BETAS = (8, 64), (16.0, 64.0)


def start_kappa(d, beta):
    """κ with (1 + 2β/κ)^{(d−1)/2} ≈ e^{β(d−1)/κ} = N_REF/NEIGHBOURS."""
    return beta * (d - 1) / math.log(N_REF / NEIGHBOURS)


def axial_model(d, beta, b2=1.0):
    """Q = diag(1, b2, ..., b2), K = I (so B = Q), V = diag(V_AXIS, V_PERP, ..., V_PERP)."""
    return sp.Model(Q=np.diag([1.0] + [b2] * (d - 1)),
                    V=np.diag([V_AXIS] + [V_PERP] * (d - 1)), beta=beta, d=d)


def self_share(x, model):
    """The mean over tokens of the softmax weight a token puts on itself, x: (N, d)."""
    logits = model.beta * (x @ model.B @ x.T)
    return float(np.mean(np.exp(np.diag(logits) - special.logsumexp(logits, axis=1))))


def cloud(thetas, d):
    """The θ-marginal of a token cloud (atoms of mass 1/N), thetas: (N,)."""
    return ZonalMarginal(thetas=thetas, weights=np.full(thetas.size, 1.0 / thetas.size), d=d)


def cells(sol, i):
    return ZonalMarginal(sol.theta_edges, sol.cell_masses(i), d=sol.d)


def w2_theta(a, b):
    """Geodesic 1-D W2 between two θ-marginals: (value, bracket width)."""
    r = w2_zonal(a, b, cost="geodesic")
    return float(r), r.upper - r.lower


def particle_thetas(model, rho0, n_tokens, times, seed):
    """θ of every token at every output time, (T, N), the initial self share, wall seconds."""
    e = np.eye(model.d)[0]
    x0 = np.asarray(rho0.sample(n_tokens, seed=seed))
    t0 = time.perf_counter()
    traj = sp.ParticleSolver(model, scheme="rk4", dt=0.1).solve(sp.measures.PointCloud(x0), times)
    wall = time.perf_counter() - t0
    return theta_of(traj.positions.reshape(-1, model.d), e).reshape(times.size, -1), \
        self_share(x0, model), wall


def run_case(d, beta, ns, tokens, times):
    """The curves D, the particles' and the cells' errors, the signal W2_θ(zonal_t, zonal_0),
    the bracket widths, D against a wrong field's solution, the self shares, the median θ of
    both methods at the end, and the wall times."""
    model, kappa = axial_model(d, beta), start_kappa(d, beta)
    rho0 = sp.measures.VonMisesFisher(np.eye(d)[0], kappa)
    t0 = time.perf_counter()
    coarse, fine = (sp.ZonalSolver(model, n, field="chebyshev").solve(rho0, times) for n in ns)
    zonal_wall = time.perf_counter() - t0
    # the power of the comparison: the zonal solution without the perpendicular coupling
    # (b2 = 0, no Bessel factor in the field) against the same particles
    blind = sp.ZonalSolver(axial_model(d, beta, b2=0.0), ns[1]).solve(rho0, times)
    (th_n, share_n, wall_n), (th_4n, share_4n, wall_4n) = (
        particle_thetas(model, rho0, n, times, seed=n) for n in tokens)
    out = {k: np.zeros(times.size)
           for k in ("D", "particles", "cells", "signal", "bracket", "D_b2_0")}
    for i in range(times.size):
        out["D"][i], out["bracket"][i] = w2_theta(cloud(th_4n[i], d), cells(fine, i))
        out["particles"][i] = w2_theta(cloud(th_n[i], d), cloud(th_4n[i], d))[0]
        out["cells"][i] = w2_theta(cells(coarse, i), cells(fine, i))[0]
        out["signal"][i] = w2_theta(cells(fine, i), cells(fine, 0))[0]
        out["D_b2_0"][i] = w2_theta(cloud(th_4n[i], d), cells(blind, i))[0]
    cdf = np.cumsum(fine.masses[-1])
    out["median"] = (float(np.interp(0.5, cdf, fine.theta_edges[1:])), float(np.median(th_4n[-1])))
    out.update(kappa=kappa, shares=(share_n, share_4n),
               wall=(zonal_wall, wall_n + wall_4n), t=times)
    return out


def summary_row(d, beta, r):
    err = r["particles"] + r["cells"]
    ok = bool(np.all(r["D"] <= err))
    worst = int(np.argmax(r["D"] - err))
    verdict = "confirmed" if ok else (f"D > E at t = {r['t'][worst]:g}: "
                                      f"{r['D'][worst]:.3g} > {err[worst]:.3g}")
    threshold = (1 + 2 * beta / r["kappa"]) ** (0.5 * (d - 1))
    return (d, f"{beta:g}", f"{r['kappa']:.4g}", f"{threshold:.3g}",
            f"{r['shares'][0]:.4f} / {r['shares'][1]:.4f}", f"{r['D'].max():.3g}",
            f"{r['particles'].max():.3g}", f"{r['cells'].max():.3g}",
            f"{np.max(r['D'] / err):.2f}", f"{r['bracket'].max():.2g}",
            f"{r['signal'].max():.3g}", f"{np.max(r['D_b2_0'] / err):.3g}",
            "{:.4f} / {:.4f}".format(*r["median"]),
            verdict, "{:.0f} / {:.0f}".format(*r["wall"]))


def plot_case(ax, title, r, tokens, ns):
    t = r["t"]
    ax.semilogy(t, r["D"], "k-", label=f"D: particles {tokens[1]} vs zonal n={ns[1]}")
    ax.semilogy(t, r["particles"] + r["cells"], "r--", label="E: particles N vs 4N + cells")
    ax.semilogy(t, r["particles"], "r:", lw=1, label=f"particles {tokens[0]} vs {tokens[1]}")
    ax.semilogy(t, r["cells"], "b:", lw=1, label=f"zonal n={ns[0]} vs {ns[1]}")
    ax.semilogy(t[1:], r["signal"][1:], "g-", lw=1, label="zonal W2_θ(ρ_t, ρ_0)")
    ax.semilogy(t, r["D_b2_0"], "m-.", lw=1, label="D against the zonal b2 = 0 solution")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("t")
    ax.set_ylabel("geodesic W2 of θ-marginals")
    ax.legend(fontsize=5)


EXPLAIN = (
    "SA; Q = diag(1, b2, ..., b2) with b2 = 1, K = I, V = diag({v1:g}, {v2:g}, ..., {v2:g}); "
    "ρ0 = vMF(e1, κ), κ = β(d−1)/ln({nref}/{nb}); t = 0, 0.5, ..., 8. Particles: N = {n0} and "
    "4N = {n1} (independent samples, RK4, dt = 0.1); zonal: n = {c0} and {c1} cells. All "
    "distances: geodesic W2 between θ-marginals, exact in 1-D. D = W2_θ(4N, zonal fine), "
    "E = W2_θ(N, 4N) + W2_θ(zonal coarse, fine); 'confirmed' when D(t) <= E(t) at every "
    "output. 'threshold' = (1 + 2β/κ)^{{(d−1)/2}}, the N below which a token mostly attends "
    "to itself; 'self share': the measured mean softmax weight of a token on itself at t = 0 "
    "(N / 4N). 'bracket': the largest width of the certified bracket of D over the law inside "
    "the cells. 'signal': the largest W2_θ(ρ_t, ρ_0) of the zonal solution (how far the "
    "marginal moves). 'b2 = 0': D/E with the zonal solution of Q = diag(1, 0, ..., 0) (the "
    "field without its perpendicular, Bessel part) in place of the right one, i.e. what that "
    "wrong field scores. 'median θ': at t = 8, zonal / 4N. Wall: zonal (both resolutions) / "
    "particles (both clouds), seconds on one shared core.")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 250/1000 tokens, n = 800/1600 "
                    "cells (a few minutes on one core)")
    args = ap.parse_args()
    if args.quick:
        tokens, ns, name = (250, 1000), (800, 1600), "zonal_particles_quick"
    else:
        tokens, ns, name = (1000, 4000), (1600, 3200), "zonal_particles"
    times = np.linspace(0.0, 8.0, 17)
    fig, axes = plt.subplots(len(DIMS), len(BETAS), figsize=(11, 8))
    rows = []
    for row, d in zip(axes, DIMS, strict=True):
        for ax, beta in zip(row, BETAS, strict=True):
            r = run_case(d, beta, ns, tokens, times)
            rows.append(summary_row(d, beta, r))
            plot_case(ax, f"d = {d}, β = {beta:g}", r, tokens, ns)
            print(rows[-1], flush=True)
    fig.tight_layout()
    text = (EXPLAIN.format(v1=V_AXIS, v2=V_PERP, nref=N_REF, nb=NEIGHBOURS, n0=tokens[0],
                           n1=tokens[1], c0=ns[0], c1=ns[1]) + "\n\n"
            + table(rows, ["d", "β", "κ", "threshold", "self share N / 4N", "max D",
                           "max W2(N, 4N)", "max W2(cells)", "max D/E", "bracket", "signal",
                           "max D/E, b2 = 0", "median θ(8)", "verdict", "wall s"]))
    publish(name, fig, "Particles against the zonal solver in d = 8 and 64", text)


if __name__ == "__main__":
    main()
