"""Pack the concept tables of the shipped synthetic open-world config (seed 0, all folds) into
``synthetic_seed0.npz`` beside this file, the input of
``test_openworld.py::test_attribute_naming_with_the_shipped_synthetic_config_on_its_stored_concept_tables``.

Training the five image detectors takes 5-8 min on 2 cores (CPU training is deterministic), too
long for the test suite; the file keeps what they output. Regenerate it when
``configs/openworld/synthetic.yaml`` or the detector changes (the test names this command when the
config no longer matches)::

    evaluate-openworld --config configs/openworld/synthetic.yaml --seeds 0 --out /tmp/ow-synthetic
    python tests/cbm/openworld/data/pack_synthetic_tables.py /tmp/ow-synthetic

Layout (plain arrays, no pickles): ``fold{i}_{part}_logit`` float16 (n, k), the logit of each concept
probability (float16 logits keep probabilities near 0 and 1 apart, where float16 probabilities would
tie); ``fold{i}_{part}_y`` int16 (n,) and ``fold{i}_{part}_labels`` uint8 (n, k) (bit-packed along k),
to check the rows against the synthetic world; ``config``: the YAML text of the config's ``detector``,
``n_folds`` and ``fold_seed``.
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import numpy as np
import yaml

from cbm.data import ConceptDataModule, open_world_split
from cbm.data.concept_tables import ConceptTable, load_concept_tables
from cbm.data.folds import ClassFold
from cbm.openworld.fold import PARTS
from ferl.io.atomic import atomic_write_bytes

REPO = Path(__file__).resolve().parents[4]
CONFIG = REPO / "configs" / "openworld" / "synthetic.yaml"
STORED = Path(__file__).with_name("synthetic_seed0.npz")


def config_text(path: Path = CONFIG) -> str:
    """The parts of the open-world config that decide the stored tables, as canonical YAML."""
    cfg = yaml.safe_load(path.read_text())
    return yaml.safe_dump({k: cfg[k] for k in ("detector", "n_folds", "fold_seed")}, sort_keys=True)


def pack(out: Path, stored: Path = STORED) -> None:
    """Write ``stored`` from the seed-0 folds of the open-world output folder ``out``."""
    cfg = yaml.safe_load(CONFIG.read_text())
    arrays = {"config": np.array(config_text())}
    for i in range(cfg["n_folds"]):
        tables = load_concept_tables(out / "seed0" / f"fold{i}", splits=PARTS)
        for part, table in tables.items():
            p = table.probs.astype(np.float64)
            with np.errstate(divide="ignore"):
                arrays[f"fold{i}_{part}_logit"] = (np.log(p) - np.log1p(-p)).astype(np.float16)
            arrays[f"fold{i}_{part}_y"] = table.y.astype(np.int16)
            arrays[f"fold{i}_{part}_labels"] = np.packbits(table.concept_labels, axis=1)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    atomic_write_bytes(stored, buf.getvalue())


def unpack(stored: Path = STORED) -> tuple[np.ndarray, list[tuple[ClassFold, dict[str, ConceptTable]]]]:
    """The shipped synthetic world's class profiles (n_classes, n_concepts) and the stored tables of
    every fold, rebuilt on that world (names, sample ids).

    Raises
    ------
    ValueError
        The file was made with another config, or its rows no longer match the synthetic world
        (the message says how to regenerate it).
    """
    regenerate = f"regenerate it as {Path(__file__).relative_to(REPO)} says"
    with np.load(stored) as z:
        arrays = {k: z[k] for k in z.files}
    if str(arrays["config"]) != config_text():
        raise ValueError(f"{stored.name} was made with another {CONFIG.name}: {regenerate}")
    cfg = yaml.safe_load(CONFIG.read_text())
    data = cfg["detector"]["data"]
    dm = ConceptDataModule(dataset=data["dataset"], dataset_kwargs=data["dataset_kwargs"],
                           image_size=data["image_size"], n_folds=cfg["n_folds"], fold_seed=cfg["fold_seed"])
    world, out = dm.table, []
    for fold in dm.folds:
        tables = {}
        for part, ix in open_world_split(world.y, world.split, fold).items():
            key = f"fold{fold.index}_{part}"
            labels = np.unpackbits(arrays[f"{key}_labels"], axis=1, count=len(world.concept_names))
            if not (np.array_equal(arrays[f"{key}_y"], world.y[ix])
                    and np.array_equal(labels, world.concepts[ix])):
                raise ValueError(f"{stored.name}: the rows of {key} are not the synthetic world's; "
                                 f"{regenerate}")
            probs = 1.0 / (1.0 + np.exp(-arrays[f"{key}_logit"].astype(np.float64)))
            tables[part] = ConceptTable(probs=probs, concept_labels=labels, y=world.y[ix],
                                        concept_names=world.concept_names, class_names=world.class_names,
                                        sample_ids=world.sample_ids[ix], split=part)
        out.append((fold, tables))
    return world.class_concepts, out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="evaluate-openworld's --out folder (shipped config, seed 0)")
    pack(parser.parse_args().out)
