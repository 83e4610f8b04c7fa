"""Weight import from Hugging Face BERT folders, warm starts and strict restores."""

import json

import numpy as np
import pytest
import tensorflow as tf
from conftest import tiny_encoder_config, write_tiny_vocab

from cmlm_tf import configs, convert_hf_bert
from cmlm_tf.modeling import sentence_encoder

HIDDEN, LAYERS, HEADS, INNER = 32, 2, 4, 64


def _fake_hf_tensors(vocab_size, rng, prefix=""):
    def r(*shape):
        return rng.standard_normal(shape).astype(np.float32) * 0.05

    t = {
        "embeddings.word_embeddings.weight": r(vocab_size, HIDDEN),
        "embeddings.position_embeddings.weight": r(64, HIDDEN),
        "embeddings.token_type_embeddings.weight": r(2, HIDDEN),
        "embeddings.LayerNorm.weight": 1 + r(HIDDEN),
        "embeddings.LayerNorm.bias": r(HIDDEN),
        "embeddings.position_ids": np.arange(64, dtype=np.int64)[None],
        "pooler.dense.weight": r(HIDDEN, HIDDEN),
        "pooler.dense.bias": r(HIDDEN),
    }
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            t[p + f"attention.self.{name}.weight"] = r(HIDDEN, HIDDEN)
            t[p + f"attention.self.{name}.bias"] = r(HIDDEN)
        t[p + "attention.output.dense.weight"] = r(HIDDEN, HIDDEN)
        t[p + "attention.output.dense.bias"] = r(HIDDEN)
        t[p + "attention.output.LayerNorm.weight"] = 1 + r(HIDDEN)
        t[p + "attention.output.LayerNorm.bias"] = r(HIDDEN)
        t[p + "intermediate.dense.weight"] = r(INNER, HIDDEN)
        t[p + "intermediate.dense.bias"] = r(INNER)
        t[p + "output.dense.weight"] = r(HIDDEN, INNER)
        t[p + "output.dense.bias"] = r(HIDDEN)
        t[p + "output.LayerNorm.weight"] = 1 + r(HIDDEN)
        t[p + "output.LayerNorm.bias"] = r(HIDDEN)
    return {prefix + k: v for k, v in t.items()}


def make_hf_dir(path, extra_tensors=None, prefix="", drop=None):
    from safetensors.numpy import save_file

    path.mkdir(parents=True, exist_ok=True)
    vocab = write_tiny_vocab(path / "vocab.txt")
    vocab_size = len(vocab.read_text(encoding="utf-8").splitlines())
    (path / "config.json").write_text(json.dumps({
        "model_type": "bert", "hidden_act": "gelu", "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "intermediate_size": INNER,
        "max_position_embeddings": 64, "type_vocab_size": 2, "vocab_size": vocab_size,
        "layer_norm_eps": 1e-12}))
    # The casing trap: sentence_bert_config's do_lower_case is not the tokenizer's casing.
    (path / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": 20, "do_lower_case": False}))
    (path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    (path / "1_Pooling").mkdir(exist_ok=True)
    (path / "1_Pooling" / "config.json").write_text(json.dumps(
        {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}))
    (path / "modules.json").write_text(json.dumps([
        {"type": "sentence_transformers.models.Transformer"},
        {"type": "sentence_transformers.models.Pooling"},
        {"type": "sentence_transformers.models.Normalize"}]))
    tensors = _fake_hf_tensors(vocab_size, np.random.default_rng(0), prefix)
    tensors.update(extra_tensors or {})
    for name in drop or []:
        tensors.pop(name)
    save_file(tensors, str(path / "model.safetensors"))
    return path, tensors


def _reference_bert(tensors, ids, prefix=""):
    """An independent numpy BERT forward (HF layout) returning mean-pooled vectors."""
    from scipy.special import erf

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
    warm_start = convert_hf_bert.convert(str(hf_dir), str(tmp_path / "out"))
    params = configs.load_experiment_config([warm_start])
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


def test_warm_start_restores_same_weights_into_fresh_model(tmp_path):
    hf_dir, _ = make_hf_dir(tmp_path / "hf")
    warm_start = convert_hf_bert.convert(str(hf_dir), str(tmp_path / "out"))
    params = configs.load_experiment_config([warm_start])
    first = sentence_encoder.build_sentence_encoder(params.task.model.encoder)
    sentence_encoder.restore_encoder(first, params.task.init_checkpoint)
    fresh = sentence_encoder.build_sentence_encoder(params.task.model.encoder)
    assert any(not np.array_equal(a.numpy(), b.numpy())
               for a, b in zip(first.weights, fresh.weights))
    sentence_encoder.restore_encoder(fresh, params.task.init_checkpoint)
    assert len(first.weights) == len(fresh.weights)
    for a, b in zip(first.weights, fresh.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # A recipe after the warm start still overrides pooling.
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("task:\n  model:\n    encoder:\n      pooling: cls\n")
    params = configs.load_experiment_config([warm_start, str(recipe)])
    assert params.task.model.encoder.pooling == "cls"
    assert params.task.model.encoder.hidden_size == HIDDEN


def test_unused_tensor_is_an_error(tmp_path):
    hf_dir, _ = make_hf_dir(tmp_path / "hf", extra_tensors={
        "cls.predictions.bias": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match=r"cls\.predictions\.bias"):
        convert_hf_bert.convert(str(hf_dir), str(tmp_path / "out"))


def test_missing_tensor_is_an_error(tmp_path):
    hf_dir, _ = make_hf_dir(tmp_path / "hf", drop=["encoder.layer.1.output.dense.bias"])
    with pytest.raises(ValueError, match="model.safetensors"):
        convert_hf_bert.convert(str(hf_dir), str(tmp_path / "out"))


def test_converter_cli_reports_missing_folder(tmp_path, capsys):
    assert convert_hf_bert.main(["--hf_dir", str(tmp_path / "nope"),
                                 "--output_dir", str(tmp_path / "out")]) == 2
    assert "nope" in capsys.readouterr().err


def test_restore_errors_name_the_file(tmp_path, tiny_run_dir, tiny_vocab):
    vocab_size = len(tiny_vocab.read_text().splitlines())
    with pytest.raises(FileNotFoundError, match="no_such_ckpt"):
        sentence_encoder.restore_encoder(
            sentence_encoder.build_sentence_encoder(tiny_encoder_config(vocab_size)),
            str(tmp_path / "no_such_ckpt"))
    wider = sentence_encoder.build_sentence_encoder(
        tiny_encoder_config(vocab_size, hidden_size=48))
    with pytest.raises(ValueError, match="ckpt-1"):
        sentence_encoder.restore_encoder(wider, str(tiny_run_dir))
    # A checkpoint without an `encoder` item matches nothing: an error, not a no-op.
    other = tf.train.Checkpoint(something=tf.Variable(1.0)).write(str(tmp_path / "other"))
    narrow = sentence_encoder.build_sentence_encoder(tiny_encoder_config(vocab_size))
    with pytest.raises(ValueError, match="other"):
        sentence_encoder.restore_encoder(narrow, other)


def test_bad_config_key_names_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("task:\n  model:\n    encoder:\n      hiden_size: 8\n")
    with pytest.raises(ValueError, match="hiden_size"):
        configs.load_experiment_config([str(bad)])
    with pytest.raises(ValueError, match="pooling"):
        sentence_encoder.build_sentence_encoder(configs.EncoderConfig(pooling="sum"))
