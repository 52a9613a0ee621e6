"""Saved models keep date and duration labels, and say when a random_state cannot be saved (reported
by a user: datetime64 labels fitted but did not save; a RandomState came back as None silently)."""

from __future__ import annotations

import numpy as np
import pytest

from ferl import FERLClassifier


@pytest.mark.parametrize("labels", [np.array(["2020-01-01", "2021-06-01"], dtype="datetime64[D]"),
                                    np.array([5, 7], dtype="timedelta64[h]")])
def test_date_and_duration_labels_save_and_load(tmp_path, labels):
    X = np.random.default_rng(0).random((40, 3))
    y = labels[(X[:, 0] > 0.5).astype(int)]
    clf = FERLClassifier(variant="compact", random_state=0).fit(X, y)
    loaded = FERLClassifier.load(clf.save(tmp_path / "m"))
    assert loaded.classes_.dtype == labels.dtype
    np.testing.assert_array_equal(loaded.predict(X), clf.predict(X))


def test_a_random_state_object_is_named_when_the_model_is_saved(tmp_path):
    X = np.random.default_rng(0).random((40, 3))
    clf = FERLClassifier(variant="compact", random_state=np.random.RandomState(3)).fit(X, X[:, 0] > 0.5)
    with pytest.warns(UserWarning, match="is not an int seed: the saved model records None"):
        clf.save(tmp_path / "m")
    assert FERLClassifier.load(tmp_path / "m").random_state is None
