"""Unsupervised SimCSE (`cmlm_tf/simcse`): two dropout views, the loss against NumPy, a few
steps, the cached ranking step, and the experiment's defaults."""

import numpy as np
import tensorflow as tf
import tf_keras
from official.core import exp_factory

from cmlm_tf import configs
from cmlm_tf.tasks import simcse
from tests.conftest import TINY_WORDS, write_corpus

BATCH = 8


def _config(tiny_vocab, tmp_path, dropout_rate=0.1):
    """A tiny SimCSE task on 24 sentences read in order; the first batch holds "a dog" twice
    (a repeated sentence must not be its own negative)."""
    words = TINY_WORDS[:22]
    lines = [f"the {a} {b}" for a, b in zip(words, reversed(words))]
    lines[5:5] = ["a dog"]
    lines[7:7] = ["a dog"]
    corpus = write_corpus(tmp_path / "sentences.txt", [lines])
    config = simcse.SimCSETaskConfig()
    config.model.encoder = configs.EncoderConfig(
        vocab_size=len(tiny_vocab.read_text().splitlines()), hidden_size=32, num_layers=1,
        num_attention_heads=2, intermediate_size=64, max_position_embeddings=16,
        dropout_rate=dropout_rate, attention_dropout_rate=dropout_rate)
    config.model.tokenizer = configs.TokenizerConfig(vocab_file=str(tiny_vocab))
    config.train_data.override(dict(input_path=str(corpus), global_batch_size=BATCH,
                                     seq_length=8, shuffle_buffer_size=1, seed=3))
    return config


def _task_model_batch(config, seed=0):
    task = simcse.SimCSETask(config)
    tf_keras.utils.set_random_seed(seed)
    model = task.build_model()
    batch = next(iter(task.build_inputs(config.train_data)))
    return task, model, batch


def _unit(x):
    x = np.asarray(x)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _reference_loss(first, second, ids, temperature=0.05):
    """SimCSE's loss written out: CE of row i over cos(h_i, h'_j) / τ, the positive at j = i,
    other rows of the same text left out."""
    logits = _unit(first) @ _unit(second).T / temperature
    same_text = (ids[:, None] == ids[None, :]) & ~np.eye(len(ids), dtype=bool)
    logits = np.where(same_text, -np.inf, logits)
    log_softmax = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(
        -1, keepdims=True)) - logits.max(-1, keepdims=True)
    return -np.diag(log_softmax).mean()


def test_the_two_views_differ_in_training_and_agree_in_evaluation(tmp_path, tiny_vocab):
    task, model, batch = _task_model_batch(_config(tiny_vocab, tmp_path))
    np.testing.assert_array_equal(batch["source"]["input_word_ids"],
                                  batch["target"]["input_word_ids"])
    trained = model(batch, training=True)
    cosines = np.sum(_unit(trained["source"]) * _unit(trained["target"]), axis=-1)
    assert np.all(cosines < 0.9999), cosines  # each view drew its own dropout mask
    assert np.all(cosines > 0.5), cosines  # ...of the same sentence
    evaluated = model(batch, training=False)
    np.testing.assert_allclose(evaluated["source"], evaluated["target"], atol=1e-6)


def test_the_loss_is_simcse_over_the_batch(tmp_path, tiny_vocab):
    """Temperature 0.05, one direction, in-batch negatives; a repeated sentence of the batch
    is no negative of its twin."""
    task, model, batch = _task_model_batch(_config(tiny_vocab, tmp_path))
    ids = batch["source_id"].numpy()
    assert len(set(ids.tolist())) < BATCH  # the batch holds a duplicate
    outputs = model(batch, training=True)
    losses = task.compute_losses(batch, outputs)
    expected = _reference_loss(outputs["source"].numpy(), outputs["target"].numpy(), ids)
    np.testing.assert_allclose(float(losses["loss"]), expected, rtol=1e-5)
    assert "target_to_source_loss" not in losses
    assert [m.name for m in task.build_metrics()] == [
        "source_to_target_accuracy", "positive_cosine", "ranking_loss"]


def test_a_few_steps_lower_the_loss(tmp_path, tiny_vocab):
    """Ten updates on one batch lower its loss (in evaluation mode, so no dropout noise)."""
    task, model, batch = _task_model_batch(_config(tiny_vocab, tmp_path))

    def eval_loss():
        return float(task.compute_losses(batch, model(batch, training=False))["loss"])

    before = eval_loss()
    optimizer = tf_keras.optimizers.Adam(learning_rate=3e-3)
    metrics = task.build_metrics(training=True)
    step = tf.function(task.train_step)
    for _ in range(10):
        loss = float(step(batch, model, optimizer, metrics=metrics)["loss"])
        assert np.isfinite(loss)
    assert eval_loss() < before - 0.05, (before, eval_loss())
    assert 0.0 < float(metrics[1].result()) < 1.0  # the positive cosine of the two views


def test_cached_ranking_gives_the_same_update(tmp_path, tiny_vocab):
    """`task.margin_softmax.mini_batch_size=2`: the views embedded in chunks of 2 sentences
    with cached gradients; the loss and the SGD update (learning rate 1) equal the plain
    step's. Dropout off, so both steps see the same model."""
    config = _config(tiny_vocab, tmp_path, dropout_rate=0.0)
    results = {}
    for size in (0, 2):
        config.margin_softmax.mini_batch_size = size
        task, model, batch = _task_model_batch(config)
        model(batch, training=False)
        before = [v.numpy() for v in model.trainable_variables]
        optimizer = tf_keras.optimizers.SGD(learning_rate=1.0)
        loss = float(tf.function(task.train_step)(batch, model, optimizer)["loss"])
        results[size] = loss, [b - v.numpy() for b, v in zip(before, model.trainable_variables)]
    (plain_loss, plain_update), (loss, update) = results[0], results[2]
    np.testing.assert_allclose(loss, plain_loss, rtol=1e-5)
    scale = max(float(np.abs(u).max()) for u in plain_update)
    assert scale > 1e-4  # the step moved the weights
    for cached, plain in zip(update, plain_update):
        np.testing.assert_allclose(cached, plain, atol=1e-5 * scale + 1e-7)


def test_the_experiment_is_the_papers_loss():
    params = exp_factory.get_exp_config("cmlm_tf/simcse")
    loss = params.task.margin_softmax
    assert (loss.margin, loss.scale, loss.bidirectional) == (0.0, 20.0, False)
    assert (params.task.train_data.global_batch_size, params.task.train_data.seq_length) == (
        64, 32)
