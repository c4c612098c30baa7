"""What the S^2 and S^1 spectral solvers share: input checks, the velocity path choice, the
signed direct quadrature, the filter, the time loop, and the solution object's bookkeeping."""
from __future__ import annotations

import math
import warnings

import numpy as np

from .. import interaction, timestepping
from ..interaction.funk_hecke import orthogonal_factor
from ..measures import Measure, PointCloud, as_measure

#: Default relative tolerance on the mass of the initial density.
MASS_RTOL = 1e-6
#: Default tolerance on the relative L2 norm of the unresolved part of the initial density.
RESOLUTION_TOL = 1e-8


class ResolutionWarning(UserWarning):
    """The initial density has significant content beyond the chosen truncation."""


def choose_path(model, path: str, d: int):
    """Pick the velocity path: "funk_hecke" (B = c·O), "direct" or "zero_temperature"."""
    if model.d != d:
        raise ValueError(f"this solver works on S^{d - 1} (d = {d}); the model has d = {model.d}")
    if model.zero_temperature:
        if model.hardmax:
            raise ValueError("hardmax is defined for discrete measures; the density solvers use the "
                             "zero-temperature local field (pass hardmax=False)")
        if path not in ("auto", "zero_temperature"):
            raise ValueError(f"beta = inf uses the zero-temperature field; path={path!r} does not "
                             "apply")
        return "zero_temperature", None
    fac = orthogonal_factor(model.B)
    if path == "auto":
        path = "funk_hecke" if fac is not None else "direct"
    if path == "funk_hecke" and fac is None:
        raise ValueError("the Funk–Hecke path needs B = Q^T K = c·O with O orthogonal; use "
                         "path='direct' for a general B")
    if path not in ("funk_hecke", "direct", "chebyshev"):
        raise ValueError(f"unknown velocity path {path!r}; choose 'auto', 'funk_hecke', 'direct', "
                         "'chebyshev' (S^2) or (beta = inf) 'zero_temperature'")
    return path, fac


def density_callable(density0, d: int):
    """A function x (..., d) -> density values, from a Measure or a callable (checked later)."""
    if isinstance(density0, PointCloud):
        raise TypeError("the density solvers need a density, not a point cloud; smooth it first "
                        "(e.g. a Mixture of VonMisesFisher kernels) or use ParticleSolver")
    if isinstance(density0, Measure):
        if density0.d != d:
            raise ValueError(f"density0 lives in d = {density0.d}; this solver needs d = {d}")
        return density0.density
    if callable(density0):
        return density0
    raise TypeError(f"density0 must be a spherepde measure or a callable density; got "
                    f"{type(density0).__name__}")


def initial_measure(density0, d):
    try:
        return as_measure(density0, d) if d == 3 or isinstance(density0, Measure) else density0
    except (ValueError, TypeError):
        return density0


def check_settings(model, degree, name, *, rtol, atol, cfl, filter_strength, filter_order):
    """Validate the solver options shared by the S^2 and S^1 solvers; returns the degree."""
    from ..model import Model

    if not isinstance(model, Model):
        raise TypeError(f"model must be a spherepde.Model; got {type(model).__name__}")
    try:
        deg = int(degree)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer >= 1; got {degree!r}") from None
    if deg != degree or deg < 1:
        raise ValueError(f"{name} must be an integer >= 1; got {degree!r}")
    for key, val, ok in (("rtol", rtol, lambda v: v > 0), ("atol", atol, lambda v: v >= 0),
                         ("cfl", cfl, lambda v: v > 0),
                         ("filter_strength", filter_strength, lambda v: v >= 0),
                         ("filter_order", filter_order, lambda v: v >= 1)):
        if not (isinstance(val, (int, float)) and math.isfinite(val) and ok(val)):
            bound = {"rtol": "> 0", "atol": ">= 0", "cfl": "> 0", "filter_strength": ">= 0",
                     "filter_order": ">= 1"}[key]
            raise ValueError(f"{key} must be a finite number {bound}; got {val!r}")
    return deg


def check_values(values, what="density0"):
    values = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(values)
    if np.any(bad):
        raise ValueError(f"{what} is NaN or inf at {int(bad.sum())} of {values.size} grid nodes; "
                         "repair the density (it must be finite everywhere on the sphere)")
    lo = float(values.min())
    if lo < -1e-12 * float(np.abs(values).max()):
        raise ValueError(f"{what} must be >= 0 (a probability density); its minimum on the grid "
                         f"is {lo:.3e}")
    return values


def check_mass(mass, rtol, d=3):
    if not abs(mass - 1.0) <= rtol:
        area, uni = ("surface area", "1/(4 pi) on S^2") if d == 3 else ("arc length",
                                                                       "1/(2 pi) on S^1")
        raise ValueError(f"density0 integrates to {mass:.12g}, not 1 (off by {mass - 1:+.2e}, "
                         f"tolerance {rtol:.0e}) against {area}; divide it by its integral "
                         f"(the uniform density is {uni})")


def warn_resolution(spectrum, lmax, tol, name="lmax"):
    """spectrum[l] = L2 norm squared of degree l (up to some L2 > lmax)."""
    total = float(spectrum.sum())
    if total <= 0:
        return 0.0
    tail = np.sqrt(np.cumsum(spectrum[::-1])[::-1] / total)  # tail[l] = rel. norm of degrees >= l
    rel = float(tail[lmax + 1]) if lmax + 1 < tail.size else 0.0
    if rel > tol:
        ok = np.nonzero(tail <= tol)[0]
        need = (f"about {name} = {int(ok[0]) - 1}" if ok.size else
                f"{name} > {tail.size - 1} (the analysis went no further)")
        warnings.warn(f"density0 is not resolved at {name} = {lmax}: the part beyond it has "
                      f"relative L2 norm {rel:.1e} (tolerance {tol:.0e}) and is dropped; "
                      f"{need} would resolve it", ResolutionWarning, stacklevel=4)
    return rel


def signed_attention(x, keys, values, weights, beta, normalized, kernel="auto"):
    """Attention output for signed weights (a density that dipped below 0 on the grid).

    The shared kernels take log(w), so non-negative weights go straight through. Otherwise the
    positive and negative parts are summed separately with the unnormalized kernel on values
    augmented by a column of ones, which returns both numerator N and partition Z;
    SA = (N+ - N-)/(Z+ - Z-), USA = N+ - N-. This path raises (as USA does) when
    beta·max<x, By> exceeds float64's range, which only a wildly under-resolved run reaches.
    """
    if np.all(weights >= 0):
        return interaction.attention(x, keys, values, weights, beta, normalized, kernel=kernel)
    pos, neg = np.maximum(weights, 0.0), np.maximum(-weights, 0.0)
    aug = np.concatenate([values, np.ones((values.shape[0], 1))], axis=1)
    acc = interaction.attention(x, keys, aug, pos, beta, False, kernel=kernel)
    acc = acc - interaction.attention(x, keys, aug, neg, beta, False, kernel=kernel)
    if normalized:
        return acc[:, :-1] / acc[:, -1:]
    return acc[:, :-1]


def direct_energy(points, weights, B, beta, chunk=2048):
    r""":math:`\frac{1}{2\beta}\sum_{ij} w_i w_j e^{\beta\langle x_i, B x_j\rangle}` (signed w),
    with a global shift so that it overflows only when the energy itself does."""
    if beta == 0:
        return math.nan
    keys = points @ B.T
    shift = beta * float(np.linalg.norm(B, 2))
    s = 0.0
    for a in range(0, points.shape[0], chunk):
        e = np.exp(beta * (points[a:a + chunk] @ keys.T) - shift)
        s += float(weights[a:a + chunk] @ (e @ weights))
    return safe_exp_times(s, shift) / (2.0 * beta)


def safe_exp_times(s, log_scale):
    """s·e^{log_scale} without spurious overflow (inf only if the value is beyond float64)."""
    if s == 0:
        return 0.0
    try:
        return math.copysign(math.exp(math.log(abs(s)) + log_scale), s)
    except OverflowError:
        return math.copysign(math.inf, s)


def hyperviscosity(degree, top, strength, order):
    r"""Filter rates :math:`\nu (\ell/L)^p` with the rate at the top degree = strength."""
    return strength * (np.asarray(degree, dtype=np.float64) / max(top, 1)) ** order


def run_time_loop(solver, y0, times, progress=None, stop_negative_mass=None):
    """March solver.rhs from y0 over ``times`` with the shared RK registry; at every output time
    recompute the CFL bound from the current speed. Returns the list of states and stats.

    With ``stop_negative_mass`` set, the run ends early instead of raising: at the first output
    whose negative mass exceeds it in size (the density is no longer resolved at this lmax),
    or when the integrator fails; ``stats["stopped"]`` then says why and the states reached
    so far are returned. A bound first exceeded at the last output is reported in
    ``stats["unresolved"]``."""
    tab = timestepping.get_scheme(solver.scheme)
    # the registry works on real arrays: march the complex coefficients as their float64 view
    cplx = np.iscomplexobj(y0)

    def f(t, yr):
        if cplx:
            return np.ascontiguousarray(solver.rhs(t, yr.view(np.complex128))).view(np.float64)
        return solver.rhs(t, yr)

    def as_state(yr):
        return yr.view(np.complex128) if cplx else yr

    out = [y0]
    y = np.ascontiguousarray(y0).view(np.float64) if cplx else y0
    stats = {"steps": 0, "rejected": 0, "fevals": 0}
    scale = float(np.max(np.abs(y0)))
    for i in range(1, len(times)):
        t0, t1 = float(times[i - 1]), float(times[i])
        try:
            dt_cfl = solver.cfl_step(as_state(y))
            if tab.adaptive:
                ys, st = timestepping.integrate(f, y, [t0, t1], solver.scheme, dt=solver.dt,
                                                rtol=solver.rtol, atol=solver.atol * scale,
                                                dt_max=dt_cfl, progress=progress)
            else:
                dt = solver.dt if solver.dt is not None else (dt_cfl if dt_cfl is not None else t1 - t0)
                ys, st = timestepping.integrate(f, y, [t0, t1], solver.scheme, dt=dt,
                                                progress=progress)
            if not np.all(np.isfinite(ys[-1])):
                raise FloatingPointError(f"the solution became NaN/inf between t = {t0} and "
                                         f"t = {t1}; reduce the step (cfl) or raise lmax")
        except (RuntimeError, FloatingPointError) as exc:
            if stop_negative_mass is None:
                raise
            stats["stopped"] = f"integration failed between t = {t0:g} and t = {t1:g}: {exc}"
            break
        y = ys[-1]
        for k in ("steps", "rejected", "fevals"):
            stats[k] += st[k]
        out.append(as_state(y).copy())
        if stop_negative_mass is not None:
            neg = abs(solver.diagnostics(out[-1])[2])
            if neg > stop_negative_mass:
                why = (f"negative mass {neg:.2e} > {stop_negative_mass:.0e} at t = {t1:g}: the "
                       "density is no longer resolved at this lmax")
                if i < len(times) - 1:
                    stats["stopped"] = why
                    break
                stats["unresolved"] = why
    return out, stats


