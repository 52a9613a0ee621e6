"""The ``evaluate-interventions`` command line (settings in YAML like the other console scripts)::

    evaluate-interventions --config configs/interventions/default.yaml --run runs/<name>
    evaluate-interventions --run runs/a runs/b runs/c --out runs/interventions-abc   # mean ± std
    evaluate-interventions --run runs/openworld/synthetic      # every fold of an open-world run

Bad input ends the program with ``evaluate-interventions: error: <message>`` (exit status 1); SIGTERM /
SIGINT with one line too (exit status 143 / 130, :func:`cbm.jobs.console_main`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from jsonargparse import ActionConfigFile, ArgumentParser

from cbm.heads import HEADS
from cbm.heads.interventions import EXPERT_MODES
from cbm.heads.policies import POLICIES
from cbm.interventions.protocol import InterventionSettings, evaluate_interventions
from cbm.interventions.run import FITS
from cbm.jobs import console_main, phase
from cbm.runtime import add_threads_argument, set_threads
from ferl.novelty import OOD_KINDS

__all__ = ["evaluate_interventions_main", "interventions_parser"]

_DEFAULTS = InterventionSettings()


def interventions_parser() -> ArgumentParser:
    """The ``evaluate-interventions`` argument parser (every option can be set in ``--config``)."""
    p = ArgumentParser(prog="evaluate-interventions", description=(
        "Test-time concept interventions: accuracy, credal coverage, set size, abstention and OOD score "
        "after k answered concept groups, for every head x policy (random, uncertainty, ECTP, evidence)."))
    p.add_argument("--config", action=ActionConfigFile, help="YAML config (configs/interventions/*.yaml)")
    add_threads_argument(p)
    p.add_argument("--run", type=str, nargs="+", required=True,
                   help="run directories (train-detector + fit-head) or evaluate-openworld output folders")
    p.add_argument("--out", type=str | None, default=None,
                   help="folder of the combined results (needed for several runs; one run: a copy)")
    p.add_argument("--title", type=str, default="Concept interventions", help="report title")
    p.add_argument("--heads", type=str, nargs="+", default=list(_DEFAULTS.heads), help=f"of {list(HEADS)}")
    p.add_argument("--fits", type=str, nargs="+", default=list(_DEFAULTS.fits), help=f"of {list(FITS)}")
    p.add_argument("--inputs", type=str, default=_DEFAULTS.inputs, help="raw | calibrated")
    p.add_argument("--policies", type=str, nargs="+", default=list(_DEFAULTS.policies),
                   help=f"of {list(POLICIES)}")
    p.add_argument("--splits", type=str, nargs="+", default=list(_DEFAULTS.splits), help="test and/or novel")
    p.add_argument("--ks", type=int, nargs="+", default=None, help="answered-group counts (default: all)")
    p.add_argument("--max-rows", type=int | None, default=_DEFAULTS.max_rows,
                   help="rows per split (null: all)")
    p.add_argument("--expert", type=str, default=_DEFAULTS.expert, help=f"of {list(EXPERT_MODES)}")
    p.add_argument("--ood-kind", type=str | None, default=_DEFAULTS.ood_kind,
                   help=f"of {list(OOD_KINDS)} (default: each FERL head's own, the kind predict flags with)")
    p.add_argument("--seed", type=int, default=_DEFAULTS.seed,
                   help="heads fitted here, row subset, random policy")
    return p


def evaluate_interventions_main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``evaluate-interventions``; prints the accuracy table and where the files went."""
    cfg = interventions_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    def job() -> dict:
        set_threads(cfg.threads)
        settings = InterventionSettings(
            heads=tuple(cfg.heads), fits=tuple(cfg.fits), inputs=cfg.inputs, policies=tuple(cfg.policies),
            splits=tuple(cfg.splits), ks=None if cfg.ks is None else tuple(cfg.ks), max_rows=cfg.max_rows,
            expert=cfg.expert, ood_kind=cfg.ood_kind, seed=cfg.seed)
        with phase("evaluating interventions", "earlier results are unchanged (the report files are "
                   "written atomically)"):
            return evaluate_interventions(cfg.run, settings, cfg.out, cfg.title)

    files = console_main("evaluate-interventions", job)["files"]
    print(files["markdown"].read_text().split("\n## ")[1])
    print(f"report: {files['markdown']}  curves: {files['curves']}  figure: {files['figure']}")
