"""The departure study's probe: closed forms for its W2, its speed ratio and its interventions,
and one tiny run end to end."""
import math
import sys
from pathlib import Path

import numpy as np

import spherepde as sp
from spherepde.density.finite_volume import locate as fv_locate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
import departure as dp  # noqa: E402
import late_phase as lp  # noqa: E402


def test_w2_to_two_antipodal_atoms_matches_the_general_solver():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    w = rng.random(300)
    w /= w.sum()
    e = np.array([0.6, 0.8, 0.0])
    atoms = sp.PointCloud(np.array([e, -e]), np.array([0.37, 0.63]))
    ref = sp.w2(sp.PointCloud(x, w), atoms)
    assert abs(dp.w2_two_antipodal(x, w, e, 0.37) - float(ref)) <= ref.upper - ref.lower + 1e-9


def test_speed_ratio_of_a_cluster_at_e_with_mass_at_its_attention_target():
    # At e (A's eigenvector) P_e V B^T e = P_e A e = 0, so with a share s of the attention at
    # the target b = B^T e / |B^T e| the centre moves at (1 - s) of the lone-cluster speed.
    probe = dp.Probe(lp.model_for("R1", 256.0))
    e = np.array([1.0, 0.0, 0.0])
    b = probe.B.T @ e / np.linalg.norm(probe.B.T @ e)
    for eps in (1e-4, 1e-3, 1e-2):
        x, w = np.array([e, b]), np.array([1 - eps, eps])
        row = probe.row(x, w, e)
        assert 0 < row["share"] < 1 and row["tail_mass"] == eps
        assert abs(row["ratio"] - (1 - row["share"])) < 1e-12
    # a lone cluster: no tail, free
    row = probe.row(np.array([e, e]), np.array([0.5, 0.5]), e)
    assert row["share"] == 0 and abs(row["ratio"] - 1) < 1e-12


def test_tail_logit_is_exact_where_the_share_rounds_to_one():
    # A core of mass 1 - eps at e and eps at the attention target b: the tail's attention over
    # the core's is eps/(1 - eps) e^{beta <B^T e, b - e>} = e^{beta Delta} eps/(1 - eps), with
    # Delta = |B^T e| - <e, B^T e>. At beta = 1000 in E1, beta Delta = 252: the share is 1.0 in
    # floating point, the logit is not lost.
    probe = dp.Probe(lp.model_for("E1", 1000.0))
    e = np.array([1.0, 0.0, 0.0])
    bt = probe.B.T @ e
    b, delta = bt / np.linalg.norm(bt), np.linalg.norm(bt) - e @ bt
    for eps in (1e-30, 1e-60):  # logits 183 and 114
        row = probe.row(np.array([e, b]), np.array([1 - eps, eps]), e)
        assert row["share"] == 1.0
        expected = 1000.0 * delta + math.log(eps / (1 - eps))
        assert abs(row["tail_logit"] - expected) < 1e-9 * abs(expected)
        assert abs(row["tail_angle"] - math.acos(b @ e)) < 1e-7
    # no tail at all: the logit is undefined, not -inf
    assert math.isnan(probe.row(np.array([e, e]), np.array([0.5, 0.5]), e)["tail_logit"])


def test_logit_clock_of_a_closed_form_hold():
    # W2 = 0.1 + e^{-4t} falls to its plateau 0.1, within 1% of it once e^{-4t} <= 1e-3 (t_p),
    # and leaves it at t = 22 (t_dep = 22.05, where 0.1 + (t - 22) = 1.5 x 0.1); the logit
    # falls linearly, L = 60 - 3t, so L(t_dep) = -6.15 and L reached 0 at the clock, t = 20;
    # the speed ratio releases at t = 21.
    t = np.linspace(0.0, 30.0, 301)
    w2 = 0.1 + np.exp(-4 * t) + np.where(t > 22, t - 22, 0.0)
    d = {"times": t, "w2": w2, "ratio": np.where(t < 21, 0.1, 0.9), "share": 1 - 0 * t,
         "tail_mass": np.exp(-t), "core_ratio": np.ones_like(t), "tail_logit": 60 - 3 * t,
         "tail_angle": np.full_like(t, 0.7)}
    c = dp.logit_clock(d)
    t_p = math.ceil(math.log(1e3) / 4 / 0.1) * 0.1  # the first output with e^{-4t} <= 1e-3
    assert abs(c["t_p"] - t_p) < 1e-12 and abs(c["logit rate"] - 3) < 1e-9
    assert abs(c["t_dep"] - 22.05) < 1e-9 and abs(c["logit at t_dep"] + 6.15) < 1e-9
    assert abs(c["clock"] - 20) < 1e-9 and abs(c["t_rel"] - 21) < 0.1
    assert c["angle at t_p"] == 0.7 and c["angle at end"] == 0.7
    # L(t_dep) < 0 above: the clock was L's own zero (t = 20); a hold still tight at t_dep
    # (L = 80 - 3t, 13.85 at t_dep) is extrapolated at the fitted rate to 80/3
    d["tail_logit"] = 80 - 3 * t
    c = dp.logit_clock(d)
    assert abs(c["logit at t_dep"] - 13.85) < 1e-9 and abs(c["clock"] - 80 / 3) < 1e-9
    # a tail that never held the centre on the plateau (L < 0 from t_p on) has no clock
    d["tail_logit"] = -1.0 - t
    assert math.isnan(dp.logit_clock(d)["clock"])


def test_logit_gradient_is_how_fast_a_query_off_e_loses_the_hold():
    # A core at e and a tail at the target b: moving the query from e by a small angle u
    # against the gradient lowers L by |grad L| u (to first order).
    model = lp.model_for("E1", 1000.0)
    probe, e = dp.Probe(model), np.array([1.0, 0.0, 0.0])
    bt = model.B.T @ e
    b = bt / np.linalg.norm(bt)
    x, w = np.array([e, b]), np.array([1 - 1e-60, 1e-60])
    g = (np.eye(3) - np.outer(e, e)) @ model.B @ (b - e)
    u = 1e-6
    q = math.cos(u) * e - math.sin(u) * g / np.linalg.norm(g)
    tail = np.array([False, True])
    drop = probe.tail_logit(x, w, e, tail)[0] - probe.tail_logit(x, w, q, tail)[0]
    assert abs(drop / u - dp.logit_gradient(model)) < 1e-3 * dp.logit_gradient(model)


def _two_clusters_with_tails(probe):
    e = np.array([1.0, 0.0, 0.0])
    far = np.array([math.cos(0.5), math.sin(0.5), 0.0])
    x = np.array([e, e, far, -e, -far])
    w = np.array([0.3, 0.3, 0.02, 0.35, 0.03])
    return x, w, e


def test_interventions_keep_each_side_s_mass():
    probe = dp.Probe(lp.model_for("R1", 64.0))
    x, w, e = _two_clusters_with_tails(probe)
    side_mass = [w[x[:, 0] > 0].sum(), w[x[:, 0] < 0].sum()]
    xm, wm = x.copy(), w.copy()
    assert abs(dp.apply_event(probe, xm, wm, e, "move") - 0.05) < 1e-15
    assert np.allclose(xm[[2, 4]], [e, -e]) and np.array_equal(wm, w)
    xs, ws = x.copy(), w.copy()
    dp.apply_event(probe, xs, ws, e, "4")
    assert np.allclose(ws[[2, 4]], 4 * w[[2, 4]])
    assert np.allclose([ws[xs[:, 0] > 0].sum(), ws[xs[:, 0] < 0].sum()], side_mass)


def test_time_scales_of_closed_form_curves():
    # W2 = |t - 3| + 0.1: t* = 3, back at 1.5 x 0.1 at t = 3.05; ratio = t / 10 crosses 1/2
    # at t = 5 and stays above; an intervention at t = 4.9 turns that crossing into 4.9
    t = np.linspace(0.0, 10.0, 101)
    d = {"times": t, "w2": np.abs(t - 3) + 0.1, "ratio": t / 10, "share": 1 - t / 10,
         "tail_mass": np.exp(-2 * t), "core_ratio": np.ones_like(t)}
    s = dp.time_scales(d)
    assert s["t*"] == 3 and abs(s["t_dep"] - 3.05) < 1e-12 and abs(s["t_rel"] - 5) < 1e-12
    assert abs(s["tail rate"] - 2) < 1e-9
    d["ratio"] = np.where(t < 4.95, 0.3, 0.9)
    assert abs(dp.time_scales(d, t_event=5.0)["t_rel"] - 5.0) < 1e-12


def test_a_tiny_plan_end_to_end(tmp_path):
    plan = dp.Plan((dp.Run(64.0, 200, 0.5), dp.Run(64.0, 200, 0.5, "move", 0.25)))
    for run in plan.runs:
        d = dp.load(tmp_path, run)
        assert len(d["w2"]) == 3 and np.all(np.isfinite(d["ratio"]))
    assert float(dp.load(tmp_path, plan.runs[1])["acted"]) > 0
    dp.report(plan, tmp_path, "tiny", folder=tmp_path)
    assert "tail removed at t = 0.25" in (tmp_path / "tiny.md").read_text()


def test_cells_run_and_compare_with_tokens(tmp_path):
    plan = dp.Plan((dp.Run(64.0, 200, 0.5), dp.Run(64.0, 4, 0.5, solver="finite_volume"),
                    dp.Run(64.0, 8, 0.5, solver="finite_volume")))
    for run in plan.runs:
        d = dp.load(tmp_path, run)
        # at t = 0 both start from rho_0: W2 to Pi#rho_0 is the same up to their quadratures
        assert abs(d["w2"][0] - 1.0235) < 0.05
    labels = [r[1] for r in dp.resolution_rows(dp.saved_groups(plan, tmp_path))]
    assert labels == ["cells n = 4 -> cells n = 8 (to t = 0.5)", "N = 200 -> cells n = 8"]


def test_cells_to_tokens_keeps_every_cell_s_mass_and_the_moments():
    model = lp.model_for("R1", 64.0)
    sol = sp.FiniteVolumeSolver(model, 8).solve(lp.initial(), [0.0, 1.0])
    cells = sol.measure(1)
    second = (cells.points.T * cells.weights) @ cells.points
    for sub in (1, 2, 3):
        cloud = dp.cells_to_tokens(sol, 1, sub)
        assert len(cloud.weights) == 6 * 8 ** 2 * sub ** 2  # rho_1 > 0 everywhere here
        per_cell = np.bincount(fv_locate(sol.mesh, cloud.points), cloud.weights, 6 * 64)
        np.testing.assert_allclose(per_cell, sol.masses[1] / sol.masses[1].sum(), rtol=1e-12)
        # the nodes move inside each cell: moments change at the cell size's order only
        assert np.abs(cloud.mean() - cells.mean()).max() < 0.02
        assert np.abs((cloud.points.T * cloud.weights) @ cloud.points - second).max() < 0.02
    # the sub-cell nodes follow the reconstruction: they converge to the density's moments
    fine = dp.cells_to_tokens(sol, 1, 6)
    third = dp.cells_to_tokens(sol, 1, 3)
    assert np.abs(third.mean() - fine.mean()).max() < np.abs(cells.mean() - fine.mean()).max()


def test_handoff_run_continues_the_cells_with_tokens(tmp_path):
    plan = dp.Plan((dp.Run(64.0, 8, 1.0, t_event=0.5, solver="handoff", sub=2),
                    dp.Run(64.0, 8, 1.0, solver="finite_volume")))
    hand, cells = (dp.load(tmp_path, run) for run in plan.runs)
    assert int(hand["n"]) == 4 * 6 * 64
    np.testing.assert_array_equal(hand["w2"][:2], cells["w2"][:2])  # the cells up to t = 0.5
    assert 0 < abs(hand["w2"][2] - cells["w2"][2]) < 0.01    # then the tokens, from that state
    (row,) = dp.handoff_rows(dp.saved_groups(plan, tmp_path))
    assert row[2] == 4 * 6 * 64 and 0 < row[5] < 0.02 and 0 < row[6] < 0.02
    assert row[4] == 1.0  # within the 5% threshold to the end
    dp.report(plan, tmp_path, "tiny", folder=tmp_path)
    assert "then tokens 2^2 a cell" in (tmp_path / "tiny.md").read_text()


def test_core_ratio_of_a_ring_about_e_is_the_gaussian_closed_form():
    # Tokens on a ring of radius r about e (8 directions, symmetric): sigma^2 = 1 - cos r per
    # tangent direction, and at c = e the Gaussian-core ratio is 1 / (1 + beta sigma^2 <e, Be>)
    # because P_e V P_e B^T e = -<e, Be> P_e V e (A e = e).
    beta, r = 256.0, 0.1
    probe = dp.Probe(lp.model_for("R1", beta))
    e = np.array([1.0, 0.0, 0.0])
    phi = np.arange(8) * np.pi / 4
    x = np.stack([np.full(8, math.cos(r)), math.sin(r) * np.cos(phi), math.sin(r) * np.sin(phi)], 1)
    row = probe.row(x, np.full(8, 1 / 8), e)
    expected = 1 / (1 + beta * (1 - math.cos(r)) * (e @ probe.B @ e))
    assert abs(row["core_ratio"] - expected) < 1e-12


def test_band_rule_integrates_like_the_product_rule_and_refines_only_the_band():
    rho = sp.measures.VonMisesFisher([0.4, 0.3, 1.0], 1.5)
    ref = rho.quadrature(100000)
    second = (ref.points.T * ref.weights) @ ref.points
    e = np.array([1.0, 0.0, 0.0])
    counts = {}
    for k, along in ((1, 1), (3, 3), (3, 1)):
        cloud = dp.band_rule(rho, 4000, e, 0.1, k, along)
        assert abs(cloud.weights.sum() - 1) < 1e-14 and np.all(cloud.weights > 0)
        assert np.abs(cloud.mean() - ref.mean()).max() < 1e-12
        assert np.abs((cloud.points.T * cloud.weights) @ cloud.points - second).max() < 1e-12
        w = cloud.points @ e
        counts[k, along] = (np.sum(np.abs(w) < 0.1), np.sum(np.abs(w) > 0.1))
        rings = np.unique(np.round(w[np.abs(w) < 0.1], 12))
        assert len(rings) % 2 == 0 and np.min(np.abs(rings)) > 0  # no ring on the circle
    assert counts[3, 3][1] == counts[3, 1][1] == counts[1, 1][1]  # outside: the same nodes
    # inside: about k times the rings (each count rounded up to even), k_along the azimuths
    assert counts[3, 1][0] >= 2 * counts[1, 1][0] and counts[3, 3][0] == 3 * counts[3, 1][0]
