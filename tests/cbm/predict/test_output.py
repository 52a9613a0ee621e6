"""The predictions page's summary table."""

from cbm.predict.output import _summary
from cbm.predict.pipeline import COLUMNS, Predictions


def test_the_predictions_page_writes_each_float_column_in_one_format():
    # fresh-clone finding: one ignorance column read 0.271, 0.27, 0 and 0.00232 (.3g)
    def row(ignorance, score):
        r = dict.fromkeys(COLUMNS)
        r.update({"input": "a.png", "class": "c", "set": ["c"], "abstained": False, "ood_flag": False,
                  "ignorance": ignorance, "ood_score": score, "anomalous_attributes": [("x", 0.5)]})
        return r

    rows = [row(0.271, 1.2874), row(0.27, 32.683), row(0.0, 303.0921), row(0.00232, 0.5)]
    lines = _summary(Predictions(rows=rows, inputs=[None] * 4, explain=lambda i: None))[2:]
    cells = [line.split(" | ")[5:7] for line in lines]
    assert cells == [["0.271", "1.29"], ["0.270", "32.68"], ["0.000", "303.09"], ["0.002", "0.50"]]
