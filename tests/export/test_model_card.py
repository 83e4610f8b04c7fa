"""The model card of an export (`cmlm_tf/export/model_card.py`), made from its metadata."""

import json

import pytest

from cmlm_tf.export import model_card
from tests.conftest import TINY_EXPORT_SEQ_LENGTH


@pytest.fixture(params=["wordpiece", "sentencepiece"])
def any_export(request):
    """The card tests run on a WordPiece and on a SentencePiece export."""
    return request.getfixturevalue(
        {"wordpiece": "tiny_export", "sentencepiece": "tiny_sp_export"}[request.param])


def test_card_says_how_to_load_the_export(any_export):
    card = (any_export / "README.md").read_text()
    for needle in ("hub.KerasLayer", "tf.saved_model.load", "tensorflow/serving", "mean",
                   str(TINY_EXPORT_SEQ_LENGTH)):
        assert needle in card


def test_card_is_made_from_the_metadata_alone(any_export):
    meta = json.loads((any_export / "cmlm_tf_export.json").read_text())
    card = model_card.model_card(meta)
    assert card == (any_export / "README.md").read_text()
    assert f"- Source: training run `{meta['source']['model_dir']}`, checkpoint " \
           f"`{meta['source']['checkpoint']}` (SHA-256 " \
           f"`{meta['source']['checkpoint_sha256'][:16]}…`)" in card


def test_card_lists_the_sentence_transformers_folder_and_its_onnx_models(tiny_export):
    meta = json.loads((tiny_export / "cmlm_tf_export.json").read_text())
    assert "sentence_transformers/" not in model_card.model_card(meta)
    meta["sentence_transformers"] = {
        "folder": "sentence_transformers", "modules": ["Transformer", "Pooling", "Normalize"],
        "onnx": {"float32": "onnx/model.onnx", "int8": "onnx/model_qint8_avx512_vnni.onnx",
                 "opset": 17}}
    card = model_card.model_card(meta)
    assert "| `sentence_transformers/` | sentence-transformers, Transformers: " \
           "`SentenceTransformer(path)` (Transformer, Pooling, Normalize) | none |" in card
    for precision, path in (("float32", "onnx/model.onnx"),
                            ("int8", "onnx/model_qint8_avx512_vnni.onnx")):
        assert f"| `sentence_transformers/{path}` | ONNX Runtime, {precision} (opset 17)" in card
