"""What ``evaluate-shift`` evaluates (`ShiftSettings`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from numbers import Integral
from typing import Any

from cbm.data.corruptions import CORRUPTIONS, check_corruptions, check_severities
from cbm.heads import HEADS

__all__ = ["ShiftSettings"]


@dataclass(frozen=True)
class ShiftSettings:
    """Settings of an ``evaluate-shift`` run (``configs/shift/*.yaml``).

    Attributes
    ----------
    corruptions : tuple of str
        Evaluated corruptions (`cbm.data.corruptions.CORRUPTIONS`, ImageNet-C's 15 by default; the
        validation corruptions are refused: the heads' shift calibration was fitted on them).
    severities : tuple of int
        Of 1-5; severity 0 (the clean test split) is always evaluated.
    max_rows : int or None
        The test images corrupted: a seeded random subset of this many (None: all). The clean rows
        are the whole test split.
    seed : int
        Seeds the subset and every corruption's pixels.
    product : str
        The FERL head ``predict`` uses (``ferl-deep``), read at its operating point.
    inputs : {"calibrated", "raw"}
        The concept inputs of every head (``predict``'s default: calibrated).
    presets : tuple of str
        The other FERL heads evaluated at their operating points.
    batch_size, num_workers : int
        Of the corrupted images' loader (the corruptions run in the workers).
    """

    corruptions: tuple[str, ...] = CORRUPTIONS
    severities: tuple[int, ...] = (1, 2, 3, 4, 5)
    max_rows: int | None = None
    seed: int = 0
    product: str = "ferl-deep"
    inputs: str = "calibrated"
    presets: tuple[str, ...] = ("ferl-compact", "ferl-medium")
    batch_size: int = 64
    num_workers: int = 2

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "corruptions", tuple(check_corruptions(list(self.corruptions), CORRUPTIONS)))
        set_(self, "severities", tuple(check_severities(list(self.severities))))
        for name, value, low in (("max_rows", self.max_rows, 1), ("seed", self.seed, 0),
                                 ("batch_size", self.batch_size, 1), ("num_workers", self.num_workers, 0)):
            if value is None and name == "max_rows":
                continue
            if isinstance(value, bool) or not isinstance(value, Integral) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        ferl = [h for h in HEADS if h.startswith("ferl-")]
        bad = [h for h in (self.product, *self.presets) if h not in ferl]
        if bad:
            raise ValueError(f"product and presets must be FERL heads of {ferl}, got {bad}")
        if self.inputs not in ("calibrated", "raw"):
            raise ValueError(f"inputs must be 'calibrated' or 'raw', got {self.inputs!r}")
        set_(self, "presets", tuple(h for h in dict.fromkeys(self.presets) if h != self.product))

    def as_dict(self) -> dict[str, Any]:
        """The settings as plain JSON types."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
