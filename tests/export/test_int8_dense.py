"""`Int8Dense`: int8 weights and activations through oneDNN's quantized matmul."""

import numpy as np
import pytest
import tensorflow as tf

from cmlm_tf.export.int8_dense import Int8Dense


@pytest.fixture(scope="module")
def layer_and_weights():
    rng = np.random.default_rng(0)
    # Columns of very different sizes: each gets its own scale.
    kernel = (rng.standard_normal([48, 40]) * rng.uniform(0.01, 2.0, [1, 40])).astype(
        np.float32)
    bias = rng.standard_normal([40]).astype(np.float32)
    return Int8Dense(kernel, bias), kernel, bias


@pytest.mark.parametrize("shift", [0.0, -3.0, 5.0])
def test_output_is_the_float_product_up_to_int8_rounding(layer_and_weights, shift):
    """Signed, all-positive and all-negative activations (the shift) give x @ W + b within
    int8 rounding: 2% of the largest output, and a cosine of at least 0.999 per row."""
    layer, kernel, bias = layer_and_weights
    x = np.random.default_rng(1).standard_normal([16, 48]).astype(np.float32) + shift
    expected = x @ kernel + bias
    actual = layer(tf.constant(x)).numpy()
    assert np.abs(actual - expected).max() <= 0.02 * np.abs(expected).max()
    cosine = (actual * expected).sum(1) / np.linalg.norm(actual, axis=1) / np.linalg.norm(
        expected, axis=1)
    assert cosine.min() >= 0.999


def test_weights_are_int8_and_edge_batches_work(layer_and_weights):
    layer, kernel, bias = layer_and_weights
    assert layer.kernel.dtype == np.int8 and layer.kernel.shape == kernel.shape
    assert np.abs(layer.kernel).max() == 127  # each column uses the full range
    assert layer(tf.zeros([0, 48])).shape == (0, 40)
    np.testing.assert_allclose(layer(tf.zeros([1, 48])).numpy()[0], bias, atol=1e-5)


def test_the_layer_survives_a_saved_model(layer_and_weights, tmp_path):
    layer, _, _ = layer_and_weights
    module = tf.Module()
    module.layer = layer
    module.call = tf.function(layer.__call__, input_signature=[tf.TensorSpec([None, 48])])
    tf.saved_model.save(module, str(tmp_path))
    x = np.random.default_rng(2).standard_normal([5, 48]).astype(np.float32)
    loaded = tf.saved_model.load(str(tmp_path))
    np.testing.assert_array_equal(loaded.call(x).numpy(), layer(tf.constant(x)).numpy())
    # The kernel is a constant of the saved graph, not a variable.
    assert not hasattr(loaded.layer, "kernel") and hasattr(loaded.layer, "column_scale")


def test_a_kernel_kept_in_a_variable_gives_the_same_output(layer_and_weights):
    layer, kernel, bias = layer_and_weights
    variable_layer = Int8Dense(kernel, bias, constant_kernel=False)
    assert isinstance(variable_layer.kernel, tf.Variable)
    np.testing.assert_array_equal(variable_layer.kernel.numpy(), layer.kernel)
    x = tf.constant(np.random.default_rng(3).standard_normal([4, 48]).astype(np.float32))
    np.testing.assert_array_equal(variable_layer(x).numpy(), layer(x).numpy())


def test_without_the_onednn_kernel_the_layer_says_so_in_one_line(monkeypatch):
    from cmlm_tf.export import int8_dense

    monkeypatch.setattr(int8_dense, "available", lambda: False)
    with pytest.raises(int8_dense.Int8Unavailable, match="TF_ENABLE_ONEDNN_OPTS=0"):
        Int8Dense(np.ones([4, 2], np.float32))
