"""`MomentumQueue` (FIFO, wrap-around, fill mask) and `momentum_update` (the EMA)."""

import numpy as np
import pytest
import tensorflow as tf

from cmlm_tf.modeling import momentum_queue
from tests.conftest import moco_batch, tiny_moco_task


def test_queue_is_fifo_and_wraps_around():
    queue = momentum_queue.MomentumQueue(size=5, dim=2)
    assert not queue.trainable_weights and len(queue.non_trainable_weights) == 4
    assert not queue.read()["filled"].numpy().any()
    for step in range(3):  # 3 batches of 2 keys: slots 0-1, 2-3, then 4 and (wrapping) 0
        keys = tf.constant([[step, 0.0], [step, 1.0]]) + 1.0
        queue.enqueue(keys, ids=tf.constant([10 * step, 10 * step + 1], tf.int64))
    content = queue.read()
    np.testing.assert_array_equal(content["keys"].numpy(),
                                  [[3, 2], [1, 2], [2, 1], [2, 2], [3, 1]])
    np.testing.assert_array_equal(content["ids"].numpy(), [21, 1, 10, 11, 20])
    assert int(queue.queue_ptr.numpy()) == 1 and int(queue.queue_count.numpy()) == 5
    assert float(content["fill"]) == 1.0 and content["filled"].numpy().all()
    # A batch of 3 on a queue of 5 (not a multiple): slots 1, 2, 3 — the oldest keys.
    queue.enqueue(tf.fill([3, 2], 9.0))
    np.testing.assert_array_equal(queue.read()["keys"].numpy()[:, 0], [3, 9, 9, 9, 3])
    assert int(queue.queue_ptr.numpy()) == 4
    with pytest.raises(ValueError, match="more than the queue holds"):
        queue.enqueue(tf.zeros([6, 2]))
    clone = momentum_queue.MomentumQueue.from_config(queue.get_config())
    assert (clone.size, clone.dim) == (5, 2)



def test_partly_filled_queue_masks_the_empty_slots():
    queue = momentum_queue.MomentumQueue(size=4, dim=2)
    queue.enqueue(tf.ones([3, 2]))
    content = queue.read()
    np.testing.assert_array_equal(content["filled"].numpy(), [True, True, True, False])
    assert float(content["fill"]) == 0.75



def test_momentum_update_on_a_known_example():
    key, query = tf.Variable([1.0, 2.0]), tf.Variable([3.0, 6.0])
    momentum_queue.momentum_update([key], [query], 0.9)
    np.testing.assert_allclose(key.numpy(), [1.2, 2.4], rtol=1e-6)  # 0.9·k + 0.1·q
    momentum_queue.momentum_update([key], [query], 0.0)
    np.testing.assert_array_equal(key.numpy(), [3.0, 6.0])

    # In the model: keys start as copies; after the query moves by +1 a training call moves
    # every key weight by (1 − m)·1 before the keys are computed.
    task = tiny_moco_task(momentum=0.9)
    model = task.build_model()
    start = [v.numpy() for v in model.encoder.weights]
    for a, b in zip(model.key_encoder.weights, model.encoder.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for variable in model.encoder.weights:
        variable.assign_add(tf.ones_like(variable))
    model(moco_batch(4, seed=1), training=True)
    for key_weight, value in zip(model.key_encoder.weights, start):
        np.testing.assert_allclose(key_weight.numpy(), value + 0.1, atol=1e-5)
    model(moco_batch(4, seed=2), training=False)  # evaluation moves nothing
    for key_weight, value in zip(model.key_encoder.weights, start):
        np.testing.assert_allclose(key_weight.numpy(), value + 0.1, atol=1e-5)
    assert int(model.source_queue.queue_count.numpy()) == 4
