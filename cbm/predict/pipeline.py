"""A trained run applied to new inputs: detector → calibration → FERL head in one pass.

>>> pipe = Pipeline.from_run("runs/demo")              # best detector checkpoint, ferl-deep
>>> result = pipe.predict(["a.png", "b.jpg"])          # paths, PIL images or uint8 arrays
>>> result.frame()                                     # one row per input (pandas)

Each input gets the head's decision at the run's operating point (:mod:`cbm.heads.operating`, the
same as every other command's): its class, its credal set (all classes = abstention), the
ignorance m(Θ), the OOD score of the kind the run's novelty threshold uses (named in the ``ood_kind``
column, :attr:`cbm.heads.FERLHead.ood_kind`) and whether it exceeds that threshold, the shift
score (the image's feature typicality under the run's detector, with the head's novelty) and its
flag, and the top-k anomalous attributes; the explanations show the same set and score. An input
that cannot be read keeps its row with an ``error`` and no prediction; an image far smaller than
the detector's input is predicted, with a ``warning`` on its row.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from cbm.concepts.calibration import ConceptCalibrator
from cbm.data import ConceptDataModule, build_transform
from cbm.data.common import UnreadableImageError
from cbm.data.concept_tables import check_concept_names
from cbm.detector import ConceptDetector
from cbm.detector.checkpoint import checkpoint_data_settings
from cbm.detector.typicality import FEATURE_TYPICALITY_FILE, FeatureTypicality
from cbm.heads import FERLHead
from cbm.heads.operating import decide, explain_decision
from cbm.predict.inputs import read_image, small_input_warning
from cbm.predict.rows import COLUMNS, OUTPUTS, Predictions, flat_row
from cbm.report.run import load_run
from ferl.explain import Explanation

__all__ = ["COLUMNS", "OUTPUTS", "Pipeline", "Predictions", "flat_row"]

log = logging.getLogger(__name__)

#: Where a run keeps the detector whose probabilities its concept tables hold.
CHECKPOINT = Path("detector") / "checkpoints" / "best.ckpt"
def _device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if re.fullmatch(r"cpu|cuda(:\d+)?", device) is None:
        raise ValueError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but torch sees no CUDA device; use --device cpu")
    return torch.device(device)


def _data_settings(ckpt: Path, config: dict[str, Any]) -> ConceptDataModule:
    """The data module (transform settings; it loads no data) the detector was trained with: from the
    checkpoint, or from the run's config.yaml for a checkpoint without them. An edited config.yaml
    changed the image size of predict's transform, and so every prediction, silently."""
    trained = checkpoint_data_settings(ckpt)
    if trained is None:
        return ConceptDataModule(**config)
    data, edited = ConceptDataModule(**trained), ConceptDataModule(**config)
    for key in ("image_size", "eval_crop_fraction"):
        if getattr(edited, key) != getattr(data, key):
            log.warning("config.yaml of the run gives %s %s, the detector was trained with %s: %s used",
                        key, getattr(edited, key), getattr(data, key), getattr(data, key))
    return data


@dataclass
class Pipeline:
    """A run's detector, calibrator and FERL head, ready to predict (build it with :meth:`from_run`).

    Attributes
    ----------
    run_dir : Path
    head_name : str
    inputs : {"raw", "calibrated"}
        Which of the head's two fits is used (calibrated: the detector's probabilities go through
        the run's isotonic calibrator first).
    head : FERLHead
    calibrator : ConceptCalibrator or None
    threshold : dict
        ``kind``, ``accept``, ``value``, ``fitted_on``: inputs whose OOD score of ``kind`` exceeds
        ``value`` are flagged as novel.
    detector : ConceptDetector or None
        None when the run keeps no checkpoint (then only :meth:`predict_concepts` works).
    transform : callable or None
        The run's evaluation transform (image → normalised tensor).
    device : torch.device
    batch_size : int
    top_k : int
        Anomalous attributes per input.
    decode_side : int or None
        Image files and PIL images are reduced while decoding to a shorter side of at least this
        many pixels (:func:`cbm.predict.inputs.read_image`); :meth:`from_run` sets twice the
        evaluation transform's resize, so the transform's own antialiased resize still makes the
        last step (a 10,000 x 10,000 photo no longer lies in memory at full size). None: no reduction.
    input_side : int or None
        The detector's input side in pixels (the run's ``image_size``): an image with a shorter
        side below ``input_side / cbm.predict.inputs.SMALL_INPUT_FACTOR`` gets a row ``warning``.
        None: no warning.
    typicality : FeatureTypicality or None
        The detector's feature typicality (``detector/feature_typicality.npz``): each image's
        feature score, read by the shift score. None: a run exported before it.
    """

    run_dir: Path
    head_name: str
    inputs: str
    head: FERLHead
    calibrator: ConceptCalibrator | None
    threshold: dict[str, Any]
    detector: ConceptDetector | None
    transform: Callable[[Any], torch.Tensor] | None
    device: torch.device
    batch_size: int = 64
    top_k: int = 5
    decode_side: int | None = None
    input_side: int | None = None
    typicality: FeatureTypicality | None = None

    @classmethod
    def from_run(cls, run_dir: str | os.PathLike, head: str = "ferl-deep", inputs: str = "calibrated", *,
                 device: str = "auto", batch_size: int = 64, top_k: int = 5) -> Pipeline:
        """Load a finished run (``train-detector`` + ``fit-head``).

        Parameters
        ----------
        run_dir : path-like
        head : str
            A FERL head of the run (``ferl-compact`` / ``ferl-medium`` / ``ferl-deep``).
        inputs : {"raw", "calibrated"}
        device : str
            ``auto`` (CUDA when available), ``cpu``, ``cuda`` or ``cuda:N``.
        batch_size : int
            Images per detector forward pass.
        top_k : int
            Anomalous attributes per input.

        Raises
        ------
        FileNotFoundError
            Not a run directory, the head is missing (the saved heads are listed), or a calibrated
            head without the run's ``calibration.json``.
        ValueError
            A head that is not FERL, a CUDA device without CUDA, a checkpoint whose concepts differ
            from the head's (the difference is listed), bad ``batch_size`` / ``top_k``.
        """
        if batch_size < 1 or top_k < 1:
            raise ValueError(f"batch_size and top_k must be >= 1, got {batch_size} and {top_k}")
        run = load_run(run_dir)
        model = run.head(head, inputs)
        if not isinstance(model, FERLHead):
            raise ValueError(f"head {head!r} is not a FERL head: predict needs credal sets and OOD scores; "
                             f"the run's heads: {run.heads()}")
        if inputs == "calibrated" and run.calibrator is None:
            raise FileNotFoundError(f"{Path(run_dir) / 'calibration.json'} not found: the calibrated head "
                                    "needs the run's calibrator (fit-head writes it)")
        threshold = model.ood_threshold_
        if threshold is None:  # a head saved before fit-head stored thresholds
            threshold = model.fit_ood_threshold(run.concepts("val", inputs))
            log.warning("head %s (%s) has no stored OOD threshold (fitted by an older fit-head): fitted "
                        "now on the run's val table, 95 %% accepted", head, inputs)
        dev = _device(device)
        ckpt = Path(run_dir) / CHECKPOINT
        detector, transform, decode_side, input_side = None, None, None, None
        typ_path = Path(run_dir) / FEATURE_TYPICALITY_FILE
        typicality = FeatureTypicality.load(typ_path) if typ_path.is_file() else None
        if ckpt.is_file():
            detector = ConceptDetector.from_checkpoint(ckpt, map_location=dev).eval()
            check_concept_names(detector.concept_names, model.concept_names_, source=f"checkpoint {ckpt}",
                                reference=f"head {head!r}")
            data = _data_settings(ckpt, run.config.get("data", {}))
            if detector.hparams.input_kind == "image":
                transform = build_transform(data.image_size, train=False,
                                            eval_crop_fraction=data.eval_crop_fraction)
                decode_side = 2 * round(data.image_size / data.eval_crop_fraction)
                input_side = data.image_size
        return cls(run_dir=Path(run_dir), head_name=head, inputs=inputs, head=model,
                   calibrator=run.calibrator if inputs == "calibrated" else None, threshold=threshold,
                   detector=detector, transform=transform, device=dev, batch_size=batch_size, top_k=top_k,
                   decode_side=decode_side, input_side=input_side, typicality=typicality)

    @property
    def concept_names(self) -> list[str]:
        return list(self.head.concept_names_)

    # ------------------------------------------------------------------ images → concepts
    def concept_probs(self, images: Sequence[Any],
                      progress: bool = False) -> tuple[np.ndarray, dict[int, str], dict[int, str]]:
        """Detector probabilities of images, in batches, with the errors and warnings of
        `detector_outputs` (which also gives the feature scores)."""
        probs, _, errors, warnings = self.detector_outputs(images, progress)
        return probs, errors, warnings

    def detector_outputs(self, images: Sequence[Any], progress: bool = False
                         ) -> tuple[np.ndarray, np.ndarray | None, dict[int, str], dict[int, str]]:
        """Detector probabilities and feature scores of images, in batches.

        Parameters
        ----------
        images : sequence of path-like, PIL image or uint8 ndarray
        progress : bool
            Show a progress bar on stderr when it is a terminal (none in a log file).

        Returns
        -------
        probs : ndarray of shape (n, k), float32
            NaN on the rows of unreadable images.
        feature_score : ndarray of shape (n,), float64, or None
            The images' feature typicality (NaN on unreadable rows); None without the run's
            feature typicality.
        errors : dict of int to str
            Row -> why that image could not be read.
        warnings : dict of int to str
            Row -> why its probabilities may not be trusted (:func:`small_input_warning`).

        Raises
        ------
        FileNotFoundError
            The run keeps no detector checkpoint.
        ValueError
            The run's detector reads feature vectors, not images.
        """
        if self.detector is None:
            raise FileNotFoundError(f"{self.run_dir / CHECKPOINT} not found: predicting from images needs "
                                    "the run's detector; concept vectors made elsewhere work without it "
                                    "(predict --concepts FILE, Pipeline.predict_concepts)")
        if self.transform is None:
            raise ValueError(f"the detector of {self.run_dir} reads feature vectors, not images: give "
                             "concept vectors instead (predict --concepts FILE)")
        probs = np.full((len(images), len(self.concept_names)), np.nan, dtype=np.float32)
        scores = None if self.typicality is None else np.full(len(images), np.nan)
        errors: dict[int, str] = {}
        warnings: dict[int, str] = {}
        with tqdm(total=len(images), unit="img", desc="predict", disable=None if progress else True) as bar:
            for start in range(0, len(images), self.batch_size):
                rows, batch = [], []
                for i in range(start, min(len(images), start + self.batch_size)):
                    try:
                        pixels = read_image(images[i], self.decode_side)
                        batch.append(self.transform(pixels))
                        rows.append(i)
                        if (warning := small_input_warning(pixels.shape, self.input_side)) is not None:
                            warnings[i] = warning
                    except UnreadableImageError as err:
                        errors[i] = str(err)
                if batch:
                    x = torch.stack(batch).to(self.device)
                    split = hasattr(self.detector, "features") and hasattr(self.detector, "head")
                    with torch.inference_mode():  # a module without the features / head split: no score
                        features = self.detector.features(x) if split else None
                        logits = self.detector.head(features) if split else self.detector(x)
                    probs[rows] = torch.sigmoid(logits.float()).cpu().numpy()
                    if scores is not None and features is None:
                        scores = None
                    elif scores is not None:
                        scores[rows] = self.typicality.score(features.float().cpu().numpy())
                bar.update(min(self.batch_size, len(images) - start))
        return probs, scores, errors, warnings

    def predict(self, images: Sequence[Any], ids: Sequence[str] | None = None,
                progress: bool = False) -> Predictions:
        """Predict images (paths, PIL images or uint8 arrays); see :class:`Predictions`.

        ``ids`` name the rows (default: the paths, or ``image_<i>`` for in-memory images).
        """
        images = list(images)
        if ids is None:
            ids = [str(im) if isinstance(im, str | os.PathLike) else f"image_{i}"
                   for i, im in enumerate(images)]
        probs, scores, errors, warnings = self.detector_outputs(images, progress)
        return self.predict_concepts(probs, ids, errors=errors, warnings=warnings, inputs=images,
                                     feature_score=scores)

    # ------------------------------------------------------------------ concepts → decisions
    def predict_concepts(self, probs: np.ndarray, ids: Sequence[str] | None = None, *,
                         errors: dict[int, str] | None = None, warnings: dict[int, str] | None = None,
                         inputs: Sequence[Any] | None = None, true_class: Sequence[str] | None = None,
                         feature_score: np.ndarray | None = None) -> Predictions:
        """Decisions from detector probabilities (calibrated here when the pipeline's inputs are).

        Parameters
        ----------
        probs : ndarray of shape (n, k), float in [0, 1]
            The detector's probabilities, in :attr:`concept_names` order (rows named in ``errors``
            are skipped and may hold NaN).
        ids : sequence of str, optional
            Row names (default ``row_<i>``).
        errors : dict of int to str, optional
            Rows that could not be read, and why.
        warnings : dict of int to str, optional
            Rows whose prediction may not be trusted, and why (copied to their ``warning``).
        inputs : sequence, optional
            The original inputs (kept in the result for pages).
        true_class : sequence of str, optional
            Known classes, copied to the rows.
        feature_score : ndarray of shape (n,), optional
            The images' feature typicality (`detector_outputs`); None: unknown, the shift score then
            reads the concepts alone (concept vectors made elsewhere).

        Raises
        ------
        ValueError
            A wrong shape or a value outside [0, 1] on a row not in ``errors`` (row and concept named).
        """
        errors = dict(errors or {})
        n = len(probs)
        ids = [f"row_{i}" for i in range(n)] if ids is None else [str(i) for i in ids]
        if len(ids) != n or (true_class is not None and len(true_class) != n):
            raise ValueError(f"{n} rows of probabilities but {len(ids)} ids")
        ok = np.array([i not in errors for i in range(n)], dtype=bool)
        X = np.asarray(probs)[ok]
        if X.shape[0]:
            X = self.calibrator.transform(X, self.concept_names) if self.calibrator is not None else X
            X = self.head._check_X(X)
        rows, index = [], np.cumsum(ok) - 1
        scores = None if feature_score is None else np.asarray(feature_score, dtype=np.float64)[ok]
        if X.shape[0]:
            model = self.head.model_
            dec = decide(self.head, X, scores)  # the operating point every command reads
            ev, ood, sets = dec.evidence, dec.ood_score, dec.sets
            proba, mass = ev.pignistic, ev.mass
            attrs = model.anomalous_features(X, top_k=self.top_k)
        classes = [str(c) for c in self.head.classes_]
        for i in range(n):
            row: dict[str, Any] = {"input": ids[i]}
            if ok[i]:
                j = int(index[i])
                c = int(np.argmax(proba[j]))
                row.update({
                    "class": classes[c], "probability": float(proba[j, c]), "belief": float(mass[j, c]),
                    "set": [classes[m] for m in np.flatnonzero(sets[j])], "set_size": int(sets[j].sum()),
                    "abstained": bool(sets[j].all()), "ignorance": float(ev.ignorance[j]),
                    "ood_kind": self.threshold["kind"], "ood_score": float(ood[j]),
                    "ood_threshold": float(self.threshold["value"]),
                    "ood_flag": bool(dec.ood_flag[j]),
                    "shift_score": float(dec.shift_score[j]), "shift_flag": bool(dec.shift_flag[j]),
                    "anomalous_attributes": [(a.name, float(a.score)) for a in attrs[j]],
                })
            else:
                row.update(dict.fromkeys(OUTPUTS))
            row["true_class"] = None if true_class is None else str(true_class[i])
            row["warning"] = (warnings or {}).get(i) if ok[i] else None
            row["error"] = errors.get(i)
            rows.append(row)

        def explain(i: int) -> Explanation | None:
            if not ok[i]:
                return None
            j = int(index[i])
            return explain_decision(self.head, X[j], None if scores is None else float(scores[j]), self.top_k)

        return Predictions(rows=rows, inputs=[None] * n if inputs is None else list(inputs), explain=explain,
                           threshold=dict(self.threshold))
