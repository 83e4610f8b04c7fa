"""`PairClassifierHead`: [u, v, |u - v|, u * v] features, linear and MLP heads, config."""

import numpy as np

from cmlm_tf.modeling import pair_classifier


def test_head_classifies_exactly_u_v_absdiff_product():
    rng = np.random.default_rng(0)
    u = rng.normal(size=(5, 4)).astype(np.float32)
    v = rng.normal(size=(5, 4)).astype(np.float32)
    expected = np.concatenate([u, v, np.abs(u - v), u * v], axis=-1)
    np.testing.assert_array_equal(pair_classifier.pair_features(u, v).numpy(), expected)

    linear = pair_classifier.PairClassifierHead(hidden_sizes=[])
    logits = linear(u, v).numpy()
    kernel, bias = (w.numpy() for w in linear.output_layer.weights)
    assert kernel.shape == (16, 3)
    np.testing.assert_allclose(logits, expected @ kernel + bias, rtol=1e-5, atol=1e-6)

    mlp = pair_classifier.PairClassifierHead(hidden_sizes=[256], dropout_rate=0.1)
    assert mlp(u, v).shape == (5, 3)
    assert [w.shape for w in mlp.trainable_weights] == [(16, 256), (256,), (256, 3), (3,)]
    restored = pair_classifier.PairClassifierHead.from_config(mlp.get_config())
    assert restored.hidden_sizes == [256] and restored.dropout_rate == 0.1
