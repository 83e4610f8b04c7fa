"""Masked language modelling: cross-entropy over the predicted positions only.

Every masked-LM objective (CMLM, MLM, TLM) predicts, per sequence, the original ids of P
chosen positions (`cmlm_tf.data.masking.mask_tokens`); rows with fewer real predictions are
padded and carry weight 0. With w_bp the weight of prediction p of row b and y_bp its id,

    L = Σ_bp w_bp · −log softmax(logits_bp)[y_bp]  /  Σ_bp w_bp

the mean over real predictions (BERT, Devlin et al. 2019; CMLM's L_CMLM is this loss on the
masked second sentence). A batch without any real prediction gives 0.

Example:
    >>> labels = {"masked_lm_ids": tf.constant([[3, 0]]),
    ...           "masked_lm_weights": tf.constant([[1.0, 0.0]])}
    >>> float(masked_lm_loss(labels, tf.zeros([1, 2, 4])))  # uniform over 4 ids: log 4
    1.3862943...
"""

from typing import Mapping

import tensorflow as tf
import tf_keras


def masked_lm_loss(labels: Mapping[str, tf.Tensor], mlm_logits: tf.Tensor) -> tf.Tensor:
    """Mean cross-entropy over the real predictions (`masked_lm_weights` 1.0).

    Args:
        labels: dict with `masked_lm_ids` int32 [batch, P] (the original ids) and
            `masked_lm_weights` float32 [batch, P] (1.0 for a real prediction, 0.0 for
            padding); other keys are ignored.
        mlm_logits: float [batch, P, vocab] (any float dtype; computed in float32).

    Returns:
        float32 scalar.
    """
    per_token = tf_keras.losses.sparse_categorical_crossentropy(
        labels["masked_lm_ids"], tf.cast(mlm_logits, tf.float32), from_logits=True)
    weights = labels["masked_lm_weights"]
    return tf.math.divide_no_nan(tf.reduce_sum(per_token * weights), tf.reduce_sum(weights))
