"""Exact attention sums over the cap that carries the kernel (the harmonic kernel's
fallback) against the full direct sum: random and concentrated clouds on S^2 and S^1, SA and
USA, beta = 256 and 1000, directly and through HarmonicField where its bound fails."""
import math

import numpy as np
import pytest

from spherepde.interaction.caps import CapSums
from spherepde.interaction.fused import attention_numba
from spherepde.interaction.harmonic import DEFAULT_TOL, HarmonicField
from spherepde.interaction.options import HarmonicTuning

TOL = DEFAULT_TOL


def unit(v):
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def clouds(d, n, seed):
    """A uniform cloud and a concentrated one (a cap of width 0.05 around e_1), with random
    weights spanning three decades."""
    rng = np.random.default_rng(seed)
    e1 = np.zeros(d)
    e1[0] = 1.0
    w = rng.random(n) ** 3 + 1e-3
    return {"uniform": (unit(rng.standard_normal((n, d))), w / w.sum()),
            "concentrated": (unit(e1 + 0.05 * rng.standard_normal((n, d))), w / w.sum())}


@pytest.mark.parametrize("d", [3, 2])
@pytest.mark.parametrize("kind", ["uniform", "concentrated"])
@pytest.mark.parametrize("kappa", [256.0, 1000.0])
def test_cap_sums_match_the_full_sum(d, kind, kappa):
    y, w = clouds(d, 6000, seed=d)[kind]
    rng = np.random.default_rng(7)
    n = unit(rng.standard_normal((400, d)))
    s, a, shift, count = CapSums(y, w).sums(n, np.full(400, kappa), TOL)
    ref = attention_numba(n, kappa * y, y, w, 1.0, True)
    # the dropped atoms weigh at most tol/2 of s: the mean direction is off by <= tol
    # (module docstring); 100 tol leaves room for round-off over thousands of terms
    assert np.abs(a / s[:, None] - ref).max() <= 100 * TOL
    # log of the normalizer against the direct kernel's log-partition: same tol/2 bound
    from spherepde.interaction.fused import log_partition_numba

    logz = log_partition_numba(n, kappa * y, w, 1.0)
    assert np.abs(shift + np.log(s) - logz).max() <= 100 * TOL
    if kind == "uniform":
        # the cap's area is a fraction (1 - cos alpha)/2 ~ tau/(2 kappa) of the sphere, tau =
        # log(2/(w tol)) <= 45 here, so <= 9% at kappa = 256 (S^2); its cover (bands x
        # longitudes) at most doubles it; on S^1 the arc is sqrt(2 tau/kappa)/pi <= 19%
        share = (45.0 / kappa) if d == 3 else 2 * math.sqrt(2 * 45.0 / kappa) / math.pi
        assert count.mean() <= share * y.shape[0]


@pytest.mark.parametrize("d", [3, 2])
def test_full_sums_match_the_direct_kernel(d):
    """The few-query fallback (all atoms, exact largest logit as the shift) against the fused
    kernel and its log-partition, with some weights 0."""
    from spherepde.interaction.caps import full_sums
    from spherepde.interaction.fused import log_partition_numba

    y, w = clouds(d, 3000, seed=8)["concentrated"]
    w = w.copy()
    w[::7] = 0.0
    n = unit(np.random.default_rng(9).standard_normal((50, d)))
    kappa = np.linspace(0.0, 1000.0, 50)
    s, a, shift = full_sums(y, w, n, kappa)
    ref = attention_numba(kappa[:, None] * n, y, y, w, 1.0, True)
    # the only dropped terms are below e^-708 of the largest: round-off only
    assert np.abs(a / s[:, None] - ref).max() <= 100 * TOL
    logz = log_partition_numba(kappa[:, None] * n, y, w, 1.0)
    assert np.abs(shift + np.log(s) - logz).max() <= 100 * TOL


def test_cap_sums_degenerate_cases():
    y = unit(np.random.default_rng(0).standard_normal((50, 3)))
    w = np.full(50, 0.02)
    w[:10] = 0.0  # zero weights are dropped
    caps = CapSums(y, w)
    assert caps.n == 40
    # kappa = 0: every atom counts, the mean of the atoms
    s, a, shift, count = caps.sums(y[:3], np.zeros(3), TOL)
    assert np.all(count == 40)
    assert np.allclose(a / s[:, None], y[10:].mean(axis=0), atol=1e-14, rtol=0)
    with pytest.raises(ValueError, match="non-negative"):
        CapSums(y, -w)
    with pytest.raises(ValueError, match="1 of 50 are negative, NaN or infinite"):
        CapSums(y, np.where(np.arange(50) == 3, np.inf, w))
    with pytest.raises(ValueError, match="tol"):
        caps.sums(y[:3], np.zeros(3), 0.0)


def far_queries(field, y, d, m, seed):
    """Queries x whose kernel direction n(x) = B^T x/|B^T x| lies 0.3-0.8 rad from e_1, where
    the concentrated cloud sits: G there is e^{-kappa (1 - cos)} ~ e^{-40} or less of its
    mean, far below what the harmonic expansion resolves."""
    rng = np.random.default_rng(seed)
    ang = rng.uniform(0.3, 0.8, m)
    if d == 3:
        ph = rng.uniform(0, 2 * np.pi, m)
        n = np.stack([np.cos(ang), np.sin(ang) * np.cos(ph), np.sin(ang) * np.sin(ph)], 1)
    else:
        n = np.stack([np.cos(ang), np.sin(ang) * rng.choice([-1, 1], m)], 1)
    return unit(n @ np.linalg.inv(field.B))  # B^T x parallel to n


@pytest.mark.parametrize("d", [3, 2])
@pytest.mark.parametrize("normalized", [True, False])
@pytest.mark.parametrize("beta", [256.0, 1000.0])
def test_harmonic_falls_back_to_caps_where_its_bound_fails(d, normalized, beta):
    from spherepde.sphere import rotation_about_axis

    O = (rotation_about_axis([1.0, 1.0, 1.0], 0.9) if d == 3 else
         np.array([[math.cos(0.9), -math.sin(0.9)], [math.sin(0.9), math.cos(0.9)]]))
    # USA at beta = 1000 overflows float64 (e^1000): |B| = 0.6 keeps it at e^600
    scale = 1.0 if normalized or beta < 700 else 0.6
    B, V = scale * O, np.diag([1.0, 0.4, 0.0][:d]) @ O
    y, w = clouds(d, 4000, seed=3)["concentrated"]
    field = HarmonicField(B, V, beta, normalized)
    x = np.concatenate([far_queries(field, y, d, 300, seed=4), y[:100]])
    out, stats = field.evaluate(x, y, w)
    ref = attention_numba(x, y @ B.T, y @ V.T, w, beta, normalized)
    # the far queries fail the harmonic bound and are too many for the all-atom fallback
    assert stats["fallback"] >= 300 > HarmonicTuning().direct_fallback_max
    # errors relative to the bound's scale: |V|_2 (SA), |V|_2 times the query's own
    # normalizer Z = sum_j w_j e^{beta <x, B y_j>} (USA, e^{+-kappa}-sized between queries)
    from spherepde.interaction.fused import log_partition_numba
    from spherepde.interaction.harmonic import FALLBACK_FACTOR

    logz = log_partition_numba(x, y @ B.T, w, beta)
    scale_q = np.linalg.norm(V, 2) * (np.ones(x.shape[0]) if normalized else np.exp(logz))
    err = np.abs(out - ref).max(axis=1) / scale_q
    # the rows that fell back are those whose harmonic bound exceeds FALLBACK_FACTOR tol
    _, bound = field.attention(x, field.moments(y, w), return_bound=True)
    fell = ~(bound <= FALLBACK_FACTOR * TOL)
    assert fell.sum() == stats["fallback"]
    # fallback rows: the far field's a priori bound, 0.9 tol (SA) and 0.45 tol (USA); USA
    # scales by e^{shift}, whose rounding is a few eps |log Z| (measured worst over these
    # cases: 0.21 tol, at |log Z| ~ 600)
    eps = np.finfo(np.float64).eps
    roundoff = 0.0 if normalized else 4 * eps * np.abs(logz[fell])
    assert np.all(err[fell] <= (0.9 if normalized else 0.45) * TOL + roundoff)
    # harmonic rows: their bound is at most FALLBACK_FACTOR tol
    assert np.all(err[~fell] <= FALLBACK_FACTOR * TOL)


@pytest.mark.parametrize("kind", ["uniform", "concentrated"])
def test_nearest_atom_by_branch_and_bound(kind):
    """The search that sizes C finds max_j <n, y_j> exactly (a worse atom would only widen
    C, so this checks the pruning, not the bound)."""
    from spherepde.interaction.caps import _nearest

    y, w = clouds(3, 5000, seed=5)[kind]
    caps = CapSums(y, w)
    n = unit(np.random.default_rng(6).standard_normal((200, 3)))
    for v in n:
        theta, phi = np.arccos(v[2]), np.mod(np.arctan2(v[1], v[0]), 2 * np.pi)
        best, _ = _nearest(theta, phi, v[0], v[1], v[2], caps._phi, caps._start, *caps._yT,
                           caps._logw)
        # equal up to the rounding of a 3-term dot product (numpy's order vs the loop's)
        assert abs(best - (y @ v).max()) <= 4e-16
