"""How typical an image's detector features are of the training images (beyond the paper).

The concept head sees only the concept probabilities; when the image itself moves away from the
training images (noise, blur, weather, compression) the concepts go wrong before the head can see
why. The detector's own features see it: `FeatureTypicality` is the smallest class-conditional
Mahalanobis distance of an image's backbone features (the penultimate layer, what the concept layer
reads) to the training images' class means under one shared Ledoit-Wolf covariance (Lee et al.
2018; the feature-space density of deterministic uncertainty methods such as DDU, Mukhoti et al.
2023, with a tied covariance because a few tens of images per class cannot fit one covariance each).
It is fitted on the train split's features by ``train-detector`` and saved beside the checkpoint
(``detector/feature_typicality.npz``); its score of every exported row is the concept tables'
``feature_score`` column, which the heads' shift-adaptive sets read (`cbm.heads.operating`).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from ferl.benchmarks.ood import MahalanobisDetector
from ferl.io.persist import atomic_write_bytes

__all__ = ["FEATURE_TYPICALITY_FILE", "FeatureTypicality"]

#: Where a run keeps its detector's feature typicality, under the run directory.
FEATURE_TYPICALITY_FILE = Path("detector") / "feature_typicality.npz"
_VERSION = 1


class FeatureTypicality:
    """Mahalanobis distance of detector features to the training images' class means.

    Attributes
    ----------
    means_ : ndarray of shape (C, d), float64
        Class means of the training features.
    whiten_ : ndarray of shape (d, d), float64
        Cholesky factor ``L`` of the shared precision (``P = L L^T``).
    """

    def fit(self, features: np.ndarray, y: np.ndarray) -> FeatureTypicality:
        """Fit on training features.

        Parameters
        ----------
        features : ndarray of shape (n, d), float, finite
        y : ndarray of shape (n,), int
            Class of each row; at least two rows in all.

        Returns
        -------
        self

        Raises
        ------
        ValueError
            Not a 2-d finite array, labels of another length, fewer than two rows.
        """
        features = self._check(features, None)
        y = np.asarray(y)
        if y.shape != (features.shape[0],) or features.shape[0] < 2:
            raise ValueError(f"feature typicality needs at least 2 rows with one label each, got "
                             f"{features.shape[0]} rows and labels of shape {y.shape}")
        detector = MahalanobisDetector().fit(features, y)
        self.means_, self.whiten_ = detector.means_, detector.whiten_
        return self

    @staticmethod
    def _check(features, width: int | None) -> np.ndarray:
        features = np.asarray(features, dtype=np.float64)
        if features.ndim != 2 or (width is not None and features.shape[1] != width):
            raise ValueError(f"features must be a (n, {width or 'd'}) array, got shape {features.shape}")
        if not np.all(np.isfinite(features)):
            raise ValueError("features hold NaN or inf")
        return features

    def score(self, features: np.ndarray) -> np.ndarray:
        """Distance of each row to its nearest training class mean, float64 (n,), ``>= 0``.

        Raises
        ------
        ValueError
            Not fitted, another feature width, NaN or inf.
        """
        if not hasattr(self, "whiten_"):
            raise ValueError("FeatureTypicality is not fitted: call fit(features, y) first")
        detector = MahalanobisDetector()
        detector.means_, detector.whiten_ = self.means_, self.whiten_
        return np.sqrt(detector.score(self._check(features, self.whiten_.shape[0])))

    def save(self, path: str | os.PathLike) -> None:
        """Write the fitted state to ``path`` (``.npz``, no pickle), atomically."""
        buf = io.BytesIO()
        np.savez(buf, means=self.means_, whiten=self.whiten_, version=np.int64(_VERSION))
        atomic_write_bytes(Path(path), buf.getvalue())

    @classmethod
    def load(cls, path: str | os.PathLike) -> FeatureTypicality:
        """Read a saved state.

        Raises
        ------
        FileNotFoundError
            No such file.
        ValueError
            Another version, or arrays of inconsistent shapes or non-finite values.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found (the detector's feature typicality, written by "
                                    "train-detector)")
        try:
            with np.load(path, allow_pickle=False) as npz:
                version, means, whiten = int(npz["version"]), npz["means"], npz["whiten"]
        except (KeyError, ValueError, OSError) as err:
            raise ValueError(f"{path} is not a feature-typicality file ({err}); train the detector "
                             "again") from err
        d = whiten.shape[0] if whiten.ndim == 2 else -1
        if (version != _VERSION or whiten.shape != (d, d) or means.ndim != 2 or means.shape[1] != d
                or not np.all(np.isfinite(means)) or not np.all(np.isfinite(whiten))):
            raise ValueError(f"{path}: version {version} or array shapes {means.shape}, {whiten.shape} "
                             f"are not those of a version-{_VERSION} feature typicality; train the "
                             "detector again")
        out = cls()
        out.means_, out.whiten_ = means.astype(np.float64), whiten.astype(np.float64)
        return out
