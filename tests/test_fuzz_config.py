"""Property-based tests of scenario files: every valid document validates; every invalid one
ends the CLI with exit code 2 and one line that names the offending key, never a traceback."""
import contextlib
import io as _io
import math
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spherepde.app.cli import main
from spherepde.app.config import DEFAULT, load_config

# Bounded example counts: the whole module runs in a few seconds.
FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


# ----------------------------------------------------------------------------- TOML writer
def toml_string(s: str) -> str:
    """A TOML basic string: quote and backslash escaped, control characters as \\uXXXX."""
    out = []
    for c in s:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        r = repr(v)
        return r if ("." in r or "e" in r) else r + ".0"
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(a) for a in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_string(k)} = {toml_value(a)}" for k, a in v.items()) + "}"
    raise TypeError(type(v))


def toml_document(doc: dict) -> str:
    lines = []
    for section, table in doc.items():
        if isinstance(table, dict):
            lines.append(f"[{toml_string(section)}]")
            lines += [f"{toml_string(k)} = {toml_value(v)}" for k, v in table.items()]
        else:
            lines.insert(0, f"{toml_string(section)} = {toml_value(table)}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- valid values
finite = st.floats(allow_nan=False, allow_infinity=False)
nonzero3 = st.lists(st.floats(-1e300, 1e300), min_size=3, max_size=3).filter(
    lambda v: any(a != 0 for a in v))
text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               min_size=1, max_size=20)


def with_gap(v):
    s = sorted(v, reverse=True)
    return s[0] > s[1]


VALID = {
    # spherepde run takes the "rotation" set-up on S^2 only (identity and d != 3: sweeps)
    "model.matrices": st.just("rotation"),
    "model.d": st.just(3),
    "model.eigenvalues": st.lists(st.floats(-100, 100), min_size=3, max_size=3).filter(with_gap),
    "model.rotation_angle": st.floats(-1e6, 1e6),
    "model.rotation_axis": nonzero3,
    "initial.kind": st.sampled_from(["uniform", "vmf", "bimodal"]),
    "initial.mean": nonzero3,
    "initial.kappa": st.floats(0, 1e4),
    "initial.mean2": nonzero3,
    "initial.weights": st.floats(0, 1).map(lambda w: [w, 1.0 - w]),
    "run.t_end": st.floats(1e-6, 1000),
    "run.n_times": st.integers(2, 10_000),
    "particles.n": st.integers(8, 10**7),  # >= 8: the convergence check runs n // 4
    "particles.init": st.sampled_from(["auto", "lattice", "sample"]),  # model.d is 3 here
    "particles.seed": st.integers(0, 2**63 - 1),
    "particles.rtol": st.floats(1e-13, 1e-2),
    "spectral.enabled": st.booleans(),
    "spectral.lmax": st.integers(8, 1023),
    "spectral.t_end": st.floats(1e-6, 1000),
    "finite_volume.enabled": st.booleans(),
    "finite_volume.n": st.integers(4, 512),
    "convergence.check": st.booleans(),
    "convergence.fraction": st.floats(1e-6, 1.0),
    "output.dir": text,
}
JOINT = {"model.normalized", "model.rescale_time", "run.betas", "finite_volume.betas"}
assert set(VALID) | JOINT == {
    f"{s}.{k}" for s in DEFAULT for k in DEFAULT[s]}

# The three keys with joint rules: SA any beta (and "inf"); USA beta <= 12, or <= 700 with
# rescale_time.
sa = st.tuples(st.just(True), st.just(False),
               st.lists(st.one_of(st.floats(0, 1e4), st.just("inf")), min_size=1, max_size=5))
usa = st.tuples(st.just(False), st.just(False),
                st.lists(st.floats(0, 12), min_size=1, max_size=5))
usa_rescaled = st.tuples(st.just(False), st.just(True),
                         st.lists(st.floats(0, 700), min_size=1, max_size=5))


@st.composite
def valid_documents(draw):
    doc: dict = {}
    for name in draw(st.lists(st.sampled_from(sorted(VALID)), unique=True)):
        section, key = name.split(".")
        doc.setdefault(section, {})[key] = draw(VALID[name])
    normalized, rescale, betas = draw(st.one_of(sa, usa, usa_rescaled))
    doc.setdefault("model", {})["normalized"] = normalized
    if rescale or draw(st.booleans()):
        doc["model"]["rescale_time"] = rescale
    doc.setdefault("run", {})["betas"] = betas
    if draw(st.booleans()):  # finite volumes at some of the run's betas
        doc.setdefault("finite_volume", {})["betas"] = draw(
            st.lists(st.sampled_from(betas), unique=True, max_size=len(betas)))
    return doc


# ----------------------------------------------------------------------------- bad values
anything_but_number = st.one_of(st.text(max_size=5), st.booleans(),
                                st.lists(st.integers(), max_size=2),
                                st.dictionaries(st.sampled_from("ab"), st.integers(), max_size=1))
non_finite = st.sampled_from([math.nan, math.inf, -math.inf])
BAD = {
    "model.matrices": st.one_of(text.filter(lambda s: s not in ("rotation", "identity")),
                                st.integers(), st.booleans()),
    # out of range, not an integer, or d != 3 with the "rotation" set-up
    "model.d": st.one_of(st.integers(max_value=1), st.integers(min_value=65),
                         st.integers(4, 64), st.floats(2.5, 9.5), st.text(max_size=3)),
    "model.eigenvalues": st.one_of(
        st.lists(st.floats(-100, 100), min_size=3, max_size=3).filter(lambda v: not with_gap(v)),
        st.lists(finite, min_size=0, max_size=2), st.lists(finite, min_size=4, max_size=5),
        st.lists(st.floats(101, 1e300), min_size=3, max_size=3),
        st.lists(non_finite, min_size=3, max_size=3), anything_but_number),
    "model.rotation_angle": st.one_of(non_finite, anything_but_number),
    "model.rotation_axis": st.one_of(st.just([0.0, 0.0, 0.0]), st.lists(finite, max_size=2),
                                     st.lists(non_finite, min_size=3, max_size=3)),
    "model.normalized": st.one_of(st.integers(), st.text(max_size=3), finite),
    "model.rescale_time": st.one_of(st.integers(), st.text(max_size=3)),
    "initial.kind": st.one_of(text.filter(lambda s: s not in ("uniform", "vmf", "bimodal")),
                              st.integers(), st.booleans()),
    "initial.mean": st.one_of(st.just([0, 0, 0]), st.lists(finite, min_size=4, max_size=4),
                              anything_but_number),
    "initial.kappa": st.one_of(st.floats(max_value=-1e-300), st.floats(min_value=1.0001e4),
                               non_finite, anything_but_number),
    "initial.mean2": st.one_of(st.just([0.0, 0.0, 0.0]), anything_but_number),
    "initial.weights": st.one_of(st.floats(-1, 2).filter(lambda w: w < 0 or w > 1).map(
        lambda w: [w, 1 - w]), st.tuples(st.floats(0, 1), st.floats(0, 1)).filter(
        lambda p: abs(sum(p) - 1) > 1e-6).map(list), anything_but_number),
    "run.betas": st.one_of(st.just([]), st.lists(st.floats(max_value=-1e-300), min_size=1,
                                                  max_size=2),
                           st.lists(st.floats(min_value=1.0001e4), min_size=1, max_size=2),
                           st.lists(text.filter(lambda s: s != "inf"), min_size=1, max_size=2),
                           st.just([math.nan]), st.integers(), st.text(max_size=3)),
    "run.t_end": st.one_of(st.floats(max_value=0), st.floats(min_value=1000.001), non_finite,
                           anything_but_number),
    "run.n_times": st.one_of(st.integers(max_value=1), st.integers(min_value=10_001),
                             st.floats(2.5, 100.5).filter(lambda x: x != int(x))),
    "particles.n": st.one_of(st.integers(max_value=1), st.integers(min_value=10**7 + 1),
                             finite.filter(lambda x: x != int(x) if math.isfinite(x) else True)),
    "particles.init": st.one_of(st.integers(), st.text(max_size=8).filter(
        lambda s: s not in ("auto", "lattice", "sample"))),
    "particles.seed": st.one_of(st.integers(max_value=-1), st.text(max_size=3)),
    "particles.rtol": st.one_of(st.floats(max_value=9e-14), st.floats(min_value=0.011),
                                non_finite),
    "spectral.enabled": st.one_of(st.integers(), st.text(max_size=3)),
    "spectral.lmax": st.one_of(st.integers(max_value=7), st.integers(min_value=1024),
                               st.floats(8.5, 100.5)),
    "spectral.t_end": st.one_of(st.floats(max_value=0), st.floats(min_value=1000.001),
                                non_finite),
    "finite_volume.enabled": st.one_of(st.integers(), st.text(max_size=3)),
    "finite_volume.n": st.one_of(st.integers(max_value=3), st.integers(min_value=513),
                                 st.floats(4.5, 100.5)),
    # not a list, not a beta, or a beta that run.betas (set to [1.0] below) lacks
    "finite_volume.betas": st.one_of(st.integers(), st.text(max_size=3), st.just([-1.0]),
                                     st.just([2.0])),
    "convergence.check": st.one_of(st.integers(), st.text(max_size=3)),
    "convergence.fraction": st.one_of(st.floats(max_value=0), st.floats(min_value=1.0001),
                                      non_finite, anything_but_number),
    "output.dir": st.one_of(st.just(""), st.integers(), st.booleans(), st.just("a\x00b")),
}
assert set(BAD) == {f"{s}.{k}" for s in DEFAULT for k in DEFAULT[s]}
identifier = st.from_regex(r"[a-z_]{1,10}", fullmatch=True)


@st.composite
def invalid_documents(draw):
    """A valid document with one fault; returns (document, the key the error must name)."""
    doc = draw(valid_documents())
    kind = draw(st.sampled_from(["value", "value", "value", "unknown key", "unknown section",
                                 "USA too cold", "rescale with SA"]))
    if kind == "value":
        name = draw(st.sampled_from(sorted(BAD)))
        section, key = name.split(".")
        doc.setdefault(section, {})[key] = draw(BAD[name])
        if name in ("model.normalized", "model.rescale_time", "finite_volume.betas"):
            doc["run"]["betas"] = [1.0]  # keep the joint beta rules out of the way
        return doc, name
    if kind == "unknown key":
        section = draw(st.sampled_from(sorted(DEFAULT)))
        key = draw(identifier.filter(lambda k: k not in DEFAULT[section]))
        doc.setdefault(section, {})[key] = draw(st.integers())
        return doc, f"{section}.{key}"
    if kind == "unknown section":
        section = draw(identifier.filter(lambda k: k not in DEFAULT))
        doc[section] = {"x": 1}
        return doc, f"[{section}]"
    if kind == "USA too cold":
        doc["model"].update(normalized=False, rescale_time=False)
        doc["run"]["betas"] = draw(st.one_of(st.just(["inf"]), st.just([12.5]), st.just([1, 50.0])))
        return doc, "run.betas"
    doc["model"].update(normalized=True, rescale_time=True)
    return doc, "model.rescale_time"


@FUZZ
@given(valid_documents())
def test_valid_documents_validate(doc):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "s.toml"
        p.write_text(toml_document(doc), encoding="utf-8")
        cfg = load_config(p)
    for section, table in doc.items():
        for key, v in table.items():
            if key not in ("betas", "eigenvalues", "mean", "mean2", "rotation_axis", "weights"):
                assert cfg[section][key] == v  # read back as written


@FUZZ
@given(invalid_documents())
def test_invalid_documents_exit_2_naming_the_key(case):
    doc, key = case
    err = _io.StringIO()
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "s.toml"
        p.write_text(toml_document(doc), encoding="utf-8")
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(_io.StringIO()):
            code = main(["run", str(p), "--out", str(Path(d) / "o"), "--quiet"])
        assert not (Path(d) / "o").exists()  # refused before anything is written
    msg = err.getvalue()
    assert code == 2, (doc, msg)
    assert "Traceback" not in msg and len(msg.strip().splitlines()) == 1, msg
    assert key in msg, (key, msg)


# ----------------------------------------------------------------------------- sweep files
def _one_line_exit_2(argv_tail, text):
    err = _io.StringIO()
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "s.toml"
        p.write_text(text, encoding="utf-8")
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(_io.StringIO()):
            code = main([argv_tail[0], str(p), "--out", str(Path(d) / "o"), "--quiet"])
        assert not (Path(d) / "o" / "tasks").exists()  # refused before computing anything
    msg = err.getvalue()
    assert code == 2, msg
    assert "Traceback" not in msg and len(msg.strip().splitlines()) == 1, msg
    return msg


scalars = st.one_of(st.integers(), st.floats(allow_nan=False), text, st.booleans(),
                    st.lists(st.integers(), max_size=3))


@st.composite
def invalid_sweeps(draw):
    """A small valid sweep document with one section or key of a wrong type or value."""
    doc = {"sweep": {"solver": "particles"},
           "base": {"particles": {"n": 20}, "spectral": {"enabled": False}},
           "axes": {"run.betas": [1.0, 4.0], "particles.n": [20, 24]}}
    where = draw(st.sampled_from(["sweep", "axes", "sweep.base", "sweep.out", "sweep.solver",
                                  "sweep.measures", "sweep.cluster_tol", "sweep.phase",
                                  "sweep.phase.x", "sweep.phase.measure", "axis value",
                                  "axis nested"]))
    value = draw(scalars)
    if where in ("sweep", "axes"):
        doc[where] = value
    elif where == "axis value":
        doc["axes"]["run.betas"] = value if not isinstance(value, list) or not value else [[1.0]]
    elif where == "axis nested":
        doc["axes"]["run.betas"] = [draw(st.lists(st.floats(0.5, 9), min_size=2, max_size=3))]
    elif where.startswith("sweep.phase."):
        doc["sweep"]["phase"] = {where.rsplit(".", 1)[1]: value}
    else:
        key = where.split(".", 1)[1]
        if key == "cluster_tol" and isinstance(value, (int, float)) and 0 < value < 2:
            value = 5.0
        if key == "solver" and value in ("particles", "spectral", "finite_volume"):
            value = 3
        if key == "measures" and isinstance(value, list) and not value:
            value = 7
        if key == "out" and isinstance(value, str):  # any text is a folder name
            value = 7
        doc["sweep"][key] = value
    return doc


def sweep_document(doc) -> str:
    lines = [f"{toml_string(k)} = {toml_value(v)}" for k, v in doc.items()
             if not isinstance(v, dict)]
    for section, table in doc.items():
        if not isinstance(table, dict):
            continue
        lines.append(f"[{toml_string(section)}]")
        for k, v in table.items():
            if isinstance(v, dict) and section != "axes":
                continue
            lines.append(f"{toml_string(k)} = {toml_value(v)}")
        for k, v in table.items():
            if isinstance(v, dict) and section != "axes":
                lines.append(f"[{toml_string(section)}.{toml_string(k)}]")
                lines += [f"{toml_string(a)} = {toml_value(b)}" for a, b in v.items()]
    return "\n".join(lines) + "\n"


@settings(FUZZ, max_examples=120)
@given(invalid_sweeps())
def test_invalid_sweep_files_exit_2_in_one_line(doc):
    _one_line_exit_2(["sweep"], sweep_document(doc))


@settings(FUZZ, max_examples=20)
@given(st.integers(1000, 20000), st.sampled_from(["run", "sweep"]),
       st.sampled_from(["array", "inline table"]))
def test_deep_nesting_exits_2_in_one_line(depth, command, shape):
    if shape == "array":
        value = "[" * depth + "]" * depth
    else:
        value = "{a = " * depth + "1" + "}" * depth
    msg = _one_line_exit_2([command], f"x = {value}\n")
    assert "too deeply" in msg or "not valid TOML" in msg
