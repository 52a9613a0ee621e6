"""Concept-bottleneck pipeline: concept detector, calibration, heads, open-world evaluation."""
