"""Column labels of pandas inputs: names read from an array (``numpy.str_``) are checked by name."""

import numpy as np
import pytest

from ferl import FERLClassifier

pd = pytest.importorskip("pandas")


def _table(rng, n=120):
    X = rng.random((n, 4))
    y = (X[:, 0] > 0.5).astype(int) + 2 * (X[:, 1] > 0.5)
    names = list(np.array(["red", "round", "big", "striped"]))  # as from np.load(...)["concept_names"]
    assert type(names[0]) is np.str_
    return pd.DataFrame(X, columns=names), y


def test_numpy_str_columns_are_names_checked_by_order():
    df, y = _table(np.random.default_rng(0))
    clf = FERLClassifier(random_state=0).fit(df, y)
    assert [type(n) for n in clf.feature_names_in_] == [str] * 4
    assert clf.feature_names_ == ["red", "round", "big", "striped"]
    text = clf.export_text()  # the rules read the concepts' names, not x0, x1...
    assert "red" in text and "x0" not in text
    with pytest.raises(ValueError, match="(?i)feature names must be in the same order"):
        clf.predict(df[df.columns[::-1]])
    relabelled = df.set_axis(list(np.array(df.columns)), axis=1)  # numpy.str_ again at predict
    with pytest.warns(UserWarning, match="valid feature names"):  # positions, as scikit-learn reads them
        by_position = clf.predict(df.to_numpy())
    assert np.array_equal(clf.predict(relabelled), by_position)


def test_str_columns_leaves_other_inputs_alone():
    from ferl._inputs import str_columns

    df = pd.DataFrame([[0.0, 1.0]], columns=["a", "b"])
    assert str_columns(df) is df
    numbered = pd.DataFrame([[0.0, 1.0]])
    assert str_columns(numbered) is numbered  # scikit-learn's convention: no names
    X = np.zeros((1, 2))
    assert str_columns(X) is X
    mixed = pd.DataFrame([[0.0, 1.0]], columns=[np.str_("a"), "b"])
    out = str_columns(mixed)
    assert [type(c) for c in out.columns] == [str, str]
    assert [type(c) for c in mixed.columns][0] is np.str_  # the caller's frame is unchanged
