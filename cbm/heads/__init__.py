"""Classification heads over concept vectors: concepts → class, set, ignorance, novelty.

Owns the `ConceptHead` interface, the heads (FERL compact / medium / deep, CART, LR,
concept-restricted LR), the registry by name (`HEADS`, `make_head`, `load_head`), the heads table
(Table 4 layout) and the ``fit-head`` console script (`cbm.heads.fit`).
"""

from cbm.heads.base import ConceptHead
from cbm.heads.models import CARTHead, FERLHead, LRHead, RestrictedLRHead
from cbm.heads.registry import HEADS, load_head, make_head
from cbm.heads.tables import HEAD_LABELS, heads_frame, heads_markdown

__all__ = [
    "HEADS",
    "HEAD_LABELS",
    "CARTHead",
    "ConceptHead",
    "FERLHead",
    "LRHead",
    "RestrictedLRHead",
    "heads_frame",
    "heads_markdown",
    "load_head",
    "make_head",
]
