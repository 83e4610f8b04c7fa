"""The export's checks of the forwards it saves (the float32 one against the encoder:
tests/export/test_serving.py::test_export_refuses_a_forward_that_disagrees)."""

import numpy as np
import pytest
import tensorflow as tf

from cmlm_tf.export import forward_checks


class FakeModule:
    """A serving module's tokenize and pooled functions, with fixed vectors."""

    def __init__(self, precision: str, vectors: np.ndarray):
        self.precision = precision
        self.vectors = tf.constant(vectors, tf.float32)

    def tokenize(self, sentences):
        return {"input_word_ids": tf.zeros([tf.shape(sentences)[0], 2], tf.int32)}

    def pooled_float32(self, **tokens):
        return self.vectors

    def pooled_bfloat16(self, **tokens):
        return self.vectors


def test_check_precision_returns_the_lowest_cosine_and_refuses_another_computation():
    rng = np.random.default_rng(0)
    reference = rng.standard_normal([len(forward_checks.PROBE_TEXTS), 8])
    close = reference + 0.01 * rng.standard_normal(reference.shape)
    cosine = forward_checks.check_precision(FakeModule("float32", reference),
                                            FakeModule("bfloat16", close))
    assert 0.99 < cosine < 1.0
    with pytest.raises(RuntimeError, match="bfloat16 forward's vectors have cosine"):
        forward_checks.check_precision(FakeModule("float32", reference),
                                       FakeModule("bfloat16", -reference))
