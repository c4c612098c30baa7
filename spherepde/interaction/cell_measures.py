r"""Velocity operators of cell measures on the cubed sphere, for the finite-volume solvers.

- :class:`CellHarmonic`: the attention of the cell measure (cell masses spread over a Gauss
  rule per cell) from its harmonic moments, at fixed targets (the edge points);
- :class:`EdgeVelocity`: the one adapter between a velocity (an operator, or a prescribed
  v(t, x)) and the normal velocities at the edge points that a finite-volume scheme's fluxes
  take.
"""
from __future__ import annotations

import numpy as np

from ..sphere.cubed_sphere import CubedSphere
from .operators import VelocityOperator

__all__ = ["CellHarmonic", "EdgeVelocity"]


# ---------------------------------------------------------------------------- velocity at the edges
class CellHarmonic(VelocityOperator):
    r"""The attention of the cell measure from its harmonic moments
    (:mod:`spherepde.interaction.harmonic`): cell masses -> moments up to the degree the
    kernel needs -> field at the targets (the edge points).

    Each cell's mass is spread over a q × q Gauss rule on the cell (weights normalized per
    cell, :attr:`cell_nodes`, :attr:`cell_node_weights`), so the moments are those of the
    piecewise-constant density up to O(h^{2q}) per cell; one node per cell (q = 1, at the
    centroid) would leave an O(kappa h^2) error. The nodes are the cell centres with the cell
    areas as weights; ``rho`` are the cell averages.

    Parameters
    ----------
    model, mesh, targets, order : the model, the mesh, the edge points (..., 3), q
    planned : bool
        True (default): the moments and the fields go through transforms planned once for
        the fixed nodes and targets (:class:`spherepde.interaction.harmonic.PlannedField`,
        the same error model); False: ducc0's non-equispaced SHT at every call (the
        reference).
    velocity_tol : float, optional
        The accuracy asked of the field, relative to :math:`\|V\|_2` (SA; USA: to the
        target's own scale), for the cell measure: targets whose a-posteriori bound exceeds
        it (they look into regions of exponentially small mass, where the harmonic sums
        lose their relative accuracy) are summed exactly over the cap of cell nodes that
        carries their kernel, to the same accuracy (:meth:`HarmonicField.exact_at`).
        None (default): the harmonic module's own level ``FALLBACK_FACTOR * tol`` (1e-10);
        :class:`FiniteVolumeSolver` passes its ``velocity_tol`` (default
        :func:`default_velocity_tol`).

    flux_criterion : bool
        Judge a target by the flux it feeds (:meth:`attention`, ``edge_density``; default)
        or by its velocity alone.
    field_tol : float, optional
        The truncation tol of the harmonic field. None (default): the harmonic default
        (1e-12), or velocity_tol / FALLBACK_FACTOR where that is tighter. A looser field does
        not save work: the bounds grow with it and more targets are summed exactly.

    ``stats``: targets evaluated and those summed over caps, cumulative.
    """

    name = "harmonic"

    def __init__(self, model, mesh: CubedSphere, targets, order: int = 2, planned: bool = True,
                 velocity_tol: float | None = None, flux_criterion: bool = True,
                 field_tol: float | None = None):
        from .harmonic import (
            DEFAULT_TOL,
            FALLBACK_FACTOR,
            NUFFT_EPS_MIN,
            HarmonicField,
            PlannedField,
            check_velocity_tol,
        )

        super().__init__(model, mesh.centers, mesh.areas, (), targets)
        if velocity_tol is None:
            velocity_tol = FALLBACK_FACTOR * DEFAULT_TOL
        velocity_tol = check_velocity_tol(velocity_tol)
        # The field is built at least as accurately as the harmonic default, however loose
        # velocity_tol is: a target is summed exactly when (edge density) x (bound) exceeds
        # velocity_tol x (mean density), and the bound is the field's absolute error over the
        # kernel mass G it sees, so a looser field sends the same targets to the exact sums
        # (those where the density exceeds G / mean G) and more. Building the field at 1e-9
        # for velocity_tol = 1e-7 sent 49% of the edge points of a concentrated state to exact
        # sums (2.8 s a right-hand side, n = 64, beta = 256); at 1e-12, 5.5% (0.36 s).
        if field_tol is None:
            field_tol = max(NUFFT_EPS_MIN, min(DEFAULT_TOL, velocity_tol / FALLBACK_FACTOR))
        self.harmonic = HarmonicField.from_model(model, tol=float(field_tol))
        self.velocity_tol = velocity_tol
        self.wants_edge_density = bool(flux_criterion)
        nodes, w = mesh.cell_quadrature(order)
        self.cell_nodes = nodes
        self.cell_node_weights = w / w.sum(axis=1, keepdims=True)
        self._nodes = np.ascontiguousarray(nodes.reshape(-1, 3))
        self._queries = self.targets.reshape(-1, 3)
        self.plan = (PlannedField(self.harmonic, self._queries, self._nodes) if planned
                     else None)
        #: targets evaluated, and those summed exactly over caps, cumulative
        self.stats = {"queries": 0, "fallback": 0}

    def _node_weights(self, rho):
        return (self.weights[:, None] * rho[:, None] * self.cell_node_weights).reshape(-1)

    def _moments(self, rho):
        if self.plan is not None:
            return self.plan.moments(self._node_weights(rho))
        return self.harmonic.moments_of_cells(self.cell_nodes, self.cell_node_weights,
                                              self.weights * rho)

    def attention(self, rho, coefficients=None, edge_density=None):
        """Attention output at the targets (..., 3). With ``edge_density`` (targets' shape,
        >= the upwind density the fluxes multiply the velocity by) and SA, a target whose
        bound exceeds ``velocity_tol`` keeps the harmonic value when its bound is at most 1
        and its flux error, density × bound × |V|_2, is at most velocity_tol·|V|_2 times the
        mean density: the flux density is then within velocity_tol·|V|_2·max(rho, mean rho)
        at every target."""
        hf = self.harmonic
        att, bound = hf.attention(self._queries, self._moments(rho), return_bound=True,
                                  plan=self.plan)
        bad = ~(bound <= self.velocity_tol)
        if edge_density is not None and self.model.normalized and np.any(bad):
            mean = float(np.sum(self.weights * rho)) / (4.0 * np.pi)
            dens = np.abs(np.reshape(edge_density, -1))
            bad &= ~((bound <= 1.0) & (dens * bound <= self.velocity_tol * mean))
        bad = np.nonzero(bad)[0]
        self.stats["queries"] += self._queries.shape[0]
        self.stats["fallback"] += int(bad.size)
        hf.exact_at(att, bad, self._queries, self._nodes, self._node_weights(rho),
                    self.velocity_tol)
        return att.reshape(self.targets.shape), None

    def partition(self, rho, coefficients=None):
        return self.harmonic.partition(self.points, self._moments(rho))


class EdgeVelocity:
    r"""The normal velocity :math:`u_{eq} = \langle v(x_{eq}), n_e\rangle` at the two Gauss
    points of every edge, (n_faces, 2): the one adapter between a velocity and the fluxes of
    :class:`FiniteVolumeScheme`.

    Parameters
    ----------
    scheme : FiniteVolumeScheme
    operator : :class:`spherepde.interaction.operators.VelocityOperator`, optional
        Nodes at the cell centres (weights: the areas), targets at the edge points
        (``mesh.face_points``); it gets the cell averages, clipped at 0 (the positivity step
        control keeps them >= 0; only limiter="none" or cfl > 1 can make one negative). A
        field that does not depend on the density (beta = inf) is computed once.
        An operator with ``wants_edge_density`` also gets :meth:`edge_density` (its accuracy
        criterion is then the flux's, :class:`CellHarmonic`).
    velocity : callable velocity(t, x), x: (..., 3) -> (..., 3), optional
        A prescribed velocity instead (transport test cases).
    """

    def __init__(self, scheme, operator=None, velocity=None):
        if (operator is None) == (velocity is None):
            raise TypeError("pass exactly one of operator and velocity")
        if velocity is not None and not callable(velocity):
            raise TypeError(f"velocity must be a callable velocity(t, x) -> (..., 3); got "
                            f"{type(velocity).__name__}")
        self.scheme, self.operator, self.velocity = scheme, operator, velocity
        self._areas = scheme.mesh.areas
        self._constant = None
        if operator is not None and operator.constant:
            self._constant = np.ascontiguousarray(
                scheme.normal_velocity(operator.attention(None)[0]))

    def __call__(self, t, masses) -> np.ndarray:
        """u: (n_faces, 2) at time t for cell masses (n_cells,)."""
        if self._constant is not None:
            return self._constant
        if self.operator is not None:
            rho = np.maximum(masses, 0.0) / self._areas
            if getattr(self.operator, "wants_edge_density", False):
                v = self.operator.attention(rho, edge_density=self.edge_density(masses))[0]
            else:
                v = self.operator.attention(rho)[0]
        else:
            x = self.scheme.mesh.face_points
            v = np.asarray(self.velocity(t, x), dtype=np.float64)
            if v.shape != x.shape:
                raise ValueError(f"velocity(t, x) must return an array of the shape of x "
                                 f"{x.shape}; got {v.shape}")
        return self.scheme.normal_velocity(v)

    def edge_density(self, masses) -> np.ndarray:
        """max(|rho_K(x_eq)|, |rho_K'(x_eq)|) of the limited reconstructions of the two cells
        of every edge at its points, (n_faces, 2): the upwind flux F(u) = u^+ rho_K + u^- rho_K'
        changes by at most this times the change of u."""
        sc = self.scheme
        vals = sc.edge_values(masses)
        fc, fl = sc.mesh.face_cells, sc._face_local
        return np.maximum(np.abs(vals[fc[:, 0], fl[:, 0]]), np.abs(vals[fc[:, 1], fl[:, 1]]))
