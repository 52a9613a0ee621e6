"""ConceptCalibrator: the isotonic bug reports, monotonicity, names, save/load."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

from cbm.concepts.calibration import ConceptCalibrator, ConstantCalibrationWarning, concept_ece

NAMES = ["has_wing::red", "has_beak::long", "has_tail::short"]


def _noisy(rng: np.random.Generator, n: int, k: int, low: float = 0.0, high: float = 1.0):
    """Labels and over-confident scores in [low, high] that increase with the label."""
    labels = (rng.random((n, k)) < 0.5).astype(np.uint8)
    scores = np.clip(0.5 + (labels - 0.5) * 0.6 + rng.normal(0, 0.25, (n, k)), 0, 1)
    return low + (high - low) * scores, labels


# ---------------------------------------------------------------- isotonic bug reports
def test_probability_above_calibration_range_is_finite_and_clipped():
    # scikit-learn #23134: IsotonicRegression().predict([0.5]) after fitting on x <= 0.4 -> NaN
    rng = np.random.default_rng(0)
    probs, labels = _noisy(rng, 200, 3, low=0.0, high=0.4)
    cal = ConceptCalibrator().fit(probs, labels, NAMES)
    out = cal.transform(np.array([[0.5, 0.9, 1.0], [0.0, 0.41, 0.5]]))
    assert np.all(np.isfinite(out)) and out.min() >= 0 and out.max() <= 1
    top = cal.transform(probs.max(axis=0, keepdims=True))
    np.testing.assert_array_equal(out[0], top[0])  # above the range: the value at the largest seen


def test_saturated_scores_calibrate_and_keep_order():
    # sigmoids saturated to exactly 0 or 1 in the calibration split (scikit-learn #3995 family)
    rng = np.random.default_rng(1)
    n = 120
    probs, labels = _noisy(rng, n, 4, low=0.05, high=0.95)  # c3 never saturates in calibration
    probs[:, 0] = 0.0  # always exactly 0
    probs[:, 1] = 1.0  # always exactly 1
    probs[:, 2] = (rng.random(n) < 0.5).astype(float)  # only 0 and 1
    labels[:, 2] = (probs[:, 2] == 1) ^ (rng.random(n) < 0.2)
    names = [f"c{j}" for j in range(4)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cal = ConceptCalibrator().fit(probs, labels, names)
        grid = np.linspace(0, 1, 21)  # at test time every concept may saturate to exactly 0 or 1
        out = cal.transform(np.repeat(grid[:, None], 4, axis=1))
    assert [w.category for w in caught] == [ConstantCalibrationWarning]  # and no scikit-learn warning
    assert "2 of 4 concepts" in str(caught[0].message) and "'c1': every validation probability is 1" \
        in str(caught[0].message)
    assert np.all(np.isfinite(out)) and out.min() >= 0 and out.max() <= 1
    assert np.all(np.diff(out, axis=0) >= 0)  # every map keeps the order of raw scores
    np.testing.assert_allclose(out[:, 0], labels[:, 0].mean())  # constant score -> positive rate
    np.testing.assert_allclose(out[:, 1], labels[:, 1].mean())
    assert out[0, 2] == pytest.approx(labels[probs[:, 2] == 0, 2].mean())
    assert out[-1, 2] == pytest.approx(labels[probs[:, 2] == 1, 2].mean())
    # the other concept is calibrated exactly as if it were alone
    alone = ConceptCalibrator().fit(probs[:, 3:], labels[:, 3:], ["c3"]).transform(grid[:, None])
    np.testing.assert_array_equal(out[:, 3], alone[:, 0])


@pytest.mark.parametrize("value", [0, 1])
def test_constant_labels_map_to_that_constant_and_say_so(value):
    rng = np.random.default_rng(2)
    probs, labels = _noisy(rng, 100, 3, low=0.1, high=0.7)
    labels[:, 1] = value
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cal = ConceptCalibrator().fit(probs, labels, NAMES)
        out = cal.transform(np.array([[0.3, 0.0, 0.3], [0.3, 0.5, 0.3], [0.3, 1.0, 0.3]]))
    assert [w.category for w in caught] == [ConstantCalibrationWarning]
    assert f"'has_beak::long': every validation label is {value}" in str(caught[0].message)
    np.testing.assert_array_equal(out[:, 1], float(value))
    assert cal.kinds_[1] == "constant labels"
    assert cal.constant_maps() == {"has_beak::long": f"every validation label is {value}"}


def test_a_flat_isotonic_fit_is_named_as_a_constant_map(tmp_path):
    """Scores that differ only by rounding (1e-16) give an 'isotonic' map that is constant."""
    rng = np.random.default_rng(7)
    probs, labels = _noisy(rng, 80, 3)
    probs[:, 2] = 0.5 + rng.integers(-2, 3, 80) * 1e-16
    with pytest.warns(ConstantCalibrationWarning, match=r"1 of 3 concepts.*'has_tail::short': the "
                      r"isotonic fit is flat at 0\.\d+"):
        cal = ConceptCalibrator().fit(probs, labels, NAMES)
    assert cal.kinds_ == ["isotonic", "isotonic", "flat fit"]
    assert np.ptp(cal.transform(rng.random((50, 3)))[:, 2]) == 0
    loaded = ConceptCalibrator.load(cal.save(tmp_path / "calibration.json"))
    assert loaded.kinds_[2] == "flat fit" and list(loaded.constant_maps()) == ["has_tail::short"]


def test_heavily_tied_inputs_match_scikit_learn():
    rng = np.random.default_rng(3)
    n = 500
    probs = np.round(rng.random((n, 2)) * 0.8 + 0.1, 1)  # 9 distinct values, ~55 ties each
    labels = (rng.random((n, 2)) < probs).astype(np.uint8)
    probs[:50, 1] = probs[0, 1]  # one huge tie group holding both labels
    cal = ConceptCalibrator().fit(probs, labels, ["a", "b"])
    grid = np.r_[np.linspace(0, 1, 101), np.unique(probs)]
    out = cal.transform(np.stack([grid, grid], axis=1))
    for j in range(2):
        ref = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(probs[:, j], labels[:, j])
        np.testing.assert_allclose(out[:, j], ref.predict(grid), rtol=0, atol=1e-12)


# ---------------------------------------------------------------- further behaviour
def test_calibration_lowers_per_concept_ece_in_sample_and_is_monotone():
    rng = np.random.default_rng(4)
    probs, labels = _noisy(rng, 400, 3)
    cal = ConceptCalibrator().fit(probs, labels, NAMES)
    calibrated = cal.transform(probs)
    raw_ece, cal_ece = concept_ece(probs, labels), concept_ece(calibrated, labels)
    assert np.all(raw_ece > 0.05)
    np.testing.assert_allclose(cal_ece, 0.0, atol=1e-9)  # isotonic is calibrated on its own data
    order = np.argsort(probs[:, 0], kind="stable")
    assert np.all(np.diff(calibrated[order, 0]) >= 0)


def test_concept_ece_matches_hand_computation():
    p = np.array([[0.9], [0.9], [0.2], [0.2]])
    t = np.array([[1], [0], [0], [0]])
    # bins of top-label confidence: 0.9 (2 samples, accuracy 0.5), 0.8 (2 samples, accuracy 1)
    assert concept_ece(p, t)[0] == pytest.approx((2 * 0.4 + 2 * 0.2) / 4)


def test_save_load_round_trip_is_identical(tmp_path):
    rng = np.random.default_rng(5)
    probs, labels = _noisy(rng, 300, 3)
    labels[:, 2] = 1
    with pytest.warns(ConstantCalibrationWarning):
        cal = ConceptCalibrator().fit(probs, labels, NAMES)
    path = cal.save(tmp_path / "run" / "calibration.json")
    assert not [p for p in path.parent.iterdir() if p.name != "calibration.json"]  # no temp files
    loaded = ConceptCalibrator.load(path)
    x = rng.random((1000, 3))
    np.testing.assert_array_equal(loaded.transform(x, NAMES), cal.transform(x))
    assert loaded.concept_names_ == NAMES and loaded.kinds_ == cal.kinds_


def test_other_concept_names_are_rejected(tmp_path):
    rng = np.random.default_rng(6)
    probs, labels = _noisy(rng, 50, 3)
    cal = ConceptCalibrator().fit(probs, labels, NAMES)
    with pytest.raises(ValueError, match="has_tail::short"):
        cal.transform(probs, ["has_wing::red", "has_beak::long", "has_tail::long"])
    with pytest.raises(ValueError, match="another order"):
        cal.transform(probs, list(reversed(NAMES)))
    with pytest.raises(ValueError, match=r"shape \(n, 3\)"):
        cal.transform(probs[:, :2])


@pytest.mark.parametrize("bad", [np.nan, 1.5, -0.1])
def test_bad_probabilities_name_row_and_concept(bad):
    rng = np.random.default_rng(7)
    probs, labels = _noisy(rng, 20, 3)
    probs[4, 1] = bad
    with pytest.raises(ValueError, match=r"row 4, concept 'has_beak::long'"):
        ConceptCalibrator().fit(probs, labels, NAMES)
    good = ConceptCalibrator().fit(np.nan_to_num(np.clip(probs, 0, 1)), labels, NAMES)
    with pytest.raises(ValueError, match=r"row 4, concept 'has_beak::long'"):
        good.transform(probs)


def test_unfitted_and_corrupted_files_raise(tmp_path):
    with pytest.raises(ValueError, match="not fitted"):
        ConceptCalibrator().transform(np.zeros((1, 1)))
    with pytest.raises(FileNotFoundError):
        ConceptCalibrator.load(tmp_path / "missing.json")
    rng = np.random.default_rng(8)
    probs, labels = _noisy(rng, 50, 3)
    path = ConceptCalibrator().fit(probs, labels, NAMES).save(tmp_path / "calibration.json")
    doc = json.loads(path.read_text())
    doc["maps"][0]["y"] = doc["maps"][0]["y"][::-1]
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="not monotone"):
        ConceptCalibrator.load(path)


@pytest.mark.parametrize("edit, match", [
    (lambda d: d["maps"][0].update(x=[0.1, float("nan")], y=[0.0, 1.0]), "not monotone"),
    (lambda d: d.pop("maps"), "malformed"),
    (lambda d: d.update(concept_names=None), "malformed"),
    (lambda d: d["maps"][0].update(x=["a"]), "not numeric"),
    (lambda d: d.pop("n_samples"), "n_samples .* is missing"),
    (lambda d: d.update(n_samples="50"), "n_samples .* is '50'"),
    (lambda d: (d.update(concept_names=["a", "a"]), d["maps"][1].update(concept="a")),
     r"duplicated: \['a'\]"),
    (lambda d: d["maps"][0].update(kind="magic"), r"unknown map kinds \['magic'\]"),
])
def test_load_rejects_hand_edited_maps(tmp_path, edit, match):
    rng = np.random.default_rng(0)
    probs = rng.random((50, 2))
    cal = ConceptCalibrator().fit(probs, (probs > 0.5).astype(int), ["a", "b"])
    path = cal.save(tmp_path / "calibration.json")
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=match):
        ConceptCalibrator.load(path)


def test_load_rejects_a_binary_file(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match="not valid JSON"):
        ConceptCalibrator.load(path)
