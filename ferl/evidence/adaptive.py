"""Coverage-targeted sets that widen with a shift score (beyond the paper).

The paper's DS-conformal set (appendix F) keeps the classes whose plausibility reaches one threshold
calibrated on held-out inputs. Under a shift of the inputs the true class's plausibility falls, the
threshold does not, and coverage collapses while the sets keep their clean size. Here the threshold
falls with a *shift score* ``z(x)`` of the input (any score that grows as the input moves away from
the training distribution): in log-plausibility,

    ``S(x) = {c : -log Pl_c(x) <= t + b(z(x))}``  (plus the most plausible class),

with ``b`` a non-decreasing widening, ``b >= 0``, learned on held-out inputs under *synthetic* shifts
(the validation corruptions of an image benchmark), and ``t`` the level:

1. ``b``: the isotonic (non-decreasing) fit, over bins of equal count in ``z``, of each bin's
   split-conformal ``(1 - alpha)`` quantile of ``-log Pl_y`` of the shifted inputs, less the larger of
   the clean inputs' quantile ``l0`` and its own value at the lowest bin, floored at 0: 0 where the
   shifted inputs need no wider set than the clean or the least shifted ones, growing where their
   true class falls down the plausibility ranking; interpolated linearly between the bins' mean
   scores and held at its ends;
2. ``t``: the split-conformal ``(1 - alpha)`` quantile of ``-log Pl_y - b(z)`` of the *clean* held-out
   inputs, so that under exchangeability of those and new clean inputs the set covers with
   probability at least ``1 - alpha`` (the normalised score of locally adaptive conformal prediction,
   Lei et al. 2018, with an additive normaliser), whatever ``b`` is; ``b`` only moves width from
   typical to atypical inputs.

Under a shift the coverage holds as far as the shifted inputs' conditional quantile at a given ``z``
resembles that of the calibration shifts: no guarantee, a measured property.

The widening is a reliability of the evidence: ``r(x) = exp(-b(z(x)))`` in ``(0, 1]`` is the factor
by which the set's plausibility threshold falls (a class half as plausible as a clean input's
least plausible member enters at ``r = 1/2``). Discounting the evidence by it (Shafer's discounting,
`ferl.evidence.discount_evidence`) turns the shift into ignorance: ``m^r(Theta) = 1 - r (1 -
m(Theta))`` grows with ``b``, while the pignistic arg-max stays; the set itself is read from the
undiscounted plausibility, as above.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.isotonic import IsotonicRegression

from ferl.evidence.conformal import conformal_quantile

__all__ = ["ShiftAdaptiveSets", "plausibility_set", "true_class_nll"]

#: Smallest plausibility read as such: ``-log`` stays finite for a class with no plausibility.
PL_FLOOR = 1e-300


def true_class_nll(plausibility: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``-log Pl_y``, the non-conformity of each row's true class, float64 (n,), ``>= 0``.

    Parameters
    ----------
    plausibility : ndarray of shape (n, C), float in [0, 1]
    y : ndarray of shape (n,), int in [0, C)
        Column of each row's true class.
    """
    pl = np.asarray(plausibility, dtype=np.float64)
    return -np.log(np.maximum(pl[np.arange(pl.shape[0]), np.asarray(y)], PL_FLOOR))


def plausibility_set(plausibility: np.ndarray, tau: float | np.ndarray) -> np.ndarray:
    """``{c : Pl_c >= tau}`` plus the most plausible class (never empty), bool (n, C).

    ``tau`` is one threshold or one per row (n,).
    """
    pl = np.asarray(plausibility, dtype=np.float64)
    tau = np.asarray(tau, dtype=np.float64)
    sets = pl >= (tau[:, None] if tau.ndim else tau)
    sets[np.arange(pl.shape[0]), np.argmax(pl, axis=1)] = True
    return sets


def _check_rows(nll: np.ndarray, score: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    nll, score = np.asarray(nll, dtype=np.float64), np.asarray(score, dtype=np.float64)
    if nll.ndim != 1 or nll.shape != score.shape or nll.size == 0:
        raise ValueError(f"the {what} non-conformities and shift scores must be two non-empty 1-d arrays "
                         f"of one length, got shapes {nll.shape} and {score.shape}")
    if not (np.all(np.isfinite(nll)) and np.all(np.isfinite(score))):
        raise ValueError(f"the {what} non-conformities or shift scores hold NaN or inf")
    return nll, score


class ShiftAdaptiveSets:
    """Split-conformal plausibility sets whose threshold falls with a shift score (module docstring).

    Parameters
    ----------
    coverage : float in (0, 1), default=0.9
        Target coverage ``1 - alpha`` on clean inputs (and, as measured, under the shifts).
    n_bins : int >= 1, default=15
        Bins of equal count of the shifted inputs' scores for the widening; settings in
        docs/results/shift.md.

    Attributes
    ----------
    knots_ : ndarray of shape (m,), float64, increasing
        Mean shift score of each bin (``m <= n_bins``: bins of tied scores merge).
    widening_ : ndarray of shape (m,), float64, ``>= 0``, non-decreasing
        ``b`` at the knots.
    level_ : float
        ``t`` (``inf`` when the clean inputs are too few for ``coverage``: every class enters).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> z = rng.uniform(0, 4, 2000)            # shifted inputs: the further, the less plausible y is
    >>> sets = ShiftAdaptiveSets(0.9).fit(rng.exponential(1.0, 500), rng.normal(0, 0.3, 500),
    ...                                   rng.exponential(1.0 + z), z)
    >>> bool(sets.threshold([3.0])[0] > sets.threshold([0.0])[0])
    True
    """

    def __init__(self, coverage: float = 0.9, n_bins: int = 15) -> None:
        self.coverage = coverage
        self.n_bins = n_bins

    def fit(self, nll_clean, score_clean, nll_shifted, score_shifted) -> ShiftAdaptiveSets:
        """Learn the widening on the shifted held-out inputs and the level on the clean ones.

        Parameters
        ----------
        nll_clean, score_clean : ndarray of shape (n,), float64, finite
            ``-log Pl_y`` (`true_class_nll`) and shift scores of clean held-out inputs.
        nll_shifted, score_shifted : ndarray of shape (m,), float64, finite, or None
            The same of held-out inputs under calibration shifts (never the evaluated ones); None
            (both): no widening, the paper's DS-conformal set.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            A coverage outside (0, 1), ``n_bins`` not a positive integer, arrays of other lengths,
            empty, NaN or infinite.
        """
        coverage, n_bins = self.coverage, self.n_bins
        if isinstance(coverage, bool) or not isinstance(coverage, Real) or not 0.0 < coverage < 1.0:
            raise ValueError(f"coverage must be in (0, 1), got {coverage!r}")
        if isinstance(n_bins, bool) or not isinstance(n_bins, Integral) or n_bins < 1:
            raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
        nll_clean, score_clean = _check_rows(nll_clean, score_clean, "clean")
        alpha = 1.0 - float(coverage)
        if nll_shifted is None and score_shifted is None:
            self.knots_, self.widening_ = np.zeros(1), np.zeros(1)
            self.level_ = conformal_quantile(nll_clean, alpha)
            return self
        nll_shifted, score_shifted = _check_rows(nll_shifted, score_shifted, "shifted")
        l0 = conformal_quantile(nll_clean, alpha)
        order = np.argsort(score_shifted, kind="stable")
        parts = [p for p in np.array_split(order, min(int(n_bins), order.size)) if p.size]
        knots = np.array([score_shifted[p].mean() for p in parts])
        quant = np.array([conformal_quantile(nll_shifted[p], alpha) for p in parts])
        weight = np.array([p.size for p in parts], dtype=np.float64)
        knots, keep = np.unique(knots, return_index=True)  # bins of one tied score merge
        quant, weight = quant[keep], weight[keep]
        finite = np.isfinite(quant)  # a bin too small for alpha widens to every class: capped below
        if not np.isfinite(l0):
            widening = np.zeros_like(knots)
        else:
            cap = np.max(quant[finite]) if finite.any() else l0
            quant = np.where(finite, quant, max(cap, l0))
            fit = IsotonicRegression(increasing=True).fit(knots, quant, sample_weight=weight).predict(knots)
            widening = np.maximum.accumulate(fit - max(l0, fit[0]))
        self.knots_, self.widening_ = knots.astype(np.float64), np.maximum(widening, 0.0)
        clean_widening = np.interp(score_clean, self.knots_, self.widening_)
        self.level_ = conformal_quantile(nll_clean - clean_widening, alpha)
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "level_"):
            raise ValueError("ShiftAdaptiveSets is not fitted: call fit(...) first")

    def widening(self, score) -> np.ndarray:
        """``b(z)`` of shift scores ``score`` (n,), float64 ``>= 0``; ValueError on NaN."""
        self._check_fitted()
        score = np.asarray(score, dtype=np.float64)
        if not np.all(np.isfinite(score)):
            raise ValueError("shift scores hold NaN or inf")
        return np.interp(score, self.knots_, self.widening_)

    def threshold(self, score) -> np.ndarray:
        """The log-plausibility threshold ``t + b(z)`` of each row, float64 (n,)."""
        widening = self.widening(score)  # checks the fit first
        return self.level_ + widening

    def reliability(self, score) -> np.ndarray:
        """``r(x) = exp(-b(z))``, float64 (n,) in (0, 1]: 1 for the least shifted inputs, the factor by
        which the set's plausibility threshold falls for the others (module docstring)."""
        return np.exp(-self.widening(score))

    def predict_set(self, plausibility, score) -> np.ndarray:
        """``S(x)`` of rows of plausibility (n, C) in [0, 1] with shift scores (n,): bool (n, C)."""
        return plausibility_set(plausibility, np.exp(-self.threshold(score)))

    def to_dict(self) -> dict:
        """The fitted state as plain JSON types (`from_dict` reads it back)."""
        self._check_fitted()
        return {"coverage": float(self.coverage), "n_bins": int(self.n_bins), "level": float(self.level_),
                "knots": self.knots_.tolist(), "widening": self.widening_.tolist()}

    @classmethod
    def from_dict(cls, doc: dict) -> ShiftAdaptiveSets:
        """A fitted object from `to_dict`'s output; ValueError naming what is wrong."""
        try:
            out = cls(float(doc["coverage"]), int(doc["n_bins"]))
            level = float(doc["level"])
            knots = np.asarray(doc["knots"], dtype=np.float64)
            widening = np.asarray(doc["widening"], dtype=np.float64)
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"shift-adaptive sets: a field is missing or not a number ({err})") from err
        finite = np.all(np.isfinite(knots)) and np.all(np.isfinite(widening))
        if (knots.ndim != 1 or knots.shape != widening.shape or knots.size == 0 or not finite
                or np.any(np.diff(knots) <= 0) or np.any(widening < 0) or np.any(np.diff(widening) < 0)
                or not (level == level) or not 0.0 < out.coverage < 1.0):
            raise ValueError("shift-adaptive sets: knots must increase, the widening be finite, >= 0 and "
                             "non-decreasing, the level a number and the coverage in (0, 1)")
        out.level_, out.knots_, out.widening_ = level, knots, widening
        return out
