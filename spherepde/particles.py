r"""Lagrangian particle solver: N tokens on S^{d-1} moving under the attention field.

The particle system (docs/theory.md)

.. math::
    \dot x_i = X[\mu^N](x_i), \qquad \mu^N = \sum_j w_j \delta_{x_j},

is integrated with a scheme from the one registry :data:`spherepde.timestepping.SCHEMES`,
with the projective retraction :func:`spherepde.sphere.retract` applied to every stage and
step inside :func:`spherepde.timestepping.integrate`. The field comes from
:meth:`spherepde.model.Model.attention` (SA, USA, beta = inf local field, hardmax; any Q, K, V,
any d >= 2), which dispatches to the interaction backends (numpy, fused numba, torch).

Discrete transformer layers (Post-LN, Pre-LN) are :meth:`ParticleSolver.layers`.

Example
-------
>>> import numpy as np, spherepde as sp
>>> model = sp.Model(beta=1.0, d=3)
>>> x0 = sp.measures.Uniform(3).sample(64, seed=0)
>>> traj = sp.ParticleSolver(model).solve(x0, np.linspace(0.0, 1.0, 5))
>>> traj.positions.shape
(5, 64, 3)
"""
from __future__ import annotations

import numpy as np

from . import io
from .measures import PointCloud
from .model import Model
from .sphere import as_points, retract, tangent_projection
from .sphere import normalize as unit
from .timestepping import (
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    StepSizeError,
    _check_times,
    get_error_norm,
    get_scheme,
    integrate,
)

__all__ = ["ParticleSolver", "Trajectory", "LAYER_KINDS", "default_velocity_tol",
           "format_schedule", "parse_schedule"]

LAYER_KINDS = ("post-ln", "pre-ln")

#: The harmonic kernel's default accuracy in an adaptive run: rtol over this
#: (:func:`default_velocity_tol`).
VELOCITY_TOL_DIVISOR = 100.0


def default_velocity_tol(rtol: float, harmonic_tol: float | None = None) -> float:
    """The accuracy asked of the harmonic kernel's velocities (relative to |V|_2) when a run
    steps at ``rtol``: rtol / VELOCITY_TOL_DIVISOR, but never tighter than what the field was
    built for (``FALLBACK_FACTOR * harmonic_tol``, 1e-10 at the default tol).

    A velocity error δ moves a token by at most δ per unit time before the dynamics amplify
    it, the same amplification the steps' own local errors (up to rtol per step, and steps
    are shorter than one time unit) go through: δ = rtol/100 adds at most a hundredth of
    what the step control already allows. The default rtol (1e-9) keeps 1e-10."""
    from .interaction.options import DEFAULT_TOL, FALLBACK_FACTOR

    floor = FALLBACK_FACTOR * (DEFAULT_TOL if harmonic_tol is None else harmonic_tol)
    return min(max(floor, float(rtol) / VELOCITY_TOL_DIVISOR), 0.5)


def _check_positive(value, name):
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number; got {value!r}") from None
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number; got {value}")
    return value


class Trajectory:
    """Token positions at the output times of a particle run.

    Attributes
    ----------
    times : (T,) output times kept (for :meth:`ParticleSolver.layers`: k·h, k the layer index)
    positions : (T, n, d) kept tokens at those times, on the unit sphere
    weights : (n,) weights of the kept tokens (they sum to 1 when all tokens are kept)
    token_index : (n,) indices of the kept tokens in the initial configuration
    model : Model
    initial_measure : PointCloud of all N tokens at times[0]
    radii : (T, n) |z| of Pre-LN layers, else None
    stats : dict of integrator statistics (steps, rejected, fevals)
    settings : dict of the solver settings that produced it (scheme, rtol, atol, dt, kernel)
    """

    def __init__(self, times, positions, weights, model, initial_measure, token_index=None,
                 radii=None, stats=None, kind="ode", settings=None):
        self.times = np.asarray(times, dtype=np.float64)
        self.positions = np.asarray(positions, dtype=np.float64)
        self.weights = np.asarray(weights, dtype=np.float64)
        self.model = model
        self.initial_measure = initial_measure
        n = self.positions.shape[1]
        self.token_index = (np.arange(n) if token_index is None
                            else np.asarray(token_index, dtype=np.int64))
        self.radii = None if radii is None else np.asarray(radii, dtype=np.float64)
        self.stats = dict(stats or {})
        self.kind = kind
        self.settings = dict(settings or {})

    def __len__(self) -> int:
        return self.times.size

    @property
    def n(self) -> int:
        return self.positions.shape[1]

    @property
    def d(self) -> int:
        return self.positions.shape[2]

    def measure(self, i: int) -> PointCloud:
        """The empirical measure at output i as a :class:`PointCloud`.

        When only a subset of tokens was kept, it is the measure of that subset with its
        weights renormalized to sum 1.
        """
        w = self.weights
        total = w.sum()
        return PointCloud(self.positions[i], w / total if total > 0 else None)

    # ------------------------------------------------------------------ persistence
    def to_xarray(self):
        """The trajectory as an :class:`xarray.Dataset`.

        Variables: ``positions`` (time, token, component), ``weights`` (token), ``radii``
        (time, token; Pre-LN layers only), ``initial_positions`` / ``initial_weights`` (all N
        tokens at times[0], dims initial_token, component). Coordinates: ``time`` (model time,
        or k·h for layers), ``token`` (index in the initial configuration), ``component``
        (0..d-1). The model is in the ``model_*`` attributes, the solver settings in
        ``setting_*``, the integrator statistics in ``stat_*``.
        """
        import xarray as xr

        one = {"units": "1"}
        data = {
            "positions": (("time", "token", "component"), self.positions,
                          {**one, "long_name": "token position (unit vector in R^d)"}),
            "weights": ("token", self.weights, {**one, "long_name": "token weight"}),
            "initial_positions": (("initial_token", "component"), self.initial_measure.points,
                                  {**one, "long_name": "all tokens at the initial time"}),
            "initial_weights": ("initial_token", self.initial_measure.weights,
                                {**one, "long_name": "weights of all tokens at the initial time"}),
        }
        if self.radii is not None:
            data["radii"] = (("time", "token"), self.radii,
                             {**one, "long_name": "norm |z| of the Pre-LN state"})
        coords = {"time": io.time_coord(self.times, "layer depth k·h" if self.kind != "ode"
                                        else "model time"),
                  "token": ("token", self.token_index, {"long_name": "token index"}),
                  "component": ("component", np.arange(self.d),
                                {"long_name": "Cartesian component in R^d"})}
        attrs = {**io.global_attrs("tokens on the sphere (spherepde particles)", "trajectory"),
                 "trajectory_kind": self.kind, **io.model_attrs(self.model),
                 **io.settings_attrs(self.settings),
                 **io.settings_attrs(self.stats, prefix="stat_")}
        return xr.Dataset(data, coords=coords, attrs=attrs)

    @classmethod
    def from_xarray(cls, ds) -> "Trajectory":
        """Rebuild a trajectory from :meth:`to_xarray`'s Dataset (e.g. read from NetCDF)."""
        if ds.attrs.get("spherepde_kind") != "trajectory":
            kind = ds.attrs.get('spherepde_kind', 'no spherepde result')
            raise ValueError(f"the dataset holds {kind!r}, not a trajectory")
        initial = PointCloud(ds["initial_positions"].values, ds["initial_weights"].values)
        radii = ds["radii"].values if "radii" in ds else None
        return cls(ds["time"].values, ds["positions"].values, ds["weights"].values,
                   io.model_from_attrs(ds.attrs), initial, token_index=ds["token"].values,
                   radii=radii, stats=io.settings_from_attrs(ds.attrs, "stat_"),
                   kind=str(ds.attrs["trajectory_kind"]),
                   settings=io.settings_from_attrs(ds.attrs))

    def save(self, path):
        """Write the trajectory to ``path`` as NetCDF (:meth:`to_xarray`), atomically."""
        return io.save_dataset(self.to_xarray(), path)

    @classmethod
    def load(cls, path) -> "Trajectory":
        """Read a trajectory written by :meth:`save`."""
        return cls.from_xarray(io.open_dataset(path))

    def __repr__(self) -> str:
        return (f"Trajectory(T={len(self)}, n={self.n}, d={self.d}, "
                f"t=[{self.times[0]:g}, {self.times[-1]:g}], {self.kind})")


def format_schedule(schedule) -> str:
    """``[(0, "harmonic"), (37, "numba")]`` -> ``"0:harmonic,37:numba"`` (evaluation index:
    kernel from that evaluation on)."""
    return ",".join(f"{int(i)}:{name}" for i, name in schedule)


def parse_schedule(text: str) -> tuple:
    """The inverse of :func:`format_schedule`, checked."""
    out = []
    for part in str(text).split(","):
        idx, sep, name = part.strip().partition(":")
        if not sep or not idx.strip().isdigit() or not name.strip():
            raise ValueError(f"kernel_schedule must read 'index:kernel,index:kernel,...' "
                             f"starting at 0 (as a trajectory's settings record it); got {text!r}")
        out.append((int(idx), name.strip()))
    if out[0][0] != 0 or any(b[0] <= a[0] for a, b in zip(out, out[1:], strict=False)):
        raise ValueError(f"kernel_schedule must start at evaluation 0 and increase; got {text!r}")
    return tuple(out)


class _FixedKernel:
    """One kernel for every evaluation of a run."""

    def __init__(self, model, name, options):
        self.model, self.name, self.options = model, name, options
        self.schedule = [(0, name)]

    def __call__(self, x, weights):
        return self.model.bind(x, weights, self.name, self.options)[1](x)


class _ScheduledKernels:
    """The kernels of a recorded schedule, evaluation by evaluation: replays a timed run."""

    def __init__(self, model, schedule, options):
        self.model, self.options = model, options
        self.schedule = list(schedule)
        self.evaluations = 0

    def __call__(self, x, weights):
        i = self.evaluations
        name = [n for start, n in self.schedule if start <= i][-1]
        self.evaluations += 1
        return self.model.bind(x, weights, name, self.options)[1](x)


class _KernelChooser:
    """``adaptive_kernel=True``: the harmonic or the fused numba kernel, whichever the last
    measured evaluations say is cheaper. Opt-in, because it makes a trajectory depend on the
    machine's load: the kernel of every evaluation is recorded (``schedule``), and a rerun
    with ``kernel_schedule=`` reproduces the trajectory bit for bit.

    The harmonic kernel's cost grows as the tokens concentrate: more queries look into
    regions of exponentially little mass and are summed by the far field, so a choice made
    once from the initial cloud can be off by 5-10x late in a run. Each evaluation is timed;
    the kernel in use is dropped as soon as its time exceeds MARGIN times the other one's
    last time, and the other one is tried again after PROBE evaluations, an interval that
    doubles each time a trial confirms the current choice (a trial wins only by the same
    margin, against noise), so a losing kernel costs O(log(steps)) evaluations. Both kernels
    agree to the solver's velocity_tol, below the step tolerance.

    A trial of the fused kernel while the harmonic one is in use times it on SAMPLE_QUERIES
    evenly strided queries against all N keys and scales by N/SAMPLE_QUERIES (its cost is one
    pass over the keys per query); that evaluation's output comes from the harmonic kernel.
    """

    PROBE = 16
    #: The other kernel must be this much faster to take over (timings are noisy).
    MARGIN = 1.25
    #: Queries of a sampled trial of the fused kernel (all of them when N is not larger).
    SAMPLE_QUERIES = 512

    def __init__(self, model, first: str, options=None, clock=None):
        import time

        self.clock = time.perf_counter if clock is None else clock
        self.model, self.options = model, options
        self.current = first
        self.last = {"harmonic": None, "numba": None}
        self.calls = {"harmonic": 0, "numba": 0}
        self.seconds = {"harmonic": 0.0, "numba": 0.0}
        self.switches = 0
        self.sampled = 0  # trials of the fused kernel on a sample of the queries
        self.probe = self.PROBE
        self.until_probe = self.PROBE
        self.evaluations = 0
        self.schedule = []  # (evaluation index, kernel whose output it returned from then on)

    def _other(self, name):
        return "numba" if name == "harmonic" else "harmonic"

    def _run(self, name, x, weights):
        """((output, stats), seconds) of one evaluation by kernel `name`."""
        start = self.clock()
        result = self.model.bind(x, weights, name, self.options)[1](x)
        return result, self.clock() - start

    def _sampled_numba(self, x, weights):
        """The fused kernel's time for all N queries, from a strided sample of them."""
        n = x.shape[0]
        step = -(-n // self.SAMPLE_QUERIES)
        start = self.clock()
        self.model.attention(x[::step], x, weights, kernel="numba")
        return (self.clock() - start) * n / len(range(0, n, step))

    def _record(self, producer):
        if not self.schedule or self.schedule[-1][1] != producer:
            self.schedule.append((self.evaluations, producer))
        self.evaluations += 1

    def __call__(self, x, weights):
        trial = self.until_probe <= 0
        name = self._other(self.current) if trial else self.current
        if trial and name == "numba" and x.shape[0] > self.SAMPLE_QUERIES:
            dt = self._sampled_numba(x, weights)
            result, spent = self._run(self.current, x, weights)
            self._record(self.current)
            self.last[self.current] = spent
            self.calls[self.current] += 1
            self.seconds[self.current] += spent
            self.sampled += 1
        else:
            result, dt = self._run(name, x, weights)
            self._record(name)
            self.calls[name] += 1
            self.seconds[name] += dt
        self.last[name] = dt
        other = self._other(self.current)
        if trial:
            if self.MARGIN * dt < self.last[self.current]:
                self.current, self.probe = name, self.PROBE
                self.switches += 1
            else:
                self.probe *= 2
            self.until_probe = self.probe
        else:
            self.until_probe -= 1
            if self.last[other] is not None and dt > self.MARGIN * self.last[other]:
                self.current, self.probe, self.until_probe = other, self.PROBE, self.PROBE
                self.switches += 1
        return result

    def stats(self) -> dict:
        """Evaluations and seconds per kernel, and the number of switches."""
        out = {"kernel_switches": self.switches, "sampled_numba_trials": self.sampled}
        for k in ("harmonic", "numba"):
            out[f"evaluations_{k}"] = self.calls[k]
            out[f"seconds_{k}"] = round(self.seconds[k], 3)
        return out


class ParticleSolver:
    r"""Integrate the particle system :math:`\dot x_i = X[\mu^N](x_i)` on S^{d-1}.

    Parameters
    ----------
    model : Model
        Q, K, V, beta, SA/USA, hardmax; any d >= 2.
    scheme : str
        A scheme of :data:`spherepde.timestepping.SCHEMES` ("euler", "heun", "ssprk3", "rk4",
        "dopri5", ...). The default is the adaptive Dormand–Prince 5(4) pair.
    dt : float, optional
        Fixed step (required for the non-adaptive schemes); first trial step for "dopri5".
    rtol, atol : float, optional
        Tolerances of the adaptive pair. The defaults (rtol = 1e-9, atol = 1e-11,
        :data:`spherepde.timestepping.DEFAULT_RTOL` / ``DEFAULT_ATOL``) give about 1e-8
        relative accuracy in the positions: measured 1e-8 or better against the closed-form
        zero-temperature flow in ``tests/test_timestepping.py`` and ``tests/test_particles.py``.
    kernel : str
        Interaction kernel of :data:`spherepde.interaction.KERNELS`: "auto" (the first entry
        of :data:`spherepde.interaction.AUTO_KERNELS` that applies under ``profile``: on
        S^1/S^2 the harmonic kernel where its cost model says it is faster, the BLAS-tiled
        kernel from d = ``profile.tiled_min_dim``, the fused numba kernel from
        N·N >= ``profile.numba_min_pairs``, numpy below; fixed for the run unless
        ``adaptive_kernel``), "numpy", "numba", "tiled", "torch", "harmonic" (its degree L is
        ``harmonic_degree`` and shown in the repr), ...
    harmonic_tol : float, optional
        Truncation tolerance of the harmonic kernel (default
        :data:`spherepde.interaction.harmonic.DEFAULT_TOL` = 1e-12): L is the smallest degree
        whose multiplier tail is below tol times the mean of the kernel
        (:class:`spherepde.interaction.harmonic.HarmonicField`). A larger tol means a smaller
        L; the velocities' accuracy is ``velocity_tol``. Only for ``kernel="harmonic"`` or
        ``"auto"`` (where "auto" picks harmonic).
    velocity_tol : float, optional
        The accuracy asked of the harmonic kernel's velocities, relative to
        :math:`\|V\|_2`: tokens whose a-priori bound exceeds it go to the far-field sums, at
        the same accuracy. Default :func:`default_velocity_tol`: rtol/100 for an adaptive
        scheme, never tighter than 100 harmonic_tol (1e-10). On a concentrated cloud this and
        not harmonic_tol sets how many tokens fall back, so how much an evaluation costs
        (docs/methods.md: 34 s against 0.6 s at N = 10^6, beta = 1000, for 1e-10 against
        1e-7). Only for ``kernel="harmonic"`` or ``"auto"``.
    dt_max : float, optional
        Upper bound on adaptive steps.
    error_norm : str, optional
        How an adaptive step combines the tokens' errors
        (:data:`spherepde.timestepping.ERROR_NORMS`): "max" (the default: every coordinate of
        every token within rtol) or "rms" (their root mean square within rtol: at low
        temperature one fast straggler no longer sets every token's step; docs/methods.md
        measures what it saves and what it moves).
    profile : spherepde.interaction.AutoProfile, optional
        The cost model of ``kernel="auto"`` (default: the measured default profile). "auto"
        is resolved once per solve, from N, deterministically.
    adaptive_kernel : bool
        Opt-in (default False): with ``kernel="auto"`` on S^1/S^2 at finite beta, switch
        between the harmonic and the fused kernel during the run by their measured
        evaluation times. The trajectory then depends on the machine's load; its
        ``settings["kernel_schedule"]`` records the kernel of every evaluation.
    kernel_schedule : str, optional
        Replay a recorded ``settings["kernel_schedule"]`` ("0:harmonic,37:numba": the kernel
        from each evaluation on), which reproduces that run bit for bit.

    Notes
    -----
    The retraction R_x(v) = (x+v)/|x+v| is applied once, inside
    :func:`spherepde.timestepping.integrate`, to every stage and step. The field is evaluated
    only at unit vectors, so it equals its 0-homogeneous extension to R^d \ {0}, whose flow
    preserves |x|; normalizing the stages then does not change the stage derivatives, and the
    final projection keeps the order of the tableau (Hairer–Lubich–Wanner, GNI §IV.4). The
    measured orders are in ``tests/test_timestepping.py``.
    """

    def __init__(self, model: Model, scheme: str = "dopri5", dt: float | None = None,
                 rtol: float | None = None, atol: float | None = None, kernel: str = "auto",
                 dt_max: float | None = None, *, harmonic_tol: float | None = None,
                 velocity_tol: float | None = None, error_norm: str = "max",
                 profile=None, adaptive_kernel: bool = False,
                 kernel_schedule: str | None = None):
        if not isinstance(model, Model):
            raise TypeError(f"model must be a spherepde.Model; got {type(model).__name__}")
        self.model = model
        self.tableau = get_scheme(scheme)
        self.scheme = scheme
        self.dt = _check_positive(dt, "dt")
        self.dt_max = _check_positive(dt_max, "dt_max")
        self.rtol = DEFAULT_RTOL if rtol is None else _check_positive(rtol, "rtol")
        self.atol = DEFAULT_ATOL if atol is None else _check_positive(atol, "atol")
        if not self.tableau.adaptive and self.dt is None:
            raise ValueError(f"scheme {scheme!r} has a fixed step: pass dt=..., or use the "
                             "default scheme='dopri5' with rtol/atol")
        if (rtol is not None or atol is not None) and not self.tableau.adaptive:
            raise ValueError(f"rtol/atol only apply to an adaptive scheme; {scheme!r} uses the "
                             "fixed step dt")
        get_error_norm(error_norm)
        if error_norm != "max" and not self.tableau.adaptive:
            raise ValueError(f"error_norm only applies to an adaptive scheme; {scheme!r} uses "
                             "the fixed step dt")
        self.error_norm = error_norm
        if harmonic_tol is not None and kernel not in ("harmonic", "auto"):
            raise ValueError(f"harmonic_tol applies to kernel='harmonic' (or 'auto'); this "
                             f"solver uses kernel={kernel!r}: drop harmonic_tol or change kernel")
        if velocity_tol is not None and kernel not in ("harmonic", "auto"):
            raise ValueError(f"velocity_tol applies to kernel='harmonic' (or 'auto'); this "
                             f"solver uses kernel={kernel!r}: drop velocity_tol or change kernel")
        if harmonic_tol is not None:
            from .interaction.harmonic import NUFFT_EPS_MIN

            harmonic_tol = float(harmonic_tol)
            if not NUFFT_EPS_MIN <= harmonic_tol < 1:
                raise ValueError(f"harmonic_tol: tol must lie in [{NUFFT_EPS_MIN:g}, 1); got "
                                 f"{harmonic_tol}")
        self.harmonic_tol = harmonic_tol
        if velocity_tol is not None:
            from .interaction.harmonic import check_velocity_tol

            velocity_tol = check_velocity_tol(velocity_tol)
        self._velocity_tol = velocity_tol
        self.kernel = kernel
        if (adaptive_kernel or kernel_schedule is not None) and kernel != "auto":
            raise ValueError(f"adaptive_kernel and kernel_schedule apply to kernel='auto'; this "
                             f"solver uses kernel={kernel!r}")
        if adaptive_kernel and kernel_schedule is not None:
            raise ValueError("pass adaptive_kernel=True (measure and record) or kernel_schedule "
                             "(replay a record), not both")
        self.profile = profile
        self.adaptive_kernel = bool(adaptive_kernel)
        self.kernel_schedule = (None if kernel_schedule is None
                                else parse_schedule(kernel_schedule))

    @property
    def harmonic_options(self):
        """The harmonic kernel's :class:`spherepde.interaction.HarmonicOptions` in this
        solver's runs."""
        from .interaction.options import DEFAULT_TOL, HarmonicOptions

        tol = DEFAULT_TOL if self.harmonic_tol is None else self.harmonic_tol
        return HarmonicOptions(tol=tol, velocity_tol=self.velocity_tol)

    @property
    def harmonic_degree(self) -> int | None:
        """The degree L of the harmonic kernel for ``kernel="harmonic"`` (None otherwise)."""
        m = self.model
        if self.kernel != "harmonic" or m.zero_temperature:
            return None
        from .interaction.harmonic import field_for

        return field_for(m.B, m.V, m.beta, m.normalized, self.harmonic_options.tol).degree

    @property
    def velocity_tol(self) -> float:
        """The harmonic kernel's accuracy in this solver's runs (given, or
        :func:`default_velocity_tol` of rtol; the fixed-step schemes keep 100 harmonic_tol)."""
        if self._velocity_tol is not None:
            return self._velocity_tol
        rtol = self.rtol if self.tableau.adaptive else 0.0
        return default_velocity_tol(rtol, self.harmonic_tol)

    def _step_hint(self) -> str:
        """What to change when the adaptive step collapses."""
        m = self.model
        if not m.normalized and m.time_scale == 1.0:
            top = m.beta * float(np.linalg.norm(m.B, 2))
            return (f"USA moves at speeds up to e^(beta |B|) = e^{top:.3g} (beta = {m.beta:g}), "
                    "so its time scale is e^-beta: build the model with "
                    "Model(..., normalized=False, rescale_time=True) to measure time in units "
                    "of the kernel's maximum, or use normalized=True (SA)")
        return (f"The tokens blow up or collide faster than rtol = {self.rtol:g} can follow; "
                "check the model's scale (|V|, beta) or loosen rtol")

    # ------------------------------------------------------------------ the field
    def _kernels(self, n: int):
        """The kernel(s) of one run with n tokens: a new object per run, so that runs share
        nothing that an evaluation changes."""
        m = self.model
        if m.zero_temperature:
            return None
        opts = self.harmonic_options if self.kernel in ("harmonic", "auto") else None
        if self.kernel_schedule is not None:
            return _ScheduledKernels(m, self.kernel_schedule, opts)
        from .interaction import KernelProblem, resolve_kernel

        name = resolve_kernel(self.kernel, KernelProblem(n, n, m.d, m.beta * m.B_norm),
                              self.profile)
        if self.adaptive_kernel and m.d in (2, 3) and name in ("harmonic", "numba"):
            return _KernelChooser(m, name, opts)
        return _FixedKernel(m, name, opts)

    def attention(self, x, weights) -> np.ndarray:
        """Unprojected attention output of every token, x: (N, d) on the sphere -> (N, d).
        "auto" is resolved for this N (the kernel a run of this cloud uses)."""
        x = np.asarray(x, dtype=np.float64)
        kernels = self._kernels(x.shape[0])
        if kernels is None:
            return self.model.attention(x, x, weights)
        return kernels(x, weights)[0]

    def velocity(self, x, weights) -> np.ndarray:
        r"""The particle velocities :math:`X[\mu^N](x_i)`, x: (N, d) -> (N, d) tangent."""
        return tangent_projection(x, self.attention(x, weights))

    def _prepare(self, x0, weights, normalize_input):
        if isinstance(x0, PointCloud):
            if weights is not None:
                raise ValueError("x0 is a PointCloud with its own weights; do not pass weights")
            x0, weights = x0.points, x0.weights
        x0 = np.asarray(x0, dtype=np.float64)
        if x0.ndim != 2:
            raise ValueError(f"x0 must have shape (N, d); got shape {x0.shape}")
        if x0.shape[1] != self.model.d:
            raise ValueError(f"x0 has d = {x0.shape[1]} but the model has d = {self.model.d}")
        x0 = as_points(x0, self.model.d, name="x0", normalize=normalize_input)
        cloud = PointCloud(x0, weights)
        return cloud

    @staticmethod
    def _selection(n, tokens):
        if tokens is None:
            return None
        try:
            idx = np.arange(n)[tokens]
        except IndexError as exc:
            raise ValueError(f"tokens does not select tokens of 0..{n - 1}: {exc}") from None
        if np.ndim(idx) != 1 or idx.size == 0:
            raise ValueError("tokens must be a non-empty index array, boolean mask or slice")
        return idx

    @staticmethod
    def _check_every(every):
        if int(every) != every or every < 1:
            raise ValueError(f"every must be an integer >= 1; got {every!r}")
        return int(every)

    # ------------------------------------------------------------------ ODE
    def solve(self, x0, times, weights=None, *, every: int = 1, tokens=None,
              normalize: bool = False, callback=None, progress=None) -> Trajectory:
        """Integrate from x0 at times[0] and return the tokens at ``times``.

        Parameters
        ----------
        x0 : (N, d) initial tokens on the unit sphere, or a PointCloud (points and weights)
        times : (T,) strictly increasing output times; times[0] is the initial time
        weights : (N,), optional
            Non-negative token weights summing to 1 (default uniform 1/N).
        every : int
            Keep every k-th output (indices 0, k, 2k, ... and always the last one).
        tokens : index array, boolean mask or slice, optional
            Keep only these tokens in ``positions`` (all tokens are still simulated).
        normalize : bool
            Project x0 onto the sphere instead of rejecting points off it.
        callback : callable callback(i, t, x), optional
            Called at every output time with all N positions.
        progress : callable progress(t), optional
            Called after every accepted step.

        Returns
        -------
        Trajectory
        """
        cloud = self._prepare(x0, weights, normalize)
        times = _check_times(times)
        every = self._check_every(every)
        kernels = self._kernels(cloud.n)
        counts = {}
        sel = self._selection(cloud.n, tokens)
        T = times.size
        kept = [i for i in range(T) if i % every == 0 or i == T - 1]
        kept_set = set(kept)
        w = cloud.weights

        def rhs(_t, x):
            if kernels is None:
                return tangent_projection(x, self.model.attention(x, x, w))
            out, st = kernels(x, w)
            for key, value in st.items():
                counts[key] = counts.get(key, 0) + value
            return tangent_projection(x, out)

        def select(x):
            return x if sel is None else x[sel]

        stored = []

        def on_output(i, t, x):
            if i in kept_set:
                stored.append(select(x).copy())
            if callback is not None:
                callback(i, t, x)

        try:
            _, stats = integrate(rhs, cloud.points, times, scheme=self.scheme, dt=self.dt,
                                 rtol=self.rtol, atol=self.atol, retract=retract,
                                 callback=on_output, dt_max=self.dt_max, progress=progress,
                                 keep=lambda i: False, norm=self.error_norm)
        except StepSizeError as exc:
            raise StepSizeError(f"{exc}. {self._step_hint()}") from None
        stats.update({f"kernel_{k}": v for k, v in counts.items()})
        settings = self._settings()
        if kernels is not None:
            settings["kernel_schedule"] = format_schedule(kernels.schedule)
            if isinstance(kernels, _KernelChooser):
                stats.update(kernels.stats())
        return Trajectory(times[kept], np.stack(stored), select(w), self.model, cloud,
                          token_index=sel, stats=stats, kind="ode", settings=settings)

    # ------------------------------------------------------------------ layers
    def layers(self, x0, n_layers: int, h: float, kind: str = "post-ln", weights=None, *,
               every: int = 1, tokens=None, normalize: bool = False) -> Trajectory:
        r"""Discrete transformer layers with step h, reporting directions.

        - Post-LN: :math:`x \leftarrow (x + h\,\mathrm{Attn}(x))/|x + h\,\mathrm{Attn}(x)|`.
        - Pre-LN: :math:`z \leftarrow z + h\,\mathrm{Attn}(z/|z|)`, z_0 = x0; the directions
          :math:`\theta = z/|z|` are reported as positions and r = |z| as ``radii``.

        Attn is the unprojected attention output of the model with mu = sum_j w_j delta_{theta_j}
        (SA, USA, beta = inf and hardmax all apply). In continuous time (h -> 0, t = k h)
        Post-LN is the SA/USA flow and Pre-LN is :math:`\dot\theta = P_\theta\mathrm{Attn}/r`.

        Parameters
        ----------
        x0 : (N, d) initial tokens on the sphere
        n_layers : int >= 0
        h : float > 0, the layer step
        kind : "post-ln" or "pre-ln"
        weights, every, tokens, normalize : as in :meth:`solve`

        Returns
        -------
        Trajectory with times k·h, k = 0..n_layers (thinned by ``every``).
        """
        if kind not in LAYER_KINDS:
            raise ValueError(f"kind must be one of {LAYER_KINDS}; got {kind!r}")
        h = _check_positive(h, "h")
        if int(n_layers) != n_layers or n_layers < 0:
            raise ValueError(f"n_layers must be an integer >= 0; got {n_layers!r}")
        n_layers = int(n_layers)
        cloud = self._prepare(x0, weights, normalize)
        every = self._check_every(every)
        sel = self._selection(cloud.n, tokens)
        w = cloud.weights
        z = cloud.points.copy()
        theta = z
        keep = [k for k in range(n_layers + 1) if k % every == 0 or k == n_layers]
        keep_set = set(keep)
        pos, rad = [], []

        def store(theta, z):
            pos.append((theta if sel is None else theta[sel]).copy())
            r = np.linalg.norm(z, axis=-1)
            rad.append(r if sel is None else r[sel])

        for k in range(n_layers + 1):
            if k in keep_set:
                store(theta, z)
            if k == n_layers:
                break
            attn = self.attention(theta, w)
            if kind == "post-ln":
                z = unit(theta + h * attn)
                theta = z
            else:
                z = z + h * attn
                theta = unit(z)
            if not np.all(np.isfinite(z)):
                raise FloatingPointError(f"layer {k + 1} produced NaN or inf (a token hit the "
                                         "origin?); reduce h")
        times = h * np.asarray(keep, dtype=np.float64)
        return Trajectory(times, np.stack(pos), w if sel is None else w[sel], self.model, cloud,
                          token_index=sel, radii=np.stack(rad) if kind == "pre-ln" else None,
                          stats={"layers": n_layers}, kind=kind,
                          settings={"h": h, "kernel": self.kernel})

    def _settings(self) -> dict:
        adaptive = self.tableau.adaptive
        out = {"scheme": self.scheme, "rtol": self.rtol if adaptive else None,
               "atol": self.atol if adaptive else None, "dt": self.dt, "dt_max": self.dt_max,
               "kernel": self.kernel, "harmonic_tol": self.harmonic_tol,
               "velocity_tol": (self.velocity_tol if self.kernel in ("harmonic", "auto")
                                else None),
               "error_norm": self.error_norm if adaptive else None,
               "adaptive_kernel": True if self.adaptive_kernel else None}
        return {k: v for k, v in out.items() if v is not None}

    def __repr__(self) -> str:
        step = (f"rtol={self.rtol}, atol={self.atol}" if self.tableau.adaptive
                else f"dt={self.dt}")
        if self.error_norm != "max":
            step += f", error_norm={self.error_norm!r}"
        kernel = f"kernel={self.kernel!r}"
        if self.adaptive_kernel:
            kernel += ", adaptive_kernel=True"
        if self.kernel == "harmonic" and not self.model.zero_temperature:
            kernel += f", L={self.harmonic_degree}"
            if self.harmonic_tol is not None:
                kernel += f", harmonic_tol={self.harmonic_tol:g}"
            kernel += f", velocity_tol={self.velocity_tol:g}"
        return f"ParticleSolver({self.model!r}, scheme={self.scheme!r}, {step}, {kernel})"
