"""Parameter sweeps on Dask: ``spherepde sweep sweep.toml [--scheduler ADDRESS]``.

A sweep file names a base scenario, the axes to sweep and what to measure per task:

.. code-block:: toml

    [sweep]
    base = "scenario.toml"        # optional: a scenario file (path relative to this file)
    solver = "particles"          # the solver each task runs: "particles", "spectral" or
                                  # "finite_volume" (cells: finite_volume.n)
    measures = ["w2", "t_star", "min_w2", "clusters", "single_cluster"]
    cluster_tol = 1e-2            # chordal distance under which tokens count as one cluster
    out = "sweep-output"          # output folder (relative to the current directory)

    [sweep.phase]                 # the phase-diagram figure (optional)
    measure = "min_w2"            # a scalar measure
    x = "run.betas"               # two axes; the other axes are averaged over
    y = "initial.kappa"

    [base.particles]              # scenario keys on top of ``base`` (same keys as spherepde run)
    n = 500

    [axes]                        # any scenario key: one list of values per axis
    "run.betas" = [4.0, 16.0, "inf"]
    "initial.kappa" = [0.5, 1.5]
    "model.eigenvalues" = [[1.0, 0.4, 0.0], [1.0, 0.8, 0.0]]

Every point of the grid (the Cartesian product of the axes) is one task: the base scenario with
the point's values (a scalar for ``run.betas`` means that single β), run by the main job's
:func:`spherepde.app.scenario.run_one` on one Dask worker. Each task writes its own NetCDF file
under ``<out>/tasks/`` atomically; a rerun skips the tasks whose file exists. A task that fails
(an invalid value, a solver error) writes ``<id>.failed.json`` with its parameters and traceback,
is reported, and the others go on; a rerun tries it again. The finished tasks are gathered into
``<out>/sweep.nc``: one dimension per axis (plus ``time`` for the W2 curve), NaN where a task
failed, and the phase diagram is drawn to ``<out>/phase_diagram.png``.

Measures: ``w2`` (the curve W2(ρ_t, Π#ρ_0) over time), ``t_star`` (time of its minimum),
``min_w2`` (its minimum), ``clusters`` (number of token clusters at the last time, particles
only), ``single_cluster`` (1 when that number is 1, else 0; its mean over a seed axis is the
probability of a single cluster).
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import math
import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import io
from .config import DEFAULT, ConfigError, validate_config
from .scenario import SOLVERS

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["Sweep", "load_sweep", "run_sweep", "run_task", "gather", "MEASURES"]

MEASURES = ("w2", "t_star", "min_w2", "clusters", "single_cluster")
#: What the W2 curve measures (chordal cost), for the "rotation" and the "identity" set-ups.
W2_NAME = ("W2 to the limit: Pi#rho_0, or the nearest single cluster when Q = K = V = I "
           "(chordal)")
_SCALARS = {"t_star": ("time of the smallest W2 to the limit", "1"),
            "min_w2": ("smallest W2 to the limit (chordal)", "1"),
            "clusters": ("number of token clusters at the last time", "1"),
            "single_cluster": ("1 if the tokens form a single cluster at the last time", "1")}
_SWEEP_KEYS = {"base", "solver", "measures", "cluster_tol", "out", "phase"}
#: Version of the per-task file layout; part of the task id, so a new layout recomputes.
TASK_FORMAT = 1


class SweepError(ValueError):
    """An invalid sweep file: the message names the key and what it accepts."""


@dataclass
class Sweep:
    """A validated sweep: the base scenario (user keys, not yet merged), the axes in file order,
    the solver, the measures, the phase-diagram choice and the output folder."""

    base: dict
    axes: dict
    solver: str = "particles"
    measures: tuple = MEASURES
    cluster_tol: float = 1e-2
    out: Path = Path("sweep-output")
    phase: dict = field(default_factory=dict)

    def points(self) -> list[dict]:
        """Every point of the grid, {axis: value}, in row-major order of the axes."""
        keys = list(self.axes)
        return [dict(zip(keys, combo, strict=True))
                for combo in itertools.product(*self.axes.values())]

    def scenario(self, point: dict) -> dict:
        """The user scenario of one point: the base with the point's values set (unvalidated)."""
        cfg = copy.deepcopy(self.base)
        for key, value in point.items():
            section, name = key.split(".", 1)
            if key == "run.betas" and not isinstance(value, list):
                value = [value]  # one β per task
            cfg.setdefault(section, {})[name] = value
        return cfg

    def spec(self, point: dict) -> dict:
        """What a worker needs to run the point (plain data: it travels to any machine)."""
        scenario = self.scenario(point)
        blob = json.dumps([TASK_FORMAT, self.solver, sorted(self.measures), self.cluster_tol,
                           scenario], sort_keys=True, default=str)
        return {"id": "task-" + hashlib.sha256(blob.encode()).hexdigest()[:16],
                "params": point, "scenario": scenario, "solver": self.solver,
                "measures": list(self.measures), "cluster_tol": self.cluster_tol}


def _fail(msg):
    raise SweepError(msg)


def _read_toml(path) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        _fail(f"{path} is not valid TOML: {exc}")
    except RecursionError:
        _fail(f"{path} nests arrays or tables too deeply to read")
    except OSError as exc:
        _fail(f"cannot read {path}: {exc.strerror or exc}")


def _table(doc: dict, key: str, what: str) -> dict:
    """``doc[key]`` when it is a table (absent: empty), else a :class:`SweepError`."""
    value = doc.get(key, {})
    if not isinstance(value, dict):
        _fail(f"{what} must be a table ([{what}] in the file); got {value!r}")
    return value


def load_sweep(path_or_dict, out=None) -> Sweep:
    """Read and check a sweep file (or an already-parsed dict)."""
    doc, here = _read_sweep_doc(path_or_dict)
    unknown = set(doc) - {"sweep", "base", "axes"}
    if unknown:
        _fail(f"unknown section(s) {sorted(unknown)}; a sweep file has [sweep], [base], [axes]")
    sw = _table(doc, "sweep", "sweep")
    bad = set(sw) - _SWEEP_KEYS
    if bad:
        _fail(f"unknown key(s) {sorted('sweep.' + k for k in bad)}; "
              f"allowed: {sorted(_SWEEP_KEYS)}")
    base = _base_scenario(doc, sw, here)
    axes = _table(doc, "axes", "axes")
    _check_axes(axes)
    axes = _axes_for_base(axes, base)
    solver, measures = _solver_and_measures(sw)
    tol = sw.get("cluster_tol", 1e-2)
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 < tol < 2:
        _fail(f"sweep.cluster_tol must be a chordal distance in (0, 2); got {tol!r}")
    phase = _phase(sw, axes)
    out_dir = Path(out) if out is not None else Path(sw.get("out", "sweep-output"))
    return Sweep(base=base, axes=axes, solver=solver, measures=measures, cluster_tol=float(tol),
                 out=out_dir, phase=phase)


def _read_sweep_doc(path_or_dict) -> tuple[dict, Path]:
    """The sweep document (a copy of a dict, or the parsed file) and the folder that relative
    paths in it start from (the file's folder, or the working directory for a dict)."""
    if isinstance(path_or_dict, dict):
        return copy.deepcopy(path_or_dict), Path.cwd()
    path = Path(path_or_dict)
    if not path.is_file():
        _fail(f"no sweep file at {path}; give the path of a TOML file with [sweep], [base] "
              "and [axes] (see docs/sweeps.md)")
    return _read_toml(path), path.parent


def _base_scenario(doc: dict, sw: dict, here: Path) -> dict:
    """The base scenario: the file sweep.base (if any) with the [base] tables written over it;
    it must validate."""
    base: dict = {}
    for key in ("base", "out"):
        if key in sw and not isinstance(sw[key], str):
            _fail(f"sweep.{key} must be a path (a string); got {sw[key]!r}")
    if "base" in sw:
        bpath = here / sw["base"]
        if not bpath.is_file():
            _fail(f"sweep.base: no scenario file at {bpath}")
        base = _read_toml(bpath)
    for section, values in _table(doc, "base", "base").items():
        if not isinstance(values, dict):
            _fail(f"[base.{section}] must be a table of scenario keys")
        base.setdefault(section, {}).update(values)
    try:
        validate_config(base)
    except ConfigError as exc:
        _fail(f"the base scenario is invalid: {exc}")
    return base


def _check_axes(axes: dict) -> None:
    """Each axis is a scenario key (not the output folder) with a non-empty list of distinct
    values; run.betas takes one beta per point."""
    if not axes:
        _fail("[axes] is empty: name at least one scenario key with a list of values, e.g. "
              "\"run.betas\" = [4.0, 16.0]")
    for key, values in axes.items():
        section, _, name = key.partition(".")
        if section not in DEFAULT or name not in DEFAULT[section]:
            _fail(f"axis {key!r} is not a scenario key; use section.key with one of "
                  f"{sorted(f'{s}.{k}' for s in DEFAULT for k in DEFAULT[s] if s != 'output')}")
        if section == "output":
            _fail(f"axis {key!r}: the output folder is not a parameter to sweep")
        if not isinstance(values, list) or not values:
            _fail(f"axis {key!r} must be a non-empty list of values; got {values!r}")
        if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
            _fail(f"axis {key!r} repeats a value: {values!r}")
        if key == "run.betas" and any(isinstance(v, list) for v in values):
            _fail(f"axis 'run.betas' takes one beta per point (each task runs one beta); got "
                  f"{values!r}: write the betas as one flat list, e.g. [4.0, 16.0]")


def _axes_for_base(axes: dict, base: dict) -> dict:
    """The axes checked against the base scenario: a seed axis needs sampled tokens, and
    several betas in the base with no beta axis make beta the first axis (one beta per task)."""
    merged = validate_config(base)
    init = axes.get("particles.init", [merged["particles"]["init"]])
    if "particles.seed" in axes and any(i != "sample" for i in init):
        _fail("axis 'particles.seed': the seed draws the random sample of particles.init = "
              "\"sample\", but the tokens start from a lattice here (particles.init = "
              f"{init!r}); put init = \"sample\" under [base.particles]")
    if "run.betas" not in axes and len(merged["run"]["betas"]) > 1:
        axes = {"run.betas": list(base.get("run", {}).get("betas", merged["run"]["betas"])),
                **axes}
    return axes


def _solver_and_measures(sw: dict) -> tuple[str, tuple]:
    """sweep.solver and sweep.measures; the cluster measures are dropped for the density
    solvers, since clusters are counted among tokens."""
    solver = sw.get("solver", "particles")
    if not isinstance(solver, str) or solver not in SOLVERS:
        _fail(f"sweep.solver must be one of {list(SOLVERS)}; got {solver!r}")
    measures = sw.get("measures", MEASURES)
    if not isinstance(measures, (list, tuple)) or not all(isinstance(m, str) for m in measures):
        _fail(f"sweep.measures must be a list of names from {list(MEASURES)}; got {measures!r}")
    measures = tuple(measures)
    bad = [m for m in measures if m not in MEASURES]
    if bad or not measures:
        _fail(f"sweep.measures must name some of {list(MEASURES)}; got {list(measures)!r}")
    if solver != "particles":
        measures = tuple(m for m in measures if m not in ("clusters", "single_cluster"))
    return solver, measures


def _phase(sw: dict, axes: dict) -> dict:
    """sweep.phase: the two axes (x, y) and the measure of the phase diagram."""
    phase = dict(_table(sw, "phase", "sweep.phase"))
    if not phase:
        return phase
    bad = set(phase) - {"x", "y", "measure"}
    if bad:
        _fail(f"unknown key(s) {sorted('sweep.phase.' + k for k in bad)}; allowed: x, y, "
              "measure")
    for k in ("x", "y"):
        if k in phase and (not isinstance(phase[k], str) or phase[k] not in axes):
            _fail(f"sweep.phase.{k} = {phase[k]!r} is not an axis; axes: {list(axes)}")
    if "x" in phase and phase.get("x") == phase.get("y"):
        _fail(f"sweep.phase.x and sweep.phase.y are both {phase['x']!r}; a phase diagram "
              "needs two different axes")
    measure = phase.get("measure", "min_w2")
    if not isinstance(measure, str) or measure not in _SCALARS:
        _fail(f"sweep.phase.measure must be one of {sorted(_SCALARS)}")
    return phase


# ---------------------------------------------------------------------------- one task
def task_path(folder, spec) -> Path:
    return Path(folder) / f"{spec['id']}.nc"


def failure_path(folder, spec) -> Path:
    return Path(folder) / f"{spec['id']}.failed.json"


def run_task(spec: dict, folder) -> dict:
    """Run one sweep task on whatever machine this is called: validate the point's scenario,
    run it with :func:`spherepde.app.scenario.run_one`, measure, and write ``<id>.nc``
    atomically. Never raises: a failure is written to ``<id>.failed.json`` and returned."""
    from .scenario import Task, run_one

    folder = Path(folder)
    try:
        cfg = validate_config(spec["scenario"])
        task = Task(spec["solver"], cfg["run"]["betas"][0], cfg)
        run = run_one(task)
        ds = task_dataset(spec, task, run)
        io.save_dataset(ds, task_path(folder, spec))
        failure_path(folder, spec).unlink(missing_ok=True)
        return {"id": spec["id"], "params": spec["params"], "status": "done",
                "seconds": float(run.seconds)}
    except Exception as exc:  # reported to the client; the other tasks go on
        if _shutting_down():  # the sweep was stopped (Ctrl-C): not a failure of this task
            raise
        tb = traceback.format_exc()
        info = {"id": spec["id"], "params": spec["params"], "status": "failed",
                "error": f"{type(exc).__name__}: {exc}", "traceback": tb}
        try:
            io.write_json(failure_path(folder, spec), info)
        except OSError:
            pass
        return info


def _shutting_down() -> bool:
    """Whether the Dask worker running this task is closing (the client was interrupted)."""
    try:
        from distributed import get_worker

        return get_worker().status.name not in ("running", "paused")
    except Exception:  # not on a worker, or no status to read: a real failure
        return False


def _task_done(folder, spec) -> bool:
    """Whether the task's file exists and reads back (a truncated or foreign file is removed,
    so that the task is computed again)."""
    p = task_path(folder, spec)
    if not p.is_file() or p.is_symlink():
        return False
    try:
        ds = io.open_dataset(p)
        ok = ds.attrs.get("task_id") == spec["id"] and "time" in ds.coords
    except Exception:  # damaged: unreadable NetCDF/HDF5
        ok = False
    if not ok:
        p.unlink()
    return ok


def _measure(spec, run) -> dict:
    t, w = np.asarray(run.times, dtype=float), np.asarray(run.w2, dtype=float)
    out = {}
    k = int(np.nanargmin(w))
    out["t_star"], out["min_w2"] = float(t[k]), float(w[k])
    if {"clusters", "single_cluster"} & set(spec["measures"]):
        from ..analysis.diagnostics import cluster_count

        x = None
        if getattr(run, "positions", None) is not None and len(run.snapshot_times):
            if np.isclose(run.snapshot_times[-1], t[-1]):
                x = np.asarray(run.positions[-1])
        n = cluster_count(x, tol=spec["cluster_tol"]) if x is not None else math.nan
        out["clusters"] = float(n)
        out["single_cluster"] = float(n == 1) if x is not None else math.nan
    return out


def task_dataset(spec, task, run):
    """One task's result: the W2 curve on the requested times (NaN past an early stop) and the
    scalar measures, with the point's parameters as attributes."""
    import xarray as xr

    times = np.asarray(task.times, dtype=float)
    w = np.full(times.size, np.nan)
    w[np.searchsorted(times, run.times)] = run.w2
    data = {"w2": ("time", w, {"units": "1", "long_name": W2_NAME})}
    for name, value in _measure(spec, run).items():
        if name in spec["measures"]:
            ln, units = _SCALARS[name]
            data[name] = ((), value, {"units": units, "long_name": ln})
    attrs = {**io.global_attrs("spherepde sweep task", "sweep task"), "task_id": spec["id"],
             "params": json.dumps(spec["params"], sort_keys=True),
             "scenario": io.to_json(spec["scenario"], indent=None),
             "solver": spec["solver"], "seconds": float(run.seconds),
             "note": "; ".join(f"{k}: {v}" for k, v in sorted((run.notes or {}).items()))}
    return xr.Dataset(data, coords={"time": io.time_coord(times)}, attrs=attrs)


# ---------------------------------------------------------------------------- the sweep
def _client(scheduler, n_workers):
    from distributed import Client, LocalCluster

    if scheduler:
        return Client(scheduler), None
    n = n_workers or os.cpu_count() or 1
    # One single-threaded worker process per core: the solvers are numpy/numba bound. The
    # workers start with SIGINT ignored (an ignored signal is inherited by a child process, a
    # Python handler is not): Ctrl-C in a terminal reaches the whole process group, and it is
    # the client's part to stop them, by closing the cluster; a worker that handled it itself
    # would print a traceback each. A Ctrl-C in the second or two the cluster takes to start is
    # therefore ignored.
    restore = _ignore_sigint()
    try:
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=40)
    finally:
        restore()
    return Client(cluster), cluster


def _ignore_sigint():
    """Ignore SIGINT in this process until the returned function is called (a no-op off the
    main thread, where the handler cannot be changed)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    return lambda: signal.signal(signal.SIGINT, old)


def run_sweep(sweep, scheduler: str | None = None, n_workers: int | None = None, out=None,
              progress: bool = True, report=None, force: bool = False) -> dict:
    """Run a sweep (a :class:`Sweep`, a dict or a TOML path) and gather ``sweep.nc``.

    Parameters
    ----------
    scheduler : address of an existing Dask scheduler (``tcp://host:8786``); default: a
        LocalCluster with one single-threaded worker per core (``n_workers`` to change that)
    out : output folder (default ``sweep.out``)
    report : callable report(text) for failure reports (default: print to stderr)
    force : write into a non-empty folder that spherepde did not create

    The folder is locked for the duration (a second sweep on it raises :class:`SweepError`); a
    task file that does not read back (truncated, foreign) is computed again.

    Returns
    -------
    dict with ``out``, ``done`` (ids computed now), ``skipped`` (ids already finished),
    ``failed`` (the failure records: params, error, traceback), ``dataset`` (sweep.nc's Dataset)
    """
    if not isinstance(sweep, Sweep):
        sweep = load_sweep(sweep, out=out)
    elif out is not None:
        sweep = dataclasses.replace(sweep, out=Path(out))
    report = report or (lambda text: print(text, file=sys.stderr))
    if scheduler is not None:
        _check_address(scheduler)
    manifest = _claim(sweep.out, force)
    folder = sweep.out / "tasks"
    try:
        lock = io.FolderLock(sweep.out).__enter__()
    except io.FolderBusyError as exc:
        raise SweepError(f"{exc}: another spherepde sweep is writing there; wait for it to "
                         "finish or give another --out") from None
    try:
        return _run_locked(sweep, scheduler, n_workers, progress, report, manifest, folder)
    finally:
        lock.__exit__(None, None, None)


def _claim(out: Path, force: bool) -> "io.Manifest":
    """The manifest of the sweep's folder (refusing links and foreign folders), with tasks/."""
    try:
        manifest = io.Manifest.open(out, "sweep", force=force, override="--force")
        io.refuse_link(out / "tasks")
        (out / "tasks").mkdir(parents=True, exist_ok=True)
    except (io.LinkError, io.FolderNotOwnedError) as exc:
        raise SweepError(exc.strerror) from None
    return manifest


def _check_address(scheduler) -> None:
    """A Dask scheduler address: ``protocol://host:port`` with a known protocol and a port."""
    from urllib.parse import urlsplit

    text = str(scheduler)
    parts = urlsplit(text if "://" in text else f"tcp://{text}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme not in ("tcp", "tls", "inproc", "ucx", "ws", "wss") or not parts.hostname \
            or port is None:
        raise SweepError(f"--scheduler {text!r} is not a Dask scheduler address; give "
                         "tcp://HOST:PORT (e.g. tcp://127.0.0.1:8786)")


def _run_locked(sweep, scheduler, n_workers, progress, report, manifest, folder) -> dict:
    from tqdm.auto import tqdm

    specs = [sweep.spec(p) for p in sweep.points()]
    manifest.add("sweep.nc", "phase_diagram.png",
                 *(f"tasks/{task_path('', s).name}" for s in specs),
                 *(f"tasks/{failure_path('', s).name}" for s in specs))
    manifest.remove_partial()
    manifest.remove_partial("tasks")
    finished = {s["id"]: _task_done(folder, s) for s in specs}
    todo = [s for s in specs if not finished[s["id"]]]
    skipped = [s["id"] for s in specs if finished[s["id"]]]
    done, failed = [], []
    bar = tqdm(total=len(specs), initial=len(skipped), desc="spherepde sweep", unit="task",
               disable=not progress)
    if todo:
        from distributed import as_completed

        try:
            client, cluster = _client(scheduler, n_workers)
        except (OSError, ValueError, TypeError) as exc:
            raise OSError(f"cannot reach the Dask scheduler {scheduler}: {exc}") from None
        try:
            futures = [client.submit(run_task, s, str(folder.resolve()), key=s["id"], pure=False)
                       for s in todo]
            for fut in as_completed(futures):
                try:
                    res = fut.result()
                except Exception as exc:  # the worker itself died (memory, killed machine)
                    spec = next(s for s in todo if s["id"] == fut.key)
                    res = {"id": spec["id"], "params": spec["params"], "status": "failed",
                           "error": f"{type(exc).__name__}: {exc}",
                           "traceback": "".join(traceback.format_exception(exc))}
                if res["status"] == "done":
                    done.append(res["id"])
                else:
                    failed.append(res)
                    report(f"spherepde sweep: task {_params_text(res['params'])} failed: "
                           f"{res['error']}\n{res['traceback']}")
                bar.update(1)
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    bar.close()
    ds = gather(sweep, specs)
    io.save_dataset(ds, sweep.out / "sweep.nc")
    figure = None
    if len([a for a in sweep.axes if len(sweep.axes[a]) > 1]) >= 2:
        figure = draw_phase_diagram(sweep, ds, sweep.out / "phase_diagram.png")
    return {"out": sweep.out, "done": done, "skipped": skipped, "failed": failed, "dataset": ds,
            "figure": figure}


def _params_text(params) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in params.items())


def _coord(key, values):
    """Axis coordinate values: numbers stay numbers (β = "inf" becomes inf), lists become
    their text ("1,0.4,0"), booleans "true" / "false" as in TOML."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) or v == "inf" for v in values):
        return np.array([math.inf if v == "inf" else float(v) for v in values])
    return np.array([",".join(f"{a:g}" if isinstance(a, (int, float)) else str(a) for a in v)
                     if isinstance(v, list) else json.dumps(v) if isinstance(v, bool) else str(v)
                     for v in values])


def gather(sweep: Sweep, specs=None):
    """All finished tasks of a sweep as one Dataset: dims = the axes (in file order) + time."""
    import xarray as xr

    specs = specs or [sweep.spec(p) for p in sweep.points()]
    folder = sweep.out / "tasks"
    shape = tuple(len(v) for v in sweep.axes.values())
    keys = list(sweep.axes)
    results, times = {}, None
    # one spec per grid point, in row-major order: a shorter list would misplace every task
    for idx, spec in zip(np.ndindex(*shape), specs, strict=True):
        p = task_path(folder, spec)
        if p.exists():
            ds = io.open_dataset(p)
            results[idx] = ds
            if times is None or ds.sizes["time"] > times.size:
                times = ds["time"].values
    status = np.full(shape, "missing", dtype=object)
    error = np.full(shape, "", dtype=object)
    for idx, spec in zip(np.ndindex(*shape), specs, strict=True):
        if idx in results:
            status[idx] = "done"
        elif failure_path(folder, spec).exists():
            status[idx] = "failed"
            try:
                error[idx] = str(json.loads(failure_path(folder, spec).read_text())["error"])
            except (ValueError, KeyError, TypeError, OSError):
                error[idx] = "(the failure record is damaged)"
    data = {}
    if times is not None:
        if "w2" in sweep.measures:
            w = np.full(shape + (times.size,), np.nan)
            for idx, ds in results.items():
                if ds.sizes["time"] == times.size and np.array_equal(ds["time"].values, times):
                    w[idx] = ds["w2"].values
                else:  # a task with its own time grid (t_end swept): nearest common times
                    w[idx] = np.interp(times, ds["time"].values, ds["w2"].values,
                                       left=np.nan, right=np.nan)
            data["w2"] = ((*keys, "time"), w, {"units": "1", "long_name": W2_NAME})
        for name in _SCALARS:
            if name in sweep.measures:
                v = np.full(shape, np.nan)
                for idx, ds in results.items():
                    if name in ds:
                        v[idx] = float(ds[name])
                ln, units = _SCALARS[name]
                data[name] = (keys, v, {"units": units, "long_name": ln})
        secs = np.full(shape, np.nan)
        for idx, ds in results.items():
            secs[idx] = ds.attrs["seconds"]
        data["seconds"] = (keys, secs, {"units": "s", "long_name": "wall time of the task"})
    data["status"] = (keys, status.astype(str), {"long_name": "done, failed or missing"})
    data["error"] = (keys, error.astype(str), {"long_name": "error of a failed task"})
    coords = {k: (k, _coord(k, v), {"long_name": k}) for k, v in sweep.axes.items()}
    if times is not None:
        coords["time"] = io.time_coord(times)
    attrs = {**io.global_attrs("spherepde parameter sweep", "sweep"), "solver": sweep.solver,
             "base_scenario": io.to_json(sweep.base, indent=None),
             "axes": json.dumps(list(sweep.axes)), "cluster_tol": sweep.cluster_tol}
    return xr.Dataset(data, coords=coords, attrs=attrs)


def draw_phase_diagram(sweep: Sweep, ds, path):
    """Heat map of ``sweep.phase.measure`` over two axes, averaged over the others."""
    from .plotting import plot_phase_diagram

    multi = [a for a in sweep.axes if len(sweep.axes[a]) > 1]
    measure = sweep.phase.get("measure") or next(
        (m for m in ("single_cluster", "min_w2", "t_star", "clusters") if m in ds), None)
    if measure is None or measure not in ds:
        return None
    x = sweep.phase.get("x", multi[0])
    y = sweep.phase.get("y", next(a for a in multi if a != x))
    da = ds[measure]
    others = [d for d in da.dims if d not in (x, y)]
    title = f"{measure}, {sweep.solver}"
    if others:
        n = int(np.prod([da.sizes[d] for d in others]))
        da = da.mean(others, keep_attrs=True)
        da.attrs["long_name"] = f"mean over {n} tasks of: {da.attrs.get('long_name', measure)}"
        title += f" (mean over {', '.join(others)})"
    return plot_phase_diagram(da, path, x=x, y=y, title=title)
