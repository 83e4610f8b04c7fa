"""Unit-length embedding rows: the one home of L2 normalisation, for tensors and for arrays.

    x[..., i] / ‖x‖,  a zero row stays zero

- `l2_normalize` (TensorFlow tensors): the models, losses, exports and dev metrics. It divides
  by sqrt(max(Σ_j x[..., j]², ε)), ε = 1e-12, as `tf.math.l2_normalize`, which the exported
  `default` output also uses. TensorFlow is imported when it is first called.
- `l2_normalize_array` (NumPy arrays of any shape, dtype kept): `encode()`, `similarity()`
  and PCR.
- `unit_rows` (a NumPy matrix [n, dim] to be searched or scored): the evaluation metrics and
  mining; the input itself when its rows already have unit length, so large normalised
  inputs are not copied.

Example:
    >>> l2_normalize(tf.constant([[3.0, 4.0], [0.0, 0.0]])).numpy()
    array([[0.6, 0.8],
           [0. , 0. ]], dtype=float32)
"""

from typing import TYPE_CHECKING, Optional

import numpy as np

if TYPE_CHECKING:
    import tensorflow as tf

EPSILON = 1e-12


def l2_normalize(vectors: "tf.Tensor", dtype: Optional["tf.DType"] = None,
                 epsilon: float = EPSILON) -> "tf.Tensor":
    """Scales each row of a float tensor [..., dim] to unit L2 norm along the last axis.

    Args:
        vectors: float [..., dim].
        dtype: cast to this first (float32 for losses and metrics under mixed precision);
            None keeps the input's dtype.
        epsilon: lower bound of the squared norm.

    Returns:
        float [..., dim] of `dtype` (or the input's dtype).
    """
    import tensorflow as tf

    if dtype is not None:
        vectors = tf.cast(vectors, dtype)
    return tf.math.l2_normalize(vectors, axis=-1, epsilon=epsilon)


def l2_normalize_array(vectors: np.ndarray) -> np.ndarray:
    """x / ‖x‖ along the last axis of a NumPy float [..., dim] (a zero row stays zero), in the
    input's dtype."""
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1).astype(vectors.dtype)


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """L2-normalises the rows of an evaluation matrix [n, dim] (zero rows stay zero); keeps
    float32/float64, else float32.

    Rows already of unit length (to float32 rounding) are returned as they are, without a
    copy, so large normalised inputs are not duplicated in memory.
    """
    vectors = np.asarray(vectors)
    if vectors.dtype not in (np.float32, np.float64):
        vectors = vectors.astype(np.float32)
    if vectors.ndim != 2:
        raise ValueError(f"expected a [n, dim] matrix, got shape {vectors.shape}")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if np.all(np.abs(norms - 1) <= 1e-6):
        return vectors
    return l2_normalize_array(vectors)
