"""What `cbm.predict.Pipeline` returns: one row per input (`Predictions`), its columns and their CSV form."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ferl.explain import Explanation

__all__ = ["COLUMNS", "OUTPUTS", "Predictions", "flat_row"]

#: The head's outputs in a prediction row (None where the input could not be read).
OUTPUTS = ("class", "probability", "belief", "set", "set_size", "abstained", "ignorance", "ood_kind",
           "ood_score", "ood_threshold", "ood_flag", "shift_score", "shift_flag", "anomalous_attributes")
#: The fields of a prediction row, in the order of `Predictions.frame` (and predictions.csv).
COLUMNS = ("input", *OUTPUTS, "true_class", "warning", "error")


@dataclass
class Predictions:
    """What :meth:`Pipeline.predict` returns: one row per input, in input order.

    Attributes
    ----------
    rows : list of dict
        ``input``, ``class`` (argmax of the pignistic probability), ``probability`` (its BetP),
        ``belief`` (its Bel = m({c})), ``set`` (credal-set classes), ``set_size``, ``abstained``,
        ``ignorance`` (m(Θ)): the evidence discounted at the operating point; ``ood_kind`` (the
        kind of OOD score, the threshold's: `ferl.novelty.ood_score.OOD_KINDS`), ``ood_score``,
        ``ood_threshold``, ``ood_flag`` (score above the threshold: flagged as novel),
        ``shift_score`` and ``shift_flag`` (the input looks unlike the training images),
        ``anomalous_attributes`` (``[(name, score)]``, highest first), ``true_class`` (when known,
        else None), ``warning`` (None, or why the prediction may not be trusted: an image far smaller
        than the detector's input) and ``error`` (None, or why the input was not read; its other
        fields are then None).
    inputs : list
        The inputs as given (paths or images; None for concept vectors), for pages that show them.
    explain : callable
        ``explain(i)`` -> :class:`ferl.explain.Explanation` of row ``i`` (None for an error row),
        showing the OOD score of the threshold's kind.
    threshold : dict
        The novelty threshold used (``kind``, ``accept``, ``value``, ``fitted_on``).
    """

    rows: list[dict[str, Any]]
    inputs: list[Any]
    explain: Callable[[int], Explanation | None] = field(repr=False)
    threshold: dict[str, Any] = field(default_factory=dict)

    def frame(self) -> pd.DataFrame:
        """The rows as a DataFrame (sets and attributes joined into text); ``set_size`` stays an
        integer column (pandas' nullable ``Int64``) when error rows leave it empty."""
        df = pd.DataFrame([flat_row(r) for r in self.rows], columns=list(COLUMNS))
        return df.astype({"set_size": "Int64"})

    @property
    def n_errors(self) -> int:
        """Inputs that could not be read."""
        return sum(r["error"] is not None for r in self.rows)


def flat_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row with its set as ``a|b`` and its attributes as ``name (score); ...`` (for CSV)."""
    out = dict(row)
    if row["set"] is not None:
        out["set"] = "|".join(row["set"])
        out["anomalous_attributes"] = "; ".join(f"{n} ({s:.2f})" for n, s in row["anomalous_attributes"])
    return out
