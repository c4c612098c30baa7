"""The examples in the docstrings run and print what they say, so that an example cannot
drift from the code it shows."""
import doctest
import importlib
import pkgutil

import pytest

import spherepde

MODULES = sorted(m.name for m in pkgutil.walk_packages(spherepde.__path__, "spherepde."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    try:
        module = importlib.import_module(name)
    except ImportError as exc:  # an optional backend (torch) that is not installed
        pytest.skip(f"{name}: {exc}")
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
