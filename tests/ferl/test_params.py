"""`ferl._params` (parameter constraints) and `ferl._inputs.check_sample_weight`."""

from numbers import Integral, Real

import numpy as np
import pytest
from sklearn.datasets import load_iris

from ferl import FERLClassifier
from ferl._inputs import check_sample_weight
from ferl._params import RANDOM_STATE, InvalidParameterError, Range
from ferl.presets import PARAMETER_CONSTRAINTS


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return X, y


def test_every_parameter_has_a_constraint():
    assert set(PARAMETER_CONSTRAINTS) == set(FERLClassifier().get_params())


@pytest.mark.parametrize("params, match", [
    (dict(variant="huge"), r"'variant' parameter of FERLClassifier must be a str among "
                           r"\['compact', 'deep', 'medium'\]\. Got 'huge' instead"),
    (dict(max_rules=1), r"'max_rules' .* must be an int in \[2, inf\) or None\. Got 1 instead"),
    (dict(max_rules=3.0), r"'max_rules' .* Got 3\.0 instead"),
    (dict(max_depth=True), r"'max_depth' .* Got True instead"),
    (dict(width_factor=0.0), r"'width_factor' .* must be a float in \(0, inf\)\. Got 0\.0"),
    (dict(width_factor=np.inf), r"'width_factor' .* Got inf"),
    (dict(min_gain=np.nan), r"'min_gain' .* Got nan"),
    (dict(min_samples_leaf=1.0), r"'min_samples_leaf' .* must be an int in \[1, inf\), a float in "
                                 r"\(0, 1\) or None\. Got 1\.0"),
    (dict(prune="yes"), r"'prune' .* must be a bool or None\. Got 'yes'"),
    (dict(ccp_alpha=-0.01), r"'ccp_alpha' .* must be a float in \[0, inf\) or None\. Got -0\.01"),
    (dict(random_state=-1), r"'random_state' .* must be None, an int in \[0, 4294967295\] or a "
                            r"numpy\.random\.RandomState\. Got -1"),
    (dict(random_state=np.random.default_rng(0)), "'random_state'"),
])
def test_fit_rejects_bad_parameters_naming_them(iris, params, match):
    with pytest.raises(InvalidParameterError, match=match) as info:
        FERLClassifier(**params).fit(*iris)
    assert isinstance(info.value, ValueError) and isinstance(info.value, TypeError)



@pytest.mark.parametrize("params, match", [
    (dict(variant="deep", ccp_alpha=0.01), "variant 'deep' does not prune; pass prune=True"),
    (dict(variant="compact", prune=False, ccp_alpha=0.0), r"ccp_alpha=0\.0 would be ignored: prune=False"),
])
def test_ccp_alpha_without_pruning_is_refused_not_ignored(iris, params, match):
    with pytest.raises(InvalidParameterError, match=match):  # it silently grew the unpruned tree
        FERLClassifier(**params).fit(*iris)
    assert FERLClassifier("deep", prune=True, ccp_alpha=0.05, random_state=0).fit(*iris).n_rules_ < \
        FERLClassifier("deep", random_state=0).fit(*iris).n_rules_


def test_compact_keeps_its_rules_on_many_balanced_classes():
    """At the preset's ccp_alpha 0.005, a rule isolating one of 240 balanced classes
    saves at most 1/240 < 0.005 of the training error, so pruning undid every split (1 rule). The
    preset's alpha is capped at 1 / (2 C); an explicit ccp_alpha stays exact."""
    rng = np.random.default_rng(0)
    n_classes, per_class, d = 240, 10, 40
    signature = rng.random((n_classes, d)) < 0.5
    y = np.repeat(np.arange(n_classes), per_class)
    X = np.clip(signature[y] + rng.normal(0, 0.1, (y.size, d)), 0, 1)
    capped = FERLClassifier("compact", random_state=0).fit(X, y)
    assert capped.n_rules_ == 15
    assert capped.score(X, y) > 10 / n_classes
    assert FERLClassifier("compact", ccp_alpha=0.005, random_state=0).fit(X, y).n_rules_ == 1


@pytest.mark.parametrize("params", [
    dict(variant="compact", max_rules=2, max_depth=np.int64(3), width_factor=1, min_gain=0,
         min_samples_leaf=0.1, prune=np.bool_(False), random_state=2**32 - 1),
    dict(max_rules=np.int32(2), min_samples_leaf=np.int32(3), rules_per_class=np.float32(0.5),
         random_state=np.random.RandomState(0)),
])
def test_fit_accepts_numpy_scalars_and_bounds(iris, params):
    assert FERLClassifier(**params).fit(*iris).n_rules_ == 2


def test_a_subclass_parameter_without_a_constraint_is_not_checked(iris):
    class Tagged(FERLClassifier):
        def __init__(self, variant="deep", *, tag=None, max_rules=None):
            super().__init__(variant, max_rules=max_rules)
            self.tag = tag

    assert Tagged(tag=object(), max_rules=3).fit(*iris).n_rules_ == 3
    with pytest.raises(InvalidParameterError, match="'max_rules' parameter of Tagged"):
        Tagged(tag=1, max_rules=0).fit(*iris)


@pytest.mark.parametrize("value, closed, accepted", [
    (0, "left", True), (0, "right", False), (1, "right", True), (1, "left", False),
    (0, "neither", False), (1, "both", True), (0.5, "neither", True), (-0.1, "both", False),
])
def test_range_bounds(value, closed, accepted):
    assert Range(Real, 0, 1, closed=closed).accepts(value) is accepted


def test_range_kinds():
    assert not Range(Integral, 0).accepts(1.0)
    assert Range(Real, 0).accepts(2**70) and Range(Integral, 0).accepts(2**70)
    assert not Range(Real, 0).accepts(np.bool_(True))
    assert not RANDOM_STATE.accepts(2**32) and RANDOM_STATE.accepts(None)


def test_check_sample_weight_converts_and_copies():
    w = np.array([1, 0, 3])
    out = check_sample_weight(w, 3)
    assert out.dtype == np.float64 and out.flags.c_contiguous
    np.testing.assert_array_equal(out, [1.0, 0.0, 3.0])
    out[0] = 9
    assert w[0] == 1
    np.testing.assert_array_equal(check_sample_weight(None, 2), [1.0, 1.0])
    np.testing.assert_array_equal(check_sample_weight(2.5, 2), [2.5, 2.5])
    np.testing.assert_array_equal(check_sample_weight([True, False], 2), [1.0, 0.0])
    strided = np.arange(6.0)[::2]
    assert check_sample_weight(strided, 3).flags.c_contiguous


@pytest.mark.parametrize("weights, match", [
    (np.ones(3), r"shape \(3,\), expected \(4,\)"),
    (np.ones((4, 1)), r"shape \(4, 1\), expected \(4,\)"),
    (np.array([1.0, np.nan, 1.0, 1.0]), "NaN or infinity"),
    (np.array([1.0, np.inf, 1.0, 1.0]), "NaN or infinity"),
    (np.array([1.0, -2.0, 1.0, 1.0]), r"Negative values in sample_weight \(min -2\.0\)"),
    (np.zeros(4), "zero everywhere"),
    (np.array(["1", "1", "1", "1"]), "real numbers, got dtype <U1"),
    (np.ones(4) * 1j, "real numbers, got dtype complex128"),
    (np.array([1.0, "a", 1.0, 1.0], dtype=object), "real numbers: could not convert"),
])
def test_check_sample_weight_rejects(weights, match):
    with pytest.raises(ValueError, match=match):
        check_sample_weight(weights, 4)
