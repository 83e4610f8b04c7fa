"""Cached-gradient translation ranking: the same update as the uncached step."""

import numpy as np
import tensorflow as tf
import tf_keras

from cmlm_tf.losses import margin_softmax
from cmlm_tf.tasks import bitext
from cmlm_tf.training import gradient_cache, seeded_dropout
from tests.conftest import REPO_DIR

# The batch of the comparison: pairs, tokens a text, hard negatives a pair, rows a chunk.
BATCH, SEQ, NEGATIVES, CHUNK = 8, 8, 1, 2
# The weight penalty every model carries (`model.losses`).
PENALTY = 0.5


def _add_penalty(model):
    weights = model.encoder.trainable_variables[0]
    model.add_loss(lambda: PENALTY * tf.reduce_mean(tf.square(weights)))


def _make_task(mini_batch_size, dropout):
    config = bitext.BitextTaskConfig()
    config.model.override({
        "encoder": {"vocab_size": 3627, "hidden_size": 32, "num_layers": 2,
                    "num_attention_heads": 2, "intermediate_size": 64,
                    "max_position_embeddings": 16, "dropout_rate": dropout,
                    "attention_dropout_rate": dropout},
        "tokenizer": {"vocab_file": str(REPO_DIR / "cmlm_tf/data/corpus/vocab.txt")}})
    config.margin_softmax.override({"margin": 0.3, "scale": 20.0,
                                    "mini_batch_size": mini_batch_size})
    return bitext.BitextTask(config)


def _random_batch():
    """`BATCH` random pairs with one hard negative each, as NumPy arrays; one target id
    repeated (a duplicate, masked out of the negatives)."""
    rng = np.random.default_rng(0)

    def tokens(rows):
        ids = rng.integers(5, 3627, size=(rows, SEQ)).astype(np.int32)
        mask = np.ones((rows, SEQ), np.int32)
        mask[:, SEQ // 2 + rng.integers(0, SEQ // 2):] = 0
        return {"input_word_ids": ids * mask, "input_mask": mask,
                "input_type_ids": np.zeros((rows, SEQ), np.int32)}
    inputs = {"source": tokens(BATCH), "target": tokens(BATCH),
              "hard_negatives": tokens(BATCH * NEGATIVES),
              "source_id": np.arange(BATCH, dtype=np.int64),
              "target_id": np.arange(BATCH, dtype=np.int64)}
    inputs["target_id"][5] = inputs["target_id"][2]
    return inputs


def _replica_share(inputs, r, replicas):
    """Replica `r`'s rows of `inputs` among `replicas`."""
    size = BATCH // replicas

    def rows(value, per_pair):
        return value[r * size * per_pair:(r + 1) * size * per_pair]
    return {"source": {k: rows(v, 1) for k, v in inputs["source"].items()},
            "target": {k: rows(v, 1) for k, v in inputs["target"].items()},
            "hard_negatives": {k: rows(v, NEGATIVES)
                               for k, v in inputs["hard_negatives"].items()},
            "source_id": rows(inputs["source_id"], 1),
            "target_id": rows(inputs["target_id"], 1)}


def _sgd_update(task, model, strategy, inputs, *, replicas, jit_compile):
    """One train step on `inputs` over `replicas`: its loss and the weights' moves."""
    # SGD with learning rate 1: the weights move by minus the (summed) gradient.
    with strategy.scope():
        optimizer = tf_keras.optimizers.SGD(learning_rate=1.0)
    before = [v.numpy() for v in model.trainable_variables]
    step = tf.function(lambda x: task.train_step(x, model, optimizer),
                       jit_compile=jit_compile)
    if replicas == 1:
        loss = float(step(tf.nest.map_structure(tf.constant, inputs))["loss"])
    else:
        data = strategy.experimental_distribute_values_from_function(
            lambda context: tf.nest.map_structure(
                tf.constant, _replica_share(inputs, context.replica_id_in_sync_group,
                                            replicas)))
        per_replica = strategy.run(step, args=(data,))
        loss = float(strategy.reduce("MEAN", per_replica["loss"], axis=None))
    return loss, [b - v.numpy() for b, v in zip(before, model.trainable_variables)]


def _one_tape(task, model, replay, batch):
    """The loss and gradients of one tape over every chunk of `batch`, each chunk embedded
    with the seeds the cached step uses for it (step 0, chunk index over the batch)."""
    with tf.GradientTape() as tape:
        parts = []
        for c in range(BATCH // CHUNK):
            with replay.seeded(tf.constant([0, c], tf.int64)):
                parts.append(model(
                    gradient_cache.chunk(batch, tf.constant(c), BATCH // CHUNK),
                    training=True))
        outputs = {k: tf.concat([p[k] for p in parts], 0) for k in parts[0]}
        loss = task.compute_losses(batch, outputs)["loss"] + tf.add_n(model.losses)
    return loss, [tf.convert_to_tensor(g)
                  for g in tape.gradient(loss, model.trainable_variables)]


def _references(dropout, inputs):
    """The initial weights, and {jit_compile: (loss, gradients)} of `_one_tape` on them."""
    task = _make_task(0, dropout)
    model = task.build_model()
    model(tf.nest.map_structure(tf.constant, inputs))
    _add_penalty(model)
    initial = model.get_weights()
    replay = seeded_dropout.make_replayable(model)
    batch = tf.nest.map_structure(tf.constant, inputs)
    # Compiled steps are compared with the compiled reference: XLA draws other dropout
    # masks from the same seeds than plain TensorFlow does.
    references = {}
    for jit_compile in (False, True) if dropout else (False,):
        loss, grads = tf.function(lambda b: _one_tape(task, model, replay, b),
                                  jit_compile=jit_compile)(batch)
        references[jit_compile] = float(loss), [g.numpy() for g in grads]
    return initial, references


def _measure(dropout, two_replicas):
    """The cached and uncached runs against one tape over the whole batch, at dropout
    rate `dropout`. Every model carries a weight penalty (`model.losses`), which each step
    adds to its loss."""
    inputs = _random_batch()
    initial, references = _references(dropout, inputs)
    results = {"reference_loss": references[False][0], "runs": {}}
    # XLA (the TPU path) on one device only: collectives inside `jit_compile` fail on CPU.
    # Two replicas and XLA with dropout on, where they are hardest to get equal; without
    # dropout, the one-chunk step (the ordinary one) against the same reference.
    runs = [("cached_1", CHUNK, 1, False)]
    if dropout:
        runs += [("cached_2", CHUNK, 2, False), ("cached_1_xla", CHUNK, 1, True)]
    else:
        runs.append(("uncached_1", 0, 1, False))
    for name, mini_batch_size, replicas, jit_compile in runs:
        strategy = two_replicas if replicas == 2 else tf.distribute.get_strategy()
        task = _make_task(mini_batch_size, dropout)
        with strategy.scope():
            model = task.build_model()
            model(tf.nest.map_structure(tf.constant, _replica_share(inputs, 0, replicas)))
            model.set_weights(initial)
            _add_penalty(model)
        loss, update = _sgd_update(task, model, strategy, inputs, replicas=replicas,
                                   jit_compile=jit_compile)
        expected, reference = references[jit_compile]
        diffs = [float(np.max(np.abs(u - g))) for u, g in zip(update, reference)]
        scale = max(float(np.max(np.abs(g))) for g in reference)
        results["runs"][name] = {"loss": loss, "expected": expected, "max_diff": max(diffs),
                                 "grad_scale": scale}
    return results


def test_cached_step_equals_the_uncached_one(two_replicas):
    """With dropout on (the same masks in both passes), the cached step's loss and weight
    update equal one tape over the whole batch on one device, on two replicas and
    XLA-compiled on one device (against a compiled reference), weight penalty
    (`model.losses`) included; without dropout, the cached step and the one-chunk step (the
    ordinary one) equal it too."""
    by_dropout = {dropout: _measure(dropout, two_replicas) for dropout in (0.0, 0.2)}
    for dropout, values in by_dropout.items():
        for name, run in values["runs"].items():
            expected = run["expected"]
            assert abs(run["loss"] - expected) <= 1e-5 * abs(expected), (dropout, name, run)
            assert run["max_diff"] <= 1e-5 * run["grad_scale"] + 1e-7, (dropout, name, run)
            assert run["grad_scale"] > 1e-4  # the step moved the weights
    assert sorted(by_dropout[0.2]["runs"]) == ["cached_1", "cached_1_xla", "cached_2"]
    assert sorted(by_dropout[0.0]["runs"]) == ["cached_1", "uncached_1"]


def test_mini_batch_size_is_a_config_field():
    config = margin_softmax.MarginSoftmaxConfig(mini_batch_size=64)
    assert config.as_dict()["mini_batch_size"] == 64
    assert margin_softmax.MarginSoftmaxConfig().mini_batch_size == 0
