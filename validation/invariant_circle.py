"""The late hold of scenario R1 on its invariant circle: the cells' state at t = 12 collapsed
onto the great circle z = 0, then tokens graded toward the dividing trajectory.

In R1, V maps into the plane z = 0 and B does not couple z, so the great circle z = 0 is
invariant and attracts the mass: at beta = 256 every cell with mass at t = 12 lies within a
few cell rows of it. There the tokens that decide how long the + cluster is held are those
that leave late from near the dividing trajectory, the point of the circle at which tokens
part between the two clusters: on their way to the + cluster they pass its attention target,
where a tail of tiny mass outweighs the cluster (docs/theory.md §3.4.1). A token at distance d
from the dividing trajectory leaves after about log(1/d) / lambda, so tokens spaced uniformly
stop feeding the hold at a time that grows like log(1 / spacing): no uniform rule in two
dimensions can reach the continuum there. On the circle, a rule graded geometrically toward
the dividing trajectory can.

Per cell resolution n (the finite volumes' state at t = 12):

- the band: the cell rows within ``ROWS_ANGLE`` of z = 0 on the four equatorial panels; its
  marginal density on the circle, the z-integral of the cells' limited reconstruction over
  each cell's own z-interval (Gauss, per cell), which collapses the band onto z = 0;
- a chain of token rules on the circle: uniform spacing (``M0`` intervals), then intervals
  graded by the ratio ``GRADING`` from ``GRADED_WIDTH`` down to d_min on both sides of each
  dividing point, for d_min = 1e-3, 1e-4, ...; each rule's dividing points are the previous
  run's, located where the tokens' sides at t_end change (to the previous d_min);
- every rule's tokens run with the 2 x 2 model (K, V restricted to the plane) from t = 12 to
  36 and are probed as in ``departure.py`` (W2 to Pi#rho_0, to the terminal measure, the
  speed ratio), and one rule again at tighter integration tolerances;
- chains at 2 and 4 times the uniform intervals (the bulk's spacing), each locating its own
  dividing point;
- chains off the circle, in 3D with the model itself: each interval carries q tokens at the
  nodes of the Gauss rule in z of the band's mass over it, each level graded about its own
  dividing points (they lie 1e-2 rad apart across the band), for q = 2 and 3, and for q = 2
  with the cells off the band as tokens too: near the dividing points the tail is not thin
  in z (a third of the band's mass there lies beyond 0.05 rad of the circle) and the band
  leaves out a fifth as much again;
- the same chain over the whole sphere: the band's q levels and, in each cap off the band
  (north and south of it, to the poles), q' levels at the Gauss nodes in z of the cap's
  mass, over the pieces of each meridian that lie in one cell, every level graded about its
  own dividing points, for q' = 1 to 5; and with each cap cut into parts at counts of cell
  pieces from the band's edge, q' Gauss nodes in each part (a composite rule in z, refined
  toward the edge, where the attention weight on the cap's mass is largest), for q' = 1, 2;
  and cut instead at distances from the pole (``POLE_CUTS``), q' = 1, 2, the top node within
  a hundredth of a radian of the pole; and in angle windows about the dividing points
  (``DIVIDER_WINDOWS``), and all round near the pole, cut into parts of about a tenth of the
  mass there (``WINDOW_CUTS``), q' = 1 to 3 per part, and q' = 1 in parts half as high
  (:func:`halved`); one of these rules run again to record which levels carry the + cluster's
  attention on its tail;
- the cells from one state: n's state at t = 12 run on by the cells at 2n (checkpointed,
  resumable), and the first-order extrapolation of the cells at n and 2n; and by further
  resolutions, for the cells' observed order (the finest three that reached each span).

The report states, per n, how long consecutive rules agree (the curve is converged up to
there), the release and arrival times, and the comparison with the cells: from rho_0, and
from the tokens' own state at two resolutions.

Run:
    .venv/bin/python validation/invariant_circle.py --quick  # about a minute on one core
    .venv/bin/python validation/invariant_circle.py          # hours on one core (resumable)
"""
from __future__ import annotations

import argparse
import functools
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from _common import OUT, linear_fit, publish, run_key, stored_run, table
from departure import (
    CONVERGED_FRACTION,
    CORE_RADIUS,
    E,
    Probe,
    Run,
    _output_times,
    _saved,
    arrival,
    cell_rows,
    load,
    time_scales,
)
from late_phase import model_for
from low_temperature import _particle_solver, cached_piece, initial
from scipy.optimize import brentq

import spherepde as sp
from spherepde import io
from spherepde.analysis.convergence import richardson
from spherepde.density.finite_volume import DEFAULT_MACRO_TOL
from spherepde.sphere.cubed_sphere import PANELS

#: When the cells hand over, the cells' run on from there, and the inverse temperature.
T_HANDOFF, T_END, BETA = 12.0, 36.0, 256.0
#: The band collapsed onto the circle: the equatorial cell rows whose |beta| (the panels'
#: angular coordinate across z = 0) is below this; the report gives the mass it holds.
ROWS_ANGLE = 0.39
#: Uniform intervals of the first rule, and the graded part: intervals from GRADED_WIDTH down
#: to d_min in ratio GRADING (about 10 intervals per decade) on each side of a dividing point.
M0, GRADED_WIDTH, GRADING = 4000, 0.05, 0.8
#: Gauss nodes per interval for a token's weight, per cell z-interval for the marginal.
WEIGHT_NODES, Z_NODES = 3, 4
#: Uniform intervals of a cap's level (the mass off the band, north and south of it: 1.4e-7
#: at n = 64, spread over all z up to the poles; this spacing is not refined in the study).
CAP_M0 = 1000
#: The late-phase study's finite-volume pieces the finest rules are checked against (coarse,
#: fine), and the times at which the report gives the gap.
LATE_CELLS, PROBES = (64, 128), (14.0, 16.0, 20.0, 24.0, 28.0)
#: The finer cells' table gives a row every this many time units.
FINER_EVERY = 2.0
#: The tighter integration tolerances of the check run (rtol, atol), against the study's.
TIGHT = (1e-8, 1e-11)


def per_cap(caps: int, parts: tuple = (), cuts: tuple = (), window: tuple = (),
            fine: tuple = (), all_round: float = 0.0) -> str:
    """The caps' z-rule in words: q' per cap, or q' in each of its parts (cut at counts of
    cell pieces from the band's edge, or at distances from the pole); with windows, that
    rule off them and the fine one in them, or all round nearer the pole than all_round."""
    if cuts:
        words = f"{caps} x {len(cuts) + 1} parts to the pole per cap"
    else:
        words = f"{caps} per cap" if not parts else f"{caps} x {len(parts) + 1} parts per cap"
    if window:
        words += (f" ({fine[0]} x {len(fine[1]) + 1} parts in the windows"
                  + (f", all round within {all_round:g} of the pole" if all_round else "") + ")")
    return words


def _zones(cuts) -> list[dict]:
    """A cap cut at distances ``cuts`` from its pole (descending): its parts from the band's
    edge up, as :func:`cap_column`'s keywords."""
    far = (math.pi, *cuts, 0.0)
    return [{"zone": far[i:i + 2]} for i in range(len(far) - 1)]


def _short_of(bound: dict, near: float) -> dict | None:
    """A part of a cap (:func:`cap_column`'s keywords) cut off at the distance ``near`` from
    the pole (0: whole); None where nothing of it is left."""
    if not near:
        return bound
    far, inner = bound.get("zone", (math.pi, 0.0))
    return None if far <= near else {**bound, "zone": (far, max(inner, near))}


@dataclass(frozen=True)
class Step:
    n: int              # cells per cube-face edge
    d_min: float        # 0: the uniform rule
    tight: bool = False  # integrate at TIGHT tolerances
    m0: int = 0          # uniform intervals, when not the plan's
    levels: int = 0      # 0: on the circle; q: in 3D, q tokens across the band per interval
    sphere: bool = False  # in 3D, the cells off the band too, a token each
    caps: int = 0        # in 3D, q' tokens per interval in each cap off the band, graded too
    #: in 3D, each cap cut into parts at these counts of cell pieces from the band's edge
    #: (ascending; () one part to the pole), q' tokens per interval in each part
    cap_parts: tuple = ()
    #: in 3D, each cap cut instead at these distances from its pole (rad, descending), so
    #: that its parts shrink toward the pole; q' tokens per interval in each part
    pole_cuts: tuple = ()
    #: in 3D, the angle windows ((lo, hi), ...) about the band's dividing points where the
    #: caps' rule above gives way to ``fine`` = (q', cuts): each cap cut at distances ``cuts``
    #: from its pole, q' tokens per interval in each part. Near the dividing points the
    #: dividing curve wanders in angle as z changes, so a column's mass there goes to both
    #: sides and a few nodes in z lump it onto one
    window: tuple = ()
    fine: tuple = ()
    #: with windows, the distance from the pole (one of the fine rule's cuts) within which
    #: the fine rule's parts go all round and the caps' rule off the windows stops: the
    #: meridians meet at the pole, so a window in angle narrows in space there (0.4 rad is
    #: 0.08 rad across at 0.2 from the pole) and the columns just off it, which the few nodes
    #: off the windows lump, lie next to the curve (0: the fine rule in the windows only)
    all_round: float = 0.0

    def __post_init__(self):
        if self.all_round and (not self.window or self.all_round not in self.fine[1]):
            raise ValueError(f"all_round = {self.all_round:g} must be one of the fine rule's "
                             f"cuts {self.fine[1] if self.window else ()} (and needs windows): "
                             "pick one of them, or 0 for the fine rule in the windows only")

    @property
    def repeat(self) -> bool:
        """Not a rule of the main chain: the tight-tolerance repeat, a rule of a bulk chain
        (another number of uniform intervals) or of a 3D chain."""
        return self.tight or bool(self.m0) or bool(self.levels)

    @property
    def name(self) -> str:
        tag = "uniform" if not self.d_min else f"dmin={self.d_min:g}"
        return (f"R1_circle_beta={BETA:g}_n={self.n}_{tag}" + ("_tight" if self.tight else "")
                + (f"_m0={self.m0}" if self.m0 else "")
                + (f"_z{self.levels}" if self.levels else "") + ("_sphere" if self.sphere else "")
                + (f"_caps{self.caps}" if self.caps else "")
                + ("_parts" + "-".join(map(str, self.cap_parts)) if self.cap_parts else "")
                + ("_pole" + "-".join(f"{d:g}" for d in self.pole_cuts) if self.pole_cuts
                   else "")
                + ("_win" + "-".join(f"{a:.4g}" for a in np.ravel(self.window))
                   + f"_fine{self.fine[0]}x" + cuts_tag(self.fine[1])
                   if self.window else "")
                + (f"_round{self.all_round:g}" if self.all_round else ""))

    @property
    def label(self) -> str:
        rule = "uniform" if not self.d_min else f"graded to {self.d_min:.0e}"
        return (rule + (", tight tolerances" if self.tight else "")
                + (f", {self.m0} uniform intervals" if self.m0 else "")
                + (f", 3D: {self.levels} across the band" if self.levels else "")
                + (", and the cells off it" if self.sphere else "")
                + (f", and {self.per_cap} off it, graded" if self.caps else ""))

    @property
    def per_cap(self) -> str:
        return per_cap(*self.cap_rule)

    @property
    def cap_rule(self) -> tuple:
        """(q' per part, counts of cell pieces from the band's edge, distances from the pole)
        at which a cap is cut, and with windows, (the windows, their fine rule[, the distance
        from the pole within which it goes all round])."""
        return ((self.caps, self.cap_parts, self.pole_cuts)
                + ((self.window, self.fine) if self.window else ())
                + ((self.all_round,) if self.all_round else ()))

    @property
    def cap_bounds(self) -> list[dict]:
        """Each part of a cap, from the band's edge up, as :func:`cap_column`'s keywords."""
        if self.pole_cuts:
            return _zones(self.pole_cuts)
        counts = (0, *self.cap_parts, None)
        return [{"part": counts[i:i + 2]} for i in range(len(counts) - 1)]

    @property
    def cap_layout(self) -> list[tuple]:
        """A cap's groups of levels: (:func:`cap_column`'s keywords, q' tokens per interval,
        where: None all round, False off the windows, True in them), the parts of the caps'
        rule from the band's edge up (up to :attr:`all_round` from the pole), then those of
        the windows' fine rule (all round within :attr:`all_round` of the pole)."""
        bounds = [_short_of(b, self.all_round) for b in self.cap_bounds]
        out = [(b, self.caps, False if self.window else None) for b in bounds if b]
        if self.window:
            out += [(b, self.fine[0], True if b["zone"][1] >= self.all_round else None)
                    for b in _zones(self.fine[1])]
        return out

    def cap_level(self, lev: int) -> tuple[int, int, int]:
        """(cap: 0 north, 1 south; its group in :attr:`cap_layout`; the node in that group)
        of a caps' level (``lev`` >= levels): the north cap's groups first, then the south's."""
        ends = np.cumsum([q for _, q, _ in self.cap_layout])
        cap, rest = divmod(lev - self.levels, int(ends[-1]))
        group = int(np.searchsorted(ends, rest, side="right"))
        return cap, group, rest - (int(ends[group - 1]) if group else 0)

    @property
    def z_coarser(self):
        """The caps' next coarser z-rule at the same d_min: one node fewer per part in the
        windows, and with one per part, parts twice as high where the cuts are
        :func:`halved` ones; without windows, one node fewer per cap or per part, and with
        one per part, one Gauss rule over the cap with as many nodes (None: no coarser rule)."""
        if self.window:
            if self.fine[0] > 1:
                return replace(self, fine=(self.fine[0] - 1, self.fine[1]))
            half = self.fine[1][1::2]
            whole = (half and halved(half) == self.fine[1]
                     and (not self.all_round or self.all_round in half))
            return replace(self, fine=(1, half)) if whole else None
        if self.caps > 1:
            return replace(self, caps=self.caps - 1)
        if len(self.cap_bounds) > 1:
            return replace(self, caps=len(self.cap_bounds), cap_parts=(), pole_cuts=())
        return None

    @property
    def n_levels(self) -> int:
        """Levels graded each about its own dividing points: the band's, then the caps'
        (north, then south); 1 on the circle."""
        return max(1, self.levels + 2 * self.cap_levels)

    @property
    def cap_levels(self) -> int:
        """Levels per cap: the tokens per interval summed over :attr:`cap_layout`."""
        return sum(q for _, q, _ in self.cap_layout)


@dataclass(frozen=True)
class Plan:
    cells: tuple      # n
    d_mins: tuple     # the chain after the uniform rule
    tight: float      # the d_min repeated at TIGHT tolerances
    m0: int = M0
    t_handoff: float = T_HANDOFF
    t_end: float = T_END
    #: (n, t_stop): n's state at the handoff also run on by cells at 2n to t_stop, to tell the
    #: cells' dynamics from one state apart from the state each resolution carries
    finer_cells: tuple = ()
    #: (n, t_stop, m): n's state at the handoff run on by the cells at m, a resolution from
    #: one state beside n and 2n, for the order of the cells' own late curve (the finest
    #: three that reached a span are fitted over it)
    third_cells: tuple = ()
    #: (n, t_stop, macro_tol): n's state run on at n with a tighter multirate tolerance than
    #: the solver's default (1e-3, fixed across n), which a floor in the cells would show
    stepping_cells: tuple = ()
    #: (n, t_stop, limiter, m): n's state run on by the cells at m with another limiter than
    #: the solver's default (Barth-Jespersen, which clips each cell's reconstruction to its
    #: neighbours' range and so flattens the band's peak): how much of the cells' error the
    #: clipping makes, and at two m whether the other limiter converges there
    limiter_cells: tuple = ()
    #: (n, m0s): per m0, a chain of rules with m0 uniform intervals over bulk_d_mins, seeded
    #: by the point the main chain's rule before bulk_d_mins[0] located, each next rule graded
    #: about the point the one before it located: the bulk's spacing moves the dividing point
    #: itself (by about 1e-6 rad from 4000 to 8000 intervals), so a rule graded about another
    #: bulk's point misses it and releases early
    bulk: tuple = ()
    bulk_d_mins: tuple = ()
    #: (n, qs): per q, a chain of rules in 3D, uniform then over levels_d_mins: each interval
    #: of the circle carries q tokens across the band, at the nodes of the Gauss rule of the
    #: band's mass over the interval in z, and each level (the j-th node) is graded about its
    #: own dividing points, which lie 1e-2 rad apart: it tests the collapse onto z = 0
    levels: tuple = ()
    levels_d_mins: tuple = ()
    #: (n, qs): the 3D chains again over sphere_d_mins with the cells off the band as tokens
    #: at their centres (the band leaves out 1.4e-7 of the mass, a fifth of it within 0.3 rad
    #: of the dividing points, where the band holds 2e-8), seeded by the band's own 3D chain
    sphere: tuple = ()
    sphere_d_mins: tuple = ()
    #: (n, ((q, q'[, d_min[, parts[, cuts[, window, fine[, all_round]]]]]), ...)): 3D chains
    #: over the whole sphere, uniform
    #: then over whole_d_mins (down to d_min where given): the band's q levels and, in each
    #: cap off the band (from the band's edge to the pole, or in each of its parts:
    #: Step.cap_parts, Step.pole_cuts; in the windows Step.window, Step.fine, all round near
    #: the pole Step.all_round),
    #: q' levels at the Gauss nodes in z of the mass over each interval (CAP_M0 uniform
    #: intervals), every level graded about its own
    #: dividing points: as one token per cell the mass off the band is not graded, and its
    #: own last leavers are cut off
    whole: tuple = ()
    whole_d_mins: tuple = ()
    #: whole-sphere rules (Steps of a chain above) run again to record which levels carry
    #: the + cluster's attention on its tail (:func:`level_attention`)
    attention: tuple = ()

    def chain(self, n: int) -> list[tuple]:
        """[(step, the step whose dividing points it is graded about or None, "located" or
        "graded": that step's located points or the ones it was graded about)] in run order."""
        main = [Step(n, 0.0)] + [Step(n, d) for d in self.d_mins]
        out = [(s, main[k - 1] if k else None, "located") for k, s in enumerate(main)]
        out.append((Step(n, self.tight, tight=True), Step(n, self.tight), "graded"))
        for k, m0s in self.bulk:
            if k == n:
                out += self._seeded(n, self.bulk_d_mins, self.d_mins, [{"m0": m} for m in m0s])
        for k, qs in self.levels:
            for q in qs if k == n else ():
                out += _fresh([Step(n, d, levels=q) for d in (0.0, *self.levels_d_mins)])
        for k, qs in self.sphere:
            if k == n:
                out += self._seeded(n, self.sphere_d_mins, self.levels_d_mins,
                                    [{"levels": q, "sphere": True} for q in qs])
        for k, pairs in self.whole:
            for q, caps, *rest in pairs if k == n else ():
                floor, parts, cuts, window, fine, rnd = (
                    *rest, *(0.0, (), (), (), (), 0.0)[len(rest):])
                d_mins = [d for d in self.whole_d_mins if d >= floor]
                out += _fresh([Step(n, d, levels=q, caps=caps, cap_parts=tuple(parts),
                                    pole_cuts=tuple(cuts), window=tuple(window),
                                    fine=tuple(fine), all_round=rnd) for d in (0.0, *d_mins)])
        return out

    def _seeded(self, n, d_mins, seeds, variants) -> list[tuple]:
        """A chain over d_mins per variant (Step fields), seeded by the rule before d_mins[0]
        in ``seeds`` (the uniform rule before the first) of the main chain for the bulk, of
        the band's own 3D chain for the cells off it; each next rule graded about the points
        the one before it located."""
        out, i = [], seeds.index(d_mins[0])
        for v in variants:
            seed = Step(n, seeds[i - 1] if i else 0.0,
                        **{k: x for k, x in v.items() if k == "levels"})
            rules = [Step(n, d, **v) for d in d_mins]
            out += [(s, rules[j - 1] if j else seed, "located") for j, s in enumerate(rules)]
        return out


def _fresh(rules) -> list[tuple]:
    """A chain from its own uniform rule: each next rule graded about the points the one
    before it located."""
    return [(s, rules[j - 1] if j else None, "located") for j, s in enumerate(rules)]


#: The caps cut toward the pole (Step.pole_cuts): parts that shrink geometrically, the last
#: one inside the cell at the pole at n = 64.
POLE_CUTS = (0.3, 0.1, 0.03, 0.01)
#: Angle windows about the band's two dividing points (every caps' level of the rules without
#: them located its points within 1.51 to 1.65 and pi on, so the windows keep more than
#: GRADED_WIDTH to spare), and the cuts of their fine rule: about a tenth of the windows' cap
#: mass per part in n = 64's state at the handoff.
DIVIDER_WINDOWS = ((1.4, 1.8), (1.4 + math.pi, 1.8 + math.pi))
WINDOW_CUTS = (1.15, 1.1, 1.04, 0.97, 0.89, 0.8, 0.7, 0.58, 0.41)


def halved(cuts) -> tuple:
    """Distances from the pole (descending) with a cut added midway in each part, the part at
    the band's edge (which lies within ROWS_ANGLE of z = 0) included: the composite z-rule's
    parts halved in height, its h-refinement."""
    far = (math.pi / 2 - ROWS_ANGLE, *cuts, 0.0)
    mid = [round((a + b) / 2, 4) for a, b in zip(far[:-1], far[1:], strict=True)]
    return tuple(sorted({*cuts, *mid}, reverse=True))


#: The longest list of cuts a run's name spells out: file names stop at 255 bytes, and a
#: twice-halved rule's 39 cuts would pass that
CUTS_TAG_MAX = 160


def cuts_tag(cuts) -> str:
    """The cuts as a run's name spells them: each one, or where that is longer than
    CUTS_TAG_MAX, the coarsest cuts they are :func:`halved` from and how many times."""
    tag = "-".join(f"{d:g}" for d in cuts)
    base, times = tuple(cuts), 0
    while len(tag) > CUTS_TAG_MAX and base[1::2] and halved(base[1::2]) == base:
        base, times = base[1::2], times + 1
        tag = "-".join(f"{d:g}" for d in base) + f"_halved{times}"
    return tag


#: Within this distance of the pole the fine rule goes all round (Step.all_round): there the
#: rules with the windows alone located the curve near or off the windows' bounds (1.43 rad
#: at 0.5 from the pole, 1.33 above).
ROUND_NEAR = 0.7
QUICK = Plan(cells=(16,), d_mins=(1e-3, 1e-4), tight=1e-4, m0=1000)
FULL = Plan(cells=(32, 64), d_mins=tuple(10.0 ** -k for k in range(3, 12)), tight=1e-8,
            finer_cells=((32, 32.0), (64, 32.0)), third_cells=((64, 32.0, 96), (64, 32.0, 192)),
            stepping_cells=((64, 32.0, 1e-4),),
            limiter_cells=((64, 32.0, "positivity", 64), (64, 24.0, "positivity", 96)),
            bulk=((64, (8000, 16000)),),
            bulk_d_mins=tuple(10.0 ** -k for k in range(6, 11)),
            levels=((64, (2, 3)),), levels_d_mins=tuple(10.0 ** -k for k in range(3, 9)),
            sphere=((64, (2,)),), sphere_d_mins=(1e-6, 1e-7, 1e-8),
            # q' = 2 stops where its rules agree over the whole window (from 1e-9 on); more
            # nodes per cap stop earlier, where q' = 1 and 2 show the rule settled within
            # 5e-4 of their finest: 1e-7 (1e-8 its own check) up to t = 26, 1e-4 up to t = 20;
            # the composite z-rule: parts of about a quarter of the cap's mass each; then
            # parts cut toward the pole; then tenths of the mass in the dividers' windows, with
            # two and four nodes per cap off them, and those parts taken all round within 0.7
            # of the pole, where the windows narrow in space and the rule off them lumps the
            # columns next to the curve; with those parts all round, two nodes per part (to
            # 1e-9) measure the error of one in the windows and near the pole, three (to
            # 1e-7) whether that z-rule settles, and one node in parts half as high (to 1e-6)
            # and a quarter as high whether its error falls with the parts' height, and at
            # what order
            whole=((64, ((2, 1), (2, 2, 1e-10), (2, 3, 1e-8), (2, 4, 1e-8), (2, 5, 1e-4),
                         (2, 1, 1e-7, (2, 6, 14)), (2, 2, 1e-7, (2, 6, 14)),
                         (2, 1, 1e-5, (), POLE_CUTS), (2, 2, 1e-4, (), POLE_CUTS),
                         (2, 2, 1e-7, (), (), DIVIDER_WINDOWS, (1, WINDOW_CUTS)),
                         (2, 2, 1e-6, (), (), DIVIDER_WINDOWS, (2, WINDOW_CUTS)),
                         (2, 4, 1e-4, (), (), DIVIDER_WINDOWS, (1, WINDOW_CUTS)),
                         (2, 2, 1e-8, (), (), DIVIDER_WINDOWS, (1, WINDOW_CUTS), ROUND_NEAR),
                         (2, 4, 1e-8, (), (), DIVIDER_WINDOWS, (1, WINDOW_CUTS), ROUND_NEAR),
                         (2, 2, 1e-9, (), (), DIVIDER_WINDOWS, (2, WINDOW_CUTS), ROUND_NEAR),
                         (2, 2, 1e-7, (), (), DIVIDER_WINDOWS, (3, WINDOW_CUTS), ROUND_NEAR),
                         (2, 2, 1e-6, (), (), DIVIDER_WINDOWS, (1, halved(WINDOW_CUTS)),
                          ROUND_NEAR),
                         (2, 2, 1e-6, (), (), DIVIDER_WINDOWS,
                          (1, halved(halved(WINDOW_CUTS))), ROUND_NEAR))),),
            whole_d_mins=tuple(10.0 ** -k for k in range(3, 12)),
            attention=(Step(64, 1e-4, levels=2, caps=1, pole_cuts=POLE_CUTS),
                       Step(64, 1e-4, levels=2, caps=2, window=DIVIDER_WINDOWS,
                            fine=(1, WINDOW_CUTS)),
                       *(Step(64, 1e-4, levels=2, caps=2, window=DIVIDER_WINDOWS,
                              fine=(q, WINDOW_CUTS), all_round=ROUND_NEAR) for q in (1, 2))))


# ------------------------------------------------------------------------ the circle state
def band_cells(n: int, rows: int) -> np.ndarray:
    """Indices of the cells in the ``rows`` rows on each side of z = 0 of the four
    equatorial panels (cell = panel n^2 + row n + column)."""
    j = np.arange(n // 2 - rows, n // 2 + rows)
    p, jj, i = np.meshgrid(np.arange(4), j, np.arange(n), indexing="ij")
    return (p * n * n + jj * n + i).ravel()


def band_rows(n: int) -> int:
    """How many cell rows on each side of z = 0 lie within ROWS_ANGLE."""
    return max(1, int(ROWS_ANGLE / (0.5 * math.pi / n)))


def column(sol, k: int, theta, rows: int):
    """The band's mass across z = 0 (``rows`` rows a side) at angles ``theta``, at output k:
    (z, m), both (len(theta), 2 rows, Z_NODES), the Gauss nodes of the composite rule over
    the cells' own z-intervals and the reconstruction's mass per unit angle at each (on the
    panel centred at angle p pi / 2, the row edge tan(beta_j) lies at
    z = arctan(tan(beta_j) cos(theta - p pi / 2)))."""
    ze = band_edges(sol.mesh.n, theta, rows)
    return _z_rule(sol, k, theta, ze[:, :-1], ze[:, 1:])


def band_edges(n: int, theta, rows: int) -> np.ndarray:
    """z of the band's row edges (``rows`` rows a side) at angles ``theta``: (len(theta),
    2 rows + 1), ascending."""
    theta = np.asarray(theta, dtype=float) % (2 * math.pi)
    p = np.floor((theta + math.pi / 4) / (math.pi / 2)) % 4
    a = (theta - p * math.pi / 2 + math.pi) % (2 * math.pi) - math.pi
    tb = np.tan(-math.pi / 4 + 0.5 * math.pi / n * np.arange(n // 2 - rows, n // 2 + rows + 1))
    return np.arctan(tb[None, :] * np.cos(a)[:, None])


def _z_rule(sol, k: int, theta, lo, hi):
    """Z_NODES Gauss nodes on each z-piece [lo, hi] (both (len(theta), pieces)) of the
    meridians at ``theta`` and the reconstruction's mass per unit angle at each: (z, m), both
    (len(theta), pieces, Z_NODES); a piece of zero length carries none."""
    theta = np.asarray(theta, dtype=float)
    g, gw = np.polynomial.legendre.leggauss(Z_NODES)
    lo, hi = lo[..., None], hi[..., None]
    z = lo + (hi - lo) * (g + 1) / 2
    cz = np.cos(z)   # the area element on the sphere is cos z dz dtheta
    pts = np.stack([np.cos(theta)[:, None, None] * cz, np.sin(theta)[:, None, None] * cz,
                    np.sin(z)], axis=-1)
    rho = sol.density(k, pts.reshape(-1, 3)).reshape(z.shape)
    return z, rho * (hi - lo) * gw / 2 * cz


def meridian_edges(n: int, theta) -> np.ndarray:
    """z at which the meridians at angles ``theta`` cross the edges of the cells (n a face
    edge), with -pi/2 and pi/2: (len(theta), E), ascending, padded with pi/2, so that each
    piece between two consecutive entries lies in one cell. A grid line of a panel is the
    great circle where the plane (e - t c) . x = 0 (e: the panel's axis across it, c: its
    centre) meets the sphere; on the meridian x = cos z u + sin z e_z it lies at
    tan z = -(normal . u) / normal_z, kept where that point is on the panel."""
    theta = np.asarray(theta, dtype=float)
    t = np.tan(-math.pi / 4 + 0.5 * math.pi / n * np.arange(n + 1))
    c, e1, e2 = PANELS[:, 0], PANELS[:, 1], PANELS[:, 2]
    normal = np.concatenate([(e[:, None, :] - t[None, :, None] * c[:, None, :]).reshape(-1, 3)
                             for e in (e1, e2)])
    along = np.concatenate([np.repeat(e2, n + 1, axis=0), np.repeat(e1, n + 1, axis=0)])
    centre = np.tile(np.repeat(c, n + 1, axis=0), (2, 1))
    u = np.column_stack([np.cos(theta), np.sin(theta), np.zeros_like(theta)])
    nz = normal[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.arctan(-(u @ normal.T) / nz)
    cz, sz = np.cos(z), np.sin(z)
    on_c = cz * (u @ centre.T) + sz * centre[:, 2]
    on_a = cz * (u @ along.T) + sz * along[:, 2]
    ok = (np.abs(nz) > 1e-12) & (on_c > 1e-12) & (np.abs(on_a) <= on_c * (1 + 1e-9))
    z = np.sort(np.where(ok, z, math.pi / 2), axis=1)
    width = int(ok.sum(axis=1).max())
    ends = np.full((len(theta), 1), math.pi / 2)
    return np.hstack([-ends, z[:, :width], ends])


def cap_column(sol, k: int, theta, rows: int, north: bool, part=(0, None), zone=None):
    """The mass off the band (``rows`` rows a side) on the meridians at angles ``theta``, from
    the band's edge to the north or south pole: (z, m) as :func:`column`'s, over the pieces
    of the meridian in one cell each (:func:`meridian_edges`); only the pieces whose count
    from the band's edge (0 the nearest) lies in [part[0], part[1]) (None: to the pole), and
    of those only what lies between the distances ``zone`` = (far, near) from the pole."""
    theta = np.asarray(theta, dtype=float)
    edge = band_edges(sol.mesh.n, theta, rows)[:, -1 if north else 0, None]
    ze = meridian_edges(sol.mesh.n, theta)
    lo, hi = ze[:, :-1], ze[:, 1:]
    mine = lo >= edge - 1e-12 if north else hi <= edge + 1e-12
    rank = np.cumsum(mine, axis=1) if north else np.cumsum(mine[:, ::-1], axis=1)[:, ::-1]
    mine &= (rank > part[0]) & ((rank <= part[1]) if part[1] is not None else True)
    if zone is not None:
        bottom, top = math.pi / 2 - zone[0], math.pi / 2 - zone[1]
        bottom, top = (bottom, top) if north else (-top, -bottom)
        lo, hi = np.clip(lo, bottom, top), np.clip(hi, bottom, top)
        mine &= hi > lo
    used = mine.any(axis=0)
    lo, hi = np.where(mine, lo, 0.0)[:, used], np.where(mine, hi, 0.0)[:, used]
    return _z_rule(sol, k, theta, lo, hi)


def marginal(sol, k: int, theta, rows: int) -> np.ndarray:
    """The density per unit angle on z = 0 of the band's mass (``rows`` rows a side), at
    angles ``theta``: the z-integral of the reconstruction at output k (:func:`column`)."""
    return column(sol, k, theta, rows)[1].sum(axis=(1, 2))


def wrapped(angle):
    """Angles (differences) brought into [-pi, pi)."""
    return (angle + math.pi) % (2 * math.pi) - math.pi


def graded_edges(m0: int, dividers, d_min: float) -> np.ndarray:
    """Interval edges on [theta_0, theta_0 + 2 pi): ``m0`` uniform intervals, replaced within
    GRADED_WIDTH of each dividing point by intervals shrinking in ratio GRADING down to
    ``d_min`` on both sides (d_min = 0: uniform)."""
    e = np.arange(m0) * 2 * math.pi / m0
    if d_min:
        k = math.ceil(math.log(d_min / GRADED_WIDTH) / math.log(GRADING))
        d = GRADED_WIDTH * GRADING ** np.arange(k + 1)
        for s in dividers:
            e = e[np.abs(wrapped(e - s)) > GRADED_WIDTH]
            e = np.concatenate([e, (s + d) % (2 * math.pi), (s - d) % (2 * math.pi)])
    e = np.sort(e)
    return np.append(e, e[0] + 2 * math.pi)


def circle_tokens(sol, k: int, edges, rows: int):
    """Angles (the intervals' midpoints) and masses (the marginal's Gauss integral over each
    interval) of the tokens on the circle; intervals without mass give no token."""
    mid, length = 0.5 * (edges[1:] + edges[:-1]), np.diff(edges)
    g, gw = np.polynomial.legendre.leggauss(WEIGHT_NODES)
    at = mid[:, None] + 0.5 * length[:, None] * g
    w = (marginal(sol, k, at.ravel(), rows).reshape(at.shape) * gw).sum(axis=1) * length / 2
    keep = w > 0
    return mid[keep] % (2 * math.pi), w[keep]


def dividers_of(theta, side) -> list[float]:
    """Midpoints between consecutive tokens (by angle at the start) whose sides at the end
    differ: the dividing points, to within the rule's spacing there."""
    o = np.argsort(theta)
    th, s = theta[o], side[o]
    nxt = np.roll(np.arange(len(th)), -1)
    change = np.flatnonzero(s != s[nxt])
    return [float((th[i] + ((th[nxt[i]] - th[i]) % (2 * math.pi)) / 2) % (2 * math.pi))
            for i in change]


def gauss_rule(z, m, q: int):
    """The q-node Gauss rule of each discrete measure sum_j m[i, j] delta_{z[i, j]}: (nodes,
    weights), both (len(z), q), nodes ascending; it integrates polynomials of degree 2q - 1
    exactly. The Jacobi matrix comes from the Stieltjes recurrence on the measure itself;
    a measure on fewer than q points gets its mean as every node, its mass shared."""
    mass = m.sum(axis=1)
    a, b = np.zeros((len(z), q)), np.zeros((len(z), q))
    p_prev, p, norm_prev = np.zeros_like(z), np.ones_like(z), None
    with np.errstate(invalid="ignore", divide="ignore"):
        for k in range(q):
            norm = (m * p * p).sum(axis=1)
            a[:, k] = (m * z * p * p).sum(axis=1) / norm
            if k:
                b[:, k] = norm / norm_prev
            p_prev, p = p, (z - a[:, k, None]) * p - b[:, k, None] * p_prev
            norm_prev = norm
    jac, i = np.zeros((len(z), q, q)), np.arange(q)
    jac[:, i, i] = a
    jac[:, i[:-1], i[1:]] = jac[:, i[1:], i[:-1]] = np.sqrt(b[:, 1:])
    bad = ((m > 0).sum(axis=1) < q) | ~np.isfinite(jac).all(axis=(1, 2))
    jac[bad] = 0.0
    nodes, vec = np.linalg.eigh(jac)
    weights = mass[:, None] * vec[:, 0, :] ** 2
    mean = (m * z).sum(axis=1)[bad] / np.where(mass[bad] > 0, mass[bad], 1.0)
    nodes[bad], weights[bad] = mean[:, None], mass[bad, None] / q
    return nodes, weights


def band_tokens(sol, k: int, edges, rows: int, q: int):
    """Angles (the intervals' midpoints), z (q per interval) and masses of tokens in 3D: per
    interval, the q-node Gauss rule in z (:func:`gauss_rule`) of the band's mass over it
    (WEIGHT_NODES in angle times the cells' z-rule); intervals without mass give none."""
    return _interval_tokens(lambda at: column(sol, k, at, rows), edges, q)


def cap_tokens(sol, k: int, edges, rows: int, q: int, north: bool, window=(), inside=None,
               **part):
    """:func:`band_tokens` for the mass of the north or south cap off the band, or of one part
    of it (:func:`cap_column`'s keywords); over the angles in the ``window`` (``inside``
    True) or off them (False, :func:`windowed`), or all round (None)."""
    return _interval_tokens(lambda at: cap_column(sol, k, at, rows, north, **part),
                            windowed(edges, window, inside) if inside is not None else edges, q)


def in_windows(theta, window) -> np.ndarray:
    """Whether each angle lies in one of the windows ((lo, hi), ...; one may wrap 2 pi)."""
    theta = np.asarray(theta, dtype=float)
    within = np.zeros(theta.shape, bool)
    for lo, hi in window:
        within |= (theta - lo) % (2 * math.pi) < (hi - lo) % (2 * math.pi)
    return within


def windowed(edges, window, inside: bool):
    """The intervals of ``edges`` (on [edges[0], edges[0] + 2 pi]) cut at the bounds of the
    angle windows ((lo, hi), ...), those in the windows or those off them: (lo, hi) arrays."""
    bounds = np.ravel(window) % (2 * math.pi)
    bounds = np.where(bounds <= edges[0], bounds + 2 * math.pi, bounds)
    e = np.union1d(edges, bounds[bounds < edges[-1]])
    within = in_windows(0.5 * (e[1:] + e[:-1]), window)
    keep = within if inside else ~within
    return e[:-1][keep], e[1:][keep]


def _interval_tokens(columns, edges, q: int):
    """Per interval of ``edges`` (consecutive edges, or (lo, hi) arrays), the q-node Gauss
    rule in z of the mass that ``columns`` (angles -> (z, m)) gives, integrated over the
    interval by WEIGHT_NODES in angle: (midpoints, nodes, weights) for the intervals with
    mass."""
    lo, hi = edges if isinstance(edges, tuple) else (edges[:-1], edges[1:])
    mid, length = 0.5 * (lo + hi), hi - lo
    g, gw = np.polynomial.legendre.leggauss(WEIGHT_NODES)
    at = mid[:, None] + 0.5 * length[:, None] * g
    z, m = columns(at.ravel())
    z = z.reshape(len(mid), -1)
    m = (m.reshape(len(mid), WEIGHT_NODES, -1) * (gw / 2)[:, None]).reshape(len(mid), -1)
    m = m * length[:, None]
    keep = m.sum(axis=1) > 0
    nodes, weights = gauss_rule(z[keep], m[keep], q)
    return mid[keep] % (2 * math.pi), nodes, weights


# ------------------------------------------------------------------------------- the runs
@functools.lru_cache(maxsize=4)
def cells_state(n: int, t_handoff: float, t_end: float, store: Path | None = None):
    """The finite volumes to t_handoff: (model, output times to t_end, the handoff's index k0,
    a solution holding the state at the handoff only, probe rows to k0, the + centre at k0).
    Saved under ``store`` when given: every rule, chain and finer run starts from it, and
    each process would otherwise run the cells again (170 s at n = 64)."""
    model = model_for("R1", BETA)
    times = _output_times(Run(BETA, n, t_end))
    k0 = int(np.argmin(np.abs(times - t_handoff)))

    def run():
        sol = sp.FiniteVolumeSolver(model, n).solve(initial(), times[:k0 + 1])
        rows, c = cell_rows(Probe(model), sol, k0, initial().hemisphere_mass(E))
        return {"averages": sol.coefficients[k0] / sol.mesh.areas, "centre": c,
                **_rows_out(rows)}

    spec = {"beta": BETA, "n": n, "t": [float(times[0]), float(times[k0])]}
    d = (run() if store is None else
         stored_run(Path(store), f"R1_state_beta={BETA:g}_n={n}_t={t_handoff:g}", spec, run))
    state = sp.FiniteVolumeSolver(model, n).solve(list(d["averages"]), [float(times[k0])])
    return model, times, k0, state, _rows_in(d), np.asarray(d["centre"])


def _rows_out(rows) -> dict:
    """Probe rows (dicts of floats) as arrays to save: their column names and values."""
    cols = list(rows[0])
    return {"columns": np.array(cols), "rows": np.array([[r[k] for k in cols] for r in rows])}


def _rows_in(saved) -> list:
    """The probe rows that :func:`_rows_out` saved."""
    cols = [str(k) for k in saved["columns"]]
    return [dict(zip(cols, map(float, r), strict=True)) for r in saved["rows"]]


def compute(step: Step, dividers, plan: Plan, store: Path | None = None,
            by_level=False) -> dict:
    """One rule of the chain: its tokens from the cells' band at the handoff to the end (on
    the circle with the plane's 2 x 2 model, or in 3D with the model itself); with
    ``by_level``, also the + cluster's attention on each level's tail at every output
    (``share_by_level``, outputs from the handoff on x levels)."""
    model, times, k0, state, rows, c = cells_state(step.n, plan.t_handoff, plan.t_end, store)
    rows = list(rows)
    probe, m_plus = Probe(model), initial().hemisphere_mass(E)
    band, m0 = band_rows(step.n), step.m0 or plan.m0
    if step.levels:
        theta, x, w, level = levels_tokens(state, step, dividers, m0, band)
        if step.sphere:
            mu, off = state.measure(0), np.ones(state.mesh.n_cells, bool)
            off[band_cells(step.n, band)] = False
            x, w = np.vstack([x, mu.points[off]]), np.concatenate([w, mu.weights[off]])
            level = np.concatenate([level, np.full(off.sum(), -1)])
            theta = np.concatenate([theta, np.zeros(off.sum())])
        run_model = model
    else:
        theta, w = circle_tokens(state, 0, graded_edges(m0, dividers, step.d_min), band)
        x, level = np.column_stack([np.cos(theta), np.sin(theta)]), np.zeros(len(w), int)
        run_model = sp.Model(K=model.K[:2, :2], V=model.V[:2, :2], beta=BETA)
    solver = (sp.ParticleSolver(run_model, kernel="auto", rtol=TIGHT[0], atol=TIGHT[1],
                                adaptive_kernel=True) if step.tight
              else _particle_solver(run_model))
    wn, shares = w / w.sum(), []
    for j in range(len(times) - k0):
        if j:
            x = solver.solve(x, times[k0 + j - 1:k0 + j + 1], wn).positions[-1]
        x3 = x if x.shape[1] == 3 else np.column_stack([x, np.zeros(len(wn))])
        c = probe.centre(x3, wn, c)
        rows.append(probe.record(x3, wn, c, m_plus))
        if by_level:
            tail = probe.tail(x3, c, np.ones(len(wn), bool))
            a = np.where(tail, probe.attention(x3, wn, c), 0.0)
            shares.append(np.bincount(level, weights=a, minlength=step.n_levels))
    out = _saved(times, rows, math.nan, len(wn))
    if by_level:
        out["share_by_level"] = np.array(shares)
    side = np.sign(x3 @ probe.v)
    located = [(lev, s) for lev in range(step.n_levels)
               for s in dividers_of(theta[level == lev], side[level == lev])]
    cells = band_cells(step.n, band)
    out.update(dividers_in=_points(dividers), dividers=_points(
                   located if step.levels else [s for _, s in located]),
               band_mass=np.array(state.masses[0][cells].sum()),
               marginal_mass=np.array(w.sum()),
               row_mass=np.array([state.masses[0][band_cells(step.n, r)].sum()
                                  for r in range(1, band + 1)]))
    return out


def levels_tokens(state, step: Step, dividers, m0: int, band: int):
    """The 3D rule's tokens: (angles, positions (N, 3), masses, level): level j < q holds the
    j-th z-node in the band of each interval of its own edges, graded about its own dividing
    points (``dividers``: (level, angle) pairs); the caps' levels follow, north then south,
    group by group (:attr:`Step.cap_layout`), each with CAP_M0 uniform intervals."""
    parts = []
    for lev in range(step.n_levels):
        mine = [s for j, s in dividers if j == lev]
        if lev < step.levels:
            j, (theta, z, m) = lev, band_tokens(state, 0, graded_edges(m0, mine, step.d_min),
                                                 band, step.levels)
        else:
            cap, group, j = step.cap_level(lev)
            bound, q, inside = step.cap_layout[group]
            theta, z, m = cap_tokens(state, 0, graded_edges(CAP_M0, mine, step.d_min), band,
                                     q, cap == 0, window=step.window, inside=inside, **bound)
        parts.append((theta, z[:, j], m[:, j], np.full(len(theta), lev)))
    theta, z, w, level = (np.concatenate(a) for a in zip(*parts, strict=True))
    keep = w > 0
    theta, z, w, level = theta[keep], z[keep], w[keep], level[keep]
    x = np.column_stack([np.cos(z) * np.cos(theta), np.cos(z) * np.sin(theta), np.sin(z)])
    return theta, x, w, level


def _points(dividers) -> np.ndarray:
    """Dividing points as saved: angles, or (level, angle) rows for a 3D rule."""
    return np.array([tuple(map(float, s)) if np.ndim(s) else float(s) for s in dividers],
                    dtype=float)


def spec_of(step: Step, dividers, plan: Plan) -> dict:
    spec = {"beta": BETA, "n": step.n, "d_min": step.d_min, "tight": step.tight,
            "m0": step.m0 or plan.m0, "t": [plan.t_handoff, plan.t_end], "rows_angle": ROWS_ANGLE,
            "graded": [GRADED_WIDTH, GRADING], "nodes": [WEIGHT_NODES, Z_NODES],
            "dividers": [[int(s[0]), round(s[1], 15)] if np.ndim(s) else round(s, 15)
                         for s in dividers]}
    if step.levels:   # the rules on the circle keep the description they were saved under
        spec["levels"] = step.levels
    if step.sphere:
        spec["sphere"] = True
    if step.caps:
        spec.update(caps=step.caps, cap_m0=CAP_M0)
    if step.cap_parts:
        spec["cap_parts"] = list(step.cap_parts)
    if step.pole_cuts:
        spec["pole_cuts"] = list(step.pole_cuts)
    if step.window:
        spec.update(window=[list(w) for w in step.window],
                    fine=[step.fine[0], list(step.fine[1])])
    if step.all_round:
        spec["all_round"] = step.all_round
    return spec


def run_chain(plan: Plan, n: int, store: Path, compute_missing=True) -> list:
    """The rules at resolution n in order (:meth:`Plan.chain`), [(step, data or None)]: each
    graded about the dividing points of the rule it follows (None: not available, or the rule
    it follows is not)."""
    out, done = [], {}
    for step, parent, which in plan.chain(n):
        if parent is not None and parent not in done:
            out.append((step, None))
            continue
        use = [] if parent is None else list(
            done[parent]["dividers" if which == "located" else "dividers_in"])
        d = stored_run(store, step.name, spec_of(step, use, plan),
                       (lambda s=step, u=use: compute(s, u, plan, store))
                       if compute_missing else None)
        out.append((step, d))
        if d is not None:
            done[step] = d
    return out


def level_attention(plan: Plan, chains, store: Path, compute_missing=True) -> dict:
    """{step: its run again with ``share_by_level``} for the rules of ``plan.attention``
    whose rule in ``chains`` ({n: :func:`run_chain`'s list}) is saved (graded about the same
    points, so its W2 curves are the chain rule's)."""
    out = {}
    for step in plan.attention:
        data = dict(chains.get(step.n, ())).get(step)
        if data is None:
            continue
        use = list(data["dividers_in"])
        got = stored_run(store, step.name + "_by_level",
                         {**spec_of(step, use, plan), "by_level": True},
                         (lambda s=step, u=use: compute(s, u, plan, store, by_level=True))
                         if compute_missing else None)
        if got is not None:
            out[step] = got
    return out


def part_names(step: Step) -> list[str]:
    """The caps' groups of levels in words (:attr:`Step.cap_layout`)."""
    def name(bound, inside):
        where = {None: "all round: " if step.window else "", False: "off windows: ",
                 True: "windows: "}[inside]
        if "zone" in bound:
            far, near = bound["zone"]
            return (where + "pi/2 - z " + ("edge" if far == math.pi else f"{far:g}")
                    + f" to {near:g}")
        lo, hi = bound["part"]
        return where + f"pieces {lo} to {'pole' if hi is None else hi}"

    return [name(b, inside) for b, _, inside in step.cap_layout]


def attention_table(step: Step, data, t_handoff: float) -> list:
    """Every time unit from the handoff while the tail holds attention: W2 to Pi#rho_0, the
    + cluster's attention on its tail, and the part of it on the band's levels and on each
    part of the caps (north and south together)."""
    share, times = np.asarray(data["share_by_level"]), np.asarray(data["times"])
    times = times[times >= t_handoff - 1e-9]
    nb, rows = len(step.cap_layout), []
    part = np.array([step.cap_level(lev)[1] for lev in range(step.levels, step.n_levels)])
    for k, t in enumerate(times):
        total = share[k].sum()
        if abs(t - round(t)) > 1e-9 or total < 1e-6:
            continue
        caps = [share[k, step.levels:][part == j].sum() for j in range(nb)]
        rows.append([float(t), f"{float(_on(data, [t])[0, 0]):.4f}", f"{total:.3g}",
                     f"{share[k, :step.levels].sum():.3g}"] + [f"{c:.1e}" for c in caps])
    return rows


def finer_cells(n: int, t_stop: float, plan: Plan, store: Path, compute_missing=True,
                macro_tol=None, to=None, limiter=None):
    """The cells at 2n (or ``to``) from n's state at the handoff (its reconstruction
    integrated over those cells by their Gauss rule, total mass kept) to t_stop, probed as the
    chains are; with ``macro_tol`` or ``limiter``, the cells at n from it with that multirate
    tolerance or that limiter instead of the solver's default. One solve over all outputs,
    checkpointed at each (the rows, the cell averages and the + centre), so that a run longer
    than a sitting resumes where it stopped (restarting the macro step once there); None when
    not finished and ``compute_missing`` is false."""
    path, spec = _finer_path(n, t_stop, plan, store, macro_tol, to, limiter)
    return cached_piece(
        path, spec, lambda partial: _run_finer(n, t_stop, plan, partial, macro_tol, to, limiter),
        path.stem, compute=compute_missing)


def _run_finer(n: int, t_stop: float, plan: Plan, partial: Path, macro_tol=None,
               to=None, limiter=None) -> dict:
    """:func:`finer_cells`' run, from its checkpoint ``partial`` when there is one."""
    t0, c0 = time.perf_counter(), time.process_time()
    model = model_for("R1", BETA)
    m = _finer_n(n, macro_tol, to, limiter)
    fine = sp.FiniteVolumeSolver(model, m, macro_tol=macro_tol or DEFAULT_MACRO_TOL,
                                 **({"limiter": limiter} if limiter else {}))
    ts = _finer_times(n, t_stop, plan)
    probe, m_plus = Probe(model), initial().hemisphere_mass(E)
    saved = _finer_resume(partial, ts)
    if saved is not None:
        print(f"    resuming at t = {ts[saved['done']]:g} ({saved['done']}/{len(ts) - 1} outputs, "
              f"{saved['seconds']:.0f} s spent)", flush=True)
    else:
        _, _, _, state, _, c = cells_state(n, plan.t_handoff, plan.t_end, Path(partial).parent)
        if m == n:   # the state's own cell masses
            mass = state.coefficients[0]
        else:
            pts, area = fine.mesh.cell_quadrature(3)
            mass = (state.density(0, pts.reshape(-1, 3)).reshape(area.shape) * area).sum(axis=1)
        saved = {"done": 0, "rows": [], "state": mass / mass.sum() / fine.mesh.areas,
                 "centre": c, "seconds": 0.0, "cpu_seconds": 0.0}
    done, rows, box = saved["done"], saved["rows"], {"c": saved["centre"]}

    def reached(i, t, one):
        if i == 0 and done > 0:   # the resumed state's row is already saved
            return
        mu = one.measure(0)
        box["c"] = probe.centre(mu.points, mu.weights, box["c"])
        rows.append(probe.record(mu.points, mu.weights, box["c"], m_plus))
        if i > 0:
            _finer_checkpoint(partial, ts, done + i, rows, one.coefficients[0] / fine.mesh.areas,
                              box["c"], saved["seconds"] + time.perf_counter() - t0,
                              saved["cpu_seconds"] + time.process_time() - c0)

    fine.solve(list(saved["state"]), ts[done:] - plan.t_handoff, on_output=reached)
    # the earlier sittings' time; cached_piece's save adds this one's
    return {**_saved(ts, rows, math.nan, m), "resumed_seconds": saved["seconds"],
            "resumed_cpu_seconds": saved["cpu_seconds"]}


def _finer_times(n: int, t_stop: float, plan: Plan) -> np.ndarray:
    """The finer cells' outputs: n's, from the handoff to t_stop."""
    times = _output_times(Run(BETA, n, plan.t_end))
    return times[(times >= plan.t_handoff - 1e-9) & (times <= t_stop + 1e-9)]


def _finer_n(n: int, macro_tol=None, to=None, limiter=None) -> int:
    """The cells a finer run from n's state uses: ``to``, else 2n, or n itself for a tighter
    step or another limiter."""
    return to or (n if macro_tol or limiter else 2 * n)


def _finer_path(n: int, t_stop: float, plan: Plan, store: Path, macro_tol=None, to=None,
                limiter=None):
    spec = {"beta": BETA, "n": n, "to": _finer_n(n, macro_tol, to, limiter),
            "t": [plan.t_handoff, t_stop]}
    name = f"R1_cells_beta={BETA:g}_n={n}_to{spec['to']}_t={t_stop:g}"
    if macro_tol:
        spec["macro_tol"] = macro_tol
        name += f"_macro={macro_tol:g}"
    if limiter:
        spec["limiter"] = limiter
        name += f"_limiter={limiter}"
    return Path(store) / f"{name}_{run_key(spec)}.npz", spec


def _finer_checkpoint(partial, ts, done, rows, state, c, seconds, cpu_seconds):
    """Save a finer-cells run's progress atomically: the rows of outputs 0..done (column by
    column), the cell averages and the + centre there, and the time spent."""
    io.save_npz(partial, times=ts, done=np.array(done), **_rows_out(rows), state=state,
                centre=np.asarray(c), seconds=np.array(seconds),
                cpu_seconds=np.array(cpu_seconds))


def _finer_resume(partial, ts) -> dict | None:
    """A finer-cells checkpoint for these output times, or None (absent, another run's, or
    damaged: never trusted, started over)."""
    if not Path(partial).exists():
        return None
    try:
        saved = io.load_npz(partial)
        if not np.array_equal(saved["times"], ts):
            return None
        out = {"done": int(saved["done"]), "state": np.asarray(saved["state"]),
               "rows": _rows_in(saved),
               "centre": np.asarray(saved["centre"]), "seconds": float(saved["seconds"]),
               "cpu_seconds": float(saved["cpu_seconds"])}
    except Exception as exc:  # noqa: BLE001 - a damaged checkpoint is ignored, never trusted
        print(f"    {Path(partial).name}: unreadable ({exc}); starting over", file=sys.stderr)
        return None
    return out


def finer_reached(n: int, t_stop: float, plan: Plan, store: Path, macro_tol=None, to=None,
                  limiter=None):
    """The finer cells finished, or as far as their checkpoint reached (``partial`` set), or
    None."""
    done = finer_cells(n, t_stop, plan, store, compute_missing=False, macro_tol=macro_tol,
                       to=to, limiter=limiter)
    if done is not None:
        return done
    path, _ = _finer_path(n, t_stop, plan, store, macro_tol, to, limiter)
    ts = _finer_times(n, t_stop, plan)
    saved = _finer_resume(path.with_name(path.stem + ".partial.npz"), ts)
    if saved is None:
        return None
    out = _saved(ts[:saved["done"] + 1], saved["rows"], math.nan,
                 _finer_n(n, macro_tol, to, limiter))
    out["partial"] = np.array(True)
    return out


def _every(times, t_handoff: float) -> np.ndarray:
    """The output times a whole number of FINER_EVERY from the handoff (the tables' rows)."""
    times = np.asarray(times)
    steps = (times - t_handoff) / FINER_EVERY
    return times[np.isclose(steps, np.round(steps))]


def finer_cells_table(plan, runs, chains, cells) -> list:
    """Every FINER_EVERY time units of the finer cells: the larger gap over the two W2 curves
    between the cells at n, the cells at 2n (both from n's state) and the finest token rule
    from that state, and that rule's own error (against the rule before it)."""
    rows = []
    for n, fine in runs.items():
        graded = [d for s, d in chains.get(n, []) if d is not None and not s.repeat]
        if fine is None or cells.get(n) is None or len(graded) < 2:
            continue
        t = _every(fine["times"], plan.t_handoff)
        tok, prev = _on(graded[-1], t), _on(graded[-2], t)
        coarse, f2 = _on(cells[n], t), _on(fine, t)
        for k, tk in enumerate(t):
            rows.append([n, float(tk)] + [float(np.abs(a[:, k] - b[:, k]).max())
                                          for a, b in ((coarse, tok), (f2, tok), (f2, coarse),
                                                       (tok, prev))])
    return rows


def stepping_table(plan, stepping, chains, cells) -> list:
    """Every FINER_EVERY time units: n's state run on at n with a tighter multirate tolerance
    against the cells at n with the default one, and both against the finest token rule on
    the circle (the larger gap over the two W2 curves)."""
    rows = []
    for (n, tol), run in stepping.items():
        graded = [d for s, d in chains.get(n, []) if d is not None and not s.repeat]
        if run is None or cells.get(n) is None or not graded:
            continue
        t = _every(run["times"], plan.t_handoff)
        tight, default, tok = _on(run, t), _on(cells[n], t), _on(graded[-1], t)
        for k, tk in enumerate(t):
            rows.append([n, f"{tol:g}", float(tk)] + [float(np.abs(a[:, k] - b[:, k]).max())
                                                     for a, b in ((tight, default),
                                                                  (default, tok), (tight, tok))])
    return rows


def limiter_table(plan, limited, runs, third, cells) -> list:
    """Every FINER_EVERY time units: n's state run on by the cells at m with another limiter,
    against the cells at m with the default one and the finest cells from that state that
    reached the time (:func:`cell_ladder`): W2 to Pi#rho_0 of each, the change the limiter
    alone makes, and the step from the cells at m to the finest, which it may account for."""
    rows = []
    for (n, limiter, m), run in limited.items():
        ladder = dict(cell_ladder(n, cells.get(n), runs.get(n), third))
        if run is None or m not in ladder:
            continue
        for tk in _every(run["times"], plan.t_handoff):
            if _reach(ladder[m]) < tk - 1e-9:
                break
            top = max(k for k, r in ladder.items() if _reach(r) >= tk - 1e-9)
            other, default, best = (float(_on(d, [tk])[0][0])
                                    for d in (run, ladder[m], ladder[top]))
            rows.append([n, limiter, m, float(tk), default, other, other - default, top, best,
                         best - default])
    return rows


#: The token rules the cluster's core is read from: graded to this d_min or finer.
CORE_D_MIN = 1e-6
#: A Gaussian core's speed deficit grows with its deviation up to beyond this (rad) at the
#: angles the cluster passes; a deficit is read as a deviation below it.
CORE_SIGMA_MAX = 0.03


def _probe(run, key: str, t: float) -> float:
    """Probe column ``key`` of a run at output time t (NaN where the run ends before t)."""
    if run is None or t > _reach(run) + 1e-9:
        return math.nan
    return float(np.asarray(run[key])[np.searchsorted(run["times"], t - 1e-9)])


def circle_point(probe, angle: float) -> np.ndarray:
    """The point of the circle z = 0 ``angle`` from e toward where the cluster leaves
    (P_e V e)."""
    side = probe.V @ E - (E @ probe.V @ E) * E
    return math.cos(angle) * E + math.sin(angle) * side / np.linalg.norm(side)


def core_width(probe, angle: float, deficit: float) -> float:
    """The deviation (rad) of the isotropic Gaussian core at :func:`circle_point`, whose
    speed deficit 1 - core_ratio (:meth:`departure.Probe.core_ratio`) is ``deficit``: the
    core's width that a measured deficit stands for. NaN where no deviation up to
    CORE_SIGMA_MAX has it, or where the deficit does not grow with the deviation over that
    range (past about 0.5 rad from e), so that it stands for more than one width."""
    if math.isnan(angle) or math.isnan(deficit) or deficit < 0:
        return math.nan
    c = circle_point(probe, angle)

    def gap(sigma):
        return 1.0 - probe.core_ratio(c, sigma * sigma) - deficit

    grid = [gap(x) for x in np.linspace(0.0, CORE_SIGMA_MAX, 61)]
    if np.any(np.diff(grid) <= 0) or grid[-1] < 0:
        return math.nan
    return 0.0 if deficit == 0 else float(brentq(gap, 0.0, CORE_SIGMA_MAX, xtol=1e-10))


def _spread(values) -> str:
    """min-max of the finite values (their count in brackets), or '-' where none is."""
    v = [x for x in values if not math.isnan(x)]
    return f"{min(v):.4f}-{max(v):.4f} ({len(v)})" if v else "-"


def core_table(plan, runs, third, cells, chains, limited=None) -> tuple[list, list]:
    """The cluster's core, where the cells and the tokens part late: every FINER_EVERY time
    units from the handoff, the core's speed deficit 1 - core_ratio (a Gaussian core of the
    measured variance, tilted by the attention; 0 for a point; departure.py's probe) and the
    width it stands for (:func:`core_width`), in the cells from n's state at each resolution
    of :func:`cell_ladder` (where three or more ran), then with another limiter (``limited``:
    {(n, limiter, m): run}), and, as min-max, in the finest rule of each whole-sphere token
    chain from that state graded to CORE_D_MIN or finer. Returns (the cells' columns as
    (cells, limiter: None for the default), rows)."""
    ladders = {n: cell_ladder(n, cells.get(n), runs[n], third) for n in runs
               if runs[n] is not None and cells.get(n) is not None}
    ladders = {n: ladder for n, ladder in ladders.items() if len(ladder) >= 3}
    columns = {(m, None): {} for m in sorted({m for lad in ladders.values() for m, _ in lad})}
    for n, ladder in ladders.items():
        for m, run in ladder:
            columns[(m, None)][n] = run
    for (n, lim, m), run in (limited or {}).items():
        if n in ladders and run is not None:
            columns.setdefault((m, lim), {})[n] = run
    probe, rows = Probe(model_for("R1", BETA)), []
    for n, ladder in ladders.items():
        finest = {}
        for s, d in chains.get(n, []):
            if s.caps and d is not None and 0 < s.d_min <= CORE_D_MIN * (1 + 1e-9):
                finest[(s.levels, s.cap_rule)] = d   # the chain's steps run coarse to fine
        t = _every(dict(ladder)[2 * n]["times"], plan.t_handoff)
        for tk in t[t >= plan.t_handoff - 1e-9]:
            got = [(1.0 - _probe(by.get(n), "core_ratio", tk), _probe(by.get(n), "angle", tk))
                   for by in columns.values()]
            tok = [(1.0 - _probe(d, "core_ratio", tk), _probe(d, "angle", tk))
                   for d in finest.values()]
            widths = [core_width(probe, a, x) for x, a in got]
            mine = [core_width(probe, a, x) for x, a in tok]
            rows.append([n, float(tk)] + [x for x, _ in got] + [_spread(x for x, _ in tok)]
                        + widths + [_spread(mine)]
                        + list(_core_excess(list(columns), widths, mine)))
    return list(columns), rows


def _core_excess(columns, widths, tokens) -> tuple[float, float]:
    """(order, cells): the order in the cell width at which the default cells' excess
    variance over the tokens' core (sigma^2 - sigma_tokens^2, the tokens' median) falls
    between the two finest with a width, and the cells per cube edge at which it would reach
    sigma_tokens^2 (the core within sqrt 2 of its width) at that order; NaN where there is
    no such pair or the excess does not fall."""
    tok = [x for x in tokens if not math.isnan(x)]
    have = [(m, w) for (m, lim), w in zip(columns, widths, strict=True)
            if lim is None and not math.isnan(w)]
    if not tok or len(have) < 2:
        return math.nan, math.nan
    core = float(np.median(tok)) ** 2
    (m0, w0), (m1, w1) = have[-2:]
    ex0, ex1 = w0 * w0 - core, w1 * w1 - core
    if not (ex0 > ex1 > 0):
        return math.nan, math.nan
    order = math.log(ex0 / ex1) / math.log(m1 / m0)
    return order, m1 * (ex1 / core) ** (1.0 / order)


def _spans(times, t_handoff: float):
    """Masks of ``times`` in spans of FINER_EVERY from the handoff (the first closed at the
    handoff), with each span's end."""
    for end in _every(times, t_handoff)[1:]:
        lo = end - FINER_EVERY
        after = times >= lo - 1e-9 if lo <= t_handoff + 1e-9 else times > lo + 1e-9
        yield end, after & (times <= end + 1e-9)


def cell_ladder(n: int, own, fine, third: dict) -> list:
    """The cells from n's state at the handoff, coarsest first, as (cells, run): n itself
    (``own``), 2n (``fine``) and every third resolution m of ``third`` ({(n, m): run}) that
    ran; finished or as far as its checkpoint reached."""
    ladder = [(n, own), (2 * n, fine)] + [(m, run) for (k, m), run in third.items()
                                          if k == n and run is not None]
    return sorted((m, run) for m, run in ladder if run is not None)


def _reach(run) -> float:
    return float(run["times"][-1])


def _span_fits(plan, ladder) -> tuple:
    """The cells from one state at three resolutions or more (:func:`cell_ladder`): the times
    from the handoff to the last span's end that the third finest reached, and per span of
    FINER_EVERY its end, its mask, the three finest resolutions that reached its end, their
    W2 curves over the span (as :func:`_on`) and, per W2 curve, the span's (order,
    extrapolant, correction) (:func:`spherepde.analysis.convergence.richardson`)."""
    t_stop = sorted(_reach(run) for _, run in ladder)[-3]
    t = np.asarray(next(run for _, run in reversed(ladder) if _reach(run) >= t_stop)["times"])
    t = t[(t >= plan.t_handoff - 1e-9) & (t <= t_stop + 1e-9)]
    t = t[t <= _every(t, plan.t_handoff)[-1] + 1e-9]   # whole spans only
    fits = []
    for end, span in _spans(t, plan.t_handoff):
        three = [(m, run) for m, run in ladder if _reach(run) >= end - 1e-9][-3:]
        (m0, _), (m1, _), (m2, _) = three
        w = [_on(run, t[span]) for _, run in three]
        ratio = (m1 / m0, m2 / m1)
        fits.append((end, span, [m for m, _ in three], w,
                     [richardson(*[x[c] for x in w], ratio=ratio) for c in range(2)]))
    return t, fits


def observed_limit(plan, ladder) -> tuple[dict, dict]:
    """The cells from one state (:func:`cell_ladder`) extrapolated span by span
    (FINER_EVERY) from the three finest that reached it, at the span's observed order
    (:func:`_span_fits`, per W2 curve), and a stand-in run whose distance from it is the error
    bar: the correction where an order was observed, else the spread of the three (no
    asymptotic range, no extrapolation: the finest's own values with that bar)."""
    t, fits = _span_fits(plan, ladder)
    limit, bar = np.zeros((2, len(t))), np.zeros((2, len(t)))
    for _, span, _, w, per_curve in fits:
        for c, (p, r, corr) in enumerate(per_curve):
            if math.isnan(p):
                limit[c, span], bar[c, span] = w[2][c], np.ptp([x[c] for x in w], axis=0)
            else:
                limit[c, span], bar[c, span] = r, corr
    out = {"times": t, "w2": limit[0], "w2_term": limit[1]}
    return out, {"times": t, "w2": limit[0] - bar[0], "w2_term": limit[1] - bar[1]}


def cells_order_table(plan, runs, third, cells) -> list:
    """Per FINER_EVERY time units from the handoff: n's state run on by the cells at n, 2n and
    each third resolution, and from the three finest that reached the span's end (listed), W2
    to Pi#rho_0 of each there, the observed order in the cell width over the span
    (:func:`_span_fits`, NaN where the steps do not shrink or oscillate), the correction to
    the finest's curve its extrapolant makes, and the first-order bar |finest - coarsest| /
    (r - 1), r their ratio (an order of 1 or more keeps the finest's error under it)."""
    rows = []
    for n, own in cells.items():
        if own is None or runs.get(n) is None:
            continue
        ladder = cell_ladder(n, own, runs[n], third)
        if len(ladder) < 3:
            continue
        for end, _, ms, w, ((p, _, corr), _) in _span_fits(plan, ladder)[1]:
            first = np.abs(w[2][0] - w[0][0]) / (ms[2] / ms[0] - 1)
            rows.append([n, "/".join(map(str, ms)), float(end)]
                        + [float(x[0][-1]) for x in w]
                        + [p, float(np.max(corr)), float(np.max(first))])
    return rows


def finest_levels(chains) -> dict:
    """{(n, q, with the cells off the band, q' per cap, its parts): (the finest computed 3D
    rule, the one before it, the circle's rule of the same d_min, the finest rule's step)}
    for the 3D chains with two rules computed."""
    out = {}
    for n, chain in chains.items():
        done, groups = {s: d for s, d in chain if d is not None}, {}
        for s in done:
            if s.levels:
                groups.setdefault((s.levels, s.sphere, *s.cap_rule), []).append(s)
        for variant, steps in groups.items():
            flat = done.get(Step(n, steps[-1].d_min))
            if len(steps) >= 2 and flat is not None:
                out[(n, *variant)] = (done[steps[-1]], done[steps[-2]], flat, steps[-1])
    return out


def rule_step(rule) -> Step:
    """A step with the caps' z-rule ``rule`` (:attr:`Step.cap_rule`), no band levels."""
    caps, parts, cuts, *win = rule
    return Step(0, 0.0, caps=caps, cap_parts=parts, pole_cuts=cuts,
                **dict(zip(("window", "fine", "all_round")[:len(win)], win, strict=True)))


def _across(q: int, whole: bool, caps: int, *rule) -> str:
    """A 3D chain's short name: q across the band, with the cells off it or the caps' rule
    (:attr:`Step.cap_rule`)."""
    return (f"{q} across" + (" + off band" if whole else "")
            + (f" + {per_cap(caps, *rule)}" if caps else ""))


def levels_finer_table(plan, runs, chains, cells) -> list:
    """Every FINER_EVERY time units: the finest 3D rule of each q against the circle's rule of
    its d_min, the cells at n and at 2n from the same state, and its own previous rule (the
    larger gap over the two W2 curves)."""
    rows = []
    for (n, *variant), (tok, prev, flat, step) in finest_levels(chains).items():
        t = _every(tok["times"], plan.t_handoff)
        t = t[t >= plan.t_handoff - 1e-9]
        others = [None if b is None else _on(b, t[t <= b["times"][-1] + 1e-9])
                  for b in (flat, cells.get(n), runs.get(n), prev)]
        mine = _on(tok, t)
        for k, tk in enumerate(t):
            rows.append([n, f"{_across(*variant)}, {step.d_min:.0e}",
                         float(tk)] + [
                float(np.abs(mine[:, k] - b[:, k]).max()) if b is not None and k < b.shape[1]
                else "-" for b in others])
    return rows


def caps_table(plan, runs, chains, cells) -> tuple[list, list]:
    """The caps' z-resolution, as (the caps' rules in words, rows): every FINER_EVERY time
    units, the whole-sphere chains of each band q against the cells at 2n from the same
    state, at each d_min that is some chain's finest and that two chains or more computed
    (the chains that did, side by side): the larger gap over the two W2 curves and, in
    brackets, the signed gap in W2 to Pi#rho_0 (tokens minus cells: positive, the tokens
    ahead); before them the cells' own error (2n against n run on)."""
    found = {}
    for n, chain in chains.items():
        for s, d in chain:
            if s.caps and s.d_min and d is not None:
                rule = s.cap_rule
                found.setdefault((n, s.levels), {}).setdefault(rule, {})[s.d_min] = d
    caps = sorted({c for by in found.values() for c in by},
                  key=lambda c: (rule_step(c).n_levels, c[1], c[2], str(c[3:])))
    rows = []
    for (n, q), by in sorted(found.items()):
        if runs.get(n) is None or cells.get(n) is None:
            continue
        t = _every(runs[n]["times"], plan.t_handoff)
        t = t[t >= plan.t_handoff - 1e-9]
        fine, own = _on(runs[n], t), _on(cells[n], t)
        for d_min in sorted({min(d) for d in by.values()}, reverse=True):
            mine = {c: _on(d[d_min], t) for c, d in by.items() if d_min in d}
            if len(mine) < 2:
                continue
            for k, tk in enumerate(t):
                gaps = [f"{np.abs(mine[c][:, k] - fine[:, k]).max():.4f} "
                        f"({mine[c][0, k] - fine[0, k]:+.4f})" if c in mine else "-"
                        for c in caps]
                rows.append([n, q, f"{d_min:.0e}", float(tk),
                             f"{np.abs(own[:, k] - fine[:, k]).max():.4f}"] + gaps)
    return [per_cap(*c) for c in caps], rows


#: The caps' top node is measured on the meridians this close to the band's dividing point
#: (at angle TOP_AT), and the gaps at these times, each from the rules graded to this d_min.
TOP_AT, TOP_NEAR, TOP_GAPS = 1.6, 0.1, ((20.0, 1e-4), (22.0, 1e-6), (24.0, 1e-6))


def top_node_table(plan, runs, chains, store: Path) -> tuple[list, list]:
    """Per caps' z-rule of the whole-sphere chains without windows: how near the north pole
    its highest node reaches (the median of pi/2 - z over the intervals of CAP_M0 uniform
    ones within TOP_NEAR of TOP_AT, from n's state at the handoff) and the signed gap in W2
    to Pi#rho_0 (tokens minus the cells at 2n) at the TOP_GAPS times; with, per time, the
    least-squares line of the gap against log(pi/2 - z) and its R^2: (rows, fits)."""
    found, fits = [], []
    for n, chain in chains.items():
        rules = {(s.levels, s.cap_rule, s.d_min): d for s, d in chain
                 if s.caps and not s.window and d is not None}
        if runs.get(n) is None or not rules:
            continue
        state = cells_state(n, plan.t_handoff, plan.t_end, store)[3]
        edges = graded_edges(CAP_M0, [], 0.0)
        for q, rule in {k[:2] for k in rules}:   # ordered below, by the top node
            highest = rule_step(rule).cap_bounds[-1]
            theta, z, _ = cap_tokens(state, 0, edges, band_rows(n), rule[0], True, **highest)
            top = float(np.median(math.pi / 2 - z[np.abs(theta - TOP_AT) < TOP_NEAR, -1]))
            gaps = [_gap(rules.get((q, rule, d)), runs[n], t) for t, d in TOP_GAPS]
            found.append([n, q, per_cap(*rule), top] + gaps)
    for k, (t, d_min) in enumerate(TOP_GAPS):
        x, y = np.array([[math.log(r[3]), r[4 + k]] for r in found
                         if np.isfinite(r[4 + k])] or np.zeros((0, 2))).T
        if len(x) >= 3:
            (slope, _), r2 = linear_fit(x, y)
            fits.append([t, f"{d_min:.0e}", len(x), f"{slope:+.5f}", f"{r2:.3f}"])
    found.sort(key=lambda r: -r[3])
    rows = [r[:3] + [f"{r[3]:.3f}"] + [f"{g:+.4f}" if np.isfinite(g) else "-" for g in r[4:]]
            for r in found]
    return rows, fits


def _gap(tokens, cells, t: float) -> float:
    """Signed gap in W2 to Pi#rho_0 at t, tokens minus cells (NaN where either is missing or
    ends before t)."""
    if tokens is None or t > min(tokens["times"][-1], cells["times"][-1]) + 1e-9:
        return math.nan
    return float(_on(tokens, [t])[0, 0] - _on(cells, [t])[0, 0])


def joined(before: dict, after: dict, t_handoff: float) -> dict:
    """A run's W2 curves and probe columns before the handoff followed by another's from it
    (the finer cells after the cells they started from), as the token rules are."""
    keep = before["times"] < t_handoff - 1e-9
    return {k: np.concatenate([np.asarray(before[k])[keep], np.asarray(after[k])])
            for k in ("times", "w2", "w2_term", "ratio", "share", "tail_mass", "core_ratio")}


# ------------------------------------------------------------------------------- analysis
def agree_until(a: dict, b: dict) -> float:
    """The last output time up to which two runs' W2 curves, to Pi#rho_0 and to the
    terminal measure, differ by less than the study's threshold (CONVERGED_FRACTION of a's
    minimum W2 to Pi#rho_0)."""
    m = min(len(a["times"]), len(b["times"]))
    gap = np.maximum(np.abs(a["w2"][:m] - b["w2"][:m]), np.abs(a["w2_term"][:m]
                                                                - b["w2_term"][:m]))
    off = np.flatnonzero(gap >= CONVERGED_FRACTION * float(np.min(a["w2"])))
    return float(a["times"][off[0] - 1] if off.size else a["times"][m - 1])


def cells_run_on(n: int, store: Path, t_end: float):
    """The finite volumes at n run from rho_0 to t_end (saved by departure.py), or None."""
    return load(store, Run(BETA, n, t_end, solver="finite_volume"), compute_missing=False)


def late_cells(n: int, t_end: float):
    """The late-phase study's finite-volume piece of R1 at beta = 256 and n cells, finished
    or as far as its checkpoint reached, cut at t_end (None when absent)."""
    import late_phase as lp
    store = OUT / "late_phase_runs"
    times = lp.FULL.times("R1", BETA)
    d = lp.saved_piece(store, "R1", BETA, n, times)
    if d is None:
        return None
    keep = np.asarray(d["times"]) <= t_end + 1e-9
    return {k: np.asarray(d[k])[keep] for k in ("times", "w2", "w2_term")}


def _on(d: dict, times) -> np.ndarray:
    """Both W2 curves of run d at ``times`` (a subset of its outputs), as (2, len(times))."""
    idx = np.searchsorted(d["times"], np.asarray(times) - 1e-9)
    return np.array([d["w2"][idx], d["w2_term"][idx]])


def confirmation_row(label, tokens, previous, fine, coarse, t_handoff, probes) -> list:
    """The finest rule against the finest cells: the gap (larger of the two W2 curves) at the
    ``probes`` times, each method's error there (tokens: against each rule in ``previous``,
    one per refinement, summed; cells: against the coarser cells), and the last time after
    the handoff up to which the gap stays within the summed errors or the threshold
    (CONVERGED_FRACTION of min W2), whichever is larger: the tokens confirm the cells up to
    there."""
    t = fine["times"][(fine["times"] >= t_handoff) & (fine["times"] <= tokens["times"][-1])]
    t = t[np.isin(np.round(t, 9), np.round(coarse["times"], 9))]
    gap = np.abs(_on(tokens, t) - _on(fine, t)).max(axis=0)
    err = sum(np.abs(_on(a, t) - _on(b, t)).max(axis=0)
              for a, b in [(tokens, p) for p in previous] + [(fine, coarse)])
    bad = np.flatnonzero(gap > np.maximum(err, CONVERGED_FRACTION * float(np.min(tokens["w2"]))))
    until = (float(t[-1]) if not bad.size else float(t[bad[0] - 1]) if bad[0] > 0
             else "not at the handoff")
    at = [int(np.argmin(np.abs(t - p))) if p <= t[-1] + 1e-9 else None for p in probes]
    return [label, until] + ["-" if k is None else f"{gap[k]:.4f} ({err[k]:.4f})" for k in at]


def confirmations(plan, runs, chains, cells, fine, coarse):
    """The confirmation table's rows (:func:`confirmation_row`: per chain against the late-phase
    cells, then against the finer cells from its state and against those cells' first-order
    extrapolation), the finer cells joined to the cells they started from, and the
    extrapolations, per n (``runs``: the finer cells as far as they reached, per n; fine,
    coarse: the late-phase pieces)."""
    rows, finer, limits = [], {}, {}
    for n, chain in chains.items():
        graded = [d for s, d in chain if d is not None and not s.repeat]
        if len(graded) >= 2 and fine is not None and coarse is not None:
            rows.append(confirmation_row(
                f"n = {n}: cells n = {LATE_CELLS[1]} from rho_0 (vs {LATE_CELLS[0]})",
                graded[-1], [graded[-2]], fine, coarse, plan.t_handoff, PROBES))
    for n, run in runs.items():
        graded = [d for s, d in chains.get(n, []) if d is not None and not s.repeat]
        if run is None or cells.get(n) is None:
            continue
        finer[n], limits[n] = joined(cells[n], run, plan.t_handoff), extrapolated(run, cells[n])
        reached = f", reached t = {float(run['times'][-1]):g}" if "partial" in run else ""
        if len(graded) >= 2:
            rows.append(confirmation_row(f"n = {n}: cells {2 * n} from its state (vs {n})"
                                         + reached, graded[-1], [graded[-2]], run, cells[n],
                                         plan.t_handoff, PROBES))
            rows.append(confirmation_row(f"n = {n}: cells {n}, {2 * n} from its state, "
                                         "extrapolated at first order (bar: the correction)"
                                         + reached, graded[-1], [graded[-2]], limits[n], run,
                                         plan.t_handoff, PROBES))
    return rows, finer, limits


def coarser_z_rules(step: Step, done: dict, above: bool = False) -> list[Step]:
    """The computed rules (``done``: {step: data}) one refinement coarser in the caps' z-rule
    at the same d_min: :attr:`Step.z_coarser`, and with windows the same rule with the most
    nodes fewer per cap off them (the fine rule's error and the error off the windows add).
    With ``above``, a coarser rule whose chain stopped short of step's d_min counts at its
    finest d_min: its step then holds its own d_min error too, a wider bar, not a narrower."""
    def computed(rule: Step) -> Step | None:
        if rule in done:
            return rule
        if not above or not rule.d_min:
            return None
        same = [s for s in done if s.d_min > rule.d_min and replace(s, d_min=rule.d_min) == rule]
        return min(same, key=lambda s: s.d_min) if same else None

    out = [computed(step.z_coarser)] if step.z_coarser else []
    if step.window:
        fewer = [s.caps for s in done if s.caps < step.caps
                 and replace(s, caps=step.caps, d_min=step.d_min) == step
                 and computed(replace(step, caps=s.caps)) is not None]
        out += [computed(replace(step, caps=max(fewer)))] if fewer else []
    return [s for s in out if s is not None]


def _z_error_words(step: Step, coarser: list) -> str:
    """What a confirmation's tokens' error holds of the caps' z-error, in words."""
    named = [s.per_cap + (f" at {s.d_min:.0e}" if s.d_min != step.d_min else "")
             for s in coarser]
    words = f"; tokens' error also vs {' and '.join(named)}" if coarser else ""
    if step.window:
        had = {"in the windows": any(replace(s, d_min=step.d_min) == step.z_coarser
                                     for s in coarser),
               "off them": any(s.caps < step.caps for s in coarser)}
        missing = [where for where, yes in had.items() if not yes]
        return words + (f"; the caps' z-error {' and '.join(missing)} not measured"
                        if missing else "")
    if step.caps and not coarser:
        return "; the caps' z-error not measured (no coarser z-rule at this d_min or above)"
    return words


def _reached(m: int, run) -> str:
    """m, and where its run stopped short (a checkpoint), how far it reached."""
    return f"{m} (reached t = {_reach(run):g})" if "partial" in run else str(m)


def cell_references(plan, runs, cells, third) -> dict:
    """Per n, the cells from n's state that the tokens from it are held against: (words,
    the cells, a run whose distance from them is their error bar): the cells at 2n (against
    n), and where a third resolution ran or more, the finest three extrapolated span by span
    at their observed order (:func:`observed_limit`)."""
    out = {}
    for n, run in runs.items():
        if run is None or cells.get(n) is None:
            continue
        out[n] = [(f"cells {2 * n} from its state (vs {n})", run, cells[n])]
        ladder = cell_ladder(n, cells[n], run, third)
        if len(ladder) >= 3:
            out[n].append((f"cells {', '.join(_reached(m, r) for m, r in ladder)} from its "
                           "state at their observed order (bar: the correction, or their "
                           "spread where none)", *observed_limit(plan, ladder)))
    return out


def levels_confirmations(plan, runs, chains, cells, third) -> list:
    """:func:`confirmation_row` of each chain's finest 3D rule against the cells from the
    same state (:func:`cell_references`); the tokens' error of a whole-sphere rule sums its
    refinements, in d_min and in the caps' z-rule (:func:`coarser_z_rules`, at the same d_min
    or, where the coarser rule's chain stopped short of it, at that chain's finest)."""
    rows, against = [], cell_references(plan, runs, cells, third)
    for (n, *variant), (tok, prev, _, step) in finest_levels(chains).items():
        done = {s: d for s, d in chains[n] if d is not None}
        coarser = coarser_z_rules(step, done, above=True)
        refs, also = [prev] + [done[s] for s in coarser], _z_error_words(step, coarser)
        for words, ref, bar in against.get(n, []):
            rows.append(confirmation_row(
                f"n = {n}, 3D ({_across(*variant)}, {step.d_min:.0e}): {words}{also}", tok,
                refs, ref, bar, plan.t_handoff, PROBES))
    return rows


def extrapolated(fine: dict, coarse: dict) -> dict:
    """The first-order Richardson extrapolation 2 fine - coarse of both W2 curves on the fine
    run's outputs: the cells' error near a concentrated cluster halves with the cell (their
    limiter makes them first order there, docs/methods.md), so this removes its leading term,
    and |extrapolation - fine| = |fine - coarse| is its error bar."""
    on = 2 * _on(fine, fine["times"]) - _on(coarse, fine["times"])
    return {"times": np.asarray(fine["times"]), "w2": on[0], "w2_term": on[1]}


def band_table(chains) -> list:
    rows = []
    for n, chain in chains.items():
        d = chain[0][1]
        if d is None:
            continue
        rm = d["row_mass"]
        rows.append([n, len(rm), float(d["band_mass"]), float(d["marginal_mass"])]
                    + [float(rm[r - 1]) if r <= len(rm) else math.nan for r in (1, 2, 4)])
    return rows


def chain_table(plan: Plan, chains, cells) -> list:
    """Per rule: tokens, the dividing point it was graded about and the one it located, the
    release and arrival, W2 to the terminal measure at the end, and how long it agrees with
    the rule it follows (the tight repeat: with the rule of its d_min) and with the cells."""
    rows = []
    for n, chain in chains.items():
        done = dict(chain)
        parents = {s: p for s, p, _ in plan.chain(n)}
        for step, d in chain:
            if d is None:
                rows.append([n, step.label] + ["not computed"] * 8)
                continue
            ts = time_scales(d)
            ref = done.get(parents[step])
            rows.append([n, step.label, int(d["n"]), _first_points(d["dividers_in"]),
                         _first_points(d["dividers"]),
                         ts["t_rel"], ts["t_arr"], float(d["w2_term"][-1]),
                         "-" if ref is None else agree_until(ref, d),
                         "-" if cells.get(n) is None else agree_until(cells[n], d)])
    return rows


def _first_points(points) -> str:
    """The first dividing point (near pi / 2), of each level for a 3D rule's (level, angle)
    rows, or '-'."""
    p = np.asarray(points)
    if not len(p):
        return "-"
    if p.ndim == 1:
        return f"{p[0]:.9f}"
    return " / ".join(f"{p[p[:, 0] == lev][0, 1]:.9f}" for lev in np.unique(p[:, 0]))


def _pair_row(n, d_min, label, a, b, t_handoff) -> list:
    """Rule b against rule a: b's release and arrival, the largest differences of the two W2
    curves after the handoff, and how long they agree."""
    after = a["times"] >= t_handoff - 1e-9
    ts = time_scales(b)
    return [n, f"{d_min:.0e}" if d_min else "uniform", label, ts["t_rel"], ts["t_arr"],
            float(np.abs(a["w2"] - b["w2"])[after].max()),
            float(np.abs(a["w2_term"] - b["w2_term"])[after].max()), agree_until(a, b)]


def bulk_table(plan: Plan, chains, t_handoff: float) -> list:
    """Per bulk rule: against the rule of the same d_min with the next fewer uniform intervals
    (the main chain's, then the previous bulk's) (:func:`_pair_row`)."""
    rows = []
    for n, m0s in plan.bulk:
        done = dict(chains.get(n, []))
        for before, m0 in zip((plan.m0, *m0s[:-1]), m0s, strict=True):
            for d_min in plan.bulk_d_mins:
                a = done.get(Step(n, d_min, m0=before if before != plan.m0 else 0))
                b = done.get(Step(n, d_min, m0=m0))
                if a is not None and b is not None:
                    rows.append(_pair_row(n, d_min, f"{m0} vs {before}", a, b, t_handoff))
    return rows


def levels_table(chains, t_handoff: float) -> list:
    """Per 3D rule (:func:`_pair_row`): against the rule on the circle of the same d_min and
    against the 3D rule with the most nodes fewer across the band; with the cells off the
    band, against the same rule without them; with the caps graded, against the band only,
    the cells off it as tokens, and the caps' coarser z-rules (:func:`coarser_z_rules`)."""
    rows = []
    for n, chain in chains.items():
        done = {s: d for s, d in chain if d is not None}
        for step in (s for s in done if s.levels):
            if step.caps:
                refs = [(Step(n, step.d_min, levels=step.levels), "band only"),
                        (Step(n, step.d_min, levels=step.levels, sphere=True),
                         "off band a token per cell")] + [
                    (s, s.per_cap) for s in coarser_z_rules(step, done)]
            elif step.sphere:
                refs = [(Step(n, step.d_min, levels=step.levels), "band only")]
            else:
                fewer = [s.levels for s in done if s.levels and not s.sphere
                         and s.d_min == step.d_min and s.levels < step.levels]
                refs = [(Step(n, step.d_min), "circle")] + (
                    [(Step(n, step.d_min, levels=max(fewer)), f"{max(fewer)} across")]
                    if fewer else [])
            for ref, what in refs:
                if ref in done:
                    name = _across(step.levels, step.sphere, *step.cap_rule)
                    label = f"3D, {name}, vs {what}"
                    rows.append(_pair_row(n, step.d_min, label, done[ref], done[step],
                                          t_handoff))
    return rows


def cells_table(cells, finer=()) -> list:
    """Release, arrival and the end value of W2 to the terminal measure of the cells run on
    from rho_0, and of each (label, run) in ``finer`` (a run without the probe's speed ratio,
    an extrapolation, has an arrival only)."""
    runs = [(f"n = {n} from rho_0", d) for n, d in cells.items() if d is not None] + list(finer)
    rows = []
    for label, d in runs:
        if "ratio" in d:
            ts = time_scales(d)
            t_rel, t_arr = ts["t_rel"], ts["t_arr"]
        else:
            t_rel, t_arr = "n/a", arrival(d["times"], d["w2_term"])
        rows.append([label, t_rel, t_arr, float(d["times"][-1]), float(d["w2_term"][-1])])
    return rows


def figure(chains, cells, t_handoff: float, fine=None, finer=None, limits=None, levels=None):
    fig, axes = plt.subplots(len(chains), 2, figsize=(12, 3.8 * len(chains)), squeeze=False)
    for row, (n, chain) in zip(axes, chains.items(), strict=True):
        graded = [(s, d) for s, d in chain if d is not None and not s.repeat]
        colours = plt.cm.viridis(np.linspace(0, 0.9, len(graded)))
        for (step, d), col in zip(graded, colours, strict=True):
            after = d["times"] >= t_handoff
            for ax, key in zip(row, ("w2", "w2_term"), strict=True):
                ax.plot(d["times"][after], d[key][after], color=col, lw=1, label=step.label)
        mine = sorted(((v, d) for (k, *v), (d, *_) in (levels or {}).items() if k == n),
                      key=lambda vd: vd[0])
        for i, (variant, d) in enumerate(mine):
            after = d["times"] >= t_handoff
            for ax, key in zip(row, ("w2", "w2_term"), strict=True):
                ax.plot(d["times"][after], d[key][after], color=f"C{i % 10}", ls="--", lw=1.2,
                        label=f"3D, {_across(*variant)} (finest rule)")
        if cells.get(n) is not None:
            after = cells[n]["times"] >= t_handoff
            for ax, key in zip(row, ("w2", "w2_term"), strict=True):
                ax.plot(cells[n]["times"][after], cells[n][key][after], "k--", lw=1.2,
                        label=f"cells n = {n} run on")
        if fine is not None:
            after = fine["times"] >= t_handoff
            for ax, key in zip(row, ("w2", "w2_term"), strict=True):
                ax.plot(fine["times"][after], fine[key][after], "r:", lw=1.4,
                        label=f"cells n = {LATE_CELLS[1]} (late-phase piece)")
        if (finer or {}).get(n) is not None:
            after = finer[n]["times"] >= t_handoff
            for ax, key in zip(row, ("w2", "w2_term"), strict=True):
                ax.plot(finer[n]["times"][after], finer[n][key][after], "m-.", lw=1.4,
                        label=f"cells n = {2 * n} from this state")
        if (limits or {}).get(n) is not None:
            for ax, key in zip(row, ("w2", "w2_term"), strict=True):
                ax.plot(limits[n]["times"], limits[n][key], color="orange", ls=":", lw=1.6,
                        label=f"cells n = {n}, {2 * n} from this state, extrapolated")
        for ax, what in zip(row, ("W2 to Pi#rho_0", "W2 to the terminal measure"),
                            strict=True):
            ax.set_title(f"from the cells' state at n = {n}: {what}", fontsize=9)
            ax.set_xlabel("t")
        # beside the panels: the 3D chains' entries would cover the late curves
        row[1].legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


INTRO = """Scenario R1 at beta = {beta:g} (docs/theory.md §3.4.1). The finite volumes at n cells
a face edge to t = {t0:g}; the mass in the cell rows within {rows:g} rad of the invariant
circle z = 0 collapsed onto it (its marginal, the z-integral of the cells' reconstruction);
tokens on the circle, run with the plane's 2 x 2 model to t = {t1:g} (the 3D chains: tokens
across the band as well, run with the model itself). The first rule has {m0}
uniform intervals; each next one is graded geometrically (ratio {ratio:g}, from {width:g} rad)
down to d_min on both sides of the dividing points that the previous rule located. 'agrees
until': the last time both W2 curves (to Pi#rho_0 and to the terminal measure
m+ delta_v + m- delta_-v) differ by less than {frac:.0%} of min W2. t_rel: the speed ratio
above 1/2 from then on; t_arr: W2 to the terminal measure below 0.1."""


def _levels_text(plan, runs, chains, cells, store: Path) -> list[str]:
    """The report's sections on the 3D chains: each rule against its references, the finest
    rules against the cells, and the caps' z-resolution, with its top node."""
    caps, rows = caps_table(plan, runs, chains, cells)
    top, fits = top_node_table(plan, runs, chains, store)
    return ["Off the circle: the 3D chains (q tokens across the band per interval, at the "
            "Gauss nodes of the band's mass in z, each level graded about its own dividing "
            "points), against the rule on the circle of the same d_min and against q - 1 "
            "across; with the cells off the band as a token each, against the band only; "
            "with q' tokens per interval in each cap off the band, graded as well, against "
            "the band only, the cells off it a token each, and q' - 1:", "",
            table(levels_table(chains, plan.t_handoff),
                  ["n", "d_min", "rules", "t_rel", "t_arr", "max |dW2| to Pi#rho_0",
                   "max |dW2| to terminal", "agree until"]), "",
            f"The finest 3D rules every {FINER_EVERY:g} time units (the larger gap over the "
            "two W2 curves):", "",
            table(levels_finer_table(plan, runs, chains, cells),
                  ["state n", "3D rule (q, d_min)", "t", "vs the circle's rule",
                   "vs cells n", "vs cells 2n", "vs its previous rule"]), "",
            "The caps' z-resolution: the whole-sphere chains (q across the band, q' per cap) "
            "side by side at each d_min where one of them stops, against the cells at 2n "
            f"from the same state every {FINER_EVERY:g} time units: the larger gap over the "
            "two W2 curves and, in brackets, the signed gap in W2 to Pi#rho_0 (tokens minus "
            "cells); the cells' own error (2n against n) first:", "",
            table(rows, ["state n", "q", "d_min", "t", "cells 2n vs n"]
                  + caps), "",
            "The caps' top node: how near the north pole each caps' z-rule's highest node "
            f"reaches (median of pi/2 - z over the intervals within {TOP_NEAR:g} rad of "
            f"theta = {TOP_AT:g}, the band's dividing point, from n's state at the handoff), "
            "against the signed gap in W2 to Pi#rho_0 (tokens minus the cells at 2n from the "
            "same state), each time from the rules graded to the d_min beside it in the fit "
            "below:", "",
            table(top, ["state n", "q", "caps' z-rule", "pi/2 - top node"]
                  + [f"gap at t = {t:g}" for t, _ in TOP_GAPS]), "",
            "The gap against log(pi/2 - top node), least squares over the rules above:", "",
            table(fits, ["t", "d_min", "rules", "slope", "R^2"]), ""]


def window_table(chains) -> list:
    """Per windowed rule's finest d_min, per level of its fine rule (north cap): the dividing
    points that level located and its south twin's (the same part, its nodes mirrored), the
    least distance of those in the windows from their bounds (below GRADED_WIDTH the curve
    nears the rule off them, which does not resolve it) and how many lie off the windows (a
    level whose tokens in one window all end on one side: the curve has left the windows)."""
    rows = []
    for n, chain in chains.items():
        finest = {}
        for s, d in chain:
            if s.window and d is not None:
                finest[s.cap_rule] = (s, d)
        for step, d in finest.values():
            points, names = np.asarray(d["dividers"]), part_names(step)
            half, q = step.cap_levels, step.fine[0]
            for lev in range(step.levels, step.levels + half):
                _, group, node = step.cap_level(lev)
                where = step.cap_layout[group][2]
                if where is False:
                    continue
                found = [np.sort(points[points[:, 0] == k, 1])
                         for k in (lev, lev + half + (q - 1 - 2 * node))]
                both = np.concatenate(found)
                inside = in_windows(both, step.window)
                near = np.abs(wrapped(both[inside, None] - np.ravel(step.window)))
                rows.append([n, step.per_cap, f"{step.d_min:.0e}", names[group], node]
                            + [" ".join(f"{a:.4f}" for a in p) for p in found]
                            + ["all round" if where is None else
                               f"{near.min():.3f}" if near.size else "-",
                               int((~inside).sum())])
    return rows


def _window_text(chains) -> list[str]:
    """The report's section on the dividing curve in the caps, seen by the windows' rules."""
    rows = window_table(chains)
    if not rows:
        return []
    return ["The dividing curve in the caps: the rules with windows about the band's dividing "
            "points locate it per part of the cap in z (distance from the pole, from the "
            "band's edge up) and per node; the points of the north cap's level and of the "
            "south's twin (its nodes mirrored), the least distance of those in the windows "
            "from a bound, and how many lie off them (there a level's tokens in each window "
            "all end on one side: the curve has left the windows, into the rule off them):",
            "", table(rows, ["state n", "caps' z-rule", "d_min", "part", "node", "north",
                             "south", "from a bound", "off the windows"]), ""]


def _attention_text(plan: Plan, chains, store: Path) -> list[str]:
    """The report's section on which levels carry the + cluster's attention on its tail."""
    text = []
    for step, data in level_attention(plan, chains, store, compute_missing=False).items():
        text += [f"Where the + cluster's tail attention comes from (n = {step.n}, "
                 f"{_across(step.levels, step.sphere, *step.cap_rule)}, {step.d_min:.0e}): "
                 "the query at its centre, its weight on the tokens farther than the tail's "
                 "width, in all and from the band's levels and each part of the caps (north "
                 "and south together), every time unit while it exceeds 1e-6:", "",
                 table(attention_table(step, data, plan.t_handoff),
                       ["t", "W2 to Pi#rho_0", "tail", "band"] + part_names(step)), ""]
    return text


def _core_text(plan, runs, third, cells, chains, limited) -> list[str]:
    cols, rows = core_table(plan, runs, third, cells, chains, limited)
    if not rows:
        return []
    widths = ", ".join(f"{math.pi / 2 / m:.4f} at {m}" for m in sorted({m for m, _ in cols}))
    cols = [f"cells {m}" + (f", {lim}" if lim else "") for m, lim in cols]
    return ["The cluster's core: n's state at the handoff run on by the cells at each "
            "resolution (and with another limiter) and by the finest rule of each "
            f"whole-sphere token chain graded to d_min = {CORE_D_MIN:.0e} or finer (min-max "
            f"over the chains, their count in brackets), every {FINER_EVERY:g} time units: "
            "the core's speed deficit 1 - core_ratio (a Gaussian core of the measured variance, "
            f"tilted by the attention, against a point; the core: within {CORE_RADIUS:g} rad "
            "of the cluster), and the deviation sigma (rad) of the Gaussian core on the "
            "circle with that deficit (–: none below "
            f"{CORE_SIGMA_MAX:g} rad), against a cell about pi / (2m) rad across at m cells "
            f"({widths}):", "",
            table(rows, ["state n", "t"] + [f"deficit, {c}" for c in cols]
                  + ["deficit, tokens"] + [f"sigma, {c}" for c in cols]
                  + ["sigma, tokens", "excess order", "cells for the core"]), "",
            "Excess order: the order in the cell width at which the cells' excess variance "
            "over the tokens' core (sigma^2 - sigma_tokens^2, the tokens' median) falls between "
            "the two finest default resolutions; cells for the core: the cells per cube edge "
            "at which, at that order, the excess would reach sigma_tokens^2 (the core within "
            "sqrt 2 of its width). A run's cost grows about as the cube of the cells per "
            "edge (cells times steps).", ""]


def report(plan: Plan, store: Path, name: str, folder=OUT):
    chains = {n: run_chain(plan, n, store, compute_missing=False) for n in plan.cells}
    cells = {n: cells_run_on(n, OUT / "departure_runs", plan.t_end) for n in plan.cells}
    missing = [s.name for ch in chains.values() for s, d in ch if d is None]
    fine, coarse = late_cells(LATE_CELLS[1], plan.t_end), late_cells(LATE_CELLS[0], plan.t_end)
    runs = {n: finer_reached(n, t_stop, plan, store) for n, t_stop in plan.finer_cells}
    stepping = {(n, tol): finer_reached(n, t_stop, plan, store, tol)
                for n, t_stop, tol in plan.stepping_cells}
    third = {(n, m): finer_reached(n, t_stop, plan, store, to=m)
              for n, t_stop, m in plan.third_cells}
    limited = {(n, lim, m): finer_reached(n, t_stop, plan, store, to=m, limiter=lim)
               for n, t_stop, lim, m in plan.limiter_cells}
    confirm, finer, limits = confirmations(plan, runs, chains, cells, fine, coarse)
    confirm += levels_confirmations(plan, runs, chains, cells, third)
    text = [INTRO.format(beta=BETA, t0=plan.t_handoff, rows=ROWS_ANGLE, t1=plan.t_end, m0=plan.m0,
                         ratio=GRADING, width=GRADED_WIDTH, frac=CONVERGED_FRACTION), ""]
    if missing:
        text += [f"**Partial:** not computed: {', '.join(missing)}.", ""]
    text += ["The band at t = 12 (mass of the cells in it; of its marginal, integrated by the "
             "token rule: the quadrature's check; of the rows nearest z = 0):", "",
             table(band_table(chains), ["n", "rows a side", "band mass", "marginal mass",
                                        "within 1 row", "within 2 rows", "within 4 rows"]),
             "", "The chain of rules (the dividing point near pi/2 it was graded about, and "
             "the one its tokens located):", "",
             table(chain_table(plan, chains, cells),
                   ["n", "rule", "tokens", "graded about", "located", "t_rel", "t_arr",
                    "W2 to terminal at end", "agrees with the previous rule until",
                    "agrees with the cells until"]), "",
             "The bulk's spacing: each bulk chain's rules against the rules of the same d_min "
             "with fewer uniform intervals (largest differences after the handoff):", "",
             table(bulk_table(plan, chains, plan.t_handoff),
                   ["n", "d_min", "uniform intervals", "t_rel", "t_arr", "max |dW2| to Pi#rho_0",
                    "max |dW2| to terminal", "agree until"]), "",
             *_levels_text(plan, runs, chains, cells, store),
             *_window_text(chains),
             *_attention_text(plan, chains, store),
             "The cells run on from rho_0 at the same n (departure.py):", "",
             table(cells_table(cells, [(f"n = {n}'s state at {plan.t_handoff:g} on 2n cells",
                                        d) for n, d in finer.items()]
                               + [(f"n = {n}'s state: n and 2n extrapolated at first order", d)
                                  for n, d in limits.items()]
                               + [(f"n = {n}'s state at {plan.t_handoff:g} on n cells, macro_tol "
                                   f"{tol:g}", d) for (n, tol), d in stepping.items()
                                  if d is not None]
                               + [(f"n = {n}'s state at {plan.t_handoff:g} on {m} cells", d)
                                  for (n, m), d in third.items() if d is not None]
                               + [(f"n = {n}'s state at {plan.t_handoff:g} on {m} cells, "
                                   f"limiter {lim}", d) for (n, lim, m), d in limited.items()
                                  if d is not None]),
                   ["cells", "t_rel", "t_arr", "reached t", "W2 to terminal at end"]), "",
             "The finest rule of each chain (tokens from n's state) against cells, two ways: "
             f"the late-phase study's n = {LATE_CELLS[1]} from rho_0 (its error: against "
             f"n = {LATE_CELLS[0]}), and the cells at 2n from the same state as the tokens (its "
             "error: against the cells at n, which carry that state); the tokens' error: against "
             "the previous rule. The gap is the larger over the two W2 curves, the errors' sum "
             "in brackets; 'confirmed until': the gap within the sum (or within "
             f"{CONVERGED_FRACTION:.0%} of min W2) from the handoff on:", "",
             table(confirm, ["tokens from n's state, against", "confirmed until"]
                   + [f"gap (errors) at t = {p:g}" for p in PROBES]), "",
             "The cells from one state at two resolutions, every "
             f"{FINER_EVERY:g} time units: n's state at the handoff run on by the cells at n and "
             "at 2n, against the finest token rule from it (the larger gap over the two W2 "
             "curves), and that rule's own error:", "",
             table(finer_cells_table(plan, runs, chains, cells),
                   ["state n", "t", "cells n vs tokens", "cells 2n vs tokens",
                    "cells 2n vs cells n", "tokens vs previous rule"]), "",
             "The cells' time stepping: n's state run on at n with a tighter multirate "
             "tolerance (macro_tol; the solver's default, 1e-3, is the same at every n) against "
             "the cells at n with the default, every "
             f"{FINER_EVERY:g} time units (the larger gap over the two W2 curves):", "",
             table(stepping_table(plan, stepping, chains, cells),
                   ["n", "macro_tol", "t", "tighter vs default", "default vs tokens",
                    "tighter vs tokens"]), "",
             "The cells' limiter: n's state run on by the cells at m with another limiter than "
             "the default (Barth-Jespersen), against the default at m and the finest cells "
             f"from the same state that reached the time, every {FINER_EVERY:g} time units (W2 "
             "to Pi#rho_0), the change the limiter alone makes and the step from m to the "
             "finest:", "",
             table(limiter_table(plan, limited, runs, third, cells),
                   ["state n", "limiter", "cells", "t", "W2 default", "W2 limiter",
                    "limiter's change", "finest cells", "W2 finest", "step to finest"]), "",
             *_core_text(plan, runs, third, cells, chains, limited),
             "The cells from one state at three resolutions or more: n's state at the "
             "handoff run on by the cells at n, 2n and each further resolution; per span of "
             f"{FINER_EVERY:g} time units, the three finest that reached its end, W2 to "
             "Pi#rho_0 of each there, and over the span the observed order in the cell width "
             "(–: the steps do not shrink, or oscillate), the largest correction its "
             "extrapolation makes to the finest, and the first-order bar "
             "|finest - coarsest| / (r - 1), r their ratio:", "",
             table(cells_order_table(plan, runs, third, cells),
                   ["n", "cells", "t", "W2 coarsest", "W2 middle", "W2 finest", "order",
                    "correction to finest", "first-order bar"])]
    fig = figure(chains, cells, plan.t_handoff, fine, finer, limits,
                 finest_levels(chains))
    publish(name, fig, "The late hold on the invariant circle (scenario R1)", "\n".join(text),
            folder, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="n = 16, two graded rules (a minute)")
    ap.add_argument("--report-only", action="store_true",
                    help="compute nothing: report from the runs saved so far")
    args = ap.parse_args(argv)
    plan, name = (QUICK, "invariant_circle_quick") if args.quick else (FULL, "invariant_circle")
    store = OUT / f"{name}_runs"
    if args.report_only and not store.is_dir():
        sys.exit(f"--report-only: no runs are saved under {store}; run without --report-only "
                 "first (it resumes from whatever is saved)")
    if not args.report_only:
        chains = {n: run_chain(plan, n, store) for n in plan.cells}
        level_attention(plan, chains, store)
        for n, t_stop in plan.finer_cells:
            finer_cells(n, t_stop, plan, store)
        for n, t_stop, tol in plan.stepping_cells:
            finer_cells(n, t_stop, plan, store, macro_tol=tol)
        for n, t_stop, m in plan.third_cells:
            finer_cells(n, t_stop, plan, store, to=m)
        for n, t_stop, limiter, m in plan.limiter_cells:
            finer_cells(n, t_stop, plan, store, to=m, limiter=limiter)
    report(plan, store, name)


if __name__ == "__main__":
    main()
