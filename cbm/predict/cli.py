"""``predict``: apply a finished run to new images (or concept vectors) and explain each decision.

::

    predict --run runs/demo --folder my_images/            # every image below the folder
    predict --run runs/demo --images a.png b.jpg --out out/
    predict --run runs/demo --concepts concepts.csv        # concept vectors made elsewhere

writes ``predictions.csv``, ``predictions.jsonl`` and ``predictions.md`` (:mod:`cbm.predict.output`)
into ``--out`` (default ``<run>/predictions``), replacing the previous output there as a whole
(other files of the folder stay), while holding the folder's write lock from the start. Unreadable
images get a row with the reason; when no input could be predicted, the exit status is 1 and
``--out`` is unchanged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from jsonargparse import ArgumentParser
from jsonargparse.typing import PositiveInt

from cbm.jobs import console_main, phase
from cbm.predict.inputs import find_images, read_concepts_file
from cbm.predict.output import FORMATS, write_predictions
from cbm.predict.pipeline import Pipeline, Predictions
from cbm.runtime import add_threads_argument, set_threads
from ferl.io.persist import folder_lock

__all__ = ["predict_main", "predict_parser", "run_predict"]


def predict_parser() -> ArgumentParser:
    """The ``predict`` argument parser."""
    p = ArgumentParser(prog="predict", description=(
        "Apply a finished run (train-detector + fit-head) to new images: class, credal set, abstention, "
        "ignorance, OOD score and flag, anomalous attributes; a table and a page of explanations."))
    p.add_argument("--run", type=str, required=True, help="run directory")
    p.add_argument("--images", type=str, nargs="+", default=None, help="image files")
    p.add_argument("--folder", type=str | None, default=None, help="folder searched for images (recursive)")
    p.add_argument("--concepts", type=str | None, default=None,
                   help="concept probabilities made elsewhere: a concept table .npz or a CSV "
                        "'sample_id,<concept>,...'")
    p.add_argument("--head", type=str, default="ferl-deep", help="FERL head of the run")
    p.add_argument("--inputs", type=Literal["raw", "calibrated"], default="calibrated",
                   help="the head fitted on raw or on calibrated concepts")
    p.add_argument("--out", type=str | None, default=None, help="output folder (default <run>/predictions)")
    p.add_argument("--format", type=Literal["csv", "jsonl", "both"], default="both", help="table format")
    p.add_argument("--page", type=bool, default=True, help="write predictions.md with explanations")
    p.add_argument("--page-limit", type=PositiveInt, default=100, help="inputs explained on the page")
    p.add_argument("--top-k", type=PositiveInt, default=5, help="anomalous attributes per input")
    p.add_argument("--batch-size", type=PositiveInt, default=64, help="images per detector pass")
    p.add_argument("--device", type=str, default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--progress", type=bool, default=True, help="progress bar on stderr (on a terminal)")
    add_threads_argument(p)
    return p


def run_predict(run: str, *, images: Sequence[str] | None = None, folder: str | None = None,
                concepts: str | None = None, head: str = "ferl-deep", inputs: str = "calibrated",
                out: str | None = None, formats: Sequence[str] = tuple(FORMATS), page: bool = True,
                page_limit: int = 100, top_k: int = 5, batch_size: int = 64, device: str = "auto",
                progress: bool = False) -> tuple[Predictions, list[Path]]:
    """Predict the inputs given by exactly one of ``images``, ``folder``, ``concepts`` and write the
    table (and page) into ``out``; return the predictions and the written files.

    ``out`` is locked (:func:`ferl.io.persist.folder_lock`) before the run is loaded, and its
    previous output is replaced as a whole (:func:`cbm.predict.output.write_predictions`).

    Raises
    ------
    ValueError
        Not exactly one input option, a folder among ``images`` (use ``folder``), bad options /
        inputs (see :class:`Pipeline`), no input could be predicted (``out`` unchanged), ``out`` is
        a file or holds a file of the user's where ``predict`` writes.
    FileNotFoundError
        The run, its head, the folder or the concepts file is missing, or the folder holds no image.
    FolderBusyError
        Another process is writing ``out``.
    """
    if sum(x is not None for x in (images, folder, concepts)) != 1:
        raise ValueError("give exactly one of --images, --folder or --concepts")
    # the images are found before the run is loaded: a missing folder fails at once
    paths = None if concepts is not None else (
        [Path(p) for p in images] if images is not None else find_images(folder))
    if images is not None and (folders := [str(p) for p in paths if p.is_dir()]):
        raise ValueError(f"--images {folders[0]} is a folder ({len(folders)} folder(s) among --images): "
                         f"use --folder {folders[0]} to predict the images in it")
    if out is None and not Path(run).is_dir():  # the default --out lies in the run: create no run folder
        raise FileNotFoundError(f"run directory {run} does not exist")
    out_dir = Path(out) if out is not None else Path(run) / "predictions"
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {out_dir} is a file, not a folder")
    with folder_lock(out_dir):  # a second job writing the same folder stops here, at once
        pipe = Pipeline.from_run(run, head, inputs, device=device, batch_size=batch_size, top_k=top_k)
        if paths is None:
            given = read_concepts_file(concepts, pipe.concept_names)
            pred = pipe.predict_concepts(given.probs, given.ids, true_class=given.true_class)
            source = f"concept vectors from `{concepts}`"
        else:
            ids = [str(p) if folder is None else p.relative_to(folder).as_posix() for p in paths]
            pred = pipe.predict(paths, ids, progress=progress)
            source = f"{len(paths)} image(s) from `{folder}`" if folder else f"{len(paths)} image file(s)"
        header = [f"Run `{run}`, head {head} on {inputs} concepts, device {pipe.device}; inputs: {source}."]
        files = write_predictions(pred, out_dir, formats=formats, page=page, header=header,
                                  title=f"Predictions of {Path(run).name}", limit=page_limit)
    return pred, files


def predict_main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``predict``; prints a summary and the written files.

    Bad options, inputs and file errors end with one ``predict: error: <message>`` line (exit
    status 1), and so does a run where no input could be read (naming the first reasons; ``--out``
    is then unchanged); otherwise unreadable inputs are listed, and so are the warnings of
    predicted rows (an image far smaller than the detector's input).
    SIGTERM / SIGINT end it with one line (exit status 143 / 130, :func:`cbm.jobs.console_main`).
    """
    cfg = predict_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    start = time.perf_counter()

    def job() -> tuple[Predictions, list[Path]]:
        set_threads(cfg.threads)
        with phase("predicting", "the run is unchanged; --out holds its previous predictions, whole "
                   "(the new ones replace them all at once, at the end)"):
            return run_predict(cfg.run, images=cfg.images, folder=cfg.folder, concepts=cfg.concepts,
                               head=cfg.head, inputs=cfg.inputs, out=cfg.out,
                               formats=("csv", "jsonl") if cfg.format == "both" else (cfg.format,),
                               page=cfg.page, page_limit=cfg.page_limit, top_k=cfg.top_k,
                               batch_size=cfg.batch_size, device=cfg.device, progress=cfg.progress)

    pred, files = console_main("predict", job)
    rows = [r for r in pred.rows if r["error"] is None]
    for r in pred.rows:
        if r["error"] is not None:
            print(f"not predicted: {r['error']}")
        elif r["warning"] is not None:
            print(f"warning: {r['input']}: {r['warning']}")
    print(f"predicted {len(rows)} of {len(pred.rows)} input(s) in {time.perf_counter() - start:.1f} s: "
          f"{sum(r['ood_flag'] for r in rows)} flagged as novel ({pred.threshold['kind']} OOD score), "
          f"{sum(r['abstained'] for r in rows)} "
          f"abstained, {pred.n_errors} unreadable")
    for f in files:
        print(f"wrote {f}")
