"""Scenario files: defaults, and errors that name the key and the allowed values."""
import math

import pytest

from spherepde.app.config import DEFAULT, ConfigError, load_config, validate_config


def test_default_scenario_is_valid():
    cfg = validate_config({})
    assert cfg["run"]["betas"][-1] == math.inf
    assert cfg["model"]["eigenvalues"] == sorted(DEFAULT["model"]["eigenvalues"], reverse=True)


def test_finite_volume_defaults_adapt_to_the_scenario():
    # the default finite-volume betas are those of run.betas it shares; none is an empty list
    assert validate_config({"run": {"betas": [4.0, "inf"]}})["finite_volume"]["betas"] == [
        4.0, math.inf]
    assert validate_config({"run": {"betas": [5.0]}})["finite_volume"]["betas"] == []
    # Q = K = V = I in d = 5 (a sweep scenario): the finite volumes switch off by themselves
    cfg = validate_config({"model": {"matrices": "identity", "d": 5},
                           "initial": {"kind": "uniform"}, "spectral": {"enabled": False}})
    assert cfg["finite_volume"]["enabled"] is False


def test_user_file_overrides(tmp_path):
    p = tmp_path / "s.toml"
    p.write_text('[run]\nbetas = [2.0, "inf"]\nt_end = 3.0\n[particles]\nn = 500\n')
    cfg = load_config(p)
    assert cfg["run"]["betas"] == [2.0, math.inf] and cfg["particles"]["n"] == 500
    assert cfg["spectral"]["lmax"] == DEFAULT["spectral"]["lmax"]


@pytest.mark.parametrize(
    "user, match",
    [
        ({"modle": {}}, r"unknown section \[modle\]; allowed sections"),
        ({"run": {"beta": [1.0]}}, r"unknown key run.beta; allowed keys in \[run\]"),
        ({"initial": {"kind": "gaussian"}},
         r"initial.kind must be one of \['uniform', 'vmf', 'bimodal'\]"),
        ({"run": {"betas": [-1.0]}}, r"run.betas must be >= 0"),
        ({"run": {"betas": ["hot"]}}, r"run.betas entries must be numbers >= 0 or \"inf\""),
        ({"run": {"t_end": 0}}, r"run.t_end must be > 0"),
        ({"particles": {"n": 2.5}}, r"particles.n must be an integer"),
        ({"model": {"eigenvalues": [1.0, 1.0, 0.0]}}, r"model.eigenvalues need a spectral gap"),
        ({"model": {"rotation_axis": [0, 0, 0]}}, r"model.rotation_axis must be a nonzero vector"),
        ({"model": {"normalized": False}}, r"needs model.normalized = true"),
        ({"spectral": {"lmax": 4}}, r"spectral.lmax must be >= 8"),
        ({"model": {"normalized": False}, "run": {"betas": [30.0]}}, r"run.betas must be <= 12"),
        ({"finite_volume": {"betas": [3.0]}},
         r"finite_volume.betas must be entries of run.betas .*not there: \['3'\]"),
        ({"finite_volume": {"n": 2}}, r"finite_volume.n must be >= 4"),
        ({"finite_volume": {"enabled": True}, "model": {"matrices": "identity", "d": 4},
          "initial": {"kind": "uniform"}, "spectral": {"enabled": False}},
         r"finite_volume.enabled = true needs model.matrices = \"rotation\""),
        ({"convergence": {"fraction": 0.0}}, r"convergence.fraction must be > 0"),
        ({"particles": {"n": 5}}, r"particles.n must be >= 8"),
        ({"particles": {"init": "grid"}}, r"particles.init must be one of 'auto', 'lattice'"),
        ({"particles": {"init": "lattice"}, "model": {"matrices": "identity", "d": 4},
          "initial": {"kind": "uniform"}, "spectral": {"enabled": False}},
         r"particles.init = \"lattice\" exists on S\^1 and S\^2"),
    ],
)
def test_invalid_scenarios_name_the_key(user, match):
    with pytest.raises(ConfigError, match=match):
        validate_config(user)


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="no scenario file"):
        load_config(tmp_path / "missing.toml")
    p = tmp_path / "bad.toml"
    p.write_text("[run\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(p)
