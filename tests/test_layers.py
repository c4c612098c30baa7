"""No upward import: every module of the package sits in a layer and imports only from layers
below it, so that a new solver or kernel never drags the upper layers into the lower ones.

From the bottom: geometry, registry and time stepping; transforms and measures; the
interaction (kernels, operators, energy) and the closed forms; the model; I/O; the solvers
(particles, densities); Wasserstein distances; analysis; the application."""
import ast
from pathlib import Path

import pytest

import spherepde

ROOT = Path(spherepde.__file__).parent

#: every top-level module or package of spherepde -> its layer; it may import lower layers only
LAYER = {
    "_numba_target": 0, "registry": 0, "sphere": 0,
    "transforms": 1, "measures": 1, "timestepping": 1,
    "interaction": 2, "exact": 2,
    "model": 3,
    "io": 4,
    "density": 5, "particles": 5,
    "wasserstein": 6,
    "analysis": 7,
    "app": 8,
}

#: names imported from the package root that are no layer: the version string
ROOT_ATTRIBUTES = {"__version__"}


def top_level_units():
    """The top-level modules and packages of spherepde (the root ``__init__`` excepted: it is
    the public surface and re-exports every layer)."""
    units = {p.stem for p in ROOT.glob("*.py") if p.name != "__init__.py"}
    units |= {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    return units


def imported_units(source: str, module: tuple, unit: str):
    """The top-level spherepde units imported by ``source``, the text of the module whose
    dotted name is ``module`` (``("spherepde", "density", "base")``), other than ``unit``."""
    package = module[:-1]
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                parts = list(base) + (node.module.split(".") if node.module else [])
                names = [parts] if node.module else [parts + [a.name] for a in node.names]
            elif node.module and node.module.split(".")[0] == "spherepde":
                parts = node.module.split(".")
                names = [parts] if len(parts) > 1 else [parts + [a.name] for a in node.names]
            else:
                continue
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names if a.name.split(".")[0] == "spherepde"]
        else:
            continue
        for parts in names:
            if len(parts) > 1 and parts[1] != unit and parts[1] not in ROOT_ATTRIBUTES:
                out.add(parts[1])
    return out


def modules_of(unit: str):
    path = ROOT / unit
    return sorted(path.rglob("*.py")) if path.is_dir() else [ROOT / f"{unit}.py"]


def test_every_module_has_a_layer():
    units = top_level_units()
    assert units - set(LAYER) == set(), "new top-level modules: give each a layer in LAYER"
    assert set(LAYER) - units == set(), "LAYER names modules that no longer exist"


@pytest.mark.parametrize("unit", sorted(LAYER))
def test_no_upward_import(unit):
    for path in modules_of(unit):
        module = ("spherepde",) + path.relative_to(ROOT).with_suffix("").parts
        imported = imported_units(path.read_text(), module, unit)
        unknown = imported - set(LAYER)
        assert not unknown, f"{path.relative_to(ROOT)} imports {sorted(unknown)}: no such layer"
        upward = {u for u in imported if LAYER[u] >= LAYER[unit]}
        assert not upward, (f"{path.relative_to(ROOT)} (layer {LAYER[unit]}) imports "
                            f"{sorted(upward)} from its own layer or above")


@pytest.mark.parametrize("source, module, expected", [
    ("from ..app import cli", ("spherepde", "density", "base"), {"app"}),
    ("from .. import wasserstein", ("spherepde", "density", "base"), {"wasserstein"}),
    ("from ..interaction.harmonic import HarmonicField", ("spherepde", "density", "base"),
     {"interaction"}),
    ("from .model import Model", ("spherepde", "particles"), {"model"}),
    ("import spherepde.analysis.crossval", ("spherepde", "particles"), {"analysis"}),
    ("from spherepde import measures, __version__", ("spherepde", "io"), {"measures"}),
    ("from . import s2_spectral", ("spherepde", "density", "__init__"), set()),
])
def test_the_import_scan_sees_each_form_of_import(source, module, expected):
    # the layering test can only fail if the scan finds the imports: each form, relative and
    # absolute, must be attributed to the unit it reaches
    assert imported_units(source, module, module[1]) == expected
