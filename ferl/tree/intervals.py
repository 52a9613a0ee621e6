"""One feature's conditions along a rule path, merged into one fuzzy interval.

A root-to-node path may test a feature several times. Its firing then carries the product of those
memberships, ``m(x) = prod_i g_i(x)``, each factor the left child's trapezoid ``mu_i`` (paper
eq. 1 for a learned ramp, a low / medium / high set for a fixed partition) or the right child's
complement ``1 - mu_i``. This module describes ``m`` exactly by its level sets:

* the *support* ``{m > 0}`` and the *core* ``{m = 1}``, computed exactly from the trapezoids'
  breakpoints: between two consecutive breakpoints every factor is affine, so ``m`` is either 0,
  1 or strictly between throughout;
* the *peak* ``max m``, which is below 1 when the core is empty (a condition that lives only inside
  fuzzy bands, e.g. ``x > 3.44 +- 0.59`` and ``x <= 3.44 +- 0.59`` on one path peak at 0.25).

Every factor restricted to its support is log-concave (a ramp or a trapezoid), so each connected
piece of the support carries a unimodal ``m``: it rises from the support's lower end to the core's
lower end, then falls from the core's upper end to the support's upper end. A `Span` records
these four ends, which is what `ferl.rules` prints; the shape of a band between its ends is a
product of linear ramps, linear when one condition bounds that side. Beyond the paper (which
prints no rules).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ferl.tree.fuzzy_tree import membership

__all__ = ["Factor", "Span", "evaluate", "spans", "same_membership"]

#: Grid points and refining rounds for the peak of a span whose core is empty.
_PEAK_POINTS = 257
_REFINE_ROUNDS = 4


@dataclass(frozen=True)
class Factor:
    """One condition of a path on one feature.

    Attributes
    ----------
    trap : tuple of 4 float
        The tested node's trapezoid ``(a, b, c, d)`` (`ferl.tree.fuzzy_tree.FuzzyTree.trap`).
    left : bool
        True for the left child (membership ``mu``), False for the right (``1 - mu``).
    threshold, half_width : float
        theta and h of a learned split (eq. 1-2), NaN for a fixed set.
    """

    trap: tuple
    left: bool
    threshold: float = np.nan
    half_width: float = np.nan


@dataclass(frozen=True)
class Span:
    """One connected piece of the merged membership's support.

    Attributes
    ----------
    support : tuple of 2 float
        Ends of ``{m > 0}`` on this piece; ``-inf`` / ``inf`` when unbounded.
    core : tuple of 2 float or None
        Ends of ``{m = 1}`` (inside ``support``), None when ``m < 1`` everywhere on the piece.
    peak : float in (0, 1]
        ``max m`` on the piece (1 when the core exists).
    """

    support: tuple
    core: tuple | None
    peak: float


def evaluate(factors: list[Factor], x: np.ndarray) -> np.ndarray:
    """The merged membership ``prod_i g_i(x)``, ndarray of the shape of ``x`` in [0, 1].

    Uses the firing kernel's own trapezoid (`ferl.tree.fuzzy_tree.membership`), so the value is the factor the
    path contributes to a sample's firing.
    """
    x = np.ascontiguousarray(x, dtype=np.float64).ravel()
    m = np.ones_like(x)
    for f in factors:
        mu = membership(x, *f.trap)
        m *= mu if f.left else 1.0 - mu
    return m


def _outside(b: float, side: int) -> float:
    """A point strictly beyond the finite breakpoint ``b`` (left for side -1, right for +1)."""
    return b + side * (abs(b) + 1.0)


def _grid(factors: list[Factor]) -> tuple[np.ndarray, np.ndarray]:
    """Points where ``m`` changes nature and one interior point per open piece.

    Returns ``(points, kind)``: the sorted points (a point left of every breakpoint, then each
    breakpoint followed by the midpoint of the next open piece, the last piece's point lying right
    of every breakpoint) and ``kind`` (True at breakpoints, False at interior points).
    """
    traps = np.array([f.trap for f in factors], dtype=np.float64).ravel()
    breaks = np.unique(traps[np.isfinite(traps)])
    if breaks.size == 0:
        return np.zeros(1), np.zeros(1, dtype=bool)
    n = breaks.size
    points = np.empty(2 * n + 1)
    points[0] = _outside(breaks[0], -1)
    points[1::2] = breaks
    points[2:-1:2] = 0.5 * breaks[:-1] + 0.5 * breaks[1:]
    points[-1] = _outside(breaks[-1], 1)
    kind = np.zeros(2 * n + 1, dtype=bool)
    kind[1::2] = True
    return points, kind


def spans(factors: list[Factor]) -> list[Span]:
    """The support's connected pieces with their cores and peaks, left to right.

    Parameters
    ----------
    factors : list of Factor
        The conditions of one path on one feature (at least one).

    Returns
    -------
    list of Span
        Empty when ``m`` is 0 everywhere (a path that can never fire).
    """
    points, is_break = _grid(factors)
    m = evaluate(factors, points)
    out = []
    i, n = 0, len(points)
    while i < n:
        if m[i] == 0.0:
            i += 1
            continue
        j = i
        while j + 1 < n and m[j + 1] > 0.0:
            j += 1
        out.append(_span(factors, points, is_break, m, i, j))
        i = j + 1
    return out


def _end(points, is_break, k: int, side: int) -> float:
    """Position of the end of a run of grid entries that stops at entry ``k`` on ``side``.

    A breakpoint entry is itself the end; an open piece ends at its neighbouring breakpoint, or is
    unbounded when it is the first / last piece.
    """
    if is_break[k]:
        return float(points[k])
    nb = k + side
    return float(points[nb]) if 0 <= nb < len(points) else side * np.inf


def _span(factors, points, is_break, m, i: int, j: int) -> Span:
    support = (_end(points, is_break, i, -1), _end(points, is_break, j, 1))
    ones = [k for k in range(i, j + 1) if m[k] == 1.0]
    if ones:
        core = (_end(points, is_break, ones[0], -1), _end(points, is_break, ones[-1], 1))
        return Span(support, core, 1.0)
    # An empty core means every factor is a ramp or zero beyond this piece: the support is bounded.
    return Span(support, None, _peak(factors, support[0], support[1], points[i:j + 1]))


def _peak(factors, lo: float, hi: float, inner: np.ndarray) -> float:
    """``max m`` on ``[lo, hi]``: ``m`` is log-concave there, hence unimodal, so a grid (with the
    breakpoints, where a kink may hold the maximum) brackets the maximum; finer grids inside the
    bracket refine it (each round divides the bracket by about ``_PEAK_POINTS / 2``)."""
    grid = np.sort(np.concatenate([np.linspace(lo, hi, _PEAK_POINTS), inner]))
    best = 0.0
    for _ in range(_REFINE_ROUNDS):
        values = evaluate(factors, grid)
        k = int(np.argmax(values))
        best = max(best, float(values[k]))
        grid = np.linspace(grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)], _PEAK_POINTS)
    return best


def same_membership(factors: list[Factor], reference: list[Factor], tol: float = 1e-12) -> bool:
    """Whether two products of factors are the same function of x (within ``tol``).

    Between consecutive breakpoints of both sets each product is a polynomial of degree at most
    its number of factors, so comparing at the breakpoints and at ``max(len) + 1`` interior points
    of every open piece decides the identity.
    """
    points, _ = _grid(factors + reference)
    k = max(len(factors), len(reference)) + 1
    inner = [np.linspace(a, b, k + 2)[1:-1] for a, b in zip(points[:-1], points[1:], strict=True)]
    x = np.concatenate([points, *inner]) if inner else points
    return bool(np.abs(evaluate(factors, x) - evaluate(reference, x)).max() <= tol)
