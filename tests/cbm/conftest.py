"""Fixtures for the data-layer tests: tiny fake CUB / AwA2 trees in temporary folders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cbm.data.common import DatasetLayoutError, resolve_data_root
from cbm.data.cub_attributes import KOH_112_ATTRIBUTE_INDICES

N_ATTR = 312
KOH = list(KOH_112_ATTRIBUTE_INDICES)


def _jpeg(path: Path, colour: tuple[int, int, int], size: tuple[int, int] = (12, 10)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path, quality=90)


def fake_cub_class_values(n_classes: int) -> np.ndarray:
    """Class-level values whose >=10-classes selection is exactly Koh's 112.

    Koh attributes are absent in exactly one class (a % n_classes == c), so every class has a
    distinct vector; other attributes are present in at most 4 classes.
    """
    v = np.zeros((n_classes, N_ATTR), dtype=np.uint8)
    for a in range(N_ATTR):
        for c in range(n_classes):
            v[c, a] = (a % n_classes != c) if a in KOH else ((a + c) % 3 == 0 and c < 8)
    return v


def write_fake_cub(
    root: Path,
    *,
    n_classes: int = 12,
    n_train: int = 3,
    n_test: int = 2,
    per_image: bool = True,
    continuous: bool = True,
    attributes_at: str = "root",
    values: np.ndarray | None = None,
) -> Path:
    """Write a CUB_200_2011 tree under ``root`` and return its path.

    Per-image labels follow Koh's rule only when "not visible" labels are skipped and only
    training images vote: for a present attribute, one training image says present and the
    others say absent/not-visible; test images always say the opposite of the class value.
    """
    cub = root / "CUB_200_2011"
    (cub / "attributes").mkdir(parents=True, exist_ok=True)
    v = fake_cub_class_values(n_classes) if values is None else values
    names = [f"{c + 1:03d}.Fake_Bird_{c}" for c in range(n_classes)]
    (cub / "classes.txt").write_text("".join(f"{c + 1} {n}\n" for c, n in enumerate(names)))
    attr_lines = "".join(f"{a + 1} has_part{a // 15}::value_{a}\n" for a in range(N_ATTR))
    target = {
        "root": cub / "attributes.txt",
        "attributes": cub / "attributes" / "attributes.txt",
        "parent": root / "attributes.txt",
    }[attributes_at]
    target.write_text(attr_lines)
    img_lines, lab_lines, split_lines, per_image_lines = [], [], [], []
    img_id = 0
    for c, name in enumerate(names):
        for j in range(n_train + n_test):
            img_id += 1
            train = j < n_train
            rel = f"{name}/Fake_{c}_{j}.jpg"
            _jpeg(cub / "images" / rel, ((c * 20) % 256, (j * 40) % 256, 128))
            img_lines.append(f"{img_id} {rel}\n")
            lab_lines.append(f"{img_id} {c + 1}\n")
            split_lines.append(f"{img_id} {int(train)}\n")
            for a in range(N_ATTR):
                if not train:
                    present, cert = 1 - int(v[c, a]), 4
                elif v[c, a]:
                    present, cert = (1, 4) if j == 0 else (0, 1)
                else:
                    present, cert = (1, 2) if j == 0 else (0, 3)
                per_image_lines.append(f"{img_id} {a + 1} {present} {cert} 1.5\n")
    (cub / "images.txt").write_text("".join(img_lines))
    (cub / "image_class_labels.txt").write_text("".join(lab_lines))
    (cub / "train_test_split.txt").write_text("".join(split_lines))
    if per_image:
        (cub / "attributes" / "image_attribute_labels.txt").write_text("".join(per_image_lines))
    if continuous:
        cont = np.where(v == 1, 80.0, 20.0)
        np.savetxt(cub / "attributes" / "class_attribute_labels_continuous.txt", cont, fmt="%.4f")
    return cub


AWA_CLASSES = ["antelope", "grizzly+bear", "killer+whale", "beaver"]


def write_fake_awa2(root: Path, *, n_images: int = 5, features: bool = True) -> Path:
    """Write an Animals_with_Attributes2 tree (4 classes, 85 predicates) under ``root``."""
    base = root / "Animals_with_Attributes2"
    base.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    (base / "classes.txt").write_text("".join(f"{i + 1:6d}\t{n}\n" for i, n in enumerate(AWA_CLASSES)))
    (base / "predicates.txt").write_text("".join(f"{i + 1:6d}\tpred{i}\n" for i in range(85)))
    binary = rng.integers(0, 2, size=(len(AWA_CLASSES), 85))
    np.savetxt(base / "predicate-matrix-binary.txt", binary, fmt="%d")
    (base / "trainclasses.txt").write_text("antelope\ngrizzly+bear\nbeaver\n")
    (base / "testclasses.txt").write_text("killer+whale\n")
    for c, name in enumerate(AWA_CLASSES):
        for j in range(n_images):
            _jpeg(base / "JPEGImages" / name / f"{name}_{10001 + j}.jpg", (c * 60, j * 30, 90))
    if features:
        n_per = 10
        y = np.repeat(np.arange(len(AWA_CLASSES)), n_per).astype(np.int16)
        X = (rng.normal(size=(len(y), 6)) + y[:, None]).astype(np.float16)
        ids = np.array([f"{AWA_CLASSES[c]}/{i:04d}" for i, c in enumerate(y)])
        (base / "features").mkdir(exist_ok=True)
        np.savez(
            base / "features" / "awa1_features.npz",
            X=X,
            y=y,
            classes=np.array(AWA_CLASSES),
            image_ids=ids,
        )
    return base


@pytest.fixture
def cub_writer():
    """The fake-CUB writer, :func:`write_fake_cub` (tests import no helpers from conftest)."""
    return write_fake_cub


@pytest.fixture
def cub_values():
    """:func:`fake_cub_class_values`: the class-level values a fake CUB tree encodes."""
    return fake_cub_class_values


@pytest.fixture
def awa2_writer():
    """The fake-AwA2 writer, :func:`write_fake_awa2`."""
    return write_fake_awa2


@pytest.fixture
def fake_cub(tmp_path: Path) -> Path:
    """A fake CUB tree with per-image labels (the Koh selection re-derives exactly)."""
    return write_fake_cub(tmp_path)


@pytest.fixture
def fake_cub_fallback(tmp_path: Path) -> Path:
    """A fake CUB tree without the per-image file, attributes.txt under attributes/."""
    return write_fake_cub(tmp_path, per_image=False, attributes_at="attributes")


@pytest.fixture
def fake_awa2(tmp_path: Path) -> Path:
    return write_fake_awa2(tmp_path)


@pytest.fixture(scope="session")
def real_data_root() -> Path:
    """The real data root ($FERL_DATA_ROOT or ../shared/data); tests skip when it is absent."""
    try:
        return resolve_data_root()
    except DatasetLayoutError as err:
        pytest.skip(f"real data not available: {err}")
