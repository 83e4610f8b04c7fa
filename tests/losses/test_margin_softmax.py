"""Turning cross-replica negatives off: each replica ranks only its own rows."""

import numpy as np
import tensorflow as tf

from cmlm_tf.losses import margin_softmax


def _loss(source, target, gather):
    return margin_softmax.additive_margin_softmax_loss(
        source, target, margin=0.3, scale=10.0, cross_replica_negatives=gather)["loss"]


def test_without_the_gather_each_replica_ranks_its_own_rows(two_replicas):
    rng = np.random.default_rng(0)
    source = rng.normal(size=(8, 6)).astype(np.float32)
    target = (source + 0.5 * rng.normal(size=(8, 6))).astype(np.float32)
    # One device, each half on its own: what the replicas compute without the gather.
    halves = [float(_loss(tf.constant(source[i:i + 4]), tf.constant(target[i:i + 4]), True))
              for i in (0, 4)]
    whole = float(_loss(tf.constant(source), tf.constant(target), True))

    def per_replica(context):
        start = context.replica_id_in_sync_group * 4
        return tf.constant(source[start:start + 4]), tf.constant(target[start:start + 4])

    inputs = two_replicas.experimental_distribute_values_from_function(per_replica)
    replicated = {}
    for gather in (True, False):
        step = tf.function(lambda x, y, gather=gather: _loss(x, y, gather) / 2)
        per = two_replicas.run(step, args=inputs)
        replicated[gather] = float(two_replicas.reduce("SUM", per, axis=None))

    assert abs(replicated[True] - whole) <= 1e-5 * whole
    mean_of_halves = sum(halves) / 2
    assert abs(replicated[False] - mean_of_halves) <= 1e-5 * mean_of_halves
    assert abs(replicated[False] - whole) > 1e-3  # fewer negatives, another loss


def test_the_switch_is_a_config_field_and_a_layer_argument():
    config = margin_softmax.MarginSoftmaxConfig(cross_replica_negatives=False)
    assert config.as_dict()["cross_replica_negatives"] is False
    layer = margin_softmax.AdditiveMarginSoftmax(cross_replica_negatives=False)
    restored = margin_softmax.AdditiveMarginSoftmax.from_config(layer.get_config())
    assert restored.cross_replica_negatives is False
