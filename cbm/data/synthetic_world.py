"""A synthetic concept world: the project's embedded default data set (no download).

Images (64x64 RGB by default) show one or two objects whose visible attributes are the concepts,
24 binary concepts in 7 mutually exclusive groups:

=========== =====================================================
group       values
=========== =====================================================
shape       circle, square, triangle, cross, diamond, ring
colour      red, green, blue, yellow, magenta, cyan
size        small, large
pattern     plain, striped, checked
background  dark, light, noisy
count       one, two
position    upper, lower
=========== =====================================================

Concept names follow CUB's ``group::value`` form (``shape::circle``). A *class* is a concept
profile (one value per group), like a bird species. Seen classes are at least
``min_distance`` groups apart; each has one *variable group* whose value changes to a class
specific alternative in a fraction ``p_variation`` of its images (per-image concept labels
follow the image), and every image varies in position, size, hue and texture phase.
:func:`cbm.data.synthetic.make_synthetic` can add per-image attribute noise (``p_swap``: any group
of a seen-class image shows another value), which breaks the co-occurrence of a class's concepts
so that a detector has to learn concepts rather than classes.

Held-out ("novel") classes differ from their nearest seen class in 1-3 groups (cycling 1, 2, 3
where the world leaves room) and are farther from every other seen class; the binary concepts
where the two profiles differ are stored as the ground-truth anomalous attributes. Their images
have split ``novel`` and never appear in train/val/test.

Everything is a function of ``seed``: the world (profiles) depends on ``seed`` and the class
counts only; the images of a class on ``seed``, the class and ``image_size`` (so more images per
class only appends images). Images are drawn with numpy directly (several thousand per second
on one core).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .common import DataFormatError

__all__ = ["GROUPS", "SyntheticWorld", "make_world", "render"]

#: Concept groups (mutually exclusive values) and their order.
GROUPS: dict[str, tuple[str, ...]] = {
    "shape": ("circle", "square", "triangle", "cross", "diamond", "ring"),
    "colour": ("red", "green", "blue", "yellow", "magenta", "cyan"),
    "size": ("small", "large"),
    "pattern": ("plain", "striped", "checked"),
    "background": ("dark", "light", "noisy"),
    "count": ("one", "two"),
    "position": ("upper", "lower"),
}
_G = {name: i for i, name in enumerate(GROUPS)}
_SIZES = np.array([len(v) for v in GROUPS.values()])
_OFFSETS = np.concatenate([[0], np.cumsum(_SIZES)[:-1]])

_RGB = np.array(
    [[225, 30, 30], [30, 190, 40], [35, 70, 235], [240, 215, 20], [215, 40, 215], [20, 210, 225]],
    dtype=np.float32,
)



# --------------------------------------------------------------------------------------------
# the world: class profiles


@dataclass(frozen=True)
class SyntheticWorld:
    """Class profiles of a synthetic concept world.

    Attributes
    ----------
    seed : int
    profiles : ndarray of shape (n_seen + n_heldout, n_groups), dtype int
        Value index per group; seen classes first.
    n_seen : int
    variable_group : ndarray of shape (n_seen + n_heldout,)
        Group that varies inside each class (-1: none; held-out classes do not vary).
    variable_value : ndarray of shape (n_seen + n_heldout,)
        The alternative value of that group.
    p_variation : float
        Probability that an image of a seen class shows the alternative.
    nearest_seen : ndarray of shape (n_heldout,)
        For each held-out class, its nearest seen class (unique).
    """

    seed: int
    profiles: np.ndarray
    n_seen: int
    variable_group: np.ndarray
    variable_value: np.ndarray
    p_variation: float
    nearest_seen: np.ndarray
    groups: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(GROUPS))

    @property
    def n_heldout(self) -> int:
        return len(self.profiles) - self.n_seen

    @property
    def concept_names(self) -> list[str]:
        return [f"{g}::{v}" for g, vals in self.groups.items() for v in vals]

    @property
    def concept_groups(self) -> dict[str, list[int]]:
        return {
            g: list(range(int(o), int(o) + len(v)))
            for (g, v), o in zip(self.groups.items(), _OFFSETS, strict=True)
        }

    @property
    def class_names(self) -> list[str]:
        seen = [f"class_{i:02d}" for i in range(self.n_seen)]
        return seen + [f"novel_{i:02d}" for i in range(self.n_heldout)]

    def concepts_of(self, profiles: np.ndarray) -> np.ndarray:
        """One-hot concept vectors, shape (n, 24), of profiles of shape (n, n_groups)."""
        profiles = np.atleast_2d(profiles)
        out = np.zeros((len(profiles), int(_SIZES.sum())), dtype=np.uint8)
        out[np.arange(len(profiles))[:, None], _OFFSETS + profiles] = 1
        return out

    @property
    def class_concepts(self) -> np.ndarray:
        return self.concepts_of(self.profiles)

    def anomalous_concepts(self, heldout: int) -> list[int]:
        """Concept indices where held-out class ``heldout`` (0-based among held-out) differs
        from its nearest seen class."""
        cc = self.class_concepts
        a = cc[self.n_seen + heldout]
        b = cc[self.nearest_seen[heldout]]
        return np.flatnonzero(a != b).tolist()

    def describe(self, c: int) -> str:
        """The profile of class ``c`` as ``group=value`` words."""
        return ", ".join(
            f"{g}={vals[self.profiles[c, i]]}" for i, (g, vals) in enumerate(self.groups.items())
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "groups": {k: list(v) for k, v in self.groups.items()},
            "profiles": self.profiles.tolist(),
            "n_seen": self.n_seen,
            "variable_group": self.variable_group.tolist(),
            "variable_value": self.variable_value.tolist(),
            "p_variation": self.p_variation,
            "nearest_seen": self.nearest_seen.tolist(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SyntheticWorld:
        groups = {k: tuple(v) for k, v in d["groups"].items()}
        if groups != GROUPS:
            raise DataFormatError("synthetic world uses different concept groups than this code")
        return cls(
            seed=int(d["seed"]),
            profiles=np.asarray(d["profiles"], dtype=np.int64),
            n_seen=int(d["n_seen"]),
            variable_group=np.asarray(d["variable_group"], dtype=np.int64),
            variable_value=np.asarray(d["variable_value"], dtype=np.int64),
            p_variation=float(d["p_variation"]),
            nearest_seen=np.asarray(d["nearest_seen"], dtype=np.int64),
            groups=groups,
        )


def _dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (np.atleast_2d(a) != np.atleast_2d(b)).sum(axis=-1)


#: Every possible profile, shape (n_profiles, n_groups).
_ALL = np.array(list(itertools.product(*(range(int(k)) for k in _SIZES))), dtype=np.int64)


def _place_seen(rng: np.random.Generator, n_classes: int, min_distance: int) -> list[int] | None:
    """Greedy: add profiles at least ``min_distance`` apart, preferring rarely used values."""
    usage = [np.zeros(int(k)) for k in _SIZES]
    avail = np.ones(len(_ALL), dtype=bool)
    chosen: list[int] = []
    for _ in range(n_classes):
        cand = np.flatnonzero(avail)
        if not len(cand):
            return None
        score = sum(usage[g][_ALL[cand, g]] for g in range(len(_SIZES)))
        pick = int(rng.choice(cand[score == score.min()]))
        chosen.append(pick)
        for g in range(len(_SIZES)):
            usage[g][_ALL[pick, g]] += 1
        avail &= _dist(_ALL, _ALL[pick]) >= min_distance
    return chosen


def _place_heldout(
    rng: np.random.Generator,
    profiles: np.ndarray,
    variants: np.ndarray,
    var_group: np.ndarray,
    n_heldout: int,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Held-out profiles 1, 2, 3, 1, ... groups (else any of 1-3) from a unique nearest seen
    class."""
    D = (_ALL[:, None, :] != profiles[None, :, :]).sum(-1)
    order = np.sort(D, axis=1)
    near_d = order[:, 0]
    second = order[:, 1] if D.shape[1] > 1 else np.full(len(D), 99)
    base = D.argmin(axis=1)
    is_variant = (_ALL[:, None, :] == variants[None, :, :]).all(-1).any(1)
    changes_var = _ALL[np.arange(len(_ALL)), var_group[base]] != profiles[base, var_group[base]]
    ok = (second > near_d) & ~is_variant & ~changes_var & (near_d >= 1)
    picked: list[int] = []
    for h in range(n_heldout):
        cand = np.flatnonzero(ok & (near_d == 1 + h % 3))
        cand = cand[~np.isin(cand, picked)]
        if not len(cand):  # crowded worlds: any distance from 1 to 3
            cand = np.flatnonzero(ok & (near_d <= 3))
            cand = cand[~np.isin(cand, picked)]
        fresh = cand[~np.isin(base[cand], base[picked])]  # prefer a new nearest class
        if len(fresh):
            cand = fresh
        if not len(cand):
            return None
        picked.append(int(rng.choice(cand)))
    return _ALL[picked].reshape(-1, profiles.shape[1]), base[picked].astype(np.int64)


def make_world(
    n_classes: int = 20,
    n_heldout: int = 6,
    seed: int = 0,
    p_variation: float = 0.15,
    min_distance: int = 3,
) -> SyntheticWorld:
    """Draw class profiles.

    Seen classes are placed greedily: each new profile is at least ``min_distance`` groups from
    the others and uses the least used values (so every concept value is used by about the
    same number of classes). Held-out class ``h`` differs from its nearest seen class in
    ``1 + h % 3`` groups where possible, else in 1-3 (never that class's variable group), is
    farther from every other seen class, and equals no seen profile or variant.

    Parameters
    ----------
    n_classes : int
        Seen classes (>= 2).
    n_heldout : int
        Held-out classes (>= 0).
    seed : int
    p_variation : float
        Fraction of a seen class's images that show its alternative value.
    min_distance : int
        Minimum number of differing groups between seen classes (1..4).
    """
    if n_classes < 2 or n_heldout < 0:
        raise ValueError("need n_classes >= 2 and n_heldout >= 0")
    if not 1 <= min_distance <= 4:
        raise ValueError("min_distance must be between 1 and 4")
    if not 0.0 <= p_variation < 0.5:
        raise ValueError("p_variation must be in [0, 0.5)")
    n_groups = len(GROUPS)
    rng = np.random.default_rng([int(seed), 7, n_classes, n_heldout])
    for _attempt in range(100):
        placed = _place_seen(rng, n_classes, min_distance)
        if placed is None:
            continue
        profiles = _ALL[placed]
        var_group = rng.integers(0, n_groups, size=n_classes)
        var_value = np.array(
            [(profiles[c, g] + rng.integers(1, _SIZES[g])) % _SIZES[g] for c, g in enumerate(var_group)],
            dtype=np.int64,
        )
        variants = profiles.copy()
        variants[np.arange(n_classes), var_group] = var_value
        held = _place_heldout(rng, profiles, variants, var_group, n_heldout)
        if held is not None:
            heldout, nearest = held
            break
    else:
        raise ValueError(
            f"cannot place {n_classes} seen classes {min_distance} groups apart and "
            f"{n_heldout} held-out classes; use fewer classes or a smaller min_distance"
        )
    all_profiles = np.concatenate([profiles, heldout.reshape(-1, n_groups)])
    return SyntheticWorld(
        seed=int(seed),
        profiles=all_profiles.astype(np.int64),
        n_seen=n_classes,
        variable_group=np.concatenate([var_group, -np.ones(n_heldout, np.int64)]).astype(np.int64),
        variable_value=np.concatenate([var_value, -np.ones(n_heldout, np.int64)]).astype(np.int64),
        p_variation=float(p_variation),
        nearest_seen=np.asarray(nearest, dtype=np.int64),
    )


# --------------------------------------------------------------------------------------------
# drawing


def _shape_mask(shape: int, dy: np.ndarray, dx: np.ndarray, r: float) -> np.ndarray:
    ady, adx = np.abs(dy), np.abs(dx)
    if shape == 0:  # circle
        return dy * dy + dx * dx <= r * r
    if shape == 1:  # square
        return np.maximum(ady, adx) <= 0.82 * r
    if shape == 2:  # triangle, apex up
        return (dy <= 0.8 * r) & (adx <= (dy + r) * 0.6)
    if shape == 3:  # cross
        w = 0.34 * r
        return ((adx <= w) & (ady <= r)) | ((ady <= w) & (adx <= r))
    if shape == 4:  # diamond
        return ady + adx <= 1.02 * r
    d2 = dy * dy + dx * dx  # ring
    return (d2 <= r * r) & (d2 >= (0.5 * r) ** 2)


def render(profile: Sequence[int], rng: np.random.Generator, image_size: int = 64) -> np.ndarray:
    """Draw one image of a concept profile.

    Parameters
    ----------
    profile : sequence of int
        Value index per group (order of :data:`GROUPS`).
    rng : numpy Generator
        Source of the nuisance variation (position, size, hue, texture phase, noise).
    image_size : int
        Side in pixels (>= 32).

    Returns
    -------
    image : ndarray of shape (image_size, image_size, 3), dtype uint8
    """
    shape, colour, size, pattern, background, count, position = (int(v) for v in profile)
    S = int(image_size)
    s = S / 64.0
    img = np.empty((S, S, 3), dtype=np.float32)
    if background == 0:
        img[:] = rng.uniform(12, 45)
    elif background == 1:
        img[:] = rng.uniform(205, 240)
    else:
        img[:] = rng.integers(60, 196, size=(S, S, 1))
    rgb = np.clip(_RGB[colour] + rng.uniform(-18, 18, size=3), 0, 255)
    alt = rgb * 0.45 + 55.0  # pattern colour: a darker, greyer shade of the object colour
    r = (rng.uniform(6.5, 8.5) if size == 0 else rng.uniform(12.0, 14.0)) * s
    cy = (18.0 if position == 0 else 46.0) * s + rng.uniform(-2.5, 2.5) * s
    if count == 0:
        cxs = [32.0 * s + rng.uniform(-6, 6) * s]
    else:
        cxs = [16.0 * s + rng.uniform(-1.5, 1.5) * s, 48.0 * s + rng.uniform(-1.5, 1.5) * s]
    period = max(2, round(3 * s))
    phase = int(rng.integers(0, 2 * period))
    half = int(np.ceil(r)) + 1
    y0, y1 = max(0, int(cy) - half), min(S, int(cy) + half + 1)
    ys = np.arange(y0, y1, dtype=np.float32)[:, None]
    for cx in cxs:
        x0, x1 = max(0, int(cx) - half), min(S, int(cx) + half + 1)
        xs = np.arange(x0, x1, dtype=np.float32)[None, :]
        mask = _shape_mask(shape, ys - cy, xs - cx, r)
        patch = img[y0:y1, x0:x1]
        patch[mask] = rgb
        if pattern:
            yi = (np.arange(y0, y1)[:, None] + phase) // period
            if pattern == 1:
                tex = np.broadcast_to(yi % 2 == 1, mask.shape)
            else:
                xi = (np.arange(x0, x1)[None, :] + phase) // period
                tex = (yi + xi) % 2 == 1
            patch[mask & tex] = alt
    return img.astype(np.uint8)
