"""No upward import: each lower layer of the package imports only from layers below it, so
that a new solver or kernel never drags the upper layers into the lower ones."""
import ast
from pathlib import Path

import pytest

import spherepde

ROOT = Path(spherepde.__file__).parent

#: layer -> the spherepde modules/packages it may import (besides itself)
ALLOWED = {
    "registry": set(),
    "sphere": set(),
    "transforms": {"sphere", "registry"},
    "interaction": {"sphere", "transforms", "registry"},
    "timestepping": {"registry"},
    "density": {"sphere", "transforms", "registry", "interaction", "timestepping", "measures",
                "model", "io"},
}


def imported_layers(path: Path, layer: str):
    """The top-level spherepde names imported by the module at ``path``."""
    package = path.relative_to(ROOT.parent).with_suffix("").parts[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                parts = list(base) + (node.module.split(".") if node.module else [])
                names = [parts] if node.module else [parts + [a.name] for a in node.names]
            elif node.module and node.module.startswith("spherepde"):
                names = [node.module.split(".")]
            else:
                continue
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names if a.name.startswith("spherepde")]
        else:
            continue
        for parts in names:
            if len(parts) > 1 and parts[1] != layer:
                out.add(parts[1])
    return out


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_no_upward_import(layer):
    paths = sorted((ROOT / layer).rglob("*.py")) if (ROOT / layer).is_dir() else [
        ROOT / f"{layer}.py"]
    assert paths
    for path in paths:
        extra = imported_layers(path, layer) - ALLOWED[layer]
        assert not extra, f"{path.relative_to(ROOT)} imports {sorted(extra)} from above its layer"
