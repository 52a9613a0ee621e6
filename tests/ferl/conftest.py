"""Fixtures shared by the FERL novelty tests: wine, min-max scaled, and a FERL-deep fitted on it."""

import pytest
from sklearn.datasets import load_wine
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler

from ferl import FERLClassifier


@pytest.fixture(scope="module")
def wine():
    X, y = load_wine(return_X_y=True)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    scaler = MinMaxScaler().fit(X_tr)
    return scaler.transform(X_tr), scaler.transform(X_te), y_tr, y_te


@pytest.fixture(scope="module")
def wine_deep(wine):
    X_tr, _, y_tr, _ = wine
    return FERLClassifier("deep", random_state=0).fit(X_tr, y_tr, feature_names=load_wine().feature_names)
