"""Upper-tail probabilities of scores among reference scores, in nats (`ferl.novelty.prototypes`' Fisher's
method; beyond the paper)."""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["ROUND_OFF", "tail_nats"]

#: Tolerance of `tail_nats`' comparison with the reference scores: relative, absolute below 1.
ROUND_OFF = 1e-9


def tail_nats(reference: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """``t(s)`` of the module docstring: the negative log upper-tail probability of ``scores``.

    Parameters
    ----------
    reference : ndarray of shape (m,), float64, sorted, finite, ``m >= 1``
    scores : ndarray of shape (n,), float64

    Returns
    -------
    ndarray of shape (n,), float64 >= 0, finite for finite or infinite scores, NaN for NaN
        ``-log((1 + #{ref >= s - 1e-9 max(|s|, 1)}) / (m + 1))`` (`ROUND_OFF`), plus
        ``log(1 + (s - ref[-1]) / lambda)`` above the largest reference score
        (``lambda = ref[-1] - median(ref)``; 1 when that is 0).
    """
    m = reference.size  # the median in halves: two scores above half the float maximum overflow
    lam = float(reference[-1] - (reference[(m - 1) // 2] / 2 + reference[m // 2] / 2))
    lam = lam if lam > 0 else 1.0  # halving a subnormal reference rounds: -5e-324 gave lambda < 0, -inf
    return _tail(np.ascontiguousarray(reference, dtype=np.float64),
                 np.ascontiguousarray(scores, dtype=np.float64), lam)


@njit(cache=True)
def _tail(reference, scores, lam):
    m, low, top, big = reference.size, reference[0], reference[-1], np.finfo(np.float64).max
    # the first reference at or above each of m equal cells of [low, top], so that finding a
    # score's place scans a cell instead of bisecting (a binary search was slower: docs/results/speed.md)
    width = (top - low) / m if top > low else 1.0
    first = np.empty(m + 1, dtype=np.int64)
    at = 0
    for c in range(m + 1):
        while at < m and reference[at] < low + c * width:
            at += 1
        first[c] = at
    out = np.empty(scores.size)
    for i in range(scores.size):
        s = scores[i]
        if s != s:  # NaN has no place among the references (int(NaN) indexed out of bounds)
            out[i] = s
            continue
        # a reference score counts from a relative 1e-9 below it, so that a training row read out
        # by another path (sums in another order) finds itself in the reference (inf - inf is NaN)
        t = s - ROUND_OFF * max(abs(s), 1.0) if abs(s) <= big else s
        if t <= low:
            at = 0
        elif t > top:
            at = m
        else:
            at = first[min(int((t - low) / width), m)]
            while at > 0 and reference[at - 1] >= t:
                at -= 1
            while at < m and reference[at] < t:
                at += 1
        nats = np.log((m + 1.0) / (m - at + 1.0))
        if s > top:
            nats += np.log1p(min((s - top) / lam, big))
        out[i] = min(nats, big)
    return out
