"""`all_gather` and `replica_offset` on the default strategy and on two replicas."""

import numpy as np
import tensorflow as tf

from cmlm_tf.distributed import all_gather, replica_offset


def test_default_strategy_gathers_nothing_and_offsets_by_zero():
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    assert all_gather(x) is x
    assert int(replica_offset(tf.constant(2))) == 0

    @tf.function
    def traced(x):
        return all_gather(x), replica_offset(tf.shape(x)[0])

    gathered, offset = traced(x)
    np.testing.assert_array_equal(gathered.numpy(), x.numpy())
    assert offset.dtype == tf.int32 and int(offset) == 0


def _per_replica(strategy, make):
    return strategy.experimental_distribute_values_from_function(
        lambda context: make(context.replica_id_in_sync_group))


def _local(strategy, values):
    return [value.numpy() for value in strategy.experimental_local_results(values)]


def _rows(replica_id):
    # Replica r holds rows 10·r + [0, 1, 2] (3 rows of 2).
    return tf.reshape(tf.range(6, dtype=tf.float32), [3, 2]) + 10.0 * replica_id


def test_two_replicas_gather_in_replica_order(two_replicas):
    def fn(x):
        return all_gather(x), replica_offset(tf.shape(x)[0])

    gathered, offsets = two_replicas.run(tf.function(fn),
                                         args=(_per_replica(two_replicas, _rows),))
    expected = np.concatenate([_rows(0).numpy(), _rows(1).numpy()])
    for local in _local(two_replicas, gathered):
        np.testing.assert_array_equal(local, expected)
    assert _local(two_replicas, offsets) == [0, 3]
    # Each replica's rows sit at its offset in the gathered batch.
    for replica, (local, offset) in enumerate(zip(_local(two_replicas, gathered),
                                                  _local(two_replicas, offsets))):
        np.testing.assert_array_equal(local[offset:offset + 3], _rows(replica).numpy())


def test_two_replicas_gradient_reaches_the_replica_that_owns_the_rows(two_replicas):
    """Replica r's loss is (r + 1)·Σ gathered·w with w = arange: the gradient of the summed
    losses for replica r's rows is (1 + 2)·w on those rows."""
    weights = np.arange(12, dtype=np.float32).reshape(6, 2)

    def fn(x):
        scale = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group + 1,
                        tf.float32)
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = scale * tf.reduce_sum(all_gather(x) * weights)
        return tape.gradient(loss, x)

    grads = two_replicas.run(tf.function(fn), args=(_per_replica(two_replicas, _rows),))
    local = _local(two_replicas, grads)
    np.testing.assert_allclose(local[0], 3.0 * weights[:3])
    np.testing.assert_allclose(local[1], 3.0 * weights[3:])
