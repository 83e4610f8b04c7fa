"""The checks an export makes of the forwards it saves, on a few probe texts, before it
writes them: the float32 inference forward against the Keras encoder it was built from
(`check_forward`), and each other precision's forward against float32's
(`check_precision`)."""

import numpy as np

from cmlm_tf.vectors import l2_normalize_array

# The inference forward must reproduce the Keras encoder's pooled output within this, or
# the export stops (a layout the forward does not read correctly).
FORWARD_TOLERANCE = 1e-4
# A bfloat16 or int8 serving model whose vectors fall below this cosine to float32's on the
# probe texts is not written: its forward computes something else.
PRECISION_MIN_COSINE = 0.95

PROBE_TEXTS = ["A man is playing a guitar.", "", "Un hombre toca la guitarra en la calle.",
               "hello world " * 40]


def check_forward(encoder, module) -> float:
    """Largest |forward - encoder| pooled difference on probe texts, relative to the
    encoder's largest value; raises if above `FORWARD_TOLERANCE`."""
    import tensorflow as tf

    tokens = module.tokenize(tf.constant(PROBE_TEXTS))
    expected = encoder(tokens, training=False)["pooled_output"].numpy()
    actual = module.pooled_float32(**tokens).numpy()
    error = float(np.abs(actual - expected).max() / max(np.abs(expected).max(), 1e-6))
    if not error <= FORWARD_TOLERANCE:
        raise RuntimeError(f"the inference forward differs from the encoder by {error:.2e} "
                           f"(relative; at most {FORWARD_TOLERANCE} allowed): this encoder "
                           "layout is not one cmlm_tf.export.serving_forward reads")
    return error


def check_precision(reference, module) -> float:
    """Lowest cosine, on probe texts, between `module`'s vectors (its own precision) and
    `reference`'s float32 ones; raises if below `PRECISION_MIN_COSINE`."""
    import tensorflow as tf

    tokens = reference.tokenize(tf.constant(PROBE_TEXTS))
    expected = reference.pooled_float32(**tokens).numpy()
    actual = getattr(module, f"pooled_{module.precision}")(**tokens).numpy()
    lowest = float((l2_normalize_array(expected) * l2_normalize_array(actual)).sum(1).min())
    if not lowest >= PRECISION_MIN_COSINE:
        raise RuntimeError(f"the {module.precision} forward's vectors have cosine {lowest:.4f} "
                           f"to float32's (at least {PRECISION_MIN_COSINE} expected)")
    return lowest
