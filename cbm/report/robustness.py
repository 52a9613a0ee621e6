"""The report's certified-robustness section: the distribution of the decision's certified radius.

:func:`radius_summary` reads the certified l_inf radius of every test image's decision
(:func:`cbm.heads.operating.certified_radius`, in the units of the concept probabilities the head
reads) and :func:`robustness_section` lays it out: the share of images with a radius above 0, the
quartiles over every test image and the median of the certified ones. The figures of a CUB-50 run
and the check that no radius is violated: docs/results/certificate.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cbm.heads.operating import certified_radius
from cbm.report.run import RunView

__all__ = ["RadiusSummary", "radius_summary", "robustness_section"]


@dataclass(frozen=True)
class RadiusSummary:
    """The certified radii of one split's rows, summarised.

    Attributes
    ----------
    n : int
        Rows.
    certified : float in [0, 1]
        Share of rows with a radius above 0.
    quartiles : tuple of 3 floats >= 0 (or inf)
        25, 50 and 75 % quantiles over every row (0 counted).
    certified_median : float or None
        Median over the rows with a radius above 0; None when there is none.
    """

    n: int
    certified: float
    quartiles: tuple
    certified_median: float | None


def radius_summary(radius: np.ndarray) -> RadiusSummary:
    """Summarise certified radii.

    Parameters
    ----------
    radius : ndarray of shape (n,), float >= 0 or inf, n >= 1

    Returns
    -------
    RadiusSummary

    Raises
    ------
    ValueError
        No radius, or a NaN or negative one.
    """
    radius = np.asarray(radius, dtype=np.float64)
    if radius.ndim != 1 or radius.size == 0 or np.isnan(radius).any() or (radius < 0).any():
        raise ValueError(f"radii must be a non-empty 1-d array of numbers >= 0, got shape {radius.shape}")
    # quantiles of values that may be inf: by order statistics ("lower" never averages inf with a number)
    quartiles = tuple(float(np.quantile(radius, q, method="lower")) for q in (0.25, 0.5, 0.75))
    positive = radius[radius > 0]
    median = float(np.quantile(positive, 0.5, method="lower")) if positive.size else None
    return RadiusSummary(int(radius.size), float(positive.size / radius.size), quartiles, median)


def robustness_section(run: RunView, head, label: str, inputs: str) -> list[str]:
    """Markdown lines of the section over the run's test split.

    Parameters
    ----------
    run : RunView
        A run with ``concepts/test.npz`` (the report checks it first).
    head : FERLHead
        The report's head (its ``inputs`` fit).
    label : str
        The head's name in the report.
    inputs : {"raw", "calibrated"}

    Returns
    -------
    list of str
    """
    s = radius_summary(certified_radius(head, run.concepts("test", inputs)))
    intro = (f"The certified l∞ radius of {label}'s decision on each test image, in {inputs} concept "
             "probabilities: every concept vector in [0, 1] whose probabilities each differ from the "
             "image's by at most the radius gets the image's class (a bound proved for the learned "
             "weights of evidence and checked by sampling in docs/results/certificate.md; 0: nothing "
             "certified).")
    if s.certified_median is None:
        return ["## Certified robustness", "", f"{intro} No test image of the {s.n} has a radius above 0 "
                "(the heads with the tree's evidence certify nothing about the decision).", ""]
    q1, q2, q3 = (f"{v:.3g}" for v in s.quartiles)
    return ["## Certified robustness", "",
            f"{intro} Over the {s.n} test images: radius > 0 for {100 * s.certified:.1f} %, quartiles "
            f"25 / 50 / 75 % {q1} / {q2} / {q3}, median of those > 0 {s.certified_median:.3g}.", ""]
