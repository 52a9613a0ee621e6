"""Concept data sets: CUB-200-2011 (Koh 112), AwA2, precomputed AwA features, a synthetic
concept world, your own image folder with a concepts CSV, class-disjoint folds, and one
LightningDataModule for all of them.

Every loader returns a :class:`SampleTable` (ids, classes, concepts, splits, names); its
torch datasets yield ``(input, concepts float32 (k,), class int)``.
"""

from .awa2 import AwA2Metadata, load_awa2, load_awa2_metadata
from .common import (
    DATA_ROOT_ENV,
    DataFormatError,
    DatasetLayoutError,
    UnreadableImageError,
    resolve_data_root,
    stratified_split,
)
from .cub import CUBTable, load_cub
from .cub_attributes import KOH_112_ATTRIBUTE_INDICES
from .custom import load_custom
from .datamodule import ConceptDataModule, build_transform
from .features import load_awa_features, load_feature_table
from .folds import (
    ClassFold,
    check_folds,
    class_disjoint_folds,
    load_folds,
    open_world_split,
    save_folds,
)
from .registry import DATASETS, load_dataset
from .synthetic import load_synthetic, make_synthetic, write_synthetic
from .synthetic_world import SyntheticWorld, make_world
from .tables import ConceptDataset, SampleTable

__all__ = [
    "DATA_ROOT_ENV",
    "DATASETS",
    "KOH_112_ATTRIBUTE_INDICES",
    "AwA2Metadata",
    "CUBTable",
    "ClassFold",
    "ConceptDataModule",
    "ConceptDataset",
    "SampleTable",
    "DataFormatError",
    "DatasetLayoutError",
    "SyntheticWorld",
    "UnreadableImageError",
    "build_transform",
    "check_folds",
    "class_disjoint_folds",
    "load_awa2",
    "load_awa2_metadata",
    "load_awa_features",
    "load_cub",
    "load_custom",
    "load_dataset",
    "load_feature_table",
    "load_folds",
    "load_synthetic",
    "make_synthetic",
    "make_world",
    "open_world_split",
    "resolve_data_root",
    "save_folds",
    "stratified_split",
    "write_synthetic",
]
