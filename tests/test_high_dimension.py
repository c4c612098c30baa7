"""validation/high_dimension.py: its closed forms and a tiny run of each part.

The initial field of ρ0 = vMF(e, κ) under B = I, V = v1 eeᵀ + v2 (I − eeᵀ), SA: the attention
weights of a token x times ρ0 form the vMF measure with parameter βx + κe, whose mean is
a(βx + κe) for some a > 0, so X = a P_x V(βx + κe) and, with x = cosθ e + sinθ u,

    θ' = a sinθ [−β(v1 − v2) cosθ − κ v1],

which vanishes at cosθ = −κ v1 / (β(v1 − v2)) (no zero when that is below −1). The two-cap
lifetime rests on the point-cluster linearisation λ(β), checked here against two tokens.
"""
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import spherepde as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
import high_dimension as hd  # noqa: E402


@pytest.mark.parametrize("d,beta", [(3, 64.0), (16, 64.0), (64, 1000.0)])
def test_initial_field_vanishes_where_the_vmf_algebra_says(d, beta):
    n = 400
    solver = sp.ZonalSolver(hd.theorem1_model(d, beta), n)
    m0 = solver.project(sp.measures.VonMisesFisher(np.eye(d)[0], math.sqrt(d)))
    split, crossing = hd.initial_split(solver, m0)
    # v1 = 1, v2 = 1/2, kappa = sqrt(d): cos(theta) = -2 sqrt(d)/beta
    expected = math.pi / 2 + math.asin(2 * math.sqrt(d) / beta)
    # face speeds from cell-midpoint sums and a linear zero between faces h apart: both
    # O(h²) = 6e-5 here (measured <= 1.1e-5); 2e-4 is still 40 times below one cell
    assert abs(split - expected) < 2e-4, (split, expected)
    cdf = np.concatenate([[0.0], np.cumsum(m0)])
    between = np.interp(expected, solver.edges, cdf) - np.interp(np.pi / 2, solver.edges, cdf)
    # the same interpolated CDF at two points 2e-4 apart: the mass there, at most the
    # density at the equator (~sqrt(d/2pi) per radian) times 2e-4
    assert abs(crossing - between) < 2e-4 * math.sqrt(d)


def test_no_zero_sends_the_whole_south_north():
    d, beta = 64, 12.0  # 2 sqrt(d)/beta = 4/3 > 1: northward everywhere off the poles
    solver = sp.ZonalSolver(hd.theorem1_model(d, beta), 200)
    m0 = solver.project(sp.measures.VonMisesFisher(np.eye(d)[0], math.sqrt(d)))
    split, crossing = hd.initial_split(solver, m0)
    assert split == math.pi
    assert crossing == pytest.approx(m0[solver.theta > np.pi / 2].sum(), rel=1e-12)


def test_two_atoms_grow_apart_at_the_linearised_rate():
    beta, d, delta0 = 2.0, 3, 1e-3
    x2 = np.array([-math.cos(delta0), math.sin(delta0), 0.0])
    cloud = sp.measures.PointCloud(np.array([[1.0, 0.0, 0.0], x2]),
                                   weights=np.array([hd.M_BIG, hd.M_SMALL]))
    lam = hd.two_cluster_rate(beta)
    times = np.array([0.0, 2.0 / lam])
    traj = sp.ParticleSolver(sp.Model(beta=beta, d=d)).solve(cloud, times)
    delta = hd.offset(traj.positions[-1], 1)
    # over two e-folds delta stays below 1e-2, where the speed's nonlinear part (~beta
    # delta²/2 = 1e-4 relative) and the integrator (rtol 1e-9) are far below 1e-3
    assert math.log(delta / delta0) / times[-1] == pytest.approx(lam, rel=1e-3)
    # and lambda ~ (m1/m2 + m2/m1) e^{-2 beta} at large beta (the e^{-2 beta} corrections)
    assert hd.two_cluster_rate(8.0) == pytest.approx(
        (hd.M_BIG / hd.M_SMALL + hd.M_SMALL / hd.M_BIG) * math.exp(-16.0), rel=1e-6)


def test_two_atom_time_matches_two_tokens():
    beta, delta0 = 1.0, 0.05
    x2 = np.array([-math.cos(delta0), math.sin(delta0), 0.0])
    cloud = sp.measures.PointCloud(np.array([[1.0, 0.0, 0.0], x2]),
                                   weights=np.array([hd.M_BIG, hd.M_SMALL]))
    t_ref = hd.two_atom_time(beta, delta0)
    times = np.linspace(0.0, 1.2 * t_ref, 1201)
    traj = sp.ParticleSolver(sp.Model(beta=beta, d=3)).solve(cloud, times)
    delta = np.array([hd.offset(x, 1) for x in traj.positions])
    k = np.flatnonzero(delta >= math.pi - hd.END_ANGLE)[0]
    t_cross = np.interp(math.pi - hd.END_ANGLE, delta[k - 1:k + 1], times[k - 1:k + 1])
    # linear interpolation between outputs 1e-3 t_ref apart, where delta is smooth: 1e-4
    assert t_cross == pytest.approx(t_ref, rel=1e-4)


def test_tiny_runs_of_each_part():
    # Theorem 1 at 40/80 cells: settles, the floor is 2 sqrt(moved mass) once the caps have
    # collapsed (the remaining width costs ~1% of W2 here, measured 0.1%)
    case = hd.theorem1_case(3, 16.0, (40, 80))
    row = hd.case_row(case)
    assert np.isfinite(case["settle"]) and case["floor_converged"]
    assert case["floor"] == pytest.approx(2 * math.sqrt(case["moved"]), rel=0.01)
    assert len(row) == len(hd.T1_HEADER)
    # the tokens of two caps: the lifetime is the two-atom time from the collapsed offset
    # (the caps' own width at COLLAPSE_T is e^-5 of the initial ~0.2 rad: 1e-3 relative)
    run = hd.two_caps_tokens(3, 1.0, 40, 0)
    pred = hd.COLLAPSE_T + hd.two_atom_time(1.0, run["delta_c"])
    assert run["life"] == pytest.approx(pred, rel=1e-2)
