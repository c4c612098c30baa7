"""Interaction backends agree with the numpy reference to 1e-10 in float64 (SA, USA, d = 2, 3,
8), handle extreme beta and zero weights, and the fused kernel's log-partition is exact."""
import numpy as np
import pytest

from spherepde import interaction
from spherepde.interaction.reference import attention_numpy

# the harmonic kernel takes only keys of one length and values linear in them (B = c·O, as
# Model builds them), not these random ones: tests/test_harmonic.py checks it against numba
BACKENDS = [b for b in interaction.available_kernels() if b not in ("numpy", "harmonic")]


def random_problem(d, n, m, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = rng.standard_normal((n, d))
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    B = rng.standard_normal((d, d))
    V = rng.standard_normal((d, d))
    w = rng.random(n)
    return x, y @ B.T, y @ V.T, w / w.sum()


def test_numba_backend_is_registered():
    pytest.importorskip("numba")
    assert "numba" in interaction.available_kernels()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("d", [2, 3, 8])
@pytest.mark.parametrize("normalized", [True, False])
@pytest.mark.parametrize("beta", [3.0, 400.0])
def test_backend_matches_reference(backend, d, normalized, beta):
    # n = 2500 spans three key tiles of the fused kernel; beta = 3 takes its fixed-shift path
    # (fused single pass for d = 2, 3), beta = 400 its checked-bound path (d = 2, 3) or the
    # online softmax (rescaling, d = 8)
    x, keys, values, w = random_problem(d, 2500, 300, seed=d)
    if not normalized and beta > 10:
        # USA's e^{beta <x, k>} must stay inside float64: beta max|k| = 350 (logits spread
        # over 700 > 600, still the online path)
        keys = keys * (350.0 / beta / np.linalg.norm(keys, axis=1).max())
    if backend == "numba":
        from spherepde.interaction.fused import _shifts
        from spherepde.interaction.numerics import log_weights

        _, wide = _shifts(x, np.ascontiguousarray(keys.T), log_weights(w), beta)
        assert not wide.any() if beta == 3.0 else wide.all()
    ref = attention_numpy(x, keys, values, w, beta, normalized)
    out = interaction.attention(x, keys, values, w, beta, normalized, kernel=backend)
    # the backends' agreement target, 1e-10 relative to the size of the output
    assert np.abs(out - ref).max() <= 1e-10 * np.abs(ref).max()


@pytest.mark.parametrize("d", [2, 3])
def test_numba_far_queries_redo_with_the_maximum(d):
    # keys in a cap of radius 0.05 around e, queries spread over the sphere, beta = 1000: for
    # queries far from the cap the bound beta |x| |k| overshoots every logit by more than 600,
    # the fused pass underflows and must be redone with the exact maximum as shift
    rng = np.random.default_rng(3)
    e = np.eye(d)[0]
    keys = e + 0.05 * rng.standard_normal((700, d))
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    x = rng.standard_normal((200, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x[0] = -e  # the farthest query: every logit is about -1000, 2000 below the bound
    values = rng.standard_normal((700, d))
    w = rng.random(700)
    w /= w.sum()
    ref = attention_numpy(x, keys, values, w, 1000.0, True)
    out = interaction.attention(x, keys, values, w, 1000.0, True, kernel="numba")
    far = x @ e < 0.3
    assert far.any() and (~far).any()
    # the same sums as the reference up to round-off in logits of size beta = 1000
    assert np.abs(out - ref).max() <= 1e-10 * np.abs(ref).max()


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_beta_no_overflow_sa(backend):
    x, keys, values, w = random_problem(3, 500, 50, seed=7)
    ref = attention_numpy(x, keys, values, w, 1e6, True)
    out = interaction.attention(x, keys, values, w, 1e6, True, kernel=backend)
    assert np.all(np.isfinite(out))
    # at beta = 1e6 each softmax is (nearly) one-hot: same answer to round-off times beta·eps
    assert np.abs(out - ref).max() <= 1e-8 * np.abs(ref).max()


@pytest.mark.parametrize("backend", BACKENDS)
def test_usa_overflow_raises(backend):
    x, keys, values, w = random_problem(3, 50, 5, seed=8)
    with pytest.raises(FloatingPointError, match="USA"):
        interaction.attention(x, keys * 0 + x[0], values, w, 1e4, False, kernel=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_weights_are_ignored(backend):
    x, keys, values, w = random_problem(3, 2100, 20, seed=9)
    w[:1500] = 0.0  # a whole tile and a half of dead atoms
    w /= w.sum()
    out = interaction.attention(x, keys, values, w, 2.0, True, kernel=backend)
    ref = attention_numpy(x[:, :], keys[1500:], values[1500:], w[1500:], 2.0, True)
    # dropping zero-weight atoms changes nothing beyond round-off
    assert np.abs(out - ref).max() <= 1e-12 * np.abs(ref).max()


def test_fused_log_partition_matches_logsumexp():
    pytest.importorskip("numba")
    from scipy.special import logsumexp

    from spherepde.interaction.fused import log_partition_numba

    x, keys, _, w = random_problem(5, 3000, 100, seed=11)
    ref = logsumexp(4.0 * x @ keys.T + np.log(w), axis=1)
    # log-sum-exp in float64: absolute round-off ~ 1e-15 per term, 1e-12 with margin
    assert np.abs(log_partition_numba(x, keys, w, 4.0) - ref).max() < 1e-12


def test_unknown_backend_message():
    x, keys, values, w = random_problem(3, 10, 2, seed=0)
    with pytest.raises(ValueError, match="unknown or unavailable interaction kernel"):
        interaction.attention(x, keys, values, w, 1.0, True, kernel="cuda-magic")


@pytest.mark.parametrize("name", [k for k in ("numpy", "numba", "torch", "harmonic")
                                  if k in interaction.available_kernels()])
def test_every_kernel_implements_the_bind_contract(name):
    import spherepde as sp

    model = sp.Model(Q=np.diag([1.0, 1.1, 0.9]), V=np.diag([1.0, 0.5, 0.2]), beta=4.0)
    y = sp.measures.Uniform(3).sample(300, seed=2)
    w = np.full(300, 1 / 300)
    kernel = interaction.KERNELS.get(name)
    assert isinstance(kernel, interaction.Kernel)
    out, stats = kernel.bind(model, y, w)(y[:50])
    assert out.shape == (50, 3) and stats["queries"] == 50
    ref = attention_numpy(y[:50], y @ model.B.T, y @ model.V.T, w, 4.0, True)
    # direct kernels: round-off of the sums; harmonic: its 1e-10 default velocity accuracy
    assert np.abs(out - ref).max() < (1e-9 if name == "harmonic" else 1e-12)


def test_harmonic_is_refused_from_keys_and_values():
    x, keys, values, w = random_problem(3, 10, 3, seed=0)
    if "harmonic" not in interaction.available_kernels():
        pytest.skip("ducc0 not installed")
    with pytest.raises(ValueError, match="Model.attention"):
        interaction.attention(x, keys, values, w, 1.0, True, kernel="harmonic")


def test_auto_follows_the_profile_and_the_entry_order():
    from spherepde.interaction import AutoProfile, KernelProblem, resolve_kernel

    small = KernelProblem(100, 100, d=5, kappa=4.0)  # 10^4 pairs < 2^14
    assert resolve_kernel("auto", small) == "numpy"
    assert resolve_kernel("auto", small, AutoProfile(numba_min_pairs=100)) == "numba"
    assert resolve_kernel("numpy", KernelProblem(10**4, 10**4)) == "numpy"
    assert [e.name for e in interaction.AUTO_KERNELS][-1] == "numpy"
    with pytest.raises(ValueError, match="unknown AutoProfile fields.*numba_min_pairs"):
        AutoProfile.from_dict({"numba_min_pair": 3})


def test_a_profile_saved_and_loaded_is_the_same(tmp_path):
    from spherepde.interaction import AutoProfile

    prof = AutoProfile(numba_min_pairs=4096, harmonic_pairs_per_unit=30.0)
    prof.save(tmp_path / "profile.json")
    assert AutoProfile.load(tmp_path / "profile.json") == prof
