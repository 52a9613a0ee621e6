"""Evidential read-out of a fuzzy tree: Dempster-Shafer masses and their summaries (paper section 3.2).

Every evidence source (a node that fires) is a reliability-discounted Bayesian mass function
``m_o({c}) = phi_o p_o(c)``, ``m_o(Theta) = 1 - phi_o``. Such masses stay closed under Dempster's rule:
the combination has focal sets only on singletons and on Theta, so it is stored as a singleton-mass
matrix plus an ignorance vector.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ferl.tree.firing import Firing

__all__ = [
    "Evidence",
    "dempster_combine",
    "cautious_combine",
    "pignistic",
    "interval_dominance",
    "combine",
    "discount",
    "discount_evidence",
    "combine_sparse",
]

#: Tolerance of the interval-dominance comparison (absorbs floating-point round-off).
DOMINANCE_TOL = 1e-12
#: Cautious rule: firings are clipped to ``1 - CAUTIOUS_EPS`` so every source is non-dogmatic.
CAUTIOUS_EPS = 1e-9


@njit(cache=True)
def dempster_combine(start, count, rows, phi, n, value, sources):
    """Dempster's rule over the active sources of each sample (paper eq. 4, algorithm 1 lines 6-8).

    Sources are combined one at a time with the exact recurrence
    ``m'(c) = m(c)(1 - phi + phi p(c)) + m(Theta) phi p(c)``, ``m'(Theta) = m(Theta)(1 - phi)``,
    normalising after each step. Expanded, this is the closed form of eq. 4,
    ``m~(Theta) = prod(1 - phi_o)``, ``m~({c}) = prod(1 - phi_o + phi_o p_o(c)) - m~(Theta)``, but it has
    no cancellation and no underflow. Total conflict (``Z = 0``) and no firing give the vacuous mass.

    Parameters
    ----------
    start, count, rows, phi : ndarrays
        Sparse firing strengths (`ferl.tree.firing.sparse_firing`): node ``o`` fires on the samples
        ``rows[start[o]:start[o] + count[o]]`` with ``phi`` at the same positions; 0 elsewhere.
        Each sample's sources are combined in node order, one node at a time for all samples.
    n : int
        Number of samples.
    value : ndarray of shape (n_nodes, n_classes), float64
        Consequent class distributions p_o (rows sum to 1).
    sources : ndarray of shape (n_nodes,), bool
        Nodes that may act as evidence sources (leaves, or every non-root node).

    Returns
    -------
    mass : ndarray of shape (n_samples, n_classes), float64
        Normalised singleton masses m({c}).
    ignorance : ndarray of shape (n_samples,), float64
        m(Theta); ``mass.sum(1) + ignorance == 1``.
    conflict : ndarray of shape (n_samples,), float64 in [0, 1]
        ``1 - Z``, the mass Dempster's rule assigned to the empty set before normalising.
    """
    n_classes = value.shape[1]
    mass = np.zeros((n, n_classes))
    ignorance = np.ones(n)
    conflict = np.zeros(n)
    z_total = np.ones(n)
    vacuous = np.zeros(n, dtype=np.bool_)
    for o in range(start.shape[0]):
        if not sources[o]:
            continue
        for e in range(start[o], start[o] + count[o]):
            i = rows[e]
            p = phi[e]
            if p <= 0.0 or vacuous[i]:
                continue
            mt = ignorance[i]
            z = mt * (1.0 - p)
            for c in range(n_classes):
                pc = p * value[o, c]
                mass[i, c] = mass[i, c] * (1.0 - p + pc) + mt * pc
                z += mass[i, c]
            if z <= 0.0:
                vacuous[i] = True
                continue
            ignorance[i] = mt * (1.0 - p) / z
            for c in range(n_classes):
                mass[i, c] /= z
            z_total[i] *= z
    for i in range(n):
        if vacuous[i]:
            mass[i, :] = 0.0
            ignorance[i] = 1.0
            conflict[i] = 1.0
        else:
            conflict[i] = 1.0 - z_total[i]
    return mass, ignorance, conflict


@njit(cache=True)
def cautious_combine(start, count, rows, phi, n, value, sources):
    """Denoeux's cautious rule over singleton canonical weights (paper appendix C.1, eq. 13).

    Each source's singleton weight is ``w_o(c) = (1 - phi_o) / (1 - phi_o + phi_o p_o(c))`` (1 when
    ``p_o(c) = 0``); the combination keeps ``w(c) = min_o w_o(c)``, so repeated support does not
    compound, and the result is the normalised conjunctive combination of the simple mass functions
    ``{c}^{w(c)}``: ``m~(Theta) = prod_c w(c)``, ``m~({c}) = (1 - w(c)) prod_{c' != c} w(c')``. Firings
    are clipped to ``1 - CAUTIOUS_EPS`` (the rule needs non-dogmatic sources). Total conflict gives
    the vacuous mass.

    Parameters and returns are those of `dempster_combine`.
    """
    n_classes = value.shape[1]
    mass = np.zeros((n, n_classes))
    ignorance = np.ones(n)
    conflict = np.zeros(n)
    w = np.ones((n, n_classes))
    for o in range(start.shape[0]):
        if not sources[o]:
            continue
        for e in range(start[o], start[o] + count[o]):
            i = rows[e]
            p = min(phi[e], 1.0 - CAUTIOUS_EPS)
            if p <= 0.0:
                continue
            for c in range(n_classes):
                pc = value[o, c]
                if pc > 0.0:
                    wc = (1.0 - p) / (1.0 - p + p * pc)
                    if wc < w[i, c]:
                        w[i, c] = wc
    for i in range(n):
        mt = 1.0
        for c in range(n_classes):
            mt *= w[i, c]
        z = mt
        for c in range(n_classes):
            others = 1.0
            for k in range(n_classes):
                if k != c:
                    others *= w[i, k]
            mass[i, c] = (1.0 - w[i, c]) * others
            z += mass[i, c]
        if z <= 0.0:
            mass[i, :] = 0.0
            conflict[i] = 1.0
            continue
        for c in range(n_classes):
            mass[i, c] /= z
        ignorance[i] = mt / z
        conflict[i] = 1.0 - z
    return mass, ignorance, conflict


def pignistic(mass: np.ndarray, ignorance: np.ndarray) -> np.ndarray:
    """Pignistic probability ``BetP(c) = m({c}) + m(Theta) / C``.

    Parameters
    ----------
    mass : ndarray of shape (n, C); ignorance : ndarray of shape (n,)

    Returns
    -------
    ndarray of shape (n, C), rows summing to 1.
    """
    return mass + ignorance[:, None] / mass.shape[1]


def interval_dominance(mass: np.ndarray, ignorance: np.ndarray, between_pl: np.ndarray | None = None
                       ) -> np.ndarray:
    """Credal prediction set by interval dominance (paper eq. 4).

    ``S(x) = {c : Pl(c) >= max_j Bel(j)} = {c : m({c}) >= max_j m({j}) - m(Theta)}``, compared with
    tolerance `DOMINANCE_TOL`; ``Pl`` adds ``between_pl`` (`Evidence`) when given. Never empty:
    the best-supported class is always in it.

    Returns
    -------
    ndarray of shape (n, C), bool

    Raises
    ------
    ValueError
        ``mass`` not 2-D or without classes, ``ignorance`` not of shape (n,), or a value NaN or
        infinite.
    """
    mass = np.asarray(mass, dtype=np.float64)  # not yet contiguous: that makes a scalar shape (1,)
    ignorance = np.asarray(ignorance, dtype=np.float64)
    if between_pl is not None:
        between_pl = np.asarray(between_pl, dtype=np.float64)
        if between_pl.shape != mass.shape or not np.isfinite(between_pl).all():
            raise ValueError(f"interval_dominance: between_pl must be finite and of the masses' shape "
                             f"{mass.shape}, got {between_pl.shape}")
        mass_pl = mass + between_pl

    if mass.ndim != 2 or ignorance.shape != mass.shape[:1]:
        raise ValueError(f"interval_dominance needs masses (n, C) and ignorance (n,); got {mass.shape} "
                         f"and {ignorance.shape}")
    mass, ignorance = np.ascontiguousarray(mass), np.ascontiguousarray(ignorance)
    if not (np.isfinite(mass).all() and np.isfinite(ignorance).all()):
        raise ValueError("interval_dominance: the masses and the ignorance must be finite (NaN or inf given)")
    if mass.shape[1] == 0:
        raise ValueError("interval_dominance needs at least one class (masses of shape (n, 0) given)")
    pl_part = mass if between_pl is None else np.ascontiguousarray(mass_pl)
    return _dominance(mass, pl_part, ignorance, DOMINANCE_TOL)


@njit(cache=True)
def _dominance(mass, pl_part, ignorance, tol):
    """`interval_dominance` row by row: numpy's ``max(axis=1)`` over a few classes was a visible
    share of a large read-out (docs/results/speed.md); the same comparisons, so the same sets.
    ``pl_part`` is ``Pl - m(Theta)``."""
    n, n_classes = mass.shape
    out = np.empty((n, n_classes), dtype=np.bool_)
    for i in range(n):
        best = mass[i, 0]
        for c in range(1, n_classes):
            best = max(best, mass[i, c])
        for c in range(n_classes):
            out[i, c] = pl_part[i, c] + ignorance[i] >= best - tol
    return out


@dataclass(frozen=True)
class Evidence:
    """Combined evidential output for a batch of samples.

    The tree's combination (paper eq. 4) has focal sets on the singletons and on Theta only. A
    mass function with other focal sets (the learned weights of evidence, `ferl.evidence.weights`)
    also carries, per class, the mass of the focal sets strictly between {c} and Theta that
    contain c: what they add to the plausibility and to the pignistic probability.

    Attributes
    ----------
    mass : ndarray of shape (n_samples, n_classes)
        Singleton masses m({c}) = Bel(c), in [0, 1].
    ignorance : ndarray of shape (n_samples,)
        m(Theta) in [0, 1]; 1 is the vacuous mass (no evidence).
    conflict : ndarray of shape (n_samples,)
        Mass on the empty set before normalisation, 1 - Z, in [0, 1].
    between_pl : ndarray of shape (n_samples, n_classes) or None
        ``sum m(A)`` over the focal sets A with ``{c} < A < Theta``, ``c in A``; None (the tree's
        evidence) means 0.
    between_betp : ndarray of shape (n_samples, n_classes) or None
        ``sum m(A) / |A|`` over the same sets; None means 0.
    """

    mass: np.ndarray
    ignorance: np.ndarray
    conflict: np.ndarray
    between_pl: np.ndarray | None = None
    between_betp: np.ndarray | None = None

    @property
    def belief(self) -> np.ndarray:
        """Bel(c) = m({c}), shape (n_samples, n_classes)."""
        return self.mass

    @property
    def plausibility(self) -> np.ndarray:
        """Pl(c) = m({c}) + m(Theta) (+ `between_pl`), shape (n_samples, n_classes)."""
        pl = self.mass + self.ignorance[:, None]
        return pl if self.between_pl is None else pl + self.between_pl

    @property
    def pignistic(self) -> np.ndarray:
        """BetP, shape (n_samples, n_classes); see `pignistic` (+ `between_betp`)."""
        betp = pignistic(self.mass, self.ignorance)
        return betp if self.between_betp is None else betp + self.between_betp

    @property
    def credal_set(self) -> np.ndarray:
        """Interval-dominance set S(x), bool of shape (n_samples, n_classes)."""
        return interval_dominance(self.mass, self.ignorance, self.between_pl)

    @property
    def abstain(self) -> np.ndarray:
        """True where S(x) is the whole frame Theta, shape (n_samples,)."""
        return self.credal_set.all(axis=1)


def discount(phi: np.ndarray, reliability: np.ndarray) -> np.ndarray:
    """Shafer's discounting of every node's mass by a reliability (beyond the paper).

    Discounting a mass function ``m`` at reliability ``r`` in [0, 1] keeps ``r m(A)`` on every focal
    set ``A != Theta`` and moves the rest to ``Theta`` (Shafer 1976, ch. 11). For the node masses
    ``m_o({c}) = phi_o p_o(c)``, ``m_o(Theta) = 1 - phi_o`` of section 3.2 this gives
    ``m_o^r({c}) = r_o phi_o p_o(c)``, ``m_o^r(Theta) = 1 - r_o phi_o``: a node mass with firing
    ``r_o phi_o``. The discounted masses stay in the class that `dempster_combine` and
    `cautious_combine` handle, so every identity of the read-out (masses summing to 1,
    ``Bel <= BetP <= Pl``, vacuous input -> Theta) holds unchanged; ``r = 1`` leaves the read-out
    bit for bit, ``r = 0`` makes the node vacuous.

    Parameters
    ----------
    phi : ndarray of shape (n_samples, n_nodes), float64 in [0, 1]
    reliability : ndarray of shape (n_samples, n_nodes), float64 in [0, 1]

    Returns
    -------
    ndarray of shape (n_samples, n_nodes), float64 in [0, 1]
        The discounted firings ``r_o phi_o``.

    Raises
    ------
    ValueError
        Shapes differ or a reliability lies outside [0, 1] (or is NaN).
    """
    phi = np.asarray(phi, dtype=np.float64)
    reliability = np.asarray(reliability, dtype=np.float64)
    if phi.shape != reliability.shape:
        raise ValueError(f"reliability of shape {reliability.shape} does not match firing {phi.shape}")
    if not ((reliability >= 0.0) & (reliability <= 1.0)).all():
        raise ValueError("reliabilities must lie in [0, 1]")
    return phi * reliability


def discount_evidence(ev: Evidence, reliability: np.ndarray) -> Evidence:
    """Shafer's discounting of the combined evidence of every sample by a reliability (beyond the
    paper; the ``"typical"`` novelty discount, `ferl.novelty.discount`).

    ``m^r({c}) = r m({c})``, ``m^r(Theta) = 1 - r (1 - m(Theta))`` (Shafer 1976, ch. 11): the
    discounted mass is the mixture ``r m + (1 - r) m_vacuous``, so it sums to 1, keeps
    ``Bel <= BetP <= Pl`` and the argmax of ``BetP`` (``BetP^r = r BetP + (1 - r) / C``), and a
    vacuous ``m`` stays vacuous; ``r = 1`` leaves ``ev`` bit for bit, ``r = 0`` makes it vacuous.
    The credal set only grows: class ``c`` joins it once ``r <= 1 / (1 + m(c*) - m(c) - m(Theta))``,
    ``c*`` the class of largest mass, so the input abstains once that holds for its least-massive
    class. The conflict is kept (it is the combination's, before discounting).

    Parameters
    ----------
    ev : Evidence
        Combined masses of ``n`` samples.
    reliability : ndarray of shape (n_samples,), float64 in [0, 1]

    Returns
    -------
    Evidence

    Raises
    ------
    ValueError
        ``reliability`` not of shape (n_samples,), or a value outside [0, 1] (or NaN).
    """
    reliability = np.asarray(reliability, dtype=np.float64)
    if reliability.shape != ev.ignorance.shape:
        raise ValueError(f"reliability of shape {reliability.shape} does not match "
                         f"{ev.ignorance.shape[0]} samples")
    if not ((reliability >= 0.0) & (reliability <= 1.0)).all():
        raise ValueError("reliabilities must lie in [0, 1]")
    if (reliability == 1.0).all():
        return ev
    r = reliability[:, None]
    return Evidence(mass=ev.mass * r, ignorance=1.0 - reliability * (1.0 - ev.ignorance),
                    conflict=ev.conflict,
                    between_pl=None if ev.between_pl is None else ev.between_pl * r,
                    between_betp=None if ev.between_betp is None else ev.between_betp * r)


_RULES = {"dempster": dempster_combine, "cautious": cautious_combine}


def combine(phi: np.ndarray, value: np.ndarray, sources: np.ndarray, rule: str = "dempster") -> Evidence:
    """Combine node masses into an `Evidence` object.

    Parameters
    ----------
    phi : ndarray of shape (n_samples, n_nodes), float64 in [0, 1]
    value : ndarray of shape (n_nodes, n_classes), float64
    sources : ndarray of shape (n_nodes,), bool
    rule : {"dempster", "cautious"}

    Raises
    ------
    ValueError
        Unknown rule.
    """
    return combine_sparse(Firing.from_dense(phi), value, sources, rule)


def combine_sparse(firing: Firing, value: np.ndarray, sources: np.ndarray,
                   rule: str = "dempster") -> Evidence:
    """`combine` on sparse firings (`ferl.tree.firing.Firing`): O(fired nodes x classes) per sample."""
    if rule not in _RULES:
        raise ValueError(f"unknown combination rule {rule!r}; expected one of {sorted(_RULES)}")
    mass, ignorance, conflict = _RULES[rule](
        firing.start, firing.count, firing.rows, firing.phi, firing.n_samples,
        np.ascontiguousarray(value, dtype=np.float64),
        np.ascontiguousarray(sources, dtype=np.bool_),
    )
    return Evidence(mass=mass, ignorance=ignorance, conflict=conflict)
