"""Density solutions as xarray Datasets (inherited from the solution base): the density on the
solver's grid with CF units, the model and settings as attributes, an exact NetCDF round trip."""
import numpy as np
import pytest

import spherepde as sp
from spherepde import io
from spherepde.density import FourierSolution, SpectralSolution

xr = pytest.importorskip("xarray")


def test_spectral_solution_netcdf_round_trip(tmp_path, scenario_model):
    model = scenario_model(np.inf)
    sol = sp.SpectralSolver(model, lmax=12).solve(sp.measures.VonMisesFisher([0, 0.6, 0.8], 2.0),
                                                  [0.0, 0.2, 0.4])
    ds = sol.to_xarray()
    assert ds["density"].dims == ("time", "lat", "lon")
    assert ds["density"].attrs["units"] == "sr-1" and ds["lat"].attrs["units"] == "degrees_north"
    assert np.isinf(ds.attrs["model_beta"]) and ds.attrs["grid_lmax"] == 12
    assert ds.attrs["setting_scheme"] == "dopri5" and ds.attrs["setting_degree"] == 12
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
    with pytest.raises(ValueError, match="holds a S2 solution, not a S1 one; use SpectralSolution"):
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


def test_finite_volume_solution_netcdf_round_trip(tmp_path, scenario_model):
    from spherepde.analysis import transport_cases as tc
    from spherepde.density import FiniteVolumeSolution
    from spherepde.density.finite_volume import TransportSolver

    model = scenario_model(2.0)
    mu0 = sp.measures.VonMisesFisher([0, 0.6, 0.8], 2.0)
    sol = sp.FiniteVolumeSolver(model, 4, limiter="positivity").solve(mu0, [0.0, 0.1, 0.2])
    ds = sol.to_xarray()
    assert ds["density"].dims == ("time", "cell") and ds.sizes["cell"] == 96
    assert ds["density"].attrs["units"] == "sr-1"
    assert ds["cell_mass"].dims == ("time", "cell") and ds["cell_mass"].attrs["units"] == "1"
    assert ds["lat"].attrs["units"] == "degrees_north"
    assert ds["lon"].attrs["units"] == "degrees_east"
    assert ds["cell_area"].attrs["units"] == "sr"
    # the cell areas tile the sphere, and averages times areas sum to the mass diagnostic, which
    # is conserved (sums of 96 terms: round-off only)
    assert abs(float(ds["cell_area"].sum()) - 4 * np.pi) < 1e-13
    mass = (ds["density"] * ds["cell_area"]).sum("cell").values
    np.testing.assert_allclose(mass, ds["mass"].values, rtol=1e-14)
    np.testing.assert_allclose(mass, mass[0], rtol=1e-14)
    # the centres' coordinates are those of the mesh
    c = sol.mesh.centers
    lat, lon = np.radians(ds["lat"].values), np.radians(ds["lon"].values)
    np.testing.assert_allclose(np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon),
                                         np.sin(lat)], -1), c, atol=1e-15)
    assert ds["lat_bounds"].dims == ("cell", "vertex") and ds["lat"].attrs["bounds"] == "lat_bounds"
    assert ds.attrs["model_beta"] == 2.0 and ds.attrs["grid_n"] == 4
    assert ds.attrs["setting_limiter"] == "positivity" and ds.attrs["setting_scheme"] == "ssprk3"
    assert ds.attrs["velocity_path"] == "direct" and "setting_rtol" not in ds.attrs
    path = sol.save(tmp_path / "fv.nc")
    assert io.open_dataset(path).identical(ds)
    back = FiniteVolumeSolution.load(path)
    assert np.array_equal(back.masses, sol.masses) and back.limiter == "positivity"
    assert back.settings == sol.settings and back.stats == sol.stats
    x = sp.measures.Uniform(3).sample(50, seed=1)
    assert np.array_equal(back.density(2, x), sol.density(2, x))
    # prescribed transport has no model: none is written and none comes back
    tr = TransportSolver(3, tc.solid_body_rotation(0.0, 12.0)).solve(mu0, [0.0, 0.5])
    tds = tr.to_xarray()
    assert "model_beta" not in tds.attrs and np.isnan(tds["energy"].values).all()
    tr.save(tmp_path / "tr.nc")
    assert io.open_dataset(tmp_path / "tr.nc").identical(tds)
    assert FiniteVolumeSolution.load(tmp_path / "tr.nc").model is None
