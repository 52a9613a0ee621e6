"""Figures of the run report and the rule-inspection notebook (matplotlib, no pyplot state).

Every function returns a ``matplotlib.figure.Figure`` (shown inline by Jupyter, saved by
:func:`figure_png`); nothing here writes files.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from PIL import Image

from cbm.data.concept_tables import ConceptTable
from cbm.heads.tables import HEAD_LABELS
from ferl import FERLClassifier
from ferl.explain import Explanation
from ferl.rules import path_conditions

__all__ = [
    "concept_accuracy_figure",
    "evidence_figure",
    "figure_png",
    "heads_figure",
    "image_png",
    "tree_figure",
]


def figure_png(fig: Figure, dpi: int = 110, tight: bool = True) -> bytes:
    """PNG bytes of a figure; ``tight`` crops to a tight bounding box (one more drawing pass, which
    a figure laid out with ``tight_layout`` does not need)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight" if tight else None)
    return buf.getvalue()


def image_png(image: np.ndarray, min_side: int = 256) -> bytes:
    """PNG bytes of an RGB image, uint8 of shape (H, W, 3), enlarged by an integer factor (nearest
    neighbour) until its longer side reaches ``min_side`` pixels (a 64-px image becomes 256 px).

    Raises
    ------
    ValueError
        Not an (H, W, 3) uint8 array.
    """
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8 or 0 in image.shape:
        raise ValueError(f"expected an (H, W, 3) uint8 image, got {image.shape} {image.dtype}")
    scale = max(1, -(-min_side // max(image.shape[:2])))
    pil = Image.fromarray(image)
    pil = pil.resize((image.shape[1] * scale, image.shape[0] * scale), Image.Resampling.NEAREST)
    buf = io.BytesIO()
    pil.save(buf, format="PNG")
    return buf.getvalue()


def evidence_figure(explanation: Explanation, image: np.ndarray | None = None, title: str = "",
                    truth: Sequence[str] | None = None, max_classes: int = 8) -> Figure:
    """Image, belief / plausibility / ignorance bars and anomalous attributes of one explanation.

    Parameters
    ----------
    explanation : ferl.explain.Explanation
    image : ndarray of shape (H, W, 3), uint8, optional
        Drawn in the first panel when given.
    title : str
    truth : sequence of str, optional
        Ground-truth anomalous concepts: their attribute bars are drawn in red.
    max_classes : int
        Most classes shown: those of the credal set first, then the most plausible others with a
        plausibility above 0.001 (the title gives the set size).

    Returns
    -------
    Figure
        Bars: ``Bel(c) = m({c})`` (dark) inside ``Pl(c) = Bel(c) + m(Θ)`` (light) per class, credal
        set members starred, and one bar for the ignorance ``m(Θ)``; then the top anomalous
        attributes by score (nats).
    """
    ex = explanation
    classes = list(ex.classes)
    pl, bel = np.asarray(ex.plausibility), np.asarray(ex.belief)
    in_set = np.array([c in ex.credal_set for c in classes])
    order = np.lexsort((-pl, ~in_set))
    order = order[in_set[order] | (pl[order] > 1e-3)][:max_classes]
    panels = (image is not None) + 2
    fig = Figure(figsize=(4.2 * panels, 3.4))
    axes = fig.subplots(1, panels, gridspec_kw={"width_ratios": [1] * (panels - 2) + [1.4, 1.4]})
    axes = np.atleast_1d(axes)
    if image is not None:
        axes[0].imshow(image, interpolation="nearest")
        axes[0].set_axis_off()
        axes[0].set_title("input image", fontsize=9)
    ax = axes[-2]
    labels = [f"{classes[i]} *" if in_set[i] else str(classes[i]) for i in order] + ["Θ (ignorance)"]
    ypos = np.arange(len(labels))[::-1]
    ax.barh(ypos[:-1], pl[order], color="#9ecae1", label="plausibility")
    ax.barh(ypos[:-1], bel[order], color="#08519c", label="belief")
    ax.barh(ypos[-1], ex.ignorance, color="#fd8d3c", label="m(Θ)")
    ax.set_yticks(ypos, labels, fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("mass", fontsize=8)
    verdict = "abstains" if ex.abstain else f"set of {len(ex.credal_set)}"
    ax.set_title(f"prediction {ex.prediction} ({verdict}; * = in credal set)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax = axes[-1]
    attrs = list(ex.anomalous_features)
    truth_set = set(truth or ())
    if attrs:
        ya = np.arange(len(attrs))[::-1]
        colours = ["#cb181d" if a.name in truth_set else "#969696" for a in attrs]
        ax.barh(ya, [a.score for a in attrs], color=colours)
        ax.set_yticks(ya, [a.name for a in attrs], fontsize=8)
    ax.set_xlabel("part of the typical OOD score (nats)", fontsize=8)
    ax.set_title(f"anomalous attributes ({ex.ood_kind} OOD score {ex.ood_score:.2f})"
                 + ("; red = true difference" if truth else ""), fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def tree_figure(model: FERLClassifier, digits: int = 2, max_width: float = 60.0,
                max_depth: int | None = None) -> Figure:
    """The fitted FERL tree drawn as boxes and edges.

    ``max_depth`` draws only the nodes down to that depth; an internal node there becomes a grey box
    counting the rules below it (a 200-rule tree drawn whole has unreadable 6-point labels).

    Internal nodes show their left-branch condition merged with the path's other conditions on the
    same concept (`ferl.rules.path_conditions`: ``concept ≤ θ ± h``, ``concept is between ...``,
    ``concept is high``);
    the left edge is that condition, the right edge its negation. Leaves show the rule number,
    the predicted class and its consequent probability.

    Raises
    ------
    sklearn.exceptions.NotFittedError
        The model is not fitted.
    ValueError
        ``max_depth`` is below 1.
    """
    if max_depth is not None and max_depth < 1:
        raise ValueError(f"max_depth must be at least 1, got {max_depth!r}")
    rules = {r.node: r for r in model.rules_}
    tree = model.tree_
    names = model.feature_names_
    leaves = [r.node for r in rules.values()]
    x: dict[int, float] = {}
    placed = [0]  # leaves placed so far, left to right

    def cut(node: int) -> bool:
        return max_depth is not None and tree.feature[node] >= 0 and tree.depth[node] >= max_depth

    def place(node: int) -> float:
        if tree.feature[node] < 0 or cut(node):
            x[node] = float(placed[0])
            placed[0] += 1
        else:
            x[node] = (place(int(tree.left[node])) + place(int(tree.right[node]))) / 2
        return x[node]

    place(0)
    depth = int(max(tree.depth[node] for node in x))
    shown = placed[0]
    fig = Figure(figsize=(min(max_width, max(6.0, 1.25 * shown)), 1.5 * (depth + 1)))
    ax = fig.subplots()
    for node in x:
        if node:
            p = int(tree.parent[node])
            ax.plot([x[p], x[node]], [-tree.depth[p], -tree.depth[node]], color="#bdbdbd", lw=0.8, zorder=1)
            side = "yes" if tree.left[p] == node else "no"
            ax.text((x[p] + x[node]) / 2, -(tree.depth[p] + tree.depth[node]) / 2, side, fontsize=6,
                    color="#636363", ha="center", va="center", zorder=2)
        if cut(node):
            below = sum(1 for leaf in leaves if _under(tree, leaf, node))
            label, box = f"{below} rules\nbelow", {"boxstyle": "round", "fc": "#f0f0f0", "ec": "#969696"}
        elif tree.feature[node] >= 0:
            conds = path_conditions(tree, int(tree.left[node]), names, digits)
            label = next(c.text for c in conds if c.feature == tree.feature[node]).replace(" ", "\n", 1)
            box = {"boxstyle": "round", "fc": "#deebf7", "ec": "#6baed6"}
        else:
            r = rules[node]
            label = f"rule {r.rule_id}\n{r.prediction}\n({max(r.distribution.values()):.2f})"
            box = {"boxstyle": "round", "fc": "#fee6ce", "ec": "#fd8d3c"}
        ax.text(x[node], -tree.depth[node], label, fontsize=6, ha="center", va="center", bbox=box, zorder=3)
    ax.set_xlim(-0.8, shown - 0.2)
    ax.set_ylim(-depth - 0.6, 0.6)
    ax.set_axis_off()
    full = int(np.max(tree.depth))
    what = f"depth {full}" if depth == full else f"its top {depth} levels of {full}"
    ax.set_title(f"FERL tree: {len(leaves)} rules, {what} (left branch = condition holds)", fontsize=9)
    return fig


def _under(tree, node: int, ancestor: int) -> bool:
    """Whether ``ancestor`` is on the path from the root to ``node``."""
    while node > 0:
        node = int(tree.parent[node])
        if node == ancestor:
            return True
    return False


def _concept_accuracy(table: ConceptTable, threshold: float) -> np.ndarray:
    return ((table.probs > threshold) == table.concept_labels.astype(bool)).mean(axis=0)


def concept_accuracy_figure(tables: Mapping[str, ConceptTable], splits: Sequence[str] = ("test", "novel"),
                            threshold: float = 0.5) -> Figure:
    """Per-concept accuracy of the detector (probability > ``threshold`` vs the concept label).

    One bar group per concept, one bar per split of ``splits`` present in ``tables``.

    Raises
    ------
    ValueError
        None of ``splits`` is in ``tables``.
    """
    present = [s for s in splits if s in tables and tables[s].n_samples]
    if not present:
        raise ValueError(f"none of the splits {list(splits)} is in the run's tables {list(tables)}")
    names = tables[present[0]].concept_names
    k = len(names)
    fig = Figure(figsize=(max(6.0, 0.28 * k * len(present) + 2), 3.6))
    ax = fig.subplots()
    width = 0.8 / len(present)
    accs = {s: 100 * _concept_accuracy(tables[s], threshold) for s in present}
    for i, (s, acc) in enumerate(accs.items()):
        ax.bar(np.arange(k) + (i - (len(present) - 1) / 2) * width, acc, width,
               label=f"{s} (mean {acc.mean():.1f} %)")
    ax.set_xticks(np.arange(k), names, rotation=90, fontsize=7)
    ax.set_ylabel("concept accuracy (%)")
    ax.set_ylim(max(0.0, min(a.min() for a in accs.values()) - 5), 100.5)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title("Concept detector: per-concept accuracy", fontsize=10)
    fig.tight_layout()
    return fig


def heads_figure(entry: dict) -> Figure:
    """Test accuracy of every head on raw and on calibrated concepts (the ``fit_head`` entry of
    ``metrics.json``, :func:`cbm.heads.fit.fit_head`)."""
    heads = list(entry["heads"])
    fig = Figure(figsize=(max(5.0, 1.1 * len(heads) + 1.5), 3.4))
    ax = fig.subplots()
    pos = np.arange(len(heads))
    for shift, inputs, colour in ((-0.2, "raw", "#bdbdbd"), (0.2, "calibrated", "#3182bd")):
        acc = [100 * entry["heads"][h][inputs]["accuracy"] for h in heads]
        bars = ax.bar(pos + shift, acc, 0.4, label=inputs, color=colour)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks(pos, [HEAD_LABELS.get(h, h) for h in heads], rotation=20, fontsize=8)
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(0, 108)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Heads on raw vs calibrated concept probabilities", fontsize=10)
    fig.tight_layout()
    return fig
