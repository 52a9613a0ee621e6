"""The registry of heads by name (paper §5.2, Table 4): `HEADS`, `make_head`, `load_head`.

=================  =====================================================================
name               model
=================  =====================================================================
``ferl-compact``   ``FERLClassifier(variant="compact")``
``ferl-medium``    ``FERLClassifier(variant="medium")``
``ferl-deep``      ``FERLClassifier(variant="deep")``; with the FERL heads' option
                   ``settings="concepts"`` (``fit-head``'s default) the concept-vector
                   settings over the preset: learned weights of evidence, wide bands, few
                   bootstrap cuts (`cbm.heads.models.CONCEPT_SETTINGS`)
``cart``           ``DecisionTreeClassifier(random_state=seed)`` (scikit-learn defaults)
``cart-compact``   the same CART grown best-first to ``max_leaf_nodes`` leaves: as many as
                   the FERL-compact head has rules (fitted with it), compact's same-size
                   baseline (a tree of as many rules, to tell the learner from its budget)
``lr``             ``LogisticRegression(max_iter=2000)`` (L2, C=1, multinomial)
``lr-restricted``  the same LR refitted on only ``n_concepts`` concepts (the paper's
                   "concept-restricted LR": as many concepts as the FERL-deep tree uses),
                   chosen by **weight magnitude** of the full LR: concept j is ranked by
                   ``std(x_j) * ||W[:, j]||_2`` over the training rows (ties: lower index).
=================  =====================================================================
"""

from __future__ import annotations

import os
from collections.abc import Callable

from cbm.heads.base import HEAD_JSON, SCHEMA_VERSION, ConceptHead
from cbm.heads.models import CARTHead, FERLHead, LRHead, RestrictedLRHead
from ferl.io.persist import current_folder, read_json_object

__all__ = ["HEADS", "load_head", "make_head"]


#: Registry: head name -> factory ``(seed, **options) -> ConceptHead``.
HEADS: dict[str, Callable[..., ConceptHead]] = {
    "ferl-compact": lambda seed=0, settings="learner": FERLHead("ferl-compact", seed, "compact", settings),
    "ferl-medium": lambda seed=0, settings="learner": FERLHead("ferl-medium", seed, "medium", settings),
    "ferl-deep": lambda seed=0, settings="learner": FERLHead("ferl-deep", seed, "deep", settings),
    "cart": lambda seed=0: CARTHead("cart", seed),
    "cart-compact": lambda seed=0, max_leaf_nodes=None: CARTHead("cart-compact", seed, max_leaf_nodes,
                                                                    sized=True),
    "lr": lambda seed=0: LRHead("lr", seed),
    "lr-restricted": lambda seed=0, n_concepts=None: RestrictedLRHead("lr-restricted", seed, n_concepts),
}


def make_head(name: str, seed: int = 0, **options) -> ConceptHead:
    """A new, unfitted head from the registry `HEADS`.

    Raises
    ------
    ValueError
        Unknown name (the known names are listed).
    """
    if name not in HEADS:
        raise ValueError(f"unknown head {name!r}; known heads: {list(HEADS)}")
    return HEADS[name](seed=seed, **options)


def load_head(path: str | os.PathLike) -> ConceptHead:
    """Load a head saved by `ConceptHead.save`; predictions equal the saved head's.

    Follows ``path/current.json`` to the current version (:func:`ferl.io.persist.current_folder`); a
    head saved before versions (files side by side in ``path``) loads too.

    Raises
    ------
    FileNotFoundError
        ``head.json`` or the model files are missing.
    ValueError
        Another schema version, a head name / kind that the registry does not know, or files that
        differ from what was saved.
    """
    path = current_folder(path)
    if not (path / HEAD_JSON).is_file():
        raise FileNotFoundError(f"{path / HEAD_JSON} not found (not a saved head)")
    doc = read_json_object(path / HEAD_JSON, "a saved head's description")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path / HEAD_JSON}: schema version {doc.get('schema_version')!r}, expected "
                         f"{SCHEMA_VERSION}")
    missing = [k for k in ("head", "kind", "seed", "concept_names") if k not in doc]
    if missing:
        raise ValueError(f"{path / HEAD_JSON} lacks the fields {missing}")
    head = make_head(doc["head"], doc["seed"])
    if head.kind != doc["kind"]:
        raise ValueError(f"{path / HEAD_JSON}: head {doc['head']!r} is not of kind {doc['kind']!r}")
    names = doc["concept_names"]
    if not isinstance(names, list) or not names or len(set(map(str, names))) != len(names):
        raise ValueError(f"{path / HEAD_JSON}: concept_names must be a non-empty list of unique names")
    head.concept_names_ = [str(n) for n in names]
    head._load_model(path, doc)
    return head
