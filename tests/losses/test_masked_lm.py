"""`masked_lm_loss`: weighted mean cross-entropy over real predictions, against NumPy."""

import numpy as np
import tensorflow as tf

from cmlm_tf.losses.masked_lm import masked_lm_loss


def _numpy_loss(ids, weights, logits):
    logits = logits.astype(np.float64)
    top = logits.max(-1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, ids[..., None], -1)[..., 0]
    return (nll * weights).sum() / weights.sum()


def _batch(seed, batch=3, predictions=4, vocab=7):
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 3, (batch, predictions, vocab)).astype(np.float32)
    ids = rng.integers(0, vocab, (batch, predictions)).astype(np.int32)
    weights = np.ones((batch, predictions), np.float32)
    weights[0, 2:] = 0.0  # padded predictions
    weights[2, 1:] = 0.0
    return ids, weights, logits


def test_loss_is_the_mean_cross_entropy_over_real_predictions():
    ids, weights, logits = _batch(0)
    labels = {"masked_lm_ids": tf.constant(ids), "masked_lm_weights": tf.constant(weights),
              "input_word_ids": tf.zeros([3, 5], tf.int32)}  # other keys are ignored
    loss = masked_lm_loss(labels, tf.constant(logits))
    assert loss.dtype == tf.float32 and loss.shape == ()
    np.testing.assert_allclose(float(loss), _numpy_loss(ids, weights, logits), rtol=1e-5)


def test_padded_positions_do_not_count_whatever_their_ids_and_logits():
    ids, weights, logits = _batch(1)
    reference = float(masked_lm_loss({"masked_lm_ids": ids, "masked_lm_weights": weights},
                                     tf.constant(logits)))
    padded = weights == 0
    ids[padded] = 0
    logits[padded] = 50.0 * np.arange(7)  # confidently wrong
    again = masked_lm_loss({"masked_lm_ids": ids, "masked_lm_weights": weights}, logits)
    np.testing.assert_allclose(float(again), reference, rtol=1e-6)


def test_uniform_logits_give_log_vocab_and_no_prediction_gives_zero():
    ids = tf.constant([[3, 0], [1, 2]])
    uniform = masked_lm_loss({"masked_lm_ids": ids,
                              "masked_lm_weights": tf.constant([[1.0, 0.0], [1.0, 1.0]])},
                             tf.zeros([2, 2, 5]))
    np.testing.assert_allclose(float(uniform), np.log(5.0), rtol=1e-6)
    empty = masked_lm_loss({"masked_lm_ids": ids, "masked_lm_weights": tf.zeros([2, 2])},
                           tf.random.normal([2, 2, 5]))
    assert float(empty) == 0.0


def test_half_precision_logits_are_computed_in_float32():
    ids, weights, logits = _batch(2)
    loss = masked_lm_loss({"masked_lm_ids": ids, "masked_lm_weights": weights},
                          tf.constant(logits, tf.bfloat16))
    assert loss.dtype == tf.float32
    rounded = tf.cast(tf.constant(logits, tf.bfloat16), tf.float32).numpy()
    np.testing.assert_allclose(float(loss), _numpy_loss(ids, weights, rounded), rtol=1e-5)


def test_gradient_reaches_only_the_weighted_logits():
    ids, weights, logits = _batch(3)
    logits = tf.Variable(logits)
    with tf.GradientTape() as tape:
        loss = masked_lm_loss({"masked_lm_ids": ids, "masked_lm_weights": weights}, logits)
    grad = tape.gradient(loss, logits).numpy()
    assert np.all(grad[weights == 0] == 0)
    # d/dlogits of the mean: (softmax − one_hot) / Σw at each real prediction.
    probs = tf.nn.softmax(logits).numpy()
    expected = (probs - np.eye(7)[ids]) / weights.sum()
    np.testing.assert_allclose(grad[weights > 0], expected[weights > 0], atol=1e-6)
