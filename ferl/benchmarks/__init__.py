"""Tabular benchmark of FERL against baselines on KEEL data sets (paper §4-5, appendices).

Modules: :mod:`~ferl.benchmarks.keel` (loader), :mod:`~ferl.benchmarks.protocol` (folds, scaling,
per-fold evaluation), :mod:`~ferl.benchmarks.methods` (method registry),
:mod:`~ferl.benchmarks.ood`, :mod:`~ferl.benchmarks.ablations`, :mod:`~ferl.benchmarks.shift`
(studies), :mod:`~ferl.benchmarks.ood_kinds` (the ablation kinds of OOD score),
:mod:`~ferl.benchmarks.stats`, :mod:`~ferl.benchmarks.tables`, :mod:`~ferl.benchmarks.plots`,
:mod:`~ferl.benchmarks.report` (outputs) and :mod:`~ferl.benchmarks.runner` (the loop). The command
line is ``scripts/bench_tabular.py``.
"""
