"""`info_nce_loss`: InfoNCE against a masked queue of negatives, against NumPy."""

import numpy as np
import tensorflow as tf

from cmlm_tf.losses import info_nce


def _reference_info_nce(positive, negatives, mask, temperature):
    logits = np.concatenate([positive[:, None], np.where(mask, negatives, -np.inf)], 1)
    logits = logits / temperature
    top = logits.max(1, keepdims=True)
    log_z = top[:, 0] + np.log(np.exp(logits - top).sum(1))
    return np.mean(log_z - logits[:, 0])



def test_info_nce_follows_the_formula():
    rng = np.random.default_rng(0)
    positive = rng.uniform(-1, 1, size=6).astype(np.float32)
    negatives = rng.uniform(-1, 1, size=(6, 9)).astype(np.float32)
    mask = rng.random((6, 9)) > 0.3
    for temperature in (0.04, 0.5):
        got = info_nce.info_nce_loss(positive, negatives, temperature, tf.constant(mask))
        np.testing.assert_allclose(float(got["loss"]),
                                   _reference_info_nce(positive, negatives, mask, temperature),
                                   rtol=1e-5)
    everything = info_nce.info_nce_loss(positive, negatives, 0.5)["loss"]
    np.testing.assert_allclose(float(everything), _reference_info_nce(
        positive, negatives, np.ones_like(mask), 0.5), rtol=1e-5)
    best = np.where(mask, negatives, -np.inf).max(1)
    np.testing.assert_array_equal(got["correct"].numpy(), (positive >= best).astype(np.float32))
