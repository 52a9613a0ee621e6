"""The open-world protocol: no held-out class reaches any fitting step, a golden tiny run, the
attribute ground truth, resumption, and the shipped synthetic config: its statistics on its stored
concept tables (``data/``), trained end to end at a smaller size, and at CI size."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import signal
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import yaml

import cbm.openworld.protocol as ow
from cbm.concepts.calibration import ConceptCalibrator
from cbm.data import ConceptDataModule, class_disjoint_folds, make_synthetic, open_world_split
from cbm.data.concept_tables import ConceptTable, load_concept_tables
from cbm.data.tables import FeatureTable
from cbm.detector import ConceptDetector
from cbm.heads import ConceptHead
from cbm.openworld.fold import evaluate_fold
from cbm.openworld.metrics import anomaly_ground_truth, image_anomaly_ground_truth, precision_at_k
from cbm.openworld.settings import EvalSettings
from ferl import metrics as M
from ferl.benchmarks.ood import IsolationForestDetector, KNNDetector, MahalanobisDetector
from ferl.metrics import ood as ood_metrics

REPO = Path(__file__).resolve().parents[3]
STORED_TABLES = Path(__file__).with_name("data") / "pack_synthetic_tables.py"
TRAINER = {"accelerator": "cpu", "devices": 1, "enable_progress_bar": False, "enable_model_summary": False}
#: A linear features-mode detector (no hidden layer) over the noisy concepts of `synthetic_features`.
FEATURE_DETECTOR = {
    "monitor": "loss",
    "data": {"dataset": "awa_features", "batch_size": 64},
    "model": {"hidden_dims": [], "lr": 0.05},
    "trainer": TRAINER | {"max_epochs": 20},
}


def synthetic_features(n_per_class: int = 20, n_classes: int = 12, seed: int = 0) -> FeatureTable:
    """The synthetic world's per-image concepts (as -1 / +1) plus Gaussian noise, as features."""
    world = make_synthetic(n_per_class, n_classes=n_classes, n_heldout=0, image_size=32, seed=seed)
    rng = np.random.default_rng(seed)
    x = 2.0 * world.concepts - 1.0 + 0.3 * rng.normal(size=world.concepts.shape)
    return FeatureTable(features=x.astype(np.float32), name="synthetic-features", sample_ids=world.sample_ids,
                        y=world.y, concepts=world.concepts, split=world.split, class_names=world.class_names,
                        concept_names=world.concept_names, class_concepts=world.class_concepts,
                        concept_groups=world.concept_groups)


class Spy:
    """Records what every fitting step of the protocol receives, per fold (independent of the
    protocol's own ``steps`` record)."""

    def __init__(self, mp: pytest.MonkeyPatch) -> None:
        self.fold = None
        self.log: dict = defaultdict(lambda: defaultdict(list))
        run_fold, shared = ow.run_fold, ConceptDetector._shared_step
        cal_fit, head_fit, threshold = ConceptCalibrator.fit, ConceptHead.fit, M.fit_acceptance_threshold

        def fold_spy(table, fold, *a, **k):
            self.fold = fold
            return run_fold(table, fold, *a, **k)

        def step_spy(module, batch, stage):
            self.log[self.fold.index][f"detector_{stage}"].append(batch[2].numpy().copy())
            return shared(module, batch, stage)

        def cal_spy(cal, probs, labels, names):
            self.log[self.fold.index]["calibration"].append(np.asarray(probs).copy())
            return cal_fit(cal, probs, labels, names)

        def head_spy(head, X, y, names):
            self.log[self.fold.index]["head"].append(np.asarray(y).copy())
            return head_fit(head, X, y, names)

        def threshold_spy(scores, accept=0.95):
            self.log[self.fold.index]["threshold"].append(len(scores))
            return threshold(scores, accept)

        mp.setattr(ow, "run_fold", fold_spy)
        mp.setattr(ConceptDetector, "_shared_step", step_spy)
        mp.setattr(ConceptCalibrator, "fit", cal_spy)
        mp.setattr(ConceptHead, "fit", head_spy)
        mp.setattr(M, "fit_acceptance_threshold", threshold_spy)
        mp.setattr(ood_metrics, "fit_acceptance_threshold", threshold_spy)  # used by M.ood_summary
        for cls in (MahalanobisDetector, KNNDetector, IsolationForestDetector):
            mp.setattr(cls, "fit", self._baseline_spy(cls.fit, cls.__name__))

    def _baseline_spy(self, fit, name):
        def spy(det, X, y=None):
            self.log[self.fold.index][f"baseline:{name}"].append(np.asarray(y).copy())
            return fit(det, X, y)
        return spy


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    out = tmp_path_factory.mktemp("openworld")
    with pytest.MonkeyPatch.context() as mp:
        spy = Spy(mp)
        run = ow.run_openworld(FEATURE_DETECTOR, out, name="golden", seeds=[0], n_folds=3,
                               table=synthetic_features(),
                               settings=EvalSettings(top_k=(1, 3), examples_per_fold=1))
    return run, spy, out


def test_no_held_out_class_reaches_detector_calibration_heads_baselines_or_thresholds(golden):
    run, spy, out = golden
    assert len(run["results"]) == 3
    n_scores = len(EvalSettings().detectors)
    for r in run["results"]:
        retained, held = set(r["retained"]), set(r["held_out"])
        names = np.asarray(json.loads((out / "folds.json").read_text())["class_names"])
        log = spy.log[r["fold"]]
        seen_train = set(np.concatenate(log["detector_train"]).tolist())
        assert seen_train == retained  # every retained class trains the detector, no held-out one
        assert set(np.concatenate(log["detector_val"]).tolist()) <= retained
        tables = load_concept_tables(out / f"seed0/fold{r['fold']}", splits=ow.PARTS)
        cal_probs, *halves = log["calibration"]
        np.testing.assert_array_equal(cal_probs, tables["val"].probs)  # exactly the retained val rows
        # val's own rows are calibrated out of sample by maps fitted on the other half of val
        assert len(halves) == 2 and sum(len(h) for h in halves) == len(cal_probs)
        rows = {tuple(r) for r in cal_probs.round(12)}
        assert all(tuple(r) in rows for h in halves for r in h.round(12))
        assert set(tables["val"].y.tolist()) <= retained
        (head_y,) = log["head"]
        assert set(head_y.tolist()) == set(names[sorted(retained)].tolist())
        for b in ("MahalanobisDetector", "KNNDetector", "IsolationForestDetector"):
            fits = log[f"baseline:{b}"]  # Mahalanobis also fits the detector's feature typicality
            assert len(fits) == (2 if b == "MahalanobisDetector" else 1)
            assert all(set(y.tolist()) == retained for y in fits)
        assert log["threshold"] == [len(tables["val"].y)] * n_scores  # every score's, on val rows only
        assert set(tables["test"].y.tolist()) <= retained and set(tables["novel"].y.tolist()) == held
        # the protocol's own record says the same
        steps = r["steps"]
        assert all(set(s["classes"]) <= retained for k, s in steps.items() if k != "novel")
        assert set(steps["novel"]["classes"]) == held


def test_golden_tiny_synthetic_run(golden):
    """Fixed features-mode synthetic run (12 classes, 3 folds, seed 0; a linear detector). Measured
    when written: AUROC FERL-deep residual 0.997, kNN 0.993, Mahalanobis 0.997, Isolation Forest
    0.964; FERL ignorance 0.58 and firing 0.50 (every rule keeps firing on held-out classes)."""
    run, _, out = golden
    auroc = {d: np.mean([r["ood"][d]["auroc"] for r in run["results"]]) for d in EvalSettings().detectors}
    assert auroc["ferl-deep:residual"] >= 0.95 and auroc["knn"] >= 0.95
    assert auroc["mahalanobis"] >= 0.95 and auroc["iforest"] >= 0.85
    assert auroc["ferl-deep:firing"] <= 0.6
    for r in run["results"]:
        assert 0.85 <= r["ood"]["knn"]["accept_id"] <= 1.0  # the val threshold accepts ~95 % of test
        assert r["heads"]["ferl-deep"]["accuracy"] >= 0.9
    report = (out / "report.md").read_text()
    assert "| FERL-deep (residual) |" in report and "| p@3 true concepts |" in report
    # the table leads with the head's own score (fit-head's FERL-deep: its joint score) and
    # the baselines; the ablation kinds and FERL's other scores sit in the appendix
    # fit-head's head, calibrated on val: the joint score of its typicality and its class evidence
    assert all(r["heads"]["ferl-deep"]["ood_kind"] == "joint" for r in run["results"])
    main, appendix = report.split("## Appendix: FERL's other scores")
    table = main.split("## Detection of held-out classes")[1].split("\n## ")[0]
    assert "| FERL-deep (joint) |" in table and "| kNN (k=5) |" in table and "(residual)" not in table
    assert "| FERL-deep (residual) |" in appendix and "| FERL-deep (typical) |" in appendix
    assert "Reject: share of held-out images above the threshold that accepts 95 %" in report
    assert (out / "roc.png").read_bytes()[:4] == b"\x89PNG"
    assert len((out / "per_fold.csv").read_text().splitlines()) == 1 + 3 * len(EvalSettings().detectors)
    examples = (out / "examples.md").read_text()
    assert "## `class_" in examples and examples.count("- joint score ") == 3
    # every example at the operating point predict answers with; abstention and flags per fold
    assert examples.count("(the evidence's reliability at the operating point: ") == 3
    assert "| caught retained | caught held-out |" in report
    assert "| FERL-deep (ignorance-discounted) |" in report
    for r in run["results"]:
        head = r["heads"]["ferl-deep"]
        assert head["caught_novel"] >= max(head["abstain_novel"], head["flag_novel"])  # either of them
        assert head["caught_test"] <= head["abstain_test"] + head["flag_test"] + 1e-12
        assert head["caught_novel"] > head["caught_test"]  # held-out classes are caught more often
        assert set(head["baselines_at_operating_point"]) == set(EvalSettings().baselines)
        assert r["ood"]["ferl-deep:ignorance-discounted"]["auroc"] > r["ood"]["ferl-deep:ignorance"]["auroc"]


def simulated_tables(world, fold, noise: float, rng) -> dict[str, ConceptTable]:
    """Concept tables of an almost perfect detector: true per-image concepts plus clipped noise."""
    parts = open_world_split(world.y, world.split, fold)
    probs = np.clip(world.concepts + rng.normal(0, noise, world.concepts.shape), 0, 1)
    return {p: ConceptTable(probs=probs[ix], concept_labels=world.concepts[ix], y=world.y[ix],
                            concept_names=world.concept_names, class_names=world.class_names,
                            sample_ids=world.sample_ids[ix], split=p) for p, ix in parts.items()}


def test_attribute_naming_precision_at_3_on_the_synthetic_world():
    """The 20-class synthetic world, 5 folds, FERL-deep on the concept vectors of an almost perfect
    detector. Measured when written: precision@3 0.69 (chance 0.40), precision@1 0.83. Through
    trained detectors: the end-to-end test below."""
    world = make_synthetic(60, n_classes=20, n_heldout=0, image_size=32, seed=0)
    rng = np.random.default_rng(0)
    settings = EvalSettings(ferl_kinds=("residual",), baselines=(), top_k=(1, 3), examples_per_fold=0)
    naming = [evaluate_fold(simulated_tables(world, f, 0.08, rng), world.class_concepts, f, 0, settings,
                            examples=False).result["heads"]["ferl-deep"]["naming"]
              for f in class_disjoint_folds(20, 5, 0)]
    p3, chance = np.mean([n["precision@3"] for n in naming]), np.mean([n["chance"] for n in naming])
    assert p3 >= 0.6 and p3 >= chance + 0.2


def test_evaluate_fold_reads_the_products_head():
    """By default the fold's FERL head is fit-head's (concept settings, learned weights of evidence):
    its energy score exists only there, and on an almost perfect detector's concepts it separates
    held-out classes better than chance, beside the LR energy baseline."""
    world = make_synthetic(40, n_classes=10, n_heldout=0, image_size=32, seed=1)
    fold = class_disjoint_folds(10, 5, 0)[0]
    tables = simulated_tables(world, fold, 0.08, np.random.default_rng(1))
    settings = EvalSettings(ferl_kinds=("energy", "betp-entropy"), baselines=("lr-energy",),
                            examples_per_fold=0)
    ood = evaluate_fold(tables, world.class_concepts, fold, 0, settings, examples=False).result["ood"]
    assert set(ood) == {"ferl-deep:energy", "ferl-deep:betp-entropy", "lr-energy"}
    assert ood["ferl-deep:energy"]["auroc"] > 0.6
    with pytest.raises(ValueError, match="evidence_weights='learned'"):
        evaluate_fold(tables, world.class_concepts, fold, 0,
                      EvalSettings(ferl_kinds=("energy",), baselines=(), examples_per_fold=0,
                                   ferl_settings="learner"), examples=False)


def _stored_tables_module():
    """``data/pack_synthetic_tables.py``, which writes and reads ``data/synthetic_seed0.npz``."""
    spec = importlib.util.spec_from_file_location("pack_synthetic_tables", STORED_TABLES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_attribute_naming_with_the_shipped_synthetic_config_on_its_stored_concept_tables():
    """The shipped ``configs/openworld/synthetic.yaml`` at seed 0, all 5 folds, from the concept tables
    its image detectors (trained without the held-out classes) output, stored in
    ``data/synthetic_seed0.npz`` (float16 logits; ``data/pack_synthetic_tables.py`` regenerates
    them and this test fails when the config or the synthetic world no longer match them): then
    calibration, FERL-deep and kNN, as in ``evaluate-openworld``. Training the five detectors takes
    5-8 min on 2 cores, too long for the suite; the trained pipeline runs end to end in the next test,
    at a smaller size.

    Measured on the stored tables: precision@3 0.692 (per fold 0.750, 0.587, 0.840, 0.684, 0.601;
    chance 0.40), against each image's own concepts 0.746 (chance 0.373); AUROC FERL-deep residual
    0.896, kNN 0.902 (the float32 tables gave 0.693, 0.746, 0.895, 0.902). History: written at
    precision@3 0.669; 0.5875 after FERL grew by information gain; 0.641 once the nll's leaf
    term was shared by the residual of the shallow nodes (`ferl.novelty.scores.NAMING_DEPTH`). The head
    is the learner's preset (``ferl_settings="learner"``), whose naming these figures describe;
    fit-head's head is evaluated in `test_evaluate_fold_reads_the_products_head`."""
    settings = EvalSettings(ferl_kinds=("residual",), baselines=("knn",), top_k=(1, 3), examples_per_fold=0,
                            ferl_settings="learner")
    class_concepts, folds = _stored_tables_module().unpack()
    results = [evaluate_fold(tables, class_concepts, fold, 0, settings, examples=False).result
               for fold, tables in folds]
    assert len(results) == 5
    naming = [r["heads"]["ferl-deep"]["naming"] for r in results]
    p3, chance = np.mean([n["precision@3"] for n in naming]), np.mean([n["chance"] for n in naming])
    assert p3 >= 0.6 and p3 >= chance + 0.15
    p3_image = np.mean([n["image_precision@3"] for n in naming])  # against each image's own concepts
    assert p3_image >= 0.6 and p3_image >= np.mean([n["image_chance"] for n in naming]) + 0.15
    auroc = {d: np.mean([r["ood"][d]["auroc"] for r in results]) for d in ("ferl-deep:residual", "knn")}
    assert auroc["ferl-deep:residual"] >= 0.85 and auroc["knn"] >= 0.85


def test_stored_concept_tables_of_another_config_or_world_are_refused(tmp_path):
    packer = _stored_tables_module()
    with np.load(packer.STORED) as z:
        arrays = {k: z[k] for k in z.files}
    other = tmp_path / "other.npz"
    retuned = str(arrays["config"]).replace("max_epochs: 8", "max_epochs: 9")
    assert retuned != str(arrays["config"])
    np.savez(other, **arrays | {"config": np.array(retuned)})
    with pytest.raises(ValueError, match=r"another synthetic\.yaml: regenerate it as .*pack_synthetic"):
        packer.unpack(other)
    np.savez(other, **arrays | {"fold3_novel_y": arrays["fold3_novel_y"][::-1]})
    with pytest.raises(ValueError, match="the rows of fold3_novel are not the synthetic world's; regenerate"):
        packer.unpack(other)


def test_the_shipped_synthetic_config_trains_image_detectors_end_to_end_at_a_smaller_size(tmp_path):
    """The shipped ``configs/openworld/synthetic.yaml`` end to end as ``evaluate-openworld`` runs it
    (its resnet10t, optimiser and world, p_swap included; fit-head's FERL-deep), at a size the suite
    can afford (8 s on 2 quiet cores): 40 images per class instead of 120, 32 px instead of 64, 4 epochs
    instead of 8, fold 0 only. A detector trained on the 16 retained classes' images must give concepts
    that transfer to the 4 held-out classes, and the chain (calibration, FERL-deep, kNN, naming) must
    work on them. The full-size bounds are checked on the shipped config's stored tables (the test
    above); here the held-out set is 32 images, so the bounds are lower, below the values measured when
    written: concept accuracy 0.933 on retained test images, concept AUROC 0.766 on held-out ones;
    FERL-deep accuracy 0.781 (16 classes: chance 0.06); AUROC kNN 0.671; precision@3 0.583 (chance
    0.385). Over the 5 folds at this size: concept AUROC on held-out images 0.77-0.83, FERL-deep
    accuracy 0.73-0.78, AUROC kNN 0.67-0.88, precision@3 0.05-0.22 above chance (fold 0 is among the
    hardest). FERL-deep's own score (``joint``, the kind ``predict`` flags with) 0.713 on fold 0 with 5
    or 25 bootstrap cuts; the ``residual`` ablation kind this test read before fell from 0.623 to 0.504
    there with fit-head's 5 cuts (fold 0's 32 held-out images: it is not the product's score)."""
    cfg = yaml.safe_load((REPO / "configs" / "openworld" / "synthetic.yaml").read_text())
    det = cfg["detector"]
    det["data"] |= {"image_size": 32}
    det["data"]["dataset_kwargs"] |= {"n_per_class": 40}
    det["trainer"] |= {"accelerator": "cpu", "max_epochs": 4}
    run = ow.run_openworld(det, tmp_path / "out", name="synthetic", seeds=[0], folds=[0],
                           settings=EvalSettings(ferl_kinds=("joint",), baselines=("knn",), top_k=(1, 3),
                                                 examples_per_fold=0))
    (result,) = run["results"]
    assert result["status"] == "trained" and result["detector"]["epochs"] == 4
    concepts = result["detector"]["concept_metrics"]  # the detector's, per split
    assert concepts["test"]["concept_acc"] >= 0.9 and concepts["novel"]["auroc"] >= 0.7
    assert result["heads"]["ferl-deep"]["accuracy"] >= 0.6
    assert result["ood"]["knn"]["auroc"] >= 0.6 and result["ood"]["ferl-deep:joint"]["auroc"] >= 0.65
    naming = result["heads"]["ferl-deep"]["naming"]
    assert naming["precision@3"] >= naming["chance"] + 0.1


def test_leak_guard_refuses_a_detector_config_of_another_fold(tmp_path):
    table = synthetic_features(n_per_class=10, n_classes=6)
    folds = ConceptDataModule(dataset="awa_features", table=table, n_folds=3).folds
    det = copy.deepcopy(FEATURE_DETECTOR) | {"run_dir": str(tmp_path), "seed": 0}
    det["data"] |= {"fold": 1, "n_folds": 3}  # trains without fold 1's classes: fold 0's are in
    with pytest.raises(ValueError, match=r"reached step 'detector_train'"):
        ow.run_fold(table, folds[0], 0, tmp_path, det, EvalSettings())


def test_anomaly_ground_truth_uses_nearest_retained_class_and_ties():
    cc = np.array([[1, 0, 0, 1], [1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 1]])
    truth = anomaly_ground_truth(cc, held_out=[3, 0], retained=[1, 2])
    near, mask = truth[3]  # distances to 1 and 2: 3, 1
    assert near == [2] and mask.tolist() == [True, False, False, False]
    near, mask = truth[0]  # distances to 1 and 2: 2, 2 -> both nearest, union of differences
    assert near == [1, 2] and mask.tolist() == [True, True, True, True]
    with pytest.raises(ValueError, match="disjoint"):
        anomaly_ground_truth(cc, held_out=[1], retained=[1, 2])


def test_image_ground_truth_follows_each_image_and_equals_class_truth_on_profiles():
    cc = np.array([[1, 0, 0, 1], [1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 1]])
    images = np.array([[1, 0, 1, 1],   # class 3's profile: nearest retained 2 (distance 1)
                       [1, 1, 0, 1],   # a deviating image: distances to 1 and 2: 1, 3
                       [1, 0, 0, 1]])  # class 0's profile: tie between 1 and 2 (distance 2 each)
    truth = image_anomaly_ground_truth(images, cc, retained=[1, 2])
    assert truth.tolist() == [[True, False, False, False], [False, False, False, True], [True] * 4]
    by_class = anomaly_ground_truth(cc, held_out=[3, 0], retained=[1, 2])
    np.testing.assert_array_equal(truth[[0, 2]], [by_class[3][1], by_class[0][1]])
    with pytest.raises(ValueError, match="share c"):
        image_anomaly_ground_truth(images[:, :3], cc, retained=[1])
    with pytest.raises(ValueError, match="binary"):
        image_anomaly_ground_truth(images * 0.5, cc, retained=[1])
    with pytest.raises(ValueError, match="retained"):
        image_anomaly_ground_truth(images, cc, retained=[])


def test_precision_at_k_hand_computed():
    ranked = np.array([[0, 2, 1], [3, 1, 0]])
    truth = np.array([[1, 0, 0, 0], [0, 1, 0, 1]], dtype=bool)
    np.testing.assert_allclose(precision_at_k(ranked, truth, 1), [1.0, 1.0])
    np.testing.assert_allclose(precision_at_k(ranked, truth, 3), [1 / 3, 2 / 3])
    with pytest.raises(ValueError, match="k must be"):
        precision_at_k(ranked, truth, 4)


def test_mahalanobis_with_constant_concepts_is_finite():
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 30)
    X = np.clip(np.eye(3)[y] @ rng.random((3, 6)) + 0.05 * rng.normal(size=(90, 6)), 0, 1)
    X[:, [1, 4]] = [0.0, 0.37]  # calibrated maps of concepts with constant val labels
    det = MahalanobisDetector().fit(X, y)
    probe = np.vstack([X[:5], X[:1] + [0, 0.5, 0, 0, 0, 0]])
    scores = det.score(probe)
    assert np.isfinite(scores).all() and np.isfinite(det.precision_).all()
    assert scores[-1] > 10 * scores[:5].max()  # leaving a constant concept is strongly novel


def _ci_size_config(folder: Path) -> Path:
    """The shipped synthetic open-world config, shrunk to CI size (a tiny backbone, 32-pixel images)."""
    cfg = yaml.safe_load((REPO / "configs" / "openworld" / "synthetic.yaml").read_text())
    det = cfg["detector"]
    det["data"] |= {"image_size": 32, "batch_size": 16}
    det["data"]["dataset_kwargs"] |= {"n_per_class": 8, "n_classes": 10}
    det["model"] |= {"backbone": "test_resnet"}
    det["trainer"] |= {"accelerator": "cpu"}
    small = folder / "synthetic.yaml"
    small.write_text(yaml.safe_dump(cfg))
    return small


def test_synthetic_config_at_ci_size_resumes_and_overwrites(tmp_path, capsys):
    small = _ci_size_config(tmp_path)
    out = tmp_path / "out"
    argv = ["--config", str(small), "--out", str(out), "--folds", "2", "--seeds", "3",
            "--keep-checkpoints", "best", "--detector-epochs", "1"]
    ow.evaluate_openworld_main(argv)
    assert "| FERL-deep (joint) |" in capsys.readouterr().out  # the head's own score leads
    record = json.loads((out / "run.json").read_text())
    assert record["per_fold"][0] | {"detector": None} == record["per_fold"][0] | {
        "seed": 3, "fold": 2, "status": "trained", "detector": None}
    assert record["per_fold"][0]["detector"]["epochs"] == 1
    saved = yaml.safe_load((out / "seed3/fold2/config.yaml").read_text())
    assert saved["data"]["fold"] == 2 and saved["seed"] == 3 and saved["trainer"]["max_epochs"] == 1
    ckpts = out / "seed3/fold2/detector/checkpoints"
    assert sorted(c.name for c in ckpts.glob("*.ckpt")) == ["best.ckpt"]  # last.ckpt pruned
    assert record["keep_checkpoints"] == "best"
    assert record["per_fold"][0]["detector"]["checkpoints"] == ["best.ckpt"]
    tables = out / "seed3/fold2/concepts/train.npz"
    stamp = tables.stat().st_mtime_ns
    ow.evaluate_openworld_main(argv)  # finished fold: read back
    assert json.loads((out / "run.json").read_text())["per_fold"][0]["status"] == "done"
    (out / "seed3/fold2/result.json").unlink()
    ow.evaluate_openworld_main(argv)  # detector kept, evaluation redone
    assert json.loads((out / "run.json").read_text())["per_fold"][0]["status"] == "reused"
    assert tables.stat().st_mtime_ns == stamp
    keep_none = [a for a in argv if a != "best"][:-2] + ["none", "--detector-epochs", "1"]
    ow.evaluate_openworld_main(keep_none)  # a finished fold read back is pruned too
    record = json.loads((out / "run.json").read_text())
    assert record["per_fold"][0]["status"] == "done"
    assert record["per_fold"][0]["detector"]["checkpoints"] == []
    assert not list(ckpts.glob("*.ckpt"))
    assert json.loads((out / "seed3/fold2/detector/metrics.json").read_text())["best_checkpoint"] is None
    (out / "seed3/fold2/result.json").unlink()
    with pytest.raises(SystemExit, match="^evaluate-openworld: error: .*another configuration"):
        ow.evaluate_openworld_main(keep_none[:-1] + ["2"])
    assert yaml.safe_load((out / "config.yaml").read_text())["detector_epochs"] == 1  # refused: kept
    ow.evaluate_openworld_main([*keep_none[:-1], "2", "--overwrite"])
    assert json.loads((out / "run.json").read_text())["per_fold"][0]["detector"]["epochs"] == 2
    assert not list(ckpts.glob("*.ckpt")) and (out / "seed3/fold2/result.json").is_file()
    with pytest.raises(SystemExit):  # the parser names the choices
        ow.evaluate_openworld_main([*argv[:-1], "2", "--keep-checkpoints", "some"])
    assert "none" in capsys.readouterr().err


def test_a_fold_out_of_range_is_one_error_line(tmp_path):
    argv = ["--config", str(_ci_size_config(tmp_path)), "--out", str(tmp_path / "out"), "--folds", "99"]
    with pytest.raises(SystemExit, match=r"^evaluate-openworld: error: folds \[99\] out of range 0\.\.4$"):
        ow.evaluate_openworld_main(argv)


def test_sigterm_during_a_fold_exits_143_naming_what_was_kept(tmp_path, child, monkeypatch):
    real = ow.run_fold

    def run_fold(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # as `timeout` sends it, while the fold runs
        return real(*args, **kwargs)

    monkeypatch.setattr(ow, "run_fold", run_fold)
    out, err = tmp_path / "out", tmp_path / "stderr"
    argv = ["--config", str(_ci_size_config(tmp_path)), "--out", str(out), "--folds", "1"]
    status = child.run(lambda: ow.evaluate_openworld_main(argv), stderr=err)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 128 + signal.SIGTERM
    assert err.read_text().strip().splitlines()[-1] == (
        f"evaluate-openworld: error: interrupted by SIGTERM while running seed 0, fold 1; the folds "
        f"finished so far are in {out} (each with its result.json); rerun the same command to go on: "
        "finished folds are read back")
    assert not (out / "seed0" / "fold1" / "result.json").exists()
