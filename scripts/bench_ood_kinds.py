"""Which FERL OOD score should flag novel inputs? Each kind's AUROC and rejection rate on a run.

For a FERL head of the run (raw and calibrated inputs) and each OOD score kind, the product's
(``ood_score``: ``typical``, ``ignorance`` and, with learned weights of evidence, ``energy``) and the
ablations' (`ferl.benchmarks.ood_kinds`), the held-out (``novel``) images against the test images:
AUROC, and the share of held-out images above the threshold that accepts 95 % of the val images (the
rule ``fit-head`` stores and ``predict`` applies). The kind ``predict`` flags with
(`ferl.novelty.default_kind`) is marked.

Examples
--------
    python scripts/bench_ood_kinds.py runs/demo
"""

from __future__ import annotations

import sys

from cbm.report.run import load_run
from ferl import metrics as M
from ferl.benchmarks.ood import FERL_OOD_KINDS, ferl_score
from ferl.novelty import default_kind


def main(run_dir: str, head: str = "ferl-deep") -> None:
    run = load_run(run_dir)
    if "novel" not in run.tables:
        raise SystemExit(f"{run_dir} has no novel table (held-out images): nothing to detect")
    print("| inputs | kind | AUROC (%) | held-out rejected (%) | test accepted (%) |")
    print("|---|---|---:|---:|---:|")
    for inputs in ("raw", "calibrated"):
        model = run.head(head, inputs).model_
        X = {s: run.concepts(s, inputs) for s in ("val", "test", "novel")}
        kinds = (*FERL_OOD_KINDS, "energy") if model.evidence_weights_ is not None else FERL_OOD_KINDS
        for kind in kinds:
            s = {p: ferl_score(model, x, kind) for p, x in X.items()}
            m = M.ood_summary(s["val"], s["test"], s["novel"], 0.95)
            name = f"**{kind}** (predict's)" if kind == default_kind(model) else kind
            print(f"| {inputs} | {name} | {100 * m['auroc']:.1f} | {100 * m['reject']:.1f} | "
                  f"{100 * m['accept_id']:.1f} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
