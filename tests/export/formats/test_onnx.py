"""`--onnx` (`cmlm_tf/export/formats/onnx.py`): the package check, the folder it implies and
its card rows (the models: tests/export/test_onnx_model.py)."""

import importlib.util

import pytest

from cmlm_tf.export.formats import onnx


def test_a_missing_onnx_package_is_refused_in_one_line(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnx" else real(name, *a))
    with pytest.raises(ValueError, match=r'^--onnx: the onnx package is not installed; '
                                         r'install the extra: pip install "cmlm_tf\[onnx\]"$'):
        onnx.require()


def test_onnx_writes_into_the_sentence_transformers_folder():
    assert onnx.FORMAT.implies == ("sentence_transformers",)
    meta = {"sentence_transformers": {"folder": "sentence_transformers", "onnx": {
        "float32": "onnx/model.onnx", "opset": 17}}}
    rows = onnx.card_rows(meta).splitlines()
    assert len(rows) == 1 and rows[0].startswith(
        "| `sentence_transformers/onnx/model.onnx` | ONNX Runtime, float32 (opset 17)")
    assert onnx.card_rows({"sentence_transformers": {"folder": "x"}}) == ""
