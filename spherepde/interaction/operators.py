r"""Velocity operators: the attention field of a *density* at the nodes of a discretisation.

A density solver owns a set of nodes :math:`x_i` with quadrature weights :math:`a_i` (a Gauss
grid on S^2, the equispaced grid on S^1, cell centres of a mesh) and represents
:math:`\rho` by its values there and, for spectral solvers, by its coefficients. A
:class:`VelocityOperator` turns that into the attention output at the nodes,

.. math::
    \mathrm{Attn}[\rho](x_i) = \frac{\int e^{\beta\langle x_i, By\rangle} V y\,\rho(y)\,dy}
                                    {\int e^{\beta\langle x_i, By\rangle}\rho(y)\,dy}
    \quad\text{(SA; USA drops the denominator)},

and into the interaction energy (:mod:`spherepde.interaction.energy`). One implementation per
way of computing the field:

- :class:`FunkHeckeS2`, :class:`FunkHeckeS1`: B = c·O (O orthogonal), the kernel is zonal and
  acts diagonally on harmonics / Fourier modes (:mod:`spherepde.interaction.funk_hecke`);
  needs the coefficients;
- :class:`DirectQuadrature`: any B, the quadrature :math:`\sum_j a_j\rho_j(\cdot)` through an
  interaction kernel (O(n^2)); needs the values;
- :class:`ChebyshevFunkHecke`: any invertible B on S^2, Funk–Hecke multipliers expanded in
  Chebyshev polynomials of :math:`\kappa(x) = \beta|B^\top x|`; needs the coefficients;
- :class:`ZeroTemperature`: beta = inf, :math:`A x/|B^\top x|`, independent of rho.

A solver picks one at construction (:func:`choose_operator` checks the choice) and calls
:meth:`VelocityOperator.flux` in every right-hand side. The field can also be wanted at other
points than the nodes (``targets``: the edge points of a finite-volume mesh, whose density
lives at the cells).
"""
from __future__ import annotations

import math

import numba
import numpy as np

from ..registry import Registry
from ..sphere import orthogonal_factor
from . import attention as kernel_attention
from .energy import energy_from_partition, quadrature_partition
from .funk_hecke import (
    GeneralFunkHecke,
    attention_s1,
    attention_s2,
    circular_multipliers,
    funk_hecke_fields_s2,
    spherical_multipliers,
)
from .numerics import usa_scale
from .zero_temperature import zero_temperature_attention

__all__ = ["VelocityOperator", "FunkHeckeS2", "FunkHeckeS1", "DirectQuadrature",
           "ChebyshevFunkHecke", "ZeroTemperature", "choose_operator", "check_zero_temperature",
           "OPERATOR_NAMES", "AUTO_OPERATORS", "operator_registry"]

#: The names a solver's ``path=`` accepts (besides "auto").
OPERATOR_NAMES = ("funk_hecke", "direct", "chebyshev", "zero_temperature")


class VelocityOperator:
    r"""The attention output of a density at fixed nodes.

    Parameters
    ----------
    model : :class:`spherepde.Model`
    points : (..., d) nodes x_i on the sphere
    weights : (...) quadrature weights a_i of the nodes (same leading shape)
    frame : sequence of (..., d) unit tangent vectors at the nodes, the components in which
        :meth:`flux` returns the flux (S^2: e_theta, e_phi; S^1: e_theta)
    targets : (..., d), optional
        Where :meth:`attention` and :meth:`velocity` evaluate the field (default: the nodes).
        A finite-volume solver wants it at the edge quadrature points of its mesh while the
        density lives at the cells; :meth:`partition` and :meth:`energy` stay at the nodes.

    A subclass provides :meth:`attention` and :meth:`partition`; :meth:`flux`, :meth:`velocity`
    and :meth:`energy` follow. Both methods take ``rho`` (values at the nodes, shape (...)) and
    ``coefficients`` (the solver's spectral coefficients, or None); each operator reads what
    it needs.
    """

    #: The name a solver reports (``solver.path``).
    name = "abstract"
    #: Whether :meth:`attention` reads ``rho`` (grid values); False: only the coefficients
    needs_values = True
    #: Whether the field is the same for every density (beta = inf), so a caller may keep it
    constant = False

    def __init__(self, model, points, weights, frame=(), targets=None):
        self.model = model
        self.points = np.asarray(points, dtype=np.float64)
        self.weights = np.asarray(weights, dtype=np.float64)
        self.frame = tuple(frame)
        self.targets = self.points if targets is None else np.asarray(targets, dtype=np.float64)

    def attention(self, rho, coefficients=None):
        """Attention output before P_x at the targets, (..., d), and the scaled partition
        (or None where the operator does not form it)."""
        raise NotImplementedError

    def partition(self, rho, coefficients=None):
        r"""(p, s): the partition :math:`Z(x_i) = p_i e^{s}` at the nodes, p: (...)."""
        raise NotImplementedError

    def velocity(self, rho, coefficients=None):
        """The tangent field X[rho] at the targets, (..., d)."""
        att, _ = self.attention(rho, coefficients)
        x = self.targets
        return att - np.sum(att * x, axis=-1, keepdims=True) * x

    def flux(self, rho, coefficients=None):
        r"""Components of the flux :math:`\rho\,X[\rho]` on :attr:`frame`, a list of (...) arrays.

        The radial part of the attention output drops out of the tangent components, so P_x
        is not applied."""
        att, _ = self.attention(rho, coefficients)
        F = rho[..., None] * att
        return [np.sum(F * e, axis=-1) for e in self.frame]

    def energy(self, rho, coefficients=None) -> float:
        r""":math:`E_\beta = \frac1{2\beta}\iint e^{\beta\langle x, By\rangle}\rho\rho` by the
        nodes' quadrature (NaN at beta = 0 and beta = inf)."""
        beta = self.model.beta
        if beta == 0 or not math.isfinite(beta):
            return math.nan
        p, s = self.partition(rho, coefficients)
        return energy_from_partition(self.weights * rho, p, s, beta)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(nodes={self.points.shape[:-1]})"


@numba.njit(cache=True, fastmath=False)
def _flux_s2(rho, G, Wr, wt, wp, C, normalized, scale, Ft, Fp):
    """The two tangent flux components in one fused pass over the grid (instead of a dozen
    numpy temporaries: 10x at L = 255)."""
    for i in range(rho.shape[0]):
        for j in range(rho.shape[1]):
            f = rho[i, j] / G[i, j] if normalized else rho[i, j] * scale
            a, b, c = Wr[i, j], wt[i, j], wp[i, j]
            Ft[i, j] = f * (C[0, i, j] * a + C[1, i, j] * b + C[2, i, j] * c)
            Fp[i, j] = f * (C[3, i, j] * a + C[4, i, j] * b + C[5, i, j] * c)


class FunkHeckeS2(VelocityOperator):
    r"""B = c·O on S^2: the fields by scaled Funk–Hecke multipliers, a coefficient rotation and
    a few transforms on the grid of ``sht`` (:func:`spherepde.interaction.funk_hecke.attention_s2`).

    The flux uses one fused pass over the grid: with :math:`M = V O^\top = A/c` and the bracket
    :math:`W = x W_r + w_\theta e_\theta + w_\phi e_\phi`, its components are
    :math:`f\,\langle e_a, M W\rangle`, :math:`f = \rho/G` (SA) or :math:`\rho e^\kappa` (USA),
    and :math:`C_{ab} = \langle e_a, M e_b\rangle` is precomputed.
    """

    name = "funk_hecke"
    needs_values = False

    def __init__(self, model, sht, factor):
        grid = sht.grid()
        e_r, e_t, e_p = grid.frame
        super().__init__(model, grid.points, grid.weights, (e_t, e_p))
        self.sht = sht
        self.c, self.O = factor
        self.kappa = model.beta * self.c
        self.multipliers = spherical_multipliers(sht.lmax, self.kappa)
        M = model.V @ self.O.T
        frame = (e_r, e_t, e_p)
        self._C = np.ascontiguousarray(np.stack(
            [np.sum(frame[a] * (frame[b] @ M.T), axis=-1) for a in (1, 2) for b in (0, 1, 2)]))
        self._usa_scale = 1.0 if model.normalized else usa_scale(self.kappa, model.beta)
        # M = m I (e.g. V = I, B = I): the radial part of W never reaches the flux
        self._radial = bool(np.abs(M - np.trace(M) / 3 * np.eye(3)).max()
                            > 1e-14 * np.abs(M).max())
        shape = (sht.nlat, sht.nlon)
        self._Ft, self._Fp = np.empty(shape), np.empty(shape)
        self._zeros = np.zeros(shape)

    def attention(self, rho, coefficients=None):
        m = self.model
        att, G, _ = attention_s2(coefficients, self.sht, self.c, self.O, m.V, m.beta,
                                 m.normalized, self.multipliers)
        return att, G

    def partition(self, rho, coefficients=None):
        return self.attention(rho, coefficients)[1], self.kappa

    def flux(self, rho, coefficients=None):
        G, Wr, wt, wp = funk_hecke_fields_s2(coefficients, self.sht, self.O, self.multipliers,
                                             self._radial, self.model.normalized)
        Wr = self._zeros if Wr is None else Wr
        G = self._zeros if G is None else G  # USA: unused by the kernel
        _flux_s2(rho, G, Wr, wt, wp, self._C, self.model.normalized, self._usa_scale,
                self._Ft, self._Fp)
        return [self._Ft, self._Fp]


class FunkHeckeS1(VelocityOperator):
    r"""B = c·O on S^1: Bessel multipliers :math:`2\pi I_k(\beta c)` on the Fourier coefficients
    (:func:`spherepde.interaction.funk_hecke.attention_s1`)."""

    name = "funk_hecke"
    needs_values = False

    def __init__(self, model, grid, kmax, factor):
        super().__init__(model, grid.points, grid.weights, (grid.e_theta,))
        self.n = grid.n
        self.c, self.O = factor
        self.kappa = model.beta * self.c
        self.multipliers = circular_multipliers(kmax + 1, self.kappa)

    def attention(self, rho, coefficients=None):
        m = self.model
        att, G, _ = attention_s1(coefficients, self.n, self.c, self.O, m.V, m.beta, m.normalized,
                                 self.multipliers)
        return att, G

    def partition(self, rho, coefficients=None):
        return self.attention(rho, coefficients)[1], self.kappa


class DirectQuadrature(VelocityOperator):
    r"""Any B: the attention of the quadrature measure :math:`\sum_j a_j\rho_j\delta_{x_j}`
    through an interaction kernel (:func:`spherepde.interaction.attention`), O(n^2).

    Where a truncated density dips below 0 the positive and negative parts are summed
    separately with the unnormalized kernel on values augmented by a column of ones, which
    returns both numerator N and partition Z: SA = (N+ - N-)/(Z+ - Z-), USA = N+ - N-. This
    raises (as USA does) when beta·max<x, By> exceeds float64's range, which only a wildly
    under-resolved run reaches.
    """

    name = "direct"

    def __init__(self, model, points, weights, frame=(), kernel: str = "auto", targets=None):
        super().__init__(model, points, weights, frame, targets)
        d = self.points.shape[-1]
        self._flat = self.points.reshape(-1, d)
        self._wflat = self.weights.reshape(-1)
        self._queries = self.targets.reshape(-1, d)
        self._keys = self._flat @ model.B.T
        self._values = self._flat @ model.V.T
        self.kernel = kernel

    def attention(self, rho, coefficients=None):
        m = self.model
        w = self._wflat * np.reshape(rho, -1)
        x, keys, values, k = self._queries, self._keys, self._values, self.kernel
        if np.all(w >= 0):
            att = kernel_attention(x, keys, values, w, m.beta, m.normalized, kernel=k)
        else:
            pos, neg = np.maximum(w, 0.0), np.maximum(-w, 0.0)
            aug = np.concatenate([values, np.ones((values.shape[0], 1))], axis=1)
            acc = kernel_attention(x, keys, aug, pos, m.beta, False, kernel=k)
            acc = acc - kernel_attention(x, keys, aug, neg, m.beta, False, kernel=k)
            att = acc[:, :-1] / acc[:, -1:] if m.normalized else acc[:, :-1]
        return att.reshape(self.targets.shape), None

    def partition(self, rho, coefficients=None):
        # the largest logit on the sphere is beta ||B||_2: a global shift that overflows only
        # when the energy itself does
        m = self.model
        shift = m.beta * float(np.linalg.norm(m.B, 2))
        w = self._wflat * np.reshape(rho, -1)
        p = quadrature_partition(self._flat, self._keys, w, m.beta, shift)
        return p.reshape(self.weights.shape), shift


class ChebyshevFunkHecke(VelocityOperator):
    """Any invertible B on S^2, sub-quadratic: :class:`spherepde.interaction.funk_hecke.
    GeneralFunkHecke` (Chebyshev expansion in kappa(x) = beta |B^T x|, off-grid synthesis)."""

    name = "chebyshev"
    needs_values = False

    def __init__(self, model, lmax, points, weights, frame=()):
        super().__init__(model, points, weights, frame)
        self.gfh = GeneralFunkHecke(lmax, self.points.reshape(-1, 3), model.B, model.V,
                                    model.beta, model.normalized)

    def attention(self, rho, coefficients=None):
        att, G = self.gfh.attention(coefficients)
        return att.reshape(self.points.shape), G

    def partition(self, rho, coefficients=None):
        # G carries e^{-kappa(x)}: shift by the largest kappa
        _, G = self.gfh.attention(coefficients, partition=True)
        k = self.gfh.kappa
        top = float(k.max())
        return (G * np.exp(k - top)).reshape(self.weights.shape), top


class ZeroTemperature(VelocityOperator):
    r"""beta = inf: :math:`A x/|B^\top x|` (Laplace principle), the same for every density."""

    name = "zero_temperature"
    needs_values = False
    constant = True

    def __init__(self, model, points, weights, frame=(), targets=None):
        super().__init__(model, points, weights, frame, targets)
        d = self.targets.shape[-1]
        self._att = zero_temperature_attention(self.targets.reshape(-1, d), model.A,
                                               model.B).reshape(self.targets.shape)

    def attention(self, rho, coefficients=None):
        return self._att, None

    def partition(self, rho, coefficients=None):
        return np.full(self.weights.shape, math.nan), 0.0


def check_zero_temperature(model, path: str) -> None:
    """At beta = inf a density moves under the zero-temperature local field: refuse hardmax
    (defined for discrete measures) and any other ``path``."""
    if model.hardmax:
        raise ValueError("hardmax is defined for discrete measures; the density solvers use "
                         "the zero-temperature local field (pass hardmax=False)")
    if path not in ("auto", "zero_temperature"):
        raise ValueError(f"beta = inf uses the zero-temperature field; path={path!r} does not "
                         "apply")


def operator_registry(kind: str, builders: dict) -> Registry:
    """A solver's velocity operators as a :class:`~spherepde.registry.Registry`: name ->
    builder (the solver's own signature), in the order given."""
    reg = Registry(kind)
    for name, build in builders.items():
        reg.register(name, build)
    return reg


#: ``path="auto"`` takes the first of these (name, applies(model, fac)) that the solver
#: implements; fac is the (c, O) of B = c·O, or None. Order is preference.
AUTO_OPERATORS = (
    ("zero_temperature", lambda model, fac: model.zero_temperature),
    ("funk_hecke", lambda model, fac: fac is not None),
    ("direct", lambda model, fac: True),
)


def choose_operator(model, path: str, d: int, available=OPERATOR_NAMES):
    """Check the requested field computation ``path`` for ``model`` on S^{d-1} and resolve
    "auto"; returns (name, (c, O) or None).

    "auto" takes the first entry of :data:`AUTO_OPERATORS` that applies and that the solver
    implements: the zero-temperature field at beta = inf, Funk–Hecke when B = c·O and direct
    quadrature otherwise. ``available``: the solver's operators (a Registry, or a sequence of
    names).
    """
    names = available.names() if isinstance(available, Registry) else tuple(available)
    if model.d != d:
        raise ValueError(f"this solver works on S^{d - 1} (d = {d}); the model has d = {model.d}")
    if model.zero_temperature:
        check_zero_temperature(model, path)
        return "zero_temperature", None
    fac = orthogonal_factor(model.B)
    if path == "auto":
        path = next(name for name, applies in AUTO_OPERATORS
                    if name in names and applies(model, fac))
    if path == "funk_hecke" and fac is None:
        raise ValueError("the Funk–Hecke path needs B = Q^T K = c·O with O orthogonal; use "
                         "path='direct' for a general B")
    finite = [p for p in names if p != "zero_temperature"]
    if path not in finite:
        installed = (f" (installed here: {available.available()})"
                     if isinstance(available, Registry) else "")
        raise ValueError(f"unknown velocity path {path!r}; choose 'auto', "
                         + ", ".join(repr(p) for p in finite)
                         + " or (beta = inf) 'zero_temperature'" + installed)
    return path, fac
