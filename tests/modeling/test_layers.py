import numpy as np
import pytest
import tensorflow as tf
from scipy.special import erf

from cmlm_tf.modeling import layers


def _batch():
    sequence = tf.constant([[[1.0, 2.0], [3.0, -4.0], [100.0, 100.0]],
                            [[-1.0, 0.0], [50.0, 50.0], [50.0, 50.0]]])
    mask = tf.constant([[1, 1, 0], [1, 0, 0]])
    return sequence, mask


def test_mean_pooling_ignores_padding():
    sequence, mask = _batch()
    out = layers.SequencePooling("mean")(sequence, mask).numpy()
    np.testing.assert_allclose(out, [[2.0, -1.0], [-1.0, 0.0]])


def test_max_pooling_ignores_padding():
    sequence, mask = _batch()
    out = layers.SequencePooling("max")(sequence, mask).numpy()
    np.testing.assert_allclose(out, [[3.0, 2.0], [-1.0, 0.0]])


def test_cls_pooling_takes_first_token():
    sequence, mask = _batch()
    out = layers.SequencePooling("cls")(sequence, mask).numpy()
    np.testing.assert_allclose(out, [[1.0, 2.0], [-1.0, 0.0]])


def test_pooling_config_round_trip_and_bad_mode():
    layer = layers.SequencePooling("max")
    assert layers.SequencePooling.from_config(layer.get_config()).mode == "max"
    with pytest.raises(ValueError, match="pooling"):
        layers.SequencePooling("sum")


def test_l2_normalize_keeps_zero_rows_finite():
    out = layers.L2Normalize()(tf.constant([[3.0, 4.0], [0.0, 0.0]])).numpy()
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]])


def test_activations():
    x = tf.constant([-1.0, 0.5, 2.0])
    exact = layers.get_activation("gelu_exact")(x).numpy()
    approx = layers.get_activation("gelu_approx")(x).numpy()

    np.testing.assert_allclose(exact, 0.5 * x.numpy() * (1 + erf(x.numpy() / np.sqrt(2))),
                               rtol=1e-6)
    assert np.abs(exact - approx).max() > 1e-5
    with pytest.raises(ValueError, match="hidden_activation"):
        layers.get_activation("no_such_activation")
