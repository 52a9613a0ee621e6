"""The heads tables' text: it names only the training-concept sources its columns show."""

from cbm.heads.tables import _sources_markdown


def _entry(sources):
    accuracy = {"raw": {"accuracy": 0.5}, "calibrated": {"accuracy": 0.75}}
    return {"train_concepts": sources[0],
            "train_concepts_compared": {s: {"ferl-deep": accuracy, "cart": accuracy} for s in sources}}


def test_a_run_without_cross_fitted_concepts_does_not_claim_them():
    # fresh-clone finding: the demo's table had no cross-fitted column, its text said there was one
    text = "\n".join(_sources_markdown(_entry(["in-sample", "independent"])))
    assert "cross-fitted" not in text
    assert "in-sample train concepts" in text and "true concepts (Koh" in text
    assert "| FERL-deep | 50.00 | 75.00 | 50.00 | 75.00 |" in text


def test_three_sources_are_listed_in_the_columns_order():
    text = "\n".join(_sources_markdown(_entry(["cross-fitted", "independent", "in-sample"])))
    where = [text.index(s) for s in ("in-sample train", "cross-fitted (out-of-fold)", "true concepts (Koh")]
    assert where == sorted(where)
    assert "The tables above use **cross-fitted** train concepts." in text
