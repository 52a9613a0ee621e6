"""The read-out of a fitted model: one sparse firing pass per batch, shared by the evidence, the
credal set, the novelty discount and the OOD score, and the estimator methods over it."""

from ferl.readout.batch import CredalReadout

__all__ = ["CredalReadout"]
