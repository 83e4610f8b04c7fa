"""Transformer layers that keep less for the backward pass: the attention core and the
feed-forward activation recompute their large intermediates there instead.

In a training step every layer keeps, until the backward pass reaches it, what its
gradient needs. Two parts of Model Garden's transformer block keep several tensors of the
largest size in the model, [batch, heads, seq, seq] or [batch, seq, intermediate]:

- the attention core (scores, softmax probabilities, the random bits of the attention
  dropout and the dropped probabilities): `lean_attention` keeps only its inputs (the
  projected queries, keys and values) and runs the core again in the backward pass, as
  memory-efficient attention kernels do (PyTorch's `scaled_dot_product_attention`). That
  costs two more [seq, seq] products per layer, a few per cent of the layer's compute.
- the activation between the two feed-forward products: XLA kept the error function and
  the exponential of exact GELU's derivative besides its input. `lean_activation` keeps
  the input only and differentiates the activation again from it.

The values and gradients are those of the plain layers (the same ops, in the same dtypes).
The attention dropout draws its mask from a seed (`seeded_dropout.seed_for`), so the second
run drops the same units; a cached-gradient replay of the block draws the same seeds too.
The second run is tied to the incoming gradient (an optimisation barrier, and zero times one
of its elements added, `_after`), so the compiler can neither merge it with the first run
nor move it ahead.

`make_lean(model)` applies both to every `tf_keras.layers.MultiHeadAttention` and to the
feed-forward activation of every Model Garden `TransformerEncoderBlock` in `model`
(idempotent), in training calls compiled with XLA only (what a GPU or TPU runs,
`runtime.enable_xla`). A plain CPU step, whose memory is the host's, keeps its speed.
Evaluation, export and checkpoints are unchanged.
"""

import functools
import math
from typing import Callable, Optional

import tensorflow as tf
import tf_keras
from official.nlp.modeling.layers import transformer_encoder_block
from tensorflow.compiler.tf2xla.python import xla

from cmlm_tf.runtime import internals
from cmlm_tf.training import seeded_dropout


def compiled() -> bool:
    """Whether the code being traced is compiled with XLA (`jit_compile`): the lean layers
    act there only. A plain CPU step keeps its speed (recomputing costs it about 5 %), and
    its memory is the host's."""
    return internals.in_xla_context()


def _after(tensors, upstream):
    """`tensors` unchanged, but computed from `upstream` (the incoming gradient) as far as
    the compiler can tell, so a recomputation from them can neither start before the
    backward pass reaches it nor be merged with the forward pass. XLA's CPU backend drops
    optimisation barriers before it merges common subexpressions, so besides the barrier each
    tensor gets zero times one element of `upstream` added: not folded away, since zero times
    a float is not zero when the float is not finite, and then the step's gradient is not
    finite either (a mixed-precision step is skipped)."""
    *tensors, upstream = _barrier(*tensors, upstream)
    zero = tf.reshape(upstream, [-1])[0] * tf.zeros([], upstream.dtype)
    return [tensor + tf.cast(zero, tensor.dtype) for tensor in tensors], upstream


def _barrier(*tensors):
    """`tensors` unchanged, computed no earlier than all of them are available."""
    return xla.optimization_barrier(*tensors)


def lean_activation(activation: Callable[[tf.Tensor], tf.Tensor]):
    """`activation` whose gradient is recomputed from its input in the backward pass."""

    def apply(inputs):
        if not compiled():
            return activation(inputs)
        return recomputed(inputs)

    @tf.custom_gradient
    def recomputed(inputs):
        outputs = activation(inputs)

        def backward(upstream):
            (again,), upstream = _after([inputs], upstream)
            with tf.GradientTape() as tape:
                tape.watch(again)
                recomputed = activation(again)
            return tape.gradient(recomputed, again, output_gradients=upstream)

        return outputs, backward

    return apply


def lean_attention(layer: tf_keras.layers.MultiHeadAttention, query: tf.Tensor,
                   key: tf.Tensor, value: tf.Tensor, *, attention_mask: Optional[tf.Tensor],
                   seed: Optional[tf.Tensor]) -> tf.Tensor:
    """`layer`'s attention core (scaled dot products, masked softmax, attention dropout,
    weighted sum of the values) on projected `query` [B, T, N, key_dim], `key` and `value`
    [B, S, N, dim]; returns [B, T, N, value_dim]. The dropout mask is drawn from `seed`
    (int64 [2]), or there is no dropout where `seed` is None."""
    attention = internals.attention_core(layer)
    rate = attention.dropout_rate
    scale = 1.0 / math.sqrt(float(attention.key_dim))

    def core(query, key, value, seed):
        scores = tf.einsum(attention.dot_product_equation, key, tf.multiply(query, scale))
        probabilities = attention.masked_softmax(scores, attention_mask)
        if seed is not None and rate > 0:
            keep = tf.random.stateless_uniform(tf.shape(probabilities), seed=seed) >= rate
            kept = probabilities * tf.cast(1.0 / (1.0 - rate), probabilities.dtype)
            probabilities = tf.where(keep, kept, tf.zeros_like(kept))
        return tf.einsum(attention.combine_equation, probabilities, value)

    @tf.custom_gradient
    def attend(query, key, value):
        outputs = core(query, key, value, seed)

        def backward(upstream):
            # The seed too: the random bits are then drawn again, not kept from the forward
            # pass (they depend on nothing else).
            tied = [query, key, value] + ([seed] if seed is not None else [])
            tied, upstream = _after(tied, upstream)
            query_, key_, value_ = tied[:3]
            with tf.GradientTape() as tape:
                tape.watch([query_, key_, value_])
                recomputed = core(query_, key_, value_, tied[3] if seed is not None else None)
            return tape.gradient(recomputed, [query_, key_, value_],
                                 output_gradients=upstream)

        return outputs, backward

    return attend(query, key, value)


def _lean_compute_attention(layer: tf_keras.layers.MultiHeadAttention, original):
    def compute_attention(query, key, value, attention_mask=None, training=None):
        if not training or not compiled():
            return original(query, key, value, attention_mask=attention_mask,
                            training=training)
        seed = None
        attention = internals.attention_core(layer)
        if attention.dropout_rate > 0:
            seed = seeded_dropout.seed_for(attention.dropout_layer)
        # The probabilities are not returned: nothing in a training step asks for them.
        return lean_attention(layer, query, key, value, attention_mask=attention_mask,
                              seed=seed), None

    return compute_attention


def make_lean(model: tf_keras.layers.Layer) -> int:
    """Makes the attention cores and feed-forward activations of `model` lean in training
    (idempotent); returns how many layers it changed."""
    changed = 0
    for layer in [model] + list(model.submodules):
        if getattr(layer, "cmlm_lean", False):
            continue
        if type(layer) is tf_keras.layers.MultiHeadAttention:
            internals.replace_compute_attention(
                layer, functools.partial(_lean_compute_attention, layer))
        elif isinstance(layer, transformer_encoder_block.TransformerEncoderBlock) and \
                internals.intermediate_activation_layer(layer) is not None:
            activation_layer = internals.intermediate_activation_layer(layer)
            internals.set_untracked(activation_layer, "activation",
                                    lean_activation(activation_layer.activation))
        else:
            continue
        internals.set_untracked(layer, "cmlm_lean", True)
        changed += 1
    return changed
