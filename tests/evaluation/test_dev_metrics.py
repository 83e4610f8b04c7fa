"""Training-time dev metrics (`task.dev_sts_file`, `task.dev_retrieval_files`)."""

import json
import types

import numpy as np
import pytest
import tensorflow as tf
from official.core import base_task

from cmlm_tf import configs
from cmlm_tf.driver import train_lib
from cmlm_tf.evaluation import dev_metrics, readers, retrieval, sts
from cmlm_tf.modeling import sentence_encoder
from cmlm_tf.text import packing, tokenization
from tests.conftest import TINY_WORDS, tiny_encoder_config, validation_scalars


def _dev_files(tmp_path):
    rng = np.random.default_rng(0)
    words = [w for w in TINY_WORDS if w.isalpha()]

    def sentence():
        return " ".join(rng.choice(words, size=rng.integers(2, 6)))

    sts_file = tmp_path / "sts.tsv"
    sts_file.write_text("".join(f"{sentence()}\t{sentence()}\t{rng.uniform(0, 5):.2f}\n"
                                for _ in range(24)), encoding="utf-8")
    bitext = tmp_path / "toy-de.tsv"
    bitext.write_text("".join(f"{sentence()}\t{sentence()}\n" for _ in range(16)),
                      encoding="utf-8")
    return str(sts_file), str(bitext)


def _encode_with(encoder, tokenizer_config, seq_length):
    """An independent encode: one batch, the encoder's `default`, L2-normalised."""
    tokenizer = tokenization.build_tokenizer(tokenizer_config)
    special = tokenization.special_token_ids(tokenizer)

    def encode(texts):
        inputs = packing.tokenize_and_pack(tokenizer, special, tf.constant(texts),
                                                seq_length)
        vectors = encoder(inputs, training=False)["default"].numpy()
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    return encode


def test_cmlm_train_and_eval_reports_dev_metrics(tmp_path, tiny_vocab):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"the {a} is here\na {b} is there"
                                  for a, b in zip(TINY_WORDS[5:25], TINY_WORDS[25:45])) + "\n")
    sts_file, bitext = _dev_files(tmp_path)
    data = {"input_path": str(corpus), "global_batch_size": 4, "seq_length": 8,
            "max_predictions_per_seq": 2, "shuffle_buffer_size": 10}
    overrides = {
        "task": {
            "model": {"encoder": tiny_encoder_config(
                len(tiny_vocab.read_text().splitlines()), num_layers=1).as_dict(),
                "tokenizer": {"vocab_file": str(tiny_vocab)}, "cmlm": {"num_projections": 2}},
            "train_data": data, "validation_data": data,
            "dev_sts_file": sts_file, "dev_retrieval_files": [bitext]},
        "trainer": {"train_steps": 2, "steps_per_loop": 2, "summary_interval": 2,
                    "checkpoint_interval": 2, "validation_interval": 2,
                    "validation_steps": 1,
                    "optimizer_config": {"warmup": {"linear": {"warmup_steps": 1}}}},
        "runtime": {"distribution_strategy": "mirrored", "num_gpus": 0}}
    params = train_lib.build_params("cmlm_tf/cmlm", params_override=json.dumps(overrides))
    model, _ = train_lib.run(params, str(tmp_path / "run"), "train_and_eval")
    logs = validation_scalars(tmp_path / "run" / "validation")

    names = {"dev_sts_spearman", "dev_sts_pearson", "dev_retrieval_toy_de_src2tgt_accuracy",
             "dev_retrieval_toy_de_tgt2src_accuracy"}
    assert names <= set(logs), sorted(logs)
    assert "masked_lm_accuracy" in logs  # the task's own validation metrics are still there
    encode = _encode_with(model.encoder, params.task.model.tokenizer, 8)
    first, second, gold = readers.read_sts(sts_file)
    expected_sts = sts.sts_correlations(encode(first), encode(second), gold)
    assert logs["dev_sts_spearman"] == pytest.approx(expected_sts["spearman"], abs=1e-6)
    assert logs["dev_sts_pearson"] == pytest.approx(expected_sts["pearson"], abs=1e-5)
    src, tgt = readers.read_bitext_tsv(bitext)
    expected = retrieval.retrieval_accuracy(encode(src), encode(tgt))
    assert logs["dev_retrieval_toy_de_src2tgt_accuracy"] == pytest.approx(
        expected["src2tgt_accuracy"])
    assert logs["dev_retrieval_toy_de_tgt2src_accuracy"] == pytest.approx(
        expected["tgt2src_accuracy"])


class _ParentTask(base_task.Task):
    """A task with its own log aggregation, which the mixin must keep."""

    def build_model(self):
        raise NotImplementedError

    def build_inputs(self, params, input_context=None):
        raise NotImplementedError

    def validation_step(self, inputs, model, metrics=None):
        return {"loss": tf.constant(1.0)}

    def aggregate_logs(self, state=None, step_outputs=None):
        return (state or []) + [step_outputs]

    def reduce_aggregated_logs(self, aggregated_logs, global_step=None):
        return {"parent_steps": len(aggregated_logs)}


class _MixedTask(dev_metrics.DevMetricsMixin, _ParentTask):
    pass


def _task_config(tiny_vocab, **dev):
    config = configs.SentenceTaskConfig(**dev)
    config.model.tokenizer = configs.TokenizerConfig(vocab_file=str(tiny_vocab))
    config.train_data.seq_length = 8
    return config


def test_mixin_keeps_the_task_aggregation_and_adds_dev_metrics(tmp_path, tiny_vocab):
    sts_file, bitext = _dev_files(tmp_path)
    task = _MixedTask(_task_config(tiny_vocab, dev_sts_file=sts_file,
                                   dev_retrieval_files=[bitext, bitext]))
    vocab_size = len(tiny_vocab.read_text().splitlines())
    encoder = sentence_encoder.build_sentence_encoder(tiny_encoder_config(vocab_size))
    model = types.SimpleNamespace(checkpoint_items={"encoder": encoder})
    state = None
    for _ in range(3):
        task.validation_step({}, model)
        state = task.aggregate_logs(state, {"loss": 1.0})
    logs = task.reduce_aggregated_logs(state)
    assert logs["parent_steps"] == 3
    assert {"dev_sts_spearman", "dev_retrieval_toy_de_src2tgt_accuracy",
            "dev_retrieval_toy_de_2_src2tgt_accuracy"} <= set(logs)
    encode = _encode_with(encoder, task.task_config.model.tokenizer, 8)
    first, second, gold = readers.read_sts(sts_file)
    assert logs["dev_sts_spearman"] == pytest.approx(
        sts.sts_correlations(encode(first), encode(second), gold)["spearman"], abs=1e-6)
    # Without dev files the mixin is invisible.
    plain = _MixedTask(_task_config(tiny_vocab))
    assert plain.reduce_aggregated_logs(plain.aggregate_logs(None, {})) == {"parent_steps": 1}


def test_bad_dev_file_stops_the_task_before_training(tmp_path, tiny_vocab):
    with pytest.raises(readers.DataError, match="missing.tsv: file not found"):
        _MixedTask(_task_config(tiny_vocab, dev_sts_file=str(tmp_path / "missing.tsv")))
    bad = tmp_path / "bad.tsv"
    bad.write_text("only one field\n")
    with pytest.raises(readers.DataError, match=r"bad.tsv:1: expected 2 tab-separated"):
        _MixedTask(_task_config(tiny_vocab, dev_retrieval_files=[str(bad)]))
