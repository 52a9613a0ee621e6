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

import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from ferl.evidence.algebra import Evidence
from ferl.evidence.combination import BETP_TOL, combine_weights, energies, legendre_table

__all__ = ["BETP_TOL", "PENALTY_C", "EvidenceWeights", "evidence_energy", "evidence_from_weights",
           "fit_evidence_weights", "rule_sources"]

#: Inverse L2 penalty of the weights' log loss (scikit-learn's ``C``); see the module docstring.
PENALTY_C = 1.0
#: Iterations of the weights' lbfgs fit.
_MAX_ITER = 3000


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
      polynomial in t of degree C - 1: exact, or within `BETP_TOL` of it,
      `ferl.evidence.combination.pignistic_integrals`),
    * the conflict ``1 - exp(-sum_k w+_k) q Z`` (sources on distinct singletons, every class
      refuted, and the two parts against each other).

    One compiled pass evaluates these in arithmetic rather than logs, with common factors that keep
    large weights from overflowing or losing the small masses (`ferl.evidence.combination`, which
    states its accuracy).

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
    mass, between_pl, between_betp, ignorance, conflict, energies_ = combine_weights(
        w_plus, w_minus, *legendre_table(w_plus.shape[1]), energy)
    evidence = Evidence(mass=mass, ignorance=ignorance, conflict=conflict, between_pl=between_pl,
                        between_betp=between_betp)
    return (evidence, energies_) if energy else evidence


def _weight_sums(weights: EvidenceWeights, sources: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The summed positive and negative weights of evidence ``w+``, ``w-`` of every class, (n, C) each."""
    pos, neg = np.maximum(weights.coef, 0.0), np.maximum(-weights.coef, 0.0)
    return (sources @ pos.T + np.maximum(weights.intercept, 0.0),
            sources @ neg.T + np.maximum(-weights.intercept, 0.0))


def evidence_energy(weights: EvidenceWeights, sources: np.ndarray) -> np.ndarray:
    """Energy of the weights of evidence, ``-log sum_k exp(w_k(x))``, shape (n,); higher = less
    evidence for any class (beyond the paper; a novelty score, Liu et al. 2020's energy of a
    classifier's logits, here the weights of evidence ``w_k = sum_j beta_kj s_j(x) + beta_0k``).

    Parameters
    ----------
    weights : EvidenceWeights
    sources : ndarray of shape (n, n_sources), float64 in [0, 1]
    """
    return energies(*_weight_sums(weights, sources))  # as `evidence_from_weights(energy=True)`, bit for bit

