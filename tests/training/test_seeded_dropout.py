"""Replayable dropout: each call of a layer in a `Replay.seeded` block draws its own mask, and
a replay of the block draws the same ones, in Python and in a traced function."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from cmlm_tf.training import seeded_dropout


def _model():
    inputs = tf_keras.Input([64])
    model = tf_keras.Model(inputs, tf_keras.layers.Dropout(0.5)(
        tf_keras.layers.Dense(64, kernel_initializer="ones")(inputs)))
    assert seeded_dropout.make_replayable(model).count == 1
    return model


def _two_views(model, x, seed):
    """Two calls of the model on the same rows in one block, as a SimCSE-style objective
    takes two views."""
    with seeded_dropout.make_replayable(model).seeded(seed):
        return model(x, training=True), model(x, training=True)


@pytest.mark.parametrize("traced", [False, True])
def test_two_calls_in_a_block_differ_and_a_replay_repeats_them(traced):
    model = _model()
    x = tf.ones([4, 64])
    views = tf.function(_two_views) if traced else _two_views
    first, second = views(model, x, tf.constant([3, 7], tf.int64))
    dropped_first, dropped_second = first.numpy() == 0, second.numpy() == 0
    assert 0.3 < dropped_first.mean() < 0.7
    assert (dropped_first != dropped_second).mean() > 0.3  # different masks
    replay_first, replay_second = views(model, x, tf.constant([3, 7], tf.int64))
    np.testing.assert_array_equal(replay_first.numpy(), first.numpy())
    np.testing.assert_array_equal(replay_second.numpy(), second.numpy())
    other, _ = views(model, x, tf.constant([3, 8], tf.int64))
    assert not np.array_equal(other.numpy(), first.numpy())


def test_seed_for_follows_the_calls_of_the_block():
    model = _model()
    layer = model.layers[-1]
    seeds = []
    for _ in range(2):
        with seeded_dropout.make_replayable(model).seeded(tf.constant([1, 2], tf.int64)):
            seeds.append([seeded_dropout.seed_for(layer).numpy().tolist() for _ in range(3)])
    assert seeds[0] == seeds[1]  # a replay: the same seeds in the same order
    assert len({tuple(seed) for seed in seeds[0]}) == 3  # each call its own
    # Outside a block: fresh seeds, as the layer's own generator would give.
    assert seeded_dropout.seed_for(layer).numpy().tolist() != \
        seeded_dropout.seed_for(layer).numpy().tolist()
