"""Per-sample explanations (explain) with their renderings; the rule list is tested in test_rules.py."""

import dataclasses
import json
import re

import numpy as np
import pytest
from sklearn.datasets import load_wine
from sklearn.preprocessing import MinMaxScaler

from ferl import FERLClassifier

WINE = load_wine()
NAMES = [n.replace("/", "_") for n in WINE.feature_names]
LABELS = np.array(["barolo", "grignolino", "barbera"])


@pytest.fixture(scope="module")
def data():
    X = MinMaxScaler().fit_transform(WINE.data)
    return X, LABELS[WINE.target]


@pytest.fixture(scope="module", params=["compact", "deep"])
def fitted(request, data):
    X, y = data
    return FERLClassifier(request.param, random_state=0).fit(X, y, feature_names=NAMES)


# ---------------------------------------------------------------------- explain
def test_explanation_agrees_with_the_batch_outputs(fitted, data):
    X, _ = data
    x = X[60]
    e = fitted.explain(x)
    ev = fitted.evidence(X[60:61])
    assert e.classes == tuple(fitted.classes_)
    assert e.prediction == fitted.predict(X[60:61])[0]
    np.testing.assert_allclose(e.belief, ev.belief[0])
    np.testing.assert_allclose(e.plausibility, ev.plausibility[0])
    np.testing.assert_allclose(e.probability, fitted.predict_proba(X[60:61])[0])
    assert e.ignorance == pytest.approx(ev.ignorance[0])
    assert e.credal_set == tuple(fitted.classes_[fitted.predict_set(X[60:61])[0]])
    assert e.ood_score == pytest.approx(fitted.ood_score(X[60:61])[0])
    assert e.robustness_radius == pytest.approx(fitted.robustness_radius(X[60:61])[0])
    assert list(e.anomalous_features) == fitted.anomalous_features(X[60:61])[0]


def test_explanation_lists_the_fired_sources_with_firings_and_masses(fitted, data):
    X, _ = data
    e = fitted.explain(X[60])
    phi, _ = fitted._firing(X[60:61])
    t = fitted.tree_
    rules = {r.rule_id: r for r in fitted.rules_}
    sources = fitted._sources()
    assert {s.node for s in e.sources} == set(np.flatnonzero(sources & (phi[0] > 0)))
    assert [s.firing for s in e.sources] == sorted((s.firing for s in e.sources), reverse=True)
    for s in e.sources:
        assert s.firing == phi[0, s.node]
        np.testing.assert_allclose(s.mass, s.firing * t.value[s.node])
        assert s.ignorance == pytest.approx(1 - s.firing)
        if s.rule_id is None:
            assert not t.is_leaf[s.node] and fitted.variant == "compact"  # all-node evidence
        else:
            assert s.conditions == tuple(c.text for c in rules[s.rule_id].conditions)
    leaves = [s for s in e.sources if s.rule_id is not None]
    assert sum(s.firing for s in leaves) == pytest.approx(e.firing) and e.firing == pytest.approx(1.0)


def test_json_and_markdown_renderings(fitted, data):
    X, _ = data
    e = fitted.explain(X[100], top_k=3)
    doc = json.loads(e.to_json())
    assert doc["prediction"] == e.prediction
    assert [c["class"] for c in doc["classes"]] == list(LABELS[np.argsort(LABELS)])
    assert [c["in_set"] for c in doc["classes"]] == [c in e.credal_set for c in e.classes]
    assert [a["name"] for a in doc["anomalous_features"]] == [a.name for a in e.anomalous_features]
    assert len(doc["anomalous_features"]) == 3
    assert len(doc["sources"]) == len(e.sources)
    md = e.to_markdown()
    assert f"**Prediction: {e.prediction}**" in md
    # discount off: every reliability is 1, so no reliability column (6 cells a row, not 7)
    assert all(s.reliability == 1.0 for s in e.sources) and "reliability" not in md
    assert "| rule | firing | IF | THEN | masses |" in md and "|---:|---:|---|---|---|" in md
    for a in e.anomalous_features:
        assert f"| {a.name} |" in md
    for s in e.sources:
        listed = (f"| {s.rule_id} |" if s.rule_id is not None else f"| node {s.node} |") in md
        assert listed == (round(s.firing, 3) > 0 or s is e.sources[0])


def test_an_unbounded_radius_is_strict_json(fitted, data):
    """An infinite certified radius (no point of the domain changes the class) was written as
    ``Infinity``, which strict JSON readers refuse."""
    from dataclasses import replace

    e = replace(fitted.explain(data[0][100]), robustness_radius=float("inf"))

    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    assert json.loads(e.to_json(), parse_constant=refuse)["robustness_radius"] is None


def test_markdown_counts_rules_whose_firing_rounds_to_zero_instead_of_listing_them(fitted, data):
    X, _ = data
    e = fitted.explain(X[100])
    top = e.sources[0]
    faint = tuple(dataclasses.replace(top, rule_id=900 + k, firing=f) for k, f in enumerate((4e-4, 1e-6)))
    md = dataclasses.replace(e, sources=(top, *faint)).to_markdown()
    assert f"| {top.rule_id} |" in md and "| 900 |" not in md and "| 901 |" not in md
    assert "2 more rules fired below 0.0005 (together 0.0004), not listed." in md
    only_faint = dataclasses.replace(e, sources=faint).to_markdown(digits=3)
    assert "| 900 |" in only_faint and "1 more rule fired below 0.0005 (together 1e-06)" in only_faint


def test_explaining_an_input_off_the_support(fitted, data):
    X, _ = data
    far = X[0] + 5.0
    e = fitted.explain(far, top_k=None)
    assert e.sources == () and e.abstain and e.ignorance == 1.0 and e.firing == 0.0
    assert set(e.credal_set) == set(LABELS)
    assert e.robustness_radius == 0.0
    assert sum(a.routing_loss for a in e.anomalous_features) == pytest.approx(1.0)  # eq. 8
    assert "No rule fired" in e.to_markdown()
    assert json.loads(e.to_json())["abstain"] is True


def test_markdown_prints_the_huge_finite_scores_of_a_far_input_in_scientific_notation(fitted, data):
    X, _ = data
    e = fitted.explain(X[0] + np.r_[1e300, np.zeros(X.shape[1] - 1)], top_k=None)
    # the default score's tails grow as a log beyond the training scores; the leaf deviations
    # (z clipped at 1e100: z^2 / d) stay huge and finite
    assert np.isfinite(e.ood_score) and 100 < e.ood_score < 1e4
    md = e.to_markdown()
    assert f"OOD score = {e.ood_score:.3f}," in md
    top = max(e.anomalous_features, key=lambda a: a.deviation)
    assert top.deviation > 1e150 and f"| {top.deviation:.3e} |" in md
    assert max(len(run) for run in re.findall(r"[0-9]+", md)) < 20  # not 200 digits of fixed notation
    assert f"OOD score = {fitted.explain(X[0]).ood_score:.3f}," in fitted.explain(X[0]).to_markdown()


@pytest.mark.parametrize("digits", [-1, 1.5, None, True, "3"])
def test_markdown_refuses_digits_that_are_not_a_non_negative_integer_by_name(fitted, data, digits):
    X, _ = data
    message = f"digits must be a non-negative integer, got {re.escape(repr(digits))}"
    with pytest.raises(ValueError, match=message):
        fitted.explain(X[0]).to_markdown(digits)


def test_explain_takes_exactly_one_valid_sample(fitted, data):
    X, _ = data
    assert fitted.explain(X[:1]).prediction == fitted.explain(X[0]).prediction
    with pytest.raises(ValueError, match="one sample, got 2 rows"):
        fitted.explain(X[:2])
    with pytest.raises(ValueError, match="12 features"):
        fitted.explain(X[0, :12])
    bad = X[0].copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        fitted.explain(bad)


def test_explain_accepts_a_dataframe_row(data):
    pd = pytest.importorskip("pandas")
    X, y = data
    df = pd.DataFrame(X, columns=NAMES)
    clf = FERLClassifier("deep", random_state=0).fit(df, y)
    e = clf.explain(df.iloc[[5]])
    assert e.prediction == clf.predict(df.iloc[[5]])[0]
    assert all(a.name in NAMES for a in e.anomalous_features)
