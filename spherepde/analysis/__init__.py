"""Analysis of solutions: diagnostics (clusters, energy, hemispheres) and the cross-validation
of particles against densities."""
