"""The helpers of the targeted low-temperature tests: the tail-bumped start and the times read
off a curve."""
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
import low_temperature as lt  # noqa: E402
import settle  # noqa: E402

import spherepde as sp  # noqa: E402


def test_the_bumped_start_is_f_times_rho0_at_the_target_and_integrates_to_one():
    model = lt.model_for("E1", 16.0)
    density, c = settle.tail_bump(model, 10.0)
    rho0 = lt.initial()
    # the bump is 1 at c and exp(-2 / 0.3^2) at -c: the ratio of the two ratios to rho_0 is
    # f / (1 + (f - 1) exp(-2 / 0.09)) (the normalisation cancels), to round-off
    ratio = (density(c) / rho0.density(c)) / (density(-c) / rho0.density(-c))
    assert abs(ratio - 10.0 / (1.0 + 9.0 * np.exp(-2.0 / 0.09))) < 1e-12
    # its mass by a rule about another axis (e3, 20000 nodes: smooth integrand, exponential
    # convergence; 1e-9 leaves room for the two rules' round-off and truncation)
    rule = sp.measures.Uniform(3).quadrature(20000, axis=[0.0, 0.0, 1.0])
    assert abs(4 * np.pi * rule.weights @ density(rule.points) - 1.0) < 1e-9
    plain, _ = settle.tail_bump(model, 1.0)
    x = rho0.sample(50, seed=1)
    # f = 1: rho_0 itself, divided by the rule's mass of it (1 to round-off)
    assert np.allclose(plain(x), rho0.density(x), rtol=1e-12, atol=0)
    # c is the attention target of the dominant atom: B^T e / |B^T e|, a unit vector
    assert abs(np.linalg.norm(c) - 1.0) < 1e-14


def test_departure_time_of_a_parabola_is_where_it_rises_the_fraction_above_its_minimum():
    t = np.linspace(0.0, 10.0, 1001)
    w = 1.0 + (t - 4.0) ** 2
    # 1 + (t - 4)^2 = 1.05 at t = 4 + sqrt(0.05); linear interpolation on a 0.01 grid of a
    # parabola of curvature 2 errs by at most 2 * 0.01^2 / 8 / slope(~0.45) ~ 6e-5
    assert abs(settle.departure_time(t, w, 0.05) - (4.0 + math.sqrt(0.05))) < 1e-4
    assert math.isnan(settle.departure_time(t, np.exp(-t), 0.05))  # still falling


def test_agreement_end_and_decay_rate():
    t = np.arange(6.0)
    assert settle.agreement_end(t, [0, 0.1, 0.1, 0.5, 0.1, 0], 0.2) == 2.0
    assert settle.agreement_end(t, np.zeros(6), 0.2) == 5.0
    # an exact exponential: the least-squares slope is the rate to round-off
    assert abs(settle.decay_rate(t, 3.0 * np.exp(-1.7 * t), 1.0, 5.0) - 1.7) < 1e-12


def test_the_split_rule_gives_the_hemisphere_masses_and_the_mean_of_the_cap():
    model = lt.model_for("E1", 16.0)
    e = model.dominant_subspace()[:, 0]
    cap = lt.initial()
    cloud = settle.split_rule(cap, e, 4608)
    assert len(cloud.weights) == 4608 and abs(cloud.weights.sum() - 1.0) < 1e-14
    # Pi#rho_0's masses: the model's own quadrature of the cap's hemisphere mass against the
    # rule's sums over its own half (each a Gauss rule of a smooth integrand on 24 nodes: round-off)
    exact = model.limit_measure(cap).weights
    ours = lt._merge_atoms(model.limit_measure(cloud)).weights
    assert np.allclose(ours, exact, rtol=0, atol=1e-13)
    # first moment of vMF(mu, kappa): (coth kappa - 1/kappa) mu / |mu| (closed form); the rule
    # integrates this analytic density to round-off at 24 nodes per half
    mu = np.asarray(lt.MEAN) / np.linalg.norm(lt.MEAN)
    k = lt.KAPPA
    assert np.allclose(cloud.weights @ cloud.points, (1 / np.tanh(k) - 1 / k) * mu, atol=1e-12)
