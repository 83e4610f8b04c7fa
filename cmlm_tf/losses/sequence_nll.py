"""Negative log-likelihood of whole sequences under a decoder, optionally label-smoothed.

Teacher forcing: the decoder reads the target shifted right and predicts every next token.
For a sequence with tokens y_t, weights w_t (1 for real tokens, 0 for padding) and smoothing
e (Szegedy et al. 2016),

    NLL = Σ_t w_t · [ (1 − e) · −log p(y_t) + e · mean_v −log p(v) ]

summed over the sequence (the scale of the ELBO), one value per sequence. BGT (Wieting et al.
2020) uses it for its reconstructions (e = 0) and its BILINGUALTRANS translations (e = 0.1).

Example:
    >>> sequence_nll(tf.zeros([1, 1, 2]), tf.constant([[1]]), tf.ones([1, 1])).numpy()
    array([0.6931472], dtype=float32)
"""

import tensorflow as tf


def sequence_nll(logits: tf.Tensor, targets: tf.Tensor, weights: tf.Tensor,
                 label_smoothing: float = 0.0) -> tf.Tensor:
    """Negative log-likelihood of each target sequence, optionally label-smoothed.

    With smoothing e, each token's loss is (1 - e) * -log p(target) + e * mean_v -log p(v).

    Args:
        logits: float [batch, length, vocab].
        targets: int [batch, length].
        weights: float [batch, length]; 1 for real tokens, 0 for padding.

    Returns:
        float32 [batch]: the token losses summed over each sequence (computed in float32,
        as every loss is under a mixed precision policy).
    """
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    token_nll = -tf.gather(log_probs, tf.cast(targets, tf.int32), batch_dims=2)
    if label_smoothing:
        uniform_nll = -tf.reduce_mean(log_probs, axis=-1)
        token_nll = (1.0 - label_smoothing) * token_nll + label_smoothing * uniform_nll
    return tf.reduce_sum(token_nll * tf.cast(weights, token_nll.dtype), axis=-1)
