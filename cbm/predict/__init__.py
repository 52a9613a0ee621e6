"""Prediction on new inputs: a finished run's detector → calibration → FERL head in one pass.

Owns `Pipeline` (``Pipeline.from_run(dir).predict(images)``, the Python twin of the command), the
input readers (`cbm.predict.inputs`: image files and folders, concept vectors made elsewhere), the
output files (`cbm.predict.output`: CSV / JSON Lines table, Markdown page of explanations) and the
``predict`` console script (`cbm.predict.cli`).
"""

from cbm.predict.cli import predict_main, run_predict
from cbm.predict.pipeline import Pipeline, Predictions

__all__ = ["Pipeline", "Predictions", "predict_main", "run_predict"]
