"""`nli_losses`: mean softmax cross-entropy and per-pair correctness, against NumPy."""

import numpy as np
import tensorflow as tf

from cmlm_tf.losses.pair_classification import nli_losses


def _numpy_cross_entropy(labels, logits):
    logits = logits.astype(np.float64)
    log_z = np.log(np.exp(logits).sum(-1))
    return np.mean(log_z - logits[np.arange(len(labels)), labels])


def test_loss_matches_numpy_cross_entropy():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (8, 3)).astype(np.float32)
    labels = rng.integers(0, 3, 8)
    losses = nli_losses(tf.constant(labels, tf.int64), tf.constant(logits))
    assert set(losses) == {"nli_loss", "nli_correct"}
    assert losses["nli_loss"].dtype == tf.float32 and losses["nli_loss"].shape == ()
    np.testing.assert_allclose(float(losses["nli_loss"]), _numpy_cross_entropy(labels, logits),
                               rtol=1e-5)
    np.testing.assert_array_equal(losses["nli_correct"].numpy(),
                                  (logits.argmax(1) == labels).astype(np.float32))


def test_correct_marks_argmax_hits_and_ties_go_to_the_lower_class():
    logits = tf.constant([[2.0, 1.0, 0.0], [0.0, 5.0, 5.0], [0.0, 5.0, 5.0], [1.0, 1.0, 9.0]])
    correct = nli_losses(tf.constant([0, 1, 2, 1]), logits)["nli_correct"]
    assert correct.dtype == tf.float32
    np.testing.assert_array_equal(correct.numpy(), [1.0, 1.0, 0.0, 0.0])


def test_uniform_logits_give_log_classes_in_float32_from_half_precision():
    losses = nli_losses(tf.constant([0, 2]), tf.zeros([2, 3], tf.float16))
    assert losses["nli_loss"].dtype == tf.float32
    np.testing.assert_allclose(float(losses["nli_loss"]), np.log(3.0), rtol=1e-6)
    # Confident and right costs almost nothing; confident and wrong about the margin.
    sure = nli_losses(tf.constant([1, 0]), tf.constant([[0.0, 30.0, 0.0], [0.0, 30.0, 0.0]]))
    np.testing.assert_allclose(float(sure["nli_loss"]), 15.0, rtol=1e-4)
