"""The one registry design (interaction kernels and SHT libraries) and the renamed keywords:
scheme= (was method=), kernel= (was backend= / interaction_backend=), sht= (was backend=)."""
import sys
import types
import warnings

import numpy as np
import pytest

import spherepde as sp
from spherepde import interaction
from spherepde.registry import Registry
from spherepde.transforms import sht


def test_both_registries_share_one_design():
    assert isinstance(interaction.KERNELS, Registry) and isinstance(sht.SHT_LIBRARIES, Registry)
    assert interaction.KERNELS.names()[:3] == ["numpy", "numba", "torch"]
    assert "harmonic" in interaction.KERNELS
    assert sht.SHT_LIBRARIES.names() == ["shtns", "ducc0"]
    assert set(sht.available_backends()) <= {"shtns", "ducc0"}


def test_registry_loads_a_module_on_first_use_and_reports_what_is_missing(monkeypatch):
    r = Registry("widget")
    mod = types.ModuleType("fake_widget_module")
    mod_name = "fake_widget_module"
    # importing the module registers the entry, as spherepde.interaction.fused does for numba
    monkeypatch.setitem(sys.modules, mod_name, mod)
    r.register_module("lazy", mod_name)
    with pytest.raises(ImportError, match="did not register"):
        r.get("lazy")
    r.register("lazy", "the object")
    assert r.get("lazy") == "the object"
    r.register("needs_lib", object(), requires="a_library_that_is_not_installed_xyz")
    assert r.available() == ["lazy"]
    with pytest.raises(ImportError, match="widget 'needs_lib' is not installed"):
        r.get("needs_lib")
    with pytest.raises(ValueError, match=r"unknown or unavailable widget 'nope'.*\['lazy', "
                                         r"'needs_lib'\]"):
        r.get("nope")


def test_a_registered_kernel_is_used_by_name():
    calls = []

    def counting(x, keys, values, weights, beta, normalized):
        calls.append(x.shape[0])
        return interaction.attention(x, keys, values, weights, beta, normalized, kernel="numpy")

    interaction.register_kernel("counting_test_kernel", counting)
    try:
        x = sp.measures.Uniform(3).sample(20, seed=0)
        v = sp.Model(beta=2.0).velocity(x, x, kernel="counting_test_kernel")
        assert calls == [20]
        np.testing.assert_array_equal(v, sp.Model(beta=2.0).velocity(x, x, kernel="numpy"))
    finally:
        interaction.KERNELS._objects.pop("counting_test_kernel")
        interaction.KERNELS._order.remove("counting_test_kernel")


def _same_under_old_name(new, old):
    """new() and old() agree exactly, old() warns about the rename, new() does not."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        a = new()
    with pytest.warns(DeprecationWarning, match="is renamed"):
        b = old()
    return a, b


def test_old_keywords_still_work_with_a_deprecation_warning():
    model = sp.Model(beta=2.0)
    x = sp.measures.Uniform(3).sample(30, seed=1)
    a, b = _same_under_old_name(lambda: model.velocity(x, x, kernel="numpy"),
                                lambda: model.velocity(x, x, backend="numpy"))
    np.testing.assert_array_equal(a, b)
    keys, w = x @ model.B.T, np.full(30, 1 / 30)
    a, b = _same_under_old_name(
        lambda: interaction.attention(x, keys, x, w, 2.0, True, kernel="numpy"),
        lambda: interaction.attention(x, keys, x, w, 2.0, True, backend="numpy"))
    np.testing.assert_array_equal(a, b)
    a, b = _same_under_old_name(
        lambda: sp.ParticleSolver(model, scheme="rk4", dt=0.1, kernel="numpy").solve(x, [0, 0.2]),
        lambda: sp.ParticleSolver(model, method="rk4", dt=0.1, backend="numpy").solve(x, [0, 0.2]))
    np.testing.assert_array_equal(a.positions, b.positions)
    lib = sht.available_backends()[-1]
    a, b = _same_under_old_name(
        lambda: sp.SpectralSolver(sp.Model(Q=np.diag([1.0, 1.2, 0.9]), beta=1.0), lmax=6,
                                  sht=lib, kernel="numpy"),
        lambda: sp.SpectralSolver(sp.Model(Q=np.diag([1.0, 1.2, 0.9]), beta=1.0), lmax=6,
                                  backend=lib, interaction_backend="numpy"))
    assert (a.sht_library, a.kernel) == (b.sht_library, b.kernel) == (lib, "numpy")
    a, b = _same_under_old_name(
        lambda: sp.FourierSolver(sp.Model(d=2, Q=np.diag([1.0, 1.2])), kmax=6, kernel="numpy"),
        lambda: sp.FourierSolver(sp.Model(d=2, Q=np.diag([1.0, 1.2])), kmax=6,
                                 interaction_backend="numpy"))
    assert a.kernel == b.kernel == "numpy"


def test_old_and_new_name_together_is_an_error():
    with pytest.raises(TypeError, match="pass scheme= only; method= is its old name"):
        sp.ParticleSolver(sp.Model(), scheme="rk4", method="euler", dt=0.1)
    with pytest.raises(TypeError, match="pass kernel= only"):
        sp.Model().velocity(np.eye(3), np.eye(3), kernel="numpy", backend="numba")


def test_public_names_are_listed_and_importable():
    for name in ("Model", "PointCloud", "measures", "exact", "ParticleSolver", "SpectralSolver",
                 "FourierSolver", "w2", "sphere"):
        assert name in sp.__all__
    for name in sp.__all__:
        assert getattr(sp, name) is not None
