"""How long a validated scenario will take, estimated before it runs.

An order-of-magnitude model, good to a factor of a few: each task takes
steps × seconds per step, where

- the steps grow with the model time the solver covers times the speed scale ‖A‖ = max |eigenvalue|
  (the velocity is at most ‖V‖ for softmax attention; unnormalized attention without
  ``rescale_time`` moves e^β times faster), at a rate per unit of ‖A‖ t that depends on the
  solver (and, for the finite volumes, on the cells n, as a CFL condition does);
- the seconds per step grow with the resolution: N tokens (a far-field kernel: linear in N),
  lmax² (spherical-harmonic transforms on a (lmax+1) × 2lmax grid); the finite volumes take
  about 2.1 n transport substeps per unit of ‖A‖ t (their positivity bound on cells of size
  1/n), each costing n² cells, plus the field evaluations of the macro steps (about 5.5 per
  unit of time, fixed by the output spacing, not by n): 0.18 + 3.6e-6 n³ s per unit time.

The constants were measured with the built-in scenario's model on a 2-core machine at the
sizes N = 200…4000, lmax = 16…128 and (finite volumes, multirate, β = 256) n = 32…64; the
model's only purpose is to catch scenarios that take hours before they start
(:func:`refuse_if_too_long`), not to predict minutes.
"""
from __future__ import annotations

import math

from .config import ConfigError, beta_text

__all__ = ["estimate", "refuse_if_too_long", "LIMIT_SECONDS"]

#: A scenario estimated above this many seconds is refused unless confirmed (``--yes``).
LIMIT_SECONDS = 3600.0

#: Per solver: (steps per unit of ‖A‖ t at resolution r, seconds per step at resolution r).
_MODEL = {
    "particles": (lambda r: 8.0, lambda r: 2e-3 + 6e-6 * r),
    "spectral": (lambda r: 70.0, lambda r: 1e-3 + 2.3e-6 * r * r),
    "finite_volume": (lambda r: 2.1 * r, lambda r: 0.086 / r + 1.7e-6 * r * r),
}
#: What to turn, per solver, when the estimate is too long.
_KNOBS = {"particles": "particles.n or run.t_end",
          "spectral": "spectral.lmax or spectral.t_end (or spectral.enabled = false)",
          "finite_volume": "finite_volume.n or finite_volume.betas (or finite_volume.enabled "
                           "= false)"}


def _speed(cfg: dict, beta: float) -> float:
    """The velocity scale of the model: ‖A‖ for the "rotation" set-up (1 for identity
    matrices), times e^β for unnormalized attention in its own time."""
    m = cfg["model"]
    scale = max(abs(v) for v in m["eigenvalues"]) if m["matrices"] == "rotation" else 1.0
    if not m["normalized"] and not m["rescale_time"]:
        scale *= math.exp(min(beta, 700.0))  # e^700 is near float64's largest power of e
    return max(scale, 1e-3)


def estimate(cfg: dict) -> list[tuple[str, float, float]]:
    """(solver, β, estimated seconds) of every task of a validated scenario."""
    from .scenario import tasks_of

    rows = []
    for task in tasks_of(cfg):
        steps_rate, per_step = _MODEL[task.solver]
        r = task.resolution
        span = float(task.times[-1])
        steps = steps_rate(r) * _speed(cfg, task.beta) * span
        rows.append((task.solver, task.beta, steps * per_step(r)))
    return rows


def _duration(seconds: float) -> str:
    if seconds >= 7200:
        return f"{seconds / 3600:.3g} hours"
    return f"{seconds / 60:.3g} minutes"


def refuse_if_too_long(cfg: dict, limit: float = LIMIT_SECONDS) -> float:
    """The estimated seconds of a scenario; raises :class:`ConfigError` when above ``limit``,
    with the estimate, the costliest solver and the keys that make it cheaper."""
    rows = estimate(cfg)
    total = sum(s for _, _, s in rows)
    if total <= limit:
        return total
    by_solver: dict = {}
    for solver, _, s in rows:
        by_solver[solver] = by_solver.get(solver, 0.0) + s
    worst = max(by_solver, key=by_solver.get)
    beta = max((r for r in rows if r[0] == worst), key=lambda r: r[2])[1]
    raise ConfigError(
        f"this scenario would take about {_duration(total)} (an estimate good to a factor of a "
        f"few; {worst} {_duration(by_solver[worst])}, most at beta = {beta_text(beta)}, with "
        f"a speed scale of {_speed(cfg, beta):.3g} from model.eigenvalues, over run.t_end = "
        f"{cfg['run']['t_end']:g}); lower {_KNOBS[worst]}, or pass --yes "
        "(run_scenario(..., yes=True)) to run it anyway")
