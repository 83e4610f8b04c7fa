"""InfoNCE against a queue of negatives (dual momentum contrast, Eq. 2).

For a query h_x, its positive key h_y = h_{y_0} and the queued keys h_{y_1} … h_{y_K}
(all L2-normalised),

    L(x, y) = −log( exp(h_x·h_y / τ) / Σ_{i=0..K} exp(h_x·h_{y_i} / τ) )

a (K+1)-way softmax with the positive first. Computed as softplus(logsumexp_i≥1 − positive),
which equals it without materialising the [batch, K+1] concatenation. Slots left out by the
mask (not yet filled, or holding a translation of the query) drop out of the sum.
"""

from typing import Dict, Optional

import tensorflow as tf

_EXCLUDED = -1e9


def info_nce_loss(positive: tf.Tensor, negatives: tf.Tensor, temperature: float,
                  negative_mask: Optional[tf.Tensor] = None) -> Dict[str, tf.Tensor]:
    """InfoNCE of each query against its positive key and the queue.

    Args:
        positive: float [batch], h_x·h_y of each query and its positive key.
        negatives: float [batch, K], h_x·h_{y_i} of each query and every queued key.
        temperature: τ (dual momentum contrast: 0.04).
        negative_mask: optional bool [batch, K], True where a queued key is a negative of
            the row; the others are left out of the softmax.

    Returns:
        dict: `loss` (scalar, mean over rows), `losses` (float [batch]) and `correct`
        (float [batch], 1 where the positive scores at least as high as every negative).
    """
    positive_logits = tf.cast(positive, tf.float32) / temperature
    negative_logits = tf.cast(negatives, tf.float32) / temperature
    if negative_mask is not None:
        negative_logits = tf.where(negative_mask, negative_logits, _EXCLUDED)
    hardest = tf.reduce_max(negative_logits, axis=-1)
    losses = tf.nn.softplus(tf.reduce_logsumexp(negative_logits, axis=-1) - positive_logits)
    return {"loss": tf.reduce_mean(losses), "losses": losses,
            "correct": tf.cast(positive_logits >= hardest, tf.float32)}
