r"""One time driver and one registry of explicit Runge–Kutta tableaus, shared by every solver.

Each scheme is a :class:`Tableau` registered under its name in the :class:`Registry`
:data:`SCHEMES`; tests are parametrized over the whole registry, so adding a tableau adds it to
the order test. Error norms of the adaptive pairs are the registry :data:`ERROR_NORMS`.

The driver :func:`march` owns the loop: output times hit exactly, the step cap (CFL), a budget
of steps on every path, the NaN check, progress and callbacks. What a step is and how long it
may be is the business of a :class:`StepController`:

- :class:`FixedStep`: a fixed step, shortened uniformly to land on every output;
- :class:`Adaptive`: an embedded pair with a PI (Gustafsson) controller;
- :class:`PositivityRate`: steps dt = cfl / r from a positivity rate r that the right-hand side
  returns with its value (the finite-volume schemes), re-taken when a later stage's rate exceeds
  1/dt;
- :class:`Multirate`: macro steps for an expensive velocity, whose length is set by an error
  estimate of the velocity's own change in time; inside each macro step another controller
  (e.g. :class:`PositivityRate`) substeps a cheap transport with the velocity interpolated in
  time.

:func:`integrate` builds the first two from a scheme name and runs :func:`march`.

The state may live on a manifold: the controllers take a ``retract(y, dy)`` map that is
applied to every stage and to every step (for the sphere, :func:`spherepde.sphere.retract`;
for coefficient vectors, plain addition). With a retraction that agrees with the exponential
map to second order and a vector field that is tangent and 0-homogeneous, the projected method
keeps the order of the tableau (Hairer–Lubich–Wanner, Geometric Numerical Integration, §IV.4).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .registry import Registry

__all__ = ["Tableau", "SCHEMES", "register", "get_scheme", "integrate", "rk_step", "march",
           "DEFAULT_RTOL", "DEFAULT_ATOL", "StepSizeError", "StepBudgetError", "MIN_STEP_FRACTION",
           "ERROR_NORMS", "get_error_norm", "StepController", "FixedStep", "Adaptive",
           "PositivityRate", "Multirate", "DEFAULT_MAX_STEPS"]

#: Default tolerances of the adaptive pair: about 1e-8 relative accuracy at the outputs
#: on the problems of the test suite (measured in tests/test_timestepping.py).
DEFAULT_RTOL = 1e-9
DEFAULT_ATOL = 1e-11
#: An adaptive step below this fraction of the integration span ends the run: it would need
#: more than 1e10 steps, which is a blow-up or an unresolved problem, never a result.
MIN_STEP_FRACTION = 1e-10
#: Steps (accepted and rejected) after which :func:`march` gives up: 10^7 steps of even the
#: cheapest right-hand side is hours of work, so a run that needs more has a setting wrong.
DEFAULT_MAX_STEPS = 10_000_000


class StepSizeError(RuntimeError):
    """The adaptive step kept shrinking (a blow-up, an unresolved discretisation, or a field
    too fast for the time scale). Solvers re-raise it naming the setting to change."""


class StepBudgetError(RuntimeError):
    """The run would take more than its budget of steps; the message names the setting."""


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


#: The explicit Runge–Kutta tableaus by name.
SCHEMES = Registry("time-stepping scheme")


def register(name: str, order: int, a, b, c=None, b_hat=None, err_order=None) -> Tableau:
    """Register a tableau in :data:`SCHEMES` (c defaults to the row sums of a)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    c = a.sum(axis=1) if c is None else np.asarray(c, dtype=np.float64)
    b_err = None if b_hat is None else b - np.asarray(b_hat, dtype=np.float64)
    tab = Tableau(name, order, a, b, c, b_err, err_order)
    SCHEMES.register(name, tab)
    return tab


def get_scheme(name: str) -> Tableau:
    """The tableau registered as ``name`` (ValueError listing the registered ones)."""
    return SCHEMES.get(SCHEMES.check(name))


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
ERROR_NORMS = Registry("error norm")
ERROR_NORMS.register("max", _max_norm)
ERROR_NORMS.register("rms", _rms_norm)


def get_error_norm(name: str) -> Callable:
    """The error norm registered as ``name`` (ValueError listing the registered ones)."""
    return ERROR_NORMS.get(ERROR_NORMS.check(name))


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



# ---------------------------------------------------------------------------- the controllers
class StepController:
    """What a step is and how long it may be, for :func:`march`.

    :func:`march` calls :meth:`begin` once, :meth:`interval` at the start of every output
    interval, then :meth:`propose` and :meth:`attempt` until the interval is crossed. A
    controller keeps its own state between steps (a reusable first stage, the last error).
    """

    #: what to change when the budget of steps runs out (ends the StepBudgetError's message)
    hint = "loosen the tolerances"
    #: whether march caps the proposed steps by its step cap (dt_max)
    capped = True
    #: whether a proposed step predicts the steps still to come (a step set by a stability
    #: bound, which the state changes only slowly): march then refuses, at the first step, a
    #: run that would need more than its budget, instead of working until the budget is spent
    predictive = False

    def begin(self, t0: float, span: float, stats: dict) -> None:
        """Start a run over [t0, t0 + span]; ``stats`` is updated in place."""
        self.span = span
        self.stats = stats

    def interval(self, t0: float, t1: float, y, limit) -> float | None:
        """Start the output interval [t0, t1] (``limit``: the step cap there, or None); returns
        the number of steps it will take when known in advance (fixed steps), else None."""
        return None

    def propose(self, t: float, y) -> float:
        """The step to try from (t, y) (march may shorten it to land on an output)."""
        raise NotImplementedError

    def attempt(self, t: float, y, h: float, shortened: bool):
        """Try the step h from (t, y): (y_new, accepted). ``shortened``: h is less than what
        :meth:`propose` asked for (it lands on an output), so the next step need not shrink."""
        raise NotImplementedError


class FixedStep(StepController):
    """A fixed step dt, shortened uniformly so that every output time is hit exactly; without dt,
    the step cap of the interval (one step per interval where there is none)."""

    capped = False  # the cap is read in interval(); a given dt takes precedence over it

    def __init__(self, f: Callable, tab: Tableau, dt: float | None = None,
                 retract: Callable = None):
        self.f, self.tab, self.dt = f, tab, dt
        self.retract = _add if retract is None else retract
        self.h = None

    @property
    def hint(self) -> str:
        return (f"the fixed step dt = {self.dt:.3g} is too small for this time span: raise dt"
                if self.dt is not None else "the step cap is too small: raise dt_max")

    def interval(self, t0, t1, y, limit):
        step = self.dt if self.dt is not None else (limit if limit is not None else t1 - t0)
        with np.errstate(over="ignore", divide="ignore"):
            n = max(1.0, math.ceil(min((t1 - t0) / step - 1e-12, 1e300)))
        self.h = (t1 - t0) / n
        return n

    def propose(self, t, y):
        return self.h

    def attempt(self, t, y, h, shortened):
        # every step of the interval is the planned (t1 - t0)/n, the last one included: march's
        # landing differs from it by rounding only (a step under 1e-12 of t1, where the two
        # could differ by more, would take more than the budget of steps)
        y_new, _ = rk_step(self.f, t, y, self.h, self.tab, self.retract)
        self.stats["fevals"] += self.tab.stages
        return y_new, True


class Adaptive(StepController):
    r"""An embedded pair with error control: the step is accepted when the error estimate,
    scaled by atol + rtol·|y| and combined by the norm ``norm`` (:data:`ERROR_NORMS`), is
    en <= 1; the next step is h·min(5, 0.9·en^{-alpha}·en_prev^{beta}) (PI control,
    Gustafsson 1991; alpha = 1/(q + 1) with q the embedded order, beta = 0 by default: the
    elementary controller), at least 0.2·h after a rejection. The first stage is reused after a
    rejection and, for a first-same-as-last tableau, after an acceptance."""

    hint = "the problem may be stiff or the tolerances (rtol, atol) too tight"

    def __init__(self, f: Callable, tab: Tableau, rtol: float = DEFAULT_RTOL,
                 atol: float = DEFAULT_ATOL, *, retract: Callable = None, norm: str = "max",
                 h0: float | None = None, pi_beta: float = 0.0):
        if not tab.adaptive:
            raise ValueError(f"scheme {tab.name!r} has no embedded error estimate; it cannot "
                             "adapt its step (use scheme='dopri5')")
        if not (np.isfinite(rtol) and np.isfinite(atol) and rtol > 0 and atol >= 0):
            raise ValueError(f"rtol must be > 0 and atol >= 0 (finite); got rtol = {rtol}, "
                             f"atol = {atol}")
        self.f, self.tab, self.rtol, self.atol = f, tab, rtol, atol
        self.retract = _add if retract is None else retract
        self.error_norm = get_error_norm(norm)
        self.h = h0
        self.alpha = 1.0 / (tab.err_order + 1)
        self.pi_beta = float(pi_beta)
        self.en_prev = 1.0
        self.k_first, self.k_stages = None, []

    def begin(self, t0, span, stats):
        super().begin(t0, span, stats)
        self.min_step = MIN_STEP_FRACTION * span

    def propose(self, t, y):
        if self.h is None:
            self.h = _initial_step(self.f, t, y, self.tab.order, self.rtol, self.atol,
                                   self.retract)
            self.stats["fevals"] += 2
            if not np.isfinite(self.h):
                raise FloatingPointError(f"the right-hand side is NaN or inf at t = {t}: "
                                         "check the initial state and the model's parameters")
            self._check_floor(self.h, t)
        return self.h

    def attempt(self, t, y, h, shortened):
        tab = self.tab
        y_new, err = rk_step(self.f, t, y, h, tab, self.retract, k0=self.k_first,
                             stages=self.k_stages)
        self.stats["fevals"] += tab.stages - (self.k_first is not None)
        self.k_first = self.k_stages[0]  # kept if this step is rejected
        scale = self.atol + self.rtol * np.maximum(np.abs(y), np.abs(y_new))
        en = self.error_norm(np.abs(np.asarray(err)) / scale)
        if not np.isfinite(en):
            en = 1e10
        if en <= 1.0:
            # FSAL: the last stage is f at (t + c_s h, y_new), c_s = 1 to round-off: the same
            # state, the time within an ulp or two of t + h
            self.k_first = self.k_stages[-1] if tab.fsal else None
            fac = 5.0 if en == 0 else min(5.0, 0.9 * en ** (-self.alpha)
                                          * self.en_prev ** self.pi_beta)
            self.en_prev = max(en, 1e-4)
            if not shortened:
                self.h = h * fac
            self._check_floor(self.h, t + h)
            return y_new, True
        self.h = h * max(0.2, 0.9 * en ** (-self.alpha))
        self._check_floor(self.h, t)
        return y, False

    def _check_floor(self, h, t):
        if h < max(1e-14 * max(1.0, abs(t)), self.min_step):
            raise StepSizeError(
                f"the adaptive step fell to {h:.2e} at t = {t:.6g}, below "
                f"{MIN_STEP_FRACTION:g} of the time span {self.span:.3g}: the solution blows "
                "up, is not resolved, or moves too fast for this time scale")


class PositivityRate(StepController):
    r"""Steps dt = cfl / r of a positivity-preserving scheme, where ``tendency(t, y)`` returns
    (dy/dt, r) and a forward-Euler step of length <= 1/r keeps the state >= 0 (the
    finite-volume schemes). With a strong-stability-preserving tableau (SSP coefficient 1) a
    step keeps positivity when dt·r <= 1 at every stage; a step whose later stage has a larger
    rate r' is re-taken with dt = cfl/r' (cfl <= 1 only). The first stage (evaluated to find
    r) is reused by the step and its re-takes. ``stats["max_courant"]`` is the largest dt·r."""

    hint = "refine less (smaller n) or raise cfl"
    predictive = True

    def __init__(self, tendency: Callable, tab: Tableau, cfl: float, retract: Callable = None):
        self.tendency, self.tab, self.cfl = tendency, tab, float(cfl)
        self.retract = _add if retract is None else retract
        self.k0, self.rate, self.retry = None, 0.0, None

    def begin(self, t0, span, stats):
        super().begin(t0, span, stats)
        stats.setdefault("max_courant", 0.0)

    def propose(self, t, y):
        if self.retry is not None:
            return self.retry
        self.k0, self.rate = self.tendency(t, y)
        self.stats["fevals"] += 1
        return self.cfl / self.rate if self.rate > 0 else np.inf

    def attempt(self, t, y, h, shortened):
        rate = [self.rate]

        def stage(s, z):
            dz, r = self.tendency(s, z)
            rate[0] = max(rate[0], r)
            return dz

        y_new, _ = rk_step(stage, t, y, h, self.tab, self.retract, k0=self.k0)
        self.stats["fevals"] += self.tab.stages - 1
        if rate[0] * h <= 1.0 + 1e-12 or self.cfl > 1.0:
            self.retry = None
            self.stats["max_courant"] = max(self.stats["max_courant"], rate[0] * h)
            return y_new, True
        self.retry = self.cfl / rate[0]
        return y, False


#: Multirate: the largest factor by which one macro step may exceed the last.
MAX_GROWTH = 4.0


class Multirate(StepController):
    r"""Macro steps for an expensive velocity, substeps for a cheap transport inside them.

    ``velocity(t, y)`` is evaluated once per macro step, at its end. Over the macro step
    [t, t + H] the transport sees the linear extrapolation of the last two evaluations,

    .. math:: \tilde u(s) = u_n + (s - t)\,\frac{u_n - u_{n-1}}{H_{n-1}}

    (the constant u_n on the first step), and ``substeps(u_of_s)`` returns the controller
    that marches the transport from t to t + H with it (:func:`march`, e.g.
    :class:`PositivityRate`). At t + H the velocity u_{n+1} is evaluated at the new state and
    the defect e = ``defect(u_{n+1}, ũ(t + H), y_{n+1})`` measures the extrapolation's error,
    :math:`e \approx \tfrac12 |\ddot u|\, H (H + H_{n-1})`, of order p = 2 in H (p = 1 on the
    first step). The step is accepted when e <= tol and the next one is
    H·min(4, max(0.2, 0.9·(tol/e)^{1/p})); a rejected one is re-taken shorter, from the same
    state. The substeps' statistics go to ``stats["substeps"]``, ``stats["transport_evals"]``;
    ``stats["fevals"]`` counts the velocity evaluations.
    """

    hint = "the velocity changes too fast for macro_tol: loosen macro_tol"
    capped = False  # a cap bounds the substeps (the substep controller's business)

    def __init__(self, velocity: Callable, substeps: Callable, defect: Callable, tol: float,
                 h0: float | None = None, max_substeps: int = DEFAULT_MAX_STEPS):
        if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol > 0):
            raise ValueError(f"macro_tol must be a finite number > 0; got {tol!r}")
        self.velocity, self.substeps, self.defect = velocity, substeps, defect
        self.tol, self.h, self.max_substeps = float(tol), h0, int(max_substeps)
        self.u = self.slope = None

    def begin(self, t0, span, stats):
        super().begin(t0, span, stats)
        for key in ("substeps", "transport_evals", "macro_rejected"):
            stats.setdefault(key, 0)
        stats.setdefault("max_courant", 0.0)
        if self.h is None:
            self.h = span / 100.0

    def propose(self, t, y):
        if self.u is None:
            self.u = self.velocity(t, y)
            self.stats["fevals"] += 1
        return self.h

    def _transport(self, t, y, h):
        u, slope = self.u, self.slope
        u_of = (lambda s: u) if slope is None else (lambda s: u + (s - t) * slope)
        sub = {}
        out, _ = march(self.substeps(u_of), y, [t, t + h], stats=sub,
                       max_steps=self.max_substeps - self.stats["substeps"])
        st = self.stats
        st["substeps"] += sub["steps"]
        st["transport_evals"] += sub["fevals"]
        st["max_courant"] = max(st["max_courant"], sub.get("max_courant", 0.0))
        return out[-1], u_of(t + h)

    def attempt(self, t, y, h, shortened):
        y_new, u_pred = self._transport(t, y, h)
        u_new = self.velocity(t + h, y_new)
        self.stats["fevals"] += 1
        e = float(self.defect(u_new, u_pred, y_new))
        p = 1.0 if self.slope is None else 2.0
        fac = MAX_GROWTH if e == 0 else min(MAX_GROWTH,
                                            max(0.2, 0.9 * (self.tol / e) ** (1.0 / p)))
        if not np.isfinite(e) or e > self.tol:
            self.stats["macro_rejected"] += 1
            self.h = h * min(fac, 0.5)
            if self.h < MIN_STEP_FRACTION * self.span:
                raise StepSizeError(
                    f"the macro step fell below {MIN_STEP_FRACTION:g} of the time span "
                    f"{self.span:.3g} at t = {t:.6g} (defect {e:.3g} > macro_tol = {self.tol:g}): "
                    f"{self.hint}")
            return y, False
        self.slope = (u_new - self.u) / h
        self.u = u_new
        if not shortened:
            self.h = h * fac
        return y_new, True


# ---------------------------------------------------------------------------- the driver
def march(controller: StepController, y0, times, *, cap: Callable | None = None,
          callback: Callable | None = None, progress: Callable | None = None,
          keep: Callable | None = None, stats: dict | None = None,
          max_steps: int = DEFAULT_MAX_STEPS):
    """Integrate from y0 across ``times`` with the steps of ``controller``: the one time loop.

    Parameters
    ----------
    controller : StepController
    y0 : array, the state at times[0]
    times : (T,) strictly increasing output times; every one is landed on exactly
    cap : callable cap(t, y) -> float | None, optional
        Step cap (a CFL limit), consulted at times[0] and at every output time with the state
        there; it bounds the steps up to the next output (controllers with ``capped``).
    callback : callable callback(i, t, y) -> bool | None, optional
        Called at every output (i = 0 included); a true return ends the run after output i.
    progress : callable progress(t), optional, called after every accepted step
    keep : callable keep(i) -> bool, optional, which outputs to return (default all)
    stats : dict, optional, updated in place (steps, rejected, fevals and the controller's)
    max_steps : int
        Budget of steps (accepted and rejected): a run that would exceed it ends with a
        StepBudgetError naming the setting to change, before the work where it is known in
        advance (fixed steps).

    Returns
    -------
    list of the kept states, and the statistics dict.
    """
    times = _check_times(times)
    stats = {} if stats is None else stats
    for key in ("steps", "rejected", "fevals"):
        stats.setdefault(key, 0)
    out = [y0] if keep is None or keep(0) else []
    controller.begin(float(times[0]), float(times[-1] - times[0]), stats)
    y = y0
    if callback is not None and callback(0, times[0], y0):
        return out, stats
    for i in range(1, len(times)):
        t0, t1 = float(times[i - 1]), float(times[i])
        limit = cap(t0, y) if cap is not None else None
        y = _march_interval(controller, y, t0, t1, limit, progress, stats, max_steps)
        if not np.all(np.isfinite(y)):
            raise FloatingPointError(f"the state became NaN or inf between t = {t0} and t = {t1}; "
                                     "a smaller step (or an adaptive scheme) may help")
        if keep is None or keep(i):
            out.append(y)
        if callback is not None and callback(i, t1, y):
            break
    return out, stats


def _march_interval(controller, y, t0, t1, limit, progress, stats, max_steps):
    """March from (t0, y) to t1 (:func:`march`); returns the state at t1."""
    used = stats["steps"] + stats["rejected"]
    planned = controller.interval(t0, t1, y, limit)
    if planned is not None and used + planned > max_steps:
        raise StepBudgetError(f"reaching t = {t1:g} from t = {t0:g} takes {planned:.3g} steps, "
                              f"more than the budget max_steps = {max_steps}: {controller.hint}")
    t = t0
    while t < t1:
        if stats["steps"] + stats["rejected"] >= max_steps:
            raise StepBudgetError(f"more than max_steps = {max_steps} steps by t = {t:.6g} "
                                  f"(of {t1:g}): {controller.hint}")
        h = controller.propose(t, y)
        if limit is not None and controller.capped:
            h = min(h, limit)
        if controller.predictive and 0 < h < t1 - t:
            ahead = (t1 - t) / h
            if stats["steps"] + stats["rejected"] + ahead > max_steps:
                raise StepBudgetError(
                    f"at the step dt = {h:.3g} reaching t = {t1:g} from t = {t:.6g} takes about "
                    f"{ahead:.3g} steps, more than the budget max_steps = {max_steps}: "
                    f"{controller.hint}")
        last = t + h >= t1 - 1e-12 * max(1.0, abs(t1))
        hh = t1 - t if last else h
        y_new, accepted = controller.attempt(t, y, hh, last and hh < h)
        if accepted:
            y = y_new
            t = t1 if last else t + hh
            stats["steps"] += 1
            if progress is not None:
                progress(t)
        else:
            stats["rejected"] += 1
    return y


def integrate(f: Callable, y0, times, scheme: str = "dopri5", dt: float | None = None,
              rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
              retract: Callable = _add, callback: Callable | None = None,
              dt_max: float | Callable | None = None, max_steps: int = DEFAULT_MAX_STEPS,
              progress=None, adaptive: bool | None = None, keep: Callable | None = None,
              stats: dict | None = None, norm: str = "max"):
    """Integrate dy/dt = f(t, y) and return the states at ``times`` (times[0] is y0's time):
    :func:`march` with :class:`Adaptive` or :class:`FixedStep` for the tableau ``scheme``.

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
    callback, progress, keep, stats, max_steps : as :func:`march`
    dt_max : float or callable dt_max(t, y) -> float | None, optional
        Upper bound for the steps (e.g. a CFL limit), :func:`march`'s ``cap``. For a
        non-adaptive scheme without ``dt`` its value is the step (one step per output
        interval where it returns None).
    adaptive : bool, optional
        Use the embedded pair's error control (default: whenever the tableau has one).
        False runs an embedded pair at the fixed step ``dt`` (as the order test does).
    norm : str
        A name of :data:`ERROR_NORMS`: how the component errors of an adaptive step are
        combined ("max", the default, or "rms").

    Returns
    -------
    list of the stored states (all T by default), and a dict of statistics (steps, rejected,
    function evaluations).
    """
    tab = get_scheme(scheme)
    get_error_norm(norm)
    if adaptive is None:
        adaptive = tab.adaptive
    times = _check_times(times)
    if dt is not None:
        dt = float(dt)
        if not np.isfinite(dt) or dt <= 0:
            raise ValueError(f"dt must be a positive finite number; got {dt}")
    if adaptive:
        controller = Adaptive(f, tab, rtol, atol, retract=retract, norm=norm, h0=dt)
    elif dt is None and not callable(dt_max):
        raise ValueError(f"scheme {scheme!r} has a fixed step: pass dt, or use scheme='dopri5' "
                         "with rtol/atol")
    else:
        controller = FixedStep(f, tab, dt, retract)
    cap = dt_max if callable(dt_max) or dt_max is None else (lambda t, y: dt_max)
    return march(controller, y0, times, cap=cap, callback=callback, progress=progress,
                 keep=keep, stats=stats, max_steps=max_steps)


def _rms(v) -> float:
    """Root mean square of v, without overflow in the squares (inf only when max |v| is)."""
    m = float(np.max(np.abs(v))) if np.size(v) else 0.0
    if m == 0.0 or not np.isfinite(m):
        return m
    return m * float(np.sqrt(np.mean((v / m) ** 2)))


def _initial_step(f, t, y, order, rtol, atol, retract=_add):
    """Hairer–Nørsett–Wanner's starting step heuristic (Solving ODEs I, II.4); the trial
    Euler step goes through the retraction so that f sees a valid (manifold) state. NaN when
    f(t, y) is not finite; a StepSizeError when |f| is so large (beyond float64 after scaling)
    that no step could be resolved."""
    f0 = f(t, y)
    if not np.all(np.isfinite(f0)):
        return math.nan
    scale = atol + rtol * np.abs(y)
    with np.errstate(over="ignore"):
        d0, d1 = _rms(y / scale), _rms(f0 / scale)
    if not np.isfinite(d1) or (d1 > 0 and 0.01 * d0 / d1 == 0.0):
        raise StepSizeError(f"the right-hand side at t = {t} is too large to be resolved "
                            f"(max |dy/dt| = {float(np.max(np.abs(f0))):.3g}): the time scale "
                            "of the problem is beyond float64")
    h0 = 1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01 * d0 / d1
    f1 = f(t + h0, retract(y, h0 * f0))
    with np.errstate(over="ignore"):
        d2 = _rms((f1 - f0) / scale) / h0
    if max(d1, d2) <= 1e-15:
        h1 = max(1e-6, h0 * 1e-3)
    else:
        h1 = (0.01 / max(d1, d2)) ** (1.0 / (order + 1))
    return min(100 * h0, h1)
