"""Helpers of the import tests: a tiny Hugging Face BERT folder with random weights."""

import json

import numpy as np
from safetensors.numpy import save_file

from tests.conftest import write_tiny_vocab

HIDDEN, LAYERS, HEADS, INNER = 32, 2, 4, 64


def fake_hf_tensors(vocab_size, rng, prefix=""):
    """{Hugging Face BERT tensor name: random value}, BERT's unused pooler included."""
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
    """A sentence-transformers BERT folder (mean pooling, Normalize) of random weights at
    `path`; returns (path, its tensors)."""
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
    tensors = fake_hf_tensors(vocab_size, np.random.default_rng(0), prefix)
    tensors.update(extra_tensors or {})
    for name in drop or []:
        tensors.pop(name)
    save_file(tensors, str(path / "model.safetensors"))
    return path, tensors
