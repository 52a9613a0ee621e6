"""Concept heads: registry, sizes, unseen classes, concept names, evaluation, save/load."""

from __future__ import annotations

import hashlib
import json
import warnings

import numpy as np
import pytest
import skops.io
from sklearn.preprocessing import FunctionTransformer

from cbm.heads import HEADS, FERLHead, load_head, make_head
from cbm.heads.fit import evaluate_head
from ferl.io.persist import current_folder

K = 10
NAMES = [f"concept_{j}" for j in range(K)]
CLASSES = np.array(["albatross", "bunting", "cardinal", "dove"])


def _world(seed: int, n: int = 240):
    """Class-name labels and concept probabilities: concepts 0-3 encode the class, 4-9 are noise."""
    rng = np.random.default_rng(seed)
    y_idx = rng.integers(0, len(CLASSES), n)
    code = np.array([[0, 0, 1, 1], [0, 1, 0, 1], [1, 1, 0, 0], [1, 0, 1, 0]])  # class x concept 0-3
    labels = np.concatenate([code[y_idx], rng.random((n, K - 4)) < 0.5], axis=1).astype(float)
    X = np.clip(0.15 + 0.7 * labels + rng.normal(0, 0.15, (n, K)), 0, 1)
    return X, CLASSES[y_idx]


@pytest.fixture(scope="module")
def fitted():
    X, y = _world(0)
    heads = {}
    for name in HEADS:
        options = {"lr-restricted": {"n_concepts": 3}, "cart-compact": {"max_leaf_nodes": 4}}.get(name, {})
        heads[name] = make_head(name, seed=0, **options).fit(X, y, NAMES)
    return heads


def test_registry_names_and_unknown_head():
    assert list(HEADS) == ["ferl-compact", "ferl-medium", "ferl-deep", "cart", "cart-compact", "lr",
                           "lr-restricted"]
    with pytest.raises(ValueError, match="known heads: .*ferl-deep"):
        make_head("ferl-huge")


@pytest.mark.parametrize("name", list(HEADS))
def test_heads_learn_the_concept_code(fitted, name):
    X, y = _world(1)
    head = fitted[name]
    proba = head.predict_proba(X, NAMES)
    assert proba.shape == (len(y), 4)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-9)
    assert list(head.classes_) == list(CLASSES)
    floor = 0.6 if name == "ferl-compact" else 0.85
    assert np.mean(head.predict(X) == y) > floor
    metrics = evaluate_head(head, X, y)
    assert metrics["accuracy"] == pytest.approx(np.mean(head.predict(X) == y))
    if name != "cart-compact":  # four leaves give four confidence values, too coarse to rank by
        assert 0 <= metrics["aurc"] <= 100 * (1 - metrics["accuracy"]) + 1e-9  # ranking never hurts here
    assert 0 <= metrics["ece"] <= 1


def test_sizes(fitted):
    ferl = fitted["ferl-deep"]
    assert ferl.size() == {
        "rules": ferl.model_.n_rules_,
        "nonzero_weights": None,
        "concepts_used": len(set(ferl.model_.tree_.feature[ferl.model_.tree_.feature >= 0])),
        "evidence": "tree",  # the learner's preset: the paper's tree evidence
    }
    assert fitted["cart"].size()["rules"] == fitted["cart"].model_.get_n_leaves()
    assert fitted["cart-compact"].size()["rules"] == 4 < fitted["cart"].size()["rules"]
    assert fitted["lr"].size() == {"rules": None, "nonzero_weights": 4 * K, "concepts_used": K}
    assert fitted["lr-restricted"].size() == {"rules": None, "nonzero_weights": 4 * 3, "concepts_used": 3}
    for name in ("ferl-compact", "ferl-medium", "ferl-deep", "cart"):
        used = fitted[name].concepts_used()
        assert set(used) <= set(range(K)) and 1 <= len(used) == fitted[name].size()["concepts_used"]


def test_a_ferl_deep_with_learned_weights_counts_every_concept_it_reads():
    # a two-row train table: one rule and no split ("1 rules, 0 concepts"), while the learned weights
    # read the three concepts that vary; lr-restricted sized from it refused to fit
    X, y, names = np.array([[0.9, 0.1, 0.5, 0.2], [0.1, 0.8, 0.5, 0.3]]), ["a", "b"], ["p", "q", "r", "s"]
    deep = make_head("ferl-deep", settings="concepts").fit(X, y, names)
    assert deep.size() == {"rules": 1, "nonzero_weights": None, "concepts_used": 3, "evidence": "learned"}
    assert deep.concepts_used().tolist() == [0, 1, 3] and "1 rules over 3 concepts" in deep.describe()
    restricted = make_head("lr-restricted", n_concepts=deep.size()["concepts_used"]).fit(X, y, names)
    assert restricted.size()["concepts_used"] == 3


def test_restricted_lr_keeps_the_largest_weight_concepts(fitted):
    head = fitted["lr-restricted"]
    assert set(head.selected_) <= {0, 1, 2, 3}  # the four informative concepts outrank the noise
    assert "Concepts kept (3" in head.describe()
    X, y = _world(1)
    assert np.mean(head.predict(X) == y) > 0.85


def test_evaluating_on_a_class_never_seen_in_fit_raises(fitted):
    X, y = _world(2, n=50)
    y = y.copy()
    y[[3, 7]] = "eagle"
    for head in fitted.values():
        with pytest.raises(ValueError, match=r"2 row\(s\) of class\(es\) it never saw in fit: \['eagle'\]"):
            evaluate_head(head, X, y)


def test_ferl_set_metrics(fitted):
    X, y = _world(3)
    m = evaluate_head(fitted["ferl-deep"], X, y)
    assert {"coverage", "determinacy", "mean_set_size", "abstention_rate", "u65", "u80"} <= set(m)
    assert m["coverage"] >= m["accuracy"]  # the arg-max class is always in the credal set
    assert 1 <= m["mean_set_size"] <= 4 and m["u65"] <= m["u80"] <= m["coverage"]
    assert "coverage" not in evaluate_head(fitted["cart"], X, y)


def test_rules_name_the_concepts(fitted):
    text = fitted["ferl-deep"].describe()
    assert "rules over" in text and any(n in text for n in NAMES[:4]) and "x0" not in text
    assert "concept_" in fitted["cart"].describe()
    assert "**albatross**" in fitted["lr"].describe()


def test_other_concept_names_and_bad_vectors_raise(fitted):
    X, _ = _world(4, n=20)
    head = fitted["lr"]
    with pytest.raises(ValueError, match="concept_9"):
        head.predict_proba(X, NAMES[:-1] + ["concept_x"])
    with pytest.raises(ValueError, match=r"shape \(n, 10\)"):
        head.predict(X[:, :5])
    X[2, 6] = np.nan
    with pytest.raises(ValueError, match="row 2, concept 'concept_6'"):
        head.predict(X)
    with pytest.raises(ValueError, match="n_concepts"):
        make_head("lr-restricted").fit(*_world(0), NAMES)
    with pytest.raises(ValueError, match="max_leaf_nodes"):  # was silently an unbounded CART
        make_head("cart-compact").fit(*_world(0), NAMES)


@pytest.mark.parametrize("name", list(HEADS))
def test_save_load_round_trip_is_identical(fitted, name, tmp_path):
    head = fitted[name]
    path = head.save(tmp_path / name)
    model = {"model.skops"} if name.startswith("cart") else {"model.json", "model.npz"}
    assert {p.name for p in current_folder(path).iterdir()} == {"head.json", "rules.md", *model}
    loaded = load_head(path)
    X, y = _world(5)
    np.testing.assert_array_equal(loaded.predict_proba(X), head.predict_proba(X))
    np.testing.assert_array_equal(loaded.predict(X), head.predict(X))
    assert loaded.size() == head.size() and loaded.concept_names_ == NAMES
    assert loaded.describe() == head.describe()
    if name == "cart-compact":  # a refit of the loaded head keeps its size (was None: unbounded)
        assert loaded.max_leaf_nodes == head.max_leaf_nodes == 4
    if isinstance(head, FERLHead):
        np.testing.assert_array_equal(loaded.predict_set(X), head.predict_set(X))


def test_same_seed_same_model():
    X, y = _world(6)
    a = make_head("ferl-deep", seed=3).fit(X, y, NAMES)
    b = make_head("ferl-deep", seed=3).fit(X, y, NAMES)
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    assert a.describe() == b.describe()


@pytest.mark.parametrize("text, match", [
    ("{", "not valid JSON"), ("[]", "JSON object"), ('{"schema_version": 1}', "lacks the fields"),
    ('{"schema_version": 1, "head": "lr", "kind": "lr", "seed": 0, "concept_names": ["a", "a", "c"]}',
     "unique names"),
])
def test_load_head_rejects_a_corrupted_head_json(tmp_path, text, match):
    rng = np.random.default_rng(0)
    X = rng.random((40, 3))
    y = (X[:, 0] > 0.5).astype(int)
    make_head("lr").fit(X, y, ["a", "b", "c"]).save(tmp_path)
    (current_folder(tmp_path) / "head.json").write_text(text)
    with pytest.raises(ValueError, match="changed or damaged after saving"):
        load_head(tmp_path)
    with pytest.raises(ValueError, match=match):  # the version folder itself, as a hand edit would
        load_head(current_folder(tmp_path, verify=False))


def test_cart_head_of_the_old_format_says_how_to_refit(fitted, tmp_path):
    """Before the skops format, CART heads stored scikit-learn's private tree state in model.npz."""
    path = current_folder(fitted["cart"].save(tmp_path / "cart"))  # files side by side, as then
    (path / "model.skops").unlink()
    (path / "model.json").write_text('{"estimator": "DecisionTreeClassifier"}')
    with pytest.raises(ValueError, match=r"refit it with `fit-head --run <run-dir> --heads cart`"):
        load_head(path)


def test_cart_file_with_an_untrusted_type_is_refused(fitted, tmp_path):
    path = current_folder(fitted["cart"].save(tmp_path / "cart"))
    (path / "model.skops").write_bytes(skops.io.dumps(FunctionTransformer(func=print)))
    with pytest.raises(ValueError, match="outside the trusted list"):
        load_head(path)
    (path / "model.skops").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a readable skops file"):
        load_head(path)


def _noisy_concepts(seed: int, n_per: int, k: int = 20, d: int = 40):
    """Near-binary concept probabilities of k classes, 8 % of each image's concepts flipped."""
    rng = np.random.default_rng(seed)
    code = np.random.default_rng(99).random((k, d)) < 0.3
    y = np.repeat(np.arange(k), n_per)
    labels = code[y] ^ (rng.random((len(y), d)) < 0.08)
    X = np.clip(np.where(labels, 0.75, 0.25) + rng.normal(0, 0.15, labels.shape), 0, 1)
    return X, np.array([f"bird_{c:02d}" for c in y])


def test_concept_settings_route_noisy_concepts_softly():
    """On noisy near-binary concepts most learned bands of the preset are the min_width
    floor (crisp routing), and the wide bands of the concept settings gain 0.28 (0.61 -> 0.88)."""
    X, y = _noisy_concepts(0, 20)
    X_test, y_test = _noisy_concepts(1, 30)
    names = [f"c{j}" for j in range(X.shape[1])]
    preset = make_head("ferl-deep", settings="learner").fit(X, y, names)
    tree = preset.model_.tree_
    spread = np.percentile(X, 99, axis=0) - np.percentile(X, 1, axis=0)
    inner = tree.feature >= 0
    at_floor = np.isclose(tree.half_width[inner], 0.05 * spread[tree.feature[inner]], rtol=1e-6)
    assert at_floor.mean() > 0.5
    head = make_head("ferl-deep", settings="concepts").fit(X, y, names)
    assert head.settings == "concepts" and head.model_.min_width == 0.5
    assert np.mean(head.predict(X_test) == y_test) > np.mean(preset.predict(X_test) == y_test) + 0.2


def test_ferl_settings_are_saved_and_checked(tmp_path):
    X, y = _world(0)
    head = make_head("ferl-deep").fit(X, y, NAMES)
    assert head.settings == "learner" and head.model_.min_width == 0.05  # the preset alone
    concepts = make_head("ferl-deep", settings="concepts").fit(X, y, NAMES)
    loaded = load_head(concepts.save(tmp_path / "h"))
    assert loaded.settings == "concepts" and loaded.model_.min_width == 0.5
    assert loaded.model_.evidence_weights == "learned" and loaded.model_.evidence_weights_ is not None
    with pytest.raises(ValueError, match="settings must be one of"):
        make_head("ferl-deep", settings="tabular")


def _edit_head_json(folder, edit) -> None:
    """Change a saved head's head.json and its record in current.json (as a careful hand edit)."""
    version = current_folder(folder)
    doc = json.loads((version / "head.json").read_text())
    edit(doc)
    data = json.dumps(doc).encode()
    (version / "head.json").write_bytes(data)
    pointer = json.loads((folder / "current.json").read_text())
    pointer["files"]["head.json"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (folder / "current.json").write_text(json.dumps(pointer))


@pytest.mark.parametrize(("field", "value", "message"), [
    ("value", None, r"value must be a finite number, got None"),
    ("value", float("nan"), r"value must be a finite number, got nan"),
    ("value", "3.5", r"value must be a finite number, got '3.5'"),
    ("value", True, r"value must be a finite number, got True"),
    ("kind", "psychic", r"kind must be one of \["),
    ("accept", 1.5, r"accept must be in \(0, 1\], got 1.5"),
    (None, [1, 2], r"must be an object"),
])
def test_a_bad_novelty_threshold_is_refused_when_the_head_loads(tmp_path, field, value, message):
    # a null value gave predict a TypeError traceback, a NaN one flagged nothing
    X, y = _world(0, n=80)
    head = make_head("ferl-compact").fit(X, y, NAMES)
    head.fit_ood_threshold(X)
    head.save(tmp_path / "h")
    assert load_head(tmp_path / "h").ood_threshold_ == head.ood_threshold_

    def edit(doc):
        if field is None:
            doc["ood_threshold"] = value
        else:
            doc["ood_threshold"][field] = value

    _edit_head_json(tmp_path / "h", edit)
    with pytest.raises(ValueError, match=rf"head.json: ood_threshold.*{message}.*fit-head"):
        load_head(tmp_path / "h")
    _edit_head_json(tmp_path / "h", lambda doc: doc.update(ood_threshold=None))  # an older head: none
    assert load_head(tmp_path / "h").ood_threshold_ is None


def test_a_head_saved_with_an_ablation_kind_of_threshold_asks_for_a_refit(tmp_path):
    # tree-evidence heads flagged with "leaf" before it became an ablation kind
    X, y = _world(0, n=80)
    head = make_head("ferl-compact").fit(X, y, NAMES)
    assert head.fit_ood_threshold(X)["kind"] == "typical" == head.ood_kind
    head.save(tmp_path / "h")
    _edit_head_json(tmp_path / "h", lambda doc: doc["ood_threshold"].update(kind="leaf"))
    with pytest.raises(ValueError, match=r"kind 'leaf' is an ablation kind of OOD score, no longer one the "
                                         r"product flags with.*refit the head \(fit-head\)"):
        load_head(tmp_path / "h")
    with pytest.raises(ValueError, match="ablation_score"):
        head.fit_ood_threshold(X, kind="leaf")


def test_the_novelty_calibration_says_nothing_of_the_discount_point_the_product_does_not_read():
    """fit-head printed one warning per FERL head (8 in the demo) about the learner's novelty-discount
    point, which the product's operating point does not read: none now."""
    rng = np.random.default_rng(0)
    X = rng.random((180, 5))
    y = np.array([f"c{k:02d}" for k in np.repeat(np.arange(60), 3)])  # the paper's sets abstain on most
    head = make_head("ferl-deep", settings="learner").fit(X, y, [f"x{j}" for j in range(5)])
    head.fit_sets(X, y, None)
    if not head.predict_set(X).all(axis=1).mean() > 0.05:
        pytest.skip("the sets do not abstain here")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        head.fit_novelty(X, abstain=0.05)
    assert head.model_.discount_point_ is not None  # the learner keeps its own point
