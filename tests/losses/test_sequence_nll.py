"""`sequence_nll`: summed token NLL with label smoothing (and BGT's active-unit count)."""

import math

import numpy as np
import tensorflow as tf

from cmlm_tf.losses.sequence_nll import sequence_nll
from cmlm_tf.modeling import bgt


def test_label_smoothing_and_active_units():
    logits = tf.math.log(tf.constant([[[0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3]]]))
    targets, weights = tf.constant([[0, 2]]), tf.constant([[1.0, 0.0]])
    np.testing.assert_allclose(sequence_nll(logits, targets, weights), [math.log(2.0)],
                               rtol=1e-6)
    smoothed = 0.9 * math.log(2.0) + 0.1 * (math.log(2.0) + 2 * math.log(4.0)) / 3
    np.testing.assert_allclose(sequence_nll(logits, targets, weights, 0.1), [smoothed],
                               rtol=1e-6)
    means = tf.constant([[0.0, 1.0, 5.0], [0.0, -1.0, 5.05], [0.0, 1.0, 5.0]])
    assert float(bgt.active_units(means, 0.01)) == 1.0
