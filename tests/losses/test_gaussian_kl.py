"""`gaussian_kl` and `kl_weight`: the closed-form KL against N(0, I) and its annealing."""

import math

import numpy as np
import pytest
import tensorflow as tf

from cmlm_tf.losses import gaussian_kl


def test_kl_weight_rises_linearly_then_stays_at_one():
    values = [float(gaussian_kl.kl_weight(step, 400)) for step in (0, 100, 200, 400, 10_000)]
    assert values == pytest.approx([0.0, 0.25, 0.5, 1.0, 1.0])
    assert float(gaussian_kl.kl_weight(7, 0)) == 1.0



def test_gaussian_kl_equals_closed_form():
    # N((2, 0), diag(1, 4)) against N(0, I): 1/2 * 2^2 + 1/2 * (4 - 1 - log 4).
    mean = tf.constant([[2.0, 0.0], [0.0, 0.0]])
    log_variance = tf.constant([[0.0, math.log(4.0)], [0.0, 0.0]])
    kl = gaussian_kl.gaussian_kl(mean, log_variance).numpy()
    np.testing.assert_allclose(kl, [2.0 + 0.5 * (3.0 - math.log(4.0)), 0.0], rtol=1e-6)
    # And a Monte-Carlo estimate of E_q[log q - log p] agrees.
    rng = np.random.default_rng(0)
    std = np.array([1.0, 2.0])
    z = np.array([2.0, 0.0]) + std * rng.standard_normal((200_000, 2))
    log_q = -0.5 * (((z - [2.0, 0.0]) / std) ** 2) - np.log(std)
    log_p = -0.5 * z ** 2
    assert abs((log_q - log_p).sum(axis=1).mean() - kl[0]) < 0.02
