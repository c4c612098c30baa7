"""What holds the dominant cluster near e after t*, and what releases it (scenario R1; and
how fast the default scenario's pair turns, E1).

In R1 (docs/theory.md §3.4) the mass reaches Pi#rho_0 = m+ delta_e + m- delta_-e near t*,
stays near it for a while, then leaves along the lone-cluster flow x' = P_x V x towards +-v.
A cluster at c that attends only to itself moves at the lone-cluster velocity P_c V c, which
at c = e is 0.26 in R1: it would leave at once. This study measures why it does not.

For tokens on rho_0's product Gauss rule (the late-phase study's particle runs), at every
output:

- the + cluster's centre c (mean shift from e), its angle from e;
- a query at c: its attention a_j ~ w_j exp(beta <c, B x_j>), the share of that attention
  carried by the *tail*, the tokens farther than two attention widths 2 / sqrt(beta <c, Bc>)
  from c, and the tail's mass;
- the centre's speed |P_c V m(c)| (m(c) = sum_j a_j x_j, the velocity of a token at c) against
  the lone-cluster speed |P_c V c|: the *speed ratio*, 1 for a free cluster.

Interventions, at a time T inside the hold (T = t* + 1), on the same run otherwise:

- ``move``: the tail removed, every token farther than two attention widths from its own
  cluster's centre put onto that centre (each side's mass kept, Pi#rho_0 unchanged);
- ``scale f``: the tail's weights times f, the rest of its side scaled to keep that side's mass.

Times: t* (minimum of W2 to Pi#rho_0), t_dep (W2 back at 1.5 x its minimum, the late-phase
study's definition) and t_rel, the release: the first time after t* from which the speed
ratio stays above 1/2.

Tail refinement at fixed bulk (``band`` runs): tokens from :func:`band_rule`, a composite
product rule about e whose band |<x, e>| < 0.08 around the separatrix E^perp, where the hold's
tail starts, is k times finer across it and k_along times along it, while the bulk keeps the
spacing of 16000 tokens. They tell whether the tokens lack bulk or resolution across the
separatrix, where their positions after t* form a layer of width ~e^{-lambda t}.

Handoff (``handoff`` runs, beta = 256): the finite volumes to t = 12, where both methods
still agree, then tokens on a sub x sub Gauss rule of every cell's reconstructed density
(each cell's mass kept), against the cells run on to t = 36. From one state, do the tokens'
dynamics hold the cluster as long as the cells' do? If they do, the two methods differ only in
the state they carry to t = 12 (the tail across the separatrix); if not, in the dynamics after.

Every run is saved atomically under ``validation/output/departure[_quick]_runs/`` and reused;
``validation/output/departure[_quick].{md,png}`` are written from the saved runs.

Run:
    .venv/bin/python validation/departure.py --quick    # about 2 minutes on one core
    .venv/bin/python validation/departure.py            # about 4 CPU hours
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from _common import OUT, publish, stored_run, table
from late_phase import CONVERGED_FRACTION, DEP_FRACTION, model_for
from low_temperature import _particle_solver, initial
from scipy.special import logsumexp

import spherepde as sp

#: Output spacing.
STEP = 0.25
#: The tail: tokens farther than this many attention widths 1 / sqrt(beta <c, Bc>) from c.
TAIL_WIDTHS = 2.0
#: Mean-shift radii (rad) that locate a cluster's centre from a guess, coarse to fine.
SHIFT_RADII = (0.3, 0.15, 0.08, 0.05, 0.05, 0.05)
#: The core (rad) whose spread sigma^2 gives the speed ratio of a lone Gaussian core: a query
#: at its centre c attends to c + kappa P_c B^T c, kappa = beta sigma^2 / (1 + beta sigma^2
#: <c, Bc>); at c = e that ratio is 1 / (1 + beta sigma^2 <e, Be>).
CORE_RADIUS = 0.3
#: After the release, the speed ratios are averaged over this window.
FREE_WINDOW = 2.0
#: The release: the speed ratio stays above this from then on.
RELEASE_RATIO = 0.5
#: The arrival t_arr: W2 to the terminal measure below this (the late-phase t_term(0.1)).
ARRIVAL_W2 = 0.1
#: The plateau of W2 to Pi#rho_0 starts where it first comes within this fraction of its
#: minimum (the hold's start for the tail's logit clock; t* itself wanders along a flat plateau).
PLATEAU_FRACTION = 0.01
#: The band about the great circle <x, e> = 0 that band_rule refines: the tokens in R1's tail
#: during the hold started within 0.07 of that circle (beta = 64, N = 16000), and the
#: tokens' separatrix there, located with zero-weight tracers, lies within 0.045 of it.
BAND_HALF_WIDTH = 0.08


@dataclass(frozen=True)
class Run:
    beta: float
    n: int
    t_end: float
    event: str = ""        # "", "move" or a factor f (as text) applied to the tail at t_event
    t_event: float = math.nan
    solver: str = "particles"  # "finite_volume": n cells per cube face, no event; "handoff"
    scenario: str = "R1"       # or "E1", the default scenario, whose pair turns
    band: int = 0              # k > 0: tokens on band_rule(n, k, k_along) instead of the
    band_along: int = 0        # product rule (k_along = 0: k)
    sub: int = 0               # solver "handoff": cells n to t_event, then tokens on a
    #                            sub x sub Gauss rule of every cell's reconstructed density

    @property
    def name(self) -> str:
        tag = f"_{self.event}@{self.t_event:g}" if self.event else ""
        kind = {"particles": "", "finite_volume": "fv_", "handoff": "handoff_"}[self.solver]
        tag += f"_band{self.band}x{self.along}" if self.band else ""
        tag += f"_at{self.t_event:g}_sub{self.sub}" if self.solver == "handoff" else ""
        return f"{self.scenario}_{kind}beta={self.beta:g}_n={self.n}_t={self.t_end:g}{tag}"

    @property
    def along(self) -> int:
        return self.band_along or self.band

    @property
    def label(self) -> str:
        if self.solver == "finite_volume":
            return f"cells n = {self.n}"
        if self.solver == "handoff":
            return f"cells n = {self.n} to t = {self.t_event:g}, then tokens {self.sub}^2 a cell"
        if self.band:
            return f"N = {self.n}, band x {self.band} across, x {self.along} along"
        if not self.event:
            return f"N = {self.n}"
        what = "tail removed" if self.event == "move" else f"tail x {self.event}"
        return f"N = {self.n}, {what} at t = {self.t_event:g}"


@dataclass(frozen=True)
class Plan:
    runs: tuple


def _plan_for(betas_t, counts, events, cells=()):
    """Per (beta, t_end, t_event): base runs at every token count, each event at the first
    count, and finite volumes at each resolution in ``cells``; computed in the order: the
    first count's runs, the cells, the other counts."""
    first, rest, fv = [], [], []
    for beta, t_end, t_event in betas_t:
        first += [Run(beta, counts[0], t_end)]
        first += [Run(beta, counts[0], t_end, ev, t_event) for ev in events]
        rest += [Run(beta, n, t_end) for n in counts[1:]]
        fv += [Run(beta, n, t_end, solver="finite_volume") for n in cells]
    return Plan(tuple(first + sorted(fv, key=lambda r: r.n) + rest))


QUICK = _plan_for([(64.0, 10.0, 5.0)], [4000], ["move"])
#: E1 at beta = 16: the turning pair, whose period the cells overestimate (late-phase study),
#: probed by the same diagnostics over [0, 50] (one turn) by tokens and cells.
E1_TURN = (Run(16.0, 16000, 50.0, scenario="E1"),
           Run(16.0, 32, 50.0, solver="finite_volume", scenario="E1"),
           Run(16.0, 64, 50.0, solver="finite_volume", scenario="E1"))
FULL = _plan_for([(64.0, 12.0, 5.0), (256.0, 16.0, 7.0)], [16000, 64000],
                 ["move", "0.25", "4"], cells=(32, 64))
#: Tail refinement at fixed bulk: R1 from band rules with the bulk of 16000 tokens, k times
#: finer in both directions (k = 1, 2, 4) and only across the separatrix (k = 8, 32, 128),
#: against the same N and 4N on the product rule.
BANDS = (tuple(Run(64.0, 16000, 12.0, band=k, band_along=a)
               for k, a in ((1, 1), (2, 2), (4, 4), (8, 1), (32, 1), (128, 1)))
         + tuple(Run(256.0, 16000, 16.0, band=k, band_along=a)
                 for k, a in ((1, 1), (4, 4), (32, 1), (128, 1))))
#: The two methods' dynamics from one state: at beta = 256 the cells hold the + cluster until
#: t ~ 28 and the tokens from rho_0 release it by t ~ 16, though both agree to t = 12. Cells
#: to t = 12, then tokens from their state (1 and 4 a cell), against the cells run on.
HANDOFF = tuple(Run(256.0, n, 36.0, t_event=12.0, solver="handoff", sub=s)
                for n, s in ((64, 1), (32, 1), (32, 2), (64, 2))) + tuple(
    Run(256.0, n, 36.0, solver="finite_volume") for n in (64, 32))
#: E1 at beta = 1000: the cells hold the pair near +-e until t_dep = 122, 129, 155 at n = 16,
#: 32, 64 (late-phase study). What holds it, and does the hold's clock move with n? And at
#: beta = 256 and 64 (t_dep 34-38 and 9-10 at n = 32, 64), whether the same law of release
#: holds and how the clock scales with beta.
E1_HOLD = tuple(Run(1000.0, n, 200.0, solver="finite_volume", scenario="E1")
                for n in (16, 32, 64)) + tuple(
    Run(beta, n, t_end, solver="finite_volume", scenario="E1")
    for beta, t_end in ((256.0, 60.0), (64.0, 30.0)) for n in (32, 64))
FULL = Plan(FULL.runs + BANDS + E1_TURN + HANDOFF + E1_HOLD)


# ------------------------------------------------------------------------------ the probe
def w2_two_antipodal(x, w, e, m_plus) -> float:
    """Chordal W2 between the weighted cloud (x, w) and m+ delta_e + (1 - m+) delta_-e, exact:
    the cost difference between the two atoms is 4 <x, e>, so the optimal plan sends the
    m+ of mass with the largest <x, e> to e (one token split at the boundary)."""
    s = x @ e
    order = np.argsort(-s)
    ws, ss = w[order], s[order]
    before = np.cumsum(ws) - ws
    to_plus = np.clip(m_plus - before, 0.0, ws)
    cost = to_plus * (2 - 2 * ss) + (ws - to_plus) * (2 + 2 * ss)
    return float(math.sqrt(max(cost.sum(), 0.0)))


class Probe:
    """The cluster diagnostics of one model (see the module docstring)."""

    def __init__(self, model):
        self.model, self.beta = model, model.beta
        self.B, self.V = model.B, model.V
        self.v = terminal_atom(model)

    def centre(self, x, w, guess):
        c = np.asarray(guess, dtype=float)
        for r in SHIFT_RADII:
            near = (x @ c) > math.cos(r)
            if w[near].sum() == 0:
                break
            c = w[near] @ x[near]
            c = c / np.linalg.norm(c)
        return c

    def width(self, c) -> float:
        """One attention width at c: the softmax about c is a Gaussian of this deviation."""
        return 1.0 / math.sqrt(self.beta * (c @ self.B @ c))

    def tail(self, x, c, side):
        """The tokens of ``side`` farther than TAIL_WIDTHS attention widths from c."""
        return side & (np.arccos(np.clip(x @ c, -1, 1)) > TAIL_WIDTHS * self.width(c))

    def score(self, x, c) -> np.ndarray:
        """A query at c's exponents beta <c, B x_j>."""
        return self.beta * (x @ (self.B.T @ c))

    def attention(self, x, w, c) -> np.ndarray:
        """The weights a query at c puts on the tokens: w_j exp(beta <c, B x_j>), summing to 1."""
        score = self.score(x, c)
        a = w * np.exp(score - score.max())
        return a / a.sum()

    def core_ratio(self, c, var: float) -> float:
        """The speed of an isotropic Gaussian core about c, of variance ``var`` per tangent
        direction, tilted by the attention, over the speed of a point at c."""
        Pc = np.eye(3) - np.outer(c, c)
        b = float(c @ self.B @ c)
        kappa = self.beta * var / (1.0 + self.beta * var * b)  # the tilt of a Gaussian core
        core_m = c + kappa * (Pc @ self.B.T @ c)
        return float(np.linalg.norm(Pc @ self.V @ core_m) / np.linalg.norm(Pc @ self.V @ c))

    def tail_logit(self, x, w, c, tail) -> tuple[float, float]:
        """log(the tail's attention / the rest's) for a query at c, summed in log space (a
        tight hold's share, 1 - e^-100, is 1.0 in floating point), and the angle from c of the
        tail's attention-weighted mean: where the attention that holds the cluster sits."""
        score = self.score(x, c)
        near = ~tail
        if not (w[tail] > 0).any() or not (w[near] > 0).any():
            return math.nan, math.nan
        logit = logsumexp(score[tail], b=w[tail]) - logsumexp(score[near], b=w[near])
        a = w[tail] * np.exp(score[tail] - score[tail][w[tail] > 0].max())
        m = a @ x[tail]
        return float(logit), float(np.arccos(np.clip(m @ c / np.linalg.norm(m), -1, 1)))

    def row(self, x, w, c) -> dict:
        a = self.attention(x, w, c)
        Pc = np.eye(3) - np.outer(c, c)
        tail = self.tail(x, c, np.ones(len(x), bool))
        logit, where = self.tail_logit(x, w, c, tail)
        lone = float(np.linalg.norm(Pc @ self.V @ c))
        core = (x @ c) > math.cos(CORE_RADIUS)
        # per tangent direction: E(1 - <x, c>) = E|xi|^2 / 2 = sigma^2 for an isotropic core
        var = float(w[core] @ (1.0 - x[core] @ c) / w[core].sum())
        return {"angle": float(np.arccos(np.clip(c[0], -1, 1))), "share": float(a[tail].sum()),
                "tail_mass": float(w[tail & (x[:, 0] > 0)].sum()),
                "ratio": float(np.linalg.norm(Pc @ self.V @ (a @ x))) / lone,
                "core_ratio": self.core_ratio(c, var), "tail_logit": logit,
                "tail_angle": where}

    def record(self, x, w, c, m_plus) -> dict:
        """The row of one output: :meth:`row`, W2 to m+ delta_e + (1 - m+) delta_-e (Pi#rho_0)
        and to m+ delta_v + (1 - m+) delta_-v (R1's terminal measure)."""
        term = math.nan if self.v is None else w2_two_antipodal(x, w, self.v, m_plus)
        return {**self.row(x, w, c), "w2": w2_two_antipodal(x, w, E, m_plus), "w2_term": term}


def terminal_atom(model):
    """Where the lone-cluster flow takes e (R1: the terminal atom +v, which carries m+), or
    None where V's dominant pair is complex (E1: no limit)."""
    try:
        term = model.terminal_measure(sp.PointCloud(E[None, :], np.ones(1)))
    except sp.model.AssumptionError:
        return None
    return term.points[np.argmax(term.weights)]


def apply_event(probe, x, w, c, event):
    """The intervention ``event`` on each side's tail (about that side's own centre), in place;
    returns the tail mass it acted on."""
    acted = 0.0
    for sign in (1.0, -1.0):
        side = sign * x[:, 0] > 0
        cc = probe.centre(x, w, sign * c)
        far = probe.tail(x, cc, side)
        acted += float(w[far].sum())
        if event == "move":
            x[far] = cc
        else:
            near = side & ~far
            mass = w[side].sum()
            w[far] *= float(event)
            w[near] *= (mass - w[far].sum()) / w[near].sum()
    return acted


#: The + atom of Pi#rho_0 in both scenarios (E = span e1).
E = np.array([1.0, 0.0, 0.0])


def _output_times(run: Run) -> np.ndarray:
    return np.linspace(0.0, run.t_end, int(round(run.t_end / STEP)) + 1)


def _saved(times, rows, acted, n) -> dict:
    """A run's arrays: the probe's rows (one per output) column by column."""
    cols = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    return {"times": times, "acted": np.array(acted), "n": np.array(n), **cols}


def compute_cells(run: Run) -> dict:
    """The probe on the finite volumes' cell masses at the cell centres (no intervention)."""
    model = model_for(run.scenario, run.beta)
    m_plus = initial().hemisphere_mass(E)
    times = _output_times(run)
    sol = sp.FiniteVolumeSolver(model, run.n).solve(initial(), times)
    rows, _ = cell_rows(Probe(model), sol, len(times), m_plus)
    return _saved(times, rows, math.nan, run.n)


def cell_rows(probe, sol, count: int, m_plus, c=E):
    """The probe's rows for the first ``count`` outputs of a finite-volume solution (cell
    masses at the cell centres), the + centre sought from ``c`` on; returns (rows, the
    + centre at the last of them)."""
    rows = []
    for i in range(count):
        mu = sol.measure(i)
        c = probe.centre(mu.points, mu.weights, c)
        rows.append(probe.record(mu.points, mu.weights, c, m_plus))
    return rows, c


def band_rule(measure, n: int, axis, half_width: float, k: int, k_along: int | None = None
              ) -> sp.PointCloud:
    """The measure as weighted nodes of a composite product rule about ``axis`` whose band
    |<x, axis>| < half_width, about the great circle orthogonal to it, is k times finer across
    the circle and k_along (default k) times finer along it (k = 1: a plain product rule).

    In w = <x, axis> the pieces [-1, -h], [-h, h], [h, 1] each get Gauss-Legendre nodes at
    sqrt(n / 2) / 2 per unit of w (times k in the band, whose count is rounded up to even, so
    that no ring lies on the circle itself), and each ring 2 sqrt(n / 2) equispaced azimuths (times
    k_along in the band); the surface measure is dw dphi, so node weights are the product
    weights times the density, normalised. About n (1 + h (k k_along - 1)) nodes."""
    a = np.asarray(axis, dtype=float)
    a = a / np.linalg.norm(a)
    u = np.cross(a, [0.0, 0.0, 1.0] if abs(a[2]) < 0.9 else [1.0, 0.0, 0.0])
    u /= np.linalg.norm(u)
    v = np.cross(a, u)
    n_theta = math.sqrt(n / 2.0)
    points, weights = [], []
    k_along = k if k_along is None else k_along
    for lo, hi, f, fa in ((-1.0, -half_width, 1, 1), (-half_width, half_width, k, k_along),
                          (half_width, 1.0, 1, 1)):
        q = max(2, math.ceil(n_theta / 2 * f * (hi - lo)))
        g, gw = np.polynomial.legendre.leggauss(q + q % 2 if lo == -half_width else q)
        w, ww = lo + (hi - lo) * (g + 1) / 2, gw * (hi - lo) / 2
        m = int(round(2 * n_theta)) * fa
        phi = (np.arange(m) + 0.5) * 2 * np.pi / m
        ring = np.cos(phi)[:, None] * u + np.sin(phi)[:, None] * v
        s = np.sqrt(1.0 - w * w)
        points.append((w[:, None, None] * a + s[:, None, None] * ring).reshape(-1, 3))
        weights.append(np.repeat(ww * 2 * np.pi / m, m))
    x = np.concatenate(points)
    logw = np.log(np.concatenate(weights)) + measure.log_density(x)
    wt = np.exp(logw - logw.max())
    return sp.PointCloud(x, wt / wt.sum())


def cells_to_tokens(sol, i: int, sub: int) -> sp.PointCloud:
    """Output i of a finite-volume solution as tokens: each cell's sub x sub Gauss nodes
    weighted by the limited reconstruction (the solver's own) times the node's area, scaled to
    the cell's mass (by area where the reconstruction vanishes), so that every cell keeps its
    mass exactly; nodes of zero weight are dropped."""
    pts, area = sol.mesh.cell_quadrature(sub)
    w = area * sol.density(i, pts.reshape(-1, 3)).reshape(area.shape)
    total = w.sum(axis=1, keepdims=True)
    w = np.where(total > 0, w / np.where(total > 0, total, 1.0),
                 area / area.sum(axis=1, keepdims=True)) * sol.masses[i][:, None]
    keep = w.ravel() > 0
    return sp.PointCloud(pts.reshape(-1, 3)[keep], w.ravel()[keep] / w.sum())


def start(run: Run) -> sp.PointCloud:
    """The tokens' start: rho_0's product Gauss rule, or its band rule about E's separatrix."""
    if run.band:
        return band_rule(initial(), run.n, E, BAND_HALF_WIDTH, run.band, run.along)
    return initial().quadrature(run.n)


def compute_handoff(run: Run) -> dict:
    """The cells to t_event, probed as :func:`compute_cells` does, then tokens from their
    state (:func:`cells_to_tokens`) to t_end: the two methods' dynamics from one state."""
    model = model_for(run.scenario, run.beta)
    m_plus = initial().hemisphere_mass(E)
    times = _output_times(run)
    k0 = int(np.argmin(np.abs(times - run.t_event)))
    sol = sp.FiniteVolumeSolver(model, run.n).solve(initial(), times[:k0 + 1])
    probe = Probe(model)
    rows, c = cell_rows(probe, sol, k0, m_plus)
    cloud = cells_to_tokens(sol, k0, run.sub)
    rows += token_rows(probe, model, cloud.points.copy(), cloud.weights, times[k0:], c,
                       m_plus)[0]
    return _saved(times, rows, math.nan, len(cloud.weights))


def token_rows(probe, model, x, w, times, c, m_plus, event="", t_event=math.nan):
    """The probe's rows for tokens (x, w) evolved from times[0] over ``times`` (x in place),
    ``event`` applied at ``t_event``; returns (rows, the mass acted on)."""
    solver = _particle_solver(model)
    rows, acted = [], np.nan
    for k, t in enumerate(times):
        if k:
            x[:] = solver.solve(x, times[k - 1:k + 1], w).positions[-1]
        c = probe.centre(x, w, c)
        if event and abs(t - t_event) < 1e-9:
            acted = apply_event(probe, x, w, c, event)
            c = probe.centre(x, w, c)
        rows.append(probe.record(x, w, c, m_plus))
    return rows, acted


def compute(run: Run) -> dict:
    if run.solver == "finite_volume":
        return compute_cells(run)
    if run.solver == "handoff":
        return compute_handoff(run)
    model = model_for(run.scenario, run.beta)
    cloud = start(run)
    x, w = cloud.points.copy(), cloud.weights.copy()
    m_plus = float(w[x @ E > 0].sum())
    times = _output_times(run)
    rows, acted = token_rows(Probe(model), model, x, w, times, E, m_plus, run.event, run.t_event)
    return _saved(times, rows, acted, len(w))


def spec_of(run: Run) -> dict:
    """What a saved run was computed with (its file name's key)."""
    return {"beta": run.beta, "n": run.n, "t_end": run.t_end, "event": run.event,
            **({"solver": run.solver} if run.solver != "particles" else {}),
            **({"scenario": run.scenario} if run.scenario != "R1" else {}),
            **({"band": run.band, "band_along": run.along, "band_half_width": BAND_HALF_WIDTH,
                "band_rings": "even"} if run.band else {}),
            **({"sub": run.sub} if run.solver == "handoff" else {}),
            "t_event": None if math.isnan(run.t_event) else run.t_event, "step": STEP,
            "tail_widths": TAIL_WIDTHS, "version": 2}


def load(store: Path, run: Run, compute_missing=True):
    """The saved run (computed first when missing and ``compute_missing``), else None."""
    return stored_run(store, run.name, spec_of(run),
                      (lambda: compute(run)) if compute_missing else None)


# ------------------------------------------------------------------------------ analysis
def _crossing(t, y, level, k):
    """The time, linearly interpolated, at which y crosses ``level`` between outputs k-1, k."""
    if k == 0 or y[k] == y[k - 1]:
        return float(t[k])
    return float(t[k - 1] + (level - y[k - 1]) * (t[k] - t[k - 1]) / (y[k] - y[k - 1]))


def arrival(t, w2_term) -> float:
    """When W2 to the terminal measure first falls below ARRIVAL_W2 (interpolated), or NaN."""
    arrived = np.nonzero(np.asarray(w2_term) < ARRIVAL_W2)[0]
    return _crossing(t, w2_term, ARRIVAL_W2, int(arrived[0])) if len(arrived) else math.nan


def time_scales(d, t_event=math.nan) -> dict:
    """t*, min W2, t_dep, t_rel, the hold's mean speed ratio and tail share over [t*, t_rel),
    the tail mass at t*, its exponential decay rate over the hold, and the arrival t_arr
    (NaN where undefined).
    A crossing in the output interval that ends at an intervention ``t_event`` is the
    intervention itself (the curves jump there, so no interpolation)."""
    t, w2, ratio = d["times"], d["w2"], d["ratio"]
    k0 = int(np.argmin(w2))
    out = {"t*": float(t[k0]), "min W2": float(w2[k0]), "t_dep": math.nan, "t_rel": math.nan}
    level = (1 + DEP_FRACTION) * w2[k0]
    above = np.nonzero(w2[k0:] > level)[0]
    if len(above):
        out["t_dep"] = _crossing(t, w2, level, k0 + int(above[0]))
    below = np.nonzero(ratio[k0:] < RELEASE_RATIO)[0]
    if len(below) and k0 + below[-1] + 1 < len(t):
        k = k0 + int(below[-1]) + 1
        out["t_rel"] = (float(t[k]) if abs(t[k] - t_event) < 1e-9
                        else _crossing(t, ratio, RELEASE_RATIO, k))
    hold = (t >= t[k0]) & (t < (out["t_rel"] if math.isfinite(out["t_rel"]) else t[-1]))
    out["hold ratio"] = float(np.mean(ratio[hold])) if hold.any() else math.nan
    out["hold share"] = float(np.mean(d["share"][hold])) if hold.any() else math.nan
    out["tail mass at t*"] = float(d["tail_mass"][k0])
    out["t_arr"] = arrival(t, d["w2_term"]) if "w2_term" in d else math.nan
    free = t > (out["t_rel"] if math.isfinite(out["t_rel"]) else t[-1])
    if free.any():  # the FREE_WINDOW from the first output after the release
        free &= t <= t[free][0] + FREE_WINDOW
    out["free ratio"] = float(np.mean(ratio[free])) if free.any() else math.nan
    out["free core ratio"] = float(np.mean(d["core_ratio"][free])) if free.any() else math.nan
    m = d["tail_mass"][hold]
    ok = m > 0
    out["tail rate"] = (float(-np.polyfit(t[hold][ok], np.log(m[ok]), 1)[0])
                        if ok.sum() >= 3 else math.nan)
    return out


def logit_clock(d) -> dict:
    """The hold in log space, for a run that records the tail's logit L: the plateau's start
    t_p (W2 to Pi#rho_0 first within PLATEAU_FRACTION of its minimum) and L there; L's decay
    rate over the plateau's second half (a linear fit up to t_dep; to t_rel or the window's
    end where W2 does not rise: L falls slower at first), L at t_dep (how much of the hold
    is left when the cluster leaves), the clock t_dep + L(t_dep) / rate (where the tail's
    attention would have fallen to the core's; where L reached 0 before t_dep, the time it
    did; none where the tail did not hold the centre at t_p, L(t_p) <= 0), and the tail's
    attention angle from the centre at t_p and at the plateau's end."""
    s = time_scales(d)
    t, w2, logit = d["times"], d["w2"], d["tail_logit"]
    k = int(np.argmax(w2 <= (1 + PLATEAU_FRACTION) * s["min W2"]))
    end = next((x for x in (s["t_dep"], s["t_rel"]) if math.isfinite(x)), t[-1])
    hold = (t >= (t[k] + end) / 2) & (t < end) & np.isfinite(logit)
    rate = float(-np.polyfit(t[hold], logit[hold], 1)[0]) if hold.sum() >= 3 else math.nan
    last = np.flatnonzero(hold)
    at_dep = (float(np.interp(s["t_dep"], t, logit)) if math.isfinite(s["t_dep"])
              else math.nan)
    clock = s["t_dep"] + at_dep / rate if rate > 0 and logit[k] > 0 else math.nan
    gone = np.flatnonzero((t > t[k]) & (logit <= 0))
    if logit[k] > 0 and at_dep <= 0 and gone.size:  # L reached 0 before t_dep: when it did
        clock = _crossing(t, logit, 0.0, int(gone[0]))
    return {"t_p": float(t[k]), "logit at t_p": float(logit[k]), "logit rate": rate,
            "logit at t_dep": at_dep, "clock": clock,
            "angle at t_p": float(d["tail_angle"][k]),
            "angle at end": float(d["tail_angle"][last[-1]]) if last.size else math.nan,
            "t_dep": s["t_dep"], "t_rel": s["t_rel"]}


def logit_gradient(model) -> float:
    """How fast L falls as a query moves off e, for a tail at the attention target b of e:
    L(x) = beta <x, B (b - e)> + const near e, so |grad L| = beta |P_e B (b - e)|. A query
    L(c) / |grad L| from the centre, away from the tail, is no longer held."""
    bt = model.B.T @ E
    b = bt / np.linalg.norm(bt)
    return float(model.beta * np.linalg.norm((np.eye(3) - np.outer(E, E)) @ model.B @ (b - E)))


def saved_groups(plan, store) -> dict:
    """{"scenario, beta": [(run, data or None)]} in plan order: every saved run read once."""
    out = {}
    for run in plan.runs:
        out.setdefault(f"{run.scenario}, {run.beta:g}", []).append(
            (run, load(store, run, compute_missing=False)))
    return out


def _each_run(groups):
    """(group, run, data or None) over :func:`saved_groups`."""
    for group, runs in groups.items():
        for run, d in runs:
            yield group, run, d


def scale_rows(groups):
    rows = []
    for beta, run, d in _each_run(groups):
        if d is None:
            rows.append([beta, run.label] + ["not computed"] * 13)
            continue
        s = time_scales(d, run.t_event)
        acted = float(d["acted"])
        rows.append([beta, run.label, s["t*"], s["min W2"], s["t_dep"], s["t_rel"], s["t_arr"],
                     s["hold ratio"], s["hold share"], s["free ratio"], s["free core ratio"],
                     s["tail mass at t*"], s["tail rate"],
                     "" if math.isnan(acted) else f"{acted:.3g}", f"{float(d['cpu_seconds']):.0f}"])
    return rows


def event_rows(groups):
    """Per intervention: the shifts of t_dep and t_rel against the base run with the same N,
    and (scale f) what an exponential tail clock predicts, log(f) / (the base run's tail
    decay rate)."""
    rows = []
    for beta, runs in groups.items():
        base = {r.n: d for r, d in runs
                if r.solver == "particles" and not r.event and d is not None}
        for run, d in runs:
            if not run.event or d is None or run.n not in base:
                continue
            s, b = time_scales(d, run.t_event), time_scales(base[run.n])
            clock = (math.log(float(run.event)) / b["tail rate"]
                     if run.event != "move" else -math.inf)
            rows.append([beta, run.label, s["t_dep"] - b["t_dep"],
                         s["t_rel"] - b["t_rel"], clock])
    return rows


def _difference_row(beta, label, a, b):
    """Largest differences between two runs' curves (on their common outputs) and of their
    time scales, b - a."""
    sa, sb = time_scales(a), time_scales(b)
    m = min(len(a["times"]), len(b["times"]))
    return [beta, label, float(np.max(np.abs(a["w2"][:m] - b["w2"][:m]))),
            float(np.max(np.abs(a["angle"][:m] - b["angle"][:m]))),
            float(np.max(np.abs(a["ratio"][:m] - b["ratio"][:m]))),
            sb["t_dep"] - sa["t_dep"], sb["t_rel"] - sa["t_rel"]]


def resolution_rows(groups):
    """Base runs of one solver at consecutive resolutions, then the finest of each solver
    against each other."""
    rows = []
    for beta, runs in groups.items():
        finest = {}
        for solver in ("particles", "finite_volume"):
            base = [(r, d) for r, d in runs
                    if r.solver == solver and not r.event and not r.band and d is not None]
            for (r1, d1), (r2, d2) in zip(base, base[1:], strict=False):
                if r1.t_end == r2.t_end:
                    rows.append(_difference_row(beta, f"{r1.label} -> {r2.label} "
                                                f"(to t = {r1.t_end:g})", d1, d2))
            if base:
                finest[solver] = base[-1]
        if len(finest) == 2:
            (r1, d1), (r2, d2) = finest["particles"], finest["finite_volume"]
            rows.append(_difference_row(beta, f"{r1.label} -> {r2.label}", d1, d2))
    return rows


def band_rows(groups):
    """Band rules at consecutive k (same bulk), then the finest against the cells."""
    rows = []
    for beta, runs in groups.items():
        bands = [(r, d) for r, d in runs if r.band and d is not None]
        for (r1, d1), (r2, d2) in zip(bands, bands[1:], strict=False):
            rows.append(_difference_row(beta, f"{r1.label} ({int(d1['n'])} tokens) -> "
                                        f"{r2.label} ({int(d2['n'])} tokens)", d1, d2))
        cells = [(r, d) for r, d in runs if r.solver == "finite_volume" and d is not None]
        if bands and cells:
            (r1, d1), (r2, d2) = bands[-1], cells[-1]
            rows.append(_difference_row(beta, f"{r1.label} -> {r2.label}", d1, d2))
    return rows


def handoff_rows(groups):
    """Each handoff run against the cells run on from the same start with the same n: the
    largest differences of the W2 curves after the handoff, and the time scales of both."""
    rows = []
    for beta, runs in groups.items():
        cells = {}   # per n, the longest cells run that has the terminal W2
        for r, d in sorted(runs, key=lambda rd: rd[0].t_end):
            if r.solver == "finite_volume" and d is not None and "w2_term" in d:
                cells[r.n] = (r, d)
        for run, d in runs:
            if run.solver != "handoff" or d is None or run.n not in cells:
                continue
            rc, dc = cells[run.n]
            m = min(len(d["times"]), len(dc["times"]))
            after = d["times"][:m] >= run.t_event
            sh, sc = time_scales(d), time_scales(dc)
            dw2, dterm = (np.abs(d[k][:m] - dc[k][:m]) for k in ("w2", "w2_term"))
            off = np.flatnonzero(np.maximum(dw2, dterm) > CONVERGED_FRACTION * sc["min W2"])
            until = d["times"][off[0] - 1] if off.size else d["times"][m - 1]
            rows.append([beta, run.label, int(d["n"]), f"{rc.label} to t = {rc.t_end:g}",
                         float(until), float(np.max(dw2[after])), float(np.max(dterm[after]))]
                        + [f"{sh[k]:.4g} / {sc[k]:.4g}" for k in ("t_dep", "t_rel", "t_arr")]
                        + [f"{sh['tail rate']:.3g} / {sc['tail rate']:.3g}"])
    return rows


def logit_rows(groups):
    """The logit clock (:func:`logit_clock`) of every saved run that records the logit, with
    the distance from the centre at which L(t_dep) releases a query (cells: against a cell's
    width pi / (2n) at a face's centre)."""
    rows = []
    for beta, run, d in _each_run(groups):
        if d is not None and "tail_logit" in d:
            c = logit_clock(d)
            # a distance only while the tail still holds the centre (L > 0)
            reach = (c["logit at t_dep"] / logit_gradient(model_for(run.scenario, run.beta))
                     if c["logit at t_dep"] > 0 else math.nan)
            cell = math.pi / (2 * run.n) if run.solver == "finite_volume" else math.nan
            rows.append([beta, run.label] + [c[k] for k in (
                "t_p", "logit at t_p", "logit rate", "t_dep", "logit at t_dep", "clock",
                "t_rel", "angle at t_p", "angle at end")] + [reach, reach / cell])
    return rows


def late_rows(groups):
    """Mean speed ratio and Gaussian-core ratio over the window's second half, per run."""
    rows = []
    for beta, run, d in _each_run(groups):
        if d is not None:
            late = d["times"] >= run.t_end / 2
            rows.append([beta, run.label, f"[{run.t_end / 2:g}, {run.t_end:g}]",
                         float(np.mean(d["ratio"][late])), float(np.mean(d["core_ratio"][late]))])
    return rows


def figure(groups):
    fig, axes = plt.subplots(len(groups), 3, figsize=(14, 3.6 * len(groups)), squeeze=False)
    for row, (beta, runs) in zip(axes, groups.items(), strict=True):
        # a row whose runs all record the logit shows it: a tight hold's share rounds to 1
        logit = all(d is not None and "tail_logit" in d for _, d in runs)
        keys = ("angle", "ratio", "tail_logit" if logit else "share")
        for run, d in runs:
            if d is None:
                continue
            style = ("--" if run.event else {"finite_volume": ":", "handoff": "-."}.get(
                run.solver, "-"))
            for ax, key in zip(row, keys, strict=True):
                line, = ax.plot(d["times"], d[key], style, label=run.label)
            row[1].plot(d["times"], d["core_ratio"], style, lw=0.6, color=line.get_color())
        row[0].set_ylabel(f"{beta.split(',')[0]}, beta = {beta.split(', ')[1]}")
        last = ("log(tail's attention / core's)" if logit else "attention share of the tail")
        for ax, title in zip(row, ("angle of the + cluster's centre from e (rad)",
                                   "speed ratio (thin: Gaussian core of the same spread)",
                                   last), strict=True):
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("t")
        row[1].axhline(RELEASE_RATIO, color="0.6", lw=0.7)
        row[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


INTRO = """Scenario R1 (docs/theory.md §3.4): A = diag(1, 0.4, 0), B symmetric positive definite,
V = A B^-1 with its dominant eigenvector v 0.59 rad from e. Tokens on rho_0's product Gauss rule,
the late-phase study's particle solver. A query at the + cluster's centre c attends with
weights w_j exp(beta <c, B x_j>); the *tail* is the set of tokens farther than
{widths:g} attention widths (1 / sqrt(beta <c, Bc>)) from their cluster's centre; the *speed ratio*
is |P_c V m(c)| / |P_c V c|, the centre's speed against that of a lone cluster at c (1: free).
t_dep: W2 to Pi#rho_0 back at {dep:g} x its minimum; t_rel: the speed ratio above {rel:g} from then
on. Interventions at t = t* + 1 (inside the hold): the tail moved onto its cluster's centre
(mass kept), or its weights scaled by f (its side's mass kept)."""


def report(plan, store, name, folder=OUT):
    groups = saved_groups(plan, store)
    missing = [r.name for _, r, d in _each_run(groups) if d is None]
    text = [INTRO.format(widths=TAIL_WIDTHS, dep=1 + DEP_FRACTION, rel=RELEASE_RATIO), ""]
    if missing:
        text += [f"**Partial:** not computed: {', '.join(missing)}.", ""]
    text += [f"Time scales, the hold (means over [t*, t_rel)) and the free cluster (means over "
             f"the {FREE_WINDOW:g} time units after t_rel; the Gaussian-core ratio is the speed "
             f"ratio of a lone Gaussian cluster of the core's spread, the tokens within "
             f"{CORE_RADIUS:g} rad of c):", "",
             table(scale_rows(groups),
                   ["scenario, β", "run", "t*", "min W2", "t_dep", "t_rel", "t_arr",
                    "hold: speed ratio",
                    "hold: tail share", "free: speed ratio", "free: Gaussian-core ratio",
                    "tail mass at t*", "tail decay rate", "mass acted on", "CPU s"]), "",
             "Interventions against the base run with the same N (shift = intervention - "
             "base; an exponential tail clock would shift t_rel by log(f) / rate):", "",
             table(event_rows(groups),
                   ["scenario, β", "run", "shift of t_dep", "shift of t_rel",
                    "clock: log(f)/rate"]),
             "", "Resolution (tokens N and 4N, cells n and 2n) and method (the finest of each): "
             "largest differences of the curves and of the time scales:", "",
             table(resolution_rows(groups),
                   ["scenario, β", "from -> to", "max abs dW2", "max abs d angle",
                    "max abs d speed ratio", "d t_dep", "d t_rel"]), "",
             "Tail refinement at fixed bulk (band rules: the band |<x, e>| < "
             f"{BAND_HALF_WIDTH:g} about the separatrix k times finer across it and k_along "
             "times along it), consecutive rules, then the last against the finest cells:", "",
             table(band_rows(groups),
                   ["scenario, β", "from -> to", "max abs dW2", "max abs d angle",
                    "max abs d speed ratio", "d t_dep", "d t_rel"]), "",
             "Handoff (the cells to t_event, then tokens on a Gauss rule of each cell's "
             "reconstructed density) against the cells run on, after the handoff; t_arr: W2 to "
             f"the terminal measure m+ delta_v + m- delta_-v below {ARRIVAL_W2:g}:", "",
             table(handoff_rows(groups),
                   ["scenario, β", "run", "tokens", "against",
                    f"both W2 within {CONVERGED_FRACTION:.0%} of min W2 until", "max abs dW2",
                    "max abs dW2 to terminal", "t_dep (handoff / cells)",
                    "t_rel (handoff / cells)", "t_arr (handoff / cells)",
                    "tail decay rate (handoff / cells)"]), "",
             "The hold in log space (runs that record it): L = log(the tail's attention / the "
             "core's) for a query at the centre, summed in log space; its decay rate over the "
             "plateau's second half (t_p, the plateau's start: W2 within "
             f"{PLATEAU_FRACTION:.0%} of its minimum); L when the cluster leaves (t_dep); the "
             "clock t_dep + L(t_dep)/rate, where L would have reached 0 (where it did, if "
             "before t_dep); the angle from the "
             "centre of the tail's attention-weighted mean (E1's attention target Bᵀe/|Bᵀe| "
             "lies 0.73 rad from e); and L(t_dep)/|∇L|, how far from the centre, away from the "
             "tail, a query is released at t_dep (|∇L| = β|P_e B(b − e)|, b the target; "
             f"{logit_gradient(model_for('E1', 1000.0)):.0f} in E1 at β = 1000), in rad and in "
             "cell widths π/(2n):", "",
             table(logit_rows(groups),
                   ["scenario, β", "run", "t_p", "L(t_p)", "rate of L", "t_dep", "L(t_dep)",
                    "clock", "t_rel", "tail angle at t_p", "at the plateau's end",
                    "released at (rad)", "in cell widths"]), "",
             "Speed ratios over the second half of each window (R1: after the release; E1: "
             "the turning pair):", "",
             table(late_rows(groups), ["scenario, β", "run", "window", "speed ratio",
                                            "Gaussian-core ratio"])]
    fig = figure(groups)
    publish(name, fig, "What holds the cluster after t*, and what releases it (scenario R1)",
            "\n".join(text), folder, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one beta, 4000 tokens (minutes)")
    ap.add_argument("--report-only", action="store_true",
                    help="compute nothing: report from the runs saved so far")
    args = ap.parse_args(argv)
    plan, name = (QUICK, "departure_quick") if args.quick else (FULL, "departure")
    store = OUT / f"{name}_runs"
    if not args.report_only:
        for run in plan.runs:
            load(store, run)
    report(plan, store, name)


if __name__ == "__main__":
    main()
