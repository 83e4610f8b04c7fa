"""Sentence-pair classification (NLI): softmax cross-entropy over the classes.

A pair head (`cmlm_tf.modeling.pair_classifier`) turns premise u and hypothesis v into logits
over entailment / neutral / contradiction from [u, v, |u − v|, u ∗ v] (Sentence-BERT, Reimers
and Gurevych 2019; CMLM paper §4.3; dual momentum contrast appendix B). With y_b the gold
class of pair b,

    L = −(1/B) Σ_b log softmax(logits_b)[y_b]

Example:
    >>> losses = nli_losses(tf.constant([0, 2]), tf.zeros([2, 3]))  # uniform: log 3
    >>> round(float(losses["nli_loss"]), 4), losses["nli_correct"].numpy().tolist()
    (1.0986, [1.0, 0.0])
"""

from typing import Dict

import tensorflow as tf


def nli_losses(labels: tf.Tensor, logits: tf.Tensor) -> Dict[str, tf.Tensor]:
    """The classification loss and which pairs the argmax gets right.

    Args:
        labels: int [batch], the gold class ids.
        logits: float [batch, classes] (any float dtype; computed in float32).

    Returns:
        dict: `nli_loss` (float32 scalar, mean cross-entropy) and `nli_correct` (float32
        [batch], 1.0 where the highest logit is the gold class; ties go to the lower id).
    """
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels),
                      tf.float32)
    return {"nli_loss": loss, "nli_correct": correct}
