"""Writing results so that no finished work is lost, in formats others read: atomic files,
strict JSON, a folder lock, NetCDF.

Every file is written to a temporary name in the same folder (``.NAME.XXXXXXXX.part``) and
moved into place with ``os.replace``, which is atomic on POSIX: a reader (or a resumed run)
sees either the old file or the complete new one, never a half-written file. A process killed
mid-write leaves only a ``.part`` file, which :func:`remove_partial` deletes. Files get the
permissions of the umask, as ``open`` would give them (not the 0600 of temporary files).

Results leave the library as :class:`xarray.Dataset` objects with CF-style metadata
(``units``, ``long_name``; dimensionless model time has units "1", a density on S^2 is per
steradian) and are stored as NetCDF. The model and the solver settings travel as global
attributes (:func:`model_attrs`, :func:`settings_attrs`); :func:`save_dataset` and
:func:`open_dataset` round-trip a Dataset exactly.
"""
from __future__ import annotations

import errno
import json
import math
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np

__all__ = ["atomic_path", "save_npz", "load_npz", "write_text", "write_json", "to_json",
           "remove_partial", "FolderLock", "FolderBusyError", "save_dataset", "open_dataset",
           "model_attrs", "model_from_attrs", "settings_attrs", "settings_from_attrs",
           "time_coord"]

#: The CF conventions the datasets follow.
CF_CONVENTIONS = "CF-1.10"
#: Prefixes of the global attributes that hold the model and the solver settings.
MODEL_PREFIX, SETTING_PREFIX = "model_", "setting_"

PARTIAL_SUFFIX = ".part"


def _umask() -> int:
    # os.umask can only be read by setting it; set it back at once.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path, suffix: str = ""):
    """Yield a temporary path next to ``path``; move it onto ``path`` when the block succeeds.

    ``suffix`` is accepted for compatibility; the temporary name always ends in ``.part``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=PARTIAL_SUFFIX, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def remove_partial(folder) -> int:
    """Delete the temporary files that killed writers left in ``folder``; returns how many.

    Call it only while holding the folder's :class:`FolderLock`: a live writer's file would
    otherwise be removed under it.
    """
    n = 0
    for p in Path(folder).glob(f".*{PARTIAL_SUFFIX}"):
        try:
            p.unlink()
            n += 1
        except FileNotFoundError:  # pragma: no cover - removed by someone else meanwhile
            pass
    return n


def save_npz(path, /, **arrays) -> Path:
    """Atomically write arrays (and JSON-able metadata under ``meta``) to a .npz file.

    As with ``np.savez``, ".npz" is appended to a name without it; the path written is returned.
    """
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_name(path.name + ".npz")
    meta = arrays.pop("meta", None)
    if meta is not None:
        arrays["meta_json"] = np.array(to_json(meta, indent=None))
    with atomic_path(path) as tmp:
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
        Path(tmp).write_text(text, encoding="utf-8")
    return Path(path)


def to_json(obj, indent: int | None = 2) -> str:
    """Strict JSON (RFC 8259): infinities are written as the strings "inf" / "-inf", as the
    scenario files write β = ∞; a NaN is an error (no JSON parser outside Python reads it)."""
    return json.dumps(_strict(obj), indent=indent, allow_nan=False)


def write_json(path, obj) -> Path:
    return write_text(path, to_json(obj) + "\n")


def _strict(o):
    if isinstance(o, dict):
        return {str(k): _strict(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_strict(v) for v in o]
    if isinstance(o, np.ndarray):
        return _strict(o.tolist())
    if isinstance(o, (np.floating, np.integer, np.bool_)):
        return _strict(o.item())
    if isinstance(o, float) and not math.isfinite(o):
        if math.isnan(o):
            raise ValueError("NaN cannot be written as strict JSON")
        return "inf" if o > 0 else "-inf"
    if isinstance(o, Path):
        return str(o)
    if o is None or isinstance(o, (str, bool, int, float)):
        return o
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


class FolderBusyError(RuntimeError):
    """Another process holds the folder's lock."""


class FolderLock:
    """An exclusive, non-blocking lock on a folder (``fcntl.flock`` on ``<folder>/.lock``).

    The operating system drops the lock when its holder exits, even by SIGKILL, so a killed
    run never leaves the folder locked. Entering raises :class:`FolderBusyError` when another
    process holds it; the message names that process.
    """

    def __init__(self, folder):
        self.path = Path(folder) / ".lock"
        self._fh = None

    def __enter__(self):
        import fcntl

        fh = open(self.path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise FolderBusyError(f"{self.path.parent} is in use by {holder}") from None
            raise
        fh.seek(0)
        fh.truncate()
        fh.write(f"process {os.getpid()}\n")
        fh.flush()
        self._fh = fh
        return self

    def __exit__(self, *exc):
        import fcntl

        if self._fh is not None:
            self._fh.seek(0)
            self._fh.truncate()
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None
        return False


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
