"""Scenarios for ``spherepde run``: the built-in default and user TOML files, validated.

A scenario file has the sections below; every key is optional and falls back to the default
scenario (see ``DEFAULT``). An unknown key or a value outside its allowed set is an error that
names the key and what it accepts.

.. code-block:: toml

    [model]
    matrices = "rotation"            # "rotation": the set-up below; "identity": Q = K = V = I
    d = 3                            # tokens on S^{d-1}; d != 3 needs "identity", a uniform
                                     # initial measure and the spectral solver off
    eigenvalues = [1.0, 0.4, 0.0]    # eigenvalues of A = V B^T, descending; gap = 1st - 2nd
    rotation_angle = 0.9             # B = Q^T K is the rotation by this angle (radians) ...
    rotation_axis = [1.0, 1.0, 1.0]  # ... about this axis
    normalized = true                # SA (true) or USA (false)
    rescale_time = false             # USA only: velocity / e^beta (USA time = t e^-beta)

    [initial]
    kind = "vmf"                     # "uniform", "vmf" or "bimodal" (two vMF caps)
    mean = [0.4, 0.3, 1.0]           # vmf and bimodal: the (first) cap's mean direction
    kappa = 1.5                      # vmf and bimodal: concentration of each cap
    mean2 = [-0.3, -1.0, -0.4]       # bimodal only: the second cap's mean direction
    weights = [0.6, 0.4]             # bimodal only: masses of the two caps (sum 1)

    [run]
    betas = [4.0, 16.0, 64.0, 256.0, "inf"]  # inverse temperatures <= 1e4; "inf" = zero temp.
    t_end = 8.0                      # final time of the particle runs, <= 1000
    n_times = 41                     # output times, equally spaced in [0, t_end]

    [particles]
    n = 4000                         # number of tokens
    init = "auto"                    # "lattice": rho_0 on a Fibonacci lattice (S^2; S^1 a
                                     # grid), "sample": a random sample (seed), "auto": lattice
                                     # where d <= 3, sample otherwise
    seed = 0                         # of the random sample
    rtol = 1e-5                      # tolerance of the adaptive Dormand–Prince pair

    [spectral]
    enabled = true
    lmax = 128                       # spherical-harmonic degree
    t_end = 3.0                      # the density sharpens like e^{-(mu_1 - mu_3) t}; the run
                                     # also ends early once it is no longer resolved

    [finite_volume]
    enabled = true
    n = 64                           # cells along a cube edge (6 n^2 cells), to run.t_end
    betas = [4.0, 16.0, 64.0, 256.0, "inf"]  # a subset of run.betas (cost grows like n^3)

    [convergence]
    check = true                     # run every solver a second time, coarser (N/4 tokens,
                                     # lmax/2, n/2 cells), to measure each curve's error
    fraction = 0.05                  # converged: the two differ by < fraction * min W2

    [output]
    dir = "spherepde-output"
"""
from __future__ import annotations

import copy
import errno
import math
import os
from pathlib import Path

try:  # Python >= 3.11
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["DEFAULT", "ConfigError", "load_config", "validate_config", "used_scenario", "beta_text"]


class ConfigError(ValueError):
    """An invalid scenario: the message names the key and the allowed values."""


DEFAULT = {
    "model": {
        "matrices": "rotation",
        "d": 3,
        "eigenvalues": [1.0, 0.4, 0.0],
        "rotation_angle": 0.9,
        "rotation_axis": [1.0, 1.0, 1.0],
        "normalized": True,
        "rescale_time": False,
    },
    "initial": {"kind": "vmf", "mean": [0.4, 0.3, 1.0], "kappa": 1.5,
                "mean2": [-0.3, -1.0, -0.4], "weights": [0.6, 0.4]},
    "run": {"betas": [4.0, 16.0, 64.0, 256.0, "inf"], "t_end": 8.0, "n_times": 41},
    # rtol 1e-5: the W2 curves differ from rtol 1e-6 by <= 6.3e-6 (beta = 64, 256; N = 4000),
    # 2000 times below the convergence check's threshold, for 30% fewer steps
    "particles": {"n": 4000, "init": "auto", "seed": 0, "rtol": 1e-5},
    "spectral": {"enabled": True, "lmax": 128, "t_end": 3.0},
    "finite_volume": {"enabled": True, "n": 64, "betas": [4.0, 16.0, 64.0, 256.0, "inf"]},
    "convergence": {"check": True, "fraction": 0.05},
    "output": {"dir": "spherepde-output"},
}

_INITIAL_KINDS = ("uniform", "vmf", "bimodal")
#: How the tokens start: rho_0's lattice, a random sample, or the lattice where there is one.
PARTICLE_INITS = ("auto", "lattice", "sample")
#: The keys each initial kind reads; the others are left out of the written scenario.
INITIAL_KEYS = {"uniform": (), "vmf": ("mean", "kappa"),
                "bimodal": ("mean", "kappa", "mean2", "weights")}
#: Bounds that keep every valid scenario a run of bounded cost: |eigenvalue| sets the speed,
#: t_end the length, beta the sharpness of the kernel (colder than 1e4: use "inf").
MAX_EIGENVALUE = 100.0
MAX_T_END = 1000.0
MAX_BETA = 1e4
#: The weight matrices a scenario can ask for, and the largest dimension d.
MATRICES = ("rotation", "identity")
MAX_D = 64
#: Largest beta of a USA scenario: its steps are ~e^-beta times those of SA (e^12 ~ 1.6e5).
USA_MAX_BETA = 12.0
#: Largest beta of a rescaled USA scenario: the kernel e^(beta |B|) (|B| = 1) must fit float64.
USA_RESCALED_MAX_BETA = 700.0


def _numbers(key, v, n, what):
    if (not isinstance(v, list) or len(v) != n
            or not all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in v)
            or not all(math.isfinite(a) for a in v)):
        raise ConfigError(f"{key} must be a list of {n} finite numbers{what}; got {v!r}")
    return [float(a) for a in v]


def _vec3(key, v):
    v = _numbers(key, v, 3, "")
    if not any(a != 0 for a in v):
        raise ConfigError(f"{key} must be a nonzero vector; got {v!r}")
    return v


def _number(key, v, lo=None, hi=None, integer=False, lo_open=False):
    ok_type = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok_type or (not integer and not math.isfinite(v)):
        kind = "an integer" if integer else "a finite number"
        raise ConfigError(f"{key} must be {kind}; got {v!r}")
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise ConfigError(f"{key} must be {'>' if lo_open else '>='} {lo}; got {v!r}")
    if hi is not None and v > hi:
        raise ConfigError(f"{key} must be <= {hi}; got {v!r}")
    return int(v) if integer else float(v)


def _bool(key, v):
    if not isinstance(v, bool):
        raise ConfigError(f"{key} must be true or false; got {v!r}")
    return v


def _beta(key, v):
    if v == "inf" or (isinstance(v, float) and math.isinf(v) and v > 0):
        return math.inf
    if isinstance(v, str):
        raise ConfigError(f"{key} entries must be numbers >= 0 or \"inf\"; got {v!r}")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v > MAX_BETA:
        raise ConfigError(f"{key} entries must be <= {MAX_BETA:g} or \"inf\"; got {v!r}")
    return _number(key, v, lo=0.0)


def beta_text(beta: float) -> str:
    """β as a scenario file writes it: "inf", or the shortest text that reads back as the same
    float ("16", "0.5", "16.000001")."""
    if math.isinf(beta):
        return "inf"
    short = f"{beta:g}"
    return short if float(short) == beta else repr(float(beta))


def validate_config(user: dict | None) -> dict:
    """Merge a user scenario into the default one and check every key.

    Returns the complete, validated scenario (a new dict).
    """
    user = user or {}
    cfg = _merged_with_default(user)
    # The order of the checks is the order of the sections: the first error reported is the
    # one of the earliest section, whatever else is wrong further down.
    _check_model(cfg["model"])
    _check_initial(cfg["initial"], cfg["model"])
    _check_run(cfg["run"], cfg["model"])
    _check_particles(cfg["particles"], cfg["model"])
    _check_spectral(cfg["spectral"], cfg["model"])
    _check_finite_volume(cfg["finite_volume"], user.get("finite_volume", {}), cfg)
    _check_convergence(cfg["convergence"], cfg["particles"])
    _check_output(cfg["output"])
    return cfg


def _merged_with_default(user) -> dict:
    """A deep copy of ``DEFAULT`` with the user's keys written over it; unknown sections and
    keys are errors."""
    cfg = copy.deepcopy(DEFAULT)
    if not isinstance(user, dict):
        raise ConfigError("a scenario must be a TOML table of sections")
    for section, values in user.items():
        if section not in DEFAULT:
            raise ConfigError(f"unknown section [{section}]; allowed sections: {sorted(DEFAULT)}")
        if not isinstance(values, dict):
            raise ConfigError(f"[{section}] must be a table of keys")
        for key, v in values.items():
            if key not in DEFAULT[section]:
                raise ConfigError(f"unknown key {section}.{key}; allowed keys in [{section}]: "
                                  f"{sorted(DEFAULT[section])}")
            cfg[section][key] = v
    return cfg


def _check_eigenvalues(v) -> list:
    """model.eigenvalues: three bounded numbers with a spectral gap, sorted descending."""
    ev = _numbers("model.eigenvalues", v, 3, " (the spectrum of A = V B^T on S^2)")
    if max(abs(a) for a in ev) > MAX_EIGENVALUE:
        raise ConfigError(f"model.eigenvalues must lie in [-{MAX_EIGENVALUE:g}, "
                          f"{MAX_EIGENVALUE:g}] (they set the speed of the flow; rescale t_end "
                          f"instead); got {ev}")
    ev = sorted(ev, reverse=True)
    if not ev[0] > ev[1]:
        raise ConfigError(f"model.eigenvalues need a spectral gap: the largest must be strictly "
                          f"larger than the second; got {ev}")
    return ev


def _check_model(m: dict) -> None:
    """[model], in place: the weight matrices, the dimension and the attention variant."""
    if m["matrices"] not in MATRICES:
        raise ConfigError(f"model.matrices must be one of {list(MATRICES)}; "
                          f"got {m['matrices']!r}")
    m["d"] = _number("model.d", m["d"], lo=2, hi=MAX_D, integer=True)
    if m["d"] != 3 and m["matrices"] != "identity":
        raise ConfigError(f"model.d = {m['d']} needs model.matrices = \"identity\" (the "
                          "\"rotation\" set-up is defined on S^2, d = 3)")
    m["eigenvalues"] = _check_eigenvalues(m["eigenvalues"])
    m["rotation_angle"] = _number("model.rotation_angle", m["rotation_angle"])
    m["rotation_axis"] = _vec3("model.rotation_axis", m["rotation_axis"])
    m["normalized"] = _bool("model.normalized", m["normalized"])
    m["rescale_time"] = _bool("model.rescale_time", m["rescale_time"])
    if m["rescale_time"] and m["normalized"]:
        raise ConfigError("model.rescale_time = true applies to USA (model.normalized = false) "
                          "only: the SA field needs no rescaling")


def _check_initial(ini: dict, m: dict) -> None:
    """[initial], in place: the kind of rho_0 and its caps (which need d = 3)."""
    if ini["kind"] not in _INITIAL_KINDS:
        raise ConfigError(f"initial.kind must be one of {list(_INITIAL_KINDS)}; "
                          f"got {ini['kind']!r}")
    ini["mean"] = _vec3("initial.mean", ini["mean"])
    ini["kappa"] = _number("initial.kappa", ini["kappa"], lo=0.0, hi=1e4)
    ini["mean2"] = _vec3("initial.mean2", ini["mean2"])
    w = _numbers("initial.weights", ini["weights"], 2, " (masses of the two caps)")
    if min(w) < 0 or abs(sum(w) - 1.0) > 1e-9:
        raise ConfigError(f"initial.weights must be two numbers >= 0 summing to 1; got {w}")
    ini["weights"] = w
    if m["d"] != 3 and ini["kind"] != "uniform":
        raise ConfigError(f"model.d = {m['d']} needs initial.kind = \"uniform\" (the caps are "
                          f"given by 3-vectors); got {ini['kind']!r}")


def _check_run(r: dict, m: dict) -> None:
    """[run], in place: the betas (bounded by what the attention variant can integrate), the
    final time and the output times."""
    if not isinstance(r["betas"], list) or not r["betas"]:
        raise ConfigError(f"run.betas must be a non-empty list of numbers >= 0 or \"inf\"; "
                          f"got {r['betas']!r}")
    r["betas"] = [_beta("run.betas", b) for b in r["betas"]]
    if not m["normalized"] and any(math.isinf(b) for b in r["betas"]):
        raise ConfigError("run.betas contains \"inf\", which needs model.normalized = true "
                          "(the USA field grows like e^beta)")
    if not m["normalized"] and not m["rescale_time"] and max(r["betas"]) > USA_MAX_BETA:
        raise ConfigError(f"run.betas must be <= {USA_MAX_BETA:g} with model.normalized = false "
                          f"(got {max(r['betas']):g}): the USA field is of size e^beta, so its "
                          "time steps shrink like e^-beta; set model.rescale_time = true (time "
                          "in units of e^beta) or use normalized = true for colder runs")
    if m["rescale_time"] and max(r["betas"]) > USA_RESCALED_MAX_BETA:
        raise ConfigError(f"run.betas must be <= {USA_RESCALED_MAX_BETA:g} with "
                          f"model.rescale_time = true (got {max(r['betas']):g}): the USA kernel "
                          "e^beta is beyond float64 there; use normalized = true")
    r["t_end"] = _number("run.t_end", r["t_end"], lo=0.0, lo_open=True, hi=MAX_T_END)
    r["n_times"] = _number("run.n_times", r["n_times"], lo=2, hi=10_000, integer=True)


def _check_particles(p: dict, m: dict) -> None:
    """[particles], in place: the number of tokens, the seed, the start and the tolerance."""
    p["n"] = _number("particles.n", p["n"], lo=2, hi=10**7, integer=True)
    p["seed"] = _number("particles.seed", p["seed"], lo=0, integer=True)
    if p["init"] not in PARTICLE_INITS:
        raise ConfigError(f"particles.init must be one of "
                          f"{', '.join(map(repr, PARTICLE_INITS))}; got {p['init']!r}")
    if p["init"] == "lattice" and m["d"] > 3:
        raise ConfigError(f"particles.init = \"lattice\" exists on S^1 and S^2 (model.d <= 3); "
                          f"got model.d = {m['d']}: use \"sample\" or \"auto\"")
    p["rtol"] = _number("particles.rtol", p["rtol"], lo=1e-13, hi=1e-2)


def _check_spectral(s: dict, m: dict) -> None:
    """[spectral], in place: the density solver on S^2."""
    s["enabled"] = _bool("spectral.enabled", s["enabled"])
    s["lmax"] = _number("spectral.lmax", s["lmax"], lo=8, hi=1023, integer=True)
    s["t_end"] = _number("spectral.t_end", s["t_end"], lo=0.0, lo_open=True, hi=MAX_T_END)
    if s["enabled"] and m["d"] != 3:
        raise ConfigError(f"model.d = {m['d']} needs spectral.enabled = false (the density "
                          "solver works on S^2)")


def _check_finite_volume(fv: dict, asked: dict, cfg: dict) -> None:
    """[finite_volume], in place. ``asked`` is what the user wrote in that section: the
    defaults adapt to the scenario (betas shared with run.betas, off unless the rotation set-up
    on S^2); what the user asked for explicitly is checked."""
    m, r = cfg["model"], cfg["run"]
    fv["enabled"] = _bool("finite_volume.enabled", fv["enabled"])
    fv["n"] = _number("finite_volume.n", fv["n"], lo=4, hi=512, integer=True)
    if not isinstance(fv["betas"], list):
        raise ConfigError(f"finite_volume.betas must be a list of entries of run.betas; "
                          f"got {fv['betas']!r}")
    fv["betas"] = [_beta("finite_volume.betas", b) for b in fv["betas"]]
    missing = [beta_text(b) for b in fv["betas"] if b not in r["betas"]]
    if missing and "betas" in asked:
        raise ConfigError(f"finite_volume.betas must be entries of run.betas "
                          f"{[beta_text(b) for b in r['betas']]}; not there: {missing}")
    fv["betas"] = [b for b in fv["betas"] if b in r["betas"]]
    if m["d"] != 3 or m["matrices"] != "rotation":
        if fv["enabled"] and "enabled" in asked:
            raise ConfigError(f"finite_volume.enabled = true needs model.matrices = \"rotation\" "
                              f"(d = 3): the finite-volume solver measures the distance to "
                              f"Pi#rho_0 on S^2; got matrices = {m['matrices']!r}, d = {m['d']}")
        fv["enabled"] = False


def _check_convergence(c: dict, p: dict) -> None:
    """[convergence], in place: the coarse run uses particles.n / 4 tokens."""
    c["check"] = _bool("convergence.check", c["check"])
    c["fraction"] = _number("convergence.fraction", c["fraction"], lo=0.0, lo_open=True, hi=1.0)
    if c["check"] and p["n"] < 8:
        raise ConfigError(f"convergence.check = true runs particles.n / 4 tokens as the coarse "
                          f"resolution, so particles.n must be >= 8; got {p['n']} (or set "
                          "convergence.check = false)")


def _check_output(o: dict) -> None:
    """[output], in place: the folder of the run."""
    if not isinstance(o["dir"], str) or not o["dir"] or "\0" in o["dir"]:
        raise ConfigError(f"output.dir must be a non-empty path string; got {o['dir']!r}")


def used_scenario(cfg: dict) -> dict:
    """The keys of a validated scenario that the run reads: the initial measure's own keys
    only, and no spectral settings when the spectral solver is off. This is what
    ``scenario.json`` records and what decides whether a saved run can be reused."""
    out = copy.deepcopy(cfg)
    if out["model"]["normalized"]:
        del out["model"]["rescale_time"]
    if out["model"]["matrices"] == "identity":  # no eigenvalues, no rotation
        out["model"] = {k: v for k, v in out["model"].items()
                        if k in ("matrices", "d", "normalized", "rescale_time")}
    ini = out["initial"]
    out["initial"] = {"kind": ini["kind"], **{k: ini[k] for k in INITIAL_KEYS[ini["kind"]]}}
    if not out["spectral"]["enabled"]:
        out["spectral"] = {"enabled": False}
    if not out["finite_volume"]["enabled"] or not out["finite_volume"]["betas"]:
        out["finite_volume"] = {"enabled": False}
    if not out["convergence"]["check"]:
        out["convergence"] = {"check": False}
    return out


def load_config(path=None) -> dict:
    """The default scenario, or the TOML file at ``path`` merged into it and validated."""
    if path is None:
        return validate_config({})
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a folder, not a scenario file; give the path of a TOML "
                          "file (see the README for its keys)")
    if not path.is_file():
        raise ConfigError(f"{_not_a_file(path)}; give the path of a TOML file "
                          "(see the README for its keys)")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                          f"{exc.start}); save it as UTF-8") from None
    try:
        user = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path} nests arrays or tables too deeply to read") from None
    return validate_config(user)


def _not_a_file(path: Path) -> str:
    """Why ``path`` is not a readable scenario file, in words."""
    import stat

    try:
        mode = path.lstat().st_mode
    except OSError:
        return f"no scenario file at {path}"
    if stat.S_ISLNK(mode):
        try:
            path.stat()
        except OSError as exc:
            what = "a loop of links" if exc.errno == errno.ELOOP else "a broken link"
            return f"{path} is {what} (to {os.readlink(path)})"
    if stat.S_ISFIFO(path.stat().st_mode):
        return f"{path} is a pipe (FIFO), not a scenario file"
    return f"{path} is not a regular file"
