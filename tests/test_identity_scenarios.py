"""Q = K = V = I scenarios in any dimension (the clustering set-up of the sweeps): validation,
the distance to the nearest single cluster, and the main job's refusal."""
import numpy as np
import pytest

import spherepde as sp
from spherepde.analysis.diagnostics import w2_to_nearest_dirac
from spherepde.app.config import ConfigError, validate_config
from spherepde.app.scenario import Task, build_model, run_one, run_scenario

IDENTITY = {"model": {"matrices": "identity", "d": 8}, "initial": {"kind": "uniform"},
            "spectral": {"enabled": False}}


def test_identity_scenario_in_dimension_8_validates_and_builds():
    cfg = validate_config(IDENTITY)
    model = build_model(cfg, 2.0)
    assert model.d == 8
    assert np.array_equal(model.V, np.eye(8)) and np.array_equal(model.B, np.eye(8))


@pytest.mark.parametrize("change, key", [
    ({"model": {"matrices": "rotation", "d": 8}}, "model.matrices"),
    ({"initial": {"kind": "vmf"}}, "initial.kind"),
    ({"spectral": {"enabled": True}}, "spectral.enabled"),
    ({"model": {"matrices": "identity", "d": 1}}, "model.d"),
    ({"model": {"matrices": "unit", "d": 8}}, "model.matrices"),
])
def test_invalid_dimension_settings_name_the_key(change, key):
    user = {k: {**IDENTITY[k], **change.get(k, {})} for k in IDENTITY}
    with pytest.raises(ConfigError, match=key):
        validate_config(user)


def test_distance_to_the_nearest_dirac_is_attained_at_the_mean_direction(sphere_points):
    x = sp.measures.VonMisesFisher([0.0, 0.0, 1.0], 3.0).sample(200, seed=4)
    w = np.random.default_rng(4).random(200)
    mu = sp.PointCloud(x, w / w.sum())
    m = mu.weights @ mu.points
    y = m / np.linalg.norm(m)
    d = w2_to_nearest_dirac(mu)
    # against a Dirac the only coupling is the product one: the exact solver must agree (1e-12:
    # round-off of sums of 200 terms)
    assert d == pytest.approx(float(sp.w2(mu, sp.PointCloud(y[None, :])).value), abs=1e-12)
    others = sphere_points(50, 3, seed=5)
    assert all(d <= float(sp.w2(mu, sp.PointCloud(z[None, :])).value) + 1e-12 for z in others)
    # one cluster: 0 up to the round-off of normalizing its mean (a few ulps of 1), where the
    # form 2 - 2|m| would leave ~1e-8
    assert w2_to_nearest_dirac(sp.PointCloud(np.tile(y, (3, 1)))) < 1e-15


def test_identity_run_tracks_clustering_and_the_main_job_refuses_it(tmp_path):
    cfg = validate_config({**IDENTITY, "run": {"betas": [1.0], "t_end": 10.0, "n_times": 3},
                           "particles": {"n": 16}})
    run = run_one(Task("particles", 1.0, cfg))
    assert run.positions.shape[-1] == 8
    # beta = 1, d = 8: the tokens collapse to one cluster (docs/theory.md, clustering), so the
    # distance to the nearest Dirac falls from its uniform-sample value towards 0
    assert run.w2[-1] < 0.1 * run.w2[0]
    with pytest.raises(ConfigError, match="sweep"):
        run_scenario(cfg, out=tmp_path / "o", progress=False)
