"""Shared output handling of the validation scripts: one figure and one table per result."""
from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from spherepde import io  # noqa: E402

OUT = Path(__file__).resolve().parent / "output"


def table(rows, header) -> str:
    """A markdown table from rows of values (floats formatted to 4 significant digits)."""
    def fmt(v):
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def publish(name: str, fig, title: str, text: str) -> Path:
    """Write OUT/name.png and OUT/name.md atomically and echo the table."""
    OUT.mkdir(parents=True, exist_ok=True)
    with io.atomic_path(OUT / f"{name}.png", ".png") as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
    io.write_text(OUT / f"{name}.md", f"# {title}\n\n{text}\n\n![{name}]({name}.png)\n")
    print(f"# {title}\n\n{text}\n\nwritten: {OUT / name}.png, .md", file=sys.stdout)
    return OUT / f"{name}.md"
