"""The mechanics of momentum contrast: a FIFO queue of keys and the momentum (EMA) update.

*Aligning Cross-lingual Sentence Representations with Dual Momentum Contrast* (after MoCo,
He et al. 2020): a slowly moving copy of each encoder (its key encoder),
θ_k ← m·θ_k + (1 − m)·θ_q, embeds the keys; a queue keeps the K most recent keys as
negatives, so their number no longer depends on the batch size.

Replicas. Queues and key encoders are replicated state that every replica must hold
identically. Their variables are created with `ONLY_FIRST_REPLICA` aggregation: an update made
in a replica context takes the first replica's value and writes it to every replica. The
updates are built so that every replica computes the same value anyway (keys are
all-gathered before they are enqueued; the EMA reads the already-synchronised query weights).
"""

import contextlib
from typing import Optional, Sequence

import tensorflow as tf
import tf_keras

from cmlm_tf.distributed import all_gather

_REPLICATED = dict(trainable=False, synchronization=tf.VariableSynchronization.ON_WRITE,
                   aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)


@contextlib.contextmanager
def replicated_state():
    """Variables created inside are non-trainable and updatable from a replica context."""

    def creator(next_creator, **kwargs):
        kwargs.update(_REPLICATED)
        return next_creator(**kwargs)

    with tf.variable_creator_scope(creator):
        yield


def momentum_update(key_variables: Sequence[tf.Variable],
                    query_variables: Sequence[tf.Variable], momentum: float) -> None:
    """θ_k ← m·θ_k + (1 − m)·θ_q for each pair; m = 0 copies the query weights exactly.

    Key variables must come from `replicated_state()` when a strategy has several replicas.
    """
    if len(key_variables) != len(query_variables):
        raise ValueError(f"{len(key_variables)} key variables for {len(query_variables)} "
                         "query variables")
    for key, query in zip(key_variables, query_variables):
        if key.shape != query.shape:
            raise ValueError(f"key variable {key.name} {key.shape} does not match query "
                             f"variable {query.name} {query.shape}")
        if momentum == 0.0:
            key.assign(query)
        else:
            key.assign(momentum * key + (1.0 - momentum) * query)


@tf_keras.utils.register_keras_serializable(package="cmlm_tf")
class MomentumQueue(tf_keras.layers.Layer):
    """A FIFO queue of the `size` most recent keys, overwriting the oldest.

    State (non-trainable, saved in checkpoints, identical on every replica):
        `keys`: float32 [size, dim]; `ids`: int64 [size], fingerprints of the texts the keys
        embed (0 when unknown), so a loss can leave translations of a query out of its
        negatives; `queue_ptr`: int64, the slot the next key goes to; `queue_count`: int64,
        how many slots hold keys (≤ size).

    Initial content: zeros, masked until filled (`read()["filled"]`). MoCo starts from random
    unit vectors instead; with warm-started encoders and a queue larger than what a short
    fine-tuning run enqueues, those would be most of the negatives and carry no signal.

    Any batch size up to `size` works: a batch that reaches the end wraps around to slot 0
    (`size` need not be a multiple of the batch).

    Args:
        size: K, the number of keys kept.
        dim: width of a key.
    """

    def __init__(self, size: int, dim: int, **kwargs):
        kwargs["trainable"] = False
        super().__init__(**kwargs)
        if size <= 0 or dim <= 0:
            raise ValueError(f"queue size and dim must be positive, got {size} and {dim}")
        self.size = size
        self.dim = dim
        weight = dict(trainable=False, synchronization=_REPLICATED["synchronization"],
                      aggregation=_REPLICATED["aggregation"])
        self.keys = self.add_weight("keys", shape=[size, dim], dtype=tf.float32,
                                    initializer="zeros", **weight)
        self.ids = self.add_weight("ids", shape=[size], dtype=tf.int64, initializer="zeros",
                                   **weight)
        self.queue_ptr = self.add_weight("queue_ptr", shape=[], dtype=tf.int64,
                                         initializer="zeros", **weight)
        self.queue_count = self.add_weight("queue_count", shape=[], dtype=tf.int64,
                                           initializer="zeros", **weight)

    def read(self):
        """The current content, as tensors taken before any later `enqueue`; no gradient
        flows into the queue.

        Returns:
            dict: `keys` float32 [size, dim], `ids` int64 [size], `filled` bool [size]
            (slots that hold a key), `fill` float32 scalar (the share of filled slots).
        """
        filled = tf.range(self.size, dtype=tf.int64) < self.queue_count
        return {"keys": tf.stop_gradient(self.keys), "ids": tf.convert_to_tensor(self.ids),
                "filled": filled,
                "fill": tf.cast(self.queue_count, tf.float32) / float(self.size)}

    def enqueue(self, keys: tf.Tensor, ids: Optional[tf.Tensor] = None) -> None:
        """Writes this step's keys over the oldest ones, from every replica, without gradient.

        Args:
            keys: float [batch, dim], this replica's keys; every replica's are all-gathered,
                in replica order, so all replicas enqueue the same global batch.
            ids: optional int64 [batch] text fingerprints of the keys.
        """
        keys = all_gather(tf.stop_gradient(tf.cast(keys, tf.float32)))
        if ids is None:
            ids = tf.zeros(tf.shape(keys)[:1], tf.int64)
        else:
            ids = all_gather(tf.cast(ids, tf.int64))
        if keys.shape[0] is not None and keys.shape[0] > self.size:
            raise ValueError(f"{keys.shape[0]} keys in one step, more than the queue holds "
                             f"({self.size})")
        count = tf.shape(keys, out_type=tf.int64)[0]
        slots = (self.queue_ptr + tf.range(count, dtype=tf.int64)) % self.size
        self.keys.scatter_update(tf.IndexedSlices(keys, slots))
        self.ids.scatter_update(tf.IndexedSlices(ids, slots))
        self.queue_ptr.assign((self.queue_ptr + count) % self.size)
        self.queue_count.assign(tf.minimum(self.queue_count + count, self.size))

    def get_config(self):
        return {**super().get_config(), "size": self.size, "dim": self.dim}
