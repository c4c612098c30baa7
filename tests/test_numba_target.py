"""Importing spherepde leaves the environment alone; use_wide_vectors asks numba for 512-bit
vectors on AVX-512 hosts, and never overrides the user."""
import json
import os
import subprocess
import sys

import pytest

from spherepde import _numba_target

SEEN = "print(json.dumps([os.environ.get('NUMBA_CPU_FEATURES'), numba.config.CPU_FEATURES]))"
IMPORT_ONLY = "import json, os, spherepde, numba; " + SEEN
CALL = "import json, os, spherepde; spherepde.use_wide_vectors(); import numba; " + SEEN


def features_seen(child=CALL, **env):
    base = {k: v for k, v in os.environ.items()
            if k not in ("NUMBA_CPU_FEATURES", _numba_target.OPT_OUT)}
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         check=True, env=dict(base, **env))
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_changes_nothing():
    assert features_seen(IMPORT_ONLY) == [None, None]


def test_the_call_follows_the_host():
    wide = _numba_target.wide_features()
    env_value, numba_value = features_seen()
    assert env_value == wide and numba_value == wide
    if wide is not None:
        assert wide.endswith(",-prefer-256-bit") and "+avx512f" in wide


def test_opt_out_and_user_setting_are_respected():
    assert features_seen(**{_numba_target.OPT_OUT: "0"}) == [None, None]
    if _numba_target.wide_features() is None:
        pytest.skip("no AVX-512 here: the user's features are passed through unchanged anyway")
    mine = _numba_target.wide_features().replace(",-prefer-256-bit", "")
    assert features_seen(NUMBA_CPU_FEATURES=mine) == [mine, mine]
