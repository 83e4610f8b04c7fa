"""The KL term of a variational objective: a diagonal Gaussian posterior against N(0, I).

For a posterior q = N(m, diag(s²)) over a d-dimensional latent (the KL term of BGT's ELBO,
Wieting et al. 2020 §3; of any VAE, Kingma and Welling 2014, appendix B), in closed form

    KL(q || N(0, I)) = −1/2 Σ_d (1 + log s_d² − m_d² − s_d²)

The KL weight β is annealed (Bowman et al. 2016; BGT: linearly over 2^16 updates):
`kl_weight` rises linearly from 0 to 1 over the first `anneal_steps` training steps, so the
decoders learn to use the latent before the prior pulls it in.

Example:
    >>> gaussian_kl(tf.constant([[1.0, 0.0]]), tf.zeros([1, 2])).numpy()  # (m² = 1) / 2
    array([0.5], dtype=float32)
    >>> float(kl_weight(100, 400))
    0.25
"""

import tensorflow as tf


def gaussian_kl(mean: tf.Tensor, log_variance: tf.Tensor) -> tf.Tensor:
    """KL(N(mean, exp(log_variance)) || N(0, I)) = -1/2 sum(1 + log s^2 - m^2 - s^2).

    Args:
        mean, log_variance: float [batch, latent_dim].

    Returns:
        float32 [batch], summed over the latent dimensions (computed in float32, as every
        loss is under a mixed precision policy).
    """
    mean, log_variance = tf.cast(mean, tf.float32), tf.cast(log_variance, tf.float32)
    return -0.5 * tf.reduce_sum(
        1.0 + log_variance - tf.square(mean) - tf.exp(log_variance), axis=-1)


def kl_weight(step, anneal_steps: int) -> tf.Tensor:
    """beta, rising linearly from 0 at step 0 to 1 at `anneal_steps`, then 1 (scalar float)."""
    if anneal_steps <= 0:
        return tf.constant(1.0)
    step = tf.cast(step, tf.float32)
    return tf.minimum(step / float(anneal_steps), 1.0)
