"""The main job on the embedded default (until the concept pipeline lands): FERL on scikit-learn's wine.

Fits the three FERL variants on a stratified 70/30 split of the wine data that ships with
scikit-learn and prints accuracy, the rules, a few credal sets and the abstentions.
"""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler

from ferl import PRESETS, FERLClassifier


def main() -> None:
    data = load_wine()
    classes = np.array(["class_0", "class_1", "class_2"])
    X_tr, X_te, y_tr, y_te = train_test_split(
        data.data, classes[data.target], test_size=0.3, stratify=data.target, random_state=0
    )
    scaler = MinMaxScaler().fit(X_tr)
    X_tr, X_te = scaler.transform(X_tr), scaler.transform(X_te)
    for variant in PRESETS:
        clf = FERLClassifier(variant, random_state=0).fit(X_tr, y_tr, feature_names=data.feature_names)
        ev = clf.evidence(X_te)
        sets = ev.credal_set
        acc = float((clf.predict(X_te) == y_te).mean())
        covered = sets[np.arange(len(y_te)), np.searchsorted(clf.classes_, y_te)]
        print(f"\n=== FERL-{variant}: {clf.n_rules_} rules, test accuracy {acc:.3f}, "
              f"set coverage {covered.mean():.3f}, mean set size {sets.sum(1).mean():.2f}, "
              f"mean ignorance {ev.ignorance.mean():.3f}, abstentions {int(ev.abstain.sum())}")
        print(clf.export_text())
        order = np.argsort(-sets.sum(1), kind="stable")[:3]
        print("most uncertain test samples:")
        for i in order:
            members = ", ".join(clf.classes_[sets[i]])
            print(f"  #{i}: true {y_te[i]}, predicted {clf.predict(X_te[i:i + 1])[0]}, "
                  f"credal set {{{members}}}, ignorance {ev.ignorance[i]:.3f}"
                  + ("  -> abstains" if ev.abstain[i] else ""))


if __name__ == "__main__":
    main()
