"""The report's three example explanations, chosen from a FERL head's evidential outputs.

:func:`pick_examples` chooses, from the test and held-out (``novel``) concept tables of a run: a
confident prediction, a two-class credal set and an abstention or a held-out-class image (the
most novel one by FERL's OOD score); :func:`choose_and_explain` explains them with the head
(:meth:`ferl.FERLClassifier.explain`) and adds the image, the OOD threshold and, for a class
unseen in training, the concepts in which it truly differs from the nearest training class. The OOD
score is everywhere of the head's kind, the one ``predict`` flags with
(:attr:`cbm.heads.FERLHead.ood_kind`), and the explanations name it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cbm.heads import FERLHead
from cbm.heads.operating import decide, explain_decision
from cbm.report.run import RunView
from ferl import metrics as M
from ferl.explain import Explanation

__all__ = ["EXAMPLE_KINDS", "Example", "Pick", "choose_and_explain", "explain_example", "find_sample",
           "head_outputs", "pick_examples"]

#: Report example kinds, in report order.
EXAMPLE_KINDS = ("confident", "two-class", "novel")


@dataclass(frozen=True)
class Pick:
    """One chosen example.

    Attributes
    ----------
    kind : {"confident", "two-class", "novel"}
    split : str
        Concept table the row comes from (``test`` or ``novel``).
    row : int
        Row in that table.
    reason : str
        Why this row was chosen, one sentence.
    """

    kind: str
    split: str
    row: int
    reason: str


@dataclass(frozen=True)
class Example:
    """An explained example: the pick, its head, the FERL explanation and its context.

    Attributes
    ----------
    pick : Pick
    head : str
        Registry name of the FERL head that explains it (e.g. ``"ferl-deep"``).
    sample_id : str
    true_class : str
    explanation : ferl.explain.Explanation
        At the operating point (`cbm.heads.operating.explain_decision`), as ``predict`` explains.
    ood_score : float
        FERL's OOD score (higher = more novel), of the kind ``explanation.ood_kind``, the head's.
    threshold : float or None
        Score threshold accepting 95 % of the val images: the head's stored one (``predict``'s),
        else fitted here on the val table (None without either).
    truth : list of str or None
        For a class unseen in train: the concepts in which its class profile differs from the
        nearest training class(es) (None when unknown).
    nearest : list of str
        Those nearest training classes (empty when unknown).
    image : ndarray of shape (H, W, 3), uint8, or None
        The input image (None for feature data sets or when the data are not available).
    """

    pick: Pick
    head: str
    sample_id: str
    true_class: str
    explanation: Explanation
    ood_score: float
    threshold: float | None
    truth: list[str] | None
    nearest: list[str]
    image: np.ndarray | None


def _first_by(candidates: np.ndarray, *keys: np.ndarray) -> int | None:
    """The candidate row that sorts first by ``keys`` (first key most significant), or None."""
    rows = np.flatnonzero(candidates)
    if rows.size == 0:
        return None
    order = np.lexsort(tuple(k[rows] for k in reversed(keys)))
    return int(rows[order[0]])


def pick_examples(
    outputs: dict[str, dict[str, np.ndarray]], *, extra_two_class: Sequence[tuple[str, dict]] = ()
) -> dict[str, tuple[str, Pick] | None]:
    """Choose the report's three examples from FERL's evidential outputs.

    Parameters
    ----------
    outputs : dict
        Split (``"test"``, optionally ``"novel"``) -> arrays of the main head for that split:
        ``sets`` bool (n, C) credal sets, ``proba`` float (n, C) pignistic probabilities,
        ``ignorance`` float (n,), ``ood`` float (n,) OOD scores, ``y`` int (n,) column of the true
        class in the head's classes (-1 for a class the head never saw).
    extra_two_class : sequence of (head name, outputs)
        Other heads searched, in order, when the main head has no two-class set.

    Returns
    -------
    dict
        ``"confident"``, ``"two-class"``, ``"novel"`` -> ``(head, Pick)`` or None when no row
        qualifies; the main head is named ``"main"``.

        * confident: a correctly predicted test row with a one-class set and the highest
          pignistic probability (ties: lower ignorance, then first row);
        * two-class: a row whose set holds exactly two classes, test before novel, the true
          class inside the set preferred, then the smallest probability gap between the two;
        * novel: an abstaining (all-class set) row of the novel split with the highest OOD
          score, else the novel row with the highest OOD score, else the same on test.

    Raises
    ------
    ValueError
        No ``test`` outputs, or arrays of inconsistent lengths.
    """
    if "test" not in outputs:
        raise ValueError("pick_examples needs the test split's outputs")
    for head, outs in (("main", outputs), *extra_two_class):
        for split, o in outs.items():
            n = len(o["y"])
            if any(len(o[key]) != n for key in ("sets", "proba", "ignorance", "ood")):
                raise ValueError(f"outputs of head {head!r}, split {split!r} have inconsistent lengths")
    picks: dict[str, tuple[str, Pick] | None] = {}

    t = outputs["test"]
    size = t["sets"].sum(axis=1)
    correct = np.argmax(t["proba"], axis=1) == t["y"]
    row = _first_by((size == 1) & correct, -t["proba"].max(axis=1), t["ignorance"])
    picks["confident"] = None if row is None else ("main", Pick(
        "confident", "test", row, "the correctly predicted test image with a one-class credal set and the "
        "highest pignistic probability"))

    picks["two-class"] = None
    for head, outs in (("main", outputs), *extra_two_class):
        for split in ("test", "novel"):
            if split not in outs:
                continue
            o = outs[split]
            two = o["sets"].sum(axis=1) == 2
            p = np.where(o["sets"], o["proba"], -np.inf)
            top2 = -np.sort(-p, axis=1)[:, :2] if p.shape[1] >= 2 else np.zeros((len(p), 2))
            inside = np.zeros(len(p), dtype=bool)
            known = o["y"] >= 0
            inside[known] = o["sets"][known, o["y"][known]]
            row = _first_by(two, ~inside, top2[:, 0] - top2[:, 1])
            if row is not None:
                picks["two-class"] = (head, Pick("two-class", split, row, f"a {split} image whose credal set "
                                      "holds exactly two classes (smallest probability gap between them)"))
                break
        if picks["two-class"] is not None:
            break

    split = "novel" if "novel" in outputs and len(outputs["novel"]["y"]) else "test"
    o = outputs[split]
    abstain = o["sets"].all(axis=1)
    if abstain.any():
        row, why = _first_by(abstain, -o["ood"]), "abstains (credal set = every class)"
    else:
        row, why = _first_by(np.ones(len(o["y"]), dtype=bool), -o["ood"]), "has the highest OOD score"
    what = "held-out-class image" if split == "novel" else "test image"
    picks["novel"] = None if row is None else ("main", Pick("novel", split, row, f"the {what} that {why}"))
    return picks


def head_outputs(head: FERLHead, X: np.ndarray, y: np.ndarray,
                 feature_score: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """The arrays :func:`pick_examples` reads, for concept vectors ``X`` (n, k) and class names ``y``,
    at the operating point (`cbm.heads.operating.decide`, with the rows' feature scores when known).

    ``y`` holds class names; a class the head never saw gets column -1. ``ood`` is the OOD score of
    the head's kind (:attr:`cbm.heads.FERLHead.ood_kind`).
    """
    dec = decide(head, X, feature_score)
    lookup = {str(c): i for i, c in enumerate(head.classes_)}
    return {"sets": dec.sets, "proba": dec.evidence.pignistic, "ignorance": dec.evidence.ignorance,
            "ood": dec.ood_score, "y": np.array([lookup.get(str(v), -1) for v in y], dtype=np.int64)}


def explain_example(run: RunView, head_name: str, head: FERLHead, pick: Pick, inputs: str = "calibrated",
                    top_k: int = 5) -> Example:
    """Explain one picked row with ``head`` and gather its image, OOD threshold and ground truth.

    The OOD score and the threshold are of the head's kind (:attr:`cbm.heads.FERLHead.ood_kind`); the
    threshold is the head's stored one, the one ``predict`` flags with (95 % of the val images
    accepted, by ``fit-head``), else fitted on the val table
    (:func:`ferl.metrics.fit_acceptance_threshold`).
    """
    table = run.tables[pick.split]
    x = run.concepts(pick.split, inputs)[pick.row]
    kind = head.ood_kind
    feature = None if table.feature_score is None else float(table.feature_score[pick.row])
    explanation = explain_decision(head, x, feature, top_k=top_k)
    threshold = None if head.ood_threshold_ is None else head.ood_threshold_["value"]
    if threshold is None and "val" in run.tables:
        threshold = M.fit_acceptance_threshold(head.model_.ood_score(run.concepts("val", inputs), kind), 0.95)
    cls = int(table.y[pick.row])
    truth = run.anomaly_truth(cls)
    sid = str(table.sample_ids[pick.row])
    return Example(pick=pick, head=head_name, sample_id=sid, true_class=run.class_names[cls],
                   explanation=explanation, ood_score=float(explanation.ood_score), threshold=threshold,
                   truth=None if truth is None else truth[1], nearest=[] if truth is None else truth[0],
                   image=run.image(sid))


def choose_and_explain(run: RunView, head_name: str = "ferl-deep", inputs: str = "calibrated",
                       top_k: int = 5) -> dict[str, Example | None]:
    """Pick (:func:`pick_examples`) and explain the report's three examples of a run.

    The two-class example falls back to the run's other FERL heads (same inputs) when
    ``head_name`` gives no two-class set; a kind with no qualifying row maps to None.

    Raises
    ------
    FileNotFoundError
        The head is not in the run, or the run has no test table with rows (the file is named).
    ValueError
        The head is not a FERL head.
    """
    head = run.head(head_name, inputs)
    if not isinstance(head, FERLHead):
        raise ValueError(f"head {head_name!r} is not a FERL head; examples need credal sets")
    if "test" not in run.tables or not run.tables["test"].n_samples:
        path = run.run_dir / "concepts" / "test.npz"
        raise FileNotFoundError(f"{path} {'has no rows' if path.exists() else 'not found'}: the report's "
                                "examples are chosen from the run's test split; export it with "
                                "train-detector (--export_splits with test, the default) before building "
                                "the report")

    def outputs_of(h: FERLHead) -> dict[str, dict[str, np.ndarray]]:
        names = np.asarray(run.class_names)
        return {s: head_outputs(h, run.concepts(s, inputs), names[run.tables[s].y],
                                run.tables[s].feature_score)
                for s in ("test", "novel") if s in run.tables and run.tables[s].n_samples}

    others: list[tuple[str, Any]] = []
    for name in run.heads():
        if name != head_name and name.startswith("ferl-") and (run.run_dir / "head" / name / inputs).is_dir():
            others.append((name, run.head(name, inputs)))
    picks = pick_examples(outputs_of(head), extra_two_class=[(n, outputs_of(h)) for n, h in others])
    fitted = dict(others) | {"main": head}
    out: dict[str, Example | None] = {}
    for kind in EXAMPLE_KINDS:
        chosen = picks[kind]
        if chosen is None:
            out[kind] = None
            continue
        name, pick = chosen
        shown = head_name if name == "main" else name
        out[kind] = explain_example(run, shown, fitted[name], pick, inputs, top_k)
    return out


def find_sample(run: RunView, sample_id: str) -> Pick:
    """Locate a sample in the run's ``test`` or ``novel`` table (then any other table) as a `Pick`.

    Raises
    ------
    ValueError
        No table of the run holds ``sample_id``.
    """
    for split in ("test", "novel", *run.tables):
        if split in run.tables:
            rows = np.flatnonzero(run.tables[split].sample_ids == str(sample_id))
            if rows.size:
                return Pick("chosen", split, int(rows[0]), "chosen by the user")
    raise ValueError(f"sample {sample_id!r} is in none of the run's concept tables {list(run.tables)}")
