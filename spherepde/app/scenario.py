"""The main job: the low-temperature concentration experiment of docs/theory.md §3.1 on S^2.

For each inverse temperature of the scenario, the tokens (Lagrangian particles) and the
density (spherical harmonics, and finite volumes at the scenario's finite_volume.betas) are
evolved from the same rho_0, and the distance W2(rho_t, Pi#rho_0) to the projected measure is
recorded. With ``convergence.check`` every solver also runs at a coarser resolution (N/4
tokens, lmax/2, n/2 cells): a curve is *converged* when the two differ by less than
``convergence.fraction`` of its minimum at every common output time (:func:`convergence`).
Each finished piece of work is saved atomically under ``<out>/runs/`` and reused when the run
is started again with the same scenario (resume); ``fresh=True`` recomputes everything.

Outputs in ``<out>/``: ``results.nc`` (every result as NetCDF, see :mod:`.results`),
``scenario.json``, the figures of :func:`spherepde.app.plotting.plot_results` and
``summary.md``.
"""
from __future__ import annotations

import errno
import hashlib
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from .. import __version__, io
from ..measures import Mixture, PointCloud, Uniform, VonMisesFisher
from ..model import Model
from ..registry import Registry
from ..sphere import rotation_about_axis
from . import cost
from .config import ConfigError, beta_text, load_config, used_scenario, validate_config
from .results import RESULTS_NAME, SOLVERS, convergence, results_dataset

__all__ = ["Task", "Run", "tasks_of", "run_one", "run_scenario", "build_model", "build_initial",
           "OutputError", "RunInterrupted"]

#: Version of the layout of a saved run; a file of another format (or another package
#: version, see :attr:`Task.key`) is recomputed, not loaded.
RESULT_FORMAT = 3

#: The spectral runs end once the density's negative mass exceeds this: past it the density is
#: no longer resolved at the chosen lmax, and the curve would measure the truncation instead.
NEGATIVE_MASS_STOP = 1e-3
#: The figures a run writes (``spherepde.app.plotting.plot_results``).
FIGURE_NAMES = ("w2_to_limit.png", "densities.png", "densities_orthographic.png",
                "particles.png", "animation.gif", "animation.mp4")
#: Largest number of snapshot times kept for the figures and the animation.
N_SNAPSHOTS = 9


def _unit(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    v = v / np.abs(v).max()  # first by the largest entry: no overflow for entries near 1e308
    return v / np.linalg.norm(v)


def build_model(cfg: dict, beta: float) -> Model:
    """B = K (Q = I) a rotation O, V = S O with S = diag(eigenvalues), so A = V B^T = S;
    or Q = K = V = I in dimension d (``model.matrices = "identity"``)."""
    m = cfg["model"]
    if m["matrices"] == "identity":
        return Model(d=m["d"], beta=beta, normalized=m["normalized"],
                     rescale_time=m["rescale_time"])
    O = rotation_about_axis(m["rotation_axis"], m["rotation_angle"])
    S = np.diag(m["eigenvalues"])
    return Model(K=O, V=S @ O, beta=beta, normalized=m["normalized"],
                 rescale_time=m["rescale_time"])


def build_initial(cfg: dict):
    """ρ_0 of the scenario: uniform, one von Mises–Fisher cap, or two caps ("bimodal": means
    ``mean`` and ``mean2``, the same ``kappa``, masses ``weights``)."""
    ini = cfg["initial"]
    if ini["kind"] == "uniform":
        return Uniform(cfg["model"]["d"])
    if ini["kind"] == "vmf":
        return VonMisesFisher(_unit(ini["mean"]), ini["kappa"])
    return Mixture([VonMisesFisher(_unit(ini["mean"]), ini["kappa"]),
                    VonMisesFisher(_unit(ini["mean2"]), ini["kappa"])], list(ini["weights"]))


def initial_tokens(cfg: dict, mu0, n: int, coarse: bool = False) -> PointCloud:
    """The n tokens a particle run starts from (``particles.init``): rho_0 on its lattice
    (S^1, S^2), or a random sample. The coarse run of the convergence check draws its own
    sample (seed + 1), so the check sees the sampling error of both runs."""
    p = cfg["particles"]
    if p["init"] == "lattice" or (p["init"] == "auto" and mu0.d <= 3):
        return mu0.lattice(n)
    return PointCloud(mu0.sample(n, seed=p["seed"] + int(coarse)))


@dataclass(frozen=True)
class Task:
    """One unit of work of a scenario: a solver at one inverse temperature.

    ``scenario`` is the complete validated scenario (a plain dict, so that a task pickles and
    travels to another process or machine unchanged).
    """

    solver: str        # "particles", "spectral" or "finite_volume"
    beta: float
    scenario: dict
    coarse: bool = False  # the coarser resolution of the convergence check

    @property
    def entry(self) -> "SolverEntry":
        """The registered solver of this task (:data:`SOLVER_ENTRIES`)."""
        return SOLVER_ENTRIES.get(self.solver)

    @property
    def times(self) -> np.ndarray:
        """Requested output times: the particle grid (particles, finite volumes), or its
        restriction to [0, spectral.t_end]."""
        return self.entry.times(self.scenario)

    @property
    def resolution(self) -> int:
        """Tokens (particles), lmax (spectral) or cells along a cube edge (finite volumes); the
        coarse task has N/4 tokens, lmax/2 or n/2 cells."""
        entry = self.entry
        n = self.scenario[self.solver][entry.resolution_key]
        return entry.coarsen(n) if self.coarse else n

    @property
    def key(self) -> str:
        """Hash of everything the result depends on (and the package version), so that a saved
        run is reused only for the same work."""
        used = used_scenario(self.scenario)
        # the snapshots kept, and whether this run draws the maps, depend on other sections
        maps = not self.coarse and map_solver(self.scenario, self.beta) == self.solver
        blob = io.to_json([__version__, RESULT_FORMAT, used["model"], used["initial"],
                           self.solver, used[self.solver], list(self.times), self.beta,
                           self.coarse, self.resolution,
                           [float(t) for t in snapshot_times(self.scenario)], maps])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def filename(self) -> str:
        """Name of the saved run under ``runs/`` (a name only; it is never parsed back)."""
        level = "_coarse" if self.coarse else ""
        return f"{self.solver}_beta={beta_text(self.beta)}{level}.npz"


@dataclass
class Run:
    """The result of one :class:`Task`: the curve W2(ρ_t, Π#ρ_0) and what the figures need.

    Attributes
    ----------
    solver : "particles", "spectral" or "finite_volume"
    beta : inverse temperature (``math.inf`` for zero temperature)
    resolution : tokens, lmax or cells along a cube edge
    coarse : True for the coarser run of the convergence check
    times : (T,) output times reached (a spectral run may end early, see ``notes``)
    w2 : (T,) chordal W2 to the projected measure at those times
    seconds : wall time of the computation
    notes : dict of short texts: "stopped" (ended early, why), "unresolved" (reached its last
        time with a density no longer resolved)
    snapshot_times : (S,) times of the stored snapshots
    positions : (S, N, 3) token positions (particles) or None
    densities : (S, nlat, nlon) density on the plot grid, or None (a particle or coarse run,
        or a density run whose β the other density solver maps: :func:`map_solver`)
    mass, negative_mass : (T,) diagnostics of a density run, or None
    key : :attr:`Task.key` of the task that produced it
    """

    solver: str
    beta: float
    times: np.ndarray
    w2: np.ndarray
    seconds: float
    resolution: int = 0
    coarse: bool = False
    notes: dict = field(default_factory=dict)
    snapshot_times: np.ndarray | None = None
    positions: np.ndarray | None = None
    densities: np.ndarray | None = None
    mass: np.ndarray | None = None
    negative_mass: np.ndarray | None = None
    key: str = ""
    #: (T,) width of each W2's certified bracket (upper - lower), or None (older results)
    w2_width: np.ndarray | None = None

    @property
    def title(self) -> str:
        """Display name, e.g. "particles, β=16"."""
        return f"{self.solver}, β={beta_text(self.beta)}"

    @property
    def resolution_text(self) -> str:
        """e.g. "N=4000", "lmax=128", "n=24" (6·24² cells)."""
        name = SOLVER_ENTRIES.get(self.solver).symbol if self.solver in SOLVER_ENTRIES else "res"
        return f"{name}={self.resolution}"

    _ARRAYS = ("times", "w2", "snapshot_times", "positions", "densities", "mass", "negative_mass",
               "w2_width")

    def save(self, path) -> Path:
        """Write atomically (see :mod:`spherepde.io`)."""
        arrays = {k: getattr(self, k) for k in self._ARRAYS if getattr(self, k) is not None}
        meta = {"key": self.key, "solver": self.solver, "beta": beta_text(self.beta),
                "seconds": self.seconds, "notes": self.notes, "format": RESULT_FORMAT,
                "resolution": int(self.resolution), "coarse": bool(self.coarse)}
        return io.save_npz(path, meta=meta, **arrays)

    @classmethod
    def load(cls, path) -> "Run":
        """Read a file written by :meth:`save`; raises on a damaged or foreign file."""
        data = io.load_npz(path)
        meta = data["meta"]
        return cls(solver=meta["solver"], beta=float(meta["beta"]), seconds=float(meta["seconds"]),
                   notes=dict(meta["notes"]), key=meta["key"],
                   resolution=int(meta.get("resolution", 0)), coarse=bool(meta.get("coarse")),
                   **{k: data.get(k) for k in cls._ARRAYS})


def tasks_of(cfg: dict) -> list[Task]:
    """The tasks of a validated scenario: particles at every β, the spectral runs, the
    finite-volume runs at ``finite_volume.betas``; then the same, coarser, when
    ``convergence.check`` is on."""
    fine = [Task("particles", b, cfg) for b in cfg["run"]["betas"]]
    if cfg["spectral"]["enabled"]:
        fine += [Task("spectral", b, cfg) for b in cfg["run"]["betas"]]
    if cfg["finite_volume"]["enabled"]:
        fine += [Task("finite_volume", b, cfg) for b in cfg["finite_volume"]["betas"]]
    if not cfg["convergence"]["check"]:
        return fine
    return fine + [Task(t.solver, t.beta, cfg, coarse=True) for t in fine]


def spectral_times(cfg: dict) -> np.ndarray:
    """Output times of the spectral runs: the particle output times up to spectral.t_end (at
    least two), so that every spectral output has a particle output at the same time."""
    r = cfg["run"]
    t = np.linspace(0.0, r["t_end"], r["n_times"])
    keep = t <= cfg["spectral"]["t_end"] * (1 + 1e-12)
    return t[: max(2, int(keep.sum()))]


def map_solver(cfg: dict, beta: float) -> str | None:
    """The solver whose density the maps and the animation draw at ``beta``: the finite
    volumes where they run at that β (they cover the whole run, past the closest approach to
    Π#ρ_0), else the spectral solver (its window ends at spectral.t_end, or earlier once the
    density is no longer resolved), else None."""
    fv = cfg["finite_volume"]
    if fv["enabled"] and beta in fv["betas"]:
        return "finite_volume"
    return "spectral" if cfg["spectral"]["enabled"] else None


def snapshot_times(cfg: dict) -> np.ndarray:
    """Times at which the solvers keep their state for the figures: up to
    :data:`N_SNAPSHOTS` output times spread over the window of the maps' densities: the whole
    run when the finite volumes draw a map (or no density solver runs), else the spectral
    window; the same for tokens and densities."""
    fv = cfg["finite_volume"]
    whole = (fv["enabled"] and fv["betas"]) or not cfg["spectral"]["enabled"]
    t = _particle_times(cfg) if whole else spectral_times(cfg)
    idx = np.unique(np.linspace(0, t.size - 1, min(N_SNAPSHOTS, t.size)).round().astype(int))
    return t[idx]


def run_one(task: Task, progress=None) -> Run:
    """Compute one task: evolve ρ_0 with the task's solver and β, measure W2 to Π#ρ_0.

    Pure: reads nothing, writes nothing; the same task gives the same run. ``progress``, a
    callable progress(t), receives the simulated time after every accepted step.
    The snapshots (tokens or densities) are taken at :func:`snapshot_times`; a particle run
    also keeps its last time (the horizon, where sweeps count clusters). The solver is the
    task's entry of :data:`SOLVER_ENTRIES`.
    """
    return task.entry.run(task, progress)


def _run_particles(task: Task, progress) -> Run:
    from ..particles import ParticleSolver
    from ..wasserstein import w2

    cfg, times, res, coarse = task.scenario, task.times, task.resolution, task.coarse
    t0 = time.perf_counter()
    p = cfg["particles"]
    cloud = initial_tokens(cfg, build_initial(cfg), res, coarse)
    # Against Pi#mu^N_0 (the tokens' own half-sphere masses), not Pi#rho_0: a random
    # sample's O(N^-1/2) mass mismatch would otherwise put a floor under the curve.
    distance = _distance_to_limit(cfg, cloud, w2)
    traj = ParticleSolver(build_model(cfg, task.beta), rtol=p["rtol"],
                          atol=p["rtol"] * 1e-2).solve(cloud, times, progress=progress)
    vals, widths = _curve(distance, traj.measure, len(times))
    if coarse:  # the coarse run serves the check only: no snapshots
        return Run("particles", task.beta, times, vals, time.perf_counter() - t0,
                   resolution=res, coarse=True, key=task.key, w2_width=widths)
    idx = np.searchsorted(times, np.union1d(snapshot_times(cfg), times[-1:]))
    return Run("particles", task.beta, times, vals, time.perf_counter() - t0,
               resolution=res, snapshot_times=times[idx], positions=traj.positions[idx],
               key=task.key, w2_width=widths)


def _run_finite_volume(task: Task, progress) -> Run:
    from ..density import FiniteVolumeSolver
    from ..wasserstein import w2

    cfg, times, res = task.scenario, task.times, task.resolution
    t0 = time.perf_counter()
    mu0 = build_initial(cfg)
    distance = _distance_to_limit(cfg, mu0, w2)
    sol = FiniteVolumeSolver(build_model(cfg, task.beta), res).solve(mu0, times,
                                                                     progress=progress)
    reached = np.asarray(sol.times)
    vals, widths = _curve(distance, sol.measure, len(reached))
    diag = getattr(sol, "diagnostics", {}) or {}
    snaps = dens = None
    if not task.coarse and map_solver(cfg, task.beta) == "finite_volume":
        snaps, dens = _density_snapshots(cfg, sol, reached)
    return Run("finite_volume", task.beta, reached, vals,
               time.perf_counter() - t0, resolution=res, coarse=task.coarse,
               mass=np.asarray(diag.get("mass")) if "mass" in diag else None, key=task.key,
               w2_width=widths, snapshot_times=snaps, densities=dens)


def _density_snapshots(cfg: dict, sol, reached: np.ndarray):
    """(times (S,), densities (S, nlat, nlon)) of a density solution at the
    :func:`snapshot_times` it reached, on the maps' grid (:func:`_plot_grid`)."""
    snaps = snapshot_times(cfg)
    idx = np.searchsorted(reached, snaps[snaps <= reached[-1]])
    grid = _plot_grid()
    return reached[idx], np.stack([sol.density(int(i), grid) for i in idx])


def _run_spectral(task: Task, progress) -> Run:
    from ..density import SpectralSolver
    from ..wasserstein import w2

    cfg, times, res = task.scenario, task.times, task.resolution
    t0 = time.perf_counter()
    mu0 = build_initial(cfg)
    distance = _distance_to_limit(cfg, mu0, w2)
    sol = SpectralSolver(build_model(cfg, task.beta), lmax=res).solve(
        mu0, times, stop_negative_mass=NEGATIVE_MASS_STOP, progress=progress)
    reached = sol.times
    vals, widths = _curve(distance, sol.measure, len(reached))
    diag = getattr(sol, "diagnostics", {}) or {}
    notes = {k: str(sol.stats[k]) for k in ("stopped", "unresolved") if sol.stats.get(k)}
    if task.coarse:
        return Run("spectral", task.beta, reached, vals, time.perf_counter() - t0, notes=notes,
                   resolution=res, coarse=True, key=task.key, w2_width=widths)
    snaps = dens = None
    if map_solver(cfg, task.beta) == "spectral":
        snaps, dens = _density_snapshots(cfg, sol, reached)
    return Run("spectral", task.beta, reached, vals, time.perf_counter() - t0, notes=notes,
               resolution=res, snapshot_times=snaps, densities=dens,
               mass=np.asarray(diag["mass"]), negative_mass=np.asarray(diag["negative_mass"]),
               key=task.key, w2_width=widths)


def _particle_times(cfg: dict) -> np.ndarray:
    r = cfg["run"]
    return np.linspace(0.0, r["t_end"], r["n_times"])


@dataclass(frozen=True)
class SolverEntry:
    """A solver of the main job, as registered in :data:`SOLVER_ENTRIES`.

    Attributes
    ----------
    run : callable run(task, progress) -> Run
    resolution_key : the key of the solver's scenario section that sets its resolution
    symbol : how the resolution is written ("N", "lmax", "n")
    coarsen : resolution -> the coarser resolution of the convergence check
    times : callable times(cfg) -> (T,) the solver's output times
    """

    run: Callable
    resolution_key: str
    symbol: str
    coarsen: Callable[[int], int]
    times: Callable[[dict], np.ndarray]


#: The solvers of ``spherepde run`` and ``spherepde sweep``, by name (the order of results.nc's
#: solver axis).
SOLVER_ENTRIES = Registry("solver of spherepde run")
SOLVER_ENTRIES.register("particles", SolverEntry(_run_particles, "n", "N",
                                                 lambda n: max(2, n // 4), _particle_times))
SOLVER_ENTRIES.register("spectral", SolverEntry(_run_spectral, "lmax", "lmax",
                                                lambda n: max(8, n // 2),
                                                lambda cfg: spectral_times(cfg)))
SOLVER_ENTRIES.register("finite_volume", SolverEntry(_run_finite_volume, "n", "n",
                                                     lambda n: max(2, n // 2), _particle_times))
assert tuple(SOLVER_ENTRIES.names()) == SOLVERS  # results.nc's solver axis


def _curve(distance, measure, n):
    """(W2 values, bracket widths) of ``distance`` at measure(0), ..., measure(n - 1)."""
    rows = np.array([distance(measure(i)) for i in range(n)], dtype=np.float64).reshape(n, 2)
    return rows[:, 0], rows[:, 1]


def _distance_to_limit(cfg: dict, mu0, w2):
    """mu -> (W2, width of its certified bracket) to the measure the run's curve tracks: Π#μ_0
    for the "rotation" set-up; for Q = K = V = I (no spectral gap, no projection) the nearest
    single cluster, :func:`spherepde.analysis.diagnostics.w2_to_nearest_dirac` (a closed form:
    width 0)."""
    if cfg["model"]["matrices"] == "identity":
        from ..analysis.diagnostics import w2_to_nearest_dirac

        return lambda mu: (w2_to_nearest_dirac(mu), 0.0)
    limit = reference_model(cfg).limit_measure(mu0)

    def distance(mu):
        r = w2(mu, limit)
        return float(r.value), max(float(r.upper) - float(r.lower), 0.0)

    return distance


def reference_model(cfg: dict) -> Model:
    """The model whose Π defines the limit: zero temperature for SA, the first β for USA
    (Π depends only on A, so any β gives the same projection)."""
    m = cfg["model"]
    beta = math.inf if m["normalized"] else cfg["run"]["betas"][0]
    # without the time change of rescale_time: the report states A = V B^T as configured
    return build_model({**cfg, "model": {**m, "rescale_time": False}}, beta)


class OutputError(RuntimeError):
    """The output folder cannot be used (a file, read-only, in use by another run)."""


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run; says how many runs finished (they are saved and will be reused)."""

    def __init__(self, finished: int, total: int, folder: Path):
        super().__init__(f"{finished} of {total} runs finished and are saved in {folder}; "
                         "run the same command again to resume from them")
        self.finished, self.total, self.folder = finished, total, folder


#: Present while a run writes into a folder; the other top-level files may still belong to
#: the previous scenario until it is gone.
IN_PROGRESS = "IN_PROGRESS"


def _load_saved(task: Task, path: Path, fresh: bool, notify) -> Run | None:
    """The saved run of ``task``, or None when it must be computed (absent, damaged, from
    another version or another scenario); a damaged or foreign file gets a one-line notice."""
    if fresh or not path.exists():
        return None
    try:
        run = Run.load(path)
    except Exception as exc:  # a damaged file is recomputed, never trusted
        notify(f"runs/{path.name} is damaged ({type(exc).__name__}); recomputing it")
        return None
    if run.key != task.key:
        notify(f"runs/{path.name} was written by another spherepde version or for another "
               "scenario; recomputing it")
        return None
    return run


#: The flag of ``spherepde run`` that takes over a non-empty folder spherepde did not create.
FORCE_FLAG = "--force"


def _prepare_folder(out: Path, force: bool = False) -> io.Manifest:
    """Check that ``out`` may be written and create ``out/runs``; returns the folder's manifest.

    The folder must be new, empty, or spherepde's own (:class:`spherepde.io.Manifest`), unless
    ``force``; neither it nor ``runs/`` may be a symbolic link. Every way this fails is a
    one-line :class:`OutputError`.
    """
    def fail(text):
        raise OutputError(f"{text}; give another --out (or [output] dir)") from None

    if out.is_symlink():
        fail(f"the output folder {out} is a symbolic link (to {os.readlink(out)}); spherepde "
             "does not write through links: give the folder itself")
    if out.exists() and not out.is_dir():
        fail(f"the output folder {out} is a file")
    try:
        manifest = io.Manifest.open(out, "run", force=force, override=FORCE_FLAG)
        io.refuse_link(out / "runs")
        (out / "runs").mkdir(parents=True, exist_ok=True)
    except io.LinkError as exc:
        fail(exc.strerror)
    except io.FolderNotOwnedError as exc:
        raise OutputError(exc.strerror) from None
    except (FileExistsError, NotADirectoryError):
        fail(f"cannot create the output folder {out}: {_blocking_part(out)}")
    except OSError as exc:
        # mkdir answers ENOENT below an existing folder of a virtual file system (/proc, /sys)
        parent = next((p for p in [out, *out.parents] if p.is_dir()), None)
        if exc.errno == errno.ENOENT and parent is not None and not parent.is_symlink():
            fail(f"cannot create the output folder {out}: {parent} does not accept new folders "
                 "(a virtual or special file system)")
        fail(f"cannot create the output folder {out}: {exc.strerror}")
    if not os.access(out, os.W_OK) or not os.access(out / "runs", os.W_OK):
        raise OutputError(f"the output folder {out} is not writable; give a writable --out "
                          "(or [output] dir)")
    return manifest


def _blocking_part(out: Path) -> str:
    """Why a folder cannot be created at ``out``: the part of its path that is a file or a
    broken link."""
    for p in [*reversed(out.parents), out]:
        if p.is_symlink() and not p.exists():
            return f"{p} is a broken symbolic link (to {os.readlink(p)})"
        if p.exists() and not p.is_dir():
            return f"{p} is a file"
    return "a part of its path is a file"


def run_scenario(cfg: dict | str | Path | None = None, out: str | Path | None = None,
                 fresh: bool = False, progress: bool = True, notify=None,
                 figures: bool = True, workers: int | str = 1, force: bool = False,
                 yes: bool = False) -> dict:
    """Run a scenario (the default one when ``cfg`` is None) and write its outputs.

    Maps :func:`run_one` over :func:`tasks_of`, reusing the runs saved under ``<out>/runs/``.
    The folder is locked for the duration (a second run on it raises :class:`OutputError`);
    ``<out>/IN_PROGRESS`` marks it until every top-level file describes this scenario.

    Parameters
    ----------
    notify : callable notify(text), optional
        Receives one-line notices (a damaged saved run, a figure that could not be written,
        ...); default: print to stderr.
    figures : bool
        Draw the figures (False: results, summary and scenario only). A figure that cannot be
        written (no disk space, a failing ffmpeg) is a notice; the results are still written.
    force : bool
        Write into a non-empty folder that spherepde did not create (files of the names it
        writes are replaced there). Without it such a folder is refused; in spherepde's own
        folders only the files its manifest lists are ever replaced or deleted.
    yes : bool
        Run even when :func:`spherepde.app.cost.estimate` puts the scenario above
        :data:`spherepde.app.cost.LIMIT_SECONDS` (otherwise a :class:`ConfigError` gives the
        estimate and the knob to turn).
    workers : int or "auto"
        Processes that compute the runs side by side (each run is pure, so they are
        independent); 1 (default): in this process, with a progress bar per run. "auto" (what
        ``spherepde run`` uses): one per core when the scenario is large enough to repay the
        ~2 s a pool costs to start (:func:`_workers`), else 1. The workers are *spawned*: a
        script that calls this with workers != 1 needs the usual
        ``if __name__ == "__main__":`` guard.

    Returns a dict with the output folder, the :class:`Run` records, how many were reused,
    the fitted rate and the summary text. Ctrl-C raises :class:`RunInterrupted`.
    """
    if notify is None:
        def notify(text):
            print(f"spherepde: {text}", file=sys.stderr)

    if cfg is None or isinstance(cfg, (str, Path)):
        cfg = load_config(cfg)
    else:
        cfg = validate_config(cfg)
    if cfg["model"]["matrices"] != "rotation":
        raise ConfigError("spherepde run measures the distance to the projected limit Pi#rho_0, "
                          "which needs model.matrices = \"rotation\" (A with a spectral gap); "
                          "run Q = K = V = I scenarios with `spherepde sweep` and the measures "
                          "\"clusters\" / \"single_cluster\" (see docs/sweeps.md)")
    if not yes:
        cost.refuse_if_too_long(cfg)
    out = Path(out or cfg["output"]["dir"])
    manifest = _prepare_folder(out, force)
    folder = out / "runs"
    lock = _lock(out)
    tasks = tasks_of(cfg)
    done: dict = {}  # task key -> Run computed by this call
    reused = 0
    try:
        manifest.add(IN_PROGRESS, RESULTS_NAME, "scenario.json", "summary.md",
                     *(f"runs/{t.filename}" for t in tasks))
        manifest.remove_partial()
        manifest.remove_partial("runs")
        io.write_text(out / IN_PROGRESS,
                      "A spherepde run is writing into this folder (or was stopped). Until this "
                      "file is gone, the other files here may describe the previous scenario; "
                      "run the same command again to finish.\n")
        saved = {t.key: _load_saved(t, folder / t.filename, fresh, notify) for t in tasks}
        reused = sum(r is not None for r in saved.values())
        _compute_runs(cfg, tasks, saved, done, folder, workers, progress)
        runs = [saved[t.key] or done[t.key] for t in tasks]
        rate, summary = _conclude(out, cfg, runs, figures, manifest, notify)
        manifest.remove(IN_PROGRESS)
    except KeyboardInterrupt:
        raise RunInterrupted(reused + len(done), len(tasks), folder) from None
    finally:
        lock.__exit__(None, None, None)
    return {"out": out, "runs": runs, "reused": reused, "rate": rate, "summary": summary}


def _lock(out: Path):
    """The entered :class:`spherepde.io.FolderLock` of ``out``, or an OutputError that says
    why it cannot be taken."""
    try:
        return io.FolderLock(out).__enter__()
    except io.FolderBusyError as exc:
        raise OutputError(f"{exc}: another spherepde run is writing there; wait for it to "
                          "finish or give another --out") from None
    except OSError as exc:
        raise OutputError(f"cannot write into {out}: {exc.strerror}; give a writable --out "
                          "(or [output] dir)") from None


def _compute_runs(cfg: dict, tasks: list, saved: dict, done: dict, folder: Path,
                  workers: int | str, progress: bool) -> None:
    """Compute the tasks that have no saved run (``saved[key] is None``), in a process pool
    or here with a progress bar per run; each is saved under ``folder`` as it finishes and
    put into ``done`` (task key -> Run), so that Ctrl-C knows how many are kept."""
    from tqdm.auto import tqdm

    todo = [t for t in tasks if saved[t.key] is None]
    n_workers = _workers(cfg, todo, workers)
    if n_workers > 1:
        reused = len(tasks) - len(todo)
        _run_in_pool(todo, n_workers, folder, progress, done, len(tasks), reused)
        return
    bar = tqdm(tasks, desc="spherepde run", disable=not progress, unit="run")
    for task in bar:
        bar.set_postfix_str(f"{task.solver}, beta={beta_text(task.beta)}")
        if saved[task.key] is None:
            run = _run_with_bar(task, progress)
            run.save(folder / task.filename)
            done[task.key] = run


def _conclude(out: Path, cfg: dict, runs: list, figures: bool, manifest, notify):
    """The measures the curves are compared with, the fitted zero-temperature rate, and the
    outputs (:func:`_write_outputs`); returns (rate, summary text)."""
    mu0 = build_initial(cfg)
    ref = reference_model(cfg)
    report = ref.check_assumptions()
    tokens = initial_tokens(cfg, mu0, cfg["particles"]["n"])
    limits = _Limits(ref.limit_measure(mu0), ref.limit_measure(tokens),
                     ref.dominant_subspace()[:, 0], tokens.points.shape[0])
    rate = _fit_zero_temperature_rate(runs, report)
    spectral_note = None if cfg["spectral"]["enabled"] else \
        "disabled in the scenario ([spectral] enabled = false)"
    summary = _write_outputs(out, cfg, runs, limits, report, rate, spectral_note, figures,
                             manifest, notify)
    return rate, summary


@dataclass(frozen=True)
class _Limits:
    """What the W2 curves are measured against: the projected limit Pi#rho_0 of the initial
    density (``density``) and of the initial tokens (``particles``), its direction e: (3,)
    and the number of tokens."""

    density: object
    particles: object
    e: np.ndarray
    n_tokens: int


#: A scenario is worth a process pool when one of its runs takes seconds: this many tokens,
#: this spherical-harmonic degree, or this many finite-volume cells along a cube edge.
POOL_MIN_SIZE = {"particles": 1000, "spectral": 64, "finite_volume": 16}


def _workers(cfg: dict, todo: list, workers: int | str) -> int:
    """How many processes compute ``todo`` (see :func:`run_scenario`)."""
    if workers != "auto":
        if isinstance(workers, str) or int(workers) < 1:
            raise ValueError(f"workers must be >= 1 or \"auto\"; got {workers!r}")
        return max(1, min(int(workers), len(todo)))
    sizes = {"particles": cfg["particles"]["n"], "spectral": cfg["spectral"]["lmax"],
             "finite_volume": cfg["finite_volume"]["n"]}
    big = any(sizes[t.solver] >= POOL_MIN_SIZE[t.solver] for t in todo)
    return max(1, min(os.cpu_count() or 1, len(todo))) if big else 1


def _cost_rank(task: Task) -> tuple:
    """Longest first (so that the pool's last runs are short): fine before coarse, particles
    (by decreasing finite beta) before the density solvers."""
    order = {"particles": 0, "spectral": 1, "finite_volume": 2}[task.solver]
    beta = task.beta if math.isfinite(task.beta) else -1.0
    return (task.coarse, order, -beta)


def _pool_init(threads: int) -> None:
    import numba

    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))


def _run_in_pool(todo: list, n_workers: int, folder: Path, progress: bool, done: dict,
                 total: int, reused: int) -> None:
    """Compute ``todo`` in ``n_workers`` processes (longest first); each finished run is saved
    by this process as it arrives and put into ``done`` (task key -> Run). Ctrl-C (SIGINT to
    this process) stops the workers and propagates; the workers ignore SIGINT themselves, so a
    Ctrl-C at the terminal reaches this process only."""
    import multiprocessing as mp
    import signal

    from tqdm.auto import tqdm

    threads = max(1, (os.cpu_count() or 1) // n_workers)
    order = sorted(todo, key=_cost_rank)
    by_key = {t.key: t for t in order}
    pool = None
    bar = tqdm(total=total, initial=reused, desc=f"spherepde run ({n_workers} processes)",
               disable=not progress, unit="run")
    try:
        # the workers start with SIGINT ignored (kept across exec), and stay so
        try:
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        except ValueError:  # not the main thread: no handler of ours to keep or restore
            previous = None
        try:
            pool = mp.get_context("spawn").Pool(n_workers, initializer=_pool_init,
                                                initargs=(threads,))
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        for run in pool.imap_unordered(run_one, order):
            task = by_key[run.key]
            run.save(folder / task.filename)
            done[run.key] = run
            bar.set_postfix_str(f"{task.solver}, beta={beta_text(task.beta)}")
            bar.update(1)
        pool.close()
    finally:
        bar.close()
        if pool is not None:
            pool.terminate()
            pool.join()


def _run_with_bar(task: Task, progress: bool) -> Run:
    """run_one with a progress bar of the simulated time of this solver."""
    from tqdm.auto import tqdm

    end = float(task.times[-1])
    with tqdm(total=end, desc=f"  {task.solver}, β={beta_text(task.beta)}", leave=False,
              disable=not progress, unit="t",
              bar_format="{desc}: {percentage:3.0f}%|{bar}| t = {n:6.3f} of {total:.3g} "
                         "[{elapsed}<{remaining}]") as bar:
        def advance(t):
            bar.update(min(float(t), end) - bar.n)

        return run_one(task, progress=advance if progress else None)


def _plot_lat_lon(n: int = 90):
    """Latitudes and longitudes (degrees) of :func:`_plot_grid`'s nodes."""
    return (90.0 - np.degrees(np.linspace(0, np.pi, n)),
            np.degrees(np.linspace(-np.pi, np.pi, 2 * n)))


def _plot_grid(n: int = 90):
    th = np.linspace(0, np.pi, n)
    ph = np.linspace(-np.pi, np.pi, 2 * n)
    T, P = np.meshgrid(th, ph, indexing="ij")
    return np.stack([np.sin(T) * np.cos(P), np.sin(T) * np.sin(P), np.cos(T)], -1)


def _fit_zero_temperature_rate(runs: list[Run], report):
    """Fit log W2 ~ -r t on the second half of the beta = inf particle curve; docs/theory.md
    §3.2 predicts r = gamma/2 (c = 1, dim E = 1)."""
    run = next((r for r in runs if r.solver == "particles" and math.isinf(r.beta)
                and not r.coarse), None)
    if run is None:
        return None
    t, w = run.times, run.w2
    sel = (t >= t[-1] / 2) & (w > 0)
    if sel.sum() < 3:
        return None
    slope = np.polyfit(t[sel], np.log(w[sel]), 1)[0]
    return {"fitted": float(-slope), "predicted": float(report.gap / 2),
            "window": [float(t[sel][0]), float(t[sel][-1])]}


def _verdicts(fine: list[Run], checks: dict, coarse: dict) -> str:
    """One line: the checked curves that are converged and those that are not, per solver,
    e.g. "Converged: finite_volume at β = 4, 16. Not converged: finite_volume at β = inf."."""
    groups = {True: {}, False: {}}
    for r in fine:
        if (r.solver, r.beta) in coarse:
            ok = bool(checks[(r.solver, r.beta)]["converged"])
            groups[ok].setdefault(r.solver, []).append(beta_text(r.beta))

    def listed(by_solver):
        return "; ".join(f"{s} at β = {', '.join(b)}" for s, b in by_solver.items()) or "none"

    return f"Converged: {listed(groups[True])}. Not converged: {listed(groups[False])}."


def _agreement(fine: list[Run], checks: dict) -> list[str]:
    """Table rows comparing every pair of solvers at one β on their common output times."""
    rows = []
    for a_i, a in enumerate(fine):
        for b in fine[a_i + 1:]:
            if b.beta != a.beta or b.solver == a.solver:
                continue
            common, i, j = np.intersect1d(np.round(a.times, 12), np.round(b.times, 12),
                                          return_indices=True)
            if common.size == 0:
                continue
            d = float(np.max(np.abs(np.asarray(a.w2)[i] - np.asarray(b.w2)[j])))
            ea = checks[(a.solver, a.beta)]["max_difference"]
            eb = checks[(b.solver, b.beta)]["max_difference"]
            err = np.nanmax([ea, eb]) if np.isfinite([ea, eb]).any() else math.nan
            verdict = "n/a" if not np.isfinite(err) else ("yes" if d <= err else "no")
            rows.append(f"| {beta_text(a.beta)} | {a.solver} | {b.solver} | {d:.3g} | "
                        f"{common[-1]:.3g} | {ea:.3g} | {eb:.3g} | {verdict} |")
    return rows


def _write_outputs(out, cfg, runs: list[Run], limits: _Limits, report, rate, spectral_note,
                   figures=True, manifest=None, notify=None):
    """results.nc, scenario.json, the figures, then summary.md (which lists the figures that
    were written); returns the summary's text."""
    manifest = manifest or io.Manifest.open(out, "run", force=True)
    used = used_scenario(cfg)
    fine = [r for r in runs if not r.coarse]
    coarse = {(r.solver, r.beta): r for r in runs if r.coarse}
    fraction = cfg["convergence"]["fraction"]
    # one verdict per curve, shared by results.nc and summary.md
    checks = {(r.solver, r.beta): convergence(r, coarse.get((r.solver, r.beta)), fraction)
              for r in fine}
    ds = results_dataset(used, runs, limit=limits.density, limit_particles=limits.particles,
                         subspace=reference_model(cfg).dominant_subspace(), gap=report.gap,
                         rate=rate, map_grid=_plot_lat_lon(), checks=checks)
    manifest.add(RESULTS_NAME, "scenario.json", "summary.md")
    io.save_dataset(ds, out / RESULTS_NAME)
    io.write_json(out / "scenario.json", used)
    drawn, failed = _write_figures(ds, out, figures, manifest, notify)
    lines = _summary_head(cfg, limits, report)
    if coarse:
        lines += [f"Each solver also ran at a coarser resolution (N/4 tokens, lmax/2, n/2 cells "
                  f"along a cube edge). A curve is **converged** when the two differ by less than "
                  f"{fraction:.0%} of its minimum at every common output time, and the coarse run "
                  "reached the same last time (docs/methods.md, \"What converged means\").", ""]
    lines += _curve_table(fine, coarse, checks)
    if coarse:
        lines += [_verdicts(fine, checks, coarse), ""]
    lines += _summary_tail(fine, checks, rate, spectral_note, drawn, failed)
    text = "\n".join(lines) + "\n"
    io.write_text(out / "summary.md", text)
    return text


def _write_figures(ds, out, figures: bool, manifest, notify):
    """The figures of ``ds`` (or, with figures False, the removal of an earlier scenario's,
    which would describe another run); returns (paths drawn, notices of those that failed)."""
    drawn, failed = [], []
    if figures:
        from . import plotting

        def warn(text):
            failed.append(text)
            (notify or print)(text)

        manifest.add(*FIGURE_NAMES)
        drawn = plotting.plot_results(ds, out, warn=warn)
    else:
        for name in FIGURE_NAMES:
            manifest.remove(name)
    return drawn, failed


def _summary_head(cfg, limits: _Limits, report) -> list[str]:
    """summary.md up to its W2 section's heading: the model and the limit measures."""
    if cfg["model"]["normalized"]:
        attention = "softmax-normalized self-attention (SA)"
    else:
        attention = ("unnormalized self-attention (USA: no softmax denominator, so tokens move "
                     "at speeds up to e^beta; the projection Pi is the same as for SA)")
        if cfg["model"]["rescale_time"]:
            attention += (", with the velocity divided by the kernel's maximum e^beta "
                          "(model.rescale_time = true: USA's own time is t e^-beta)")
    limit, limit_particles = limits.density, limits.particles
    return ["# spherepde run: low-temperature concentration on S^2", "",
            f"Tokens and their density evolve under {attention} with B = Q^T K a rotation "
            "and A = V B^T symmetric (docs/theory.md §3.1). W2 is the chordal "
            "Wasserstein-2 distance to the projected measure Pi#rho_0 = m+ delta_e + m- "
            "delta_{-e}.", "",
            "## Model", "", "```", str(report), "```", "",
            f"Pi#rho_0: e = {np.array2string(limits.e, precision=4)}, "
            f"m+ = {limit.weights[0]:.6f}, "
            f"m- = {limit.weights[1]:.6f} (half-sphere masses by quadrature). The particles "
            f"are measured against Pi#mu^N_0, whose empirical masses are "
            f"m+ = {limit_particles.weights[0]:.6f}, m- = {limit_particles.weights[1]:.6f} "
            f"(N = {limits.n_tokens}).", "",
            "## W2(rho_t, Pi#rho_0)", ""]


def _curve_table(fine: list[Run], coarse: dict, checks: dict) -> list[str]:
    """The table of the W2 curves, one row a fine run, with its convergence check."""
    lines = ["| run | resolution | min W2 | t at min | W2 at last time | last time | seconds |"
             " coarse | max \\|fine − coarse\\| | threshold | converged |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in fine:
        t, w = run.times, run.w2
        i = int(np.argmin(w))
        c = coarse.get((run.solver, run.beta))
        chk = checks[(run.solver, run.beta)]
        if c is None:
            tail = "— | — | — | not checked"
        else:
            verdict = "**yes**" if chk["converged"] else "no"
            if not chk["converged"] and c.times[-1] < run.times[-1] * (1 - 1e-12):
                verdict += f" (coarse ended at t = {c.times[-1]:.3g})"
            tail = (f"{c.resolution_text} ({c.seconds:.1f} s) | {chk['max_difference']:.3g} | "
                    f"{chk['threshold']:.3g} | {verdict}")
        lines.append(f"| {run.title} | {run.resolution_text} | {w[i]:.4g} | {t[i]:.3g} | "
                     f"{w[-1]:.4g} | {t[-1]:.3g} | {run.seconds:.1f} | {tail} |")
    lines.append("")
    return lines


def _summary_tail(fine: list[Run], checks: dict, rate, spectral_note, drawn, failed) -> list[str]:
    """summary.md after the curve table: early stops, the fitted rate, the solvers against
    each other, and the files written."""
    lines = []
    stops = [(r.title, "ended early", r.notes["stopped"]) for r in fine if r.notes.get("stopped")]
    stops += [(r.title, "reached its last time, but", r.notes["unresolved"]) for r in fine
              if r.notes.get("unresolved")]
    for title, what, why in stops:
        lines.append(f"- {title} {what}: {why}.")
    if stops:
        lines.append("")
    if rate is not None:
        lines.append(f"Zero-temperature decay: fitted rate {rate['fitted']:.4f} on t in "
                     f"[{rate['window'][0]:.2g}, {rate['window'][1]:.2g}] against the predicted "
                     f"gamma/2 = {rate['predicted']:.4f} (docs/theory.md §3.2).")
    diffs = _agreement(fine, checks)
    if diffs:
        lines += ["", "## The solvers against each other", "",
                  "Largest |W2_a − W2_b| between two solvers at the same β over their common "
                  "times, beside each one's own measured error (max |fine − coarse|). Two curves "
                  "agree when their distance is within the larger of the two errors.", "",
                  "| beta | a | b | max \\|W2_a − W2_b\\| | until t | error of a | error of b | "
                  "agree |", "|---|---|---|---|---|---|---|---|", *diffs]
    if spectral_note:
        lines += ["", f"The spectral solver was not run: {spectral_note}."]
    figs = "".join(f"{Path(p).name}, " for p in drawn)
    lines += ["", f"Files: results.nc (every result, NetCDF; see docs/sweeps.md), scenario.json, "
              f"{figs}runs/ (one file per finished run; a rerun reuses them). "
              "`spherepde plot` redraws the figures from results.nc."]
    if failed:
        lines.append(f"Not written: {'; '.join(failed)}.")
    return lines
