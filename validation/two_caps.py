"""Metastable two-cap states in d = 3, 16, 64: their lifetime against beta, by particles.

Why particles: in the zonal model two caps about ±e are both fixed points (θ̇ = 0 at the
poles, and each cap attracts itself with weight e^{β} against e^{-β} from the other), so a
zonal solution never leaves the two-cap state; the lifetime is the time for the symmetry to
break, which a zonal solver cannot represent. Here two narrow caps (vMF, κ = 200 d, 32 tokens
each, masses 1/2) start at angle α0 = π − 0.3 (a fixed, deterministic departure from
antipodal), Q = K = V = I, SA, and the lifetime is the first time the angle between the two
groups' mean directions falls below π/4. Once each cap has collapsed it acts as an atom, and
two atoms of mass 1/2 at angle α obey exactly

    α' = −2 sin α / (1 + e^{β(1 − cos α)}),

so the lifetime is T(β) = ∫_{π/4}^{α0} (1 + e^{β(1 − cos α)}) / (2 sin α) dα ~ e^{β(1 − cos α0)}:
the reference column, independent of d.

Run: .venv/bin/python validation/two_caps.py   (a few minutes, one core)
"""
import math
import time

import matplotlib.pyplot as plt
import numpy as np
from _common import publish, table
from scipy import integrate

import spherepde as sp

ALPHA0, ALPHA_END, TOKENS = math.pi - 0.3, math.pi / 4, 32


def two_atom_lifetime(beta):
    """T(β) of the module docstring (the two-atom ODE, quadrature to 1e-10 relative)."""
    f = lambda a: (1.0 + math.exp(beta * (1.0 - math.cos(a)))) / (2.0 * math.sin(a))  # noqa: E731
    return integrate.quad(f, ALPHA_END, ALPHA0, epsrel=1e-10)[0]


def two_caps(d, seed=0):
    e = np.eye(d)
    u2 = math.cos(ALPHA0) * e[0] + math.sin(ALPHA0) * e[1]
    kappa = 200.0 * d
    a = sp.measures.VonMisesFisher(e[0], kappa).sample(TOKENS, seed=seed)
    b = sp.measures.VonMisesFisher(u2, kappa).sample(TOKENS, seed=seed + 1)
    pts = np.concatenate([np.asarray(getattr(a, "points", a)), np.asarray(getattr(b, "points", b))])
    return sp.measures.PointCloud(pts)


def lifetime(d, beta):
    """First output time with the groups' mean directions closer than ALPHA_END (linear
    interpolation of the angle between outputs), T(β), the wall time, and the sampled
    clouds' initial angle (32 tokens per cap: their means miss the caps' by ~sqrt(d/κ/32))."""
    t_ref = two_atom_lifetime(beta)
    times = np.linspace(0.0, 3.0 * t_ref, 601)
    t0 = time.perf_counter()
    traj = sp.ParticleSolver(sp.Model(beta=beta, d=d), rtol=1e-7, atol=1e-9).solve(
        two_caps(d), times)
    wall = time.perf_counter() - t0
    x = traj.positions
    m1, m2 = x[:, :TOKENS].mean(axis=1), x[:, TOKENS:].mean(axis=1)
    c = np.sum(m1 * m2, axis=1) / np.linalg.norm(m1, axis=1) / np.linalg.norm(m2, axis=1)
    angle = np.arccos(np.clip(c, -1.0, 1.0))
    below = np.flatnonzero(angle < ALPHA_END)
    if below.size == 0:
        return math.inf, t_ref, wall, angle[0]
    k = below[0]
    s = (angle[k - 1] - ALPHA_END) / (angle[k - 1] - angle[k])
    return times[k - 1] + s * (times[k] - times[k - 1]), t_ref, wall, angle[0]


def main():
    ds, betas = (3, 16, 64), (1.0, 2.0, 3.0, 4.0, 5.0)
    rows = []
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for d in ds:
        lt = []
        for beta in betas:
            t, t_ref, wall, a0 = lifetime(d, beta)
            lt.append(t)
            rows.append((d, f"{beta:g}", f"{a0 - ALPHA0:+.1e}", f"{t:.4g}", f"{t_ref:.4g}",
                         f"{t / t_ref:.4f}", f"{wall:.1f}"))
        ax.semilogy(betas, lt, "o", label=f"particles, d = {d}")
    bb = np.linspace(betas[0], betas[-1], 50)
    ax.semilogy(bb, [two_atom_lifetime(b) for b in bb], "k-", label="two atoms (exact)")
    ax.set_xlabel("β")
    ax.set_ylabel("lifetime (angle between caps < π/4)")
    ax.set_title("two caps at angle π − 0.3, Q = K = V = I, SA")
    ax.legend(fontsize=7)
    text = (__doc__.split("Run:")[0].strip() + "\n\n"
            + table(rows, ["d", "β", "initial angle − α0", "lifetime (particles)",
                           "two-atom T(β)", "ratio", "wall s"]))
    publish("two_caps", fig, "Metastable two-cap states: lifetime against β", text)


if __name__ == "__main__":
    main()
