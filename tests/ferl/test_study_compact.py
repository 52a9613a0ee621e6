"""scripts/study_compact.py end to end on scikit-learn's wine written as a KEEL file."""

import runpy
from pathlib import Path

import pandas as pd
from sklearn.datasets import load_wine

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "study_compact.py"


def test_study_compares_each_candidate_with_a_cart_of_its_size_and_resumes(tmp_path):
    X, y = load_wine(return_X_y=True)
    lines = [", ".join([*(f"{v:g}" for v in row), f"c{k}"]) for row, k in zip(X, y, strict=True)]
    (tmp_path / "wine.dat").write_text("\n".join(lines) + "\n")
    main = runpy.run_path(str(SCRIPT))["main"]
    argv = ["--data-root", str(tmp_path), "--datasets", "wine", "--folds", "2", "--inner", "2",
            "--out", str(tmp_path / "out"), "--candidate", "preset", "--candidate", "fixed",
            "partition='fixed'", "max_rules=4"]
    assert main(argv) == 0
    rows = pd.read_csv(tmp_path / "out" / "folds.csv")
    assert len(rows) == 4 and set(rows["candidate"]) == {"preset", "fixed"}
    assert (rows.loc[rows["candidate"] == "fixed", "rules"] <= 4).all()
    assert rows[["cal", "test", "cart_cal", "cart_test", "inner", "cart_inner"]].apply(
        lambda c: c.between(0, 1)).all().all()
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert summary.startswith("| candidate | sets | inner | cart_inner |") and "| fixed | 1 |" in summary
    rows.to_csv(tmp_path / "out" / "folds.csv", index=False)
    assert main(argv) == 0  # every row is already there: nothing is refitted
    assert pd.read_csv(tmp_path / "out" / "folds.csv").equals(rows)
