"""The frozen option objects of the interaction kernels: what a caller may tune, in one place.

- :class:`HarmonicOptions`: the accuracy of the harmonic kernel (its truncation ``tol`` and the
  accuracy ``velocity_tol`` asked of its outputs), handed to a kernel's ``bind``.
- :class:`AutoProfile`: the parameters of the deterministic cost model behind
  ``kernel="auto"`` (:func:`spherepde.interaction.resolve_kernel`). The defaults were measured
  on the project's 2-core machine (``benchmarks/particles.py --numpy-crossover`` and
  ``benchmarks/harmonic.py --crossover``); a user measures their own machine with the same
  scripts and loads the numbers with :meth:`AutoProfile.load`. The choice depends on the
  problem's sizes and this profile only, never on timings, so a rerun chooses the same kernel.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

__all__ = ["HarmonicOptions", "HarmonicTuning", "AutoProfile", "FarFieldOptions", "DEFAULT_TOL",
           "FALLBACK_FACTOR"]

#: Default truncation tolerance of the harmonic kernel: E(L) <= tol · mean of G.
DEFAULT_TOL = 1e-12
#: Queries whose error bound exceeds FALLBACK_FACTOR · tol are computed directly.
FALLBACK_FACTOR = 100.0


@dataclass(frozen=True)
class HarmonicTuning:
    """Work trade-offs of :class:`spherepde.interaction.harmonic.HarmonicField` (none moves
    its error bound).

    Attributes
    ----------
    direct_fallback_max : int
        Up to this many fallback queries are summed over all atoms, unsorted (~1-2 ns per
        atom and query); more go through the far-field expansion, whose two trees cost ~1 us
        per atom and query to build.
    nufft_eps_fraction : float
        The transforms' accuracy, as a fraction of the field's ``tol`` (at least ducc0's
        floor 2.1e-13): their error then adds at most ~4 nufft_eps_fraction · tol relative to
        the field, and a looser tol buys narrower NUFFT kernels.
    s1_exact_max : int
        On S^1 with N·(K+1) below this, the moments and fields are exact sums (no NUFFT).
    bytes_per_degree2 : float
        The memory model of the S^2 field: bytes of work memory per (L + 1)^2 of a
        non-equispaced transform (measured with ducc0 0.42: 100-150 bytes for a spin-1
        synthesis at L = 512..2048), with room for the field's own arrays. A degree whose
        estimate exceeds ``max_memory`` is refused with a MemoryError.
    max_chebyshev_terms : int
        The most Chebyshev terms in kappa of the multipliers for a general B: their count
        doubles from 8 until the last two terms are negligible, or until it reaches this.
    """

    direct_fallback_max: int = 128
    nufft_eps_fraction: float = 0.1
    s1_exact_max: int = 1 << 18
    bytes_per_degree2: float = 256.0
    max_chebyshev_terms: int = 256


@dataclass(frozen=True)
class HarmonicOptions:
    """Accuracy of the harmonic kernel.

    Attributes
    ----------
    tol : float
        Truncation tolerance of :class:`spherepde.interaction.harmonic.HarmonicField`.
    velocity_tol : float or None
        Accuracy of every output row relative to |V|_2 (None: ``FALLBACK_FACTOR * tol`` for
        the harmonic rows, ``tol`` for the far-field ones).
    tuning : HarmonicTuning
        The field's work trade-offs.
    """

    tol: float = DEFAULT_TOL
    velocity_tol: float | None = None
    tuning: HarmonicTuning = HarmonicTuning()


@dataclass(frozen=True)
class AutoProfile:
    """Parameters of ``kernel="auto"``'s cost model.

    Attributes
    ----------
    numba_min_pairs : int
        The fused numba kernel from m·n >= this many query-key pairs, numpy below (no thread
        start-up for tiny problems). Measured: the fused kernel is already 1.7-5x faster at
        N = 128 (m·n = 2^14) and 4-13x faster from N = 256 to 2048, at beta = 4, 64 and 1000.
    harmonic_pairs_per_unit, harmonic_fixed_units : float
        The harmonic kernel costs about (L + 1)^2 log2(L + 2) + (m + n) + harmonic_fixed_units
        work units, one unit being worth ``harmonic_pairs_per_unit`` pairs of the fused kernel
        (which runs every beta at the same speed per pair). The defaults put the crossover
        where it was measured: N ~ 1530, 1710, 2850, 5830 at beta = 16, 64, 256, 1000 (the
        model gives 1270, 1680, 2940, 5910).
    tiled_min_dim : int
        The BLAS-tiled kernel (:mod:`spherepde.interaction.tiled`) instead of the fused one
        from this dimension d on (and m·n >= ``numba_min_pairs``). Measured at N = 2000 and
        8000, one and two threads: fused/tiled time 1.0-2.4 at d = 16, 1.6-7.3 at d = 32..64,
        a tie at d = 8 with two threads, the fused kernel ahead at d = 3
        (docs/benchmarks/particles.md).
    """

    numba_min_pairs: int = 1 << 14
    harmonic_pairs_per_unit: float = 58.0
    harmonic_fixed_units: float = 2.0e4
    tiled_min_dim: int = 16

    @classmethod
    def from_dict(cls, values: dict) -> "AutoProfile":
        """A profile from a mapping of field names to values; unknown names are an error."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown AutoProfile fields {unknown}; the fields are "
                             f"{sorted(names)}")
        return cls(**values)

    @classmethod
    def load(cls, path) -> "AutoProfile":
        """Read a profile saved by :meth:`save` (a JSON object of the fields to change)."""
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(json.load(fh))

    def save(self, path) -> None:
        """Write the profile as JSON (for :meth:`load`)."""
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(dataclasses.asdict(self), fh, indent=1)


#: The profile ``kernel="auto"`` uses unless a caller passes its own.
DEFAULT_PROFILE = AutoProfile()


@dataclass(frozen=True)
class FarFieldOptions:
    """Tuning of the dual-tree far field (:class:`spherepde.interaction.farfield.FarField`).
    None of them moves the a-priori error bound (the shares of tol are the bound's own
    split); they trade work between the expansions and the exact sums.

    Attributes
    ----------
    leaf_size : int
        Atoms (or queries) per leaf.
    u_max : float
        Largest cross-term bound u_k for which a pair is expanded (u^a/a! then decreases in a).
    expansion_share, drop_share : float
        Shares of tol allowed to the expansions and to the dropped nodes (their sum with the
        rest stays below 0.45 tol; the module docstring of the far field derives it).
    cost_term : float
        One multiply-add of the expansion, in units of one exact term (an exponential).
    lower_bound_visits : int
        Nodes that the search for a lower bound of each query's log s may visit.
    shared_bound_radius : float
        A leaf of the query tree whose queries lie within this distance of its first one
        shares that query's bound, lowered by each query's distance.
    max_set : int
        Pairs whose index set S+ would be larger are split rather than expanded.
    lookahead : bool
        An expandable pair is split instead when its two child pairs, each at its cheapest,
        cost less (one level of lookahead); False keeps the rule by max_set alone.
    walks_per_thread : int
        Query subtrees per thread whose walks run side by side.
    """

    leaf_size: int = 48
    u_max: float = 1.0
    expansion_share: float = 0.25
    drop_share: float = 0.2
    cost_term: float = 0.1
    lower_bound_visits: int = 24
    shared_bound_radius: float = 1.0
    max_set: int = 256
    lookahead: bool = True
    walks_per_thread: int = 4
