"""The conditional MLM model (`cmlm_tf.modeling.conditional_mlm`): the projection of the
conditioning sentence's vector."""

import numpy as np
import tensorflow as tf

from cmlm_tf.modeling import conditional_mlm


def test_projection_has_n_outputs_one_equal_to_v():
    layer = conditional_mlm.ConditionalProjection(hidden_size=8, num_projections=5)
    v = tf.random.normal([3, 8])
    out = layer(v).numpy()
    assert out.shape == (3, 5, 8)
    np.testing.assert_array_equal(out[:, 0], v.numpy())
    assert np.abs(out[:, 1:] - v.numpy()[:, None]).max() > 1e-3
    assert conditional_mlm.ConditionalProjection(8, 1)(v).shape == (3, 1, 8)
