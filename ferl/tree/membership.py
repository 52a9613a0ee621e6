"""Fuzzy memberships of a FERL split: the trapezoid of a fuzzy set and the bounded-support gate.

A learned split "x_f <= theta +- h" (paper eq. 1) is the trapezoid ``(-inf, -inf, theta - h,
theta + h)``; the fixed low / medium / high partitions of the compact variant are ordinary
trapezoids, so one membership kernel serves both kinds.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["trapezoid", "membership", "support_gate"]


@njit(cache=True, inline="always")
def trapezoid(x: float, a: float, b: float, c: float, d: float) -> float:
    """Membership of ``x`` in the trapezoid ``(a, b, c, d)``, a value in [0, 1].

    1 on ``[b, c]``, linear ramps on ``[a, b]`` and ``[c, d]``, 0 outside ``[a, d]``. Infinite
    ``a = b = -inf`` (or ``c = d = +inf``) give a shoulder; a degenerate ramp (``a == b``) is a step.
    Implements paper eq. 1 for ``(-inf, -inf, theta - h, theta + h)``.
    """
    if x < a:
        return 0.0
    if x < b:
        return (x - a) / (b - a)
    if x <= c:
        return 1.0
    if x < d:
        return (d - x) / (d - c)
    return 0.0


@njit(cache=True)
def membership(xs, a, b, c, d):
    """`trapezoid` over an array: ndarray of shape (m,) float64 in [0, 1]."""
    out = np.empty(xs.shape[0])
    for i in range(xs.shape[0]):
        out[i] = trapezoid(xs[i], a, b, c, d)
    return out


@njit(cache=True, inline="always")
def support_gate(x: float, lo: float, hi: float, margin: float) -> float:
    """Bounded-support gate of paper section 3.1 / appendix A.2, a value in [0, 1].

    1 on the observed range ``[lo, hi]`` (edges included), linear decay to 0 over ``margin`` on each
    side, 0 beyond. ``margin`` must be > 0.
    """
    if x < lo:
        g = 1.0 - (lo - x) / margin
    elif x > hi:
        g = 1.0 - (x - hi) / margin
    else:
        return 1.0
    return g if g > 0.0 else 0.0
