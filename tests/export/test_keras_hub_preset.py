"""The KerasHub preset writer's refusals and model card, without keras-hub (the preset itself,
loaded by KerasHub on TensorFlow and PyTorch: tests/mteb_extra/test_keras_hub_preset.py)."""

import importlib.util
import os
import types

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from cmlm_tf import configs
from cmlm_tf.export import keras_hub_preset
from cmlm_tf.modeling import layers
from tests.conftest import TESTS_DIR

STANDINS = TESTS_DIR / "testdata" / "st_standins"


@pytest.fixture
def keras_hub_missing(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None
                        if name == "keras_hub" else find_spec(name, *args))


def _one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message and message.startswith("--keras_hub: "), message
    return message


def test_a_missing_keras_hub_is_refused_in_one_line_naming_the_extra(keras_hub_missing):
    with pytest.raises(ValueError) as error:
        keras_hub_preset.require_keras_hub()
    assert 'pip install "cmlm_tf[keras_hub]"' in _one_line(error)


def test_write_preset_without_keras_hub_writes_nothing(keras_hub_missing, tmp_path):
    with pytest.raises(ValueError) as error:
        keras_hub_preset.write_preset(str(STANDINS / "labse_layout"), str(tmp_path / "kh"))
    assert "keras-hub package is not installed" in _one_line(error)
    assert not (tmp_path / "kh").exists()


def test_a_bert_sentencepiece_folder_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError) as error:
        keras_hub_preset.write_preset(str(STANDINS / "bert_sentencepiece"), str(tmp_path / "kh"))
    assert "a BERT encoder with XLM-R's SentencePiece tokenizer has no KerasHub preset" in \
        _one_line(error)
    assert not (tmp_path / "kh").exists()


def test_an_xlmr_folder_passes_the_layout_and_then_needs_keras_hub(keras_hub_missing, tmp_path):
    with pytest.raises(ValueError) as error:
        keras_hub_preset.write_preset(str(STANDINS / "xlmr_layout"), str(tmp_path / "kh"))
    assert "keras-hub package is not installed" in _one_line(error)


@pytest.mark.parametrize("tokenizer, activation, refused", [
    ("wordpiece", "gelu_exact", None),
    ("wordpiece", "gelu_approx", None),
    ("sentencepiece", "gelu_exact", "the sentencepiece tokenizer"),
    ("xlmr_sentencepiece", "gelu_exact", None),
    ("xlmr_sentencepiece", "gelu_approx", None),
    ("wordpiece", "relu", "hidden_activation 'relu'"),
    ("xlmr_sentencepiece", "relu", "hidden_activation 'relu'"),
])
def test_check_representable_refuses_what_a_keras_hub_backbone_cannot_hold(tokenizer, activation,
                                                                            refused):
    sp_model = STANDINS / "xlmr_layout" / "sentencepiece.bpe.model"
    model = configs.SentenceModelConfig(
        encoder=configs.EncoderConfig(hidden_activation=activation),
        tokenizer=configs.TokenizerConfig(
            type=tokenizer, lower_case=tokenizer == "wordpiece",
            sp_model_file=str(sp_model) if tokenizer == "xlmr_sentencepiece" else ""))
    if refused is None:
        keras_hub_preset.check_representable(model)
        return
    with pytest.raises(ValueError) as error:
        keras_hub_preset.check_representable(model)
    assert refused in _one_line(error)


def _entry(**changes) -> dict:
    entry = {"folder": "keras_hub", "keras_hub": "0.32.0", "keras": "3.15.1",
             "tokenizer": {"class": "BertTokenizer", "lowercase": True, "strip_accents": True,
                           "split_on_cjk": True},
             "sequence_length": 128, "pooling": "mean", "normalize": True, "dense": None,
             "backbone": {"class": "BertBackbone", "notes": []}, "embedder": True,
             "id_mismatch": {"probe": "UDHR lines", "texts": 200, "differing": 9,
                             "share": 0.045, "examples": []},
             "kind_mismatch": {"texts": 28, "differing": 14, "share": 0.5},
             "differing_kinds": ["Hangul", "full-width forms"],
             "agreeing_kinds": ["plain ASCII", "accented Latin"]}
    entry.update(changes)
    return entry


def test_the_card_loads_the_preset_and_states_the_measured_id_mismatch():
    text = "\n".join(keras_hub_preset.card_lines(_entry()))
    assert 'keras_hub.models.Backbone.from_preset(preset)' in text
    assert 'keras_hub.models.TextEmbedderPreprocessor.from_preset(preset)' in text
    assert "TextEmbedder.from_preset(preset).predict(texts)" in text
    assert "On natural text, 200 texts (UDHR lines), they differed on 9 (4.5%). On hard " \
        "samples, 28 short texts of the kinds below where the two tokenizers can part ways, " \
        "they differed on 14 (50.0%)." in " ".join(text.split())
    assert "Texts with these differ: Hangul, full-width forms" in text
    assert "These agree: plain ASCII, accented Latin." in text
    dense = _entry(pooling="cls", embedder=False, backbone={
        "class": "BertBackbone",
        "notes": ["the exact (erf) GELU runs as KerasHub's tanh approximation"]},
        dense={"file": "projection.npz", "activation": "tanh", "size": 8})
    text = "\n".join(keras_hub_preset.card_lines(dense))
    assert "TextEmbedder` has no Dense projection" in text and "np.tanh(vectors)" in text
    assert "In the backbone, the exact (erf) GELU runs as KerasHub's tanh approximation." in text


def _xlmr_entry(**changes) -> dict:
    return _entry(tokenizer={"class": "XLMRobertaTokenizer", "proto": "sentencepiece.bpe.model"},
                  backbone={"class": "XLMRobertaBackbone", "notes": []}, **changes)


def test_an_xlmr_card_names_its_classes_and_calls_the_backbone_for_its_tensor():
    """KerasHub's RoBERTa backbone returns the sequence output itself; the card says so, and
    says where every probe text got the model's ids."""
    text = "\n".join(keras_hub_preset.card_lines(_xlmr_entry(
        id_mismatch={"probe": "UDHR lines", "texts": 200, "differing": 0, "share": 0.0,
                     "examples": []},
        kind_mismatch={"texts": 28, "differing": 0, "share": 0.0}, differing_kinds=[])))
    assert "the backbone `XLMRobertaBackbone`, the tokenizer `XLMRobertaTokenizer` (the " \
        "model's own SentencePiece model)" in " ".join(text.split())
    assert "\nhidden = keras.ops.convert_to_numpy(backbone(inputs))\n" in text
    assert "KerasHub's tokenizer gave the model's token ids on every probe text. On natural " \
        "text, 200 texts (UDHR lines), they differed on 0 (0.0%)." in " ".join(text.split())
    differing = "\n".join(keras_hub_preset.card_lines(_xlmr_entry()))
    assert "does not give the model's token ids on every text" in differing
    assert "Texts with these differ: Hangul, full-width forms.\n" in differing
    assert "BERT's normaliser" not in differing


@pytest.mark.parametrize("family", ["bert", "xlmr"])
def test_the_vector_lines_read_each_familys_backbone_output(family, tmp_path):
    """The card's lines from `backbone(inputs)`: BERT's backbone returns a dict, XLM-R's the
    sequence output; both give the mean over the padding mask (Keras 3 stood in for by
    NumPy)."""
    hidden = np.random.default_rng(0).normal(size=(2, 4, 3)).astype(np.float32)
    padding = np.array([[1, 1, 0, 0], [1, 1, 1, 1]], np.int32)
    entry = _xlmr_entry() if family == "xlmr" else _entry()
    keras = types.SimpleNamespace(ops=types.SimpleNamespace(convert_to_numpy=np.asarray))
    scope = {"np": np, "os": os, "keras": keras, "preset": str(tmp_path),
             "inputs": {"padding_mask": padding}, "backbone": lambda inputs: hidden
             if family == "xlmr" else {"sequence_output": hidden, "pooled_output": None}}
    exec("\n".join(keras_hub_preset.vector_lines(entry)), scope)
    expected = layers.pool(tf.constant(hidden), tf.constant(padding), "mean")
    expected = tf.math.l2_normalize(expected, axis=1)
    np.testing.assert_allclose(scope["vectors"], expected.numpy(), rtol=1e-5, atol=1e-6)


def test_the_natural_probe_is_both_sides_of_the_bundled_held_out_verses():
    """What an export measures KerasHub's id mismatch on when given no texts: natural
    sentences, English and Spanish in turn, none empty."""
    texts = keras_hub_preset.natural_probe_texts()
    pairs = (TESTS_DIR.parent / "cmlm_tf" / "data" / "corpus" / "bible_en_es_heldout.tsv") \
        .read_text(encoding="utf-8").splitlines()[:50]
    assert texts == [side for pair in pairs for side in pair.split("\t")]
    assert len(texts) == 100 and all(text.strip() for text in texts)
    assert "the first 50 English-Spanish verse pairs" in keras_hub_preset.NATURAL_PROBE


@pytest.mark.parametrize("pooling, dense, normalize", [
    ("mean", None, True), ("cls", "tanh", True), ("max", "linear", False),
    ("mean", "relu", False), ("cls", "sigmoid", True)])
def test_the_pooling_lines_give_the_encoders_pooling_projection_and_normalisation(
        pooling, dense, normalize, tmp_path):
    """The card's lines on NumPy backbone outputs equal `layers.pool`, the Dense projection
    with its activation, and L2 normalisation, in TensorFlow."""
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(3, 5, 4)).astype(np.float32)
    padding = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], np.int32)
    kernel, bias = rng.normal(size=(4, 6)).astype(np.float32), np.float32(rng.normal(size=6))
    np.savez(tmp_path / "projection.npz", kernel=kernel, bias=bias)
    entry = _entry(pooling=pooling, normalize=normalize, dense=dense and {
        "file": "projection.npz", "activation": dense, "size": 6})
    scope = {"np": np, "os": os, "preset": str(tmp_path), "hidden": hidden,
             "mask": padding.astype("float32")[:, :, None]}
    exec("\n".join(keras_hub_preset.pooling_lines(entry)), scope)
    expected = layers.pool(tf.constant(hidden), tf.constant(padding), pooling)
    if dense:
        expected = tf_keras.activations.get(dense)(expected @ kernel + bias)
    if normalize:
        expected = tf.math.l2_normalize(expected, axis=1)
    np.testing.assert_allclose(scope["vectors"], expected.numpy(), rtol=1e-5, atol=1e-6)
