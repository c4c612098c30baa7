"""Write a benchmark's measurements to ``docs/benchmarks/NAME.md``: the tables, with the date,
the machine and the command that produced them, so that every figure quoted in the docs can
be traced to a rerunnable command.

>>> print(markdown_table(["n", "s"], [[32, 0.125], [64, 1.5]]))
| n | s |
|---|---|
| 32 | 0.125 |
| 64 | 1.5 |
"""
from __future__ import annotations

import datetime
import os
import platform
import shlex
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks"


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def markdown_table(header, rows) -> str:
    """A markdown table; floats with four significant digits."""
    lines = ["| " + " | ".join(map(str, header)) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def machine() -> str:
    """One line: CPU model, cores, OS, Python, numpy and its BLAS."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import numpy as np
    blas = "unknown BLAS"
    try:
        from threadpoolctl import threadpool_info
        infos = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        if infos:
            blas = f"{infos[0].get('internal_api')} {infos[0].get('version')}"
    except ImportError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, numpy {np.__version__} ({blas})")


def write(name: str, title: str, body: str, directory: Path | None = None) -> Path:
    """Write ``body`` (markdown) under a header naming the date, machine and command to
    ``docs/benchmarks/<name>.md``, atomically (a temporary file moved into place)."""
    directory = DOCS if directory is None else Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = "PYTHONPATH=. python " + " ".join(
        shlex.quote(a) for a in [os.path.relpath(sys.argv[0])] + sys.argv[1:])
    text = (f"# {title}\n\n- date: {now}\n- machine: {machine()}\n- command: `{command}`\n\n"
            f"{body.rstrip()}\n")
    path = directory / f"{name}.md"
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".part")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path
