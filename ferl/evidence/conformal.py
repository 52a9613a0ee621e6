"""Split-conformal prediction sets (torch-free).

Four non-conformity scores share one calibration rule (:func:`conformal_quantile`):

* ``"aps"``: adaptive prediction sets of Romano, Sesia & Candès (2020), deterministic
  (non-randomised) and tie-conservative;
* ``"raps"``: regularised APS of Angelopoulos, Bates, Malik & Jordan (2021), APS plus
  ``lam * max(0, rank - k_reg)``, deterministic and tie-conservative like ``"aps"``;
* ``"lac"``: global split conformal on ``1 - p_y`` (Vovk et al. 2005; Sadinle et al. 2019);
* ``"plausibility"``: the paper's "DS-conformal" sets (appendix F), split conformal on
  ``1 - Pl(y)`` where ``Pl`` is FERL's Dempster-Shafer plausibility of the true class.

Under exchangeability of calibration and test data every score gives marginal coverage
``P(y in S(x)) >= 1 - alpha``.
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np

__all__ = ["SCORES", "SplitConformal", "aps_scores", "conformal_quantile", "coverage_set", "raps_scores"]

SCORES = ("aps", "raps", "lac", "plausibility")


def conformal_quantile(scores: np.ndarray, alpha: float) -> float:
    """Finite-sample-corrected split-conformal threshold.

    Returns the ``k``-th smallest calibration score with ``k = ceil((n + 1) * (1 - alpha))``,
    or ``+inf`` when ``k > n`` (too few calibration points: every class enters the set).

    Parameters
    ----------
    scores : ndarray of shape (n_cal,), float
        Non-conformity scores of the calibration samples at their true class.
    alpha : float in (0, 1)
        Target miscoverage.

    Returns
    -------
    float
        The threshold ``q``; sets are ``{c : score(x, c) <= q}``.

    Raises
    ------
    ValueError
        Empty or non-finite scores, or ``alpha`` outside ``(0, 1)``.
    """
    s = np.asarray(scores, dtype=float)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"scores must be a non-empty 1-D array, got shape {s.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores contain NaN or inf")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    k = math.ceil((s.size + 1) * (1.0 - alpha) - 1e-9)
    if k > s.size:
        return math.inf
    return float(np.sort(s)[k - 1])


def coverage_set(plausibility: np.ndarray, scores: np.ndarray, coverage: float) -> np.ndarray:
    """Coverage-targeted credal set: the classes plausible enough, at a split-conformal threshold.

    The paper's DS-conformal set (appendix F), ``{c : 1 - Pl(c) <= q}``, with ``q`` the
    `conformal_quantile` of held-out scores ``1 - Pl(y)`` at ``alpha = 1 - coverage``, plus the most
    plausible class, so that a set is never empty (which only adds coverage). Under
    exchangeability of the held-out and the new inputs it covers the true class with probability
    at least ``coverage``. Chosen over the interval-dominance gap ``max Bel - Pl(c)`` as the score
    (beyond the paper): at the same coverage the plausibility sets are much smaller on real
    concept vectors (chosen by measurement: docs/results/real-heads.md).

    Parameters
    ----------
    plausibility : ndarray of shape (n, C), float in [0, 1]
    scores : ndarray of shape (n_cal,), float
        ``1 - Pl(y)`` of held-out inputs at their true class.
    coverage : float in (0, 1)

    Returns
    -------
    ndarray of shape (n, C), bool

    Raises
    ------
    ValueError
        A coverage outside (0, 1), empty or non-finite scores.
    """
    if isinstance(coverage, bool) or not isinstance(coverage, Real) or not 0.0 < coverage < 1.0:
        raise ValueError(f"coverage must be in (0, 1), got {coverage!r}")
    q = conformal_quantile(scores, 1.0 - coverage)
    sets = 1.0 - plausibility <= q
    sets[np.arange(plausibility.shape[0]), np.argmax(plausibility, axis=1)] = True
    return sets


def aps_scores(proba: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """APS scores for every class, tie-conservative.

    For class ``c`` the score is the probability mass of all classes at least as probable as
    ``c`` (``sum_{j: p_j >= p_c} p_j``, ties included: the conservative choice), and ``above`` is
    the mass of the classes strictly more probable than ``c``. Both are invariant to the order
    of the columns, so the sets are deterministic.

    Parameters
    ----------
    proba : ndarray of shape (n_samples, n_classes), float in [0, 1]

    Returns
    -------
    score : ndarray of shape (n_samples, n_classes)
        Cumulative mass up to and including ``c`` (and its ties).
    above : ndarray of shape (n_samples, n_classes)
        Cumulative mass strictly before ``c``.
    """
    p = np.asarray(proba, dtype=float)
    p_j, p_c = p[:, None, :], p[:, :, None]  # broadcast to [i, c, j]
    score = np.einsum("icj,ij->ic", p_j >= p_c, p)
    above = np.einsum("icj,ij->ic", p_j > p_c, p)
    return score, above


def raps_scores(proba: np.ndarray, k_reg: int, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """RAPS scores for every class (Angelopoulos et al. 2021), tie-conservative.

    The `aps_scores` pair plus the rank penalty ``lam * max(0, rank - k_reg)``: for ``score`` the
    rank counts the classes at least as probable as ``c`` (``c`` and its ties included), for
    ``above`` those strictly more probable, so a class is kept as in ``"aps"`` (its own penalised
    score within ``q``, or the penalised mass strictly above it below ``q``).

    Parameters
    ----------
    proba : ndarray of shape (n_samples, n_classes), float in [0, 1]
    k_reg : int >= 0
        Classes allowed in a set before the penalty starts.
    lam : float >= 0
        Penalty per class past ``k_reg``.

    Returns
    -------
    score, above : ndarray of shape (n_samples, n_classes)
    """
    p = np.asarray(proba, dtype=float)
    score, above = aps_scores(p)
    p_j, p_c = p[:, None, :], p[:, :, None]
    rank = (p_j >= p_c).sum(axis=2)
    rank_above = (p_j > p_c).sum(axis=2)
    return (score + lam * np.maximum(rank - k_reg, 0), above + lam * np.maximum(rank_above - k_reg, 0))


def _check_matrix(values: np.ndarray, name: str) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    if v.ndim != 2 or v.shape[0] == 0 or v.shape[1] < 2:
        raise ValueError(f"{name} must be a (n_samples, n_classes >= 2) matrix, got {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} contains NaN or inf")
    if v.min() < 0.0 or v.max() > 1.0 + 1e-9:
        raise ValueError(f"{name} has values outside [0, 1]")
    return v


class SplitConformal:
    """Split-conformal set predictor on top of class probabilities or plausibilities.

    Parameters
    ----------
    alpha : float in (0, 1), default=0.1
        Target miscoverage (the paper uses 0.1).
    score : {"aps", "raps", "lac", "plausibility"}, default="aps"
        ``"aps"``: Romano et al. (2020) adaptive sets in the deterministic form -- class ``c`` is
        kept when the mass strictly above it is below ``q`` (the class that crosses ``q`` is
        kept, so the top class is always in the set) or its own score is ``<= q``. Without the
        randomisation this over-covers (often well above ``1 - alpha`` with few classes).
        ``"raps"``: the same with the rank penalty of `raps_scores` (Angelopoulos et al. 2021):
        ``k_reg`` is the split-conformal ``(1 - alpha)`` quantile of the true classes' ranks on the
        calibration data (the paper takes it from a tuning split; here the same rows, so the
        guarantee is approximate), ``lam`` the penalty.
        ``"lac"``: ``1 - p_c <= q``. ``"plausibility"``: DS-conformal (paper appendix F),
        ``1 - Pl(c) <= q`` with ``Pl`` the Dempster-Shafer plausibility passed as ``values``.

    lam : float >= 0, default=0.01
        The ``"raps"`` penalty per class past ``k_reg`` (ignored by the other scores).
    randomized : bool, default=False
        ``"aps"`` / ``"raps"``: the randomised scores of the papers, ``above + u (score - above)`` with
        ``u ~ U(0, 1)`` per row, which reach ``1 - alpha`` instead of over-covering (many classes of
        small probability make the deterministic sets far wider than needed).
    random_state : int, default=0
        Seeds ``u`` (the same draws at every call, so the sets are reproducible).
    allow_empty : bool, default=False
        A randomised set may be empty (the papers' exact form: coverage ``1 - alpha`` under
        exchangeability, not more); False keeps the top class in every set, as the RAPS authors'
        code does by default, which covers more than ``1 - alpha`` with wider sets.

    Attributes
    ----------
    threshold_ : float
        Calibrated ``q`` (``inf`` when the calibration set is too small for ``alpha``).
    n_classes_ : int
    k_reg_ : int
        ``"raps"`` only: the classes a set holds before the penalty starts.

    Examples
    --------
    >>> import numpy as np
    >>> cal = np.array([[0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    >>> cp = SplitConformal(alpha=0.5, score="lac").fit(cal, np.array([0, 1, 1]))
    >>> cp.predict_set(np.array([[0.9, 0.1]])).tolist()
    [[True, False]]
    """

    def __init__(self, alpha: float = 0.1, score: str = "aps", lam: float = 0.01, randomized: bool = False,
                 random_state: int = 0, allow_empty: bool = False) -> None:
        self.alpha = alpha
        self.score = score
        self.lam = lam
        self.randomized = randomized
        self.random_state = random_state
        self.allow_empty = allow_empty

    def _score_matrix(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        if self.score in ("aps", "raps"):
            score, above = aps_scores(values) if self.score == "aps" else raps_scores(values, self.k_reg_,
                                                                                      self.lam)
            if not self.randomized:
                return score, above
            u = np.random.default_rng(self.random_state).random((values.shape[0], 1))
            return above + u * (score - above), None  # Romano et al.'s E(x, c, u), ties spread by u
        return 1.0 - values, None

    def fit(self, values: np.ndarray, y: np.ndarray) -> SplitConformal:
        """Calibrate the threshold on held-out data.

        Parameters
        ----------
        values : ndarray of shape (n_cal, n_classes), float in [0, 1]
            Probabilities (``"aps"``, ``"lac"``) or plausibilities (``"plausibility"``).
        y : ndarray of shape (n_cal,), int in [0, n_classes)
            True class indices.

        Returns
        -------
        self : SplitConformal
            Fitted: `threshold_` set from the calibration scores.

        Raises
        ------
        ValueError
            Unknown score, bad ``alpha``, NaN, values outside [0, 1], labels out of range or
            mismatched lengths.
        """
        if self.score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {self.score!r}")
        v = _check_matrix(values, "values")
        y = np.asarray(y)
        if y.shape != (v.shape[0],) or not np.issubdtype(y.dtype, np.integer):
            raise ValueError(f"y must be integer labels of shape ({v.shape[0]},), got {y.shape}")
        if y.min() < 0 or y.max() >= v.shape[1]:
            raise ValueError(f"y has class indices outside [0, {v.shape[1]})")
        if self.score == "raps":
            if isinstance(self.lam, bool) or not isinstance(self.lam, Real) or not self.lam >= 0:
                raise ValueError(f"lam must be a number >= 0, got {self.lam!r}")
            ranks = (v > v[np.arange(y.size), y][:, None]).sum(axis=1) + 1.0  # 1 = the most probable
            k_reg = conformal_quantile(ranks, self.alpha)
            self.k_reg_ = int(min(k_reg, v.shape[1]))
        score, _ = self._score_matrix(v)
        self.threshold_ = conformal_quantile(score[np.arange(y.size), y], self.alpha)
        self.n_classes_ = v.shape[1]
        return self

    def predict_set(self, values: np.ndarray) -> np.ndarray:
        """Prediction sets for new inputs.

        Parameters
        ----------
        values : ndarray of shape (n_samples, n_classes), float in [0, 1]
            Same kind of values as in :meth:`fit`.

        Returns
        -------
        ndarray of shape (n_samples, n_classes), bool
            ``True`` where the class is in the set.

        Raises
        ------
        ValueError
            Not fitted, NaN, values outside [0, 1], or a different number of classes.
        """
        if not hasattr(self, "threshold_"):
            raise ValueError("SplitConformal is not fitted: call fit(values, y) first")
        v = _check_matrix(values, "values")
        if v.shape[1] != self.n_classes_:
            raise ValueError(f"values has {v.shape[1]} classes, calibrated on {self.n_classes_}")
        score, above = self._score_matrix(v)
        sets = score <= self.threshold_
        if above is not None:
            sets |= above < self.threshold_
        if self.randomized and self.score in ("aps", "raps") and not self.allow_empty:  # keep the top class
            sets[np.arange(v.shape[0]), np.argmax(v, axis=1)] = True
        return sets
