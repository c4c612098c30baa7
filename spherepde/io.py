"""Writing results so that no finished work is lost: atomic files and resumable runs.

Every file is written to a temporary name in the same folder and moved into place with
``os.replace``, which is atomic on POSIX: a reader (or a resumed run) sees either the old file
or the complete new one, never a half-written file.
"""
from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np

__all__ = ["atomic_path", "save_npz", "load_npz", "write_text", "write_json"]


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
