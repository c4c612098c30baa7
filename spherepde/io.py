"""Writing results so that no finished work is lost, in the formats others read.

Every file is written to a temporary name in the same folder and moved into place with
``os.replace``, which is atomic on POSIX: a reader (or a resumed run) sees either the old file
or the complete new one, never a half-written file.

Results leave the library as :class:`xarray.Dataset` objects with CF-style metadata
(``units``, ``long_name``; dimensionless model time has units "1", a density on S^2 is per
steradian) and are stored as NetCDF. The model and the solver settings travel as global
attributes (:func:`model_attrs`, :func:`settings_attrs`); :func:`save_dataset` and
:func:`open_dataset` round-trip a Dataset exactly.
"""
from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np

__all__ = ["atomic_path", "save_npz", "load_npz", "write_text", "write_json", "save_dataset",
           "open_dataset", "model_attrs", "model_from_attrs", "settings_attrs",
           "settings_from_attrs", "time_coord"]

#: The CF conventions the datasets follow.
CF_CONVENTIONS = "CF-1.10"
#: Prefixes of the global attributes that hold the model and the solver settings.
MODEL_PREFIX, SETTING_PREFIX = "model_", "setting_"


@contextmanager
def atomic_path(path, suffix: str = ""):
    """Yield a temporary path next to ``path``; move it onto ``path`` when the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix or path.suffix,
                               dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_npz(path, /, **arrays) -> Path:
    """Atomically write arrays (and JSON-able metadata under ``meta``) to a .npz file.

    As with ``np.savez``, ".npz" is appended to a name without it; the path written is returned.
    """
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    meta = arrays.pop("meta", None)
    if meta is not None:
        arrays["meta_json"] = np.array(json.dumps(meta, default=_jsonable))
    with atomic_path(path, ".npz") as tmp:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)
    return path


def load_npz(path) -> dict:
    """Read a file written by :func:`save_npz`; metadata comes back under ``meta``."""
    with np.load(path, allow_pickle=False) as f:
        out = {k: f[k] for k in f.files}
    if "meta_json" in out:
        out["meta"] = json.loads(str(out.pop("meta_json")))
    return out


def write_text(path, text: str) -> Path:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)
    return Path(path)


def write_json(path, obj) -> Path:
    return write_text(path, json.dumps(obj, indent=2, default=_jsonable))


def _jsonable(o):
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


# ---------------------------------------------------------------------------- xarray / NetCDF
def save_dataset(ds, path) -> Path:
    """Write an :class:`xarray.Dataset` to NetCDF at ``path``, atomically.

    Every variable is stored losslessly (no packing); compression is lossless zlib.
    """
    path = Path(path)
    enc = {name: {"zlib": True, "complevel": 4} for name, v in ds.data_vars.items()
           if v.dtype.kind in "fiu" and v.ndim > 0}
    with atomic_path(path, ".nc") as tmp:
        ds.to_netcdf(tmp, engine="netcdf4", encoding=enc)
    return path


def open_dataset(path):
    """Read a NetCDF file into memory (the file is closed on return), as :func:`xarray.open_dataset`
    with the arrays loaded."""
    import xarray as xr

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no NetCDF file at {path}")
    with xr.open_dataset(path, engine="netcdf4") as ds:
        return ds.load()


def time_coord(times, long_name: str = "model time"):
    """The ``time`` coordinate: dimensionless model time (units "1")."""
    import xarray as xr

    return xr.DataArray(np.asarray(times, dtype=np.float64), dims="time",
                        attrs={"units": "1", "long_name": long_name, "axis": "T"})


def model_attrs(model) -> dict:
    """The model as NetCDF-storable global attributes.

    Q, K, V are stored row-major as flat arrays of length d·d (``model_Q`` ...), with
    ``model_d``; booleans as 0/1 integers (NetCDF has no boolean attribute); beta = inf as
    the IEEE value inf.
    """
    return {f"{MODEL_PREFIX}d": np.int64(model.d),
            f"{MODEL_PREFIX}beta": np.float64(model.beta),
            f"{MODEL_PREFIX}normalized": np.int8(model.normalized),
            f"{MODEL_PREFIX}hardmax": np.int8(model.hardmax),
            f"{MODEL_PREFIX}attention": "SA (softmax)" if model.normalized else "USA (unnormalized)",
            f"{MODEL_PREFIX}Q": np.asarray(model.Q, dtype=np.float64).ravel(),
            f"{MODEL_PREFIX}K": np.asarray(model.K, dtype=np.float64).ravel(),
            f"{MODEL_PREFIX}V": np.asarray(model.V, dtype=np.float64).ravel()}


def model_from_attrs(attrs):
    """The :class:`spherepde.Model` described by :func:`model_attrs` attributes."""
    from .model import Model

    try:
        d = int(attrs[f"{MODEL_PREFIX}d"])
        mats = {k: np.asarray(attrs[f"{MODEL_PREFIX}{k}"], dtype=np.float64).reshape(d, d)
                for k in "QKV"}
        return Model(**mats, beta=float(attrs[f"{MODEL_PREFIX}beta"]), d=d,
                     normalized=bool(attrs[f"{MODEL_PREFIX}normalized"]),
                     hardmax=bool(attrs.get(f"{MODEL_PREFIX}hardmax", 0)))
    except KeyError as exc:
        raise ValueError(f"the dataset carries no model (attribute {exc} missing); was it written "
                         "by spherepde's to_xarray?") from None


def settings_attrs(settings: dict, prefix: str = SETTING_PREFIX) -> dict:
    """Solver settings (and statistics) as attributes: None values are left out, booleans
    become 0/1, everything else is stored as given (numbers, strings)."""
    out = {}
    for k, v in settings.items():
        if v is None:
            continue
        if isinstance(v, (bool, np.bool_)):
            v = np.int8(v)
        elif isinstance(v, Path):
            v = str(v)
        out[f"{prefix}{k}"] = v
    return out


def settings_from_attrs(attrs, prefix: str = SETTING_PREFIX) -> dict:
    """The inverse of :func:`settings_attrs` (numbers come back as Python scalars)."""
    out = {}
    for k, v in attrs.items():
        if k.startswith(prefix):
            out[k[len(prefix):]] = v.item() if isinstance(v, np.generic) else v
    return out


def global_attrs(title: str, kind: str) -> dict:
    """The global attributes every spherepde dataset starts from."""
    from . import __version__

    return {"Conventions": CF_CONVENTIONS, "title": title, "source": f"spherepde {__version__}",
            "spherepde_kind": kind,
            "references": "docs/theory.md of the spherepde repository"}
