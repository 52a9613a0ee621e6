"""The leaf Gaussians' fit in blocks and with kept moments gives the floats of the plain one: the full
second moments a block of rows at a time (`ferl.novelty.cross_fit.fold_moments`), the supported
leaves' moments kept from the pooled covariance's pass (`ferl.novelty.leaf_moments`) and the path
residual a block of inputs at a time (`ferl.novelty.cross_fit.walk_block`)."""

import numpy as np
from sklearn.datasets import make_classification

import ferl.novelty.leaf_gaussians as leaf_gaussians
from ferl import FERLClassifier
from ferl.novelty.cross_fit import CROSS_FIT, MOMENT_BLOCK, WALK_BLOCK, fold_moments, moment_buffers
from ferl.novelty.free_gaussians import free_gaussians, path_residual
from ferl.novelty.leaf_moments import moment_slots
from ferl.novelty.linalg import Z_MAX


def _data(seed=0, n=700):
    X, y = make_classification(n_samples=n, n_features=5, n_informative=3, n_redundant=1, n_classes=3,
                               random_state=seed)
    sw = np.random.default_rng(seed).uniform(0.2, 3.0, size=n)
    sw[::9] = 0.0
    return X, y, sw


def test_full_fold_moments_in_blocks_are_the_row_by_row_sums_bit_for_bit():
    rng = np.random.default_rng(1)
    n, d = 7 * MOMENT_BLOCK + 3, 4  # every fold ends on a part block and a part of the unrolled four
    U = rng.normal(size=(n, d)) * rng.uniform(0.1, 10.0, size=d)
    sw = rng.uniform(0.0, 2.0, size=n)
    sw[rng.random(n) < 0.1] = 0.0
    rows = rng.permutation(n).astype(np.int64)
    phi0 = rng.random(n)
    fold = rng.integers(0, CROSS_FIT, size=n).astype(np.int64)
    count, mean, s1, s2, *_ = moment_buffers(CROSS_FIT, d)
    s0 = fold_moments(U, sw, np.arange(n), rows, phi0, fold, CROSS_FIT, count, mean, s1, s2, True)
    w = phi0 * sw[rows]  # the reference: Python floats, one row at a time in firing order
    total, mu = 0.0, [0.0] * d
    for q in np.flatnonzero(w > 0):
        total += w[q]
        mu = [mu[f] + w[q] * U[rows[q], f] for f in range(d)]
    mu = [m / total for m in mu]
    r0, r1, r2 = np.zeros(CROSS_FIT), np.zeros((CROSS_FIT, d)), np.zeros((CROSS_FIT, d, d))
    for q in np.flatnonzero(w > 0):
        k, z = fold[rows[q]], [U[rows[q], f] - mu[f] for f in range(d)]
        r0[k] += w[q]
        for f in range(d):
            r1[k, f] += w[q] * z[f]
            for g in range(f + 1):
                r2[k, f, g] += w[q] * z[f] * z[g]
    assert count[0] == total
    np.testing.assert_array_equal(mean, mu)
    np.testing.assert_array_equal(s0, r0)
    np.testing.assert_array_equal(s1, r1)
    np.testing.assert_array_equal(np.tril(s2), r2)


def test_the_kept_moments_change_no_float_of_the_fit(monkeypatch):
    """Every supported leaf kept (the default budget), three of them, none: the same fit."""
    X, y, sw = _data()
    calls = []
    fit_kernel = leaf_gaussians.fit_kernel

    def spy(*args):
        calls.append(args)
        return fit_kernel(*args)

    monkeypatch.setattr(leaf_gaussians, "fit_kernel", spy)
    fits = []
    for budget in (None, 3, 0):
        if budget is not None:  # bytes of `budget` leaves' moments
            per_leaf = 8 * (CROSS_FIT * (X.shape[1] * (X.shape[1] + 3) // 2 + 1) + X.shape[1] + 1)
            monkeypatch.setattr(leaf_gaussians, "MOMENT_BUDGET", budget * per_leaf)
        clf = FERLClassifier("deep", random_state=0).fit(X, y, sample_weight=sw)
        U, sw_, start, count, rows, phi0, feature, *_, support_d, _, _, n_folds, kept_budget = calls[-1]
        own, slot, _ = moment_slots(sw_, start, count, rows, phi0, feature, support_d, U.shape[1], n_folds,
                                    kept_budget)
        assert own.sum() > 3
        assert (slot >= 0).sum() == (own.sum() if budget is None else budget)
        g = clf.leaf_gaussians_
        fits.append((g.mean, g.cov, g.reliability, clf.rule_prototypes_.reference,
                     clf.ood_score(X, "typical")))
    for other in fits[1:]:
        for a, b in zip(fits[0], other, strict=True):
            np.testing.assert_array_equal(a, b)


def _walk(x, o, parent, mean, inv_sd, free, n_free):
    """Python reference of the residual along leaf ``o``'s path, one input (Python floats)."""
    total, m = 0.0, 0
    while True:
        if n_free[o] > 0:
            acc = 0.0
            for f in np.flatnonzero(free[o]):
                z = min(abs((x[f] - mean[o, f]) * inv_sd[o, f]), Z_MAX)
                acc += z * z
            total += acc / n_free[o]
            m += 1
        if o == 0:
            return total / m if m > 0 else 0.0
        o = parent[o]


def test_the_path_residual_in_blocks_is_the_one_of_an_input_alone_bit_for_bit():
    X, y, sw = _data(2)
    tree = FERLClassifier("deep", random_state=0).fit(X, y, sample_weight=sw).tree_
    mean, inv_sd, free, n_free = free_gaussians(tree)
    firing = tree.sparse_firing(X, False, np.ones(tree.n_nodes))
    leaves = np.flatnonzero(tree.is_leaf)
    parent = np.asarray(tree.parent, dtype=np.int64)
    out = path_residual(X, firing.start, firing.count, firing.rows, firing.phi0, leaves, parent, mean, inv_sd,
                        free, n_free, Z_MAX)
    assert (firing.count[leaves] > WALK_BLOCK).any()
    for j, o in enumerate(leaves):
        e = np.arange(firing.start[o], firing.start[o] + firing.count[o])
        reached = firing.rows[e[firing.phi0[e] > 0]]
        expected = [_walk(X[i], o, parent, mean, inv_sd, free, n_free) for i in reached]
        np.testing.assert_array_equal(out[reached, j], expected)
