"""The tiled BLAS kernel agrees with the numpy reference and the fused numba kernel to float64
round-off in d = 16, 64, 512 (SA and USA, queries != keys, beta = 0, 4 and 1000, zero
weights), takes its fixed-shift path at small beta and the online softmax at large beta, and
is what kernel="auto" picks in high dimension."""
import numpy as np
import pytest

from spherepde import interaction
from spherepde.interaction.reference import attention_numpy

pytest.importorskip("numba")
from spherepde.interaction.numerics import log_weights
from spherepde.interaction.options import DEFAULT_PROFILE
from spherepde.interaction.tiled import _bounds, attention_tiled

TILED_MIN_DIM = DEFAULT_PROFILE.tiled_min_dim

EPS = np.finfo(np.float64).eps


def random_problem(d, n, m, seed, dead=0):
    """m queries and n keys on S^{d-1} (different clouds), keys B y and values V y for random
    B, V, weights random with the first ``dead`` of them zero."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = rng.standard_normal((n, d))
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    B = rng.standard_normal((d, d)) / np.sqrt(d)
    V = rng.standard_normal((d, d))
    w = rng.random(n)
    w[:dead] = 0.0
    return x, y @ B.T, y @ V.T, w / w.sum()


def tolerance(x, keys, values, w, beta, normalized):
    """Per-query bound (m, 1) of |tiled - reference| from float64 round-off.

    Each logit beta<x, k> + log w is summed over d products in a different order by the two
    kernels: absolute error <= d·eps·(beta|x||k| + |log w|) (the standard dot-product bound).
    A perturbation delta of the logits changes a softmax average of the values by at most
    2·delta·max|v|, and USA's sum by delta·Z_i·max|v| (Z_i = sum_j w_j e^{beta<x_i,k_j>});
    the n-term sums themselves add n·eps relative. Factor 2 for the two kernels' errors."""
    d, n = x.shape[1], keys.shape[0]
    alive = w > 0
    lw = np.abs(np.log(w[alive])).max()
    dlogit = d * EPS * (beta * np.linalg.norm(x, axis=1).max()
                        * np.linalg.norm(keys, axis=1).max() + lw)
    scale = np.abs(values).max()
    if not normalized:
        z = np.log(w[alive])[None, :] + beta * x @ keys[alive].T
        scale = scale * np.exp(z.max(axis=1, keepdims=True)
                               + np.log(np.exp(z - z.max(axis=1, keepdims=True)).sum(1))[:, None])
    return 2 * (2 * dlogit + n * EPS) * scale


@pytest.mark.parametrize("d", [16, 64, 512])
@pytest.mark.parametrize("normalized", [True, False])
@pytest.mark.parametrize("beta", [0.0, 4.0, 1000.0])
def test_tiled_matches_reference_and_fused(d, normalized, beta):
    # 300 queries and 2500 keys: the last query and key tiles partial (128 x 2048 tiles, and
    # 256 x 1024 at d = 512); 200 zero-weight atoms
    x, keys, values, w = random_problem(d, 2500, 300, seed=d, dead=200)
    if not normalized and beta > 10:
        # USA's e^{beta <x, k>} must stay inside float64: beta max|k| = 350
        keys = keys * (350.0 / beta / np.linalg.norm(keys, axis=1).max())
    _, wide = _bounds(x, keys, log_weights(w), beta)
    # beta = 1000 takes the online softmax (running maximum and rescaling), the others the
    # fixed shift (for USA at beta = 1000 the logits still spread over 700 > 600)
    assert wide.all() if beta == 1000.0 else not wide.any()
    out = attention_tiled(x, keys, values, w, beta, normalized)
    tol = tolerance(x, keys, values, w, beta, normalized)
    ref = attention_numpy(x, keys, values, w, beta, normalized)
    assert np.all(np.abs(out - ref) <= tol)
    fused = interaction.attention(x, keys, values, w, beta, normalized, kernel="numba")
    assert np.all(np.abs(out - fused) <= tol)


@pytest.mark.parametrize("beta", [4.0, 1000.0])
def test_dead_key_tiles_and_small_tiles(beta):
    # tiles of 64 queries x 256 keys; the first 700 atoms (two whole key tiles and part of a
    # third) have zero weight: with the online softmax the running maximum stays -inf over them
    x, keys, values, w = random_problem(64, 1500, 150, seed=5, dead=700)
    out = attention_tiled(x, keys, values, w, beta, True, query_tile=64, key_tile=256)
    ref = attention_numpy(x, keys[700:], values[700:], w[700:], beta, True)
    # dropping the zero-weight atoms changes nothing beyond the round-off bound above
    assert np.all(np.abs(out - ref) <= tolerance(x, keys[700:], values[700:], w[700:], beta,
                                                 True))


def test_threads_do_not_change_the_result():
    # every query tile is computed by the same operations whichever thread runs it
    x, keys, values, w = random_problem(16, 3000, 700, seed=2)
    one = attention_tiled(x, keys, values, w, 8.0, True, threads=1)
    two = attention_tiled(x, keys, values, w, 8.0, True, threads=2)
    np.testing.assert_array_equal(one, two)


def test_tiles_leave_the_blas_thread_count_as_they_found_it():
    # the tiles make OpenBLAS single-threaded while they run; left so, every later matmul of
    # the process would run on one core. One tile (run in the calling thread) and many (a
    # pool of two threads, which must not race on what they put back).
    from spherepde.interaction import tiled
    setter, getter = tiled._SET_LOCAL_BLAS_THREADS, tiled._GET_BLAS_THREADS
    if setter is None:
        pytest.skip("numpy's BLAS is not an OpenBLAS with openblas_set_num_threads_local")
    found = getter()
    try:
        setter(2)
        if getter() < 2:
            pytest.skip("this OpenBLAS was started with a single thread")
        x, keys, values, w = random_problem(16, 3000, 700, seed=2)
        for tile in (1024, 64):
            for _ in range(5):
                attention_tiled(x, keys, values, w, 8.0, True, threads=2, query_tile=tile)
                assert getter() == 2
    finally:
        setter(found)


def test_usa_overflow_raises():
    x, keys, values, w = random_problem(16, 50, 5, seed=8)
    with pytest.raises(FloatingPointError, match="USA"):
        attention_tiled(x, keys * 0 + x[0], values, w, 1e4, False)


def test_usa_near_the_float64_limit():
    # every key equals the first query: its USA value is e^699 (about 1e303) times a weighted
    # mean of |v|, inside float64; carried relative to e^{m_i}, nothing overflows on the way
    x, _, values, w = random_problem(16, 40, 4, seed=4)
    keys = np.repeat(x[:1], 40, axis=0)
    values = np.abs(values)
    out = attention_tiled(x, keys, values, w, 699.0, False)
    ref = attention_numpy(x, keys, values, w, 699.0, False)
    assert np.all(np.isfinite(out)) and out.max() > 1e300
    # relative: logits of size 699 carry d·eps·699 absolute round-off in each kernel
    assert np.all(np.abs(out - ref) <= 2 * 16 * EPS * 699 * np.abs(ref))


def test_bad_shapes_are_refused():
    x, keys, values, w = random_problem(16, 20, 3, seed=0)
    with pytest.raises(ValueError, match="keys"):
        attention_tiled(x[:, :8], keys, values, w, 1.0, True)


def test_auto_picks_tiled_in_high_dimension():
    P = interaction.KernelProblem
    assert interaction.resolve_kernel("auto", P(2000, 2000, TILED_MIN_DIM)) == "tiled"
    assert interaction.resolve_kernel("auto", P(2000, 2000, TILED_MIN_DIM - 1)) == "numba"
    assert interaction.resolve_kernel("auto", P(2000, 2000, 3, 4.0)) in ("numba", "harmonic")
    # tiny problems stay with numpy (no thread start-up)
    assert interaction.resolve_kernel("auto", P(64, 64, 512)) == "numpy"
    # the threshold is the profile's, which a user may load
    high = interaction.AutoProfile.from_dict({"tiled_min_dim": 1024})
    assert interaction.resolve_kernel("auto", P(2000, 2000, 512), high) == "numba"
    x, keys, values, w = random_problem(16, 300, 200, seed=1)
    np.testing.assert_array_equal(interaction.attention(x, keys, values, w, 3.0),
                                  attention_tiled(x, keys, values, w, 3.0, True))


def test_particle_solver_auto_uses_tiled():
    import spherepde as sp

    model = sp.Model(beta=2.0, d=32)
    solver = sp.ParticleSolver(model, scheme="euler", dt=0.01)
    x0 = sp.measures.Uniform(32).sample(300, seed=0)
    traj = solver.solve(x0, [0.0, 0.01])
    assert traj.settings["kernel_schedule"] == "0:tiled"
    ref = sp.ParticleSolver(model, scheme="euler", dt=0.01, kernel="numba").solve(x0,
                                                                                  [0.0, 0.01])
    # the kernels' velocities agree to ~1e-15 (above); one Euler step of 0.01 and the
    # renormalization onto the sphere keep the positions within a few eps of each other
    assert np.abs(traj.positions[-1] - ref.positions[-1]).max() < 1e-14
