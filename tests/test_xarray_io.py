"""Results as xarray Datasets: CF metadata, the model and settings as attributes, and an exact
NetCDF round trip."""
import numpy as np
import pytest

import spherepde as sp
from spherepde import io

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
