"""Tests of `cmlm_tf.model_import.bert_weights`: Hugging Face BERT weights mapped into the
encoder give an independent NumPy forward's vectors; a tensor left over or missing is an
error naming it or its file."""

import json

import numpy as np
import pytest
import tensorflow as tf
from scipy.special import erf

from cmlm_tf import config_files
from cmlm_tf.model_import import bert_weights, hf_bert
from cmlm_tf.modeling import sentence_encoder
from tests.conftest import tiny_encoder_config
from tests.model_import.conftest import HEADS, HIDDEN, LAYERS, make_hf_dir


def _reference_bert(tensors, ids, prefix=""):
    """An independent numpy BERT forward (HF layout) returning mean-pooled vectors."""
    def w(name):
        return tensors[prefix + name].astype(np.float64)

    def layer_norm(x, name):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * w(name + ".weight") + w(name + ".bias")

    def linear(x, name):
        return x @ w(name + ".weight").T + w(name + ".bias")

    seq = ids.shape[1]
    x = w("embeddings.word_embeddings.weight")[ids] + w(
        "embeddings.position_embeddings.weight")[:seq] + w(
        "embeddings.token_type_embeddings.weight")[0]
    x = layer_norm(x, "embeddings.LayerNorm")
    head = HIDDEN // HEADS
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."

        def split(t):
            return t.reshape(t.shape[0], seq, HEADS, head).transpose(0, 2, 1, 3)

        q, k, v = (split(linear(x, p + f"attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = layer_norm(x + linear(context, p + "attention.output.dense"),
                       p + "attention.output.LayerNorm")
        hidden = linear(x, p + "intermediate.dense")
        hidden = 0.5 * hidden * (1 + erf(hidden / np.sqrt(2)))
        x = layer_norm(x + linear(hidden, p + "output.dense"), p + "output.LayerNorm")
    return x.mean(1)



@pytest.mark.parametrize("prefix", ["", "bert."])
def test_conversion_matches_independent_forward(tmp_path, prefix):
    hf_dir, tensors = make_hf_dir(tmp_path / "hf", prefix=prefix)
    warm_start = hf_bert.convert(str(hf_dir), str(tmp_path / "out"))
    params = config_files.load_experiment_config([warm_start])
    model = params.task.model
    assert model.encoder.pooling == "mean" and model.encoder.normalize
    assert model.encoder.hidden_activation == "gelu_exact"
    assert model.tokenizer.lower_case is True
    source = json.loads((tmp_path / "out" / "source.json").read_text())
    assert source["max_seq_length"] == 20
    encoder = sentence_encoder.build_sentence_encoder(model.encoder)
    sentence_encoder.restore_encoder(encoder, params.task.init_checkpoint)
    ids = np.array([[2, 10, 11, 12, 3], [2, 20, 21, 22, 3]])
    ones = tf.ones(ids.shape, tf.int32)
    out = encoder({"input_word_ids": tf.constant(ids, tf.int32), "input_mask": ones,
                   "input_type_ids": tf.zeros_like(ones)}, training=False)
    np.testing.assert_allclose(out["pooled_output"].numpy(),
                               _reference_bert(tensors, ids, prefix), atol=2e-5)


def test_unused_tensor_is_an_error(tmp_path):
    hf_dir, _ = make_hf_dir(tmp_path / "hf", extra_tensors={
        "cls.predictions.bias": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match=r"cls\.predictions\.bias"):
        hf_bert.convert(str(hf_dir), str(tmp_path / "out"))


def test_missing_tensor_is_an_error(tmp_path):
    hf_dir, _ = make_hf_dir(tmp_path / "hf", drop=["encoder.layer.1.output.dense.bias"])
    with pytest.raises(ValueError, match="model.safetensors"):
        hf_bert.convert(str(hf_dir), str(tmp_path / "out"))


def test_the_way_out_maps_back_to_every_encoder_weight():
    """`hf_bert_tensors` is `map_hf_tensors` read backwards: Transformers' BertModel names
    and layouts, whose import gives every weight of the encoder back, exactly."""
    encoder = sentence_encoder.build_sentence_encoder(
        tiny_encoder_config(40, num_layers=2, num_attention_heads=4))
    rng = np.random.default_rng(0)
    for weight in encoder.weights:
        weight.assign(rng.normal(size=weight.shape).astype(np.float32))
    tensors = bert_weights.hf_bert_tensors(encoder)
    assert tensors["encoder.layer.1.attention.self.query.weight"].shape == (32, 32)
    assert tensors["encoder.layer.0.intermediate.dense.weight"].shape == (64, 32)
    assert tensors["pooler.dense.weight"].shape == (32, 32)
    mapped = bert_weights.map_hf_tensors(tensors, num_layers=2, num_heads=4, source="out")
    by_key = {bert_weights._variable_key(v): v.numpy() for v in encoder.bert.weights}
    assert set(mapped) == {key for key in by_key if not key.startswith("pooler_transform/")}
    for key, value in mapped.items():
        np.testing.assert_array_equal(value, by_key[key], err_msg=key)
