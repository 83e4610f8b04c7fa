"""Bitext retrieval: the margin loss, cross-replica negatives, the reader, multitask, stages."""

import logging
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from conftest import (
    REPO_DIR,
    TINY_CMLM_OVERRIDES,
    TINY_WORDS,
    subprocess_env,
    tiny_cmlm_config,
    write_corpus,
)

from cmlm_tf import configs
from cmlm_tf.data import bitext, records
from cmlm_tf.losses import margin_softmax
from cmlm_tf.tasks import bitext as bitext_task
from cmlm_tf.tasks import cmlm_bitext


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _reference_loss(x, y, margin, scale, negatives=None, excluded=None):
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
                               _reference_loss(x, y, 0.3, 20.0, negatives), rtol=1e-5)
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


def _write_tsv(path, lines):
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_tsv_reader_counts_and_skips_malformed_lines(tmp_path, caplog):
    path = _write_tsv(tmp_path / "pairs.tsv", [
        b"the dog\tel perro",
        b"only one field",
        b"\tempty source",
        b"a cat \t un gato\tneg one\tneg two",
        b"bad \xff utf8\tmalo",
        b"",
        b"red car\r" + b"\tcoche rojo\r",
    ])
    assert bitext.infer_file_type([str(path)]) == "tsv"
    stats = bitext.scan_bitext([str(path)], "tsv")
    # Line 4 has more columns than configured: a tab inside a text would shift the fields.
    assert (stats.records, stats.pairs, stats.malformed, stats.complete) == (7, 2, 5, True)
    reports = []
    pairs = list(bitext.read_bitext([str(path)], "tsv", is_training=False,
                                    field="task.train_data.input_path",
                                    reports=reports).as_numpy_iterator())
    assert [(p["source"].decode(), p["target"].decode()) for p in pairs] == [
        ("the dog", "el perro"), ("red car", "coche rojo")]
    # The pipeline itself counts and explains what it skipped, with file and line.
    (report,) = reports
    assert report.count == 5 and report.field == "task.train_data.input_path"
    assert [e.split(": ", 1)[0].rsplit(" ", 1)[1] for e in report.examples] == [
        "2", "3", "4", "5", "6"]
    assert "pairs.tsv line 4: 4 fields, expected exactly 2 (more columns" in report.examples[2]
    assert "pairs.tsv line 5: field 1 is not valid UTF-8" in report.examples[3]
    with caplog.at_level(logging.WARNING):
        assert records.log_totals(reports) == [
            ("bitext record", "task.train_data.input_path", 5)]
    assert "5 malformed bitext records skipped in all" in caplog.text and not reports
    with_negatives = list(bitext.read_bitext([str(path)], "tsv", num_hard_negatives=2,
                                             is_training=False,
                                             reports=reports).as_numpy_iterator())
    assert len(with_negatives) == 1
    assert list(with_negatives[0]["hard_negatives"]) == [b"neg one", b"neg two"]
    assert bitext.scan_bitext([str(path)], "tsv", num_hard_negatives=2).pairs == 1
    assert reports[-1].count == 6


def test_only_a_bounded_sample_is_read_before_training(tmp_path):
    lines = [b"no tab"] * 30 + [b"the dog\tel perro"] * 5
    path = _write_tsv(tmp_path / "pairs.tsv", lines)
    stats = bitext.scan_bitext([str(path)], "tsv", limit=31)
    assert (stats.records, stats.pairs, stats.malformed, stats.complete) == (31, 1, 30, False)
    with pytest.raises(ValueError, match=r"holds no valid tsv translation pair \(the first "
                                         r"20 records read, 20 malformed; first: 1 field"):
        bitext.scan_bitext([str(path)], "tsv", limit=20)
    # The pipeline still reads the whole corpus.
    reports = []
    pairs = list(bitext.read_bitext([str(path)], "tsv", is_training=False, reports=reports))
    assert len(pairs) == 5 and reports[-1].count == 30


def test_malformed_counts_reach_tensorboard(tmp_path):
    from cmlm_tf import runner

    path = _write_tsv(tmp_path / "pairs.tsv", [b"no tab", b"the dog\tel perro", b"\tempty"])
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


def _example(**fields):
    feature = {k: tf.train.Feature(bytes_list=tf.train.BytesList(value=v))
               for k, v in fields.items()}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def test_tfrecord_reader_and_format_inference(tmp_path):
    path = tmp_path / "pairs.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(_example(src_raw=[b"the dog"], tgt_raw=[b"el perro"]))
        writer.write(_example(src_raw=[b"no target"]))
        writer.write(_example(src_raw=[b"a cat"], tgt_raw=[b"un gato"], neg_raw=[b"x", b"y"]))
        writer.write(b"not a tf.Example")
    assert bitext.infer_file_type([str(path)]) == "tfrecord"
    stats = bitext.scan_bitext([str(path)], "tfrecord")
    assert (stats.records, stats.pairs, stats.malformed) == (4, 2, 2)
    reports = []
    pairs = list(bitext.read_bitext([str(path)], "tfrecord", is_training=False,
                                    reports=reports).as_numpy_iterator())
    assert [p["target"] for p in pairs] == [b"el perro", b"un gato"]
    assert reports[0].examples == [
        f"{path} record 2: 1 field(s), expected at least 2"]
    # A record that is not a tf.Example is counted from the gap it leaves.
    gapped = tmp_path / "gapped.tfrecord"
    with tf.io.TFRecordWriter(str(gapped)) as writer:
        for record in (_example(src_raw=[b"a"], tgt_raw=[b"b"]), b"not a tf.Example", b"nor this",
                       _example(src_raw=[b"c"], tgt_raw=[b"d"])):
            writer.write(record)
    assert len(list(bitext.read_bitext([str(gapped)], "tfrecord", is_training=False,
                                       reports=reports))) == 2
    assert reports[-1].examples == [f"{gapped} record 2-3: not a tf.Example"]
    negatives = list(bitext.read_bitext([str(path)], "tfrecord", num_hard_negatives=2,
                                        is_training=False).as_numpy_iterator())
    assert [list(p["hard_negatives"]) for p in negatives] == [[b"x", b"y"]]
    with pytest.raises(ValueError, match="pairs.dat: cannot tell the bitext format"):
        bitext.infer_file_type([str(tmp_path / "pairs.dat")])
    assert bitext.infer_file_type([str(tmp_path / "pairs.dat")], "tsv") == "tsv"
    with pytest.raises(ValueError, match="file_type must be one of"):
        bitext.infer_file_type([str(path)], "csv")
    empty = _write_tsv(tmp_path / "empty.tsv", [b"no tab here"])
    with pytest.raises(ValueError, match="empty.tsv holds no valid tsv translation pair"):
        bitext.scan_bitext([str(empty)], "tsv")


def test_featurizer_packs_static_batches_with_fingerprints(tmp_path, tiny_vocab):
    path = _write_tsv(tmp_path / "p.tsv", [
        b"the dog\tthe cat\ta horse\ta snake",
        b"The dog \ta man\ta woman\ta child"])
    data = bitext.BitextDataConfig(input_path=str(path), global_batch_size=2, seq_length=8,
                                   num_hard_negatives=2, is_training=False)
    batch = next(iter(bitext.bitext_dataset(
        data, configs.TokenizerConfig(vocab_file=str(tiny_vocab)))))
    assert batch["source"]["input_word_ids"].shape == (2, 8)
    assert batch["hard_negatives"]["input_word_ids"].shape == (4, 8)
    # Lower-cased tokenizer: "the dog" and "The dog " are one sentence, hence one fingerprint.
    assert batch["source_id"][0] == batch["source_id"][1]
    assert batch["target_id"][0] != batch["target_id"][1]


def _bitext_file(tmp_path, count=64):
    lines = [f"{a} {b}\t{b} {a}".encode() for a in TINY_WORDS[:8] for b in TINY_WORDS[8:16]]
    return _write_tsv(tmp_path / "bitext.tsv", lines[:count])


def _as_multitask(cmlm_config):
    config = cmlm_bitext.CMLMBitextTaskConfig()
    config.override(cmlm_config.as_dict())
    return config


def test_alpha_weights_the_two_losses(tmp_path, tiny_vocab):
    corpus = write_corpus(tmp_path / "c.txt", [["the dog", "a cat", "a man"]] * 8)
    config = _as_multitask(tiny_cmlm_config(tiny_vocab, corpus))
    config.bitext_data.override(dict(input_path=str(_bitext_file(tmp_path)),
                                     global_batch_size=8, seq_length=8, seed=1))
    values = {}
    for alpha in (0.2, 0.5):
        config.bitext_weight = alpha
        task = cmlm_bitext.CMLMBitextTask(config)
        tf_keras.utils.set_random_seed(0)
        model = task.build_model()
        batch = next(iter(task.build_inputs(config.train_data)))
        losses = task.compute_losses(batch, model(batch, training=False))
        values[alpha] = {k: float(losses[k]) for k in ("loss", "mlm_loss", "ranking_loss")}
        np.testing.assert_allclose(values[alpha]["loss"], values[alpha]["mlm_loss"]
                                   + alpha * values[alpha]["ranking_loss"], rtol=1e-6)
    assert values[0.2]["ranking_loss"] > 0 and values[0.2]["mlm_loss"] > 0
    np.testing.assert_allclose(values[0.5]["loss"] - values[0.2]["loss"],
                               0.3 * values[0.2]["ranking_loss"], rtol=1e-5)


def test_cached_ranking_in_the_multitask_gives_the_same_update(tmp_path, tiny_vocab):
    """cmlm_tf/cmlm_bitext with `mini_batch_size`: the ranking part with cached gradients
    over chunks of 2 pairs, the CMLM part with a tape; the loss and the weight update (SGD,
    learning rate 1) equal the plain step's, and the step computes the losses once. Dropout
    off, so both steps see the same model."""
    corpus = write_corpus(tmp_path / "c.txt", [["the dog", "a cat", "a man"]] * 8)
    config = _as_multitask(tiny_cmlm_config(tiny_vocab, corpus))
    config.bitext_data.override(dict(input_path=str(_bitext_file(tmp_path)),
                                     global_batch_size=8, seq_length=8, seed=1))
    config.margin_softmax.override({"margin": 0.3, "scale": 20.0})
    batch = next(iter(cmlm_bitext.CMLMBitextTask(config).build_inputs(config.train_data)))
    results = {}
    for size in (0, 2):
        config.margin_softmax.mini_batch_size = size
        task = cmlm_bitext.CMLMBitextTask(config)
        calls = {"step": 0, "compute_losses": 0}  # while the step is traced
        compute_losses, train_step = task.compute_losses, task.train_step

        def counted(name, function, calls=calls):
            def call(*args, **kwargs):
                calls[name] += 1
                return function(*args, **kwargs)
            return call

        task.compute_losses = counted("compute_losses", compute_losses)
        tf_keras.utils.set_random_seed(0)
        model = task.build_model()
        model(batch, training=False)
        before = [v.numpy() for v in model.trainable_variables]
        optimizer = tf_keras.optimizers.SGD(learning_rate=1.0)
        metrics = task.build_metrics(training=True)
        step = tf.function(counted("step", train_step))
        loss = float(step(batch, model, optimizer, metrics)["loss"])
        update = [b - v.numpy() for b, v in zip(before, model.trainable_variables)]
        assert calls["compute_losses"] == calls["step"] >= 1, (size, calls)
        results[size] = loss, update, {m.name: float(m.result()) for m in metrics}
    (plain_loss, plain_update, plain_metrics), (loss, update, metrics) = results[0], results[2]
    assert abs(loss - plain_loss) <= 1e-5 * abs(plain_loss)
    scale = max(float(np.abs(u).max()) for u in plain_update)
    assert scale > 1e-4  # the step moved the weights
    for cached, plain in zip(update, plain_update):
        np.testing.assert_allclose(cached, plain, atol=1e-5 * scale + 1e-7)
    for name, value in plain_metrics.items():
        np.testing.assert_allclose(metrics[name], value, rtol=1e-5, err_msg=name)


def test_stage_two_restores_stage_one(tmp_path, tiny_vocab):
    """CMLM → CMLM+BR restores encoder, projection and head; CMLM → BR the encoder."""
    corpus = write_corpus(tmp_path / "c.txt", [["the dog", "a cat"]] * 4)
    stage_1 = tiny_cmlm_config(tiny_vocab, corpus)
    from cmlm_tf.tasks import cmlm

    tf_keras.utils.set_random_seed(7)
    donor = cmlm.CMLMTask(stage_1).build_model()
    for variable in donor.trainable_variables:  # make them differ from any fresh init
        variable.assign_add(tf.fill(variable.shape, 0.01))
    prefix = tf.train.Checkpoint(**donor.checkpoint_items).save(str(tmp_path / "run" / "ckpt"))

    stage_2 = _as_multitask(stage_1)
    stage_2.init_checkpoint = str(tmp_path / "run")
    task = cmlm_bitext.CMLMBitextTask(stage_2)
    model = task.build_model()
    task.initialize(model)
    for name in ("encoder", "projection", "mlm_head"):
        for a, b in zip(donor.checkpoint_items[name].weights,
                        model.checkpoint_items[name].weights):
            np.testing.assert_array_equal(a.numpy(), b.numpy())

    br = bitext_task.BitextTaskConfig()
    br.model = configs.SentenceModelConfig(encoder=stage_1.model.encoder,
                                           tokenizer=stage_1.model.tokenizer)
    br.init_checkpoint = prefix
    br_task = bitext_task.BitextTask(br)
    dual = br_task.build_model()
    br_task.initialize(dual)
    for a, b in zip(donor.encoder.weights, dual.encoder.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_recipes_load():
    from cmlm_tf import train

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
            params = train.build_params(experiment, [str(REPO_DIR / f) for f in files])
            assert params.task.model.encoder.hidden_size > 0, files
    labse = train.build_params("cmlm_tf/bitext", [str(REPO_DIR / "configs/labse_base.yaml")])
    assert labse.task.model.encoder.pooling == "cls"
    assert (labse.task.margin_softmax.margin, labse.task.margin_softmax.scale) == (0.3, 100.0)
    assert labse.task.train_data.global_batch_size == 4096


def test_staged_recipe_through_the_driver(tmp_path):
    """cmlm_tiny for 10 steps, then the CMLM → CMLM+BR recipe for 10 more, then export."""
    run_1, run_2 = tmp_path / "stage1", tmp_path / "stage2"
    base = [sys.executable, "-m", "cmlm_tf.train", "--mode=train",
            "--config_file=configs/cmlm_tiny.yaml"]
    first = subprocess.run(
        base + ["--experiment=cmlm_tf/cmlm", f"--model_dir={run_1}",
                f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps=10"],
        cwd=REPO_DIR, capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    second = subprocess.run(
        base + ["--experiment=cmlm_tf/cmlm_bitext",
                "--config_file=configs/cmlm_then_cmlm_br_tiny.yaml", f"--model_dir={run_2}",
                f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps=10,"
                f"task.init_checkpoint={run_1},task.bitext_data.global_batch_size=8"],
        cwd=REPO_DIR, capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "Warm-started from" in second.stderr and "projection, mlm_head" in second.stderr
    assert "ranking_loss" in second.stderr
    assert tf.train.latest_checkpoint(str(run_2)).endswith("ckpt-10")


def test_bitext_evaluation_reports_dev_retrieval(tmp_path, tiny_vocab):
    pairs = _bitext_file(tmp_path, count=16)
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
