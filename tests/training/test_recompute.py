"""Lean transformer layers (`cmlm_tf.training.recompute`): what they recompute in the
backward pass gives the gradient of the plain computation, dropout included."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from cmlm_tf.modeling import layers, sentence_encoder
from cmlm_tf.training import recompute
from tests.conftest import tiny_encoder_config


def _attention_layer(rate):
    layer = tf_keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, dropout=rate)
    hidden = tf.zeros([2, 5, 8])
    layer(hidden, hidden)  # builds the equations and the softmax
    return layer


def _plain_core(layer, query, key, value, *, mask, seed, rate):
    """The attention core written out, differentiated by the tape as it stands."""
    scores = tf.einsum(layer._dot_product_equation, key, query * (1.0 / np.sqrt(4.0)))
    probabilities = layer._masked_softmax(scores, mask)
    keep = tf.random.stateless_uniform(tf.shape(probabilities), seed=seed) >= rate
    probabilities = tf.where(keep, probabilities / (1.0 - rate), 0.0)
    return tf.einsum(layer._combine_equation, probabilities, value)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_lean_attention_recomputes_the_plain_gradient_with_its_dropout(jit_compile):
    """Dropout 0.3 with a mask drawn from a seed, a padding mask: the lean core's output and
    its gradients with respect to queries, keys and values equal those of the plain core
    (plain graph and XLA), and another seed drops other units."""
    rate = 0.3
    layer = _attention_layer(rate)
    rng = np.random.default_rng(0)
    query, key, value = (tf.constant(rng.normal(size=(2, 5, 2, 4)), tf.float32)
                         for _ in range(3))
    mask = tf.constant(rng.random((2, 5, 5)) > 0.2)
    weights = tf.constant(rng.normal(size=(2, 5, 2, 4)), tf.float32)

    def gradients(function, seed):
        with tf.GradientTape() as tape:
            tape.watch([query, key, value])
            outputs = function(query, key, value, seed)
            loss = tf.reduce_sum(outputs * weights)
        return [outputs] + tape.gradient(loss, [query, key, value])

    @tf.function(jit_compile=jit_compile)
    def both(seed):
        lean = gradients(lambda q, k, v, s: recompute.lean_attention(layer, q, k, v,
                                                                     attention_mask=mask, seed=s),
                         seed)
        plain = gradients(lambda q, k, v, s: _plain_core(layer, q, k, v, mask=mask, seed=s,
                                                         rate=rate), seed)
        return lean, plain

    lean, plain = both(tf.constant([3, 4], tf.int64))
    for got, expected in zip(lean, plain):
        np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    other, _ = both(tf.constant([5, 6], tf.int64))
    assert not np.allclose(other[0].numpy(), lean[0].numpy())


def test_lean_activation_keeps_gelu_and_its_gradient():
    """Compiled (where it recomputes) and plain (where it is GELU itself)."""
    inputs = tf.constant(np.linspace(-4, 4, 33), tf.float32)
    lean = recompute.lean_activation(layers.gelu_exact)

    def both():
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(inputs)
            plain_out, lean_out = layers.gelu_exact(inputs), lean(inputs)
        return (plain_out, lean_out, tape.gradient(plain_out, inputs),
                tape.gradient(lean_out, inputs), recompute.compiled())

    for jit_compile in (True, False):
        plain_out, lean_out, plain_grad, lean_grad, compiled = \
            tf.function(both, jit_compile=jit_compile)()
        assert bool(compiled) is jit_compile
        np.testing.assert_allclose(lean_out.numpy(), plain_out.numpy(), rtol=1e-6)
        np.testing.assert_allclose(lean_grad.numpy(), plain_grad.numpy(), rtol=1e-5,
                                   atol=1e-7)


def test_make_lean_is_training_only_and_idempotent(tiny_vocab):
    """Every attention layer and transformer block of an encoder is changed once; inference
    gives the same vectors as before."""
    encoder = sentence_encoder.build_sentence_encoder(
        tiny_encoder_config(64, num_layers=2))
    ids = tf.constant([[2, 7, 9, 3, 0], [2, 8, 3, 0, 0]])
    inputs = {"input_word_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32),
              "input_type_ids": tf.zeros_like(ids)}
    before = encoder(inputs, training=False)["default"].numpy()
    assert recompute.make_lean(encoder) == 4  # 2 attention layers, 2 blocks
    assert recompute.make_lean(encoder) == 0
    np.testing.assert_allclose(encoder(inputs, training=False)["default"].numpy(), before,
                               rtol=1e-6)
    trained = encoder(inputs, training=True)["default"].numpy()
    assert np.all(np.isfinite(trained)) and not np.allclose(trained, before)
