"""The fuzzy rule tree: its growth (binning, split search, best-first builder, pruning, fixed
partitions), the flat-array `FuzzyTree` with its memberships and sparse firing, the merged rule
intervals and the local robustness certificate."""

from ferl.tree.fuzzy_tree import FuzzyTree

__all__ = ["FuzzyTree"]
