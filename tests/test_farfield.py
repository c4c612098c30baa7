"""The dual-tree far-field sums (the harmonic kernel's fallback at low temperature) against
the fused direct kernel: two tight clusters, a thin great circle and a spread cloud, on S^2
and S^1, beta = 256, 1000, 4000; its truncation bound against brute force; and through
HarmonicField on a late-phase-like cloud."""
import math

import numpy as np
import pytest

from spherepde.interaction.farfield import FarField, FarFieldOptions, _prepare, compiled_sizes
from spherepde.interaction.fused import attention_numba, log_partition_numba
from spherepde.interaction.harmonic import DEFAULT_TOL, HarmonicField
from spherepde.interaction.options import HarmonicTuning
from spherepde.sphere import fibonacci_lattice

TOL = DEFAULT_TOL


def unit(v):
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def cloud(kind, d, n, rng):
    """Two clusters of angular width 0.01 at +-e_1 (masses 0.6, 0.4), a great circle of
    width 0.003, or a uniform cloud; random weights spanning a decade."""
    e1 = np.eye(d)[0]
    if kind == "two":
        sign = np.where(rng.random(n) < 0.6, 1.0, -1.0)
        y = unit(sign[:, None] * e1 + 0.01 * rng.standard_normal((n, d)))
    elif kind == "circle" and d == 3:
        t = rng.uniform(0, 2 * np.pi, n)
        y = unit(np.stack([np.cos(t), np.sin(t), 0.003 * rng.standard_normal(n)], 1))
    else:
        y = unit(rng.standard_normal((n, d)))
    w = rng.random(n) + 0.1
    return y, w / w.sum()


def rotation(d, rng):
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    return q * np.sign(np.diag(r))


@pytest.mark.parametrize("d", [3, 2])
@pytest.mark.parametrize("kind", ["two", "circle", "spread"])
@pytest.mark.parametrize("kappa", [256.0, 1000.0, 4000.0])
def test_far_field_matches_the_direct_kernel(d, kind, kappa):
    """Queries q = kappa R^T y_i at every atom, R a rotation: late in a run each looks away
    from its own cluster, the case the harmonic expansion cannot resolve."""
    rng = np.random.default_rng(int(kappa) + d)
    y, w = cloud(kind, d, 3000, rng)
    q = kappa * y @ rotation(d, rng)
    s, a, shift, stats = FarField(y, w).sums(q, TOL)
    ref = attention_numba(q, y, y, w, 1.0, True)
    # the a priori bound: 0.45 tol of s each for a and s, so the mean is off by <= 0.9 tol
    # (module docstring); round-off in the sums is ~sqrt(n) eps = 0.012 tol (measured: at most
    # 0.013 tol over these cases)
    assert np.abs(a / s[:, None] - ref).max() <= 0.9 * TOL
    # log s is off by <= 0.45 tol from the truncation, plus the rounding of numbers of size
    # |log Z| (up to kappa): the shift, the sum and the reference's own, a few eps |log Z| each
    # (measured: 0.91 tol = 2 ulp of 4000 at kappa = 4000)
    logz = log_partition_numba(q, y, w, 1.0)
    eps = np.finfo(np.float64).eps
    assert np.all(np.abs(shift + np.log(s) - logz) <= 0.45 * TOL + 4 * eps * np.abs(logz))
    if kind == "two":
        # the clusters interact through expansions: fewer than half of the exact terms that
        # the cap sums (the previous fallback) need for the same queries are left
        from spherepde.interaction.caps import CapSums

        kq = np.linalg.norm(q, axis=1)
        count = CapSums(y, w).sums(q / kq[:, None], kq, TOL)[3]
        assert stats["pairs_expanded"] > 0
        assert stats["direct_terms"] < 0.5 * count.sum()


@pytest.mark.parametrize("spread", [False, True])
def test_direct_sums_over_merged_runs_of_atoms_match_the_direct_kernel(spread):
    """Every kept pair summed directly (a cost model that never expands): the pairs of one
    query node merge into runs of consecutive atoms, each summed in one pass with the shift of
    its nodes' boxes; with weights spanning 1e-300 (log w spread > 600) the pass for the
    largest logit runs instead. Both match the fused kernel."""
    rng = np.random.default_rng(7)
    y, w = cloud("two", 3, 3000, rng)
    if spread:
        w = w * np.exp(-690.0 * rng.random(w.size))
        w /= w.sum()
    q = 256.0 * y @ rotation(3, rng)
    s, a, shift, stats = FarField(y, w, FarFieldOptions(cost_term=1e9)).sums(q, TOL)
    assert stats["pairs_expanded"] == 0
    assert 0 < stats["direct_runs"] < stats["pairs_direct"] / 2  # the leaves did merge
    ref = attention_numba(q, y, y, w, 1.0, True)
    assert np.abs(a / s[:, None] - ref).max() <= 100 * TOL
    assert np.abs(shift + np.log(s) - log_partition_numba(q, y, w, 1.0)).max() <= 100 * TOL


@pytest.mark.parametrize("kind", ["tight", "spread"])
def test_query_lower_bounds_are_bounds_and_shared_within_tight_leaves(kind):
    """The lower bound of log s at every query, which the dropping of pairs rests on: at
    or below the exact log-sum-exp, whether a query tree leaf shares one search (queries
    within shared_bound_radius of its first one: the clustered queries here) or searches per
    query (the spread ones)."""
    from spherepde.interaction import farfield as ff

    rng = np.random.default_rng(5)
    y, w = cloud("two", 3, 3000, rng)
    if kind == "tight":  # two clusters of width 1e-4 (late in a run): 0.1 apart at |q| = 1000
        sign = np.where(rng.random(2000) < 0.5, 1.0, -1.0)
        q = unit(sign[:, None] * np.eye(3)[0] + 1e-4 * rng.standard_normal((2000, 3)))
    else:
        q = cloud("spread", 3, 2000, rng)[0]
    q = 1000.0 * q @ rotation(3, rng).T
    opts = FarFieldOptions()
    qidx, qtree = ff._split_tree(ff._build(q, opts.leaf_size))
    qlo, qhi, qchild = qtree.lo, qtree.hi, qtree.child
    qs = np.ascontiguousarray(q[qidx])
    far = FarField(y, w).build()
    lam = np.empty(len(qs))
    ff._lower_bounds(qs, qtree, far._atoms, far._tree, opts.lower_bound_visits,
                     opts.shared_bound_radius, lam)
    logits = qs @ far._atoms.y.T + far._atoms.logw
    top = logits.max(axis=1)
    exact = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
    assert np.all(lam <= exact + 1e-9 * np.abs(exact))
    leaves = np.flatnonzero(qchild < 0)
    radius = np.array([np.linalg.norm(qs[qlo[k]:qhi[k]] - qs[qlo[k]], axis=1).max()
                       for k in leaves])
    shared = radius <= opts.shared_bound_radius
    assert shared.all() if kind == "tight" else not shared.any()
    # a shared bound is within the leaf's radius of the exact value at its first query, so
    # it loses at most a factor e^radius on s where the search itself is tight
    gap = np.array([np.max(exact[qlo[k]:qhi[k]] - lam[qlo[k]:qhi[k]]) for k in leaves])
    first = np.array([exact[qlo[k]] - lam[qlo[k]] for k in leaves])
    assert np.all(gap[shared] <= first[shared] + 2 * radius[shared] + 1e-9)


@pytest.mark.parametrize("u", [(0.9, 0.7, 0.004), (0.3, 0.0, 0.0), (1.0, 1.0, 0.05),
                               (1e-3, 2e-3, 5e-4), (1.0, 1.0, 1.0)])
def test_index_set_meets_its_bound(u):
    """The truncation S of e^{sum_k a_k b_k}, |a_k b_k| <= u_k: at random points with
    |a_k b_k| = u_k (where the majorant is sharp for positive products) the dropped part,
    relative to the smallest exact value e^{-sum u}, is at most eps; the a priori bound."""
    eps = FarFieldOptions().expansion_share * TOL
    MAX_TERMS, MAX_DEGREE = compiled_sizes().max_terms, compiled_sizes().max_degree
    alpha = np.empty((MAX_TERMS, 3), np.int64)
    lookup = np.full((MAX_DEGREE + 2,) * 3, -1, np.int32)
    nbr = np.empty((MAX_TERMS, 3), np.int64)
    ns, nt, maxd = _prepare(np.array(u), eps, alpha, lookup, nbr, 1)
    assert (lookup == -1).all()  # reset for the next pair
    if ns < 0:
        # declined (S+ would exceed MAX_TERMS rows, the pair is split instead): allowed where
        # two or three u_k are near 1 (|S| grows like the area or volume of a simplex of
        # side ~17 there), never for the pairs a split produces (u <= 0.5)
        assert max(u) > 0.5
        return
    assert 0 < ns <= nt <= MAX_TERMS
    A = alpha[:ns].astype(float)
    fact = np.array([[math.factorial(int(v)) for v in row] for row in alpha[:ns]])
    for sign in ([1, 1, 1], [1, -1, 1], [-1, -1, -1]):
        x = np.array(sign) * np.array(u)  # the products a_k b_k
        series = np.sum(np.prod(x ** A / fact, axis=1))
        exact = math.exp(x.sum())
        assert abs(exact - series) <= eps * math.exp(-sum(u)) * (1 + 1e-3) + 1e-16 * exact


def test_far_field_through_the_harmonic_field():
    """A late-phase cloud (two clusters) under the default scenario's B = rotation: nearly
    every query fails the harmonic bound; SA and USA against the direct kernel to 100 tol of
    their scale."""
    from spherepde.sphere import rotation_about_axis

    rng = np.random.default_rng(11)
    y, w = cloud("two", 3, 4000, rng)
    O = rotation_about_axis([1.0, 1.0, 1.0], 0.9)
    for normalized, c in ((True, 1.0), (False, 0.6)):  # USA: e^{600} stays in float64
        B, V = c * O, np.diag([1.0, 0.4, 0.0]) @ O
        field = HarmonicField(B, V, 1000.0, normalized)
        out, stats = field.evaluate(y, y, w)
        assert stats["fallback"] > HarmonicTuning().direct_fallback_max
        ref = attention_numba(y, y @ B.T, y @ V.T, w, 1000.0, normalized)
        scale = np.linalg.norm(V, 2) * (1.0 if normalized else
                                        np.exp(log_partition_numba(y, y @ B.T, w, 1000.0)))
        assert (np.abs(out - ref).max(axis=1) / scale).max() <= 100 * TOL


def test_far_field_bad_input_and_zero_weights():
    y = unit(np.random.default_rng(0).standard_normal((50, 3)))
    with pytest.raises(ValueError, match="weights"):
        FarField(y, -np.ones(50))
    with pytest.raises(ValueError, match="points must be"):
        FarField(y[:, :1], np.ones(50))
    w = np.ones(50)
    w[::2] = 0.0  # atoms of weight 0 drop out exactly
    q = 300.0 * y[:7]
    s, a, shift, _ = FarField(y, w).sums(q, TOL)
    ref = attention_numba(q, y[1::2], y[1::2], w[1::2], 1.0, True)
    assert np.abs(a / s[:, None] - ref).max() <= 100 * TOL
    with pytest.raises(ValueError, match="q must be"):
        FarField(y, w).sums(q[:, :2], TOL)


@pytest.mark.parametrize("tol", [1e-7, TOL])
def test_far_field_drops_light_nodes_within_its_bound(tol):
    """Atoms on a lattice with the weights of a sharp density (two vMF caps of concentration
    20: weights spanning e^40, as the cells of a finite-volume state), queries looking away:
    the light nodes near a query are dropped by their weight, and the sums keep their a priori
    accuracy (0.9 tol of the mean) against brute force. The bound is far from tight here: the
    errors are the same with the count term's K left out (1e-8 tol at tol = 1e-7, round-off at
    1e-3 tol at 1e-12), so this checks the rule's direction and the sums, not the budget's
    constant, which the module docstring's argument fixes."""
    rng = np.random.default_rng(7)
    y = fibonacci_lattice(6000)
    e = unit(np.array([[1.0, 1.0, 0.3]]))[0]
    w = np.exp(20 * (y @ e)) + np.exp(-20 * (y @ e))
    w /= w.sum()
    q = 256.0 * y @ rotation(3, rng)
    s, a, shift, stats = FarField(y, w).sums(q, tol)
    ref = attention_numba(q, y, y, w, 1.0, True)
    err = np.abs(a / s[:, None] - ref).max()
    assert err <= max(tol, 100 * TOL), err
    assert stats["pairs_dropped"] > 0


def test_lookahead_splits_pairs_whose_children_are_cheaper():
    """A thin great circle (20000 atoms) with queries looking away, at tol 1e-7: one level of
    lookahead splits expansions whose two child pairs cost less, so the expansions shrink
    (their set sizes fall faster than the pairs multiply) and the modelled work with them;
    the sums stay within their bound either way."""
    rng = np.random.default_rng(1003)
    y, w = cloud("circle", 3, 20000, rng)
    q = 1000.0 * y @ rotation(3, rng)
    ref = attention_numba(q, y, y, w, 1.0, True)
    work = {}
    for lookahead in (False, True):
        opts = FarFieldOptions(lookahead=lookahead)
        s, a, _, st = FarField(y, w, opts).sums(q, 1e-7)
        assert np.abs(a / s[:, None] - ref).max() <= 1e-7
        work[lookahead] = (st["expansion_terms"],
                           st["direct_terms"] + opts.cost_term * st["expansion_terms"])
    assert work[True][0] < 0.95 * work[False][0]
    assert work[True][1] < 0.95 * work[False][1]


def test_compiled_sizes_are_read_from_the_compiled_code(monkeypatch):
    """Python reads the sizes compiled into the numba code back from it: rebinding the module
    global afterwards cannot make the two disagree."""
    from spherepde.interaction import farfield

    sizes = compiled_sizes()
    assert sizes == (farfield.MAX_DEGREE, farfield.MAX_TERMS, farfield.BLOCK, farfield.CHUNK,
                     farfield.GRID)
    monkeypatch.setattr(farfield, "CHUNK", 7)
    assert compiled_sizes().chunk == sizes.chunk
