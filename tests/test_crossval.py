"""Particles against the spectral density from the same rho_0: the discrepancy falls at the
empirical-measure rate in N and does not depend on the spectral resolution."""
import numpy as np
import pytest

import spherepde as sp
from spherepde.analysis.crossval import cross_validate, empirical_rate


@pytest.fixture(scope="module")
def study(scenario_model):
    model = scenario_model(16.0, rotation_seed=1)
    rho0 = sp.measures.VonMisesFisher([0.4, 0.3, 1.0], 1.5)
    return cross_validate(model, rho0, [0.0, 1.0], n_particles=(250, 500, 1000), lmax=(16, 32),
                          seeds=(0, 1, 2), eval_nlat=40)


def test_discrepancy_falls_at_the_empirical_rate_in_n(study):
    # E W2(mu^N, rho) ~ sqrt(log N / N) on a 2-D manifold (AKT): local slope -0.5 + 1/(2 log N)
    # = -0.42 at N ~ 500. Three seeds leave ~10% noise per point; the grid (40 x 80 nodes) adds a
    # floor of a few 1e-3 that flattens the slope slightly: +-0.1 covers both.
    for k in range(len(study.times)):
        assert study.rate_in_n(k) == pytest.approx(empirical_rate(500), abs=0.1)


def test_discrepancy_stays_bounded_for_fixed_n_and_lmax(study):
    # The tokens are a sample of rho_0 moved by the same field as the density: D(t) stays at the
    # level of the sampling error D(0). Stated bound for N <= 1000, lmax = 32, t <= 1:
    # D(t) <= 1.15 D(0) (measured ratios 0.98-1.03; the lmax = 32 truncation error, bounded by
    # the coarse-vs-fine total variation below, is ~100x smaller than D).
    D = study.mean_discrepancy()[-1]  # finest lmax, (P, T)
    assert np.all(D[:, -1] <= 1.15 * D[:, 0])
    assert np.all(D[:, 0] > 0)


def test_spectral_part_falls_with_lmax(study):
    # The spectral solutions converge geometrically: the lmax = 16 solution is already within a
    # total-variation distance of 1e-2 of lmax = 32 at t = 1, and identical at t = 0 to 1e-6.
    assert study.spectral_self[0, 0] < 1e-6
    assert study.spectral_self[0, -1] < 1e-2
    # and the discrepancy barely depends on lmax, because the sampling error dominates
    np.testing.assert_allclose(study.mean_discrepancy()[0], study.mean_discrepancy()[-1], rtol=0.05)
