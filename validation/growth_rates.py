"""docs/theory.md §3.5: linear instability of the uniform state, and the clusters it seeds (§3.9).

Single modes eps·Y_ell on top of the uniform density grow like e^{lambda_ell t}. The spectral
solvers (S^2: spherical harmonics, S^1: Fourier) measure lambda_ell from the growth of the
mode's coefficient over e^2 of growth, for SA and USA, and compare with the closed forms of
spherepde.exact. Then on S^1, USA at beta = 5 from the uniform state plus small noise: the
fastest-growing wavenumber (3) sets the number of clusters that appear.

Run: .venv/bin/python validation/growth_rates.py
"""
import math

import matplotlib.pyplot as plt
import numpy as np
from _common import publish, table
from scipy.special import eval_legendre

import spherepde as sp
from spherepde import exact


def measured_rate_s2(beta, ell, normalized, eps=1e-7):
    lam = float(exact.growth_rate(ell, beta, 3, normalized))
    T = 2.0 / lam
    def rho0(x):
        return (1 / (4 * np.pi)
                + eps * np.sqrt((2 * ell + 1) / (4 * np.pi)) * eval_legendre(ell, x[..., 2]))
    sol = sp.SpectralSolver(sp.Model(beta=beta, normalized=normalized), lmax=max(8, ell + 4),
                            scheme="rk4", dt=T / 200).solve(rho0, [0.0, T])
    a = sol.coefficients[:, ell].real  # the (ell, 0) coefficient in the m-major layout
    return math.log(a[1] / a[0]) / T, lam


def measured_rate_s1(beta, k, normalized, eps=1e-7):
    lam = float(exact.growth_rate(k, beta, 2, normalized))
    T = 2.0 / lam
    def rho0(x):
        return (1 + eps * np.cos(k * np.arctan2(x[..., 1], x[..., 0]))) / (2 * np.pi)
    sol = sp.FourierSolver(sp.Model(d=2, beta=beta, normalized=normalized), kmax=max(12, k + 6),
                           scheme="rk4", dt=T / 200).solve(rho0, [0.0, T])
    theta = np.linspace(0, 2 * np.pi, 256, endpoint=False)
    x = np.stack([np.cos(theta), np.sin(theta)], -1)
    amp = [2 * np.mean(sol.density(i, x) * np.cos(k * theta)) for i in range(2)]
    return math.log(amp[1] / amp[0]) / T, lam


def main():
    rows = []
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for ax, (sphere, fn, ells) in zip(axes[:2], (("S^2", measured_rate_s2, range(1, 7)),
                                                ("S^1", measured_rate_s1, range(1, 7))),
                                                strict=True):
        for beta in (1.0, 5.0, 9.0):
            for normalized in (True, False):
                # modes slower than 5% of the fastest take so long to grow e^2 that the fast
                # ones go nonlinear first: leave them out
                lam = exact.growth_rate(np.array(list(ells)), beta, 3 if sphere == "S^2" else 2,
                                        normalized)
                use = [ell for ell, l in zip(ells, lam, strict=True) if l >= 0.05 * lam.max()]
                meas, pred = zip(*(fn(beta, ell, normalized) for ell in use), strict=True)
                kind = "SA" if normalized else "USA"
                err = max(abs(m / p - 1) for m, p in zip(meas, pred, strict=True))
                rows.append((sphere, kind, beta, int(np.argmax(lam)) + 1, f"1..{use[-1]}", err))
                ax.plot(list(ells), lam, "-" if normalized else "--", lw=1)
                ax.plot(use, meas, "o", ms=3, label=f"{kind} β={beta:g}")
        ax.set_yscale("log")
        ax.set_xlabel("ℓ" if sphere == "S^2" else "k")
        ax.set_ylabel("growth rate λ")
        ax.set_title(f"{sphere}: measured (dots) vs docs/theory.md §3.5 (lines)")
        ax.legend(fontsize=6, ncol=2)

    # Clusters on S^1: USA, beta = 5, uniform + 1e-4 noise in modes 1..48 (equal amplitudes,
    # random phases), run until the fastest mode reaches half the mean density.
    beta, K, eps = 5.0, 48, 1e-4
    rng = np.random.default_rng(0)
    noise = eps * np.exp(2j * np.pi * rng.random(K))
    def rho0(x):
        return (1 + 2 * np.real(np.exp(1j * np.arctan2(x[..., 1], x[..., 0])[..., None]
                                                  * np.arange(1, K + 1)) @ noise)) / (2 * np.pi)
    model = sp.Model(d=2, beta=beta, normalized=False)
    k_star = exact.fastest_mode(beta, d=2, normalized=False)
    T = math.log(0.5 / eps) / float(exact.growth_rate(k_star, beta, 2, False))
    sol = sp.FourierSolver(model, kmax=K).solve(rho0, np.linspace(0, T, 4))
    theta = np.linspace(-np.pi, np.pi, 720, endpoint=False)
    x = np.stack([np.cos(theta), np.sin(theta)], -1)
    for i, t in enumerate(sol.times):
        axes[2].plot(theta, sol.density(i, x), label=f"density, t = {t:.2f}")
    f = sol.density(len(sol.times) - 1, x)
    peaks = int(np.sum((f > np.roll(f, 1)) & (f >= np.roll(f, -1)) & (f > 1 / (2 * np.pi))))
    # The same instability seen by tokens: 2000 uniform samples (noise ~ N^-1/2 in every mode),
    # run until the clusters have collapsed.
    from spherepde.analysis.diagnostics import cluster_count

    x0 = sp.measures.Uniform(2).sample(2000, seed=1)
    t_tok = np.array([0.0, 1.5, 2.0, 3.0, 4.0]) * T
    traj = sp.ParticleSolver(model).solve(x0, t_tok)
    counts = [cluster_count(traj.measure(i), tol=1e-2) for i in range(1, len(t_tok))]
    n_clusters = counts[-1]
    ang = np.arctan2(traj.positions[-1][:, 1], traj.positions[-1][:, 0])
    axes[2].hist(ang, bins=180, density=True, alpha=0.4, label=f"tokens, t = {4 * T:.2f}")
    axes[2].set_xlabel("θ")
    axes[2].set_ylabel("ρ")
    axes[2].set_title(f"S^1, USA β = {beta:g}: {peaks} density peaks, {n_clusters} token clusters")
    axes[2].legend(fontsize=7)
    text = ("Largest relative error of the measured growth rates over the modes listed (those "
            "growing at >= 5% of the fastest rate), and the fastest-growing mode predicted:\n\n"
            + table(rows, ["sphere", "attention", "beta", "fastest mode", "modes",
                           "max rel. error"])
            + f"\n\nS^1, USA, β = {beta:g}: the fastest-growing wavenumber is {k_star}. "
            f"The density (uniform + 1e-4 noise in modes 1..{K}) has {peaks} peaks when that "
            f"mode reaches half the mean density (t = {sol.times[-1]:.2f}). 2000 uniformly "
            "sampled tokens: "
            + ", ".join(f"{c} clusters at t = {t:.2f}"
                        for c, t in zip(counts, t_tok[1:], strict=True))
            + " (chordal tolerance 1e-2; a count of N means no cluster has collapsed yet; "
            "neighbouring clusters merge later, the metastable stage of docs/theory.md §3.6).")
    publish("growth_rates", fig,
            "Linear instability of the uniform state (docs/theory.md §3.5, §3.9)", text)


if __name__ == "__main__":
    main()
