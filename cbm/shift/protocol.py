"""``evaluate-shift``: a run's test images under ImageNet-C corruptions, scored by every method.

``evaluate-shift --run RUN --config configs/shift/<name>.yaml --out DIR`` opens the run
(`cbm.shift.images.open_run`), corrupts its test images (a seeded subset of ``max_rows`` of them)
with each evaluated corruption at each severity (`cbm.data.corruptions`, ImageNet-C's definitions:
the corruption acts on the evaluation crop), passes them through the run's own detector, calibration
and heads, and scores every method of `cbm.shift.methods` on the same rows. It writes

``DIR/shift.csv``
    one row per (method, corruption, severity; severity 0 = the clean test split, corruption
    ``none``): ``method, corruption, group, severity, n, accuracy, ece, aurc, coverage, set_size,
    abstention, answered_right, detect_auroc`` (`cbm.shift.methods.cell_metrics`);
``DIR/shift.json``
    the product (the head and operating point ``predict`` uses), the corruptions, severities, rows and
    settings;
``DIR/shift.md``, ``DIR/coverage.png``
    the tables and the coverage / set size / detection curves against severity (`cbm.shift.report`).

The corrupted detector outputs are cached under ``DIR/cache/`` by run and cell
(`cbm.shift.images.cached_outputs`): a stopped run keeps its finished cells and the next one reuses
them. The four result files are replaced together at the end (`ferl.io.persist.StepWriter`); the job
holds ``DIR``'s write lock.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

from cbm.data.corruptions import GROUPS
from cbm.shift.images import cached_outputs, open_run, test_rows
from cbm.shift.methods import ShiftMethods, cell_metrics
from cbm.shift.report import COLUMNS, shift_markdown, shift_png
from cbm.shift.settings import ShiftSettings
from ferl.io.persist import StepWriter, folder_lock

__all__ = ["evaluate_shift"]

log = logging.getLogger(__name__)


def _rows(frame_rows: list, outputs: dict, y: np.ndarray, corruption: str, severity: int,
          clean: dict | None) -> None:
    for method, out in outputs.items():
        metrics = cell_metrics(out, y, None if clean is None else clean[method])
        frame_rows.append({"method": method, "corruption": corruption,
                           "group": GROUPS.get(corruption, "clean"), "severity": severity, **metrics})


def evaluate_shift(run_dir: str | os.PathLike, settings: ShiftSettings, out: str | os.PathLike,
                   data_root: str | None = None, accelerator: str = "auto") -> pd.DataFrame:
    """Run the protocol of the module docstring; return the shift table (``shift.csv``'s rows).

    Parameters
    ----------
    run_dir : path-like
        A finished run (``train-detector`` + ``fit-head``) of an image data set.
    settings : ShiftSettings
    out : path-like
        Output folder (created).
    data_root : str, optional
        Where the run's data set lies (else its config's, then ``$FERL_DATA_ROOT``).
    accelerator : str
        Of the detector's forward passes (``auto``: a GPU when present).

    Raises
    ------
    FileNotFoundError, ValueError
        What `cbm.shift.images.open_run` refuses (no detector, no feature typicality, no heads, a
        run of feature vectors), a test split without rows of the heads' classes.
    ferl.io.persist.FolderBusyError
        Another job is writing ``out``.
    """
    out = Path(out)
    with folder_lock(out):
        run = open_run(run_dir, [settings.product, *settings.presets], settings.inputs, data_root)
        methods = ShiftMethods(run, settings.product, settings.presets, settings.inputs)
        test = run.tables["test"]
        head = run.heads[settings.product]
        labels = np.asarray(test.class_names)[test.y]
        seen = np.isin(labels, head.classes_)
        if not seen.any():
            raise ValueError(f"no test row of {run.run_dir} belongs to a class the heads know")
        if not seen.all():
            log.info("%d test rows of classes the heads never saw are left out", int((~seen).sum()))
        y = head.class_index(labels[seen])
        clean = methods.outputs(test.probs[seen], test.feature_score[seen])
        rows: list[dict] = []
        _rows(rows, clean, y, "none", 0, None)
        clean_scores = {m: o.shift_score for m, o in clean.items()}
        subset = test_rows(run, settings.max_rows, settings.seed)
        subset = subset[seen[subset]]
        start = time.perf_counter()
        for corruption in settings.corruptions:
            for severity in settings.severities:
                probs, score = cached_outputs(
                    run, subset, corruption, severity, settings.seed, out / "cache",
                    batch_size=settings.batch_size, num_workers=settings.num_workers, accelerator=accelerator)
                _rows(rows, methods.outputs(probs, score), head.class_index(labels[subset]), corruption,
                      severity, clean_scores)
            log.info("%s done (%.0f s so far)", corruption, time.perf_counter() - start)
        frame = pd.DataFrame(rows, columns=COLUMNS)
        product = {"method": "product", "head": settings.product, "inputs": settings.inputs,
                   "operating_point": head.operating_}
        meta = {"run": str(run.run_dir), "product": product,
                "corruptions": list(settings.corruptions), "severities": list(settings.severities),
                "rows": int(subset.size), "clean_rows": int(seen.sum()), "settings": settings.as_dict(),
                "methods": methods.names, "cache": str(out / "cache" / run.key)}
        with StepWriter(out) as step:
            step.write_text(out / "shift.csv", frame.to_csv(index=False))
            step.write_text(out / "shift.json", json.dumps(meta, indent=1) + "\n")
            step.write_text(out / "shift.md", shift_markdown(frame, meta))
            step.path(out / "coverage.png").write_bytes(shift_png(frame, meta))
    return frame
