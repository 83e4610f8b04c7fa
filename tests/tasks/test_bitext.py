"""Bitext retrieval: the margin loss, cross-replica negatives, skip counts, recipes, dev
retrieval. (The CMLM + bitext multitask: tests/tasks/test_cmlm_bitext.py; the staged recipe
through the driver: tests/driver/test_train_bitext.py.)"""


import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from cmlm_tf import configs
from cmlm_tf.data import bitext
from cmlm_tf.driver import runner, train_lib
from cmlm_tf.losses import margin_softmax
from cmlm_tf.tasks import bitext as bitext_task
from tests.conftest import (
    REPO_DIR,
    write_byte_lines,
    write_tiny_bitext,
)


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _reference_loss(x, y, margin, scale, *, negatives=None, excluded=None):
    """The formula, written out in NumPy: CE over rows plus CE over columns, batch means."""
    x, y = _unit(x), _unit(y)
    n = len(x)
    cos = x @ y.T
    rows = scale * (cos - margin * np.eye(n))
    cols = scale * (cos.T - margin * np.eye(n))
    if excluded is not None:
        rows = np.where(excluded, -1e9, rows)
        cols = np.where(excluded, -1e9, cols)
    if negatives is not None:
        rows = np.concatenate([rows, scale * (x @ _unit(negatives).T)], axis=1)
    forward = -_log_softmax(rows)[np.arange(n), np.arange(n)].mean()
    backward = -_log_softmax(cols)[np.arange(n), np.arange(n)].mean()
    return forward + backward


def test_loss_follows_the_formula_and_the_margin():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 8)).astype(np.float32)
    y = (x + 0.8 * rng.normal(size=(6, 8))).astype(np.float32)
    for margin in (0.0, 0.3):
        got = margin_softmax.additive_margin_softmax_loss(x, y, margin=margin,
                                                          scale=20.0)["loss"]
        np.testing.assert_allclose(float(got), _reference_loss(x, y, margin, 20.0), rtol=1e-5)
    # The margin only lowers the positive logit: the loss grows with it, by exactly the
    # amount the formula gives (checked above); margin 0 is the plain in-batch softmax.
    plain = margin_softmax.additive_margin_softmax_loss(x, y, margin=0.0, scale=20.0)
    margined = margin_softmax.additive_margin_softmax_loss(x, y, margin=0.3, scale=20.0)
    assert float(margined["loss"]) > float(plain["loss"])
    logits = 20.0 * (_unit(x) @ _unit(y).T)
    plain_forward = -_log_softmax(logits)[np.arange(6), np.arange(6)].mean()
    np.testing.assert_allclose(float(plain["source_to_target_loss"]), plain_forward, rtol=1e-5)
    negatives = rng.normal(size=(12, 8)).astype(np.float32)
    with_negatives = margin_softmax.additive_margin_softmax_loss(
        x, y, margin=0.3, scale=20.0, hard_negatives=negatives)["loss"]
    np.testing.assert_allclose(float(with_negatives),
                               _reference_loss(x, y, 0.3, 20.0, negatives=negatives), rtol=1e-5)
    layer = margin_softmax.AdditiveMarginSoftmax(margin=0.1, scale=5.0)
    clone = margin_softmax.AdditiveMarginSoftmax.from_config(layer.get_config())
    assert (clone.margin, clone.scale, clone.bidirectional) == (0.1, 5.0, True)


def test_accuracy_ranks_without_the_margin():
    """Each positive beats its best negative by a cosine gap of about 0.1, less than the
    margin 0.3: every pair is retrieved (accuracy 1 both ways), though the margined logits
    would rank a negative first; the loss still carries the margin."""
    angles = np.array([0.0, 0.45, 0.9, 1.35])  # neighbours 0.45 rad apart: cosine 0.90
    x = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    y = np.stack([np.cos(angles + 0.1), np.sin(angles + 0.1)], axis=1).astype(np.float32)
    cos = _unit(x) @ _unit(y).T
    gaps = np.diag(cos) - np.max(np.where(np.eye(4, dtype=bool), -2.0, cos), axis=1)
    assert np.all((gaps > 0) & (gaps < 0.3))  # margin > gap
    got = margin_softmax.additive_margin_softmax_loss(x, y, margin=0.3, scale=20.0)
    for direction in ("source_to_target_correct", "target_to_source_correct"):
        assert got[direction].numpy().tolist() == [1.0, 1.0, 1.0, 1.0], direction
    np.testing.assert_allclose(float(got["loss"]), _reference_loss(x, y, 0.3, 20.0),
                               rtol=1e-5)
    assert float(got["loss"]) > float(margin_softmax.additive_margin_softmax_loss(
        x, y, margin=0.0, scale=20.0)["loss"])


def test_duplicate_texts_are_not_negatives():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 8)).astype(np.float32)
    y = rng.normal(size=(5, 8)).astype(np.float32)
    source_ids = np.array([10, 11, 10, 12, 13])  # rows 0 and 2: the same source sentence
    target_ids = np.array([20, 21, 22, 23, 21])  # rows 1 and 4: the same target sentence
    excluded = (source_ids[:, None] == source_ids[None]) | (target_ids[:, None] ==
                                                            target_ids[None])
    excluded &= ~np.eye(5, dtype=bool)
    got = margin_softmax.additive_margin_softmax_loss(
        x, y, scale=10.0, source_ids=tf.constant(source_ids, tf.int64),
        target_ids=tf.constant(target_ids, tf.int64))["loss"]
    np.testing.assert_allclose(float(got), _reference_loss(x, y, 0.3, 10.0, excluded=excluded),
                               rtol=1e-5)
    unmasked = margin_softmax.additive_margin_softmax_loss(x, y, scale=10.0)["loss"]
    assert abs(float(unmasked) - float(got)) > 1e-3


@pytest.mark.parametrize("hard_negatives", [0, 2])
def test_two_replicas_equal_one_device_on_the_global_batch(two_replicas, hard_negatives):
    vocab_size, batch, seq = 40, 8, 6
    rng = np.random.default_rng(0)

    def side(rows):
        ids = rng.integers(5, vocab_size, size=(rows, seq)).astype(np.int32)
        mask = (np.arange(seq)[None] < rng.integers(2, seq + 1, size=(rows, 1))).astype(np.int32)
        return {"input_word_ids": ids * mask, "input_mask": mask,
                "input_type_ids": np.zeros_like(ids)}

    features = {"source": side(batch), "target": side(batch),
                "source_id": np.array([0, 1, 2, 3, 0, 5, 6, 7], np.int64),  # 0 and 4 repeat
                "target_id": np.arange(batch, dtype=np.int64) + 100}
    if hard_negatives:
        features["hard_negatives"] = side(batch * hard_negatives)
    config = bitext_task.BitextTaskConfig()
    config.model.encoder = configs.EncoderConfig(
        vocab_size=vocab_size, hidden_size=16, num_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16, dropout_rate=0.0,
        attention_dropout_rate=0.0)
    task = bitext_task.BitextTask(config)

    def loss_and_grads(model, inputs, replicas):
        with tf.GradientTape() as tape:
            loss = task.compute_losses(inputs, model(inputs, training=True))["loss"]
            scaled = loss / replicas
        grads = tape.gradient(scaled, model.trainable_variables)
        return scaled, [tf.convert_to_tensor(g) for g in grads]

    tf_keras.utils.set_random_seed(3)
    single = task.build_model()
    weights = [w.numpy() for w in single.weights]
    loss_1, grads_1 = loss_and_grads(single, tf.nest.map_structure(tf.constant, features), 1)

    with two_replicas.scope():
        model = task.build_model()
    for w, value in zip(model.weights, weights):
        w.assign(value)

    def per_replica(context):
        def take(array):
            rows = len(array) // 2
            start = context.replica_id_in_sync_group * rows
            return tf.constant(array[start:start + rows])
        return tf.nest.map_structure(take, features)

    inputs = two_replicas.experimental_distribute_values_from_function(per_replica)
    scaled, grads = two_replicas.run(
        tf.function(lambda x: loss_and_grads(model, x, 2)), args=(inputs,))
    loss_2 = float(two_replicas.reduce("SUM", scaled, axis=None))
    grads_2 = [two_replicas.reduce("SUM", g, axis=None) for g in grads]
    loss_1 = float(loss_1)
    grad_max = max(float(np.abs(g).max()) for g in grads_1)
    grad_diff = max(float(np.abs(a - b).max()) for a, b in zip(grads_1, grads_2))
    assert abs(loss_1 - loss_2) <= 1e-5 * max(1.0, loss_1)
    assert grad_max > 1e-3  # the comparison is not between two zeros
    assert grad_diff <= 1e-5 * max(1.0, grad_max), (grad_diff, grad_max)


def test_malformed_counts_reach_tensorboard(tmp_path):
    path = write_byte_lines(tmp_path / "pairs.tsv", [b"no tab", b"the dog\tel perro", b"\tempty"])
    reports = []
    pairs = list(bitext.read_bitext([str(path)], "tsv", is_training=False,
                                    field="task.train_data.input_path", reports=reports))
    assert len(pairs) == 1
    runner.report_malformed_records(str(tmp_path / "run"), step=7, reports=reports)
    assert not reports  # read once
    (events,) = tf.io.gfile.glob(str(tmp_path / "run" / "train" / "events.out.tfevents.*"))
    scalars = {(value.tag, event.step): float(tf.make_ndarray(value.tensor))
               for event in tf.compat.v1.train.summary_iterator(events)
               for value in event.summary.value}
    assert scalars == {("input/malformed_records/task.train_data.input_path", 7): 2.0}


def test_recipes_load():
    pairs = {
        "cmlm_tf/bitext": [["configs/bitext_tiny.yaml"],
                           ["configs/bitext_tiny.yaml", "configs/cmlm_then_br_tiny.yaml"],
                           ["configs/labse_base.yaml"], ["configs/labse_base_mean.yaml"],
                           ["configs/bitext_minilm.yaml"]],
        "cmlm_tf/cmlm_bitext": [["configs/cmlm_tiny.yaml", "configs/cmlm_br_joint_tiny.yaml"],
                                ["configs/cmlm_tiny.yaml",
                                 "configs/cmlm_then_cmlm_br_tiny.yaml"],
                                ["configs/cmlm_base.yaml", "configs/cmlm_br_joint_base.yaml"],
                                ["configs/cmlm_base.yaml",
                                 "configs/cmlm_then_cmlm_br_base.yaml"]],
    }
    for experiment, recipes in pairs.items():
        for files in recipes:
            params = train_lib.build_params(experiment, [str(REPO_DIR / f) for f in files])
            assert params.task.model.encoder.hidden_size > 0, files
    labse = train_lib.build_params("cmlm_tf/bitext", [str(REPO_DIR / "configs/labse_base.yaml")])
    assert labse.task.model.encoder.pooling == "cls"
    assert (labse.task.margin_softmax.margin, labse.task.margin_softmax.scale) == (0.3, 100.0)
    assert labse.task.train_data.global_batch_size == 4096


def test_bitext_evaluation_reports_dev_retrieval(tmp_path, tiny_vocab):
    pairs = write_tiny_bitext(tmp_path / "bitext.tsv", 16)
    config = bitext_task.BitextTaskConfig()
    config.model = configs.SentenceModelConfig(
        encoder=configs.EncoderConfig(vocab_size=len(tiny_vocab.read_text().splitlines()),
                                      hidden_size=16, num_layers=1, num_attention_heads=2,
                                      intermediate_size=32, max_position_embeddings=16),
        tokenizer=configs.TokenizerConfig(vocab_file=str(tiny_vocab)))
    config.validation_data.override(dict(input_path=str(pairs), global_batch_size=8,
                                         seq_length=8))
    config.train_data.seq_length = 8
    config.dev_retrieval_files = [str(pairs)]
    task = bitext_task.BitextTask(config)
    model = task.build_model()
    metrics = task.build_metrics(training=False)
    state = None
    for batch in task.build_inputs(config.validation_data):
        state = task.aggregate_logs(state, task.validation_step(batch, model, metrics))
    logs = task.reduce_aggregated_logs(state)
    assert 0.0 <= logs["dev_retrieval_bitext_src2tgt_accuracy"] <= 1.0
    assert "dev_retrieval_bitext_tgt2src_accuracy" in logs
    assert 0.0 <= float(metrics[0].result()) <= 1.0
