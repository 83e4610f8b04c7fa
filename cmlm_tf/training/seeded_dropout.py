"""Dropout that can be replayed: the same seed gives the same masks in every call.

A cached-gradient step (`cmlm_tf.training.gradient_cache`) runs the encoder twice over each
chunk of a batch, first without a tape and then with one; the gradient it assembles is the
true one only if both passes drop the same units. `make_replayable(model)` hands every
`tf_keras.layers.Dropout` inside `model` a random source and returns the model's `Replay`.
Inside its block (`with replay.seeded(seed):`) each layer draws its mask with
`tf.nn.experimental.stateless_dropout` from `seed` folded with the layer's index and with
how many times the layer was called before in the block; outside it behaves exactly as
before (the layer's own generator), so ordinary training, evaluation and export are
unchanged. The seed lives on the model's `Replay`, not in this module. Nothing is added to
checkpoints.

Two calls of one encoder in a block (two views of the same text, as SimCSE-style objectives
take them) therefore draw different masks, and a block that replays the same calls in the
same order draws the same ones. The counts are kept while the block's code is traced, so a
traced block replays as a Python one does.
"""

import contextlib
import dataclasses
from typing import Dict, Iterator, Optional

import tensorflow as tf
import tf_keras

from cmlm_tf.runtime import internals


@dataclasses.dataclass
class _Block:
    seed: tf.Tensor  # int64 [2]
    calls: Dict[int, int] = dataclasses.field(default_factory=dict)  # layer index -> calls


class Replay:
    """The replayable dropout layers of one model (`make_replayable`): `count` of them, and
    the block being traced or run in which they draw from a seed."""

    def __init__(self):
        self.count = 0
        self.block: Optional[_Block] = None

    @contextlib.contextmanager
    def seeded(self, seed: tf.Tensor) -> Iterator[None]:
        """The model's replayable dropout layers draw their masks from `seed` (int [2])
        inside this block, each call of a layer its own."""
        previous, self.block = self.block, _Block(tf.cast(seed, tf.int64))
        try:
            yield
        finally:
            self.block = previous


class _ReplayableSource:
    """Stands in for a Dropout layer's random generator (only `dropout` is called)."""

    def __init__(self, original, index: int, replay: Replay):
        self._original = original
        self._index = index
        self.replay = replay

    def replay_seed(self) -> Optional[tf.Tensor]:
        """The seed of this call of the layer inside `Replay.seeded` (and counts the call):
        the block's seed folded with the layer's index, then, from the layer's second call in
        the block on, with the number of calls before; None outside."""
        block = self.replay.block
        if block is None:
            return None
        call = block.calls.get(self._index, 0)
        block.calls[self._index] = call + 1
        seed = tf.random.experimental.stateless_fold_in(block.seed, self._index)
        return tf.random.experimental.stateless_fold_in(seed, call) if call else seed

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
    that draws its own mask, `cmlm_tf.training.recompute`), for one call of the layer:
    inside `Replay.seeded`, the seed the layer itself would draw with (a replay gets the same
    one); otherwise a fresh one from the global random state."""
    source = internals.random_generator(layer)
    seed = source.replay_seed() if isinstance(source, _ReplayableSource) else None
    if seed is None:
        seed = tf.random.uniform([2], maxval=tf.int64.max, dtype=tf.int64)
    return seed


def make_replayable(model: tf_keras.layers.Layer) -> Replay:
    """Makes every Dropout layer of `model` replayable (idempotent: a second call returns
    the same `Replay`)."""
    layers = [layer for layer in model.submodules
              if isinstance(layer, tf_keras.layers.Dropout)]
    sources = [internals.random_generator(layer) for layer in layers]
    replay = next((source.replay for source in sources
                   if isinstance(source, _ReplayableSource)), None) or Replay()
    for index, (layer, source) in enumerate(zip(layers, sources)):
        if not isinstance(source, _ReplayableSource):
            internals.set_random_generator(layer, _ReplayableSource(source, index, replay))
    replay.count = len(layers)
    return replay
