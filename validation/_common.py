"""Shared output handling of the validation scripts: one figure and one table per result."""
from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")

from spherepde import io  # noqa: E402

OUT = Path(__file__).resolve().parent / "output"


def linear_fit(x, y):
    """The least-squares line of y against x, as (its coefficients, highest power first, and
    its R^2); y without spread is fitted exactly by the flat line, R^2 = 1."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    p = np.polyfit(x, y, 1)
    if np.ptp(y) == 0:   # the residual is rounding only; R^2 would divide it by zero
        return p, 1.0
    resid = y - np.polyval(p, x)
    return p, float(1 - resid @ resid / np.sum((y - y.mean()) ** 2))


def table(rows, header) -> str:
    """A markdown table from rows of values (floats formatted to 4 significant digits, NaN as
    a dash, explained under the table)."""
    def fmt(v):
        if isinstance(v, float) and math.isnan(v):
            return "–"
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    cells = [[fmt(v) for v in r] for r in rows]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in cells]
    if not rows:   # a bare header reads as a table whose rows were lost
        lines += ["", "*(no rows: nothing of this kind was computed for this run)*"]
    if any("–" in r for r in cells):
        lines += ["", "*(–: not reached within the run's window, or not defined for that row)*"]
    return "\n".join(lines)


def publish(name: str, fig, title: str, text: str, folder: Path = OUT, dpi: int = 120) -> Path:
    """Write folder/name.png and folder/name.md atomically and echo the table."""
    folder.mkdir(parents=True, exist_ok=True)
    with io.atomic_path(folder / f"{name}.png", ".png") as tmp:
        fig.savefig(tmp, dpi=dpi, bbox_inches="tight", format="png")
    io.write_text(folder / f"{name}.md", f"# {title}\n\n{text}\n\n![{name}]({name}.png)\n")
    print(f"# {title}\n\n{text}\n\nwritten: {folder / name}.png, .md", file=sys.stdout)
    return folder / f"{name}.md"


def run_key(spec: dict) -> str:
    """A short hash of a run's description: its file name changes when any setting does."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]


def stored_run(store: Path, name: str, spec: dict, compute=None):
    """The run ``name`` of description ``spec`` under ``store``: loaded when saved, else
    computed by ``compute()`` (a dict of arrays) and saved atomically with its wall and CPU
    seconds, so an interrupted study loses at most the run in progress; None when it is not
    saved and ``compute`` is None."""
    path = store / f"{name}_{run_key(spec)}.npz"
    if path.exists():
        return io.load_npz(path)
    if compute is None:
        return None
    print(f"  running {name} ...", flush=True)
    t0, c0 = time.perf_counter(), time.process_time()
    data = compute()
    data["seconds"] = np.array(time.perf_counter() - t0)
    data["cpu_seconds"] = np.array(time.process_time() - c0)
    store.mkdir(parents=True, exist_ok=True)
    io.save_npz(path, meta=spec, **data)
    print(f"    done in {float(data['seconds']):.0f} s", flush=True)
    return io.load_npz(path)
