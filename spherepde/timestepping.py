r"""One registry of explicit Runge–Kutta tableaus, shared by every solver.

Each scheme is a :class:`Tableau` registered under its name in :data:`SCHEMES`; tests are
parametrized over the whole registry, so adding a tableau adds it to the order test.

The state may live on a manifold: :func:`integrate` takes a ``retract(y, dy)`` map that is
applied, in this one place, to every stage and to every step (for the sphere,
:func:`spherepde.sphere.retract`; for coefficient vectors, plain addition). With a retraction
that agrees with the exponential map to second order and a vector field that is tangent and
0-homogeneous, the projected method keeps the order of the tableau (Hairer–Lubich–Wanner,
Geometric Numerical Integration, §IV.4).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

__all__ = ["Tableau", "SCHEMES", "register", "get_scheme", "integrate", "rk_step",
           "DEFAULT_RTOL", "DEFAULT_ATOL", "StepSizeError", "MIN_STEP_FRACTION", "ERROR_NORMS",
           "get_error_norm"]

#: Default tolerances of the adaptive pair: about 1e-8 relative accuracy at the outputs
#: on the problems of the test suite (measured in tests/test_timestepping.py).
DEFAULT_RTOL = 1e-9
DEFAULT_ATOL = 1e-11
#: An adaptive step below this fraction of the integration span ends the run: it would need
#: more than 1e10 steps, which is a blow-up or an unresolved problem, never a result.
MIN_STEP_FRACTION = 1e-10


class StepSizeError(RuntimeError):
    """The adaptive step kept shrinking (a blow-up, an unresolved discretisation, or a field
    too fast for the time scale). Solvers re-raise it naming the setting to change."""


@dataclass(frozen=True)
class Tableau:
    """Butcher tableau of an explicit Runge–Kutta method.

    a : (s, s) strictly lower triangular; b : (s,); c : (s,);
    b_err : (s,) optional, b - b_hat of an embedded pair (error estimate);
    order : classical order of b; err_order : order of the embedded solution.
    """

    name: str
    order: int
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    b_err: np.ndarray | None = None
    err_order: int | None = None

    @property
    def stages(self) -> int:
        return len(self.b)

    @property
    def adaptive(self) -> bool:
        return self.b_err is not None

    @property
    def fsal(self) -> bool:
        """First same as last: the last stage is f(t + dt, y_new) (its row of a is b, c = 1),
        so it is the next step's first stage (Dormand–Prince)."""
        return bool(abs(self.c[-1] - 1.0) < 1e-14 and np.array_equal(self.a[-1], self.b))


SCHEMES: dict[str, Tableau] = {}


def register(name: str, order: int, a, b, c=None, b_hat=None, err_order=None) -> Tableau:
    """Add a tableau to :data:`SCHEMES` (c defaults to the row sums of a)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    c = a.sum(axis=1) if c is None else np.asarray(c, dtype=np.float64)
    b_err = None if b_hat is None else b - np.asarray(b_hat, dtype=np.float64)
    tab = Tableau(name, order, a, b, c, b_err, err_order)
    SCHEMES[name] = tab
    return tab


def get_scheme(name: str) -> Tableau:
    try:
        return SCHEMES[name]
    except KeyError:
        raise ValueError(f"unknown time-stepping scheme {name!r}; registered: "
                         f"{sorted(SCHEMES)}") from None


register("euler", 1, [[0.0]], [1.0])
register("heun", 2, [[0, 0], [1, 0]], [0.5, 0.5])
register("ssprk3", 3, [[0, 0, 0], [1, 0, 0], [0.25, 0.25, 0]], [1 / 6, 1 / 6, 2 / 3])
register("rk4", 4, [[0, 0, 0, 0], [0.5, 0, 0, 0], [0, 0.5, 0, 0], [0, 0, 1, 0]],
         [1 / 6, 1 / 3, 1 / 3, 1 / 6])
# Dormand & Prince (1980) 5(4), the pair behind MATLAB's ode45 and scipy's RK45.
register(
    "dopri5", 5,
    [[0, 0, 0, 0, 0, 0, 0],
     [1 / 5, 0, 0, 0, 0, 0, 0],
     [3 / 40, 9 / 40, 0, 0, 0, 0, 0],
     [44 / 45, -56 / 15, 32 / 9, 0, 0, 0, 0],
     [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729, 0, 0, 0],
     [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656, 0, 0],
     [35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0]],
    [35 / 384, 0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0],
    b_hat=[5179 / 57600, 0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40],
    err_order=4,
)


def _max_norm(r):
    return float(np.max(r)) if r.size else 0.0


def _rms_norm(r):
    return float(np.sqrt(np.mean(r * r))) if r.size else 0.0


#: How an adaptive step combines its scaled component errors |err_i| / (atol + rtol |y_i|)
#: into the one number that must stay <= 1: "max", every component within tolerance (the
#: default); "rms", their root mean square (Hairer–Nørsett–Wanner's and scipy's choice), the
#: typical component within tolerance, so that one fast straggler among N tokens does not set
#: every token's step.
ERROR_NORMS = {"max": _max_norm, "rms": _rms_norm}


def get_error_norm(name: str) -> Callable:
    try:
        return ERROR_NORMS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown error norm {name!r}; choose one of {sorted(ERROR_NORMS)}") \
            from None


def _add(y, dy):
    return y + dy


def rk_step(f: Callable, t: float, y, dt: float, tab: Tableau, retract: Callable = _add,
            k0=None, stages: list | None = None):
    """One step of the tableau. Returns (y_new, error_estimate or None).

    f(t, y) -> dy/dt; retract(y, dy) maps an increment to the new state. ``k0``, when given,
    is f(t, y) already computed (the first stage is then not evaluated again); ``stages``, a
    list, receives the stage derivatives (for first-same-as-last reuse).
    """
    k = [] if stages is None else stages
    k.clear()
    for i in range(tab.stages):
        if i == 0 and k0 is not None:
            k.append(k0)
            continue
        if i == 0:
            yi = y
        else:
            inc = sum(tab.a[i, j] * k[j] for j in range(i) if tab.a[i, j] != 0.0)
            yi = retract(y, dt * inc) if not np.isscalar(inc) else y
        k.append(f(t + tab.c[i] * dt, yi))
    inc = sum(tab.b[j] * k[j] for j in range(tab.stages) if tab.b[j] != 0.0)
    y_new = retract(y, dt * inc)
    err = None
    if tab.b_err is not None:
        err = dt * sum(tab.b_err[j] * k[j] for j in range(tab.stages) if tab.b_err[j] != 0.0)
    return y_new, err


def _check_times(times):
    times = np.asarray(times, dtype=np.float64)
    if times.ndim != 1 or times.size < 1:
        raise ValueError(f"times must be a non-empty 1-D array; got shape {times.shape}")
    if not np.all(np.isfinite(times)):
        raise ValueError("times contain NaN or inf")
    if np.any(np.diff(times) <= 0):
        i = int(np.argmax(np.diff(times) <= 0))
        raise ValueError(f"times must be strictly increasing; times[{i}] = {times[i]} >= "
                         f"times[{i + 1}] = {times[i + 1]}")
    return times


def integrate(f: Callable, y0, times, scheme: str = "dopri5", dt: float | None = None,
              rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
              retract: Callable = _add, callback: Callable | None = None,
              dt_max: float | Callable | None = None, max_steps: int = 10_000_000,
              progress=None, adaptive: bool | None = None, keep: Callable | None = None,
              stats: dict | None = None, norm: str = "max"):
    """Integrate dy/dt = f(t, y) and return the states at ``times`` (times[0] is y0's time).

    One run across all output times: the adaptive step carries over from one output to the
    next (an output only shortens the step that would pass it), and the starting-step
    heuristic runs once.

    Parameters
    ----------
    f : callable f(t, y) -> array like y
    y0 : array
    times : (T,) strictly increasing output times
    scheme : name in :data:`SCHEMES`
    dt : float, optional
        Fixed step. Steps are shortened uniformly so that every output time is hit exactly.
        Required for non-adaptive schemes unless ``dt_max`` is a callable; with an adaptive
        scheme it is the first step tried.
    rtol, atol : float
        Tolerances of the adaptive pair (error <= atol + rtol |y| in the norm ``norm``).
    retract : callable retract(y, dy) -> y_new
        Applied to every stage and step (manifold state); default plain addition.
    callback : callable callback(i, t, y) -> bool | None, optional
        Called at every output time (for diagnostics or checkpointing); a true return value
        ends the integration after output i.
    dt_max : float or callable dt_max(t, y) -> float | None, optional
        Upper bound for the steps (e.g. a CFL limit). A callable is consulted at times[0] and
        at every output time, with the state there, and bounds the steps up to the next output
        (a CFL bound moves with the solution, slowly on the scale of one step). For a
        non-adaptive scheme without ``dt`` its value is the step (one step per output
        interval where it returns None).
    progress : callable progress(t), optional
        Called after every accepted step.
    adaptive : bool, optional
        Use the embedded pair's error control (default: whenever the tableau has one).
        False runs an embedded pair at the fixed step ``dt`` (as the order test does).
    keep : callable keep(i) -> bool, optional
        Store the state at output i only when keep(i) is true (default: store all), so that
        long runs with many outputs need not hold every state in memory.
    stats : dict, optional
        Updated in place with the statistics as the run goes (so that they survive an
        exception).
    norm : str
        A name of :data:`ERROR_NORMS`: how the component errors of an adaptive step are
        combined ("max", the default, or "rms").

    Returns
    -------
    list of the stored states (all T by default), and a dict of statistics (steps, rejected,
    function evaluations).
    """
    tab = get_scheme(scheme)
    error_norm = get_error_norm(norm)
    if adaptive is None:
        adaptive = tab.adaptive
    elif adaptive and not tab.adaptive:
        raise ValueError(f"scheme {scheme!r} has no embedded error estimate; it cannot adapt "
                         "its step (use scheme='dopri5')")
    times = _check_times(times)
    if adaptive and not (np.isfinite(rtol) and np.isfinite(atol) and rtol > 0 and atol >= 0):
        raise ValueError(f"rtol must be > 0 and atol >= 0 (finite); got rtol = {rtol}, "
                         f"atol = {atol}")
    if dt is not None:
        dt = float(dt)
        if not np.isfinite(dt) or dt <= 0:
            raise ValueError(f"dt must be a positive finite number; got {dt}")
    if not adaptive and dt is None and not callable(dt_max):
        raise ValueError(f"scheme {scheme!r} has a fixed step: pass dt, or use scheme='dopri5' "
                         "with rtol/atol")
    cap = dt_max if callable(dt_max) else (lambda t, y: dt_max)
    span = float(times[-1] - times[0])
    min_step = MIN_STEP_FRACTION * span
    y = y0
    out = [y0] if keep is None or keep(0) else []
    if stats is None:
        stats = {}
    for key in ("steps", "rejected", "fevals"):
        stats.setdefault(key, 0)
    if callback is not None and callback(0, times[0], y0):
        return out, stats
    if adaptive:
        h = dt if dt is not None else None
    # f(t, y) is known when the last step was rejected (same t, y) or, for an FSAL tableau,
    # accepted: then the first stage is not evaluated again
    k_first, k_stages, fsal = None, [], tab.fsal
    for i in range(1, len(times)):
        t0, t1 = times[i - 1], times[i]
        limit = cap(t0, y)
        if not adaptive:
            step = dt if dt is not None else (limit if limit is not None else t1 - t0)
            n = max(1, int(np.ceil((t1 - t0) / step - 1e-12)))
            h_i = (t1 - t0) / n
            for k in range(n):
                y, _ = rk_step(f, t0 + k * h_i, y, h_i, tab, retract)
                if progress is not None:
                    progress(t0 + (k + 1) * h_i)
            stats["steps"] += n
            stats["fevals"] += n * tab.stages
        else:
            t = t0
            if h is None:
                h = _initial_step(f, t, y, tab.order, rtol, atol, retract)
                stats["fevals"] += 2
                if not np.isfinite(h):
                    raise FloatingPointError(f"the right-hand side is NaN or inf at t = {t}: "
                                             "check the initial state and the model's parameters")
            while t < t1:
                if stats["steps"] + stats["rejected"] > max_steps:
                    raise RuntimeError(f"more than {max_steps} steps; the problem may be stiff "
                                       "or the tolerances too tight")
                if limit is not None:
                    h = min(h, limit)
                last = t + h >= t1 - 1e-12 * max(1.0, abs(t1))
                hh = t1 - t if last else h
                y_new, err = rk_step(f, t, y, hh, tab, retract, k0=k_first, stages=k_stages)
                stats["fevals"] += tab.stages - (k_first is not None)
                k_first = k_stages[0]  # kept if this step is rejected
                scale = atol + rtol * np.maximum(np.abs(y), np.abs(y_new))
                en = error_norm(np.abs(np.asarray(err)) / scale)
                if not np.isfinite(en):
                    en = 1e10
                if en <= 1.0:
                    t = t1 if last else t + hh
                    y = y_new
                    # FSAL: the last stage is f at (t_old + c_s hh, y_new), c_s = 1 to
                    # round-off: the same state, the time within an ulp or two of t
                    k_first = k_stages[-1] if fsal else None
                    stats["steps"] += 1
                    if progress is not None:
                        progress(t)
                    fac = 5.0 if en == 0 else min(5.0, 0.9 * en ** (-1.0 / (tab.err_order + 1)))
                    if not last or hh >= h:
                        h = hh * fac
                else:
                    stats["rejected"] += 1
                    h = hh * max(0.2, 0.9 * en ** (-1.0 / (tab.err_order + 1)))
                if h < max(1e-14 * max(1.0, abs(t)), min_step):
                    raise StepSizeError(
                        f"the adaptive step fell to {h:.2e} at t = {t:.6g}, below "
                        f"{MIN_STEP_FRACTION:g} of the time span {span:.3g}: the solution blows "
                        "up, is not resolved, or moves too fast for this time scale")
        if not np.all(np.isfinite(y)):
            raise FloatingPointError(f"the state became NaN or inf between t = {t0} and t = {t1}; "
                                     "a smaller step (or an adaptive scheme) may help")
        if keep is None or keep(i):
            out.append(y)
        if callback is not None and callback(i, t1, y):
            break
    return out, stats


def _initial_step(f, t, y, order, rtol, atol, retract=_add):
    """Hairer–Nørsett–Wanner's starting step heuristic (Solving ODEs I, II.4); the trial
    Euler step goes through the retraction so that f sees a valid (manifold) state."""
    f0 = f(t, y)
    scale = atol + rtol * np.abs(y)
    d0 = float(np.sqrt(np.mean((y / scale) ** 2)))
    d1 = float(np.sqrt(np.mean((f0 / scale) ** 2)))
    h0 = 1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01 * d0 / d1
    f1 = f(t + h0, retract(y, h0 * f0))
    d2 = float(np.sqrt(np.mean(((f1 - f0) / scale) ** 2))) / h0
    if max(d1, d2) <= 1e-15:
        h1 = max(1e-6, h0 * 1e-3)
    else:
        h1 = (0.01 / max(d1, d2)) ** (1.0 / (order + 1))
    return min(100 * h0, h1)
