"""Dual encoder: every side through one shared encoder call, split back per side."""

import numpy as np
import tensorflow as tf

from cmlm_tf.modeling import dual_encoder, sentence_encoder
from tests.conftest import random_token_inputs, tiny_encoder_config

VOCAB = 40


def _side(rows, seq=6, seed=0):
    return random_token_inputs(np.random.default_rng(seed), rows, VOCAB, seq)


class RecordingEncoder:
    """Pooled output = [Σ ids, Σ mask] per row; records the batch size of each call."""

    def __init__(self):
        self.calls = []

    def __call__(self, inputs, training=None):
        self.calls.append((int(inputs["input_word_ids"].shape[0]), training))
        pooled = tf.stack([tf.reduce_sum(inputs["input_word_ids"], 1),
                           tf.reduce_sum(inputs["input_mask"], 1)], axis=1)
        return {"pooled_output": tf.cast(pooled, tf.float32)}


def _expected(side):
    return np.stack([side["input_word_ids"].numpy().sum(1),
                     side["input_mask"].numpy().sum(1)], axis=1)


def test_sides_are_stacked_into_one_call_and_split_back_in_order():
    encoder = RecordingEncoder()
    features = {"source": _side(2, seed=1), "target": _side(2, seed=2),
                "hard_negatives": _side(4, seed=3), "source_id": tf.constant([7, 8])}
    out = dual_encoder.encode_pairs(encoder, features, training=True)
    assert encoder.calls == [(8, True)]
    assert set(out) == {"source", "target", "hard_negatives"}
    for key in out:
        np.testing.assert_array_equal(out[key].numpy(), _expected(features[key]))


def test_only_the_present_keys_are_embedded():
    encoder = RecordingEncoder()
    out = dual_encoder.encode_pairs(encoder, {"source": _side(3, seed=1),
                                              "target": _side(3, seed=2)})
    assert set(out) == {"source", "target"} and encoder.calls == [(6, None)]
    nli = {"premise": _side(2, seed=4), "hypothesis": _side(2, seed=5),
           "source": _side(2, seed=6)}
    out = dual_encoder.encode_pairs(encoder, nli, keys=("premise", "hypothesis"))
    assert set(out) == {"premise", "hypothesis"}
    np.testing.assert_array_equal(out["hypothesis"].numpy(), _expected(nli["hypothesis"]))


def test_dual_encoder_shares_one_encoder_for_every_side():
    model = dual_encoder.DualEncoder(tiny_encoder_config(VOCAB))
    assert set(model.checkpoint_items) == {"encoder"}
    assert isinstance(model.encoder, sentence_encoder.SentenceEncoder)
    features = {"source": _side(2, seed=1), "target": _side(2, seed=2),
                "hard_negatives": _side(3, seed=3),
                "source_id": tf.constant([1, 2], tf.int64)}
    out = model(features, training=False)
    assert {key: tuple(value.shape) for key, value in out.items()} == {
        "source": (2, 32), "target": (2, 32), "hard_negatives": (3, 32)}
    for key, value in out.items():  # each side as the encoder gives it alone
        alone = model.encoder(features[key], training=False)["pooled_output"]
        np.testing.assert_allclose(value.numpy(), alone.numpy(), atol=1e-5)
    # Not normalised: `pooled_output`, not `default`.
    assert not np.allclose(np.linalg.norm(out["source"].numpy(), axis=1), 1.0)
    # Identical inputs on both sides give identical vectors (one set of weights).
    same = model({"source": features["source"], "target": features["source"]})
    np.testing.assert_allclose(same["source"].numpy(), same["target"].numpy(), atol=1e-6)
    assert {id(v) for v in model.trainable_variables} == \
        {id(v) for v in model.encoder.trainable_variables}
