"""The novelty read-out calibrated on held-out inputs: the discount's operating point
(`FERLClassifier.calibrate_novelty`,
`ferl.novelty.discount.fit_operating_point`, `ferl.novelty.discount.point_reliability`)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferl import FERLClassifier
from ferl.io import persist
from ferl.novelty import default_kind
from ferl.novelty.discount import POINT_WIDTH, fit_operating_point, point_reliability


def _world(seed=0, n=900, d=6):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d))
    y = (X[:, 0] > 0.5).astype(int) + 2 * (X[:, 1] + 0.15 * rng.standard_normal(n) > 0.5)
    return X, y


def _load_edited(tmp_path, **arrays_changed):
    """Load the model saved in ``tmp_path / "m"`` after replacing (an array) or deleting (None) some of
    its saved arrays, written again as a valid model folder."""
    meta, arrays = persist.read_model(tmp_path / "m")
    for name, value in arrays_changed.items():
        if value is None:
            del arrays[name]
        else:
            arrays[name] = value
    meta = {k: v for k, v in meta.items() if k not in ("schema_version", "npz_sha256")}
    persist.write_model(tmp_path / "edited", meta, arrays)
    return FERLClassifier.load(tmp_path / "edited")


@pytest.fixture(scope="module", params=["tree", "learned"])
def calibrated(request):
    X, y = _world()
    model = FERLClassifier(evidence_weights=request.param, random_state=0).fit(X[:500], y[:500])
    return model.calibrate_novelty(X[500:700], abstain=0.1), X


def test_at_most_the_budget_of_the_reference_abstains_and_about_as_many_unseen_ones(calibrated):
    model, X = calibrated
    model.set_params(novelty_discount=True)
    try:
        ref = model.predict_set(X[500:700]).all(axis=1).mean()
        unseen = model.predict_set(X[700:]).all(axis=1).mean()
    finally:
        model.set_params(novelty_discount=False)
    paper = model.predict_set(X[500:700]).all(axis=1).mean()
    assert ref <= 0.1 or ref == paper  # the paper's own abstentions may already exceed the budget
    # exchangeable rows: within 3 binomial standard deviations of 200 draws at 10 %
    assert abs(unseen - max(ref, 0.1)) <= 3 * np.sqrt(0.1 * 0.9 / 200) + 0.02


def test_inputs_far_outside_the_training_ranges_abstain(calibrated):
    model, _ = calibrated
    far = np.random.default_rng(1).random((50, 6)) * 4 - 1.5  # mostly outside [0, 1]
    far[:, 0] = np.where(far[:, 0] > 1, far[:, 0] + 2, far[:, 0] - 2)  # every row far out in one concept
    model.set_params(novelty_discount=True)
    try:
        assert model.predict_set(far).all(axis=1).mean() >= 0.9
        assert model.explain(far[0]).abstain
    finally:
        model.set_params(novelty_discount=False)


def test_with_the_discount_off_the_calibration_changes_nothing(calibrated):
    model, X = calibrated
    on = model.evidence(X[700:])
    point, model.discount_point_ = model.discount_point_, None  # the discount is off: no point read
    try:
        off = model.evidence(X[700:])
    finally:
        model.discount_point_ = point
    np.testing.assert_array_equal(on.mass, off.mass)
    np.testing.assert_array_equal(on.ignorance, off.ignorance)


def test_the_point_survives_save_and_load_and_a_corrupt_one_is_refused(calibrated, tmp_path):
    model, X = calibrated
    model.save(tmp_path / "m")
    loaded = FERLClassifier.load(tmp_path / "m")
    np.testing.assert_array_equal(loaded.discount_point_, model.discount_point_)
    for m in (model, loaded):
        m.set_params(novelty_discount=True)
    try:
        np.testing.assert_array_equal(loaded.predict_set(X[700:]), model.predict_set(X[700:]))
    finally:
        for m in (model, loaded):
            m.set_params(novelty_discount=False)
    with pytest.raises(ValueError, match="discount_point"):
        _load_edited(tmp_path, discount_point=np.array([0.0, -1.0]))  # a width <= 0


def test_a_refit_drops_the_calibrations_of_the_last_fit():
    X, y = _world()
    model = FERLClassifier(random_state=0).fit(X[:500], y[:500]).calibrate_novelty(X[500:700])
    model.calibrate_sets(X[500:700], y[500:700])
    model.fit(X[:400], y[:400])
    assert model.discount_point_ is None and model.set_scores_ is None and model.novelty_reference_ is None


def test_a_budget_outside_zero_one_is_refused(calibrated):
    model, X = calibrated
    with pytest.raises(ValueError, match="abstain"):
        model.calibrate_novelty(X[500:700], abstain=1.0)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), budget=st.floats(0.0, 0.5))
def test_the_operating_point_is_the_smallest_reference_score_within_budget(seed, budget):
    # a toy abstention: an input abstains once its reliability is at most 1/2
    score = np.random.default_rng(seed).normal(size=60)

    def abstains(point):
        return point_reliability(point, score) <= 0.5

    tau, width = fit_operating_point(score, abstains, budget)
    allowed = 60 - int(np.ceil((1 - budget) * 61 - 1e-9))  # the split-conformal count of 60 rows
    assert width == pytest.approx(POINT_WIDTH * score.std())
    assert tau in score and abstains(np.array([tau, width])).sum() <= max(allowed, 0)
    below = score[score < tau]
    if below.size:  # the next smaller reference score would abstain more than the budget
        assert abstains(np.array([below.max(), width])).sum() > allowed


def test_the_point_is_calibrated_on_the_set_that_will_be_read():
    X, y = _world()
    model = FERLClassifier(evidence_weights="learned", random_state=0).fit(X[:500], y[:500])
    model.calibrate_sets(X[500:700], y[500:700])
    model.set_params(novelty_discount=True)
    for coverage in (None, 0.9):
        model.calibrate_novelty(X[500:700], abstain=0.1, coverage=coverage)
        allowed = 200 - int(np.ceil(0.9 * 201 - 1e-9))
        assert model.predict_set(X[500:700], coverage=coverage).all(axis=1).sum() <= allowed
    with pytest.raises(ValueError, match="coverage"):
        model.calibrate_novelty(X[500:700], coverage=1.5)


def test_a_saved_reference_of_a_tree_evidence_model_is_refused(tmp_path):
    X, y = _world()
    model = FERLClassifier(evidence_weights="learned", random_state=0).fit(X[:500], y[:500])
    model.calibrate_novelty(X[500:700]).save(tmp_path / "m")
    loaded = FERLClassifier.load(tmp_path / "m")
    np.testing.assert_array_equal(loaded.novelty_reference_, model.novelty_reference_)
    np.testing.assert_array_equal(loaded.ood_score(X[700:]), model.ood_score(X[700:]))  # joint, both
    with pytest.raises(ValueError, match="novelty_reference"):
        _load_edited(tmp_path, novelty_reference=np.array([0.0, 1.0, 0.0, 0.0]))  # an energy scale of 0


def test_one_held_out_input_is_refused():
    X, y = _world()
    model = FERLClassifier(random_state=0).fit(X[:500], y[:500])
    with pytest.raises(ValueError, match="at least 2"):
        model.calibrate_novelty(X[500:501])


# ---------------------------------------------------------------- what a hostile user found
def test_a_refused_calibration_leaves_the_model_as_it_was():
    X, y = _world()
    model = FERLClassifier(evidence_weights="learned", random_state=0).fit(X[:500], y[:500])
    assert default_kind(model) == "energy"
    for bad in (-0.1, "0.05", None, True):
        with pytest.raises(ValueError, match="abstain"):
            model.calibrate_novelty(X[500:700], abstain=bad)
    assert model.novelty_reference_ is None and default_kind(model) == "energy"  # was switched to joint
    model.calibrate_novelty(X[500:700], abstain=0.05)
    point, reference = model.discount_point_.copy(), model.novelty_reference_.copy()
    with pytest.raises(ValueError, match="abstain"):
        model.calibrate_novelty(X[600:602], abstain=-0.1)
    np.testing.assert_array_equal(model.discount_point_, point)
    np.testing.assert_array_equal(model.novelty_reference_, reference)
    model.calibrate_sets(X[500:700], y[500:700])
    with pytest.raises(ValueError, match="coverage must be in"):
        model.calibrate_novelty(X[500:700], coverage="0.9")  # a TypeError before


def test_an_unreachable_budget_is_said_not_silently_missed():
    rng = np.random.default_rng(0)
    X = rng.random((180, 5))
    y = np.repeat(np.arange(60), 3)  # 60 classes of 3 rows: the paper's sets abstain on most rows
    model = FERLClassifier(random_state=0).fit(X, y)
    if model.predict_set(X).all(axis=1).mean() <= 0.05:
        pytest.skip("the sets do not abstain here")
    with pytest.warns(UserWarning, match="abstain even where the discount leaves them untouched"):
        model.calibrate_novelty(X, abstain=0.05)
    # fit-head passes 1 - 0.95: the message names the budget as a user wrote it, not 0.050000000000000044
    with pytest.warns(UserWarning, match=r"that abstain=0\.05 allows"):
        model.calibrate_novelty(X, abstain=1.0 - 0.95)


def test_the_scores_do_not_depend_on_the_per_source_discount():
    X, y = _world()
    model = FERLClassifier(evidence_weights="learned", random_state=0).fit(X[:500], y[:500])
    model.calibrate_novelty(X[500:700])
    off = {k: model.ood_score(X[700:], k) for k in ("energy", "joint")}
    point = model.discount_point_.copy()
    model.set_params(novelty_discount="rules")
    for kind, value in off.items():  # the energy moved by up to 0.55 with the firings discounted
        np.testing.assert_array_equal(model.ood_score(X[700:], kind), value)
    model.calibrate_novelty(X[500:700])  # calibrated on the paper's evidence whatever the setting
    np.testing.assert_array_equal(model.discount_point_, point)


def test_held_out_rows_without_spread_are_refused():
    X, y = _world()
    model = FERLClassifier(evidence_weights="learned", random_state=0).fit(X[:500], y[:500])
    with pytest.raises(ValueError, match="no spread"):
        model.calibrate_novelty(np.repeat(X[:1], 50, axis=0))  # the joint score ran to 1e9


@pytest.mark.parametrize("edit", ["tiny_spread", "point_without_reference"])
def test_a_saved_joint_calibration_that_cannot_be_right_is_refused(tmp_path, edit):
    X, y = _world()
    model = FERLClassifier(evidence_weights="learned", random_state=0).fit(X[:500], y[:500])
    model.calibrate_novelty(X[500:700]).save(tmp_path / "m")
    # a tiny spread gave inf scores; without the reference the point, in joint units, read the
    # energy and never fired
    change = np.array([0.0, 1e-320, 0.0, 1.0]) if edit == "tiny_spread" else None
    with pytest.raises(ValueError, match="novelty_reference"):
        _load_edited(tmp_path, novelty_reference=change)
