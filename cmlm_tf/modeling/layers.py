"""Small reusable layers with no training logic."""

import tensorflow as tf
import tf_keras
from official.modeling import tf_utils
from official.nlp.modeling import layers as nlp_layers

from cmlm_tf import configs, vectors


@tf_keras.utils.register_keras_serializable(package="cmlm_tf")
def gelu_exact(x):
    """GELU with the erf form, as Hugging Face BERT computes it."""
    return tf.nn.gelu(x, approximate=False)


@tf_keras.utils.register_keras_serializable(package="cmlm_tf")
def gelu_approx(x):
    """GELU with the tanh approximation (Model Garden's `gelu`)."""
    return tf.nn.gelu(x, approximate=True)


def get_activation(name: str):
    """Maps `task.model.encoder.hidden_activation` to a callable."""
    if name == "gelu_exact":
        return gelu_exact
    if name in ("gelu_approx", "gelu"):
        return gelu_approx

    try:
        return tf_utils.get_activation(name)
    except (KeyError, ValueError):
        raise ValueError(
            f"task.model.encoder.hidden_activation: unknown activation {name!r}") from None


def pool(sequence: tf.Tensor, mask: tf.Tensor, mode: str = "mean") -> tf.Tensor:
    """Pools token vectors into one sentence vector, ignoring padding.

    Args:
        sequence: float [batch, seq, width].
        mask: int or bool [batch, seq]; 1 for real tokens.
        mode: `mean` (average over unmasked tokens), `cls` (the first token) or `max`
            (element-wise maximum over unmasked tokens).

    Returns:
        float [batch, width] of `sequence`'s dtype. A row whose mask is all zero pools to
        zeros (`mean`, `max`).
    """
    _check_mode(mode)
    # Gather and expand_dims rather than `x[:, 0]` / `x[..., tf.newaxis]` indexing, which
    # TFLite's converter keeps as a StridedSlice it has no kernel for.
    if mode == "cls":
        return tf.gather(sequence, 0, axis=1)
    weights = tf.expand_dims(tf.cast(mask, sequence.dtype), -1)
    if mode == "mean":
        total = tf.reduce_sum(sequence * weights, axis=1)
        count = tf.maximum(tf.reduce_sum(weights, axis=1), 1.0)
        return total / count
    lowest = tf.cast(sequence.dtype.min, sequence.dtype)
    masked = tf.where(weights > 0, sequence, lowest)
    has_tokens = tf.reduce_any(weights > 0, axis=1)
    return tf.where(has_tokens, tf.reduce_max(masked, axis=1), tf.zeros_like(masked[:, 0]))


def _check_mode(mode: str) -> None:
    if mode not in configs.POOLING_MODES:
        raise ValueError(f"pooling mode must be mean, cls or max, got {mode!r}")


@tf_keras.utils.register_keras_serializable(package="cmlm_tf")
class SequencePooling(tf_keras.layers.Layer):
    """Keras form of `pool`: token vectors to one sentence vector, ignoring padding.

    Args:
        mode: `mean`, `cls` or `max` (see `pool`).

    Call args:
        sequence: float [batch, seq, width].
        mask: int or bool [batch, seq]; 1 for real tokens.

    Returns:
        float [batch, width]. A row whose mask is all zero pools to zeros.
    """

    def __init__(self, mode: str = "mean", **kwargs):
        super().__init__(**kwargs)
        _check_mode(mode)
        self.mode = mode

    def call(self, sequence, mask):
        return pool(sequence, mask, self.mode)

    def get_config(self):
        return {**super().get_config(), "mode": self.mode}


@tf_keras.utils.register_keras_serializable(package="cmlm_tf")
class L2Normalize(tf_keras.layers.Layer):
    """Keras form of `cmlm_tf.vectors.l2_normalize`: each row to unit L2 norm (a zero row
    stays zero), in the layer's compute dtype."""

    def __init__(self, epsilon: float = vectors.EPSILON, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def call(self, inputs):
        return vectors.l2_normalize(inputs, epsilon=self.epsilon)

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}


def tied_masked_lm(encoder, activation: str, initializer_range: float) -> tf_keras.layers.Layer:
    """Model Garden's `MaskedLM` head whose output embedding is `encoder`'s word embedding.

    `encoder` is a `SentenceEncoder`; the head returns logits over the vocabulary.
    """
    return nlp_layers.MaskedLM(
        embedding_table=encoder.bert.get_embedding_table(),
        activation=get_activation(activation),
        initializer=tf_keras.initializers.TruncatedNormal(stddev=initializer_range),
        output="logits", name="mlm_head")
