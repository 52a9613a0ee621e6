"""The Dempster-Shafer evidence of the fired rules: the mass algebra (combination, discounting,
belief, plausibility, pignistic probability, interval dominance) and the conformal prediction sets."""

from ferl.evidence.algebra import (
    Evidence,
    cautious_combine,
    combine,
    combine_sparse,
    dempster_combine,
    discount,
    discount_evidence,
    interval_dominance,
    pignistic,
)

__all__ = ["Evidence", "dempster_combine", "cautious_combine", "pignistic", "interval_dominance", "combine",
           "discount", "discount_evidence", "combine_sparse"]
