"""Evidential algebra: paper eq. 4-5, interval dominance, cautious rule (appendix C.1)."""

from itertools import product

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ferl.evidence import combine, discount, interval_dominance

N_CLASSES = 3


def _naive_dempster(masses):
    """Textbook Dempster combination over explicit focal sets (frozensets), pairwise."""
    frame = frozenset(range(N_CLASSES))
    acc = {frame: 1.0}
    for m in masses:
        new, empty = {}, 0.0
        for (a, wa), (b, wb) in product(acc.items(), m.items()):
            inter = a & b
            if inter:
                new[inter] = new.get(inter, 0.0) + wa * wb
            else:
                empty += wa * wb
        z = 1.0 - empty
        acc = {k: v / z for k, v in new.items()}
    return acc


def _node_mass(phi, p):
    frame = frozenset(range(N_CLASSES))
    m = {frozenset([c]): phi * p[c] for c in range(N_CLASSES) if phi * p[c] > 0}
    m[frame] = m.get(frame, 0.0) + (1.0 - phi)
    return m


probs = arrays(np.float64, (4, N_CLASSES), elements=st.floats(0.01, 1.0)).map(
    lambda a: a / a.sum(axis=1, keepdims=True)
)
firings = arrays(np.float64, (1, 4), elements=st.floats(0.0, 0.95))


@settings(max_examples=60, deadline=None)
@given(value=probs, phi=firings)
def test_closed_form_equals_naive_pairwise_dempster(value, phi):
    sources = np.ones(4, dtype=bool)
    ev = combine(phi, value, sources)
    naive = _naive_dempster([_node_mass(phi[0, o], value[o]) for o in range(4)])
    frame = frozenset(range(N_CLASSES))
    for c in range(N_CLASSES):
        assert ev.mass[0, c] == pytest.approx(naive.get(frozenset([c]), 0.0), abs=1e-10)
    assert ev.ignorance[0] == pytest.approx(naive.get(frame, 0.0), abs=1e-10)
    assert ev.mass.sum() + ev.ignorance.sum() == pytest.approx(1.0)


@settings(max_examples=60, deadline=None)
@given(value=probs, phi=firings, extra=st.floats(0.01, 1.0))
def test_adding_a_non_vacuous_source_never_raises_ignorance(value, phi, extra):
    """Paper eq. 5: Z' >= a, hence m'(Theta) <= m(Theta)."""
    base = combine(phi[:, :3], value[:3], np.ones(3, dtype=bool))
    phi4 = phi.copy()
    phi4[0, 3] = extra
    more = combine(phi4, value, np.ones(4, dtype=bool))
    assert more.ignorance[0] <= base.ignorance[0] + 1e-12


@settings(max_examples=60, deadline=None)
@given(value=probs, phi=firings)
def test_interval_dominance_is_pl_geq_max_bel(value, phi):
    ev = combine(phi, value, np.ones(4, dtype=bool))
    expected = ev.plausibility >= ev.belief.max(axis=1, keepdims=True) - 1e-12
    np.testing.assert_array_equal(ev.credal_set, expected)
    assert ev.credal_set.any(axis=1).all()
    np.testing.assert_allclose(ev.pignistic.sum(axis=1), 1.0)


def test_fully_committed_one_hot_gives_singleton():
    value = np.array([[0.0, 1.0, 0.0]])
    ev = combine(np.array([[1.0]]), value, np.array([True]))
    np.testing.assert_array_equal(ev.credal_set, [[False, True, False]])
    assert ev.ignorance[0] == 0.0
    assert not ev.abstain[0]


def test_vacuous_gives_full_frame_and_abstention():
    value = np.array([[0.2, 0.5, 0.3]])
    ev = combine(np.array([[0.0]]), value, np.array([True]))
    assert ev.ignorance[0] == 1.0
    assert ev.abstain[0]
    np.testing.assert_allclose(ev.pignistic, [[1 / 3, 1 / 3, 1 / 3]])


@pytest.mark.parametrize("rule", ["dempster", "cautious"])
def test_total_conflict_is_vacuous_not_nan(rule):
    """Two fully firing sources committed to different classes: Z = 0."""
    value = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    ev = combine(np.array([[1.0, 1.0]]), value, np.ones(2, dtype=bool), rule)
    assert np.isfinite(ev.mass).all() and np.isfinite(ev.ignorance).all()
    if rule == "dempster":
        assert ev.conflict[0] == 1.0
        assert ev.ignorance[0] == 1.0
        assert ev.abstain[0]


def test_sources_mask_excludes_nodes():
    value = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    ev = combine(np.array([[0.9, 0.9]]), value, np.array([False, True]))
    assert np.argmax(ev.mass[0]) == 1
    assert ev.ignorance[0] == pytest.approx(0.1)


@settings(max_examples=40, deadline=None)
@given(value=probs, phi=firings)
def test_cautious_rule_is_idempotent(value, phi):
    """Denoeux's cautious rule: combining a source with itself changes nothing (eq. 13 uses min)."""
    one = combine(phi[:, :1], value[:1], np.ones(1, dtype=bool), "cautious")
    twice = combine(np.repeat(phi[:, :1], 2, axis=1), np.repeat(value[:1], 2, axis=0),
                    np.ones(2, dtype=bool), "cautious")
    np.testing.assert_allclose(twice.mass, one.mass, atol=1e-12)
    np.testing.assert_allclose(twice.ignorance, one.ignorance, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(value=probs, phi=firings)
def test_cautious_is_at_least_as_ignorant_as_dempster_on_repeated_evidence(value, phi):
    rep_phi = np.repeat(phi[:, :1], 3, axis=1)
    rep_val = np.repeat(value[:1], 3, axis=0)
    d = combine(rep_phi, rep_val, np.ones(3, dtype=bool), "dempster")
    c = combine(rep_phi, rep_val, np.ones(3, dtype=bool), "cautious")
    assert c.ignorance[0] >= d.ignorance[0] - 1e-12


def test_interval_dominance_function_matches_eq4_by_hand():
    mass = np.array([[0.5, 0.3, 0.0], [0.6, 0.1, 0.1]])
    ign = np.array([0.2, 0.2])
    np.testing.assert_array_equal(
        interval_dominance(mass, ign), [[True, True, False], [True, False, False]]
    )


def test_unknown_rule_raises():
    with pytest.raises(ValueError, match="unknown combination rule"):
        combine(np.ones((1, 1)), np.ones((1, 2)) / 2, np.ones(1, dtype=bool), "yager")


# ---------------------------------------------------------------------- Shafer's discounting
reliabilities = arrays(np.float64, (1, 4), elements=st.floats(0.0, 1.0))


@settings(max_examples=60, deadline=None)
@given(value=probs, phi=firings, r=reliabilities, rule=st.sampled_from(["dempster", "cautious"]))
def test_discounted_masses_sum_to_one_and_bel_betp_pl_are_ordered(value, phi, r, rule):
    ev = combine(discount(phi, r), value, np.ones(4, dtype=bool), rule)
    assert ev.mass.sum() + ev.ignorance.sum() == pytest.approx(1.0)
    assert (ev.mass >= 0).all() and 0.0 <= ev.ignorance[0] <= 1.0
    assert (ev.belief <= ev.pignistic + 1e-12).all() and (ev.pignistic <= ev.plausibility + 1e-12).all()
    assert ev.credal_set.any()


@settings(max_examples=60, deadline=None)
@given(value=probs, phi=firings, r=reliabilities)
def test_discounting_equals_the_textbook_discount_of_each_node_mass(value, phi, r):
    """Shafer: m^r(A) = r m(A) for A != Theta, m^r(Theta) = 1 - r + r m(Theta); then Dempster."""
    frame = frozenset(range(N_CLASSES))
    masses = []
    for o in range(4):
        m = _node_mass(phi[0, o], value[o])
        disc = {a: r[0, o] * w for a, w in m.items() if a != frame}
        disc[frame] = 1.0 - r[0, o] + r[0, o] * m.get(frame, 0.0)
        masses.append(disc)
    naive = _naive_dempster(masses)
    ev = combine(discount(phi, r), value, np.ones(4, dtype=bool))
    for c in range(N_CLASSES):
        assert ev.mass[0, c] == pytest.approx(naive.get(frozenset([c]), 0.0), abs=1e-10)
    assert ev.ignorance[0] == pytest.approx(naive.get(frame, 0.0), abs=1e-10)


@settings(max_examples=30, deadline=None)
@given(value=probs, phi=firings)
def test_zero_reliability_is_vacuous_and_full_reliability_changes_nothing(value, phi):
    sources = np.ones(4, dtype=bool)
    vacuous = combine(discount(phi, np.zeros_like(phi)), value, sources)
    assert vacuous.ignorance[0] == 1.0 and vacuous.abstain[0]
    np.testing.assert_array_equal(vacuous.mass, 0.0)
    same = combine(discount(phi, np.ones_like(phi)), value, sources)
    base = combine(phi, value, sources)
    np.testing.assert_array_equal(same.mass, base.mass)
    np.testing.assert_array_equal(same.ignorance, base.ignorance)


def test_one_discounted_source_moves_its_committed_mass_to_theta():
    value = np.array([[0.0, 1.0, 0.0]])
    ev = combine(discount(np.array([[1.0]]), np.array([[0.25]])), value, np.array([True]))
    np.testing.assert_allclose(ev.mass, [[0.0, 0.25, 0.0]])
    assert ev.ignorance[0] == pytest.approx(0.75)
    assert ev.abstain[0]  # Pl of every class (>= 0.75) reaches max Bel (0.25)


def test_discount_rejects_bad_reliabilities():
    with pytest.raises(ValueError, match="does not match"):
        discount(np.ones((2, 3)), np.ones((2, 2)))
    for bad in (1.5, -0.1, np.nan):
        with pytest.raises(ValueError, match=r"in \[0, 1\]"):
            discount(np.ones((1, 2)), np.full((1, 2), bad))


def test_interval_dominance_refuses_mismatched_or_non_finite_input():
    mass, ign = np.array([[0.5, 0.3], [0.2, 0.1]]), np.array([0.2, 0.7])
    with pytest.raises(ValueError, match="ignorance"):
        interval_dominance(mass, ign[:1])  # read past its end, the kernel would return garbage
    with pytest.raises(ValueError, match="masses"):
        interval_dominance(mass[0], ign)
    with pytest.raises(ValueError, match="at least one class"):
        interval_dominance(mass[:, :0], ign)
    for bad in (np.nan, np.inf):
        broken = mass.copy()
        broken[1, 0] = bad
        with pytest.raises(ValueError, match="finite"):
            interval_dominance(broken, ign)


def test_interval_dominance_names_the_shapes_it_was_given():
    with pytest.raises(ValueError, match=r"got \(2, 2\) and \(\)"):
        interval_dominance(np.full((2, 2), 0.4), 0.2)  # a scalar ignorance is shape (), not (1,)
    with pytest.raises(ValueError, match=r"got \(\) and \(1,\)"):
        interval_dominance(0.5, np.array([0.5]))
