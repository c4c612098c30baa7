r"""Closed forms of docs/theory.md §3, used by the tests and the validation scripts.

- :func:`zero_temperature_flow` — docs/theory.md §3.3, the time-changed normalized power flow.
- :func:`zero_temperature_density` — the pushed density for B = c·orthogonal.
- :func:`funk_hecke_eigenvalue`, :func:`growth_rate` — docs/theory.md §3.5, linear instability of
  the uniform state.
- :func:`equiangular_rhs`, :func:`equiangular_solution` — docs/theory.md §3.8.
- :func:`long_context_limit` — docs/theory.md §3.9.
"""
from __future__ import annotations

import numpy as np
from scipy import integrate, linalg, special

from .measures import Measure, as_measure
from .sphere import as_points, normalize, orthogonal_factor

__all__ = [
    "zero_temperature_flow",
    "zero_temperature_density",
    "ZeroTemperatureDensity",
    "funk_hecke_eigenvalue",
    "growth_rate",
    "fastest_mode",
    "equiangular_rhs",
    "equiangular_solution",
    "long_context_limit",
]

def _flow_direction(A, x0, s):
    """e^{sA} x0 / |e^{sA} x0| for x0: (m, d), s: (m,) (per-trajectory times).

    A symmetric: through its eigendecomposition, shifted by the top eigenvalue so that large s
    does not overflow. Otherwise one matrix exponential per distinct s.
    """
    if np.allclose(A, A.T, rtol=0, atol=1e-14 * max(1.0, np.abs(A).max())):
        lam, U = np.linalg.eigh(0.5 * (A + A.T))
        c = x0 @ U  # (m, d)
        y = (c * np.exp(np.outer(s, lam - lam.max()))) @ U.T
        return normalize(y)
    out = np.empty_like(x0)
    for i, (xi, si) in enumerate(zip(x0, s, strict=True)):
        out[i] = linalg.expm(si * A) @ xi
    return normalize(out)


def zero_temperature_flow(model, x0, t, rtol: float = 1e-13) -> np.ndarray:
    r"""Tokens under the zero-temperature field :math:`\dot x = P_x A x / |B^\top x|`.

    docs/theory.md §3.3: :math:`x(t) = e^{sA}x_0/|e^{sA}x_0|` with :math:`ds/dt = 1/|B^\top x(t)|`.
    When B = c·O with O orthogonal, s = t/c for every token; otherwise the scalar time change
    is integrated per token (DOP853 at ``rtol``), which is all the numerics there is.

    Parameters
    ----------
    model : Model
        Supplies A = V B^T and B.
    x0 : (..., d) initial tokens on the sphere
    t : float or (T,) array of times >= 0

    Returns
    -------
    (..., d) for scalar t, (T, ..., d) for an array of times.
    """
    x0 = as_points(x0, model.d, name="x0")
    shape = x0.shape
    xf = x0.reshape(-1, model.d)
    scalar = np.ndim(t) == 0
    ts = np.atleast_1d(np.asarray(t, dtype=np.float64))
    if ts.ndim != 1 or not np.all(np.isfinite(ts)) or np.any(ts < 0):
        raise ValueError(f"t must be a time >= 0 or a 1-D array of them; got {t!r}")
    A, B = model.A, model.B
    fac = orthogonal_factor(B)
    if fac is not None:
        c = fac[0]
        s = ts[:, None] / c * np.ones(xf.shape[0])[None, :]
    else:
        order = np.argsort(ts)
        m = xf.shape[0]

        def rhs(_, s_vec):
            x = _flow_direction(A, xf, s_vec)
            return 1.0 / np.linalg.norm(x @ B, axis=-1)

        sol = integrate.solve_ivp(rhs, (0.0, float(ts.max()) if ts.max() > 0 else 1.0),
                                  np.zeros(m), method="DOP853", t_eval=ts[order],
                                  rtol=rtol, atol=1e-15)
        if not sol.success:
            raise RuntimeError(f"time-change integration failed: {sol.message}")
        s = np.empty((ts.size, m))
        s[order] = sol.y.T
    out = np.stack([_flow_direction(A, xf, si) for si in s]).reshape((ts.size,) + shape)
    return out[0] if scalar else out


class ZeroTemperatureDensity(Measure):
    r"""The density :math:`\rho_t` pushed by the zero-temperature flow, B = c·O
    (docs/theory.md §3.3).

    .. math:: \rho_t(y) = \rho_0(My/|My|)\, e^{-(t/c)\operatorname{tr}A} / |My|^d,
              \qquad M = e^{-(t/c)A}.

    ``sample`` pushes samples of rho_0 through the flow.
    """

    def __init__(self, model, density0, t: float):
        fac = orthogonal_factor(model.B)
        if fac is None:
            raise ValueError("the explicit zero-temperature density needs B = Q^T K = c·O with O "
                             "orthogonal; for general B push samples with zero_temperature_flow")
        t = float(t)
        if not np.isfinite(t) or t < 0:
            raise ValueError(f"t must be finite and >= 0; got {t}")
        c = fac[0]
        self.model, self.t, self.c = model, t, c
        self.d = model.d
        self.initial = as_measure(density0, model.d)
        if self.initial.d != model.d:
            raise ValueError(f"density0 lives in d = {self.initial.d}, the model in d = {model.d}")
        self.M = linalg.expm(-(t / c) * model.A)
        self._log_jac = -(t / c) * float(np.trace(model.A))

    def density(self, y) -> np.ndarray:
        y = as_points(y, self.d, name="y")
        My = y @ self.M.T
        r = np.linalg.norm(My, axis=-1)
        return self.initial.density(My / r[..., None]) * np.exp(self._log_jac - self.d * np.log(r))

    def sample(self, n: int, seed=None) -> np.ndarray:
        return zero_temperature_flow(self.model, self.initial.sample(n, seed), self.t)

    def __repr__(self) -> str:
        return f"ZeroTemperatureDensity(t={self.t}, c={self.c:g}, d={self.d})"


def zero_temperature_density(model, density0, t: float) -> ZeroTemperatureDensity:
    """The zero-temperature density at time t from density0 (a Measure or a callable on S^2),
    for B = c·orthogonal; see :class:`ZeroTemperatureDensity`."""
    return ZeroTemperatureDensity(model, density0, t)


def _check_growth_args(ell, beta, d):
    ell = np.asarray(ell)
    if np.any(ell < 0) or np.any(ell != np.floor(ell)):
        raise ValueError(f"ell must be integers >= 0; got {ell}")
    if int(d) != d or d < 2:
        raise ValueError(f"d must be an integer >= 2; got {d}")
    beta = float(beta)
    if not np.isfinite(beta) or beta < 0:
        raise ValueError(f"beta must be finite and >= 0; got {beta}")
    return ell.astype(np.float64), beta, int(d)


def funk_hecke_eigenvalue(ell, beta: float, d: int, log: bool = False):
    r"""Funk–Hecke eigenvalue of :math:`e^{\beta\langle x, y\rangle}` against the uniform
    probability measure on S^{d-1}:

    .. math:: \kappa_\ell = \Gamma(d/2)\,(2/\beta)^{d/2-1} I_{\ell+d/2-1}(\beta),

    so that :math:`\int e^{\beta\langle x,y\rangle} Y_\ell(y)\, d\sigma(y) = \kappa_\ell Y_\ell(x)`.
    With ``log=True`` returns log kappa_ell (finite for any beta; kappa itself overflows beyond
    beta ~ 700). beta = 0 gives kappa_0 = 1 and kappa_ell = 0 for ell >= 1.
    """
    ell, beta, d = _check_growth_args(ell, beta, d)
    nu = 0.5 * d - 1.0
    if beta == 0:
        val = np.where(ell == 0, 0.0, -np.inf)
    else:
        with np.errstate(divide="ignore"):  # ive underflows to 0 for ell >> beta: log -> -inf
            val = (special.gammaln(0.5 * d) + nu * np.log(2.0 / beta)
                   + np.log(special.ive(ell + nu, beta)) + beta)
    return val if log else np.exp(val)


def growth_rate(ell, beta: float, d: int = 3, normalized: bool = True):
    r"""Growth rate of the mode Y_ell around the uniform state, Q = K = V = I (docs/theory.md §3.5).

    SA: :math:`\lambda_\ell = \ell(\ell+d-2)\, I_{\ell+d/2-1}(\beta) / (\beta I_{d/2-1}(\beta))`.
    USA: :math:`\lambda_\ell = \ell(\ell+d-2)\,\kappa_\ell/\beta` with kappa_ell of
    :func:`funk_hecke_eigenvalue`. Bessel ratios use exponentially scaled functions, so SA is
    finite for any beta; at beta = 0 the limits are taken (lambda_1 = (d-1)/d, others 0).
    """
    ell, beta, d = _check_growth_args(ell, beta, d)
    nu = 0.5 * d - 1.0
    lap = ell * (ell + d - 2.0)
    if beta == 0:
        return np.where(ell == 1, (d - 1.0) / d, 0.0) * np.ones_like(ell)
    if normalized:
        return lap * special.ive(ell + nu, beta) / (beta * special.ive(nu, beta))
    return lap * funk_hecke_eigenvalue(ell, beta, d) / beta


def fastest_mode(beta: float, d: int = 2, normalized: bool = True, ell_max: int = 512) -> int:
    """The degree (or wavenumber on S^1) ell >= 1 with the largest growth rate."""
    ells = np.arange(1, ell_max + 1)
    return int(ells[np.argmax(growth_rate(ells, beta, d, normalized))])


_KINDS = ("SA", "USA", "post-ln", "pre-ln")


def equiangular_rhs(state, n: int, beta: float, kind: str = "SA"):
    r"""Right-hand side of the equiangular ODE (docs/theory.md §3.8) for n tokens with
    :math:`\langle x_i, x_j\rangle = \rho`, Q = K = V = I.

    - "SA" and "post-ln" (continuous-time Post-LN is SA):
      :math:`\dot\rho = 2e^{\beta\rho}(1-\rho)((n-1)\rho+1)/(e^\beta + (n-1)e^{\beta\rho})`.
    - "USA": :math:`\dot\rho = (2/n)e^{\beta\rho}(1-\rho)((n-1)\rho+1)`.
    - "pre-ln": state (rho, r) with r = |z| shared by all tokens by symmetry;
      :math:`\dot\rho = \dot\rho_{SA}/r`,
      :math:`\dot r = \langle\theta, \mathrm{Attn}(\theta)\rangle
      = (e^\beta + (n-1)\rho e^{\beta\rho})/(e^\beta + (n-1)e^{\beta\rho})`.

    SA is evaluated with e^{beta(rho-1)} so large beta does not overflow.
    """
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}; got {kind!r}")
    if kind == "pre-ln":
        rho, r = state
    else:
        rho = state
    g = np.exp(beta * (rho - 1.0))
    sa = 2.0 * g * (1.0 - rho) * ((n - 1) * rho + 1.0) / (1.0 + (n - 1) * g)
    if kind in ("SA", "post-ln"):
        return sa
    if kind == "USA":
        return (2.0 / n) * np.exp(beta * rho) * (1.0 - rho) * ((n - 1) * rho + 1.0)
    rdot = (1.0 + (n - 1) * rho * g) / (1.0 + (n - 1) * g)
    return np.array([sa / r, rdot])


def equiangular_solution(rho0: float, n: int, beta: float, t, kind: str = "SA", r0: float = 1.0,
                         rtol: float = 1e-12) -> np.ndarray:
    """rho(t) of the equiangular ODE at the times t (1-D, increasing, starting at or after 0),
    integrated with DOP853 at ``rtol``. For "pre-ln" the initial radius is r0."""
    t = np.atleast_1d(np.asarray(t, dtype=np.float64))
    if t.ndim != 1 or not np.all(np.isfinite(t)) or np.any(t < 0) or np.any(np.diff(t) < 0):
        raise ValueError(f"t must be finite, >= 0 and non-decreasing; got {t}")
    if t.max() == 0:
        return np.full(t.shape, float(rho0))
    if kind == "pre-ln":
        y0 = [rho0, r0]

        def f(_, y):
            return equiangular_rhs(y, n, beta, kind)
    else:
        y0 = [rho0]

        def f(_, y):
            return [equiangular_rhs(y[0], n, beta, kind)]
    sol = integrate.solve_ivp(f, (0.0, float(t.max())), y0, method="DOP853", t_eval=t,
                              rtol=rtol, atol=1e-14)
    if not sol.success:
        raise RuntimeError(f"equiangular ODE integration failed: {sol.message}")
    return sol.y[0]


def long_context_limit(rho: float, gamma: float) -> float:
    r"""Limit of <theta_i, theta_j> after one Pre-LN layer with beta_n = gamma log n
    (docs/theory.md §3.9): 1, 4 rho/(1 + 3 rho), or rho for gamma <, =, > 1/(1 - rho)."""
    if not 0 < rho < 1:
        raise ValueError(f"rho must lie in (0, 1); got {rho}")
    crit = 1.0 / (1.0 - rho)
    if np.isclose(gamma, crit, rtol=1e-12):
        return 4 * rho / (1 + 3 * rho)
    return 1.0 if gamma < crit else rho
