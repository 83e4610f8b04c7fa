"""Turning cross-replica negatives off: each replica ranks only its own rows."""

from conftest import run_on_two_replicas

from cmlm_tf.losses import margin_softmax

_TWO_REPLICAS = """
    import numpy as np
    from cmlm_tf.losses import margin_softmax

    rng = np.random.default_rng(0)
    source = rng.normal(size=(8, 6)).astype(np.float32)
    target = (source + 0.5 * rng.normal(size=(8, 6))).astype(np.float32)

    def local_loss(x, y, gather):
        return margin_softmax.additive_margin_softmax_loss(
            x, y, margin=0.3, scale=10.0, cross_replica_negatives=gather)["loss"]

    # One device, each half on its own: what the replicas compute without the gather.
    halves = [float(local_loss(tf.constant(source[i:i + 4]), tf.constant(target[i:i + 4]),
                               True)) for i in (0, 4)]
    whole = float(local_loss(tf.constant(source), tf.constant(target), True))

    strategy = two_replicas()
    def per_replica(context):
        start = context.replica_id_in_sync_group * 4
        return tf.constant(source[start:start + 4]), tf.constant(target[start:start + 4])
    inputs = strategy.experimental_distribute_values_from_function(per_replica)
    results = {}
    for gather in (True, False):
        step = tf.function(lambda x, y, gather=gather: local_loss(x, y, gather) / 2)
        per = strategy.run(step, args=inputs)
        results[str(gather)] = float(strategy.reduce("SUM", per, axis=None))
    report({"halves": halves, "whole": whole, "gathered": results["True"],
            "local": results["False"]})
"""


def test_without_the_gather_each_replica_ranks_its_own_rows(tmp_path):
    values = run_on_two_replicas(tmp_path, _TWO_REPLICAS)
    assert abs(values["gathered"] - values["whole"]) <= 1e-5 * values["whole"]
    mean_of_halves = sum(values["halves"]) / 2
    assert abs(values["local"] - mean_of_halves) <= 1e-5 * mean_of_halves
    assert abs(values["local"] - values["whole"]) > 1e-3  # fewer negatives, another loss


def test_the_switch_is_a_config_field_and_a_layer_argument():
    config = margin_softmax.MarginSoftmaxConfig(cross_replica_negatives=False)
    assert config.as_dict()["cross_replica_negatives"] is False
    layer = margin_softmax.AdditiveMarginSoftmax(cross_replica_negatives=False)
    restored = margin_softmax.AdditiveMarginSoftmax.from_config(layer.get_config())
    assert restored.cross_replica_negatives is False
