"""Learned weights of evidence: the rules' masses fitted by a proper loss (beyond the paper).

The paper's read-out (section 3.2) combines, by Dempster's rule, one mass per fired node,
``m_o({c}) = phi_o p_o(c)``: every partly fired leaf adds ignorance, and a path of about ten
conditions on noisy concepts is right far less often than each condition. On concept vectors that
read-out is both under-confident and less accurate than a logistic regression, which pools the
evidence of every concept.

Denœux (2019, "Logistic regression, neural networks and Dempster-Shafer theory: a new
perspective", Knowledge-Based Systems 176) shows that a multinomial logistic regression *is* a
Dempster combination: feature ``j`` with coefficient ``beta_jk`` is a source that, with weight of
evidence ``w_jk(x) = beta_jk s_j(x)``, supports ``{k}`` when ``w_jk > 0`` and its complement when
``w_jk < 0``; the combination's normalised plausibility of the singletons is the softmax. This
module applies that reading to FERL's rules. The sources are

* each fired leaf of the tree (a rule), ``s_l(x) = phi_l(x)``, its firing strength, and
* one single-condition rule per feature, "x_f is high", ``s_f(x)`` = ``x_f`` rescaled to [0, 1] by
  the training range (the calibrated concept probability itself on concept vectors),

and the weights ``beta`` (classes x sources, plus one prior source per class) are fitted by
L2-penalised multinomial log loss (scikit-learn's ``LogisticRegression``, lbfgs) on the training
rows. A source that does not fire (``s = 0``) is vacuous. The penalty ``C = 1`` was chosen by
3-fold cross-validation on the training split of a CUB-50 run (candidates 0.3, 1, 3, 10; accuracy
and ECE in docs/results/concept-heads.md, ``scripts/bench_real_heads.py``).

The combined mass function (derived in `evidence_from_weights`) has focal sets on the singletons,
on Theta and on every set in between; its plausibility, belief and interval-dominance set are
exact, its pignistic probability to within `BETP_TOL` (a quadrature with fewer nodes where the
integrand is nearly of low degree).
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import numpy as np
from numba import njit
from scipy.special import logsumexp
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from ferl.evidence.algebra import Evidence

__all__ = ["BETP_TOL", "PENALTY_C", "EvidenceWeights", "evidence_energy", "evidence_from_weights",
           "fit_evidence_weights", "rule_sources"]

#: Inverse L2 penalty of the weights' log loss (scikit-learn's ``C``); see the module docstring.
PENALTY_C = 1.0
#: Iterations of the weights' lbfgs fit.
_MAX_ITER = 3000
#: Largest change of a pignistic probability that fewer quadrature nodes may make (`_quadrature_nodes`).
BETP_TOL = 1e-15
#: Rows whose mass off the singletons and Theta is below this get BetP = m({c}) + m(Theta) / C
#: without the integral: the mass left out bounds the error of every class's BetP.
_BETWEEN_TOL = 1e-9


@dataclass(frozen=True)
class EvidenceWeights:
    """Fitted weights of evidence.

    Attributes
    ----------
    coef : ndarray of shape (n_classes, n_sources), float64
        ``beta_jk``, centred over the classes (the least committed of the equivalent solutions).
    intercept : ndarray of shape (n_classes,), float64
        The prior source's weights, centred.
    """

    coef: np.ndarray
    intercept: np.ndarray

    SAVED_FIELDS = ("coef", "intercept")


def rule_sources(X: np.ndarray, feature_range: np.ndarray, leaf_phi: np.ndarray) -> np.ndarray:
    """Source strengths ``s(x)`` of the single-condition rules and the leaves, (n, d + n_leaves).

    Parameters
    ----------
    X : ndarray of shape (n, d), float64, finite
    feature_range : ndarray of shape (d, 2)
        Training min and max of each feature; a constant feature gives 0.
    leaf_phi : ndarray of shape (n, n_leaves), float64 in [0, 1]
        The leaves' firing strengths.
    """
    lo, hi = feature_range[:, 0], feature_range[:, 1]
    span = hi - lo
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        ramp = np.where(span > 0, (X - lo) / np.where(span > 0, span, 1.0), 0.0)
    return np.hstack([np.clip(ramp, 0.0, 1.0), leaf_phi])


def fit_evidence_weights(sources: np.ndarray, y: np.ndarray, sample_weight: np.ndarray, n_classes: int,
                         C: float = PENALTY_C) -> EvidenceWeights:
    """Fit the weights by L2-penalised multinomial log loss.

    Parameters
    ----------
    sources : ndarray of shape (n, n_sources), float64 in [0, 1]
        `rule_sources` of the training rows.
    y : ndarray of shape (n,), int in [0, n_classes)
    sample_weight : ndarray of shape (n,), float64 >= 0
    n_classes : int >= 2
    C : float > 0

    Returns
    -------
    EvidenceWeights
        Classes without a training row of positive weight get the weights that refute them.
    """
    keep = sample_weight > 0
    seen = np.unique(y[keep])
    model = LogisticRegression(C=C, max_iter=_MAX_ITER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # the penalised optimum is reached closely
        model.fit(sources[keep], y[keep], sample_weight=sample_weight[keep])
    coef = np.zeros((n_classes, sources.shape[1]))
    intercept = np.full(n_classes, -30.0)  # an unseen class: refuted by the prior source
    if seen.size == 2:  # binary: scikit-learn fits one row, the second class's logit
        coef[seen[1]], coef[seen[0]] = model.coef_[0] / 2, -model.coef_[0] / 2
        intercept[seen[1]], intercept[seen[0]] = model.intercept_[0] / 2, -model.intercept_[0] / 2
    else:
        coef[seen], intercept[seen] = model.coef_, model.intercept_
    coef -= coef.mean(axis=0)
    intercept -= intercept.mean()
    return EvidenceWeights(coef=coef, intercept=intercept)


@functools.cache
def _legendre_table(n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [0, 1], row ``k`` the ``k``-node rule (zero-padded), for
    ``k <= n_classes // 2 + 1``: the most a pignistic integrand of ``n_classes`` factors needs."""
    size = n_classes // 2 + 1
    nodes, weights = np.zeros((size + 1, size)), np.zeros((size + 1, size))
    for k in range(1, size + 1):
        nodes[k, :k], weights[k, :k] = _legendre_rule(k)
    return nodes, weights


@functools.cache
def _legendre_rule(k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k``-node Gauss-Legendre rule on [0, 1] (every table reuses it)."""
    t, w = np.polynomial.legendre.leggauss(k)
    return (t + 1.0) / 2.0, w / 2.0


@njit(cache=True)
def _quadrature_nodes(m, total, exact):
    """The fewest Gauss-Legendre nodes, at most ``exact``, whose error on the pignistic integrals
    of ``m`` factors with ``a`` summing to ``total`` is at most `BETP_TOL` / ``m``.

    In ``s = 1 - t`` the integrand ``prod_l (1 - a_l s)`` has the coefficients ``(-1)^j e_j(a)``
    (elementary symmetric polynomials, ``e_j <= total^j / j!``); ``k`` nodes integrate ``s^j`` exactly
    up to ``j = 2k - 1`` and, above, with an error below 1 (both the integral and the rule lie in
    (0, 1)). So the error is at most the tail ``sum_{j >= 2k} total^j / j!``, bounded by its first
    term over ``1 - total / (2k + 1)``. BetP multiplies an integral by at most ``m`` (the integral is
    at least ``1 / m``, its product with the factor at most 1): BetP moves by at most `BETP_TOL`."""
    term = 1.0  # total^j / j!
    j = 0
    for k in range(1, exact):
        while j < 2 * k:
            j += 1
            term *= total / j
        if j + 1 > total and m * term / (1.0 - total / (j + 1)) <= BETP_TOL:
            return k
    return exact


@njit(cache=True)
def _pignistic_integrals(a, nodes, weights):
    """``integral_0^1 prod_{l != k} (1 - a_l + a_l t) dt`` for every row and class (n, C).

    Factors with ``a_l <= 1e-15`` are 1 to within it and are left out (the integrand's degree
    is the number ``m`` of classes not refuted outright); a class left out gets the integral over
    the others, its own factor being 1. Gauss-Legendre quadrature with ``m // 2 + 1`` nodes is exact;
    where the ``a_l`` sum to little the integrand is nearly of low degree and fewer nodes
    (`_quadrature_nodes`) are within `BETP_TOL` / ``m`` of it. At each node the products over
    ``l != k`` are a prefix product times a suffix product (three multiplications per factor, no
    logs, no division). The factors ``b_l + a_l t`` lie in ``[t, 1]``: a product that underflows is
    below 1e-300 while every integral is at least ``integral_0^1 t^(C-1) dt = 1 / C``, so the
    underflow is far below the rounding of the result."""
    n, n_classes = a.shape
    out = np.empty((n, n_classes))
    kept = np.empty(n_classes, dtype=np.int64)
    a_kept = np.empty(n_classes)
    prefix = np.empty(n_classes + 1)
    acc = np.empty(n_classes)
    for i in range(n):
        m = 0
        total = 0.0
        for k in range(n_classes):
            if a[i, k] > 1e-15:
                kept[m] = k
                a_kept[m] = a[i, k]
                total += a[i, k]
                m += 1
        acc[:m] = 0.0
        every = 0.0  # the quadrature of the product over every kept factor
        n_nodes = _quadrature_nodes(m, total, m // 2 + 1)
        for q in range(n_nodes):
            s = 1.0 - nodes[n_nodes, q]
            prefix[0] = weights[n_nodes, q]
            for j in range(m):
                prefix[j + 1] = prefix[j] * (1.0 - a_kept[j] * s)
            every += prefix[m]
            suffix = 1.0
            for j in range(m - 1, -1, -1):
                acc[j] += prefix[j] * suffix
                suffix *= 1.0 - a_kept[j] * s
        out[i] = every
        for j in range(m):
            out[i, kept[j]] = acc[j]
    return out


def _log1mexp(w: np.ndarray) -> np.ndarray:
    """``log(1 - exp(-w))`` for ``w >= 0``, -inf at ``w = 0``, to full precision for every ``w``:
    ``log(-expm1(-w))`` below ``log 2``, ``log1p(-exp(-w))`` above (Mächler 2012, "Accurately
    computing log(1 - exp(-|a|))"); the first alone rounds to 0 from ``w`` of about 37 on."""
    with np.errstate(divide="ignore"):
        return np.where(w > np.log(2.0), np.log1p(-np.exp(-w)), np.log(-np.expm1(-w)))


def evidence_from_weights(weights: EvidenceWeights, sources: np.ndarray, energy: bool = False):
    """The Dempster combination of the weighted sources (Denœux 2019, section 4), exactly.

    Per class ``k`` the positive weights add up to ``w+_k`` (evidence for {k}) and the negative
    ones to ``w-_k`` (evidence against it). With ``a_k = exp(-w-_k)``, ``b_k = 1 - a_k``,
    ``E_k = exp(w+_k) - 1``, ``q = 1 - prod_l b_l`` and ``Z = 1 + sum_k E_k a_k / q``:

    * ``m({k}) = a_k (prod_{l != k} b_l + E_k) / (q Z)``,
    * ``m(A) = prod_{l not in A} b_l prod_{l in A} a_l / (q Z)`` for ``|A| >= 2`` (``A = Theta``
      gives the ignorance),
    * ``Pl({k}) = a_k (1 + E_k) / (q Z)``, proportional to ``exp(w+_k - w-_k)``: the softmax,
    * ``BetP(k) = m({k}) + m(Theta) / C + a_k / (q Z) * integral_0^1 [prod_{l != k} (b_l + a_l t) -
      prod_{l != k} b_l] dt - m(Theta) / C``, the integral by Gauss-Legendre quadrature (a
      polynomial in t of degree C - 1: exact, or within `BETP_TOL` of it, `_pignistic_integrals`),
    * the conflict ``1 - exp(-sum_k w+_k) q Z`` (sources on distinct singletons, every class
      refuted, and the two parts against each other).

    Everything is computed in logs with a common factor ``exp(-max_k w+_k)``, so large weights
    neither overflow nor lose the small masses.

    Parameters
    ----------
    weights : EvidenceWeights
    sources : ndarray of shape (n, n_sources), float64 in [0, 1]
    energy : bool, default=False
        Also return `evidence_energy` of the same sources, from the same weight sums
        (``w_k = w+_k - w-_k``) rather than another product with the weights.

    Returns
    -------
    Evidence
        With ``between_pl`` and ``between_betp`` (the mass of the focal sets between the
        singletons and Theta).
    ndarray of shape (n,), float64
        The energy; only with ``energy=True``.
    """
    if weights.coef.shape[0] < 2:
        raise ValueError(f"the weights of evidence need at least 2 classes, got {weights.coef.shape[0]}")
    w_plus, w_minus = _weight_sums(weights, sources)
    evidence = _combine(w_plus, w_minus)
    return (evidence, -logsumexp(w_plus - w_minus, axis=1)) if energy else evidence


def _weight_sums(weights: EvidenceWeights, sources: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The summed positive and negative weights of evidence ``w+``, ``w-`` of every class, (n, C) each."""
    pos, neg = np.maximum(weights.coef, 0.0), np.maximum(-weights.coef, 0.0)
    return (sources @ pos.T + np.maximum(weights.intercept, 0.0),
            sources @ neg.T + np.maximum(-weights.intercept, 0.0))


def _combine(w_plus: np.ndarray, w_minus: np.ndarray) -> Evidence:
    """`evidence_from_weights` from the summed positive and negative weights, (n, C) each."""
    n, n_classes = w_plus.shape
    log_a, log_b = -w_minus, _log1mexp(w_minus)
    zero_b = np.isinf(log_b)
    n_zero = zero_b.sum(axis=1, keepdims=True)
    log_b_sum = np.where(zero_b, 0.0, log_b).sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        log_q = np.log(-np.expm1(np.where(n_zero[:, 0] > 0, -np.inf, log_b_sum[:, 0])))  # log(1 - prod b)
    # every class refuted past exp(-w) ~ 1e-290: prod b rounds to 1, and q = sum_k a_k to within it
    tiny = (n_zero[:, 0] == 0) & (log_b_sum[:, 0] > -1e-290)
    log_q[tiny] = logsumexp(log_a[tiny], axis=1)
    top = w_plus.max(axis=1, keepdims=True)
    log_e = np.where(w_plus > 0, w_plus + _log1mexp(w_plus), -np.inf) - top
    # log of prod_{l != k} b_l: 0 factors other than b_k's make it 0
    log_loo = np.where(n_zero == 0, log_b_sum - np.where(zero_b, 0.0, log_b),
                       np.where((n_zero == 1) & zero_b, log_b_sum, -np.inf))
    log_z = np.logaddexp(-top[:, 0], logsumexp(log_e + log_a - log_q[:, None], axis=1))
    log_norm = log_q + log_z  # log(q Z) in units of exp(-top)
    mass = np.exp(log_a + np.logaddexp(log_loo - top, log_e) - log_norm[:, None])
    pl = np.exp(log_a + np.logaddexp(-top, log_e) - log_norm[:, None])
    ignorance = np.exp(log_a.sum(axis=1) - top[:, 0] - log_norm)
    between_pl = np.maximum(pl - mass - ignorance[:, None], 0.0)
    between_betp = np.zeros_like(mass)
    rest = 1.0 - mass.sum(axis=1) - ignorance
    rows = np.flatnonzero(rest > _BETWEEN_TOL)
    if rows.size:
        nodes, weights_q = _legendre_table(n_classes)
        integral = _pignistic_integrals(np.exp(log_a[rows]), nodes, weights_q)
        scale = np.exp(log_a[rows] - top[rows] - log_norm[rows, None])
        # the sum over A with k in A and |A| >= 2 includes Theta, whose share m(Theta) / C BetP has already
        between_betp[rows] = np.maximum(scale * (integral - np.exp(log_loo[rows]))
                                        - ignorance[rows, None] / n_classes, 0.0)
    # 1 - conflict = exp(-sum_k w+_k) q Z: the positive sources' (on distinct singletons), the negative
    # ones' (every class refuted) and the two parts' conflicts
    conflict = np.clip(-np.expm1(-w_plus.sum(axis=1) + log_norm + top[:, 0]), 0.0, 1.0)
    return Evidence(mass=mass, ignorance=ignorance, conflict=conflict, between_pl=between_pl,
                    between_betp=between_betp)


def evidence_energy(weights: EvidenceWeights, sources: np.ndarray) -> np.ndarray:
    """Energy of the weights of evidence, ``-log sum_k exp(w_k(x))``, shape (n,); higher = less
    evidence for any class (beyond the paper; a novelty score, Liu et al. 2020's energy of a
    classifier's logits, here the weights of evidence ``w_k = sum_j beta_kj s_j(x) + beta_0k``).

    Parameters
    ----------
    weights : EvidenceWeights
    sources : ndarray of shape (n, n_sources), float64 in [0, 1]
    """
    w_plus, w_minus = _weight_sums(weights, sources)  # as `evidence_from_weights(energy=True)`, bit for bit
    return -logsumexp(w_plus - w_minus, axis=1)

