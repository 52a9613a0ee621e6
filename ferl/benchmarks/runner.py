"""Run the whole tabular benchmark: data sets x folds x studies.

For every data set and fold: the methods of :mod:`ferl.benchmarks.methods`
(:func:`ferl.benchmarks.protocol.run_methods`), then, when FERL is importable, the
leave-one-class-out OOD study on multiclass sets, the FERL-deep ablations and the covariate-shift
study, all on the same scaled folds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from ferl.benchmarks.ablations import run_ablations
from ferl.benchmarks.keel import KeelDataset, list_datasets, load_keel
from ferl.benchmarks.methods import available_methods, make_method
from ferl.benchmarks.ood import run_leave_one_class_out
from ferl.benchmarks.protocol import make_splits, run_methods, scale_fold
from ferl.benchmarks.shift import run_covariate_shift

__all__ = ["QUICK_DATASETS", "BenchmarkConfig", "BenchmarkResult", "run_benchmark"]

#: ``--quick``: six small-to-medium sets (binary and multiclass, curved and linear boundaries).
QUICK_DATASETS = ("wine", "glass", "ecoli", "pima", "vehicle", "banana")
#: FERL variants evaluated by the OOD study (paper Table 3).
OOD_FERL = ("ferl-deep", "ferl-medium")


@dataclass
class BenchmarkConfig:
    """Settings of one benchmark run.

    Attributes
    ----------
    data_root : Path
        Folder with the ``<name>.dat`` files (and ``INDEX.tsv``).
    datasets : list of str or None
        Names to run; ``None``: every data set under ``data_root``.
    folds : int
        Outer stratified folds (paper: 5).
    seed : int
    methods : list of str or None
        Registry keys; ``None``: every method available here.
    ood, ablations, shift : bool
        Run the leave-one-class-out, ablation and covariate-shift studies (they need FERL).
    ood_max_classes : int or None
        Hold out at most this many classes per fold in the OOD study (``None``: all).
    refit_cci : bool
        Refit FERL-deep with CCI for the split-criterion ablation.
    n_threads : int
        BLAS/OpenMP threads per process (1 avoids oversubscription on shared cores).
    progress : bool
        Show a tqdm bar over data sets x folds on a terminal (none when stderr goes to a log file,
        which its redraws would fill).
    """

    data_root: Path
    datasets: list[str] | None = None
    folds: int = 5
    seed: int = 0
    methods: list[str] | None = None
    ood: bool = True
    ablations: bool = True
    shift: bool = True
    ood_max_classes: int | None = None
    refit_cci: bool = True
    n_threads: int = 1
    progress: bool = True


@dataclass
class BenchmarkResult:
    """Raw per-fold tables of a run (every row has ``dataset`` and ``fold``).

    Attributes
    ----------
    main, ood, ablations, shift : pandas.DataFrame
        Method rows, OOD rows (``holdout``, ``detector``), ablation rows (``study``,
        ``variant``), shift rows (``k``, ``method``).
    datasets : pandas.DataFrame
        ``name, n, d, n_classes`` per data set (``d`` after one-hot encoding).
    notes : list of str
        What was skipped and why.
    elapsed : float
        Wall-clock seconds.
    """

    main: pd.DataFrame
    ood: pd.DataFrame
    ablations: pd.DataFrame
    shift: pd.DataFrame
    datasets: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    elapsed: float = 0.0


def _load_all(config: BenchmarkConfig) -> list[KeelDataset]:
    root = Path(config.data_root)
    names = config.datasets if config.datasets is not None else list_datasets(root)
    return [load_keel(root / f"{name}.dat") for name in names]


def run_benchmark(config: BenchmarkConfig) -> BenchmarkResult:
    """Run every study of ``config`` on every data set and fold.

    Raises
    ------
    FileNotFoundError
        A data set file is missing.
    ValueError
        A malformed data file, an unknown method, or a bad fold count.
    """
    start = time.perf_counter()
    datasets = _load_all(config)
    names, skipped = available_methods(config.methods)
    notes = [f"method {m} skipped: {why}" for m, why in skipped.items()]
    has_deep = "ferl-deep" in names
    if not has_deep and (config.ood or config.ablations or config.shift):
        notes.append("OOD-FERL, ablation and shift studies need ferl-deep: FERL rows skipped")
    ood_ferl = [m for m in OOD_FERL if m in names]
    main, ood, abl, shift, ood_skipped = [], [], [], [], set()
    work = [(d, s) for d in datasets for s in make_splits(d.y, config.folds, config.seed)]
    bar = tqdm(work, desc="datasets x folds", disable=None if config.progress else True,
               unit="fold")
    with threadpool_limits(limits=config.n_threads):
        for dataset, split in bar:
            bar.set_postfix_str(f"{dataset.name} fold {split.fold}")
            key = {"dataset": dataset.name, "fold": split.fold}
            data = scale_fold(dataset.X, dataset.y, split, dataset.n_classes)
            rows, fitted = run_methods(data, names, config.seed)
            main += [{**key, **row} for row in rows]
            if config.ood and dataset.n_classes >= 3:
                models = {m: make_method(m, config.seed).estimator for m in ood_ferl}
                rows, missing = run_leave_one_class_out(
                    data, models, config.seed, config.ood_max_classes
                )
                ood += [{**key, **row} for row in rows]
                ood_skipped |= missing
            if has_deep and config.ablations:
                deep = fitted["ferl-deep"].fitted_
                rows = run_ablations(deep, data, config.seed + split.fold, config.refit_cci)
                abl += [{**key, **row} for row in rows]
            if has_deep and config.shift:
                deep = fitted["ferl-deep"].fitted_
                rows = run_covariate_shift(deep, data, config.seed + split.fold)
                shift += [{**key, **row} for row in rows]
    if ood_skipped:
        notes.append(
            "FERL OOD scores unavailable (ood_score raised AttributeError): "
            + ", ".join(sorted(ood_skipped))
        )
    info = pd.DataFrame(
        [
            {"name": d.name, "n": d.X.shape[0], "d": d.X.shape[1], "n_classes": d.n_classes}
            for d in datasets
        ]
    )
    return BenchmarkResult(
        pd.DataFrame(main),
        pd.DataFrame(ood),
        pd.DataFrame(abl),
        pd.DataFrame(shift),
        info,
        notes,
        time.perf_counter() - start,
    )
