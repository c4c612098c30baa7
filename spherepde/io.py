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
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np

__all__ = ["atomic_path", "save_npz", "load_npz", "write_text", "write_json", "to_json",
           "remove_partial", "FolderLock", "FolderBusyError", "LinkError", "refuse_link",
           "Manifest", "FolderNotOwnedError", "save_dataset", "open_dataset",
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


class LinkError(OSError):
    """A file or folder that spherepde would write is a symbolic link; it is never followed, so
    that a link planted in an output folder cannot make a run write or truncate another file."""


def refuse_link(path) -> Path:
    """``path``, after checking that it is not a symbolic link (dangling or not).

    Raises :class:`LinkError` naming the link and its target.
    """
    path = Path(path)
    if path.is_symlink():
        raise LinkError(errno.ELOOP, f"{path} is a symbolic link (to {os.readlink(path)}); "
                        "spherepde does not write through links: remove it or give another "
                        "folder", str(path))
    return path


@contextmanager
def atomic_path(path, suffix: str = ""):
    """Yield a temporary path next to ``path``; move it onto ``path`` when the block succeeds.

    Neither ``path`` nor its folder may be a symbolic link (:class:`LinkError`): the temporary
    file is created exclusively (``mkstemp``) and ``os.replace`` swaps the name, so no existing
    file outside the folder is ever opened for writing. ``suffix`` is accepted for
    compatibility; the temporary name always ends in ``.part``.
    """
    path = Path(path)
    refuse_link(path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_link(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=PARTIAL_SUFFIX, dir=path.parent)
    os.close(fd)
    try:
        try:
            yield Path(tmp)
        except OSError as exc:  # e.g. a full disk: say which file could not be written
            if exc.filename is None and exc.errno is not None:
                raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
            raise
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def remove_partial(folder, names) -> int:
    """Delete the temporary files that killed writers of ``names`` left in ``folder``; returns
    how many.

    Only the temporary files of the given names (``.NAME.XXXXXXXX.part``, as
    :func:`atomic_path` makes them) are removed, never another ``.part`` file, and never
    through a symbolic link. Call it only while holding the folder's :class:`FolderLock`: a
    live writer's file would otherwise be removed under it.
    """
    n = 0
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        return 0
    for name in names:
        for p in folder.glob(f".{glob_escape(name)}.{'[!.]' * 8}{PARTIAL_SUFFIX}"):
            if p.is_symlink() or not p.is_file():
                continue
            try:
                p.unlink()
                n += 1
            except FileNotFoundError:  # pragma: no cover - removed by someone else meanwhile
                pass
    return n


def glob_escape(name: str) -> str:
    """``name`` with the glob metacharacters escaped (``[`` ``*`` ``?`` taken literally)."""
    return re.sub(r"([\[\]*?])", r"[\1]", name)


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

        # O_NOFOLLOW: a ``.lock`` that is a symbolic link is refused, never opened (and then
        # truncated) through the link.
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            if exc.errno == errno.ELOOP or self.path.is_symlink():
                refuse_link(self.path)
            raise
        fh = os.fdopen(fd, "r+")
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


# ---------------------------------------------------------------------------- folder ownership
#: The file that marks a folder as spherepde's and lists what spherepde wrote there.
MANIFEST_NAME = ".spherepde-manifest.json"


class FolderNotOwnedError(OSError):
    """A non-empty folder that spherepde did not create (it has no manifest), or one that holds
    another kind of output; the message names what is there."""


class Manifest:
    """What spherepde wrote into one output folder: ``<folder>/.spherepde-manifest.json``.

    spherepde deletes or replaces only the files listed here (and the temporary files of
    their names), so that a user's own file in an output folder is never touched. A name is
    added *before* its file is written: a crash in between leaves a listed name without a
    file, which is harmless, never an unlisted file of spherepde's.

    Parameters
    ----------
    folder : the output folder (it need not exist yet)
    kind : what the folder holds ("run", "sweep"); a folder of another kind is refused
    """

    def __init__(self, folder, kind: str):
        self.folder = Path(folder)
        self.kind = kind
        self.files: set[str] = set()
        self._saved = False

    @property
    def path(self) -> Path:
        return self.folder / MANIFEST_NAME

    @classmethod
    def open(cls, folder, kind: str, force: bool = False, override: str = "force=True"):
        """The manifest of ``folder``, checking that spherepde may write there: the folder is
        absent, empty, already spherepde's (of this ``kind``), or ``force`` is given.

        Reads only; nothing is written until :meth:`add`. Raises :class:`LinkError` when the
        folder or its manifest is a symbolic link and :class:`FolderNotOwnedError` (naming what
        is there and ``override``, the option that takes the folder over) otherwise.
        """
        self = cls(folder, kind)
        refuse_link(self.folder)
        if not self.folder.is_dir():
            return self
        refuse_link(self.path)
        if self.path.is_file():
            try:
                doc = json.loads(self.path.read_text(encoding="utf-8"))
                listed, owner = doc["files"], doc["kind"]
                if not isinstance(listed, list) or not all(isinstance(f, str) for f in listed):
                    raise TypeError("files is not a list of names")
            except (ValueError, KeyError, TypeError) as exc:
                raise FolderNotOwnedError(
                    errno.EEXIST, f"the manifest {self.path} is damaged ({exc}); remove it and "
                    f"use {override} if the files there may be replaced, or give another folder",
                    str(self.path)) from None
            if owner != kind and not force:
                raise FolderNotOwnedError(
                    errno.EEXIST, f"{self.folder} holds the output of a spherepde {owner}, not "
                    f"of a {kind}; give another folder (or {override})", str(self.folder))
            self.files = set(listed)
            self._saved = True
            return self
        # a lone lock file: a run that holds the folder and has not written its manifest yet
        present = sorted(p.name for p in self.folder.iterdir() if p.name != ".lock")
        if present and not force:
            shown = ", ".join(present[:5]) + (f" and {len(present) - 5} more"
                                              if len(present) > 5 else "")
            raise FolderNotOwnedError(
                errno.EEXIST, f"{self.folder} is not empty and was not created by spherepde "
                f"(it holds {shown}); give an empty or new folder, or {override} to write "
                "there (files of the names spherepde writes are then replaced)",
                str(self.folder))
        return self

    def owns(self, name: str) -> bool:
        """Whether spherepde wrote ``name`` (relative to the folder)."""
        return name in self.files

    def add(self, *names: str) -> None:
        """List ``names`` (relative paths) before writing them; saves the manifest at once."""
        new = set(names) - self.files
        if new or not self._saved:
            self.files |= new
            self.folder.mkdir(parents=True, exist_ok=True)
            write_text(self.path, to_json({"kind": self.kind, "files": sorted(self.files)}) + "\n")
            self._saved = True

    def remove(self, name: str) -> bool:
        """Delete ``name`` when spherepde wrote it (never a link's target); returns whether a
        file was deleted."""
        p = self.folder / name
        if not self.owns(name) or not p.is_file() or p.is_symlink():
            return False
        p.unlink()
        return True

    def remove_partial(self, subfolder: str = "") -> int:
        """Delete the temporary files that killed writers of listed names left behind in
        ``subfolder`` (see :func:`remove_partial`)."""
        prefix = f"{subfolder}/" if subfolder else ""
        names = [f[len(prefix):] for f in self.files
                 if f.startswith(prefix) and "/" not in f[len(prefix):]]
        return remove_partial(self.folder / subfolder if subfolder else self.folder, names)


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
            f"{MODEL_PREFIX}attention": ("SA (softmax)" if model.normalized
                                         else "USA (unnormalized)"),
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
