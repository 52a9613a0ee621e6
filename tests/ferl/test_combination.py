"""The compiled combination of summed weights of evidence (`ferl.evidence.combination`) against the
log-domain evaluation it replaced, kept here as the reference: within the module's stated accuracy,
the energy bit for bit, on weights from nothing to past the floats' range."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp

from ferl.evidence.algebra import Evidence
from ferl.evidence.combination import (
    BETP_TOL,
    BETWEEN_TOL,
    combine_weights,
    energies,
    legendre_table,
    pignistic_integrals,
)


def _log1mexp(w):
    with np.errstate(divide="ignore"):
        return np.where(w > np.log(2.0), np.log1p(-np.exp(-w)), np.log(-np.expm1(-w)))


def _reference(w_plus, w_minus):
    """The log-domain evaluation of `ferl.evidence.weights.evidence_from_weights`' formulas."""
    n, n_classes = w_plus.shape
    log_a, log_b = -w_minus, _log1mexp(w_minus)
    zero_b = np.isinf(log_b)
    n_zero = zero_b.sum(axis=1, keepdims=True)
    log_b_sum = np.where(zero_b, 0.0, log_b).sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        log_q = np.log(-np.expm1(np.where(n_zero[:, 0] > 0, -np.inf, log_b_sum[:, 0])))
    tiny = (n_zero[:, 0] == 0) & (log_b_sum[:, 0] > -1e-290)
    log_q[tiny] = logsumexp(log_a[tiny], axis=1)
    top = w_plus.max(axis=1, keepdims=True)
    log_e = np.where(w_plus > 0, w_plus + _log1mexp(w_plus), -np.inf) - top
    log_loo = np.where(n_zero == 0, log_b_sum - np.where(zero_b, 0.0, log_b),
                       np.where((n_zero == 1) & zero_b, log_b_sum, -np.inf))
    log_z = np.logaddexp(-top[:, 0], logsumexp(log_e + log_a - log_q[:, None], axis=1))
    log_norm = log_q + log_z
    mass = np.exp(log_a + np.logaddexp(log_loo - top, log_e) - log_norm[:, None])
    pl = np.exp(log_a + np.logaddexp(-top, log_e) - log_norm[:, None])
    ignorance = np.exp(log_a.sum(axis=1) - top[:, 0] - log_norm)
    between_betp = np.zeros_like(mass)
    rows = np.flatnonzero(1.0 - mass.sum(axis=1) - ignorance > BETWEEN_TOL)
    if rows.size:
        integral = pignistic_integrals(np.exp(log_a[rows]), *legendre_table(n_classes))
        scale = np.exp(log_a[rows] - top[rows] - log_norm[rows, None])
        between_betp[rows] = np.maximum(scale * (integral - np.exp(log_loo[rows]))
                                        - ignorance[rows, None] / n_classes, 0.0)
    conflict = np.clip(-np.expm1(-w_plus.sum(axis=1) + log_norm + top[:, 0]), 0.0, 1.0)
    return Evidence(mass=mass, ignorance=ignorance, conflict=conflict,
                    between_pl=np.maximum(pl - mass - ignorance[:, None], 0.0), between_betp=between_betp)


def _compiled(w_plus, w_minus):
    mass, between_pl, between_betp, ignorance, conflict, energy = combine_weights(
        w_plus, w_minus, *legendre_table(w_plus.shape[1]), True)
    return Evidence(mass, ignorance, conflict, between_pl, between_betp), energy


def _weights(seed, n, n_classes, scale, zero):
    rng = np.random.default_rng(seed)
    w_plus, w_minus = (np.maximum(rng.normal(size=(n, n_classes)) * scale, 0.0)
                       * (rng.uniform(size=(n, n_classes)) >= zero) for _ in range(2))
    w_minus[0] = 0.0  # no evidence against any class: every b is 0
    w_minus[1, 1:] = np.maximum(w_minus[1, 1:], 1e-3)  # exactly one b is 0
    w_plus[2] = 0.0  # nothing for any class
    return w_plus, w_minus


def _assert_within_bound(w_plus, w_minus):
    """The module docstring's bound: relative ``(10 + C + W) 1e-15`` (``W`` the row's largest weights;
    for the ignorance also the sum of its ``w-``; the 10 for the log domain's own rounding, off by
    up to 3e-15 where the compiled masses are exact), absolute 1e-300, BetP and conflict absolute;
    the energy equal to scipy's."""
    got, energy = _compiled(w_plus, w_minus)
    want = _reference(w_plus, w_minus)
    scale = 1e-15 * (10 + w_plus.shape[1] + w_plus.max(axis=1) + w_minus.max(axis=1))[:, None]
    for name in ("mass", "plausibility"):
        np.testing.assert_array_less(np.abs(getattr(got, name) - getattr(want, name)),
                                     scale * np.abs(getattr(want, name)) + 1e-300, err_msg=name)
    bound = scale[:, 0] + 1e-15 * w_minus.sum(axis=1)
    np.testing.assert_array_less(np.abs(got.ignorance - want.ignorance), bound * want.ignorance + 1e-300)
    np.testing.assert_array_less(np.abs(got.pignistic - want.pignistic), np.broadcast_to(scale + 2 * BETP_TOL,
                                                                                            got.mass.shape))
    np.testing.assert_array_less(np.abs(got.conflict - want.conflict), scale[:, 0])
    np.testing.assert_array_equal(energy, -logsumexp(w_plus - w_minus, axis=1))
    np.testing.assert_array_equal(energies(w_plus, w_minus), energy)
    np.testing.assert_allclose(got.pignistic.sum(axis=1), 1.0, atol=1e-12)
    return got


@pytest.mark.parametrize("n_classes", [2, 3, 10, 200])
@pytest.mark.parametrize("scale", [1e-3, 0.3, 3.0, 40.0, 300.0])
def test_compiled_combination_is_the_log_domain_one_within_its_bound(n_classes, scale):
    _assert_within_bound(*_weights(int(scale * 1000) + n_classes, 300, n_classes, scale, 0.3))


@pytest.mark.parametrize("w", [37.0, 300.0, 700.0, 800.0, 2000.0])
def test_every_class_refuted_past_the_floats(w):
    """Every ``a_k`` below 1e-16 (``prod b`` rounds to 1: the log domain's special case) and, from 745
    on, below the smallest float: the masses still come out exact, from the scaled ``a_k``."""
    rng = np.random.default_rng(0)
    w_minus = w * rng.uniform(1.0, 1.5, size=(4, 5))
    w_plus = np.vstack([np.zeros(5), rng.uniform(0, 3, 5), rng.uniform(0, w, 5), np.full(5, w)])
    got = _assert_within_bound(w_plus, w_minus)
    assert np.isfinite(got.mass).all() and (got.mass.sum(axis=1) + got.ignorance <= 1 + 1e-12).all()


def test_a_product_of_the_b_below_the_floor_keeps_its_leave_one_out_products():
    """One class with ``b`` = 1e-300 and 198 with ``b = 1/2``: ``prod b`` (about 1e-360) is below the
    smallest float, while the first class's leave-one-out product, ``2^-198`` (about 2e-60), and so its
    mass are far inside the floats."""
    w_minus = np.full((1, 200), np.log(2.0))
    w_minus[0, :2] = 0.5, 1e-300
    w_plus = np.zeros((1, 200))
    w_plus[0, 0] = 1.0
    got, _ = _compiled(w_plus, w_minus)
    want = _reference(w_plus, w_minus)
    np.testing.assert_allclose(got.mass, want.mass, rtol=1e-12, atol=1e-300)
    assert 1e-62 < got.mass[0, 1] < 1e-58
