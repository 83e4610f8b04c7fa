"""Gathering per-replica tensors into the global batch, for losses with shared negatives
(`losses/margin_softmax`) and queues filled from every replica (`modeling/momentum_queue`).

Below `losses/`, `modeling/` and `training/`, which all read it: a loss never imports the
training package."""

import json
import os

import tensorflow as tf


def all_gather(tensor: tf.Tensor) -> tf.Tensor:
    """All-gathers along the batch axis in a replica context; identity otherwise.

    Replica r's rows come r-th. The gradient of `ReplicaContext.all_gather` sums the upstream
    gradients of all replicas and returns each replica its own slice, so gradients reach the
    replica that computed the embedding.
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return tensor
    return context.all_gather(tensor, axis=0)


def replica_offset(local_batch: tf.Tensor) -> tf.Tensor:
    """Where this replica's rows start in the gathered batch: `replica_id · local_batch`."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return tf.constant(0, tf.int32)
    replica_id = tf.cast(context.replica_id_in_sync_group, tf.int32)
    return replica_id * local_batch


def is_chief() -> bool:
    """Whether this process is the chief of a multi-worker run (or the only worker)."""
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = config.get("task") or {}
    if not task:
        return True
    if task.get("type") == "chief":
        return True
    has_chief = "chief" in (config.get("cluster") or {})
    return task.get("type") == "worker" and int(task.get("index", 0)) == 0 and not has_chief
