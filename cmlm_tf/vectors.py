"""Unit-length embedding rows in TensorFlow: the one L2 normalisation of the models, losses
and dev metrics.

    l2_normalize(x)[..., i] = x[..., i] / sqrt(max(Σ_j x[..., j]², ε)),  ε = 1e-12

so a zero row stays zero (as `tf.math.l2_normalize`, which the exported `default` output
also uses). NumPy arrays (evaluation, mining, PCR) have `cmlm_tf.evaluation.knn.l2_normalize`.

Example:
    >>> l2_normalize(tf.constant([[3.0, 4.0], [0.0, 0.0]])).numpy()
    array([[0.6, 0.8],
           [0. , 0. ]], dtype=float32)
"""

from typing import Optional

import tensorflow as tf

EPSILON = 1e-12


def l2_normalize(vectors: tf.Tensor, dtype: Optional[tf.DType] = None,
                 epsilon: float = EPSILON) -> tf.Tensor:
    """Scales each row of float [..., dim] to unit L2 norm along the last axis.

    Args:
        vectors: float [..., dim].
        dtype: cast to this first (float32 for losses and metrics under mixed precision);
            None keeps the input's dtype.
        epsilon: lower bound of the squared norm.

    Returns:
        float [..., dim] of `dtype` (or the input's dtype).
    """
    if dtype is not None:
        vectors = tf.cast(vectors, dtype)
    return tf.math.l2_normalize(vectors, axis=-1, epsilon=epsilon)
