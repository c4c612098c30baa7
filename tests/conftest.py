"""Fixtures shared by the test files: reproducible points on the sphere and the model of the
default scenario. Each is a factory, so a test asks for the size, dimension and seed it needs."""
import numpy as np
import pytest

import spherepde as sp
from spherepde.sphere import random_rotation

# scripts/setup.sh compiles the numba kernels into numba's on-disk cache for the CPU features
# that use_wide_vectors() picks; ask for the same ones before anything compiles, so that the
# tests load that cache instead of compiling everything again.
sp.use_wide_vectors()


@pytest.fixture(scope="session")
def sphere_points():
    """``sphere_points(n, d=3, seed=0)``: n points drawn uniformly on S^{d-1}, shape (n, d)."""
    def make(n, d=3, seed=0):
        return sp.measures.Uniform(d).sample(n, seed=seed)
    return make


@pytest.fixture(scope="session")
def scenario_model():
    """``scenario_model(beta, rotation_seed=None)``: the default scenario's model on S^2,
    V = diag(1, 0.4, 0) O and K = O, with O the identity or a random rotation of that seed
    (A = V Bᵀ = diag(1, 0.4, 0) either way, so the limit measure is the same)."""
    def make(beta, rotation_seed=None):
        S = np.diag([1.0, 0.4, 0.0])
        if rotation_seed is None:
            return sp.Model(V=S, beta=beta)
        O = random_rotation(3, seed=rotation_seed)
        return sp.Model(K=O, V=S @ O, beta=beta)
    return make
