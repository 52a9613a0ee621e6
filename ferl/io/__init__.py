"""Files: atomic writes, folder locks and versioned saves (`ferl.io.persist`), and the pickle-free
model files of a `FERLClassifier` (``model.json`` + ``model.npz``)."""

from ferl.io.persist import write_model

__all__ = ["write_model"]
