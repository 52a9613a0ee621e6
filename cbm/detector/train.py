"""The detector training job: data module + :class:`~cbm.detector.ConceptDetector` + Lightning Trainer.

One call of :func:`train_detector` fills a run directory::

    <run_dir>/config.yaml            the full configuration (written by the CLI)
    <run_dir>/environment.json       versions, seed, git commit, device
    <run_dir>/detector/checkpoints/  best.ckpt (monitored metric) and last.ckpt
    <run_dir>/detector/logs/         CSV logs (version_N per session); wandb/ when enabled
    <run_dir>/detector/metrics.json  concept accuracy / error / AUROC of the best checkpoint
    <run_dir>/concepts/{split}.npz   concept tables (see :mod:`cbm.data.concept_tables`)
    <run_dir>/concepts/train_crossfit.npz  out-of-fold train concepts (``crossfit_folds``)
    <run_dir>/detector/features/     cached backbone features (frozen backbone)

Resuming with ``ckpt_path="last"`` restores epoch, global step, optimizer and LR-scheduler state;
the per-epoch reseeding callback makes the resumed run repeat the uninterrupted one.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from lightning.pytorch import Callback, LightningDataModule, Trainer, seed_everything
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch.utils.data import DataLoader, RandomSampler

from cbm.data.concept_tables import check_concept_names
from cbm.data.corruptions import VALIDATION
from cbm.detector.checkpoint import checkpoint_concept_names
from cbm.detector.crossfit import CROSSFIT_SPLIT, crossfit_probs
from cbm.detector.environment import environment_info
from cbm.detector.export import export_concept_tables, export_loaders
from cbm.detector.frozen import frozen_datamodule
from cbm.detector.module import ConceptDetector, imbalance_pos_weight
from cbm.detector.shifted import shift_draws, shift_table
from cbm.jobs import phase
from ferl.io.persist import atomic_write_text, folder_lock

__all__ = ["DetectorRun", "ReseedEachEpoch", "environment_info", "quiet_library_noise", "train_detector"]

log = logging.getLogger(__name__)


class _NoTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("💡 Tip")


_NO_TIPS = _NoTips()


def quiet_library_noise() -> None:
    """Silence two notices Lightning repeats at every ``fit`` (console scripts call this).

    A torch deprecation warning from Lightning's pytree helper (``LeafSpec``) and Lightning's
    advertisement for its cloud logger (``💡 Tip: ... litlogger``). Nothing else is filtered.
    """
    warnings.filterwarnings("ignore", message=r".*LeafSpec.* is deprecated")
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).addFilter(_NO_TIPS)

#: (metric key, mode) per ``monitor`` choice.
MONITORS = {"loss": ("val/loss", "min"), "auroc": ("val/auroc", "max")}


class ReseedEachEpoch(Callback):
    """Make each training epoch's randomness a function of ``seed + epoch`` only.

    At the start of epoch e, every global generator is reseeded (``seed_everything(seed + e)``:
    augmentation in the main process, dropout), and the training loader and its shuffling
    sampler get private generators seeded with ``seed + e`` (so creating the data iterator
    draws nothing from the global state). Lightning creates a resumed run's first data iterator
    before any epoch hook; with these generators that no longer matters, and a run resumed from
    an epoch-end checkpoint repeats the uninterrupted run. The exception: random augmentation
    inside DataLoader worker processes in the first resumed epoch (worker seeds are drawn when
    the iterator is created), so exact resumption needs ``num_workers: 0``.
    """

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: Any) -> None:
        seed = self.seed + trainer.current_epoch
        seed_everything(seed, workers=True, verbose=False)
        loader = trainer.train_dataloader
        if isinstance(loader, DataLoader):
            loader.generator = torch.Generator().manual_seed(seed)
            if isinstance(loader.sampler, RandomSampler):
                loader.sampler.generator = torch.Generator().manual_seed(seed)


@dataclass
class DetectorRun:
    """What :func:`train_detector` produced.

    Attributes
    ----------
    run_dir : Path
    best_checkpoint : Path or None
        None when checkpointing was off (e.g. ``fast_dev_run``); the tables then come from the
        final in-memory weights.
    last_checkpoint : Path or None
    tables : dict of str to Path
        Split name -> written concept table.
    metrics : dict
        Split name -> :func:`~cbm.detector.concept_metrics` of that table.
    epochs : int
        Training epochs completed.
    global_step : int
        Optimizer steps taken.
    fit_seconds : float
        Wall time of ``trainer.fit`` in this session.
    """

    run_dir: Path
    best_checkpoint: Path | None
    last_checkpoint: Path | None
    tables: dict[str, Path] = field(default_factory=dict)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    epochs: int = 0
    global_step: int = 0
    fit_seconds: float = 0.0


def _resolve_precision(trainer_kwargs: Mapping[str, Any]) -> str:
    """``precision: null`` -> bf16-mixed on a bf16-capable GPU (when the accelerator allows), else 32."""
    precision = trainer_kwargs.get("precision")
    if precision is not None:
        return str(precision)
    accelerator = str(trainer_kwargs.get("accelerator", "auto"))
    gpu_ok = accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    return "bf16-mixed" if gpu_ok and torch.cuda.is_bf16_supported() else "32-true"


def _resolve_ckpt_path(ckpt_path: str | None, ckpt_dir: Path) -> Path | None:
    """``None`` | ``"last"`` | ``"best"`` | a file -> an existing checkpoint file or None.

    ``"last"`` without a last checkpoint starts afresh (with a warning), so a restarted job
    script can always pass it.
    """
    if ckpt_path is None:
        return None
    if ckpt_path in ("last", "best"):
        path = ckpt_dir / f"{ckpt_path}.ckpt"
        if path.is_file():
            return path
        if ckpt_path == "best":
            raise FileNotFoundError(f"no best checkpoint in {ckpt_dir}")
        log.warning("ckpt_path='last' but %s holds no last.ckpt: training from scratch", ckpt_dir)
        return None
    path = Path(ckpt_path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} (ckpt_path) does not exist")
    return path


def _build_loggers(kind: str, log_dir: Path, run_name: str) -> list[Logger]:
    loggers: list[Logger] = [CSVLogger(save_dir=str(log_dir), name="logs")]
    if kind == "wandb":
        loggers.append(WandbLogger(save_dir=str(log_dir), offline=True, project="ferl-cbm",
                                   name=run_name))
    elif kind != "csv":
        raise ValueError(f"logger must be 'csv' or 'wandb', got {kind!r}")
    return loggers


def train_detector(
    datamodule: LightningDataModule,
    *,
    run_dir: str | os.PathLike,
    model: Mapping[str, Any] | None = None,
    trainer: Mapping[str, Any] | None = None,
    seed: int = 0,
    logger: Literal["csv", "wandb"] = "csv",
    monitor: Literal["loss", "auroc"] = "loss",
    pos_weight: Literal["none", "imbalance"] = "none",
    ckpt_path: str | None = None,
    export_splits: Sequence[str] = ("train", "val", "test"),
    crossfit_folds: int = 0,
    feature_cache: str | os.PathLike | None = None,
    config_text: str | None = None,
    callbacks: Iterable[Callback] = (),
    shift_corruptions: Sequence[str] = tuple(VALIDATION),
    shift_draws: int = 2,
) -> DetectorRun:
    """Train a concept detector on ``datamodule`` and export its concept tables.

    Parameters
    ----------
    datamodule : LightningDataModule
        A :class:`cbm.data.ConceptDataModule` (or one with its ``concept_names``,
        ``class_names``, ``input_kind``, ``n_features`` and ``eval_dataloader(split)``).
    run_dir : path-like
        Run directory (created).
    model : mapping, optional
        Keyword arguments of :class:`~cbm.detector.ConceptDetector` except the data-derived
        ``concept_names``, ``input_kind``, ``feature_dim`` and ``pos_weight``.
    trainer : mapping, optional
        Keyword arguments of ``lightning.pytorch.Trainer`` (accelerator, devices, strategy,
        max_epochs, deterministic ...); ``precision: None`` means bf16-mixed on GPU, else 32-true;
        ``enable_progress_bar: None`` (unset) means a bar only when stdout is a terminal (a bar
        redrawn into a log file fills it: 109 lines of it in a demo log). Loggers, callbacks and
        ``default_root_dir`` are set here.
    seed : int
        Seeds everything (``lightning.seed_everything``) and each epoch (:class:`ReseedEachEpoch`).
    logger : {"csv", "wandb"}
        CSV logs always; ``"wandb"`` adds an offline wandb run (no account needed).
    monitor : {"loss", "auroc"}
        Selects ``best.ckpt`` by lowest ``val/loss`` or highest ``val/auroc``.
    pos_weight : {"none", "imbalance"}
        ``"imbalance"``: Koh et al.'s per-concept positive weights from the training labels.
    ckpt_path : str, optional
        ``"last"`` resumes from ``<run_dir>/detector/checkpoints/last.ckpt`` (from scratch when
        absent), ``"best"`` or a file path resumes from that checkpoint.
    export_splits : sequence of str
        Splits whose concept probabilities (best checkpoint) go to ``concepts/{split}.npz``.
    crossfit_folds : int
        K >= 2: also write cross-fitted (out-of-fold) train concepts, ``concepts/train_crossfit.npz``
        (:mod:`cbm.detector.crossfit`); 0: not.
    feature_cache : path-like, optional
        Folder of the cached backbone features of a frozen backbone (``model.freeze_backbone``,
        :mod:`cbm.detector.frozen`); default ``<run_dir>/detector/features``.
    config_text : str, optional
        Configuration to save as ``config.yaml``.
    callbacks : iterable of Callback
        Extra Lightning callbacks.
    shift_corruptions, shift_draws : sequence of str, int
        The shift-calibration table (``concepts/val_shift.npz``, `cbm.detector.shifted`): each val
        image under each of these calibration corruptions at ``shift_draws`` severities; 0 draws,
        or a detector that does not read images, writes none.

    Returns
    -------
    run : DetectorRun

    Raises
    ------
    ValueError
        Bad options, or a resume checkpoint whose concept names differ from the data's (the
        difference is listed).
    FileNotFoundError
        A named checkpoint or requested pretrained weights are absent.
    SystemExit
        The process received SIGTERM during training (a non-zero exit with a message, not
        Lightning's silent exit status 0).
    FloatingPointError
        The training loss became NaN or infinite.
    ferl.io.persist.FolderBusyError
        Another process is writing ``run_dir`` (the job holds its write lock; DDP ranks other than
        0 do not take it).
    """
    with folder_lock(run_dir) if getattr(rank_zero_only, "rank", 0) == 0 else nullcontext():
        return _train_detector(
            datamodule, run_dir=run_dir, model=model, trainer=trainer, seed=seed, logger=logger,
            monitor=monitor, pos_weight=pos_weight, ckpt_path=ckpt_path, export_splits=export_splits,
            crossfit_folds=crossfit_folds, feature_cache=feature_cache, config_text=config_text,
            callbacks=callbacks, shift=(list(shift_corruptions), shift_draws))


def _train_detector(datamodule, *, run_dir, model, trainer, seed, logger, monitor, pos_weight, ckpt_path,
                    export_splits, crossfit_folds, feature_cache, config_text, callbacks,
                    shift) -> DetectorRun:
    if monitor not in MONITORS:
        raise ValueError(f"monitor must be one of {sorted(MONITORS)}, got {monitor!r}")
    if pos_weight not in ("none", "imbalance"):
        raise ValueError(f"pos_weight must be 'none' or 'imbalance', got {pos_weight!r}")
    if crossfit_folds != 0 and crossfit_folds < 2:
        raise ValueError(f"crossfit_folds must be 0 (off) or >= 2, got {crossfit_folds}")
    if shift[1]:
        shift_draws(["check"], shift[0], shift[1], seed)  # bad corruptions or draws fail before training
    run_dir = Path(run_dir)
    det_dir = run_dir / "detector"
    ckpt_dir = det_dir / "checkpoints"
    det_dir.mkdir(parents=True, exist_ok=True)
    seed_everything(seed, workers=True, verbose=False)

    datamodule.prepare_data()
    datamodule.setup("fit")
    loaders = export_loaders(datamodule, export_splits)
    model_kwargs = dict(model or {})
    if pos_weight == "imbalance":
        train_labels = datamodule.eval_dataloader("train").dataset.concept_labels
        model_kwargs["pos_weight"] = imbalance_pos_weight(train_labels).tolist()
    detector = ConceptDetector(
        concept_names=list(datamodule.concept_names),
        input_kind=datamodule.input_kind,
        feature_dim=datamodule.n_features,
        **model_kwargs,
    )
    resume = _resolve_ckpt_path(ckpt_path, ckpt_dir)
    if resume is not None:
        check_concept_names(datamodule.concept_names, checkpoint_concept_names(resume),
                            source="the data module", reference=f"checkpoint {resume}")

    metric, mode = MONITORS[monitor]
    # Lightning 2.6 writes save_last's last.ckpt only when a top-k checkpoint is saved at the same
    # step, so "last" gets its own unmonitored callback (overwritten after every validation).
    ckpt_cb = ModelCheckpoint(dirpath=ckpt_dir, filename="best", monitor=metric, mode=mode,
                              save_top_k=1, enable_version_counter=False,
                              auto_insert_metric_name=False)
    last_cb = ModelCheckpoint(dirpath=ckpt_dir, filename="last", monitor=None, save_top_k=1,
                              enable_version_counter=False)
    trainer_kwargs = {"accelerator": "auto", **dict(trainer or {})}
    trainer_kwargs["precision"] = _resolve_precision(trainer_kwargs)
    if trainer_kwargs.get("enable_progress_bar") is None:
        trainer_kwargs["enable_progress_bar"] = sys.stdout.isatty()  # where Lightning draws it
    images = datamodule  # the corrupted val images of the shift-calibration table go through the backbone
    if detector.frozen:  # the backbone runs once per image: cached features stand in for images
        datamodule = frozen_datamodule(detector, datamodule, feature_cache or det_dir / "features",
                                       accelerator=trainer_kwargs["accelerator"],
                                       precision=trainer_kwargs["precision"])
        loaders = export_loaders(datamodule, export_splits)
    initial = copy.deepcopy(detector) if crossfit_folds else None
    pl_trainer = Trainer(
        **trainer_kwargs,
        default_root_dir=str(det_dir),
        logger=_build_loggers(logger, det_dir, run_dir.name),
        callbacks=[ckpt_cb, last_cb, ReseedEachEpoch(seed), LearningRateMonitor("step"), *callbacks],
    )
    if pl_trainer.is_global_zero:
        if config_text is not None:
            atomic_write_text(run_dir / "config.yaml", config_text)
        env = environment_info(pl_trainer, seed)
        env["resumed_from"] = str(resume) if resume is not None else None
        atomic_write_text(run_dir / "environment.json", json.dumps(env, indent=2) + "\n")

    start = time.perf_counter()
    kept = (f"the checkpoints of the epochs finished so far (if any) are in {ckpt_dir}; resume with "
            "--ckpt-path last")
    try:
        with phase("training the detector", kept):
            pl_trainer.fit(detector, datamodule=datamodule, ckpt_path=str(resume) if resume else None)
    except SIGTERMException as err:  # Lightning's is a SystemExit with code None: exit status 0
        raise SystemExit(f"training interrupted by SIGTERM in epoch {pl_trainer.current_epoch}; {kept}") \
            from err
    fit_seconds = time.perf_counter() - start
    best = Path(ckpt_cb.best_model_path) if ckpt_cb.best_model_path else None
    last = Path(last_cb.best_model_path) if last_cb.best_model_path else None
    run = DetectorRun(run_dir=run_dir, best_checkpoint=best, last_checkpoint=last,
                      epochs=pl_trainer.current_epoch, global_step=pl_trainer.global_step,
                      fit_seconds=fit_seconds)
    if not pl_trainer.is_global_zero:
        return run

    # Export on one device: every rank of a DDP job has finished fitting here.
    summary = {"best_checkpoint": str(best) if best else None, "monitor": metric, "epochs": run.epochs,
               "global_step": run.global_step, "fit_seconds": round(fit_seconds, 2)}
    unchanged = (f"training finished: the checkpoints are in {ckpt_dir}; the concept tables and "
                 "detector/metrics.json are unchanged (they are replaced together); rerun with "
                 "--ckpt-path last to export")
    predicted = {}
    if initial is not None:
        with phase("cross-fitting the train concepts", unchanged):
            probs = crossfit_probs(initial, datamodule, n_folds=crossfit_folds, seed=seed,
                                   trainer=trainer_kwargs, monitor=(metric, mode), workdir=det_dir,
                                   callbacks=[ReseedEachEpoch(seed)])
        predicted[CROSSFIT_SPLIT] = (probs, datamodule.eval_dataloader("train").dataset)
    exported = ConceptDetector.from_checkpoint(best) if best is not None else detector
    with phase("exporting the concept tables", unchanged):
        run.tables, run.metrics = export_concept_tables(
            run_dir, exported, loaders, datamodule.class_names, accelerator=trainer_kwargs["accelerator"],
            precision=trainer_kwargs["precision"], summary=summary,
            concept_groups=getattr(datamodule, "concept_groups", None), predicted=predicted,
            shift=_shift_export(exported, images, shift, seed, trainer_kwargs,
                                feature_cache or det_dir / "features"))
    return run


def _shift_export(detector, images, shift, seed, trainer_kwargs, cache_dir):
    """The export's shift-calibration table maker (`cbm.detector.shifted.shift_table`), or None: no
    draws asked for, a detector or data set without images, or no val split."""
    corruptions, draws = shift
    table = getattr(images, "table", None)
    if (not draws or detector.hparams.input_kind != "image" or getattr(table, "kind", None) != "image"
            or not len(getattr(images, "parts", {}).get("val", ()))):
        return None
    return lambda typicality: shift_table(detector, images, typicality, corruptions, draws, seed,
                                          accelerator=trainer_kwargs["accelerator"],
                                          precision=trainer_kwargs["precision"], cache_dir=cache_dir)
