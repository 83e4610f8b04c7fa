"""MoCo task: gradients, masked negatives, checkpoints, warm start, config, replicas. (The
driver: tests/driver/test_train_moco.py.)"""


import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from cmlm_tf.driver import train_lib
from cmlm_tf.modeling import sentence_encoder
from cmlm_tf.tasks import moco
from tests.conftest import (
    REPO_DIR,
    moco_batch,
    tiny_moco_task,
)


def _state(model):
    return [v.numpy() for v in model.source_queue.weights + model.target_queue.weights
            + model.key_encoder.weights]


def test_no_gradient_reaches_key_encoders_or_queues():
    task = tiny_moco_task(queue_size=12)
    model = task.build_model()
    model(moco_batch(4, seed=1, first_id=100), training=True)  # something in the queues
    frozen = (model.key_encoder.weights + model.source_queue.weights
              + model.target_queue.weights)
    trainable = {id(v) for v in model.trainable_variables}
    assert not any(id(v) in trainable for v in frozen)
    batch = moco_batch(4, seed=2)
    with tf.GradientTape() as tape:
        tape.watch([v for v in frozen if v.dtype.is_floating])  # even when watched
        losses = task.compute_losses(batch, model(batch, training=True))
    assert float(losses["loss"]) > 0
    grads = tape.gradient(losses["loss"], frozen + model.trainable_variables)
    assert all(g is None for g in grads[:len(frozen)])
    query_grads = [g for g in grads[len(frozen):] if g is not None]
    assert max(float(tf.reduce_max(tf.abs(tf.convert_to_tensor(g)))) for g in query_grads) > 0


def test_first_step_sees_no_negatives_and_this_steps_keys_are_not_its_own():
    task = tiny_moco_task(queue_size=8)
    model = task.build_model()
    first = task.compute_losses(moco_batch(4, 1), model(moco_batch(4, 1), training=True))
    assert float(first["loss"]) == 0.0  # empty queue: every slot masked
    second_batch = moco_batch(4, 2, first_id=50)
    outputs = model(second_batch, training=True)
    mask = outputs["negative_mask"].numpy()
    np.testing.assert_array_equal(mask, np.tile([True] * 4 + [False] * 4, (4, 1)))
    # Same texts as a queued pair: left out of that row's negatives.
    repeat = dict(moco_batch(4, 3), source_id=tf.constant([0, 60, 61, 62], tf.int64))
    mask = model(repeat, training=False)["negative_mask"].numpy()
    assert not mask[0, 0] and mask[1, 0] and mask[0, 1]


def test_queue_pointer_and_key_encoder_survive_a_checkpoint(tmp_path):
    task = tiny_moco_task(queue_size=10, momentum=0.5)
    tf_keras.utils.set_random_seed(1)
    model = task.build_model()
    optimizer = tf_keras.optimizers.SGD(0.5)
    for step in range(3):
        task.train_step(moco_batch(4, step, first_id=10 * step), model, optimizer)
    assert int(model.source_queue.queue_ptr.numpy()) == 2
    prefix = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))

    tf_keras.utils.set_random_seed(2)
    restored = task.build_model()
    tf.train.Checkpoint(model=restored).restore(prefix).assert_existing_objects_matched()
    for saved, loaded in zip(_state(model), _state(restored)):
        np.testing.assert_array_equal(saved, loaded)
    for a, b in zip(model.encoder.weights, restored.encoder.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_initialize_copies_keys_after_the_warm_start(tmp_path):
    task = tiny_moco_task(shared_encoder=False)
    tf_keras.utils.set_random_seed(3)
    donor = sentence_encoder.build_sentence_encoder(task.task_config.model.encoder)
    for variable in donor.trainable_variables:
        variable.assign_add(tf.fill(variable.shape, 0.01))
    task.task_config.init_checkpoint = sentence_encoder.write_encoder_checkpoint(
        donor, str(tmp_path))
    model = task.build_model()
    assert set(model.checkpoint_items) == {"encoder", "target_encoder"}
    task.initialize(model)
    for encoder in (model.encoder, model.target_encoder, model.key_encoder,
                    model.target_key_encoder):
        for a, b in zip(donor.weights, encoder.weights):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_config_errors_name_the_field_and_recipes_load():
    with pytest.raises(ValueError, match=r"task.moco.queue_size \(3\) must be at least "
                                         r"task.train_data.global_batch_size \(4\)"):
        tiny_moco_task(queue_size=3).build_model()
    with pytest.raises(ValueError, match="task.moco.momentum must be in"):
        tiny_moco_task(momentum=1.5).build_model()
    recipes = [["configs/moco_tiny.yaml"], ["configs/moco_bert_base.yaml"],
               ["configs/moco_bert_base.yaml", "configs/moco_no_momentum.yaml"],
               ["runs/all-MiniLM-L6-v2/warm_start.yaml", "configs/moco_minilm.yaml"]]
    for files in recipes:
        if not (REPO_DIR / files[0]).exists():
            continue  # converted weights exist only where the real-data recipe was prepared
        params = train_lib.build_params("cmlm_tf/moco", [str(REPO_DIR / f) for f in files])
        assert params.task.moco.queue_size >= params.task.train_data.global_batch_size
    paper = train_lib.build_params("cmlm_tf/moco", [str(REPO_DIR / "configs/moco_bert_base.yaml")])
    assert (paper.task.moco.queue_size, paper.task.moco.temperature,
            paper.task.moco.momentum) == (409600, 0.04, 0.999)
    assert paper.trainer.optimizer_config.learning_rate.type == "cosine"
    ablation = train_lib.build_params("cmlm_tf/moco", [
        str(REPO_DIR / "configs/moco_bert_base.yaml"),
        str(REPO_DIR / "configs/moco_no_momentum.yaml")])
    assert ablation.task.moco.momentum == 0.0


@pytest.mark.parametrize("change, message", [
    ({"moco.queue_size": 0}, r"task.moco.queue_size must be positive"),
    ({"moco.temperature": 0.0}, r"task.moco.temperature must be positive"),
    ({"moco.target_init_checkpoint": "/ckpt", "moco.shared_encoder": True},
     r"task.moco.target_init_checkpoint needs task.moco.shared_encoder: false"),
    ({"train_data.num_hard_negatives": 1}, r"task.train_data.num_hard_negatives must be 0"),
    ({"nli_data.input_path": "nli.tsv", "nli_weight": 0.0},
     r"task.nli_weight must be positive when task.nli_data.input_path is set"),
])
def test_every_config_check_names_its_field(change, message):
    config = moco.MomentumContrastTaskConfig()
    config.train_data.global_batch_size = 4
    config.moco.queue_size = 8
    moco.validate_moco_config(config)  # the starting point is valid
    for key, value in change.items():
        parent, _, name = key.rpartition(".")
        setattr(getattr(config, parent) if parent else config, name, value)
    with pytest.raises(ValueError, match=message):
        moco.validate_moco_config(config)


def test_two_replicas_hold_identical_queues(two_replicas):
    """Two logical CPUs, 3 steps of 8 pairs (4 per replica) into queues of 12."""
    task = tiny_moco_task(queue_size=12, momentum=0.5)
    task.task_config.train_data.global_batch_size = 8
    batches = [tf.nest.map_structure(lambda t: t.numpy(), moco_batch(8, s, first_id=100 * s))
               for s in range(3)]

    tf_keras.utils.set_random_seed(3)
    single = task.build_model()
    weights = [w.numpy() for w in single.weights]
    optimizer = tf_keras.optimizers.SGD(0.5)
    step = tf.function(lambda b: task.train_step(b, single, optimizer))
    for batch in batches:
        step(tf.nest.map_structure(tf.constant, batch))

    with two_replicas.scope():
        model = task.build_model()
        optimizer = tf_keras.optimizers.SGD(0.5)
    for w, value in zip(model.weights, weights):
        w.assign(value)

    @tf.function
    def train(inputs):
        two_replicas.run(lambda x: task.train_step(x, model, optimizer), args=(inputs,))

    for batch in batches:
        def per_replica(context, batch=batch):
            half = context.replica_id_in_sync_group * 4
            return tf.nest.map_structure(lambda a: tf.constant(a[half:half + 4]), batch)
        train(two_replicas.experimental_distribute_values_from_function(per_replica))

    def replicas(variable):
        return [v.numpy() for v in two_replicas.experimental_local_results(variable)]

    state = (model.source_queue.weights + model.target_queue.weights
             + model.key_encoder.weights + model.encoder.weights)
    single_state = (single.source_queue.weights + single.target_queue.weights
                    + single.key_encoder.weights + single.encoder.weights)
    assert max(float(np.abs(np.asarray(a, float) - np.asarray(b, float)).max())
               for a, b in map(replicas, state)) == 0.0
    # Relative to the magnitude (at least 1): an all-reduce of 2 halves rounds differently
    # from one batch of 8, by an ulp or so.
    single_diff = max(float((np.abs(replicas(v)[0] - s.numpy())
                             / np.maximum(1.0, np.abs(s.numpy()))).max())
                      for v, s in zip(state, single_state))
    assert single_diff < 1e-5, single_diff
    key_moved = float(np.abs(replicas(model.key_encoder.weights[0])[0] - weights[0]).max())
    assert key_moved > 1e-4  # the keys did follow the trained queries
    # Step 1 filled slots 0-7, step 2 wrote 8-11 and wrapped to 0-3, step 3 wrote 4-11; each
    # step's 8 keys in replica order (replica 0's rows, then replica 1's).
    assert replicas(model.source_queue.ids)[1].tolist() == [
        104, 105, 106, 107, 200, 201, 202, 203, 204, 205, 206, 207]
    assert int(replicas(model.source_queue.queue_ptr)[1]) == 0


