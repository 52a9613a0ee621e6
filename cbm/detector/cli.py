"""Console scripts of the concept-bottleneck pipeline (configs read with jsonargparse).

``train-detector --config configs/detector/synthetic.yaml --run-dir runs/x [--trainer.max_epochs 2]``
trains a concept detector and exports its concept tables (:func:`cbm.detector.train.train_detector`).
Every field of the config can be overridden on the command line (``--data.batch_size 16``,
``--model.lr 1e-3``, ``--trainer.devices 2`` ...); ``--print_config`` shows the merged result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from jsonargparse import ActionConfigFile, ArgumentParser
from lightning.pytorch import Trainer

from cbm.data import ConceptDataModule
from cbm.data.corruptions import VALIDATION
from cbm.detector.module import ConceptDetector
from cbm.detector.train import quiet_library_noise, train_detector
from cbm.jobs import console_main, phase
from cbm.runtime import add_threads_argument, set_threads

__all__ = ["detector_parser", "train_detector_main"]

#: ConceptDetector arguments that come from the data, not from the config.
_DATA_DERIVED = {"concept_names", "input_kind", "feature_dim", "pos_weight"}
#: Trainer arguments that the job sets itself.
_JOB_OWNED = {"logger", "callbacks", "default_root_dir", "enable_checkpointing"}


def detector_parser() -> ArgumentParser:
    """The ``train-detector`` argument parser: job options plus ``data.*``, ``model.*``, ``trainer.*``.

    ``data.*`` are the :class:`cbm.data.ConceptDataModule` arguments, ``model.*`` those of
    :class:`cbm.detector.ConceptDetector` (except the data-derived concept names, input kind,
    feature width and positive weights) and ``trainer.*`` those of ``lightning.pytorch.Trainer``
    (except logger, callbacks, default_root_dir and enable_checkpointing, set by the job;
    ``trainer.precision: null`` means bf16-mixed on GPU, else 32-true).
    """
    parser = ArgumentParser(
        prog="train-detector",
        description="Train a concept detector and export concept tables to <run-dir>/concepts/.",
    )
    parser.add_argument("--config", action=ActionConfigFile, help="YAML config file")
    parser.add_argument("--run-dir", type=str, required=True, help="run directory (created)")
    parser.add_argument(
        "--ckpt-path", type=str | None, default=None,
        help="resume: 'last' (<run-dir>/detector/checkpoints/last.ckpt), 'best' or a file",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the training run")
    parser.add_argument("--logger", type=Literal["csv", "wandb"], default="csv",
                        help="CSV logs always; 'wandb' adds an offline wandb run")
    parser.add_argument("--monitor", type=Literal["loss", "auroc"], default="loss",
                        help="best checkpoint by lowest val/loss or highest val/auroc")
    parser.add_argument("--pos_weight", type=Literal["none", "imbalance"], default="none",
                        help="'imbalance': Koh et al.'s per-concept positive weights")
    parser.add_argument("--export_splits", type=list[str], default=["train", "val", "test"],
                        help="splits whose concept probabilities are written to concepts/")
    parser.add_argument("--crossfit_folds", type=int, default=0,
                        help="K >= 2: also write out-of-fold train concepts (concepts/train_crossfit.npz)")
    parser.add_argument("--feature_cache", type=str | None, default=None,
                        help="folder of cached backbone features (model.freeze_backbone; default "
                             "<run-dir>/detector/features)")
    parser.add_argument("--shift_corruptions", type=list[str], default=list(VALIDATION),
                        help="calibration corruptions of the val images (concepts/val_shift.npz), for the "
                             "heads' shift-adaptive sets; ImageNet-C's validation corruptions by default")
    parser.add_argument("--shift_draws", type=int, default=2,
                        help="severities (of 1-5, drawn at random) per val image and corruption; 0: none")
    add_threads_argument(parser)
    parser.add_class_arguments(ConceptDataModule, "data", skip={"table"})
    parser.add_class_arguments(ConceptDetector, "model", skip=_DATA_DERIVED)
    parser.add_class_arguments(Trainer, "trainer", skip=_JOB_OWNED, fail_untyped=False)
    return parser


def train_detector_main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``train-detector``; prints the exported tables' concept metrics.

    Configuration, data and file errors, a non-finite loss and a run directory that another process
    is writing end the program with one ``train-detector: error: <message>`` line (exit status 1);
    SIGTERM / SIGINT at any point with one line saying what was kept (exit status 143 / 130), see
    :func:`cbm.jobs.console_main`.
    """
    parser = detector_parser()
    cfg = parser.parse_args(argv)
    quiet_library_noise()

    def job():
        set_threads(cfg.threads)
        with phase("preparing the run", f"{cfg.run_dir} holds at most this run's config.yaml and "
                   "environment.json besides what it held before"):
            return train_detector(
                ConceptDataModule(**cfg.data.as_dict()),
                run_dir=cfg.run_dir,
                model=cfg.model.as_dict(),
                trainer=cfg.trainer.as_dict(),
                seed=cfg.seed,
                logger=cfg.logger,
                monitor=cfg.monitor,
                pos_weight=cfg.pos_weight,
                ckpt_path=cfg.ckpt_path,
                export_splits=cfg.export_splits,
                crossfit_folds=cfg.crossfit_folds,
                feature_cache=cfg.feature_cache,
                config_text=parser.dump(cfg),
                shift_corruptions=cfg.shift_corruptions,
                shift_draws=cfg.shift_draws,
            )

    run = console_main("train-detector", job)
    print(f"run directory: {run.run_dir}  (best checkpoint: {run.best_checkpoint})")
    print(f"trained {run.epochs} epoch(s), {run.global_step} steps in {run.fit_seconds:.1f} s")
    for split, m in run.metrics.items():
        print(f"{split:>6}: n={m['n']:<6} concept accuracy {m['concept_acc']:.4f}  "
              f"concept error {m['concept_error']:.4f}  mean AUROC {m['auroc']:.4f}")
