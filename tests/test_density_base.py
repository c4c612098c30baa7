"""The density-solver base: one integrator run across all output times (no restart per
output), coefficients as initial data, and the velocity operators picked at construction."""
import numpy as np
import pytest

import spherepde as sp
from spherepde import exact, timestepping
from spherepde.density.base import (
    DensitySolution,
    DensitySolver,
    check_mass,
    check_values,
    density_callable,
)
from spherepde.interaction import operators
from spherepde.sphere import CircleGrid

MODEL_S1 = sp.Model(d=2, beta=2.0)


def rho0_s1(x):
    th = np.arctan2(x[..., 1], x[..., 0])
    return (1 + 0.3 * np.cos(3 * th) + 0.2 * np.cos(th)) / (2 * np.pi)


def counted_solve(solver, density0, times):
    """Solve while counting the right-hand-side evaluations."""
    calls = []
    rhs = solver.rhs
    solver.rhs = lambda t, y: calls.append(t) or rhs(t, y)
    sol = solver.solve(density0, times)
    return len(calls), sol


def test_many_outputs_do_not_restart_the_integrator():
    T = 2.0
    n_few, few = counted_solve(sp.FourierSolver(MODEL_S1, kmax=16), rho0_s1, [0.0, T])
    n_many, many = counted_solve(sp.FourierSolver(MODEL_S1, kmax=16), rho0_s1,
                                 np.linspace(0.0, T, 41))
    stages = timestepping.get_scheme("dopri5").stages
    for n, sol in ((n_few, few), (n_many, many)):
        st = sol.stats
        assert n == st["fevals"]
        # the starting-step heuristic (2 evaluations) runs once, and the first stage once
        # (then each step reuses the last stage of the one before: FSAL); a restart at every
        # output would add 3 per output and start each interval from a fresh, small step
        assert n == 2 + 1 + (stages - 1) * (st["steps"] + st["rejected"])
    # each output can only shorten the one step that would pass it: at most one extra step
    # per output time
    assert many.stats["steps"] <= few.stats["steps"] + 40
    # and the two runs agree to the time tolerance (rtol = 1e-9 per unit time, relative)
    c1, c2 = few.coefficients[-1], many.coefficients[-1]
    assert np.abs(c1 - c2).max() < 1e-7 * np.abs(c1).max()


def test_dt_max_is_consulted_at_every_output_and_caps_the_steps():
    seen = []

    def cap(t, y):
        seen.append(t)
        return 0.01

    times = np.linspace(0.0, 0.5, 6)
    _, st = timestepping.integrate(lambda t, y: -y, np.ones(3), times, dt_max=cap)
    np.testing.assert_array_equal(seen, times[:-1])
    assert st["steps"] >= 50  # 0.5 / 0.01 steps at least: the cap binds
    # a fixed-step scheme without dt takes its step from the callable
    ys, st = timestepping.integrate(lambda t, y: -y, np.ones(1), [0.0, 1.0], scheme="rk4",
                                    dt_max=lambda t, y: 0.1)
    assert st["steps"] == 10
    assert abs(ys[-1][0] - np.exp(-1.0)) < 1e-6  # RK4 at h = 0.1: error ~ h^4/120 ~ 1e-6


def test_solve_accepts_coefficients():
    solver = sp.FourierSolver(MODEL_S1, kmax=16)
    a = solver.solve(rho0_s1, [0.0, 0.5])
    b = sp.FourierSolver(MODEL_S1, kmax=16).solve(a.coefficients[0], [0.0, 0.5])
    np.testing.assert_array_equal(a.coefficients, b.coefficients)
    assert b.initial_measure is None
    with pytest.raises(ValueError, match=r"must have shape \(17,\)"):
        solver.solve(a.coefficients[0][:5], [0.0, 0.5])
    with pytest.raises(ValueError, match="integrates to 2"):
        solver.solve(2 * a.coefficients[0], [0.0, 0.5])


@pytest.mark.parametrize("model, path, cls", [
    (sp.Model(d=2, beta=1.0), "auto", operators.FunkHeckeS1),
    (sp.Model(d=2, Q=np.diag([1.0, 2.0]), beta=1.0), "auto", operators.DirectQuadrature),
    (sp.Model(d=2, beta=np.inf), "auto", operators.ZeroTemperature),
])
def test_operator_is_chosen_once_at_construction(model, path, cls):
    solver = sp.FourierSolver(model, kmax=8, path=path)
    assert type(solver.operator) is cls and solver.path == cls.name


def test_s1_has_no_chebyshev_operator():
    with pytest.raises(ValueError, match="unknown velocity path 'chebyshev'"):
        sp.FourierSolver(sp.Model(d=2, Q=np.diag([1.0, 2.0])), kmax=8, path="chebyshev")


# ---------------------------------------------------------------- a new solver is one class
class UpwindSolution(DensitySolution):
    kind = "test-upwind-S1"

    def quadrature(self, i):
        grid = CircleGrid(self.coefficients.shape[-1])
        return grid.points, grid.weights, self.coefficients[i]

    def density(self, i, x):
        n = self.coefficients.shape[-1]
        th = np.mod(np.arctan2(x[..., 1], x[..., 0]), 2 * np.pi)
        return self.coefficients[i][np.rint(th / (2 * np.pi / n)).astype(int) % n]


class UpwindS1(DensitySolver):
    """First-order upwind finite volumes on S^1 (cells centred at the CircleGrid nodes): only
    the discretisation is written here; checks, time loop, diagnostics, I/O come from the base."""

    d = 2
    solution_class = UpwindSolution

    def __init__(self, model, n, **kw):
        super().__init__(model, **kw)
        name, _ = operators.choose_operator(model, "auto", 2, ("direct", "zero_temperature"))
        g = self.grid = CircleGrid(n)
        self.node_weights, self.h = g.weights, 2 * np.pi / n
        cls = {"direct": operators.DirectQuadrature, "zero_temperature": operators.ZeroTemperature}
        self.operator = cls[name](model, g.points, g.weights, (g.e_theta,))

    def values(self, y):
        return y

    def mass(self, y):
        return float(np.sum(self.node_weights * y))

    def project(self, density0):
        vals = check_values(density_callable(density0, 2)(self.grid.points))
        check_mass(float(np.sum(self.node_weights * vals)), self.mass_rtol, 2)
        return vals

    def check_state(self, y):
        return np.asarray(y, dtype=np.float64)

    def rhs(self, t, y):
        att, _ = self.operator.attention(y)
        v = np.sum(att * self.grid.e_theta, axis=-1)
        vf = 0.5 * (v + np.roll(v, -1))  # at the face between cells j and j + 1
        F = vf * np.where(vf > 0, y, np.roll(y, -1))
        return -(F - np.roll(F, 1)) / self.h

    def dt_max(self, t, y):
        return self.cfl * self.h / self.max_speed(y)


def test_a_new_discretisation_subclasses_the_base(tmp_path):
    model = sp.Model(d=2, Q=np.eye(2), V=np.diag([0.5, -0.2]), beta=np.inf)
    mu0 = sp.measures.VonMisesFisher([0.6, 0.8], 1.0)
    T = 0.5
    errors = []
    for n in (64, 128, 256):
        sol = UpwindS1(model, n, scheme="ssprk3", cfl=0.5).solve(mu0, [0.0, T])
        assert sol.path == "zero_temperature"
        # finite volumes conserve the sum of cell masses to round-off
        assert abs(sol.diagnostics["mass"][-1] - 1) < 1e-13
        grid = CircleGrid(n)
        ref = exact.zero_temperature_density(model, mu0, T).density(grid.points)
        errors.append(np.max(np.abs(sol.coefficients[-1] - ref)))
    # first-order upwind: the error halves with the cell size (slope 1; measured 0.94, 1.03)
    slopes = np.log2(np.array(errors[:-1]) / np.array(errors[1:]))
    assert np.all((slopes > 0.8) & (slopes < 1.2)), (errors, slopes)
    mu = sol.measure(1)
    assert mu.d == 2 and abs(mu.weights.sum() - 1) < 1e-12
    path = sol.save(tmp_path / "upwind.nc")
    back = UpwindSolution.load(path)
    np.testing.assert_array_equal(back.coefficients, sol.coefficients)
    with pytest.raises(ValueError, match="holds a test-upwind-S1 solution, not a S2 one; use "
                                         "UpwindSolution"):
        sp.SpectralSolution.load(path)


@pytest.mark.parametrize("make", [lambda: sp.FourierSolver(MODEL_S1, kmax=16),
                                  lambda: sp.SpectralSolver(sp.Model(beta=2.0), lmax=16),
                                  lambda: sp.FiniteVolumeSolver(sp.Model(beta=2.0), 4)])
def test_on_output_sees_each_state_as_it_is_reached(make):
    # a long run saves its rows from this callback: it must see exactly the returned states,
    # in order, each as a one-state solution of the same kind
    seen = []
    times = np.linspace(0.0, 0.5, 4)
    rho0 = rho0_s1 if isinstance(make(), sp.FourierSolver) else sp.measures.VonMisesFisher(
        [0.0, 0.0, 1.0], 2.0)
    sol = make().solve(rho0, times, on_output=lambda i, t, one: seen.append((i, t, one)))
    assert [i for i, _, _ in seen] == list(range(len(times)))
    np.testing.assert_array_equal([t for _, t, _ in seen], times)
    for i, _, one in seen:
        assert type(one) is type(sol) and len(one) == 1
        np.testing.assert_array_equal(one.coefficients[0], sol.coefficients[i])
