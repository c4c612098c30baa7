"""Units a reader can hold in their head: no function of the package over MAX_LINES lines, and
no numba function with more than MAX_POSITIONAL positional arguments. And constants that numba
compiles in are marked as such: a module constant read as a global by a numba function (or in
its decorator) is frozen into the machine code and its on-disk cache, so rebinding it would
change what Python sees but not what runs; every such constant is annotated ``Final``.

A function's length is its body's, docstring included (from its first statement to its last
line). A numba inner loop may be longer when splitting it would cost speed (a call that numba
does not inline, or state that has to live in registers): it then carries a comment, on the
lines right above its decorators, that says why. Many arguments of a numba function are grouped
into namedtuples or structured arrays, which numba takes as one argument each."""
import ast
import re
from pathlib import Path

import spherepde

ROOT = Path(spherepde.__file__).parent
#: the longest function body allowed, in lines
MAX_LINES = 80
#: the most positional arguments of a numba function
MAX_POSITIONAL = 12


def _is_jit(expr) -> bool:
    """Whether a decorator (or the callee of ``f = njit(...)(f)``) is numba's jit or njit, as
    ``njit``, ``nb.njit``, ``numba.njit(...)``, ``jit(...)``."""
    while isinstance(expr, ast.Call):
        expr = expr.func
    name = expr.attr if isinstance(expr, ast.Attribute) else getattr(expr, "id", "")
    return name in ("jit", "njit")


def _jitted_by_assignment(tree) -> set:
    """Names rebound at module level as ``f = njit(...)(f)``."""
    out = set()
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and _is_jit(node.value.func) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            out.add(node.targets[0].id)
    return out


def _comment_above(lines, node) -> str:
    """The comment lines directly above a function's first decorator (or its def)."""
    first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1  # 0-based
    out = []
    k = first - 1
    while k >= 0 and lines[k].strip().startswith("#"):
        out.append(lines[k].strip().lstrip("#").strip())
        k -= 1
    return " ".join(reversed(out))


def scan(source: str, name: str = "<source>"):
    """(too long, too many numba arguments): lists of "name:line function (count)" for the
    functions of ``source`` that break the rules above."""
    tree = ast.parse(source)
    lines = source.splitlines()
    by_assignment = _jitted_by_assignment(tree)
    long, wide = [], []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        jitted = (any(_is_jit(d) for d in node.decorator_list) or node.name in by_assignment)
        length = node.body[-1].end_lineno - node.body[0].lineno + 1
        where = f"{name}:{node.lineno} {node.name}"
        if length > MAX_LINES and not (jitted and _comment_above(lines, node)):
            long.append(f"{where} ({length} lines)")
        positional = len(node.args.posonlyargs) + len(node.args.args)
        if jitted and positional > MAX_POSITIONAL:
            wide.append(f"{where} ({positional} positional arguments)")
    return long, wide


_CONSTANT = re.compile(r"^_?[A-Z][A-Z0-9_]*$")


def compiled_constants(source: str):
    """(name, Final or not) of the module-level UPPER_CASE constants of ``source`` that a numba
    function reads (in its body or its decorator)."""
    tree = ast.parse(source)
    final = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name) and _CONSTANT.match(t.id):
                    final[t.id] = False
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and _CONSTANT.match(node.target.id):
            final[node.target.id] = "Final" in ast.unparse(node.annotation)
    by_assignment = _jitted_by_assignment(tree)
    read = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and (
                any(_is_jit(d) for d in node.decorator_list) or node.name in by_assignment):
            read |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in final}
    return sorted((name, final[name]) for name in read)


def _package():
    long, wide = [], []
    for path in sorted(ROOT.rglob("*.py")):
        a, b = scan(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT.parent)))
        long += a
        wide += b
    return long, wide


def _function(name, n_lines, decorators=(), comment=None, n_args=1):
    """Source of a function of n_lines body lines and n_args positional arguments."""
    head = [f"# {comment}"] if comment else []
    args = ", ".join(f"a{i}" for i in range(n_args))
    body = [f"    x{i} = {i}" for i in range(n_lines)]
    return "\n".join(head + list(decorators) + [f"def {name}({args}):"] + body) + "\n"


def test_scan_sees_long_and_wide_functions():
    """The scan finds what it is for (so that an empty list below means something)."""
    limit = MAX_LINES
    assert scan(_function("f", limit))[0] == []
    assert len(scan(_function("f", limit + 1))[0]) == 1
    # a long numba loop passes only with its reason above it
    jit = ["@nb.njit(cache=True)"]
    assert len(scan(_function("f", limit + 1, jit))[0]) == 1
    reason = "one loop: a call per element would not inline"
    assert scan(_function("f", limit + 1, jit, reason))[0] == []
    # a long plain function is not excused by a comment
    assert len(scan(_function("f", limit + 1, (), "a reason"))[0]) == 1
    wide = MAX_POSITIONAL + 1
    assert len(scan(_function("f", 1, ["@njit"], n_args=wide))[1]) == 1
    assert scan(_function("f", 1, ["@njit"], n_args=MAX_POSITIONAL))[1] == []
    assert scan(_function("f", 1, [], n_args=wide))[1] == []  # plain Python: keywords serve
    # jitted by assignment, as f = njit(cache=True)(f)
    assert len(scan(_function("f", 1, [], n_args=wide) + "f = njit(cache=True)(f)\n")[1]) == 1


def test_no_function_too_long():
    long, _ = _package()
    assert long == [], ("split these into named steps (numba inner loops: say why above the "
                        f"decorator): {long}")


def test_no_numba_function_with_too_many_arguments():
    _, wide = _package()
    assert wide == [], f"group these arguments (namedtuple, structured array): {wide}"


def test_scan_sees_compiled_constants():
    source = ("from typing import Final\nA = 1\nB: Final = 2\nC = 3\nFLAGS = {'nnan'}\n"
              "@njit(fastmath=FLAGS)\ndef f(x):\n    return x + A + B\n"
              "def g(x):\n    return C\n")
    assert compiled_constants(source) == [("A", False), ("B", True), ("FLAGS", False)]


def test_constants_compiled_into_numba_are_final():
    plain = []
    for path in sorted(ROOT.rglob("*.py")):
        plain += [f"{path.relative_to(ROOT.parent)}: {name}" for name, final in
                  compiled_constants(path.read_text(encoding="utf-8")) if not final]
    assert plain == [], f"read by numba code, so annotate them Final: {plain}"
