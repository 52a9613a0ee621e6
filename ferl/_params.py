"""Declarative constraints on an estimator's parameters, and the check of its parameters against them.

Our own replacement for scikit-learn's private parameter validation (the team's guide: public APIs
only). A table maps each parameter name to the list of what it may be; a value passes when it
satisfies one entry. An entry is a `Range` (integers or reals in an interval), `Options` (strings
among a set), `BOOLEAN`, `RANDOM_STATE` or ``None`` (the value None). `check_params` raises
`InvalidParameterError` naming the parameter, its value and what is allowed.

Unlike scikit-learn's intervals, a bool is not a number here: ``max_depth=True`` is rejected rather
than read as 1.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

__all__ = ["BOOLEAN", "RANDOM_STATE", "InvalidParameterError", "Options", "Range", "check_params"]


class InvalidParameterError(ValueError, TypeError):
    """A parameter of the wrong type or out of range (both a ValueError and a TypeError, as
    scikit-learn's own ``InvalidParameterError``)."""


class Range:
    """Integers (``kind=Integral``) or real numbers (``kind=Real``, integers included) in an interval.

    Parameters
    ----------
    kind : {numbers.Integral, numbers.Real}
    low, high : number or None
        Bounds; None is unbounded. NaN and infinities never pass.
    closed : {"left", "right", "both", "neither"}, default="left"
        Which bounds belong to the interval.
    """

    def __init__(self, kind: type, low=None, high=None, closed: str = "left"):
        if kind not in (Integral, Real) or closed not in ("left", "right", "both", "neither"):
            raise ValueError(f"bad Range({kind!r}, closed={closed!r})")
        self.kind, self.low, self.high, self.closed = kind, low, high, closed

    def accepts(self, value) -> bool:
        """Whether ``value`` is a number of this kind (not a bool), finite, inside the interval."""
        if isinstance(value, bool | np.bool_) or not isinstance(value, self.kind):
            return False
        if not isinstance(value, Integral) and not math.isfinite(value):
            return False
        closed_low, closed_high = self.closed in ("left", "both"), self.closed in ("right", "both")
        above = self.low is None or value > self.low or (closed_low and value == self.low)
        return above and (self.high is None or value < self.high or (closed_high and value == self.high))

    def __str__(self) -> str:
        left = "[" if self.closed in ("left", "both") else "("
        right = "]" if self.closed in ("right", "both") else ")"
        low = "-inf" if self.low is None else self.low
        high = "inf" if self.high is None else self.high
        return f"{'an int' if self.kind is Integral else 'a float'} in {left}{low}, {high}{right}"


class Options:
    """One of a fixed set of strings."""

    def __init__(self, options):
        self.options = frozenset(options)

    def accepts(self, value) -> bool:
        """Whether ``value`` is one of the strings."""
        return isinstance(value, str) and value in self.options

    def __str__(self) -> str:
        return f"a str among {sorted(self.options)}"


class _Kind:
    """A named constraint given by a predicate."""

    def __init__(self, text: str, accepts):
        self.text, self.accepts = text, accepts

    def __str__(self) -> str:
        return self.text


#: True or False (Python or numpy bools).
BOOLEAN = _Kind("a bool", lambda v: isinstance(v, bool | np.bool_))
_SEEDS = Range(Integral, 0, 2**32 - 1, closed="both")
#: A ``random_state``: None, a seed in [0, 2**32 - 1] or a ``numpy.random.RandomState``.
RANDOM_STATE = _Kind(f"None, {_SEEDS} or a numpy.random.RandomState",
                     lambda v: v is None or _SEEDS.accepts(v) or isinstance(v, np.random.RandomState))


def _accepts(entry, value) -> bool:
    return value is None if entry is None else entry.accepts(value)


def check_params(est, constraints: dict, names=None) -> None:
    """Check ``est.get_params(deep=False)`` (or the parameters ``names`` alone) against ``constraints``.

    Parameters
    ----------
    est : estimator
        Has ``get_params``; a parameter without an entry in ``constraints`` is not checked (a
        subclass may add parameters).
    constraints : dict of str to list
        What each parameter may be: a list of `Range`, `Options`, `BOOLEAN`, `RANDOM_STATE` or None.
    names : iterable of str, default=None
        Check only these parameters, read as attributes (cheaper than ``get_params``; for the
        parameters an estimator reads again after fit).

    Raises
    ------
    InvalidParameterError
        A parameter that satisfies none of its entries (the message names the parameter, its value
        and what is allowed); a ValueError and a TypeError.
    """
    params = est.get_params(deep=False) if names is None else {n: getattr(est, n) for n in names}
    for name, value in params.items():
        allowed = constraints.get(name)
        if allowed is not None and not any(_accepts(entry, value) for entry in allowed):
            texts = ["None" if entry is None else str(entry) for entry in allowed]
            what = texts[0] if len(texts) == 1 else f"{', '.join(texts[:-1])} or {texts[-1]}"
            raise InvalidParameterError(f"The {name!r} parameter of {type(est).__name__} must be {what}. "
                                        f"Got {value!r} instead.")
