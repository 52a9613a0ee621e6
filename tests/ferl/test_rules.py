"""Readable rules: merged conditions per feature, rule statistics, export_text, print(clf)."""

import itertools
import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.datasets import load_wine
from sklearn.preprocessing import MinMaxScaler

from ferl import FERLClassifier
from ferl.io import persist
from ferl.rules import extract_rules, path_conditions
from ferl.tree.fuzzy_tree import SPLIT_FIXED, SPLIT_LEARNED, FuzzyTree
from ferl.tree.intervals import Factor, evaluate, spans
from ferl.tree.partitions import SET_NAMES

WINE = load_wine()
NAMES = [n.replace("/", "_") for n in WINE.feature_names]
LABELS = np.array(["barolo", "grignolino", "barbera"])
INF = np.inf
#: Fixed partition of a feature with quantiles 0.2, 0.4, 0.6, 0.8 (ferl.tree.partitions layout).
LOW, MEDIUM, HIGH = (-INF, -INF, 0.2, 0.4), (0.2, 0.4, 0.6, 0.8), (0.6, 0.8, INF, INF)


@pytest.fixture(scope="module")
def data():
    X = MinMaxScaler().fit_transform(WINE.data)
    return X, LABELS[WINE.target]


@pytest.fixture(scope="module", params=["compact", "medium", "deep"])
def fitted(request, data):
    """Each variant; compact on the paper's fixed low / medium / high partitions (its words)."""
    X, y = data
    partition = "fixed" if request.param == "compact" else None
    return FERLClassifier(request.param, partition=partition, random_state=0).fit(X, y, feature_names=NAMES)


# ---------------------------------------------------------------------- hand-built trees
class _Builder:
    """A FuzzyTree grown by hand: ``split`` turns a leaf into an internal node with two leaves."""

    def __init__(self):
        self.tree = FuzzyTree(n_classes=2)
        self.tree.add_node(-1, 0, [0.5, 0.5], 10.0)

    def _split(self, node, feature, kind, fuzzy_set, trap, theta=np.nan, h=np.nan):
        t = self.tree
        t.feature[node], t.kind[node], t.fuzzy_set[node] = feature, kind, fuzzy_set
        t.trap[node] = np.asarray(trap, dtype=np.float64)
        t.threshold[node], t.half_width[node], t.lo[node], t.hi[node] = theta, h, 0.0, 1.0
        t.left[node] = t.add_node(node, t.depth[node] + 1, [0.9, 0.1], 4.0)
        t.right[node] = t.add_node(node, t.depth[node] + 1, [0.2, 0.8], 6.0)
        return t.left[node], t.right[node]

    def ramp(self, node, feature, theta, h):
        """Learned split ``x_f <= theta +- h`` (left) / ``> theta +- h`` (right)."""
        return self._split(node, feature, SPLIT_LEARNED, -1, (-INF, -INF, theta - h, theta + h), theta, h)

    def fixed(self, node, feature, k, sets=(LOW, MEDIUM, HIGH)):
        """Fixed split ``x_f is S`` (left) / ``is not S`` (right), S = low, medium, high for k = 0, 1, 2."""
        return self._split(node, feature, SPLIT_FIXED, k, sets[k])

    def texts(self, node, names=("x0", "x1", "x2")):
        tree = self.tree.finalize() if isinstance(self.tree.feature, list) else self.tree
        return [c.text for c in path_conditions(tree, node, list(names))]


def test_learned_cuts_on_one_feature_merge_into_one_interval():
    b = _Builder()
    left, right = b.ramp(0, 0, 0.5, 0.1)
    mid, top = b.ramp(right, 0, 0.8, 0.05)
    low_a, low_b = b.ramp(left, 1, 0.3, 0.02)
    assert b.texts(mid) == ["x0 is between 0.50 ± 0.10 and 0.80 ± 0.05"]
    assert b.texts(top) == ["x0 > 0.80 ± 0.05"]  # bands apart: the tighter cut is the whole condition
    assert b.texts(low_a) == ["x0 ≤ 0.50 ± 0.10", "x1 ≤ 0.30 ± 0.02"]
    assert b.texts(low_b) == ["x0 ≤ 0.50 ± 0.10", "x1 > 0.30 ± 0.02"]
    assert b.texts(0) == []


def test_overlapping_bands_on_one_side_span_from_support_to_core():
    b = _Builder()
    left, _ = b.ramp(0, 0, 0.5, 0.2)  # membership falls over [0.3, 0.7]
    inner, _ = b.ramp(left, 0, 0.45, 0.05)  # and over [0.4, 0.5]
    # the product is 1 up to 0.3 and 0 from 0.5 on: one band [0.3, 0.5]
    assert b.texts(inner) == ["x0 ≤ 0.40 ± 0.10"]


def test_a_cut_split_again_the_other_way_reads_as_its_band_and_peak():
    b = _Builder()
    _, right = b.ramp(0, 2, 0.5, 0.1)
    both, _ = b.ramp(right, 2, 0.5, 0.1)
    (cond,) = path_conditions(b.tree.finalize(), both, ["x0", "x1", "x2"])
    assert cond.text == "x2 is between 0.40 and 0.60 (membership ≤ 0.25)"
    assert cond.peak == pytest.approx(0.25) and cond.nodes == (0, right)


def test_fixed_sets_on_one_feature_merge_into_one_term():
    b = _Builder()
    is_high, not_high = b.fixed(0, 1, 2)
    low, medium = b.fixed(not_high, 1, 0)
    high_and_medium, high_not_medium = b.fixed(is_high, 1, 1)
    assert b.texts(not_high) == ["x1 is not high"]
    assert b.texts(medium) == ["x1 is medium"]  # not high AND not low, exactly (Ruspini partition)
    assert b.texts(low) == ["x1 is low"]  # low AND not high = low
    # high AND not medium is high squared: same band ends as "high", not the same ramp
    assert b.texts(high_not_medium) == ["x1 > 0.70 ± 0.10"]
    assert b.texts(high_and_medium) == ["x1 is between 0.60 and 0.80 (membership ≤ 0.25)"]


@settings(max_examples=25, deadline=None)
@given(q=st.lists(st.integers(0, 4), min_size=4, max_size=4).map(lambda v: sorted(x / 4 for x in v)))
def test_a_merged_fixed_term_is_printed_only_when_exact(q):
    """Any quantiles (ties included, as on binary concepts) and every path of distinct sets."""
    sets = ((-INF, -INF, q[0], q[1]), tuple(q), (q[2], q[3], INF, INF))
    x = np.r_[np.linspace(-1, 2, 3001), q]
    for combo in itertools.product((None, True, False), repeat=3):
        if combo == (None, None, None):
            continue
        b, node, factors = _Builder(), 0, []
        for k, left in enumerate(combo):
            if left is not None:
                is_k, not_k = b.fixed(node, 0, k, sets)
                node = is_k if left else not_k
                factors.append(Factor(sets[k], left))
        (text,) = b.texts(node)
        term = re.fullmatch(r"x0 is (not )?(low|medium|high)", text)
        if term:
            mu = evaluate([Factor(sets[SET_NAMES.index(term[2])], not term[1])], x)
            np.testing.assert_allclose(evaluate(factors, x), mu, atol=1e-12, err_msg=text)


def test_conditions_follow_the_order_of_their_first_test():
    b = _Builder()
    _, right = b.ramp(0, 2, 0.5, 0.1)
    left, _ = b.ramp(right, 0, 0.3, 0.1)
    leaf, _ = b.ramp(left, 2, 0.9, 0.05)
    assert b.texts(leaf) == ["x2 is between 0.50 ± 0.10 and 0.90 ± 0.05", "x0 ≤ 0.30 ± 0.10"]


def _trapezoids():
    """Learned ramps (-inf, -inf, theta - h, theta + h) and fixed-like trapezoids, either branch.

    Ends are multiples of 1/16 so that ramps are not narrower than float rounding can resolve.
    """
    grid = st.integers(-32, 32).map(lambda v: v / 16)
    ramp = st.tuples(grid, st.integers(1, 16).map(lambda v: v / 16)).map(
        lambda t: (-INF, -INF, t[0] - t[1], t[0] + t[1]))
    ends = st.lists(grid, min_size=4, max_size=4).map(sorted)
    shoulder = st.sampled_from([(0, 0, 0, 0), (1, 1, 0, 0), (0, 0, 1, 1)])  # none, low, high
    trap = st.tuples(ends, shoulder).map(lambda t: tuple(-INF if s and i < 2 else INF if s else v
                                                         for i, (v, s) in enumerate(zip(*t, strict=True))))
    return st.lists(st.tuples(st.one_of(ramp, trap), st.booleans()), min_size=1, max_size=4)


@settings(max_examples=80, deadline=None)
@given(cuts=_trapezoids())
def test_spans_describe_the_merged_membership_exactly(cuts):
    factors = [Factor(trap, left) for trap, left in cuts]
    kinks = [v for trap, _ in cuts for v in trap if np.isfinite(v)]  # a peak or a lone point may be a kink
    x = np.r_[np.linspace(-4, 4, 4001), kinks]
    m = evaluate(factors, x)
    pieces = spans(factors)
    closed = np.zeros_like(x, dtype=bool)
    for s in pieces:  # the ends themselves may or may not belong to a set: only interiors are exact
        lo, hi = s.support
        here = (x >= lo) & (x <= hi)
        closed |= here
        assert (m[(x > lo) & (x < hi)] > 0).all() and (m[here] <= s.peak + 1e-12).all()
        assert lo < hi or m[x == lo].min() > 0
        if s.core is None:
            fine = evaluate(factors, np.r_[np.linspace(lo, hi, 100_001), [k for k in kinks if lo <= k <= hi]])
            assert s.peak < 1 and s.peak - 1e-3 <= fine.max() <= s.peak + 1e-12
        else:
            c0, c1 = s.core
            assert s.peak == 1 and lo <= c0 <= c1 <= hi
            assert (m[(x > c0) & (x < c1)] == 1).all() and (m[here & ((x < c0) | (x > c1))] < 1).all()
            assert c0 < c1 or m[x == c0].min() == 1
    assert (m[~closed] == 0).all()
    assert [s.support for s in pieces] == sorted(s.support for s in pieces)


# ---------------------------------------------------------------------- fitted models
def test_no_rule_tests_a_feature_twice(fitted):
    for r in fitted.rules_:
        features = [c.feature for c in r.conditions]
        assert len(features) == len(set(features)), r.text()
        leading = [c.split(" ")[0] for c in r.premise().split(" AND ")]
        assert leading == [fitted.feature_names_[f] for f in features]


def test_conditions_use_bands_for_learned_splits_and_terms_for_fixed_partitions(fitted):
    conds = [c.text for r in fitted.rules_ for c in r.conditions]
    band = r"-?\d+\.\d+( ± \d+\.\d+)?"
    piece = (rf"((≤|>|=) {band}|is between {band} and {band})"
             rf"( \(membership ≤ [01]\.\d+\))?")
    term = r"is (not )?(low|medium|high)"
    assert conds and all(re.match(rf"^\S+ ({piece}( or {piece})*|{term})$", c) for c in conds), conds
    has_term = [bool(re.match(rf"^\S+ {term}$", c)) for c in conds]
    # a term for every single fixed set (merged sets read as a term when exactly one, else numeric)
    assert any(has_term) if fitted.partition == "fixed" else not any(has_term)


def test_export_text_names_every_feature_and_is_stable_for_a_seed(fitted, data):
    X, y = data
    text = fitted.export_text()
    for f in np.unique(fitted.tree_.feature[fitted.tree_.feature >= 0]):
        assert NAMES[f] in text
    assert not re.search(r"\bx\d+\b", text)
    assert text.count("\n") + 1 == fitted.n_rules_
    again = clone(fitted).fit(X, y, feature_names=NAMES)
    assert again.export_text() == text


def test_export_text_digits_reach_the_thresholds(data):
    X, y = data
    clf = FERLClassifier("medium", random_state=0).fit(X, y, feature_names=NAMES)
    for line in clf.export_text(digits=8).splitlines():
        premise = line.split(": IF ", 1)[1].split(" THEN ", 1)[0]
        numbers = re.findall(r"\d+\.\d+", premise)
        assert numbers and all(len(n.split(".")[1]) >= 8 for n in numbers), line
        assert re.search(r"confidence \d\.\d{8}, support \d+\.\d{8}, alone \d\.\d{8}", line)
    with pytest.raises(ValueError, match="digits"):
        clf.export_text(digits=-1)


def test_rules_carry_id_consequent_support_confidence_and_alone(fitted, data):
    X, _ = data
    t = fitted.tree_
    rules = fitted.rules_
    assert [r.rule_id for r in rules] == list(range(fitted.n_rules_))
    assert [r.node for r in rules] == list(np.flatnonzero(t.is_leaf))
    for r in rules:
        assert sum(r.distribution.values()) == pytest.approx(1.0)
        assert list(r.distribution) == list(LABELS[np.argsort(LABELS)])
        assert r.prediction == max(r.distribution, key=r.distribution.get)
        assert r.confidence == max(r.distribution.values())
        assert r.support == pytest.approx(t.weight[r.node])
        assert 1 <= len(r.conditions) <= t.depth[r.node]
        assert f"rule {r.rule_id}: IF " in r.text() and f"THEN {r.prediction}" in r.text()
    assert sum(r.support for r in rules) == pytest.approx(len(X))
    json.dumps([r.to_dict() for r in rules])
    # alone: the share of training samples whose leaf firing exceeds 1/2 (brute force)
    phi = fitted._firing(X)[0][:, t.is_leaf]
    np.testing.assert_allclose([r.alone for r in rules], (phi > 0.5).mean(axis=0))
    assert sum(r.alone for r in rules) <= 1.0


def test_alone_counts_the_samples_a_rule_holds_by_itself():
    X = np.r_[np.zeros(30), np.ones(10)].reshape(-1, 1)
    y = np.r_[np.zeros(30), np.ones(10)]
    w = np.r_[np.ones(30), 3 * np.ones(10)]
    clf = FERLClassifier("deep", random_state=0).fit(X, y, sample_weight=w)
    assert clf.n_rules_ == 2
    # bands inside the gap: each cluster fires one rule fully, shares follow the weights
    np.testing.assert_allclose(sorted(r.alone for r in clf.rules_), [0.5, 0.5])
    np.testing.assert_allclose(sorted(r.support for r in clf.rules_), [30, 30])


def test_alone_survives_save_and_load_and_older_files_print_na(tmp_path, data):
    X, y = data
    clf = FERLClassifier("compact", random_state=0).fit(X, y)
    clf.save(tmp_path / "m")
    loaded = FERLClassifier.load(tmp_path / "m")
    np.testing.assert_array_equal(loaded.rule_alone_, clf.rule_alone_)
    assert loaded.export_text() == clf.export_text()
    meta, arrays = persist.read_model(tmp_path / "m")
    persist.write_model(tmp_path / "old", meta, {k: v for k, v in arrays.items() if k != "rule_alone"})
    old = FERLClassifier.load(tmp_path / "old")
    assert old.rule_alone_ is None and all(r.alone is None for r in old.rules_)
    assert "alone n/a" in str(old) and "| n/a |" in old.export_text(style="markdown")
    arrays["rule_alone"] = arrays["rule_alone"] + 2.0
    persist.write_model(tmp_path / "bad", meta, arrays)
    with pytest.raises(ValueError, match="rule_alone"):
        FERLClassifier.load(tmp_path / "bad")


def test_a_rule_holding_all_the_weight_has_share_one_and_its_model_loads(tmp_path):
    """The held weight was a dot product, the total a sum: summed in other orders, a single rule's
    share came out 1.0000000000000002, and load refused the file ("rule_alone is not one share in
    [0, 1] per rule")."""
    rng = np.random.default_rng(1)
    X, y, w = rng.normal(size=(50, 2)), np.arange(50) % 2, rng.random(50)
    clf = FERLClassifier("compact", random_state=0, max_rules=2).fit(X, y, sample_weight=w)
    assert clf.n_rules_ == 1
    assert clf.rule_alone_.tolist() == [1.0]
    loaded = FERLClassifier.load(clf.save(tmp_path / "m"))
    assert loaded.rule_alone_.tolist() == [1.0]


def test_markdown_rule_table_and_bad_style(fitted):
    md = fitted.export_text(style="markdown")
    lines = md.splitlines()
    assert lines[0] == "| rule | IF | THEN | confidence | support | alone | distribution |"
    assert len(lines) == fitted.n_rules_ + 4
    assert lines[-1].startswith("Confidence = the class's consequent mass, support = soft training weight")
    for r, line in zip(fitted.rules_, lines[2:-2], strict=True):
        assert line.startswith(f"| {r.rule_id} | {r.premise()} | {r.prediction} | {r.confidence:.2f} |")
    with pytest.raises(ValueError, match="unknown style 'html'"):
        fitted.export_text(style="html")


def test_print_shows_the_short_rule_list_and_repr_stays_sklearns(fitted):
    text = str(fitted)
    rules = fitted.rules_
    assert text.startswith("> ---") and f"{repr(fitted)}: {fitted.n_rules_} rules" in text
    lines = [line for line in text.splitlines() if not line.startswith(">")]
    assert lines == [r.short() for r in rules]
    assert all("[" not in line.split(" THEN ")[1] for line in lines)  # no distribution in the short list
    assert "rule 0" not in repr(fitted) and repr(fitted).startswith("FERLClassifier(")
    unfitted = FERLClassifier("medium")
    assert str(unfitted) == repr(unfitted) == "FERLClassifier(variant='medium')"


def test_extract_rules_reads_a_hand_built_tree():
    b = _Builder()
    left, right = b.ramp(0, 0, 0.5, 0.1)
    tree = b.tree.finalize()
    rules = extract_rules(tree, ["size"], np.array(["a", "b"]), np.array([0.3, 0.6]))
    assert [r.text() for r in rules] == [
        "rule 0: IF size ≤ 0.50 ± 0.10 THEN a [a: 0.90, b: 0.10] (confidence 0.90, support 4.00, alone 0.30)",
        "rule 1: IF size > 0.50 ± 0.10 THEN b [a: 0.20, b: 0.80] (confidence 0.80, support 6.00, alone 0.60)",
    ]
