"""Density solutions as xarray Datasets (inherited from the solution base): the density on the
solver's grid with CF units, the model and settings as attributes, an exact NetCDF round trip."""
import numpy as np
import pytest

import spherepde as sp
from spherepde import io
from spherepde.density import FourierSolution, SpectralSolution

xr = pytest.importorskip("xarray")


def test_spectral_solution_netcdf_round_trip(tmp_path):
    model = sp.Model(V=np.diag([1.0, 0.4, 0.0]), beta=np.inf)
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
