"""Dropout that can be replayed: the same seed gives the same masks in every call.

A cached-gradient step (`cmlm_tf.training.gradient_cache`) runs the encoder twice over each
chunk of a batch, first without a tape and then with one; the gradient it assembles is the
true one only if both passes drop the same units. `make_replayable(model)` hands every
`tf_keras.layers.Dropout` inside `model` a random source that, inside `dropout_seed(seed)`,
draws its mask with `tf.nn.experimental.stateless_dropout` from `seed` folded with the
layer's index, and outside it behaves exactly as before (the layer's own generator), so
ordinary training, evaluation and export are unchanged. Nothing is added to checkpoints.
"""

import contextlib
from typing import Iterator, List, Optional

import tensorflow as tf
import tf_keras

# The seed of the `dropout_seed` block being traced or run, if any.
_SEED: List[Optional[tf.Tensor]] = [None]


@contextlib.contextmanager
def dropout_seed(seed: tf.Tensor) -> Iterator[None]:
    """Replayable dropout layers draw their masks from `seed` (int [2]) inside this block."""
    previous, _SEED[0] = _SEED[0], tf.cast(seed, tf.int64)
    try:
        yield
    finally:
        _SEED[0] = previous


class _ReplayableSource:
    """Stands in for a Dropout layer's random generator (only `dropout` is called)."""

    def __init__(self, original, index: int):
        self._original = original
        self._index = index

    def replay_seed(self) -> Optional[tf.Tensor]:
        """This layer's seed inside `dropout_seed`: the block's seed folded with the layer's
        index; None outside."""
        if _SEED[0] is None:
            return None
        return tf.random.experimental.stateless_fold_in(_SEED[0], self._index)

    def dropout(self, inputs, rate, noise_shape=None):
        layer_seed = self.replay_seed()
        if layer_seed is None:
            return self._original.dropout(inputs, rate, noise_shape=noise_shape)
        return tf.nn.experimental.stateless_dropout(inputs, rate=rate, seed=layer_seed,
                                                    noise_shape=noise_shape)

    def __getattr__(self, name):
        return getattr(self._original, name)


def seed_for(layer: tf_keras.layers.Dropout) -> tf.Tensor:
    """The seed (int64 [2]) of a mask that `layer`'s rate applies elsewhere (an attention core
    that draws its own mask, `cmlm_tf.training.lean_layers`): inside `dropout_seed`, the
    block's seed folded with the layer's index, as the layer itself would draw it (a replay
    gets the same one); otherwise a fresh one from the global random state."""
    source = getattr(layer, "_random_generator", None)
    seed = source.replay_seed() if isinstance(source, _ReplayableSource) else None
    if seed is None:
        seed = tf.random.uniform([2], maxval=tf.int64.max, dtype=tf.int64)
    return seed


def make_replayable(model: tf_keras.layers.Layer) -> int:
    """Makes every Dropout layer of `model` replayable (idempotent); returns their count."""
    layers = [layer for layer in model.submodules
              if isinstance(layer, tf_keras.layers.Dropout)]
    for index, layer in enumerate(layers):
        if not isinstance(layer._random_generator, _ReplayableSource):
            # Bypasses Keras attribute tracking: the checkpoint keeps its structure.
            object.__setattr__(layer, "_random_generator",
                               _ReplayableSource(layer._random_generator, index))
    return len(layers)
