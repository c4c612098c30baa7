"""Sphinx configuration of the spherepde API reference, built from the numpydoc docstrings:

    sphinx-build -W -b html docs/api "$(mktemp -d)"
"""
import os
import re
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

project = "spherepde"
author = "the spherepde authors"
copyright = "the spherepde authors"

import spherepde  # noqa: E402

release = version = spherepde.__version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.mathjax", "sphinx.ext.viewcode", "numpydoc"]

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
# The solvers' members are listed by autodoc; numpydoc's own member tables would repeat them.
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
# Shapes like ``x: (..., d)`` and the math stay as written in the docstrings.
numpydoc_validation_checks = set()

html_theme = "alabaster"
exclude_patterns = ["_build"]

# The docstrings write math in plain text so that it reads well in ``help()``: ``|x - y|^2``,
# ``|B^T x|``. In reStructuredText a bar opens a substitution reference, so each bar outside
# literals, roles, math and literal blocks and doctests is escaped before numpydoc parses the
# docstring.
_PROTECTED = re.compile(r"(``.+?``|:[\w:+-]+:`[^`]*`|`[^`]*`_{0,2})")


def _escape_bars(line):
    parts = _PROTECTED.split(line)
    for i in range(0, len(parts), 2):  # even parts lie outside the protected spans
        parts[i] = re.sub(r"(?<!\\)\|", r"\\|", parts[i])
    return "".join(parts)


def _escape_plain_math(app, what, name, obj, options, lines):
    mode, block_indent = None, 0
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if mode == "doctest":  # a doctest and its output run until a blank line
            if stripped:
                continue
            mode = None
        elif mode == "block":  # a math or literal block: its indented body
            if not stripped or indent > block_indent:
                continue
            mode = None
        if stripped.startswith(">>>"):
            mode = "doctest"
        elif stripped.startswith(".. math::") or stripped.endswith("::"):
            mode, block_indent = "block", indent
            if stripped.startswith(".. math::"):
                continue
            lines[i] = _escape_bars(line)
        else:
            lines[i] = _escape_bars(line)


def setup(app):
    # before numpydoc (priority 500) turns the sections into reStructuredText
    app.connect("autodoc-process-docstring", _escape_plain_math, priority=400)
