"""The one registry design (interaction kernels and SHT libraries): lazy loading, errors that
list what is installed, registration by name."""
import sys
import types

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
    # check: a declared name passes whether or not it loads; another lists the declared ones
    assert r.check("needs_lib") == "needs_lib"
    with pytest.raises(ValueError, match=r"unknown widget 'nope'; choose one of \['lazy', "
                                         r"'needs_lib'\]"):
        r.check("nope")


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


def test_unknown_names_list_what_is_installed():
    with pytest.raises(ValueError, match=r"unknown or unavailable interaction kernel 'nope'; "
                                         r"choose from \['numpy', 'numba'"):
        sp.Model(beta=2.0).velocity(np.eye(3), np.eye(3), kernel="nope")


def test_removed_keywords_are_errors():
    """The package was never released: no old keyword names are kept."""
    with pytest.raises(TypeError, match="backend"):
        sp.Model().velocity(np.eye(3), np.eye(3), backend="numpy")
    with pytest.raises(TypeError, match="method"):
        sp.ParticleSolver(sp.Model(), method="rk4", dt=0.1)
    with pytest.raises(TypeError, match="interaction_backend"):
        sp.FourierSolver(sp.Model(d=2), kmax=6, interaction_backend="numpy")
    assert not hasattr(interaction, "register_backend")


def test_public_names_are_listed_and_importable():
    for name in ("Model", "PointCloud", "measures", "exact", "ParticleSolver", "SpectralSolver",
                 "FourierSolver", "w2", "sphere"):
        assert name in sp.__all__
    for name in sp.__all__:
        assert hasattr(sp, name), f"{name} is listed in spherepde.__all__ but missing"
    with pytest.raises(AttributeError, match="no attribute 'spectral'"):
        _ = sp.spectral


def test_finite_volumes_choose_their_velocity_operator_from_a_registry(monkeypatch):
    from spherepde.density import finite_volume as fv

    assert isinstance(fv.OPERATORS, Registry)
    assert fv.OPERATORS.names() == ["direct", "harmonic", "zero_temperature"]
    model = sp.Model(beta=1.0)
    assert sp.FiniteVolumeSolver(model, 4).operator.name == "direct"  # auto: n <= DIRECT_MAX_N
    n = fv.DIRECT_MAX_N + 1
    assert sp.FiniteVolumeSolver(model, n).operator.name == "harmonic"
    with pytest.raises(ValueError, match=r"unknown velocity path 'nope'; .*installed here: "
                                         r"\['direct', 'harmonic', 'zero_temperature'\]"):
        sp.FiniteVolumeSolver(model, 4, path="nope")
    # without the harmonic field's library: auto falls back to direct quadrature, and asking
    # for it by name says what is installed
    monkeypatch.setitem(sys.modules, "spherepde.interaction.harmonic", None)
    assert fv.OPERATORS.available() == ["direct", "zero_temperature"]
    assert sp.FiniteVolumeSolver(model, n).operator.name == "direct"
    with pytest.raises(ImportError, match=r"'harmonic' is not installed .*available: "
                                          r"\['direct', 'zero_temperature'\]"):
        sp.FiniteVolumeSolver(model, 4, path="harmonic")


def test_density_solvers_choose_their_velocity_operator_from_a_registry():
    from spherepde.density import s1_fourier, s2_spectral

    assert isinstance(s2_spectral.OPERATORS, Registry)
    assert s2_spectral.OPERATORS.names() == ["funk_hecke", "direct", "chebyshev",
                                             "zero_temperature"]
    assert s1_fourier.OPERATORS.names() == ["funk_hecke", "direct", "zero_temperature"]
    general = sp.Model(Q=np.diag([1.0, 1.2, 0.9]), beta=1.0)
    assert sp.SpectralSolver(general, lmax=6).operator.name == "direct"  # auto: B is not c·O
    assert sp.SpectralSolver(sp.Model(beta=1.0), lmax=6).operator.name == "funk_hecke"
    with pytest.raises(ValueError, match="unknown velocity path 'nope'; choose 'auto', "
                                         "'funk_hecke', 'direct', 'chebyshev'"):
        sp.SpectralSolver(general, lmax=6, path="nope")
