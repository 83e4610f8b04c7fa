"""`--tflite` (`cmlm_tf/export/formats/tflite.py`): its card rows, made from the metadata's
entry (the conversion itself: tests/export/test_tflite.py)."""

from cmlm_tf.export.formats import tflite


def test_each_tflite_model_gets_a_row():
    meta = {"tflite": {"models": [
        {"file": "model.tflite", "quantization": "float32", "inputs": "`sentences`",
         "custom_ops": ["TFText>FastWordpieceTokenize"]},
        {"file": "model_int8.tflite", "quantization": "dynamic-range int8",
         "inputs": "token ids", "custom_ops": []}]}}
    rows = tflite.card_rows(meta).splitlines()
    assert rows == [
        "| `tflite/model.tflite` | TFLite (float32): `sentences` -> `embeddings` | "
        "TFText>FastWordpieceTokenize |",
        "| `tflite/model_int8.tflite` | TFLite (dynamic-range int8): token ids -> "
        "`embeddings` | none |"]
    assert tflite.card_rows({}) == ""
