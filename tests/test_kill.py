"""SIGKILL the main job at random moments: every rerun resumes from what was saved, no
half-written file is ever loaded, and the final results equal an uninterrupted run's.

The jobs are children of a forkserver that has imported spherepde once, so each start costs
a fork, not a Python start-up; a child killed by SIGKILL gets no chance to clean up, exactly
like a process killed by the operating system.
"""
import json
import multiprocessing as mp
import shutil
import time

import numpy as np
import pytest

from spherepde import io
from spherepde.app import scenario
from spherepde.app.config import load_config

KILLS = 20

SCENARIO = """
[run]
betas = [2.0, 8.0, "inf"]
t_end = 1.0
n_times = 5
[particles]
n = 40
[spectral]
lmax = 8
t_end = 0.25
[finite_volume]
n = 4
"""


@pytest.fixture(scope="module")
def ctx():
    c = mp.get_context("forkserver")
    c.set_forkserver_preload(["spherepde.app.cli", "spherepde.app.scenario", "spherepde.particles",
                              "spherepde.wasserstein", "spherepde.density"])
    return c


def start(ctx, cfg, out):
    from spherepde.app.cli import main

    p = ctx.Process(target=main, args=(["run", str(cfg), "--out", str(out), "--quiet",
                                        "--no-figures"],))
    p.start()
    return p


def saved_runs(folder):
    """Every runs/*.npz must load completely and belong to a task of the scenario."""
    found = {}
    for path in sorted((folder / "runs").glob("*.npz")):
        run = scenario.Run.load(path)  # raises on a half-written file
        st = path.stat()
        found[path.name] = (run.key, st.st_ino, st.st_mtime_ns)
    return found


def result_arrays(folder):
    """results.nc as arrays (wall times left out: they differ between runs) and its scenario."""
    ds = io.open_dataset(folder / "results.nc")
    arrays = {k: ds[k].values for k in ds.variables if k not in ("seconds", "seconds_coarse")}
    return arrays, {"scenario": json.loads(ds.attrs["scenario"])}


@pytest.mark.slow
def test_sigkill_at_random_moments(ctx, tmp_path):
    cfg = tmp_path / "kill.toml"
    cfg.write_text(SCENARIO)
    keys = {t.filename: t.key for t in scenario.tasks_of(load_config(cfg))}
    ref = tmp_path / "ref"
    warm = ctx.Process(target=int)  # boot the forkserver (imports) outside the timing
    warm.start()
    warm.join(300)
    t0 = time.monotonic()
    p = start(ctx, cfg, ref)
    p.join(300)
    assert p.exitcode == 0
    span = time.monotonic() - t0  # how long an uninterrupted run takes here
    ref_arrays, ref_meta = result_arrays(ref)
    ref_runs = {name: scenario.Run.load(ref / "runs" / name) for name in keys}

    rng = np.random.default_rng(2026)
    work = tmp_path / "work"
    kills = finished = 0
    first_seen = {}
    while kills < KILLS:
        p = start(ctx, cfg, work)
        p.join(rng.uniform(0.0, span))
        if p.is_alive():
            p.kill()
            kills += 1
        p.join(300)
        assert not p.is_alive()
        # what is on disk is whole: every saved run loads and is a run of this scenario
        now = saved_runs(work)
        for name, (key, ino, mtime) in now.items():
            assert key == keys[name]
            # a finished run is reused, never recomputed: the same file, untouched
            assert first_seen.setdefault(name, (ino, mtime)) == (ino, mtime), name
        if p.exitcode == 0:  # the rerun finished: same numbers as the uninterrupted run
            finished += 1
            arrays, meta = result_arrays(work)
            assert meta["scenario"] == ref_meta["scenario"]
            assert arrays.keys() == ref_arrays.keys()
            for k in arrays:
                np.testing.assert_array_equal(arrays[k], ref_arrays[k], err_msg=k)
            for name, run in ref_runs.items():
                np.testing.assert_array_equal(scenario.Run.load(work / "runs" / name).w2, run.w2)
            assert not (work / scenario.IN_PROGRESS).exists()
            assert not list(work.rglob("*.part"))  # temporaries of killed writers cleaned
            shutil.rmtree(work)  # start over, so that later kills land in fresh work again
            first_seen = {}
        elif (work / "results.nc").exists() and not (work / scenario.IN_PROGRESS).exists():
            # without the in-progress mark, the top-level files are a complete set
            assert (work / "summary.md").exists() and (work / "scenario.json").exists()
            result_arrays(work)
    # and after the last kill, a rerun finishes with the uninterrupted run's numbers
    p = start(ctx, cfg, work)
    p.join(300)
    assert p.exitcode == 0
    arrays, _ = result_arrays(work)
    for k in arrays:
        np.testing.assert_array_equal(arrays[k], ref_arrays[k], err_msg=k)
    assert kills == KILLS
    print(f"{kills} kills, {finished} reruns finished in between; uninterrupted run {span:.2f} s")
