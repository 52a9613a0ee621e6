"""The Dempster combination of summed weights of evidence, one compiled pass per batch (beyond the paper).

`ferl.evidence.weights.evidence_from_weights` derives the combined masses of the weighted sources
(Denœux 2019) from the summed positive and negative weights ``w+_k``, ``w-_k`` of every class. This
module evaluates those formulas row by row in one numba kernel (`combine_weights`), with the energy
``-log sum_k exp(w_k)`` of the same rows (`row_energy`) and the pignistic integrals
(`pignistic_integrals`, Gauss-Legendre quadrature).

**Arithmetic rather than logs.** Per class the kernel needs one transcendental for ``a_k = exp(-w-_k)``
and ``b_k = 1 - a_k`` (``expm1`` below ``log 2``, where ``1 - a_k`` would cancel) and one for
``E_k a_k`` (``E_k = exp(w+_k) - 1``: ``expm1`` below ``log 2``, else ``exp(w_k - max w) - a_k c``, a
difference of at most a factor 2), where a computation in logs (``log1mexp`` of both sums,
``logaddexp``, ``logsumexp``) takes about twenty. The common factors keep every quantity in
range whatever the weights: ``s = exp(-min_k w-_k)`` divides the ``a_k`` (``alpha_k = a_k / s``, the
largest is 1) and ``c = exp(-t)``, ``t = max(0, max_k w_k + min_k w-_k)``, multiplies ``E_k alpha_k``
(the largest is at most 1), so the normaliser ``N = (q Z) c / s`` is at least 1/2. ``q / s = (1 -
prod_l b_l) / s`` is summed by the recursion ``rho <- rho b_l + alpha_l`` (positive terms, no
cancellation however close ``prod b`` is to 1: every class refuted past ``exp(-w) ~ 1e-290`` is no
special case) and the leave-one-out products ``prod_{l != k} b_l`` are ``prod_l b_l / b_k`` (with a
mantissa-exponent product where ``prod_l b_l`` is below 1e-290, so that none underflows).

**Accuracy.** Every step is a product, a quotient, a sum of non-negative terms or a difference
that loses at most one bit, so a mass, plausibility or ignorance carries a relative error of a few
``C`` units in the last place (``C`` classes), plus the conditioning of ``exp(-w)`` on the rounding
of the weights (``|w| eps``) that every evaluation shares, and an absolute 1e-300 where it
underflows. Against the log-domain evaluation it replaced (kept in tests/ferl/test_combination.py,
which checks these bounds), with ``W`` the row's largest ``w+`` plus its largest ``w-``: the masses
and plausibilities agree to a relative ``(10 + C + W) 1e-15`` (absolute 1e-300; the ignorance also
``+ 1e-15 sum_k w-_k``, the conditioning of ``exp(-sum_k w-_k)``), the pignistic probabilities and
the conflict to that absolute (BetP ``+ 2 BETP_TOL``, the quadrature's node count may differ).
The 10 covers the log domain's own rounding. The energy is scipy's ``logsumexp``, bit for bit.
Timings and the differences measured on the benchmark sets: docs/results/speed.md.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit

__all__ = ["BETP_TOL", "BETWEEN_TOL", "combine_weights", "energies", "legendre_table", "pignistic_integrals",
           "quadrature_nodes", "row_energy"]

#: Largest change of a pignistic probability that fewer quadrature nodes may make (`quadrature_nodes`).
BETP_TOL = 1e-15
#: Rows whose mass off the singletons and Theta is below this get BetP = m({c}) + m(Theta) / C
#: without the integral: the mass left out bounds the error of every class's BetP.
BETWEEN_TOL = 1e-9
#: ``log 2``: below it ``1 - exp(-w)`` is computed as ``-expm1(-w)`` (no cancellation).
_LOG2 = math.log(2.0)
#: A product of the ``b_l`` below this is recomputed as mantissa and exponent (`_leave_one_out`).
_PRODUCT_FLOOR = 1e-290


@functools.cache
def legendre_table(n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes and weights on [0, 1], row ``k`` the ``k``-node rule (zero-padded), for
    ``k <= n_classes // 2 + 1``: the most a pignistic integrand of ``n_classes`` factors needs."""
    size = n_classes // 2 + 1
    nodes, weights = np.zeros((size + 1, size)), np.zeros((size + 1, size))
    for k in range(1, size + 1):
        nodes[k, :k], weights[k, :k] = legendre_rule(k)
    return nodes, weights


@functools.cache
def legendre_rule(k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k``-node Gauss-Legendre rule on [0, 1] (every table reuses it)."""
    t, w = np.polynomial.legendre.leggauss(k)
    return (t + 1.0) / 2.0, w / 2.0


@njit(cache=True)
def quadrature_nodes(m, total, exact):
    """The fewest Gauss-Legendre nodes, at most ``exact``, whose error on the pignistic integrals
    of ``m`` factors with ``a`` summing to ``total`` is at most `BETP_TOL` / ``m``.

    In ``s = 1 - t`` the integrand ``prod_l (1 - a_l s)`` has the coefficients ``(-1)^j e_j(a)``
    (elementary symmetric polynomials, ``e_j <= total^j / j!``); ``k`` nodes integrate ``s^j`` exactly
    up to ``j = 2k - 1`` and, above, with an error below 1 (both the integral and the rule lie in
    (0, 1)). So the error is at most the tail ``sum_{j >= 2k} total^j / j!``, bounded by its first
    term over ``1 - total / (2k + 1)``. BetP multiplies an integral by at most ``m`` (the integral is
    at least ``1 / m``, its product with the factor at most 1): BetP moves by at most `BETP_TOL`."""
    term = 1.0  # total^j / j!
    j = 0
    for k in range(1, exact):
        while j < 2 * k:
            j += 1
            term *= total / j
        if j + 1 > total and m * term / (1.0 - total / (j + 1)) <= BETP_TOL:
            return k
    return exact


@njit(cache=True)
def pignistic_integrals(a, nodes, weights):
    """``integral_0^1 prod_{l != k} (1 - a_l + a_l t) dt`` for every row and class (n, C).

    Factors with ``a_l <= 1e-15`` are 1 to within it and are left out (the integrand's degree
    is the number ``m`` of classes not refuted outright); a class left out gets the integral over
    the others, its own factor being 1. Gauss-Legendre quadrature with ``m // 2 + 1`` nodes is exact;
    where the ``a_l`` sum to little the integrand is nearly of low degree and fewer nodes
    (`quadrature_nodes`) are within `BETP_TOL` / ``m`` of it. At each node the products over
    ``l != k`` are a prefix product times a suffix product (three multiplications per factor, no
    logs, no division). The factors ``b_l + a_l t`` lie in ``[t, 1]``: a product that underflows is
    below 1e-300 while every integral is at least ``integral_0^1 t^(C-1) dt = 1 / C``, so the
    underflow is far below the rounding of the result."""
    n, n_classes = a.shape
    out = np.empty((n, n_classes))
    kept = np.empty(n_classes, dtype=np.int64)
    a_kept = np.empty(n_classes)
    prefix = np.empty(n_classes + 1)
    acc = np.empty(n_classes)
    for i in range(n):
        m = 0
        total = 0.0
        for k in range(n_classes):
            if a[i, k] > 1e-15:
                kept[m] = k
                a_kept[m] = a[i, k]
                total += a[i, k]
                m += 1
        acc[:m] = 0.0
        every = 0.0  # the quadrature of the product over every kept factor
        n_nodes = quadrature_nodes(m, total, m // 2 + 1)
        for q in range(n_nodes):
            s = 1.0 - nodes[n_nodes, q]
            prefix[0] = weights[n_nodes, q]
            for j in range(m):
                prefix[j + 1] = prefix[j] * (1.0 - a_kept[j] * s)
            every += prefix[m]
            suffix = 1.0
            for j in range(m - 1, -1, -1):
                acc[j] += prefix[j] * suffix
                suffix *= 1.0 - a_kept[j] * s
        out[i] = every
        for j in range(m):
            out[i, kept[j]] = acc[j]
    return out


@njit(cache=True)
def _block_sum(x, lo, n):
    """``sum(x[lo:lo + n])``, ``n <= 128``, as numpy sums a block: eight accumulators (below 8, one)."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += x[i]
        return res
    r0, r1, r2, r3 = x[lo], x[lo + 1], x[lo + 2], x[lo + 3]
    r4, r5, r6, r7 = x[lo + 4], x[lo + 5], x[lo + 6], x[lo + 7]
    i = lo + 8
    end = lo + n - n % 8
    while i < end:
        r0, r1, r2, r3 = r0 + x[i], r1 + x[i + 1], r2 + x[i + 2], r3 + x[i + 3]
        r4, r5, r6, r7 = r4 + x[i + 4], r5 + x[i + 5], r6 + x[i + 6], r7 + x[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for j in range(i, lo + n):
        res += x[j]
    return res


@njit(cache=True)
def _pairwise_sum(x):
    """``sum(x)`` in numpy's pairwise order (halves rounded down to multiples of 8, down to blocks of at
    most 128, `_block_sum`), so that a row sum here is numpy's (and scipy's ``logsumexp``'s) bit for
    bit. The recursion runs on explicit stacks (numba's cache does not reload recursive functions)."""
    lo, size, combine = np.empty(128, np.int64), np.empty(128, np.int64), np.empty(128, np.bool_)
    values = np.empty(64)
    lo[0], size[0], combine[0] = 0, x.shape[0], False
    tasks, n_values = 1, 0
    while tasks:
        tasks -= 1
        if combine[tasks]:
            n_values -= 1
            values[n_values - 1] += values[n_values]
        elif size[tasks] <= 128:
            values[n_values] = _block_sum(x, lo[tasks], size[tasks])
            n_values += 1
        else:
            start, n = lo[tasks], size[tasks]
            half = n // 2 - (n // 2) % 8
            lo[tasks], size[tasks], combine[tasks] = 0, 0, True  # after both halves: add them
            lo[tasks + 1], size[tasks + 1], combine[tasks + 1] = start + half, n - half, False
            lo[tasks + 2], size[tasks + 2], combine[tasks + 2] = start, half, False  # the first half first
            tasks += 3
    return values[0]


@njit(cache=True)
def row_energy(w, top, ratio, buf):
    """``-log sum_k exp(w_k)`` of one row ``w`` with maximum ``top``, as scipy's ``logsumexp`` computes it
    (the maxima counted apart, the others' ``exp(w_k - top)`` summed in numpy's order), bit for bit;
    ``ratio`` (C,) is filled with ``exp(w_k - top)``, which the combination reuses, ``buf`` (C,) is
    scratch."""
    n_max = 0.0
    for k in range(w.shape[0]):
        ratio[k] = math.exp(w[k] - top)
        at_top = w[k] == top
        n_max += 1.0 if at_top else 0.0
        buf[k] = 0.0 if at_top else ratio[k]
    s = _pairwise_sum(buf)
    if s != 0.0:
        s = s / n_max
    return -(math.log1p(s) + math.log(n_max) + top)


@njit(cache=True)
def energies(w_plus, w_minus):
    """`row_energy` of every row of ``w = w+ - w-`` (n, C): the energy alone, the floats of
    `combine_weights`' (the same function on the same differences)."""
    n, n_classes = w_plus.shape
    out = np.empty(n)
    w, ratio, buf = np.empty(n_classes), np.empty(n_classes), np.empty(n_classes)
    for i in range(n):
        top = -np.inf
        for k in range(n_classes):
            w[k] = w_plus[i, k] - w_minus[i, k]
            top = max(top, w[k])
        out[i] = row_energy(w, top, ratio, buf)
    return out


@njit(cache=True)
def _leave_one_out(b, loo):
    """``prod_{l != k} b_l`` of every ``k`` into ``loo`` (0 where another ``b_l`` is 0), ``b`` in [0, 1].

    The product of the non-zero ``b_l`` divided by ``b_k``; where that product is below
    `_PRODUCT_FLOOR` it is kept as mantissa and exponent (``frexp``), so that a leave-one-out product
    well inside the floats does not come from an underflowed one."""
    n_zero = 0
    product = 1.0
    for k in range(b.shape[0]):
        if b[k] > 0.0:
            product *= b[k]
        else:
            n_zero += 1
    if n_zero >= 2:
        loo[:] = 0.0
        return
    if product >= _PRODUCT_FLOOR:
        for k in range(b.shape[0]):
            loo[k] = product / b[k] if n_zero == 0 else (product if b[k] == 0.0 else 0.0)
        return
    mantissa, exponent = 1.0, 0
    for k in range(b.shape[0]):
        if b[k] > 0.0:
            m, e = math.frexp(b[k])
            mantissa, shift = math.frexp(mantissa * m)
            exponent += e + shift
    for k in range(b.shape[0]):
        if n_zero == 1:
            loo[k] = math.ldexp(mantissa, exponent) if b[k] == 0.0 else 0.0
        else:
            m, e = math.frexp(b[k])
            loo[k] = math.ldexp(mantissa / m, exponent - e)


@njit(cache=True)
def combine_weights(w_plus, w_minus, nodes, weights, want_energy):
    """The masses of `ferl.evidence.weights.evidence_from_weights` from ``w+`` and ``w-`` (n, C) each.

    Returns ``mass``, ``between_pl``, ``between_betp`` (n, C), ``ignorance``, ``conflict`` (n,) and
    the energy (n,), or an empty array unless ``want_energy``; the formulas and their accuracy are
    the module docstring's. ``nodes`` and ``weights`` are `legendre_table` (C). Rows whose mass off
    the singletons and Theta exceeds `BETWEEN_TOL` get the pignistic integrals of their ``a_k``,
    in one `pignistic_integrals` call after the rows' pass."""
    n, n_classes = w_plus.shape
    mass, between_pl = np.empty((n, n_classes)), np.empty((n, n_classes))
    between_betp = np.zeros((n, n_classes))
    ignorance, conflict, energy = np.empty(n), np.empty(n), np.empty(n if want_energy else 0)
    alpha = np.empty((n, n_classes))  # a_k / s, for the rows that need the integral
    loo_all = np.empty((n, n_classes))
    factor = np.empty(n)  # c / N: the pignistic integral's factor, over alpha_k
    shift = np.empty(n)  # s
    w, ratio, b, h = np.empty(n_classes), np.empty(n_classes), np.empty(n_classes), np.empty(n_classes)
    flagged = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        low, top = w_minus[i, 0], -np.inf
        for k in range(n_classes):
            w[k] = w_plus[i, k] - w_minus[i, k]
            low, top = min(low, w_minus[i, k]), max(top, w[k])
        sum_plus, sum_minus = _pairwise_sum(w_plus[i]), _pairwise_sum(w_minus[i])
        if want_energy:
            energy[i] = row_energy(w, top, ratio, h)  # h: scratch until filled below
        lead = top + low > 0.0  # t = max w + min w-, with exp(w_k - t - min w-) = exp(w_k - max w)
        delta = -top if lead else low  # min w- - t
        c = math.exp(delta - low)
        s = math.exp(-low)
        rho, norm = 0.0, 0.0
        for k in range(n_classes):
            wm, wp = w_minus[i, k], w_plus[i, k]
            if wm > _LOG2:
                alpha[i, k] = math.exp(low - wm)
                b[k] = 1.0 - alpha[i, k] * s
            else:
                e = math.expm1(-wm)
                b[k] = -e
                alpha[i, k] = (1.0 + e) / s
            if wp > _LOG2:
                g = (ratio[k] if want_energy else math.exp(w[k] - top)) if lead else math.exp(w[k] + delta)
                h[k] = g - alpha[i, k] * c
            else:
                h[k] = alpha[i, k] * math.expm1(wp) * c
            rho = rho * b[k] + alpha[i, k]
            norm += h[k]
        norm += rho * c
        _leave_one_out(b, loo_all[i])
        ignorance[i] = math.exp(delta - sum_minus) / norm
        total = 0.0
        for k in range(n_classes):
            mass[i, k] = (alpha[i, k] * loo_all[i, k] * c + h[k]) / norm
            pl = (alpha[i, k] * c + h[k]) / norm
            between_pl[i, k] = max(pl - mass[i, k] - ignorance[i], 0.0)
            total += mass[i, k]
        conflict[i] = min(max(-math.expm1(-sum_plus + math.log(norm) - delta), 0.0), 1.0)
        flagged[i] = 1.0 - total - ignorance[i] > BETWEEN_TOL
        factor[i], shift[i] = c / norm, s
    rows = np.flatnonzero(flagged)
    a = np.empty((rows.shape[0], n_classes))
    for r in range(rows.shape[0]):
        a[r] = alpha[rows[r]] * shift[rows[r]]
    integral = pignistic_integrals(a, nodes, weights)
    for r in range(rows.shape[0]):
        i = rows[r]
        for k in range(n_classes):
            # the sum over A with k in A and |A| >= 2 includes Theta, whose share m(Theta) / C BetP has
            between_betp[i, k] = max(alpha[i, k] * factor[i] * (integral[r, k] - loo_all[i, k])
                                     - ignorance[i] / n_classes, 0.0)
    return mass, between_pl, between_betp, ignorance, conflict, energy
