r"""The velocity field X[mu]: interaction kernels, velocity operators and the energy.

Two layers (docs/theory.md states the equations):

- *kernels* compute the attention output of a discrete measure
  :math:`\mu = \sum_j w_j\delta_{y_j}` under a :class:`spherepde.Model`,
  :math:`\sum_j \mathrm{softmax}_j(\beta\langle x, By_j\rangle + \log w_j)\, V y_j` (SA) or its
  unnormalized version (USA). Every kernel of the registry :data:`KERNELS` implements one
  contract, :class:`Kernel`: ``kernel.bind(model, points, weights, options)`` returns an
  evaluator, and ``evaluator(x)`` returns ``(values (m, d), stats dict)``. A binding holds
  no state that an evaluation changes, so one may be used from several threads. The direct
  kernels (numpy reference, fused numba, torch) sum over pairs
  (:class:`DirectKernel`, from a function of keys :math:`By_j` and values :math:`Vy_j`); the
  harmonic kernel works from B, V and the atoms. Every kernel agrees with the numpy
  reference to round-off (the harmonic one to its stated tolerance).
- *operators* (:mod:`spherepde.interaction.operators`) compute the field of a density given
  by its grid values or coefficients. A density solver picks one at construction.

``kernel="auto"`` is :func:`resolve_kernel`: the first entry of :data:`AUTO_KERNELS` whose
test accepts the problem, under the cost model of an
:class:`~spherepde.interaction.options.AutoProfile`. To add a kernel to the automatic choice,
add one :class:`AutoEntry` line to :data:`AUTO_KERNELS` at its place in the order (earlier
entries are preferred); its test receives the :class:`KernelProblem` and the profile, and a
new tuning constant becomes a field of the profile.

:func:`attention` computes the direct sum from keys and values; :meth:`spherepde.Model.velocity`
applies P_x.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..registry import Registry
from .options import DEFAULT_PROFILE, DEFAULT_TOL, AutoProfile, HarmonicOptions
from .reference import attention_numpy
from .zero_temperature import hardmax_attention, zero_temperature_attention

__all__ = ["KERNELS", "Kernel", "DirectKernel", "KernelProblem", "AutoEntry", "AUTO_KERNELS",
           "AutoProfile", "HarmonicOptions", "register_kernel", "available_kernels",
           "resolve_kernel", "attention", "zero_temperature_attention", "hardmax_attention"]


class Kernel:
    """The contract of an interaction kernel.

    ``bind(model, points, weights, options=None)`` fixes the measure
    :math:`\\sum_j w_j\\delta_{y_j}` (points (n, d), weights (n,) non-negative) and the model
    (finite beta) and returns an evaluator; ``evaluator(x)`` maps queries x: (m, d) to
    ``(attention output (m, d) before the tangent projection, stats)``, ``stats`` a dict of
    counts of that evaluation. ``options``: a kernel's own frozen options
    (:class:`~spherepde.interaction.options.HarmonicOptions` for the harmonic kernel; the
    direct kernels have none). An evaluation never changes the binding.
    """

    name = "kernel"

    def bind(self, model, points, weights, options=None) -> Callable:
        raise NotImplementedError


class DirectKernel(Kernel):
    """A kernel that sums over query-key pairs: ``attend(x, keys, values, weights, beta,
    normalized) -> (m, dv)`` with keys (n, d), values (n, dv), weights (n,)."""

    def __init__(self, name: str, attend: Callable):
        self.name = name
        self.attend = attend

    def bind(self, model, points, weights, options=None) -> Callable:
        keys = points @ model.B.T
        values = points @ model.V.T
        beta, normalized, attend = model.beta, model.normalized, self.attend

        def evaluate(x):
            return attend(x, keys, values, weights, beta, normalized), {"queries": x.shape[0]}

        return evaluate

    def __repr__(self) -> str:
        return f"DirectKernel({self.name!r})"


#: Interaction kernels: name -> :class:`Kernel`.
KERNELS = Registry("interaction kernel")


def register_kernel(name: str, kernel) -> None:
    """Add an interaction kernel: a :class:`Kernel`, or a pair-sum function
    ``attend(x, keys, values, weights, beta, normalized) -> (m, dv)`` (made a
    :class:`DirectKernel`)."""
    KERNELS.register(name, kernel if isinstance(kernel, Kernel) else DirectKernel(name, kernel))


register_kernel("numpy", attention_numpy)
# heavy or optional libraries: each module registers its kernel when first imported
KERNELS.register_module("numba", f"{__name__}.fused")
KERNELS.register_module("torch", f"{__name__}.torch_backend")
KERNELS.register_module("harmonic", f"{__name__}.harmonic")
KERNELS.register_module("tiled", f"{__name__}.tiled")


def available_kernels() -> list[str]:
    """The interaction kernels installed here."""
    return KERNELS.available()


def estimated_degree(kappa: float, tol: float = DEFAULT_TOL) -> int:
    """The degree L that :class:`spherepde.interaction.harmonic.HarmonicField` picks at kappa,
    to within a few (from the Gaussian decay of the multipliers), without computing them."""
    kappa = max(float(kappa), 0.0)
    return max(1, int(math.sqrt(2.0 * kappa * (math.log(1.0 / tol)
                                               + math.log(2.0 * kappa + 2.0)))))


@dataclass(frozen=True)
class KernelProblem:
    """What ``kernel="auto"`` knows of a problem: m queries, n atoms, the dimension d and
    kappa = beta·|B|_2 (None: the model is not known, only keys and values)."""

    m: int
    n: int
    d: int | None = None
    kappa: float | None = None

    @property
    def pairs(self) -> int:
        return self.m * self.n


def _harmonic_is_cheaper(p: KernelProblem, prof: AutoProfile) -> bool:
    """The harmonic kernel on S^1/S^2 at a finite kappa, where its cost model beats the fused
    kernel's m·n pairs (:class:`~spherepde.interaction.options.AutoProfile`)."""
    if p.kappa is None or p.d not in (2, 3) or not math.isfinite(p.kappa):
        return False
    if p.pairs < prof.numba_min_pairs or not KERNELS.installed("harmonic"):
        return False
    L = estimated_degree(p.kappa)
    units = (L + 1) ** 2 * math.log2(L + 2) + (p.m + p.n) + prof.harmonic_fixed_units
    return p.pairs >= prof.harmonic_pairs_per_unit * units


def _tiled_applies(p: KernelProblem, prof: AutoProfile) -> bool:
    """The BLAS-tiled kernel in high dimension (:mod:`spherepde.interaction.tiled`): from
    ``profile.tiled_min_dim`` on, for problems big enough for a compiled kernel."""
    return p.d is not None and p.d >= prof.tiled_min_dim and p.pairs >= prof.numba_min_pairs


@dataclass(frozen=True)
class AutoEntry:
    """One candidate of ``kernel="auto"``: the kernel ``name`` and ``applies(problem,
    profile) -> bool``, whether it should take that problem."""

    name: str
    applies: Callable[[KernelProblem, AutoProfile], bool]


#: ``kernel="auto"`` takes the first entry that applies and whose kernel is installed here.
AUTO_KERNELS: tuple[AutoEntry, ...] = (
    AutoEntry("harmonic", _harmonic_is_cheaper),
    AutoEntry("tiled", _tiled_applies),
    AutoEntry("numba", lambda p, prof: p.pairs >= prof.numba_min_pairs),
    AutoEntry("numpy", lambda p, prof: True),
)


def resolve_kernel(kernel: str, problem: KernelProblem,
                   profile: AutoProfile | None = None) -> str:
    """The kernel that ``kernel`` means for ``problem``: itself, or for "auto" the first
    entry of :data:`AUTO_KERNELS` that applies under ``profile`` (default: the measured
    :data:`~spherepde.interaction.options.DEFAULT_PROFILE`) and is installed. Deterministic:
    it depends on the sizes and the profile only."""
    if kernel != "auto":
        return kernel
    prof = DEFAULT_PROFILE if profile is None else profile
    for entry in AUTO_KERNELS:
        if entry.applies(problem, prof) and KERNELS.installed(entry.name):
            return entry.name
    return "numpy"


def attention(x, keys, values, weights, beta: float, normalized: bool = True,
              kernel: str = "auto", profile: AutoProfile | None = None) -> np.ndarray:
    r"""Attention output before the tangent projection, summed over pairs.

    .. math::
        \mathrm{SA:}\ \frac{\sum_j w_j e^{\beta\langle x_i, k_j\rangle} v_j}
                           {\sum_j w_j e^{\beta\langle x_i, k_j\rangle}}, \qquad
        \mathrm{USA:}\ \sum_j w_j e^{\beta\langle x_i, k_j\rangle} v_j .

    Parameters
    ----------
    x : (m, d) queries
    keys : (n, d), values : (n, dv), weights : (n,) non-negative
    beta : float, finite
    normalized : SA (True) or USA (False)
    kernel : a :class:`DirectKernel` of :data:`KERNELS`, or "auto" (:func:`resolve_kernel`
        without a model: from m·n >= ``profile.numba_min_pairs`` the BLAS-tiled kernel where
        d >= ``profile.tiled_min_dim``, else the fused numba kernel; numpy below). The
        harmonic kernel needs B, V and the atoms: use :meth:`spherepde.Model.attention`.

    Returns
    -------
    (m, dv) array
    """
    name = resolve_kernel(kernel, KernelProblem(x.shape[0], keys.shape[0], x.shape[1]),
                          profile)
    impl = KERNELS.get(name)
    if not isinstance(impl, DirectKernel):
        raise ValueError(f"the {name!r} kernel works from the model's B, V and the atoms, not "
                         "from keys and values; call Model.attention(x, points, weights, "
                         f"kernel={name!r}), or choose a pair-sum kernel "
                         f"({[k for k in available_kernels() if k != name]})")
    return impl.attend(x, keys, values, weights, beta, normalized)
