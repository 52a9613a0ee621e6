"""What an open-world run evaluates (`EvalSettings`) and which fold checkpoints it keeps."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cbm.heads.operating import MAX_SET_SIZE
from ferl.benchmarks.confidence import BETP_KINDS
from ferl.benchmarks.ood import DETECTORS, DISCOUNTED
from ferl.benchmarks.ood_kinds import ABLATION_KINDS
from ferl.io.persist import atomic_write_text
from ferl.novelty import OOD_KINDS

__all__ = ["KEEP_CHECKPOINTS", "EvalSettings", "check_keep_checkpoints", "prune_checkpoints"]

#: ``keep_checkpoints`` choices: which detector checkpoints a trained fold keeps.
KEEP_CHECKPOINTS = ("all", "best", "none")


@dataclass(frozen=True)
class EvalSettings:
    """What is evaluated on each fold's concept tables.

    Attributes
    ----------
    heads : tuple of str
        FERL heads of :data:`cbm.heads.HEADS` (``ferl-compact`` / ``ferl-medium`` / ``ferl-deep``).
    ferl_kinds : tuple of str
        FERL OOD scores (`ferl.benchmarks.ood.ferl_score`): the product's kinds
        (`ferl.novelty.ood_score.OOD_KINDS`: ``typical``, the leaf Gaussians' score and the distance to
        the nearest rule prototype combined, `ferl.novelty.prototypes`; ``energy``, the learned
        weights'; ``ignorance``), the ablation kinds (`ferl.benchmarks.ood_kinds.ABLATION_KINDS`;
        ``residual``: the paper's "native residual"), ``ignorance-discounted`` (m(Θ) with
        ``novelty_discount`` on, `ferl.novelty.discount`) and the class evidence as a confidence
        (``betp-*``). The report leads with each head's own kind, the one ``predict`` flags with
        (`ferl.novelty.default_kind`), and its examples show it; the others go to an appendix.
    baselines : tuple of str
        Keys of :data:`ferl.benchmarks.ood.DETECTORS`: the dedicated detectors and a logistic
        regression's own confidence (`ferl.benchmarks.confidence`).
    accept : float in (0, 1)
        Fraction of retained-class val inputs each threshold accepts.
    top_k : tuple of int
        Attribute-naming precision@k for these k.
    examples_per_fold : int
        Explained held-out images per fold (first seed only).
    train_concepts : {"auto", "cross-fitted", "in-sample"}
        Training vectors of the heads and baselines (:mod:`cbm.heads.train_concepts`); ``auto``:
        cross-fitted when the fold's detector wrote them (``crossfit_folds`` in its config).
    ferl_settings : {"concepts", "learner"}
        The FERL heads' settings (:data:`cbm.heads.models.FERL_SETTINGS`); ``concepts``, as
        ``fit-head`` fits them, so that the tables describe the head a user runs.
    coverage : float in (0, 1)
        Target coverage of the heads' credal sets, as ``fit-head``'s ``--coverage``.
    max_set_size : int >= 1
        The widest set a head answers with (`cbm.heads.operating`), as ``fit-head``'s.
    """

    heads: tuple[str, ...] = ("ferl-deep",)
    ferl_kinds: tuple[str, ...] = ("typical", "joint", "leaf", "prototype", "nll", "residual", "combined",
                                    "ignorance", DISCOUNTED, "firing", *BETP_KINDS, "energy")
    baselines: tuple[str, ...] = ("mahalanobis", "knn", "iforest", "lr-msp", "lr-entropy", "lr-energy")
    accept: float = 0.95
    top_k: tuple[int, ...] = (1, 3, 5)
    examples_per_fold: int = 2
    train_concepts: str = "auto"
    ferl_settings: str = "concepts"
    coverage: float = 0.9
    max_set_size: int = MAX_SET_SIZE

    def __post_init__(self) -> None:
        bad_heads = [h for h in self.heads if not h.startswith("ferl-")]
        if not self.heads or bad_heads:
            raise ValueError(f"heads must be FERL heads (ferl-compact/medium/deep) with OOD scores, "
                             f"got {list(self.heads)}")
        kinds = (*OOD_KINDS, *ABLATION_KINDS, DISCOUNTED, *BETP_KINDS)
        bad = [k for k in self.ferl_kinds if k not in kinds]
        if not self.ferl_kinds or bad:
            raise ValueError(f"unknown FERL OOD kinds {bad or 'none'}; choose from {list(kinds)}")
        bad = [b for b in self.baselines if b not in DETECTORS]
        if bad:
            raise ValueError(f"unknown baselines {bad}; choose from {list(DETECTORS)}")
        if not 0.0 < self.accept < 1.0:
            raise ValueError(f"accept must be in (0, 1), got {self.accept}")
        if not 0.0 < self.coverage < 1.0 or isinstance(self.max_set_size, bool) or self.max_set_size < 1:
            raise ValueError(f"coverage must be in (0, 1) and max_set_size >= 1, got {self.coverage} and "
                             f"{self.max_set_size}")
        if not self.top_k or min(self.top_k) < 1:
            raise ValueError(f"top_k must be positive integers, got {list(self.top_k)}")
        if self.examples_per_fold < 0:
            raise ValueError("examples_per_fold must be >= 0")
        if self.ferl_settings not in ("concepts", "learner"):
            raise ValueError(f"ferl_settings must be concepts or learner, got {self.ferl_settings!r}")
        if self.train_concepts not in ("auto", "cross-fitted", "in-sample"):
            raise ValueError("train_concepts must be auto, cross-fitted or in-sample, "
                             f"got {self.train_concepts!r}")

    @property
    def detectors(self) -> list[str]:
        """Score names: ``"<head>:<kind>"`` for FERL, then the baseline keys."""
        return [f"{h}:{k}" for h in self.heads for k in self.ferl_kinds] + list(self.baselines)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def check_keep_checkpoints(keep: str) -> None:
    """Raise ValueError unless ``keep`` is one of :data:`KEEP_CHECKPOINTS`."""
    if keep not in KEEP_CHECKPOINTS:
        raise ValueError(f"keep_checkpoints must be one of {list(KEEP_CHECKPOINTS)}, got {keep!r}")


def prune_checkpoints(fold_dir: Path, keep: str) -> list[str]:
    """Delete the fold detector's checkpoints that ``keep`` does not name; return what is left.

    Runs after the fold's concept tables are exported: the evaluation (and a later re-evaluation
    of the fold) reads only those tables, so ``none`` loses nothing the protocol needs. A deleted
    best checkpoint is marked in ``detector/metrics.json`` (``best_checkpoint: null``).
    """
    ckpt_dir = fold_dir / "detector" / "checkpoints"
    kept = []
    for ckpt in sorted(ckpt_dir.glob("*.ckpt")):
        if keep == "all" or (keep == "best" and ckpt.stem == "best"):
            kept.append(ckpt.name)
        else:
            ckpt.unlink()
    metrics_file = fold_dir / "detector" / "metrics.json"
    summary = json.loads(metrics_file.read_text()) if metrics_file.is_file() else None
    best = summary.get("best_checkpoint") if summary else None
    if best and Path(best).name not in kept:
        summary["best_checkpoint"] = None
        atomic_write_text(metrics_file, json.dumps(summary, indent=2) + "\n")
    return kept
