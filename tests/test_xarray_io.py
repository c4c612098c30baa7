"""Results as xarray Datasets: CF metadata, the model and settings as attributes, and an exact
NetCDF round trip for a trajectory and for the S^2 and S^1 density solutions."""
import numpy as np
import pytest

import spherepde as sp
from spherepde import io
from spherepde.density import FourierSolution, SpectralSolution

xr = pytest.importorskip("xarray")


def _model():
    # a general B (not c·O) and a non-symmetric V: every matrix entry must survive the trip
    rng = np.random.default_rng(3)
    return sp.Model(Q=np.eye(3) + 0.1 * rng.normal(size=(3, 3)), V=rng.normal(size=(3, 3)),
                    beta=2.5)


def test_trajectory_netcdf_round_trip(tmp_path):
    model = _model()
    x0 = sp.measures.Uniform(3).sample(24, seed=0)
    traj = sp.ParticleSolver(model, rtol=1e-6).solve(x0, np.linspace(0.0, 0.5, 4), tokens=[1, 4, 7])
    ds = traj.to_xarray()
    assert ds["positions"].dims == ("time", "token", "component")
    assert ds["token"].values.tolist() == [1, 4, 7]
    assert ds["initial_positions"].shape == (24, 3)
    assert ds.attrs["Conventions"].startswith("CF") and ds["time"].attrs["units"] == "1"
    assert ds.attrs["setting_scheme"] == "dopri5" and ds.attrs["setting_rtol"] == 1e-6
    path = io.save_dataset(ds, tmp_path / "traj.nc")
    back = io.open_dataset(path)
    assert back.identical(ds)  # values, coordinates and attributes, bit for bit
    again = sp.Trajectory.load(traj.save(tmp_path / "t2.nc"))
    assert np.array_equal(again.positions, traj.positions)
    for name in ("Q", "K", "V"):
        assert np.array_equal(getattr(again.model, name), getattr(model, name))
    assert again.model.beta == model.beta and again.model.normalized
    assert again.stats == traj.stats and again.settings == traj.settings


def test_spectral_solution_netcdf_round_trip(tmp_path):
    model = sp.Model(V=np.diag([1.0, 0.4, 0.0]), beta=np.inf)
    sol = sp.SpectralSolver(model, lmax=12).solve(sp.measures.VonMisesFisher([0, 0.6, 0.8], 2.0),
                                                  [0.0, 0.2, 0.4])
    ds = sol.to_xarray()
    assert ds["density"].dims == ("time", "lat", "lon")
    assert ds["density"].attrs["units"] == "sr-1" and ds["lat"].attrs["units"] == "degrees_north"
    assert np.isinf(ds.attrs["model_beta"]) and ds.attrs["setting_lmax"] == 12
    # the gridded density integrates to the conserved mass (Gauss quadrature, exact at degree L)
    grid = sp.sphere.GaussGrid(ds.sizes["lat"], ds.sizes["lon"])
    assert np.abs(grid.integrate(ds["density"].values) - 1.0).max() < 1e-12
    path = sol.save(tmp_path / "sol.nc")
    assert io.open_dataset(path).identical(ds)
    back = SpectralSolution.load(path)
    assert np.array_equal(back.coefficients, sol.coefficients)
    assert back.model.beta == np.inf and back.lmax == 12 and back.settings == sol.settings
    x = sp.measures.Uniform(3).sample(50, seed=1)
    assert np.array_equal(back.density(2, x), sol.density(2, x))
    with pytest.raises(ValueError, match="not 'S1 Fourier solution'"):
        FourierSolution.from_xarray(ds)


def test_fourier_solution_netcdf_round_trip(tmp_path):
    sol = sp.FourierSolver(sp.Model(d=2, beta=1.0), kmax=16).solve(
        sp.measures.VonMisesFisher([1.0, 0.0], 2.0), [0.0, 0.5])
    ds = sol.to_xarray()
    assert ds["density"].dims == ("time", "angle") and ds["density"].attrs["units"] == "radian-1"
    path = sol.save(tmp_path / "s1.nc")
    assert io.open_dataset(path).identical(ds)
    back = FourierSolution.load(path)
    assert np.array_equal(back.coefficients, sol.coefficients) and back.n == sol.n
