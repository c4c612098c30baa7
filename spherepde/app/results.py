"""The main job's results as one :class:`xarray.Dataset` (written as ``results.nc``).

Layout (CF-style units and long names on every variable):

- ``w2`` (solver, beta, time): W2(ρ_t, Π#ρ_0), chordal; NaN where a run has no output
  (a spectral run covers a shorter window and may stop early);
- ``w2_width`` (solver, beta, time): the width upper − lower of each W2's certified bracket
  (0 from the exact solvers), and ``w2_coarse_width`` for ``w2_coarse``;
- ``resolution`` (solver, beta): tokens, lmax or cells along a cube edge of the run;
- with the convergence check: ``w2_coarse`` (solver, beta, time), the same curve at the coarser
  resolution ``coarse_resolution`` (solver, beta); ``max_difference`` (solver, beta), the largest
  |W2 - W2_coarse| at common times, each widened by both brackets' widths; ``converged``
  (solver, beta), 1 when it stays below ``convergence_fraction`` (an attribute) of the curve's
  minimum at every time, else 0;
- ``seconds`` (solver, beta), ``note`` (solver, beta): wall time and why a run stopped or was
  unresolved ("" when it was neither), ``unresolved_from`` (solver, beta): the time from which
  the curve no longer measures the dynamics (NaN when resolved throughout);
- ``density`` (beta, snapshot_time, lat, lon): the density on a regular map grid, from the
  solver that ``density_solver`` (beta) names ("finite_volume" or "spectral"; "" for none);
- ``positions`` (beta, snapshot_time, token, component): the tokens at the same times;
- ``limit_points`` (atom, component), ``limit_weights`` (atom): Π#ρ_0, and
  ``limit_weights_particles`` (atom): Π#μ^N_0 of the sampled tokens;
- ``dominant_eigenspace`` (component, basis): an orthonormal basis of E.

The scenario is stored as a JSON attribute (``scenario``); the spectral gap, the fitted and
predicted zero-temperature rates as numeric attributes. :func:`load_results` reads the file back
for ``spherepde plot``.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .. import io
from ..analysis.convergence import resolution_error

if TYPE_CHECKING:
    from .scenario import Run

__all__ = ["results_dataset", "load_results", "convergence", "RESULTS_NAME", "SOLVERS"]

RESULTS_NAME = "results.nc"
#: The solver axis of results.nc, in this order.
SOLVERS = ("particles", "spectral", "finite_volume")


def _union(arrays):
    vals = [np.asarray(a, dtype=np.float64) for a in arrays if a is not None and len(a)]
    return np.unique(np.concatenate(vals)) if vals else np.zeros(0)


def _place(target_times, times, values, fill=np.nan):
    """values (T, ...) at ``times`` placed on ``target_times`` (exact matches), the rest
    ``fill``."""
    values = np.asarray(values)
    out = np.full((target_times.size,) + values.shape[1:], fill, dtype=np.float64)
    idx = np.searchsorted(target_times, times)
    out[idx] = values
    return out


def convergence(fine: Run, coarse: Run | None, fraction: float) -> dict:
    """The convergence check of one curve: its two resolutions compared at their common output
    times.

    Returns a dict with ``max_difference`` (max |W2_fine - W2_coarse|, each difference widened
    by the two W2 brackets where the runs record them: the most the true distances can
    differ), ``threshold``
    (``fraction`` times the fine curve's minimum), ``converged`` (every difference below the
    threshold, and the coarse run reached the fine run's last time) and ``until`` (the last
    common time compared). Without a coarse run, NaNs and converged False.
    """
    out = {"max_difference": math.nan, "threshold": fraction * float(np.min(fine.w2)),
           "converged": False, "until": math.nan}
    if coarse is None:
        return out
    common, diff = resolution_error(fine.times, fine.w2, coarse.times, coarse.w2,
                                    fine.w2_width, coarse.w2_width)
    if common.size == 0:
        return out
    out["max_difference"] = float(diff.max())
    out["until"] = float(common[-1])
    reached = coarse.times[-1] >= fine.times[-1] * (1 - 1e-12)
    out["converged"] = bool(reached and np.all(diff < out["threshold"]))
    return out


def results_dataset(cfg: dict, runs, *, limit, limit_particles, subspace, gap=None, rate=None,
                    map_grid=None, checks=None):
    """Gather the :class:`~spherepde.app.scenario.Run` records of a scenario into one Dataset.

    Parameters
    ----------
    cfg : the validated scenario
    runs : Run records (attributes solver, beta, times, w2, seconds, notes, snapshot_times,
        positions (S, N, 3) or None, densities (S, nlat, nlon) or None)
    limit, limit_particles : PointCloud, Π#ρ_0 and Π#μ^N_0 (the same atoms)
    subspace : (3, dim E) orthonormal basis of the dominant eigenspace E
    gap : spectral gap γ; rate : dict with "fitted", "predicted", "window" or None
    map_grid : (lat (nlat,), lon (nlon,)) in degrees of the stored density maps
    checks : {(solver, beta): convergence verdict}, optional
        The verdicts of :func:`convergence` when the caller has them
        (computed here otherwise)

    Returns
    -------
    xarray.Dataset
    """
    import xarray as xr

    runs = list(runs)
    coarse_runs = {(r.solver, float(r.beta)): r for r in runs if getattr(r, "coarse", False)}
    runs = [r for r in runs if not getattr(r, "coarse", False)]
    fraction = float(cfg.get("convergence", {}).get("fraction", 0.05))
    axes = _axes(runs)
    table = _run_table(runs, axes)
    if coarse_runs:
        _fill_coarse(table, runs, coarse_runs, axes, checks, fraction)
    maps = _snapshots(runs, axes)

    data = _run_variables(table, limit, limit_particles, subspace)
    if coarse_runs:
        data.update(_coarse_variables(table))
    coords = _coordinates(axes)
    _add_snapshot_variables(data, coords, maps, map_grid)
    attrs = _attributes(cfg, fraction if coarse_runs else None, gap, rate)
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _axes(runs) -> dict:
    """The axes of the Dataset: the solvers in ``SOLVERS`` order, the sorted betas, and the
    union of the runs' output and snapshot times."""
    return {"solver": [s for s in SOLVERS if any(r.solver == s for r in runs)],
            "beta": np.array(sorted({float(r.beta) for r in runs}), dtype=np.float64),
            "time": _union([r.times for r in runs]),
            "snapshot_time": _union([r.snapshot_times for r in runs])}


def _index(axes, run) -> tuple[int, int]:
    """(solver, beta) index of a run on ``axes``."""
    return (axes["solver"].index(run.solver),
            int(np.searchsorted(axes["beta"], float(run.beta))))


def _run_table(runs, axes) -> dict:
    """The (solver, beta[, time]) arrays of the fine runs: W2 curves and their bracket widths,
    resolution, wall time, notes and where a run stopped being resolved; the coarse-run arrays
    start empty (NaN / 0)."""
    times = axes["time"]
    S, B, T = len(axes["solver"]), axes["beta"].size, times.size
    t = {name: np.full((S, B, T), np.nan)
         for name in ("w2", "w2_width", "w2_coarse", "w2_coarse_width")}
    t.update({name: np.full((S, B), np.nan)
              for name in ("max_difference", "seconds", "seconds_coarse", "unresolved_from")})
    t["resolution"] = np.zeros((S, B), dtype=np.int64)
    t["coarse_resolution"] = np.zeros((S, B), dtype=np.int64)
    t["converged"] = np.zeros((S, B), dtype=np.int8)
    t["note"] = np.full((S, B), "", dtype=object)
    for r in runs:
        i, j = _index(axes, r)
        t["w2"][i, j] = _place(times, r.times, r.w2)
        if getattr(r, "w2_width", None) is not None:
            t["w2_width"][i, j] = _place(times, r.times, r.w2_width)
        t["resolution"][i, j] = int(getattr(r, "resolution", 0))
        t["seconds"][i, j] = r.seconds
        notes = dict(r.notes or {})
        if notes:
            t["note"][i, j] = "; ".join(f"{k}: {v}" for k, v in sorted(notes.items()))
            # "stopped": the last time reached is already unresolved; "unresolved": the last one
            t["unresolved_from"][i, j] = float(np.asarray(r.times)[-1])
    return t


def _fill_coarse(table, runs, coarse_runs, axes, checks, fraction) -> None:
    """Write each fine run's coarse partner (at the fine runs' output times) and the verdict of
    their convergence check into ``table``, in place."""
    times = axes["time"]
    for r in runs:
        c = coarse_runs.get((r.solver, float(r.beta)))
        if c is None:
            continue
        i, j = _index(axes, r)
        keep = np.isin(np.round(c.times, 12), np.round(times, 12))
        c_times = np.asarray(c.times)[keep]
        table["w2_coarse"][i, j] = _place(times, c_times, np.asarray(c.w2)[keep])
        if getattr(c, "w2_width", None) is not None:
            table["w2_coarse_width"][i, j] = _place(times, c_times,
                                                    np.asarray(c.w2_width)[keep])
        table["coarse_resolution"][i, j] = int(c.resolution)
        table["seconds_coarse"][i, j] = c.seconds
        check = (checks[(r.solver, r.beta)] if checks is not None
                 else convergence(r, c, fraction))
        table["max_difference"][i, j] = check["max_difference"]
        table["converged"][i, j] = int(check["converged"])


def _snapshots(runs, axes) -> dict:
    """The stored snapshots on the (beta, snapshot_time) axes: ``density`` (B, S, nlat, nlon)
    of the density runs (``density_solver`` (B,) names the solver of each beta) and
    ``positions`` (B, S, N, 3) of the particle runs, None when no run stores them."""
    snaps, B = axes["snapshot_time"], axes["beta"].size
    out = {"density": None, "positions": None,
           "density_solver": np.full(B, "", dtype=object)}
    for r in runs:
        j = int(np.searchsorted(axes["beta"], float(r.beta)))
        for name, values in (("density", getattr(r, "densities", None)),
                             ("positions", getattr(r, "positions", None))):
            if values is None:
                continue
            if out[name] is None:
                out[name] = np.full((B, snaps.size) + np.shape(values)[1:], np.nan)
            out[name][j] = _place(snaps, r.snapshot_times, values)
            if name == "density":
                out["density_solver"][j] = r.solver
    return out


_ONE = {"units": "1"}


def _run_variables(t, limit, limit_particles, subspace) -> dict:
    """The variables every results.nc holds: the W2 curves and their run records, Pi#rho_0,
    Pi#mu^N_0 and the dominant eigenspace."""
    one = _ONE
    return {
        "w2": (("solver", "beta", "time"), t["w2"],
               {**one, "long_name": "W2 distance to the projected measure Pi#rho_0",
                "cost": "chordal |x - y|^2"}),
        "w2_width": (("solver", "beta", "time"), t["w2_width"],
                     {**one, "long_name": "width upper - lower of the certified bracket of w2 "
                      "(NaN: not recorded)"}),
        "seconds": (("solver", "beta"), t["seconds"],
                    {"units": "s", "long_name": "wall time of the run"}),
        "resolution": (("solver", "beta"), t["resolution"],
                       {**one, "long_name": "resolution: tokens N, lmax, or cells n along a cube "
                        "edge"}),
        "unresolved_from": (("solver", "beta"), t["unresolved_from"],
                            {**one, "long_name": "time from which the run is no longer resolved "
                             "(NaN: resolved throughout)"}),
        "note": (("solver", "beta"), t["note"].astype(str),
                 {"long_name": "why the run stopped early or is unresolved"}),
        "limit_points": (("atom", "component"), limit.points,
                         {**one, "long_name": "atoms of the projected measure Pi#rho_0"}),
        "limit_weights": ("atom", limit.weights, {**one, "long_name": "masses of Pi#rho_0"}),
        "limit_weights_particles": ("atom", limit_particles.weights,
                                    {**one, "long_name": "masses of Pi#mu^N_0 (sampled tokens)"}),
        "dominant_eigenspace": (("component", "basis"), np.asarray(subspace, dtype=np.float64),
                                {**one, "long_name": "orthonormal basis of E, the eigenspace of "
                                 "the largest eigenvalue of A"}),
    }


def _coarse_variables(t) -> dict:
    """The variables of the convergence check: the coarse runs and the verdicts."""
    one = _ONE
    return {
        "w2_coarse": (("solver", "beta", "time"), t["w2_coarse"],
                      {**one, "long_name": "W2 to Pi#rho_0 at the coarse resolution "
                       "(N/4 tokens, lmax/2, n/2 cells)", "cost": "chordal |x - y|^2"}),
        "w2_coarse_width": (("solver", "beta", "time"), t["w2_coarse_width"],
                            {**one, "long_name": "width of the certified bracket of "
                             "w2_coarse (NaN: not recorded)"}),
        "coarse_resolution": (("solver", "beta"), t["coarse_resolution"],
                              {**one, "long_name": "resolution of the coarse run"}),
        "seconds_coarse": (("solver", "beta"), t["seconds_coarse"],
                           {"units": "s", "long_name": "wall time of the coarse run"}),
        "max_difference": (("solver", "beta"), t["max_difference"],
                           {**one, "long_name": "max |W2 - W2_coarse| + both bracket widths at "
                            "common times"}),
        "converged": (("solver", "beta"), t["converged"],
                      {**one, "long_name": "1: max_difference < convergence_fraction * "
                       "min W2 over the whole interval, 0: not converged or not checked"}),
    }


def _coordinates(axes) -> dict:
    """The solver, beta, time, component and (when there are snapshots) snapshot_time
    coordinates."""
    one = _ONE
    coords = {"solver": ("solver", np.array(axes["solver"], dtype=str), {"long_name": "solver"}),
              "beta": ("beta", axes["beta"], {**one, "long_name": "inverse temperature beta "
                                              "(inf: zero temperature)"}),
              "time": io.time_coord(axes["time"]),
              "component": ("component", np.arange(3), {"long_name": "Cartesian component"})}
    if axes["snapshot_time"].size:
        coords["snapshot_time"] = ("snapshot_time", axes["snapshot_time"],
                                   {**one, "long_name": "model time of the stored snapshots"})
    return coords


def _add_snapshot_variables(data, coords, maps, map_grid) -> None:
    """The density maps (with their lat/lon coordinates) and token positions, when stored."""
    if maps["density"] is not None:
        lat, lon = map_grid
        coords["lat"] = ("lat", np.asarray(lat, dtype=np.float64),
                         {"units": "degrees_north", "standard_name": "latitude"})
        coords["lon"] = ("lon", np.asarray(lon, dtype=np.float64),
                         {"units": "degrees_east", "standard_name": "longitude"})
        data["density"] = (("beta", "snapshot_time", "lat", "lon"), maps["density"],
                           {"units": "sr-1", "long_name": "token density against surface area "
                            "(the solver of density_solver)"})
        data["density_solver"] = ("beta", maps["density_solver"].astype(str),
                                  {"long_name": "the solver whose density is mapped at each "
                                   "beta (\"\": none)"})
    if maps["positions"] is not None:
        data["positions"] = (("beta", "snapshot_time", "token", "component"), maps["positions"],
                             {**_ONE, "long_name": "token positions (particle solver)"})


def _attributes(cfg, fraction, gap, rate) -> dict:
    """Global attributes: provenance, the scenario as JSON, the convergence fraction (None: no
    check), the spectral gap and the zero-temperature rates."""
    attrs = {**io.global_attrs("spherepde run: low-temperature concentration on S^2", "run"),
             "scenario": io.to_json(cfg, indent=None),
             "cost": "chordal"}
    if fraction is not None:
        attrs["convergence_fraction"] = fraction
    if gap is not None:
        attrs["spectral_gap"] = float(gap)
    if rate:
        attrs["rate_fitted"] = float(rate["fitted"])
        attrs["rate_predicted"] = float(rate["predicted"])
        attrs["rate_window"] = np.asarray(rate["window"], dtype=np.float64)
    return attrs


def load_results(path):
    """Open ``results.nc`` (or the one inside a run folder) as a Dataset, with a clear error
    when it is not there or not a spherepde run."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_NAME
    if not path.is_file():
        raise FileNotFoundError(f"no results at {path}: give a results.nc written by "
                                "`spherepde run`, or the run's output folder")
    try:
        ds = io.open_dataset(path)
    except OSError as exc:
        raise ValueError(f"{path} is not a readable NetCDF file ({exc})") from None
    expected = "give a results.nc written by `spherepde run`, or the run's output folder"
    kind = ds.attrs.get("spherepde_kind")
    if kind != "run":
        raise ValueError(f"{path} is not the results of `spherepde run`: {_describe(ds)}; "
                         f"{expected}")
    missing = [name for name in REQUIRED_VARIABLES if name not in ds.variables]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(map(repr, missing))}, which every results.nc "
                         "of `spherepde run` holds (was it edited?); run the scenario again to "
                         "write it anew")
    return ds


#: What the figures of a run cannot do without: the W2 curves on their axes.
REQUIRED_VARIABLES = ("w2", "solver", "beta", "time")


def _describe(ds) -> str:
    """What a NetCDF file that is not a run's results is: spherepde's other kinds by name,
    any other file by its variables."""
    kind = ds.attrs.get("spherepde_kind")
    if kind == "sweep":
        return "it is the gathered results of `spherepde sweep` (sweep.nc)"
    if kind == "sweep task":
        return "it is one task of `spherepde sweep` (tasks/*.nc)"
    if kind:
        return f"it is a spherepde file of kind {kind!r}, written by the Python API"
    names = sorted(map(str, ds.data_vars))
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    return (f"it is a NetCDF file that spherepde did not write (no spherepde_kind attribute; "
            f"variables: {shown or 'none'})")


def scenario_of(ds) -> dict:
    """The scenario stored in a results Dataset (β = inf written as "inf")."""
    return json.loads(ds.attrs["scenario"])
