"""`Int8Dense`: int8 weights and activations through oneDNN's fused quantized matmul, over
activation ranges calibrated once."""

import numpy as np
import pytest
import tensorflow as tf
from scipy.special import erf

from cmlm_tf.export import int8_dense
from cmlm_tf.export.int8_dense import Int8Dense, Quantized, calibrated_range


def _weights(seed: int, rows: int = 48, columns: int = 40):
    rng = np.random.default_rng(seed)
    # Columns of very different sizes: each gets its own scale.
    kernel = (rng.standard_normal([rows, columns]) * rng.uniform(0.01, 2.0, [1, columns])
              ).astype(np.float32)
    return kernel, rng.standard_normal([columns]).astype(np.float32)


def _inputs(seed: int, shift: float = 0.0, rows: int = 16) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal([rows, 48]).astype(np.float32) + shift


def _cosines(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.fixture(scope="module")
def layer_and_weights():
    kernel, bias = _weights(0)
    layer = Int8Dense(kernel, bias)
    layer.calibrate(-4.0, 4.0)
    return layer, kernel, bias


@pytest.mark.parametrize("shift", [0.0, -3.0, 5.0])
def test_output_is_the_float_product_on_inputs_within_the_calibrated_range(shift):
    """Signed, all-positive and all-negative activations (the shift), calibrated on
    themselves: x @ W + b within int8 rounding, 2% of the largest output and a cosine of at
    least 0.999 per row; the float32 weights are dropped after calibration."""
    kernel, bias = _weights(0)
    layer = Int8Dense(kernel, bias)
    x = _inputs(1, shift)
    expected = x @ kernel + bias
    np.testing.assert_allclose(layer.observe(x), expected, rtol=1e-5, atol=1e-5)
    layer.finish_calibration()
    low, high = layer.input_range.numpy()
    assert low <= min(x.min(), 0.0) and high >= max(x.max(), 0.0)
    assert layer._float_weights is None
    actual = layer(tf.constant(x)).numpy()
    assert np.abs(actual - expected).max() <= 0.02 * np.abs(expected).max()
    assert _cosines(actual, expected).min() >= 0.999


def test_inputs_outside_the_calibrated_range_are_clipped_to_it(layer_and_weights):
    layer, kernel, bias = layer_and_weights
    x = _inputs(2) * 4.0  # about a third of the values beyond [-4, 4]
    assert np.abs(x).max() > 8.0
    clipped = np.clip(x, -4.0, 4.0) @ kernel + bias
    actual = layer(tf.constant(x)).numpy()
    assert np.abs(actual - clipped).max() <= 0.02 * np.abs(clipped).max()
    unclipped = x @ kernel + bias
    assert np.abs(actual - unclipped).max() > 0.2 * np.abs(unclipped).max()


def test_a_row_gives_the_same_output_alone_and_among_other_rows(layer_and_weights):
    """The range is fixed, not measured on the call: a row with a large value beside it
    does not change the others (with per-call ranges it coarsened their steps)."""
    layer, _, _ = layer_and_weights
    x = _inputs(3, rows=8) * 0.5
    together = layer(tf.constant(np.concatenate([x, 3.9 * np.ones([1, 48], np.float32)])))
    np.testing.assert_array_equal(together.numpy()[:8], layer(tf.constant(x)).numpy())
    np.testing.assert_array_equal(together.numpy()[:1], layer(tf.constant(x[:1])).numpy())


def test_activation_and_the_next_layers_quantization_run_in_the_kernel():
    """gelu(x @ W1 + b1) @ W2 + b2 with the GELU in the first kernel and its output
    handed to the second as uint8 over the second's calibrated range."""
    first_kernel, first_bias = _weights(4, 48, 64)
    second_kernel, second_bias = _weights(5, 64, 24)
    first, second = Int8Dense(first_kernel, first_bias), Int8Dense(second_kernel, second_bias)
    x = _inputs(6)

    def gelu(value):
        return 0.5 * value * (1.0 + erf(value / np.sqrt(2.0)))

    hidden = first.observe(x, gelu)
    expected = second.observe(hidden)
    first.finish_calibration()
    second.finish_calibration()
    handed = first(tf.constant(x), activation="gelu_exact", output_for=second)
    assert isinstance(handed, Quantized) and handed.values.dtype == tf.quint8
    actual = second(handed).numpy()
    assert np.abs(actual - expected).max() <= 0.03 * np.abs(expected).max()
    assert _cosines(actual, expected).min() >= 0.999


@pytest.mark.parametrize("low,high", [(-0.17, 6.0), (0.0, 3.0), (-2.0, -0.5), (1.0, 2.0),
                                      (0.0, 0.0)])
def test_a_calibrated_range_holds_zero_on_a_step(low, high):
    new_low, new_high = calibrated_range(low, high)
    assert new_low <= min(low, 0.0) + 1e-6 and new_high >= max(high, 0.0)
    assert new_high > new_low
    zero_point = -new_low * 255.0 / (new_high - new_low)
    assert abs(zero_point - round(zero_point)) < 1e-3 and 0 <= round(zero_point) <= 255


def test_weights_are_int8_and_edge_batches_work(layer_and_weights):
    layer, kernel, bias = layer_and_weights
    assert layer.kernel.dtype == np.int8 and layer.kernel.shape == kernel.shape
    assert np.abs(layer.kernel).max() == 127  # each column uses the full range
    assert layer(tf.zeros([0, 48])).shape == (0, 40)
    np.testing.assert_allclose(layer(tf.zeros([1, 48])).numpy()[0], bias, atol=1e-5)


def test_the_layer_and_its_range_survive_a_saved_model(layer_and_weights, tmp_path):
    layer, _, _ = layer_and_weights
    module = tf.Module()
    module.layer = layer
    module.call = tf.function(layer.__call__, input_signature=[tf.TensorSpec([None, 48])])
    tf.saved_model.save(module, str(tmp_path))
    x = _inputs(7, rows=5)
    loaded = tf.saved_model.load(str(tmp_path))
    np.testing.assert_array_equal(loaded.call(x).numpy(), layer(tf.constant(x)).numpy())
    # The kernel is a constant of the saved graph, not a variable; the range is saved.
    assert not hasattr(loaded.layer, "kernel") and hasattr(loaded.layer, "column_scale")
    np.testing.assert_array_equal(loaded.layer.input_range.numpy(), layer.input_range.numpy())


def test_a_kernel_kept_in_a_variable_gives_the_same_output(layer_and_weights):
    layer, kernel, bias = layer_and_weights
    variable_layer = Int8Dense(kernel, bias, constant_kernel=False)
    variable_layer.calibrate(-4.0, 4.0)
    assert isinstance(variable_layer.kernel, tf.Variable)
    np.testing.assert_array_equal(variable_layer.kernel.numpy(), layer.kernel)
    x = tf.constant(_inputs(8, rows=4))
    np.testing.assert_array_equal(variable_layer(x).numpy(), layer(x).numpy())


def test_an_uncalibrated_layer_says_so():
    layer = Int8Dense(*_weights(9))
    with pytest.raises(RuntimeError, match="calibrate it first"):
        layer(tf.zeros([2, 48]))
    with pytest.raises(ValueError, match="observed no input"):
        layer.finish_calibration()


def test_without_the_onednn_kernel_the_layer_says_so_in_one_line(monkeypatch):
    monkeypatch.setattr(int8_dense, "available", lambda: False)
    with pytest.raises(int8_dense.Int8Unavailable, match="TF_ENABLE_ONEDNN_OPTS=0"):
        Int8Dense(np.ones([4, 2], np.float32))
