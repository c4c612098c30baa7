"""The invariant-circle study: its marginal against a closed form, its graded rules, the
dividing points, and a tiny chain end to end."""
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import spherepde as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "validation"))
import departure  # noqa: E402
import invariant_circle as ic  # noqa: E402
import late_phase as lp  # noqa: E402


def test_marginal_of_the_uniform_density_over_whole_equatorial_panels():
    # rows = n / 2: the four equatorial panels whole, whose edges |tan beta| = 1 lie at
    # z = +-arctan(cos a) (a: the angle from the panel's centre), so the marginal of 1 / (4 pi)
    # is 2 sin(arctan(cos a)) / (4 pi)
    n = 8
    sol = sp.FiniteVolumeSolver(lp.model_for("R1", 16.0), n).solve(sp.measures.Uniform(3), [0.0])
    theta = np.linspace(0.0, 2 * math.pi, 97)
    a = (theta + math.pi / 4) % (math.pi / 2) - math.pi / 4
    exact = 2 * np.sin(np.arctan(np.cos(a))) / (4 * math.pi)
    np.testing.assert_allclose(ic.marginal(sol, 0, theta, n // 2), exact, rtol=1e-12)
    # and the band of r rows: the mass of its cells, integrated by a token rule
    for rows in (1, 2, 4):
        theta, w = ic.circle_tokens(sol, 0, ic.graded_edges(400, [], 0.0), rows)
        band = sol.masses[0][ic.band_cells(n, rows)].sum() / sol.masses[0].sum()
        assert abs(w.sum() - band) < 1e-9
        # in 3D: each interval's q nodes across the band carry its mass on the circle, at
        # heights within the band, symmetric about z = 0 for this density
        for q in (1, 2, 3):
            at, z, m = ic.band_tokens(sol, 0, ic.graded_edges(400, [], 0.0), rows, q)
            np.testing.assert_array_equal(at, theta)
            np.testing.assert_allclose(m.sum(axis=1), w, rtol=1e-12)
            assert np.all(np.abs(z) < rows * math.pi / 2 / n)
            np.testing.assert_allclose(z, -z[:, ::-1], atol=1e-12)


def test_meridian_edges_cut_the_meridians_into_pieces_of_one_cell_each():
    from spherepde.density.finite_volume import locate
    rng = np.random.default_rng(5)
    for n in (8, 16):
        mesh = sp.sphere.cubed_sphere.CubedSphere(n)
        theta = np.concatenate([rng.uniform(0, 2 * math.pi, 300), [0.1, math.pi / 4 + 1e-3]])
        ze = ic.meridian_edges(n, theta)
        assert np.all(np.diff(ze, axis=1) >= 0) and np.all(ze[:, 0] == -math.pi / 2)
        lo, hi = ze[:, :-1], ze[:, 1:]

        def cell(f, lo=lo, hi=hi, theta=theta, mesh=mesh):
            z = lo + f * (hi - lo)
            x = np.stack([np.cos(theta)[:, None] * np.cos(z), np.sin(theta)[:, None] * np.cos(z),
                          np.sin(z)], axis=-1)
            return locate(mesh, x.reshape(-1, 3)).reshape(z.shape)

        piece = hi - lo > 1e-9
        ends, middle = (cell(1e-4), cell(1 - 1e-4)), cell(0.5)
        assert all(np.array_equal(e[piece], middle[piece]) for e in ends)
        # every edge is crossed: consecutive pieces lie in different cells
        nxt = [np.flatnonzero(row)[1:] for row in piece]
        prv = [np.flatnonzero(row)[:-1] for row in piece]
        assert all(np.all(m[a] != m[b]) for m, a, b in zip(middle, nxt, prv, strict=True))
        # off the panels' corners a meridian crosses n rows of its equatorial panel and the
        # polar panels' grid lines on the way to each pole: at least 2 n pieces
        assert np.all(piece.sum(axis=1) >= 2 * n)


def test_caps_and_band_carry_all_the_mass():
    # the band's tokens and the caps' (north and south of it, to the poles) integrate the
    # cells' mass over the whole sphere; for a uniform density the caps mirror each other
    n, rows = 8, 2
    sol = sp.FiniteVolumeSolver(lp.model_for("R1", 16.0), n).solve(sp.measures.Uniform(3), [0.0])
    edges = ic.graded_edges(200, [1.0], 1e-4)
    _, _, band = ic.band_tokens(sol, 0, edges, rows, 2)
    north, south = (ic.cap_tokens(sol, 0, edges, rows, q, north=up)
                    for q, up in ((2, True), (1, False)))
    total = band.sum() + north[2].sum() + south[2].sum()
    assert abs(total - sol.masses[0].sum()) < 1e-9
    edge = ic.band_edges(n, north[0], rows)
    assert np.all(north[1] >= edge[:, -1:]) and np.all(south[1] <= edge[:, :1])
    np.testing.assert_allclose(north[2].sum(axis=1), south[2][:, 0], rtol=1e-9)
    # the 2-node rule keeps the first moment, which the 1-node rule is
    mean = (north[1] * north[2]).sum(axis=1) / north[2].sum(axis=1)
    np.testing.assert_allclose(mean, -south[1][:, 0], rtol=1e-9)
    # the cap cut into parts by the count of cell pieces from the band's edge: the parts
    # share its mass, lie one above the other, mirrored in the south, and the first part of
    # each meridian is the cell row next to the band
    for up in (True, False):
        parts = [ic.cap_tokens(sol, 0, edges, rows, 1, up, part=p)
                 for p in ((0, 1), (1, 3), (3, None))]
        whole = ic.cap_tokens(sol, 0, edges, rows, 1, up)
        np.testing.assert_allclose(sum(p[2][:, 0] for p in parts), whole[2][:, 0], rtol=1e-12)
        z = np.column_stack([p[1][:, 0] for p in parts]) * (1 if up else -1)
        assert np.all(np.diff(z, axis=1) > 0)
        assert all(np.all(p[2] > 0) for p in parts)
    lo, hi = ic.band_edges(n, parts[0][0], rows)[:, -1], ic.band_edges(n, parts[0][0], rows + 1)
    assert np.all((z[:, 0] > lo) & (z[:, 0] < hi[:, -1]))   # the south, mirrored
    # cut instead at distances from the pole, through the cells: the parts share the cap's
    # mass, the uniform density's share of a zone is its area, and the top node of the
    # zone nearest the pole lies within it
    cuts = ic.Step(n, 0.0, caps=1, pole_cuts=(0.3, 0.1, 0.01)).cap_bounds
    assert [b["zone"] for b in cuts] == [(math.pi, 0.3), (0.3, 0.1), (0.1, 0.01), (0.01, 0.0)]
    for up in (True, False):
        zones = [ic.cap_tokens(sol, 0, edges, rows, 2, up, **b) for b in cuts]
        whole = ic.cap_tokens(sol, 0, edges, rows, 1, up)
        np.testing.assert_allclose(sum(p[2].sum(axis=1) for p in zones), whole[2][:, 0],
                                   rtol=1e-12)
        area = 1 - np.cos([0.3, 0.1, 0.01])   # of each polar cap, over the sphere's 2
        np.testing.assert_allclose([p[2].sum() for p in zones[1:]],
                                   sol.masses[0].sum() * -np.diff([*area, 0]) / 2, rtol=1e-3)
        top = math.pi / 2 - zones[-1][1] * (1 if up else -1)
        assert np.all((top > 0) & (top < 0.01))


def test_graded_edges_cover_the_circle_and_shrink_toward_the_dividing_points():
    uniform = ic.graded_edges(100, [1.0], 0.0)
    np.testing.assert_allclose(np.diff(uniform), 2 * math.pi / 100)
    for d_min in (1e-4, 1e-8):
        e = ic.graded_edges(100, [1.0, 1.0 + math.pi], d_min)
        assert np.all(np.diff(e) > 0) and math.isclose(e[-1] - e[0], 2 * math.pi)
        length = np.diff(e)
        for s in (1.0, 1.0 + math.pi):
            k = int(np.argmin(np.abs(0.5 * (e[1:] + e[:-1]) - s)))
            # the interval about the point is 2 d with GRADING d_min < d <= d_min, and the
            # next ones d (1 / GRADING - 1), d (1 / GRADING - 1) / GRADING, ...
            d = length[k] / 2
            assert ic.GRADING * d_min < d <= d_min * (1 + 1e-9)
            q = 1 / ic.GRADING
            for j in (1, 2, 3):
                assert math.isclose(length[k + j], d * (q - 1) * q ** (j - 1), rel_tol=1e-6)
                assert math.isclose(length[k - j], d * (q - 1) * q ** (j - 1), rel_tol=1e-6)
        # about 10 intervals per decade on each side of each point, the rest uniform
        extra = len(length) - 100
        assert 4 * 10 * math.log10(ic.GRADED_WIDTH / d_min) * 0.9 < extra + 4 < 4 * 11.5 * (
            math.log10(ic.GRADED_WIDTH / d_min) + 1)


def test_dividing_points_are_where_the_sides_change_wrap_included():
    theta = np.array([6.0, 0.5, 1.0, 3.0, 4.0])
    side = np.array([1, 1, -1, -1, 1])   # + from 4 to 0.5 (across 2 pi), - from 1 to 3
    assert np.allclose(sorted(ic.dividers_of(theta, side)), [0.75, 3.5])


def test_a_tiny_chain_end_to_end(tmp_path):
    plan = ic.Plan(cells=(8,), d_mins=(1e-3, 1e-4), tight=1e-4, m0=200, t_handoff=3.0, t_end=5.0,
                   finer_cells=((8, 3.5),), third_cells=((8, 3.5, 12),),
                   stepping_cells=((8, 3.5, 1e-4),), limiter_cells=((8, 3.5, "positivity", 8),),
                   bulk=((8, (400,)),), bulk_d_mins=(1e-4,),
                   levels=((8, (2,)),), levels_d_mins=(1e-3,), sphere=((8, (2,)),),
                   sphere_d_mins=(1e-3,), whole=((8, ((2, 1), (2, 1, 0.0, (1,)))),),
                   whole_d_mins=(1e-3,),
                   attention=(ic.Step(8, 1e-3, levels=2, caps=1, cap_parts=(1,)),))
    chain = ic.run_chain(plan, 8, tmp_path)
    assert [s.label for s, _ in chain] == ["uniform", "graded to 1e-03", "graded to 1e-04",
                                           "graded to 1e-04, tight tolerances",
                                           "graded to 1e-04, 400 uniform intervals",
                                           "uniform, 3D: 2 across the band",
                                           "graded to 1e-03, 3D: 2 across the band",
                                           "graded to 1e-03, 3D: 2 across the band, and the "
                                           "cells off it",
                                           "uniform, 3D: 2 across the band, and 1 per cap off "
                                           "it, graded",
                                           "graded to 1e-03, 3D: 2 across the band, and 1 per "
                                           "cap off it, graded",
                                           "uniform, 3D: 2 across the band, and 1 x 2 parts per "
                                           "cap off it, graded",
                                           "graded to 1e-03, 3D: 2 across the band, and 1 x 2 "
                                           "parts per cap off it, graded"]
    (uni, d0), (_, d1), (_, d2), (_, dt), (_, db), (_, u3), (_, g3), (_, gs), (_, uc), (_, gc) = (
        chain[:10])
    (_, up), (_, gp) = chain[10:]
    # each cap in two parts: the band's levels, then the parts of the north cap and of the
    # south cap, each its own level with its own points; the caps' mass is the same
    assert set(up["dividers"][:, 0]) == {0.0, 1.0, 2.0, 3.0, 4.0, 5.0}
    np.testing.assert_array_equal(gp["dividers_in"], up["dividers"])
    assert int(up["n"]) == 2 * 200 + 4 * ic.CAP_M0
    assert math.isclose(float(up["marginal_mass"]), float(uc["marginal_mass"]), rel_tol=1e-9)
    # the rule run again with its attention by level: the same run, and its levels' shares
    # of the tail's attention add up to the probe's
    (step, again), = ic.level_attention(plan, {8: chain}, tmp_path).items()
    np.testing.assert_array_equal(again["w2"], gp["w2"])
    after = again["times"] >= plan.t_handoff - 1e-9
    by_level = again["share_by_level"]
    assert by_level.shape == (after.sum(), step.n_levels) and by_level[:, 2:].max() > 0
    np.testing.assert_allclose(by_level.sum(axis=1), again["share"][after], rtol=1e-12)
    assert ic.part_names(step) == ["pieces 0 to 1", "pieces 1 to pole"]
    # with the caps graded: the band's two levels, then the north and the south cap's, each
    # locating its own points (two a level), the next rule graded about them; all the mass
    assert uc["dividers"].shape == (8, 2) and set(uc["dividers"][:, 0]) == {0.0, 1.0, 2.0, 3.0}
    np.testing.assert_array_equal(gc["dividers_in"], uc["dividers"])
    assert int(uc["n"]) == 2 * 200 + 2 * ic.CAP_M0 and int(gc["n"]) > int(uc["n"])
    assert abs(float(gc["marginal_mass"]) - 1.0) < 0.01
    # the 3D rules: each level locates its own dividing points, the next rule is graded
    # about them level by level, and the band's mass is carried whole
    assert u3["dividers"].shape == (4, 2) and set(u3["dividers"][:, 0]) == {0.0, 1.0}
    np.testing.assert_array_equal(g3["dividers_in"], u3["dividers"])
    assert int(u3["n"]) == 2 * 200 and abs(float(g3["marginal_mass"])
                                          - float(g3["band_mass"])) < 0.01
    np.testing.assert_array_equal(u3["w2"][:12], d0["w2"][:12])
    # with the cells off the band: a token each, on top of the same band's tokens
    # (seeded by the band's own 3D chain)
    rows = ic.band_rows(8)
    assert int(gs["n"]) == int(g3["n"]) + 6 * 64 - len(ic.band_cells(8, rows))
    np.testing.assert_array_equal(gs["dividers_in"], u3["dividers"])
    # each graded rule is graded about the points the previous one located; the tight repeat
    # about those of the rule of its d_min; a bulk chain starts from the main chain's rule
    # before its first d_min
    np.testing.assert_array_equal(d1["dividers_in"], d0["dividers"])
    np.testing.assert_array_equal(d2["dividers_in"], d1["dividers"])
    np.testing.assert_array_equal(dt["dividers_in"], d2["dividers_in"])
    np.testing.assert_array_equal(db["dividers_in"], d1["dividers"])
    # the bulk doubled, the graded part kept
    fine, coarse = (ic.graded_edges(m, d1["dividers"], 1e-4) for m in (400, 200))
    assert (int(db["n"]), int(d2["n"])) == (len(fine) - 1, len(coarse) - 1)
    near = [np.abs((e[:, None] - d1["dividers"] + np.pi) % (2 * np.pi) - np.pi).min(axis=1)
            < ic.GRADED_WIDTH for e in (fine, coarse)]
    np.testing.assert_array_equal(fine[near[0]], coarse[near[1]])
    assert abs(float(db["marginal_mass"]) - float(db["band_mass"])) < 0.01
    assert len(d0["dividers"]) == 2   # one dividing point on each side of the circle
    assert abs(float(d0["marginal_mass"]) - float(d0["band_mass"])) < 0.01
    np.testing.assert_array_equal(d0["w2"][:12], d1["w2"][:12])   # the cells before t = 3
    assert np.max(np.abs(dt["w2"] - d2["w2"])) < 1e-3
    # the same chain again is read back, not recomputed
    again = ic.run_chain(plan, 8, tmp_path, compute_missing=False)
    assert all(d is not None for _, d in again)
    # the cells at 2n from n's state: the same state at the handoff, to half a coarse cell's
    # width (the probe puts each cell's mass at its centre; n = 8 cells are 0.19 rad across)
    fine = ic.finer_cells(8, 3.5, plan, tmp_path)
    assert len(fine["w2"]) == 3 and int(fine["n"]) == 16
    assert abs(fine["w2"][0] - d0["w2"][12]) < 1.52 / 8 / 2
    # a third resolution from n's state, not nested in n's cells: the same state too
    third = ic.finer_cells(8, 3.5, plan, tmp_path, to=12)
    assert int(third["n"]) == 12 and abs(third["w2"][0] - d0["w2"][12]) < 1.52 / 8 / 2
    # n's state on the same cells with a tighter multirate tolerance: the state itself
    tight = ic.finer_cells(8, 3.5, plan, tmp_path, macro_tol=1e-4)
    state = ic.cells_state(8, plan.t_handoff, plan.t_end, tmp_path)[3].measure(0)
    w2 = departure.w2_two_antipodal(state.points, state.weights, departure.E,
                                    ic.initial().hemisphere_mass(departure.E))
    assert int(tight["n"]) == 8 and math.isclose(tight["w2"][0], w2, rel_tol=1e-12)
    # and with another limiter: the state itself again, stored apart from the default's runs
    lim = ic.finer_cells(8, 3.5, plan, tmp_path, limiter="positivity")
    assert int(lim["n"]) == 8 and math.isclose(lim["w2"][0], w2, rel_tol=1e-12)
    assert len(list(tmp_path.glob("R1_cells_beta=*_n=8_to8_t=3.5_limiter=positivity_*.npz"))) == 1
    ic.report(plan, tmp_path, "tiny", folder=tmp_path)
    text = (tmp_path / "tiny.md").read_text()
    assert "graded to 1e-04, tight tolerances" in text and "not computed" not in text
    assert "n = 8's state at 3 on 12 cells" in text
    assert "| 8 | 1e-04 | 400 vs 200 |" in text   # the bulk table
    assert "| 8 | 1e-03 | 3D, 2 across, vs circle |" in text   # the 3D table
    # the stepping table, against stand-in cells 0.01 off the tighter run
    shifted = {k: np.asarray(tight[k]) + (0.01 if k.startswith("w2") else 0.0)
               for k in ("times", "w2", "w2_term")}
    rows = ic.stepping_table(plan, {(8, 1e-4): tight}, {8: chain}, {8: shifted})
    assert [r[2] for r in rows] == [3.0] and math.isclose(rows[0][3], 0.01, rel_tol=1e-9)
    # the limiter's change against the step from n to the finest cells: 0.01 and 0.04 here
    below, above = ({k: np.asarray(lim[k]) + (dw if k.startswith("w2") else 0.0)
                     for k in ("times", "w2", "w2_term")} for dw in (-0.01, 0.03))
    rows = ic.limiter_table(plan, {(8, "positivity", 8): lim}, {8: above}, {}, {8: below})
    assert [r[:4] + [r[7]] for r in rows] == [[8, "positivity", 8, 3.0, 16]]
    assert np.allclose([rows[0][6], rows[0][9]], [0.01, 0.04], rtol=1e-9)
    assert "n = 8's state at 3 on 8 cells, limiter positivity" in text
    assert "| 8 | 1e-03 | 3D, 2 across + off band, vs band only |" in text
    assert "| 8 | 1e-03 | 3D, 2 across + 1 per cap, vs off band a token per cell |" in text
    assert "| 8 | 1e-03 | 3D, 2 across + 1 x 2 parts per cap, vs band only |" in text
    assert "tail attention comes from (n = 8, 2 across + 1 x 2 parts per cap, 1e-03)" in text
    # the caps' top node: the top part's node lies nearer the pole than the whole cap's one
    # node (its mean height); the tiny chain ends before the gaps' times, so no gap is given
    top, fits = ic.top_node_table(plan, {8: fine}, {8: chain}, tmp_path)
    assert [r[2] for r in top] == ["1 per cap", "1 x 2 parts per cap"] and fits == []
    assert float(top[0][3]) > float(top[1][3]) > 0 and set(top[0][4:]) == {"-"}


def test_finer_cells_resume_from_their_checkpoint(tmp_path, monkeypatch):
    plan = ic.Plan(cells=(8,), d_mins=(1e-3,), tight=1e-3, m0=200, t_handoff=3.0, t_end=5.0)
    whole = ic.finer_cells(8, 4.0, plan, tmp_path / "whole")
    real, calls = ic._finer_checkpoint, []

    class Stop(Exception):
        pass

    def stop_after_two(*args):
        real(*args)
        calls.append(args[2])
        if len(calls) == 2:
            raise Stop

    monkeypatch.setattr(ic, "_finer_checkpoint", stop_after_two)
    with pytest.raises(Stop):
        ic.finer_cells(8, 4.0, plan, tmp_path / "cut")
    cut = ic.finer_reached(8, 4.0, plan, tmp_path / "cut")
    assert bool(cut["partial"]) and len(cut["w2"]) == 3
    np.testing.assert_array_equal(cut["w2"], whole["w2"][:3])
    monkeypatch.setattr(ic, "_finer_checkpoint", real)
    resumed = ic.finer_cells(8, 4.0, plan, tmp_path / "cut")
    assert "partial" not in resumed and len(resumed["w2"]) == len(whole["w2"])
    # the macro step restarts once, at the output resumed from: the step control's tolerance
    np.testing.assert_allclose(resumed["w2"], whole["w2"], atol=1e-6)
    np.testing.assert_allclose(resumed["w2_term"], whole["w2_term"], atol=1e-6)
    assert not list((tmp_path / "cut").glob("*.partial.npz"))


def test_first_order_extrapolation_removes_an_error_that_halves():
    t = np.linspace(12.0, 16.0, 17)
    limit = {"w2": 0.2 + 0.01 * t, "w2_term": 0.4 - 0.02 * t}
    err = np.sin(t)
    coarse = {"times": t, **{k: v + 2 * err for k, v in limit.items()}}
    fine = {"times": t[::2], **{k: (v + err)[::2] for k, v in limit.items()}}
    out = ic.extrapolated(fine, coarse)
    np.testing.assert_array_equal(out["times"], t[::2])
    for k, v in limit.items():
        np.testing.assert_allclose(out[k], v[::2], atol=1e-14)


def test_three_cell_resolutions_are_extrapolated_at_each_spans_observed_order():
    plan = ic.Plan(cells=(64,), d_mins=(), tight=0.0, t_handoff=12.0, t_end=18.0)
    t = np.linspace(12.0, 18.0, 25)
    limit = {"w2": 0.2 + 0.01 * t, "w2_term": 0.4 - 0.02 * t}
    # an error of order 1 over the first two spans, of order 2 over the last
    order = np.where(t <= 16.0 + 1e-9, 1.0, 2.0)

    def run(n):
        return {"times": t, **{k: v + 3.0 * (1 + 0.1 * np.sin(t)) / n**order
                               for k, v in limit.items()}}

    own, mid, fine = run(64), run(96), run(128)
    got, bar = ic.observed_limit(plan, [(64, own), (96, mid), (128, fine)])
    for k, v in limit.items():
        np.testing.assert_allclose(got[k], v, atol=1e-12)
        np.testing.assert_allclose(got[k] - bar[k], np.abs(fine[k] - v), atol=1e-12)
    rows = ic.cells_order_table(plan, {64: fine}, {(64, 96): mid}, {64: own})
    assert [r[:3] for r in rows] == [[64, "64/96/128", e] for e in (14.0, 16.0, 18.0)]
    assert np.allclose([r[6] for r in rows], [1.0, 1.0, 2.0], atol=1e-9)
    # the first-order bar: |128 - 64| over the ratio less one
    np.testing.assert_allclose(rows[0][8], np.abs(fine["w2"] - own["w2"])[t <= 14.0].max())
    # where the middle resolution does not lie between the others, nothing is extrapolated:
    # the finest run stands, with the three's spread as its bar
    odd = {"times": t, **{k: v + 1.0 for k, v in mid.items() if k != "times"}}
    got, bar = ic.observed_limit(plan, [(64, own), (96, odd), (128, fine)])
    np.testing.assert_array_equal(got["w2"], fine["w2"])
    spread = np.ptp([own["w2"], odd["w2"], fine["w2"]], axis=0)
    np.testing.assert_allclose(got["w2"] - bar["w2"], spread, atol=1e-12)
    assert all(math.isnan(r[6]) for r in ic.cells_order_table(plan, {64: fine}, {(64, 96): odd},
                                                             {64: own}))
    # a fourth resolution that stopped at t = 15 (a checkpoint) takes part in the spans it
    # reached: there the three finest are fitted, after it the three before
    top = {**run(192), "partial": np.array(True)}
    top = {k: (v[t <= 15.0] if k != "partial" else v) for k, v in top.items()}
    ladder = ic.cell_ladder(64, own, fine, {(64, 192): top, (64, 96): mid, (32, 48): fine})
    assert [m for m, _ in ladder] == [64, 96, 128, 192]
    got, bar = ic.observed_limit(plan, ladder)
    for k, v in limit.items():
        np.testing.assert_allclose(got[k], v, atol=1e-12)
        early = t <= 14.0
        np.testing.assert_allclose((got[k] - bar[k])[early], np.abs(top[k] - v[t <= 15.0])[
            :early.sum()], atol=1e-12)
        np.testing.assert_allclose((got[k] - bar[k])[~early], np.abs(fine[k] - v)[~early],
                                   atol=1e-12)
    rows = ic.cells_order_table(plan, {64: fine}, {(64, 96): mid, (64, 192): top}, {64: own})
    assert [r[1] for r in rows] == ["96/128/192", "64/96/128", "64/96/128"]
    np.testing.assert_allclose(rows[0][8], np.abs(top["w2"] - mid["w2"][t <= 15.0])[
        t[t <= 15.0] <= 14.0].max())
    (_, _, _), (words, _, _) = ic.cell_references(plan, {64: fine}, {64: own},
                                                 {(64, 96): mid, (64, 192): top})[64]
    assert words.startswith("cells 64, 96, 128, 192 (reached t = 15) from its state")


def test_gauss_rule_integrates_the_measure_to_degree_2q_minus_1():
    rng = np.random.default_rng(3)
    z, m = rng.uniform(-0.02, 0.03, (5, 40)), rng.uniform(0.0, 1.0, (5, 40))
    m[0, 3:] = 0.0   # three points carry all the mass: q = 3 is exact, q = 4 falls back
    for q in (1, 2, 3, 4):
        nodes, weights = ic.gauss_rule(z, m, q)
        assert np.all(np.diff(nodes, axis=1) >= 0) and np.all(weights >= 0)
        np.testing.assert_allclose(weights.sum(axis=1), m.sum(axis=1), rtol=1e-12)
        for k in range(2 * q):
            exact = (m * z ** k).sum(axis=1)
            got = (weights * nodes ** k).sum(axis=1)
            check = slice(0, 5) if q <= 3 else slice(1, 5)
            np.testing.assert_allclose(got[check], exact[check], rtol=1e-8,
                                       atol=1e-14 * 0.03 ** k)
    # fewer points with mass than nodes: the mean, the mass shared
    nodes, weights = ic.gauss_rule(z[:1], m[:1], 4)
    np.testing.assert_allclose(nodes, (m[0] @ z[0]) / m[0].sum())
    np.testing.assert_allclose(weights, m[0].sum() / 4)


def test_a_whole_sphere_chain_stops_at_its_own_d_min():
    plan = ic.Plan(cells=(8,), d_mins=(), tight=1e-4, whole_d_mins=(1e-3, 1e-4, 1e-5),
                   whole=((8, ((2, 1), (2, 3, 1e-4))),))
    steps = [(s.caps, s.d_min, parent) for s, parent, _ in plan.chain(8) if s.caps]
    assert [(c, d) for c, d, _ in steps] == [(1, 0.0), (1, 1e-3), (1, 1e-4), (1, 1e-5),
                                             (3, 0.0), (3, 1e-3), (3, 1e-4)]
    # each graded from the rule before it in its own chain
    assert [p and (p.caps, p.d_min) for _, _, p in steps] == [
        None, (1, 0.0), (1, 1e-3), (1, 1e-4), None, (3, 0.0), (3, 1e-3)]
    # a stop alone leaves the cap whole (one Gauss rule to the pole); parts come after it
    assert all(s.cap_parts == () for s, _, _ in plan.chain(8))
    parts = ic.Plan(cells=(8,), d_mins=(), tight=1e-4, whole_d_mins=(1e-3, 1e-4),
                    whole=((8, ((2, 1, 1e-3, (2, 6)),)),))
    assert [(s.d_min, s.cap_parts) for s, _, _ in parts.chain(8) if s.caps] == [
        (0.0, (2, 6)), (1e-3, (2, 6))]
    cuts = ic.Plan(cells=(8,), d_mins=(), tight=1e-4, whole_d_mins=(1e-3, 1e-4),
                   whole=((8, ((2, 1, 1e-3, (), (0.1, 0.01)),)),))
    assert [(s.d_min, s.cap_parts, s.pole_cuts) for s, _, _ in cuts.chain(8) if s.caps] == [
        (0.0, (), (0.1, 0.01)), (1e-3, (), (0.1, 0.01))]
    win = ic.Plan(cells=(8,), d_mins=(), tight=1e-4, whole_d_mins=(1e-3, 1e-4),
                  whole=((8, ((2, 2, 1e-3, (), (), ((1.4, 1.8),), (1, (0.5,))),)),))
    assert [(s.d_min, s.caps, s.window, s.fine) for s, _, _ in win.chain(8) if s.caps] == [
        (0.0, 2, ((1.4, 1.8),), (1, (0.5,))), (1e-3, 2, ((1.4, 1.8),), (1, (0.5,)))]
    assert {s.all_round for s, _, _ in win.chain(8) if s.caps} == {0.0}
    rnd = replace(win, whole=((8, ((2, 2, 1e-3, (), (), ((1.4, 1.8),), (1, (0.5,)), 0.5),)),))
    assert [(s.d_min, s.all_round) for s, _, _ in rnd.chain(8) if s.caps] == [(0.0, 0.5),
                                                                               (1e-3, 0.5)]


def test_the_caps_z_rules_levels_and_their_next_coarser_rule():
    parts = ic.Step(64, 1e-3, levels=2, caps=2, cap_parts=(2, 6, 14))
    assert parts.n_levels == 2 + 2 * 2 * 4 and parts.per_cap == "2 x 4 parts per cap"
    assert parts.name.endswith("_z2_caps2_parts2-6-14")
    # one node fewer per part, then one Gauss rule over the cap with as many nodes
    one = parts.z_coarser
    assert (one.caps, one.cap_parts, one.d_min, one.levels) == (1, (2, 6, 14), 1e-3, 2)
    assert (one.z_coarser.caps, one.z_coarser.cap_parts) == (4, ())
    assert ic.Step(64, 1e-3, levels=2, caps=1).z_coarser is None
    pole = ic.Step(64, 1e-3, levels=2, caps=2, pole_cuts=(0.3, 0.1, 0.03, 0.01))
    assert pole.n_levels == 2 + 2 * 2 * 5 and pole.per_cap == "2 x 5 parts to the pole per cap"
    assert pole.name.endswith("_z2_caps2_pole0.3-0.1-0.03-0.01")
    assert (pole.z_coarser.z_coarser.caps, pole.z_coarser.z_coarser.pole_cuts) == (5, ())
    # with windows: the caps' rule off them, then the fine rule's parts in them, per cap
    win = ic.Step(64, 1e-3, levels=2, caps=2, window=((1.4, 1.8),), fine=(3, (0.9, 0.5)))
    assert win.n_levels == 2 + 2 * (2 + 3 * 3)
    assert win.per_cap == "2 per cap (3 x 3 parts in the windows)"
    assert win.name.endswith("_z2_caps2_win1.4-1.8_fine3x0.9-0.5")
    assert [(q, inside) for _, q, inside in win.cap_layout] == [(2, False)] + [(3, True)] * 3
    assert [win.cap_level(lev) for lev in (2, 3, 4, 12, 13, 15, 23)] == [
        (0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 3, 2), (1, 0, 0), (1, 1, 0), (1, 3, 2)]
    assert ic.part_names(win)[:2] == ["off windows: pieces 0 to pole",
                                      "windows: pi/2 - z edge to 0.9"]
    # one node fewer per part in the windows, down to one; the rule off them stays
    assert (win.z_coarser.fine, win.z_coarser.caps) == ((2, (0.9, 0.5)), 2)
    assert win.z_coarser.z_coarser.z_coarser is None
    assert ic.rule_step(win.cap_rule).n_levels == win.n_levels - 2
    assert ic.spec_of(win, [], ic.QUICK)["fine"] == [3, [0.9, 0.5]]
    assert "window" not in ic.spec_of(pole, [], ic.QUICK)


def test_windows_cut_the_circle_into_intervals_in_and_off_them():
    edges = ic.graded_edges(50, [1.0], 1e-3)
    window = ((0.9, 1.3), (6.0, 0.2))   # the second across 2 pi
    (ilo, ihi), (olo, ohi) = (ic.windowed(edges, window, inside) for inside in (True, False))
    lo, hi = np.concatenate([ilo, olo]), np.concatenate([ihi, ohi])
    o = np.argsort(lo)
    # together they tile the circle, every bound is an edge, and each lies on its side
    np.testing.assert_allclose(lo[o][1:], hi[o][:-1], atol=0)
    assert math.isclose(hi.max() - lo.min(), 2 * math.pi)
    assert math.isclose((ihi - ilo).sum(), 0.4 + 2 * math.pi - 5.8)
    for b in (0.9, 1.3, 6.0, 0.2):
        assert np.min(np.abs((lo - b + math.pi) % (2 * math.pi) - math.pi)) < 1e-12
    mid = (0.5 * (ilo + ihi)) % (2 * math.pi)
    assert np.all(((mid > 0.9) & (mid < 1.3)) | (mid > 6.0) | (mid < 0.2))
    # the graded intervals about the point in the window are kept there, and only there
    assert (ihi - ilo).min() < 2e-3 < (ohi - olo).min()
    # a windowed cap: the levels off and in the windows carry the cap's mass (200 intervals:
    # their edges hit the panels' corners, where the meridians' pieces bend)
    n, rows = 8, 2
    sol = sp.FiniteVolumeSolver(lp.model_for("R1", 16.0), n).solve(sp.measures.Uniform(3), [0.0])
    step = ic.Step(n, 1e-3, levels=2, caps=2, window=window, fine=(1, (0.9, 0.5)))
    _, x, w, level = ic.levels_tokens(sol, step, [], 200, rows)
    assert sorted(set(level)) == list(range(step.n_levels))
    _, _, band = ic.band_tokens(sol, 0, ic.graded_edges(200, [], 0.0), rows, 2)
    assert abs(w.sum() - sol.masses[0].sum()) < 1e-9
    assert abs(w[level < 2].sum() - band.sum()) < 1e-12
    theta = np.arctan2(x[:, 1], x[:, 0]) % (2 * math.pi)
    inside = (((theta > 0.9) & (theta < 1.3)) | (theta > 6.0) | (theta < 0.2))
    fine = np.array([step.cap_layout[step.cap_level(lev)[1]][2] if lev >= 2 else False
                     for lev in level])
    assert np.array_equal(inside[level >= 2], fine[level >= 2])


def test_the_fine_rule_goes_all_round_near_the_pole_and_the_rule_off_the_windows_stops():
    win = ((0.9, 1.3), (6.0, 0.2))
    step = ic.Step(8, 1e-3, levels=2, caps=2, window=win, fine=(1, (0.9, 0.5)), all_round=0.5)
    assert [(b, q, inside) for b, q, inside in step.cap_layout] == [
        ({"part": (0, None), "zone": (math.pi, 0.5)}, 2, False),
        ({"zone": (math.pi, 0.9)}, 1, True), ({"zone": (0.9, 0.5)}, 1, True),
        ({"zone": (0.5, 0.0)}, 1, None)]
    assert ic.part_names(step) == ["off windows: pi/2 - z edge to 0.5",
                                   "windows: pi/2 - z edge to 0.9", "windows: pi/2 - z 0.9 to 0.5",
                                   "all round: pi/2 - z 0.5 to 0"]
    assert step.name.endswith("_fine1x0.9-0.5_round0.5")
    assert step.per_cap == ("2 per cap (1 x 3 parts in the windows, all round within 0.5 of "
                            "the pole)")
    assert ic.spec_of(step, [], ic.QUICK)["all_round"] == 0.5
    assert "all_round" not in ic.spec_of(replace(step, all_round=0.0), [], ic.QUICK)
    assert ic.rule_step(step.cap_rule).cap_layout == step.cap_layout
    assert step.z_coarser is None and replace(step, fine=(2, (0.9, 0.5))).z_coarser == step
    # the parts halved in height: one node per part is refined in h, and coarsened back
    cuts = ic.halved((0.9, 0.5))
    assert cuts == (1.0404, 0.9, 0.7, 0.5, 0.25)
    assert replace(step, fine=(1, cuts)).z_coarser == step
    assert replace(step, fine=(2, cuts)).z_coarser == replace(step, fine=(1, cuts))
    assert replace(step, fine=(1, cuts), all_round=0.7).z_coarser is None
    assert replace(step, fine=(1, (0.9, 0.7, 0.5))).z_coarser is None
    # a name spells the cuts out, unless they are too many for a file name: then the cuts
    # they were halved from, and how many times
    assert ic.cuts_tag(cuts) == "1.0404-0.9-0.7-0.5-0.25"
    many = ic.halved(ic.halved(ic.WINDOW_CUTS))
    assert ic.cuts_tag(many) == ic.cuts_tag(ic.halved(ic.WINDOW_CUTS)) + "_halved1"
    assert len(ic.cuts_tag(ic.halved(many))) <= ic.CUTS_TAG_MAX + len("_halved2")
    # parts cut toward the pole off the windows stop at the same distance
    cut = replace(step, pole_cuts=(0.7, 0.3, 0.1))
    assert [b for b, _, inside in cut.cap_layout if inside is False] == [
        {"zone": (math.pi, 0.7)}, {"zone": (0.7, 0.5)}]
    for bad in ({"all_round": 0.6}, {"all_round": 0.5, "window": (), "fine": ()}):
        with pytest.raises(ValueError, match="all_round"):
            replace(step, **bad)
    # the levels carry the cap's mass; off the windows none nearer the pole than 0.5, all
    # round none farther, and those on both sides of the windows
    sol = sp.FiniteVolumeSolver(lp.model_for("R1", 16.0), 8).solve(sp.measures.Uniform(3), [0.0])
    _, x, w, level = ic.levels_tokens(sol, step, [], 200, 2)
    assert abs(w.sum() - sol.masses[0].sum()) < 1e-9
    where = [step.cap_layout[step.cap_level(lev)[1]][2] if lev >= 2 else "band" for lev in level]
    where = np.array(where, dtype=object)
    polar = np.pi / 2 - np.abs(np.arcsin(np.clip(x[:, 2], -1, 1)))
    off, round_ = np.equal(where, False), np.equal(where, None)
    assert off.any() and np.all(polar[off] > 0.5 - 1e-12)
    assert round_.any() and np.all(polar[round_] < 0.5 + 1e-12)
    theta = np.arctan2(x[:, 1], x[:, 0]) % (2 * math.pi)
    assert ic.in_windows(theta[round_], win).any() and not ic.in_windows(theta[round_], win).all()


def test_a_windowed_rules_z_error_takes_the_rules_coarser_in_and_off_the_windows():
    step = ic.Step(8, 1e-4, levels=2, caps=4, window=((1.4, 1.8),), fine=(2, (0.5,)))
    done = {replace(step, caps=2): {}, replace(step, caps=3): {},
            replace(step, caps=2, d_min=1e-3): {}, replace(step, caps=3, window=((1.3, 1.8),)): {},
            replace(step, caps=3, all_round=0.5): {}, replace(step, caps=5): {}}
    # off the windows the nearest coarser rule computed; in them none with one node per part
    assert ic.coarser_z_rules(step, done) == [replace(step, caps=3)]
    assert ic._z_error_words(step, [replace(step, caps=3)]) == (
        "; tokens' error also vs 3 per cap (2 x 2 parts in the windows); the caps' z-error in "
        "the windows not measured")
    done[step.z_coarser] = {}
    both = ic.coarser_z_rules(step, done)
    assert both == [step.z_coarser, replace(step, caps=3)]
    assert ic._z_error_words(step, both).count(" and ") == 1
    assert "not measured" not in ic._z_error_words(step, both)
    assert ic._z_error_words(step, []) == (
        "; the caps' z-error in the windows and off them not measured")
    assert ic.coarser_z_rules(replace(step, caps=2), done) == []
    plain = ic.Step(8, 1e-4, levels=2, caps=2)
    assert ic._z_error_words(plain, []).startswith("; the caps' z-error not measured")
    # a rule finer than every coarser chain: with ``above``, each at its finest d_min
    finer = replace(step, d_min=1e-6)
    assert ic.coarser_z_rules(finer, done) == []
    above = ic.coarser_z_rules(finer, done, above=True)
    assert above == [step.z_coarser, replace(step, caps=3)]
    assert ic._z_error_words(finer, above) == (
        "; tokens' error also vs 4 per cap (1 x 2 parts in the windows) at 1e-04 and 3 per cap "
        "(2 x 2 parts in the windows) at 1e-04")
    done[replace(step.z_coarser, d_min=1e-5)] = {}
    assert ic.coarser_z_rules(finer, done, above=True)[0].d_min == 1e-5


def test_caps_table_sets_the_chains_side_by_side_where_one_of_them_stops():
    plan = ic.Plan(cells=(8,), d_mins=(), tight=1e-4, t_handoff=3.0, t_end=8.0)
    t = np.linspace(0.0, 8.0, 33)
    fine = {"times": t[t >= 3.0], "w2": 0.1 + 0 * t[t >= 3.0], "w2_term": 0.5 + 0 * t[t >= 3.0]}

    def off(dw2, dterm):
        return {"times": t, "w2": 0.1 + dw2 + 0 * t, "w2_term": 0.5 + dterm + 0 * t}

    chain = [(ic.Step(8, 0.0, levels=2, caps=1), off(0.5, 0.5)),
             (ic.Step(8, 1e-3, levels=2, caps=1), off(0.03, -0.01)),
             (ic.Step(8, 1e-4, levels=2, caps=1), off(0.02, 0.0)),
             (ic.Step(8, 1e-3, levels=2, caps=2), off(-0.01, 0.02)),
             (ic.Step(8, 1e-4, levels=2, caps=2), None),   # not computed: q' = 2 stops
             (ic.Step(8, 1e-3, levels=2, caps=3), off(0.0, 0.0)),
             (ic.Step(8, 1e-4, levels=2, caps=3), off(0.0, -0.005)),
             (ic.Step(8, 1e-5, levels=2, caps=3), off(0.0, 0.0))]   # q' = 3's alone
    caps, rows = ic.caps_table(plan, {8: fine}, {8: chain}, {8: off(0.004, 0.0)})
    assert caps == ["1 per cap", "2 per cap", "3 per cap"]
    assert [(r[2], r[3]) for r in rows] == [(d, t) for d in ("1e-03", "1e-04")
                                            for t in (3.0, 5.0, 7.0)]
    assert rows[0] == [8, 2, "1e-03", 3.0, "0.0040", "0.0300 (+0.0300)", "0.0200 (-0.0100)",
                       "0.0000 (+0.0000)"]
    assert rows[3] == [8, 2, "1e-04", 3.0, "0.0040", "0.0200 (+0.0200)", "-",
                       "0.0050 (+0.0000)"]


def test_a_confirmation_sums_the_tokens_errors_over_their_refinements():
    t = np.linspace(12.0, 20.0, 33)

    def run(slope):
        return {"times": t, "w2": 0.3 + slope * (t - 12.0), "w2_term": 0.6 + 0 * t}

    cells, coarse, tokens = run(0.0), run(0.0), run(0.0035)  # gap 0.0035 (t - 12)
    by_d_min, by_q = run(0.0025), run(0.008)                  # errors 0.001, 0.0045 (t - 12)
    one = ic.confirmation_row("x", tokens, [by_d_min], cells, coarse, 12.0, [20.0])
    both = ic.confirmation_row("x", tokens, [by_d_min, by_q], cells, coarse, 12.0, [20.0])
    assert one[2] == "0.0280 (0.0080)" and both[2] == "0.0280 (0.0440)"
    # one error: confirmed while the gap is within 5% of min W2 (0.015, t - 12 < 4.29);
    # the sum of both stays above the gap to the end
    assert one[1] == 16.25 and both[1] == 20.0


def test_window_table_gives_each_fine_levels_points_and_their_margin():
    step = ic.Step(8, 1e-3, levels=2, caps=1, window=((1.4, 1.8),), fine=(1, (0.5,)))
    # levels: the band's 0, 1; north: off the windows 2, fine parts 3, 4; south: 5, 6, 7
    points = np.array([[0, 1.6], [2, 1.6], [3, 1.62], [4, 1.5], [4, 4.7], [6, 1.61],
                       [7, 1.78]])
    chain = [(replace(step, d_min=0.0), {"dividers": points[:1]}), (step, {"dividers": points})]
    rows = ic.window_table({8: chain})
    assert [r[3:] for r in rows] == [
        ["windows: pi/2 - z edge to 0.5", 0, "1.6200", "1.6100", "0.180", 0],
        ["windows: pi/2 - z 0.5 to 0", 0, "1.5000 4.7000", "1.7800", "0.020", 1]]
    assert rows[0][:3] == [8, "1 per cap (1 x 2 parts in the windows)", "1e-03"]
    # with two nodes per part the south's twin of the north's node j is its node 1 - j (z
    # ascending in both caps)
    two = replace(step, fine=(2, (0.5,)))   # north: off 2, fine 3 to 6; south: off 7, 8 to 11
    points = np.array([[3, 1.61], [4, 1.62], [8, 1.52], [9, 1.51]])
    rows = ic.window_table({8: [(two, {"dividers": points})]})
    assert [r[4:7] for r in rows[:2]] == [[0, "1.6100", "1.5100"], [1, "1.6200", "1.5200"]]
    assert ic.in_windows(1.5, two.window) and not ic.in_windows(1.81, two.window)


def test_core_width_reads_a_deficit_as_the_gaussian_cores_deviation():
    probe = ic.Probe(ic.model_for("R1", ic.BETA))
    for angle in (0.0, 0.3, 0.45):
        c = ic.circle_point(probe, angle)
        assert abs(c[2]) < 1e-15 and abs(c @ ic.E - np.cos(angle)) < 1e-15
        for sigma in (0.001, 0.005, 0.02):
            deficit = 1.0 - probe.core_ratio(c, sigma ** 2)
            assert deficit > 0
            assert abs(ic.core_width(probe, angle, deficit) - sigma) < 1e-8
    assert ic.core_width(probe, 0.3, 0.0) == 0.0
    assert math.isnan(ic.core_width(probe, 0.3, -1e-3))        # a core faster than a point
    assert math.isnan(ic.core_width(probe, 0.3, 0.99))         # beyond any core below the cap
    assert math.isnan(ic.core_width(probe, math.nan, 0.01))
    assert math.isnan(ic.core_width(probe, 0.6, 0.01))   # the deficit turns: more than one width


def test_core_table_sets_the_cells_ladder_beside_the_tokens_graded_rules():
    plan = ic.Plan(cells=(8,), d_mins=(), tight=1e-4, t_handoff=3.0, t_end=8.0)
    t = np.linspace(0.0, 8.0, 33)
    probe = ic.Probe(ic.model_for("R1", ic.BETA))
    c = ic.circle_point(probe, 0.3)

    def run(sigma, upto=8.0):
        keep = t <= upto + 1e-9
        ratio = probe.core_ratio(c, sigma ** 2) if sigma else 0.0
        return {"times": t[keep], "core_ratio": ratio + 0 * t[keep], "angle": 0.3 + 0 * t[keep]}

    cells, runs = {8: run(0.02)}, {8: run(0.01)}
    third = {(8, 24): run(0.005, upto=5.0), (4, 12): run(0.0)}   # another state's
    chain = [(ic.Step(8, 0.0, levels=2, caps=1), run(0.0)),          # ungraded: left out
             (ic.Step(8, 1e-5, levels=2, caps=1), run(0.0)),         # coarser than the
             (ic.Step(8, 1e-6, levels=2, caps=1), run(0.002)),       # finest of its chain
             (ic.Step(8, 1e-6, levels=2, caps=2), run(0.003)),
             (ic.Step(8, 1e-4, levels=2, caps=3), run(0.0)),         # not graded enough
             (ic.Step(8, 1e-6, levels=2), run(0.0))]                 # not whole-sphere
    limited = {(8, "positivity", 8): run(0.015), (8, "positivity", 16): None}
    cols, rows = ic.core_table(plan, runs, third, cells, {8: chain}, limited)
    assert cols == [(8, None), (16, None), (24, None), (8, "positivity")]
    assert [r[1] for r in rows] == [3.0, 5.0, 7.0]
    np.testing.assert_allclose(rows[0][7:11], [0.02, 0.01, 0.005, 0.015], rtol=1e-6)
    assert rows[0][11] == "0.0020-0.0030 (2)"
    deficits = [1.0 - probe.core_ratio(c, s ** 2) for s in (0.02, 0.01, 0.005, 0.015)]
    np.testing.assert_allclose(rows[0][2:6], deficits)
    assert rows[0][6] == ic._spread(1.0 - probe.core_ratio(c, s ** 2) for s in (0.002, 0.003))
    assert math.isnan(rows[2][4]) and math.isnan(rows[2][9])   # 24 stopped at t = 5
    # the excess variance over the tokens' core (median 0.0025) between the two finest
    core = 0.0025 ** 2
    order = math.log((0.01 ** 2 - core) / (0.005 ** 2 - core)) / math.log(1.5)
    np.testing.assert_allclose(rows[0][12:], [order, 24 * ((0.005 ** 2 - core) / core)
                                              ** (1 / order)], rtol=1e-6)
    order = math.log((0.02 ** 2 - core) / (0.01 ** 2 - core)) / math.log(2.0)   # 8 and 16
    np.testing.assert_allclose(rows[2][12], order, rtol=1e-6)
    # a state with fewer than three resolutions has no ladder to show
    assert ic.core_table(plan, runs, {}, cells, {8: chain}) == ([], [])


def test_report_only_without_saved_runs_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(ic, "OUT", tmp_path)
    with pytest.raises(SystemExit, match="run without --report-only first"):
        ic.main(["--quick", "--report-only"])
    assert list(tmp_path.iterdir()) == []
