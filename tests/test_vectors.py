"""L2 normalisation: of tensors (`l2_normalize`: unit rows along the last axis, zero rows
kept, the dtype argument) and of NumPy arrays (`l2_normalize_array`, `unit_rows`)."""

import numpy as np
import pytest
import tensorflow as tf

from cmlm_tf.vectors import EPSILON, l2_normalize, l2_normalize_array, unit_rows


def test_rows_get_unit_norm_along_the_last_axis():
    x = np.random.default_rng(0).normal(size=(2, 3, 5)).astype(np.float32) * 7
    out = l2_normalize(tf.constant(x)).numpy()
    assert out.shape == x.shape and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(out, x / np.linalg.norm(x, axis=-1, keepdims=True), rtol=1e-5)


def test_zero_rows_stay_zero_and_tiny_rows_are_bounded_by_epsilon():
    x = tf.constant([[3.0, 4.0], [0.0, 0.0], [1e-7, 0.0]])
    out = l2_normalize(x).numpy()
    np.testing.assert_allclose(out[0], [0.6, 0.8], rtol=1e-6)
    np.testing.assert_array_equal(out[1], [0.0, 0.0])
    assert not np.isnan(out).any()
    # Squared norm 1e-14 < ε: divided by sqrt(ε) = 1e-6, not by the norm.
    np.testing.assert_allclose(out[2], [1e-7 / np.sqrt(EPSILON), 0.0], rtol=1e-5)
    np.testing.assert_allclose(l2_normalize(x, epsilon=1e-20).numpy()[2], [1.0, 0.0],
                               rtol=1e-5)


def test_dtype_casts_first_and_none_keeps_the_input_dtype():
    x = tf.constant([[3.0, 4.0], [1.0, 0.0]], tf.float16)
    assert l2_normalize(x).dtype == tf.float16
    out = l2_normalize(x, dtype=tf.float32)
    assert out.dtype == tf.float32
    np.testing.assert_allclose(out.numpy(), [[0.6, 0.8], [1.0, 0.0]], rtol=1e-6)
    assert l2_normalize(tf.cast(x, tf.bfloat16), tf.float64).dtype == tf.float64


def test_arrays_get_unit_rows_in_their_own_dtype_with_zero_rows_kept():
    x = np.random.default_rng(1).normal(size=(2, 3, 5)) * 7
    out = l2_normalize_array(x)
    assert out.shape == x.shape and out.dtype == np.float64
    np.testing.assert_allclose(out, x / np.linalg.norm(x, axis=-1, keepdims=True), rtol=1e-12)
    rows = l2_normalize_array(np.array([[3.0, 4.0], [0.0, 0.0]], np.float32))
    assert rows.dtype == np.float32
    np.testing.assert_array_equal(rows, np.array([[0.6, 0.8], [0.0, 0.0]], np.float32))


def test_unit_rows_keeps_unit_input_uncopied_and_checks_the_matrix():
    unit = l2_normalize_array(np.random.default_rng(2).normal(size=(4, 3)).astype(np.float32))
    assert unit_rows(unit) is unit
    counts = unit_rows(np.array([[3, 4], [0, 0]]))
    assert counts.dtype == np.float32
    np.testing.assert_allclose(counts, [[0.6, 0.8], [0.0, 0.0]], rtol=1e-6)
    assert unit_rows(np.array([[2.0, 0.0]])).dtype == np.float64
    with pytest.raises(ValueError, match=r"expected a \[n, dim\] matrix, got shape \(3,\)"):
        unit_rows(np.ones(3))
