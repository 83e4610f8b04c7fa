"""CMLM + bitext model: both objectives run through the one encoder of the CMLM model."""

import numpy as np
import tensorflow as tf

from cmlm_tf.modeling.cmlm_bitext import CMLMBitextModel
from cmlm_tf.modeling.conditional_mlm import ConditionalMLM
from tests.conftest import random_token_inputs, tiny_encoder_config

VOCAB, SEQ = 40, 6


def _side(rows, seed):
    return random_token_inputs(np.random.default_rng(seed), rows, VOCAB, SEQ)


def _inputs(*, with_bitext=True):
    inputs = {"cmlm": {"sentence1": _side(2, 1), "sentence2": _side(2, 2),
                       "masked_lm_positions": tf.constant([[1, 2], [1, 0]])}}
    if with_bitext:
        inputs["bitext"] = {"source": _side(3, 3), "target": _side(3, 4),
                            "source_id": tf.constant([1, 2, 3], tf.int64)}
    return inputs


def _model():
    config = tiny_encoder_config(VOCAB, num_layers=1, dropout_rate=0.0,
                                 attention_dropout_rate=0.0)
    return CMLMBitextModel(ConditionalMLM(config, num_projections=2))


def test_shares_the_cmlm_encoder_and_checkpoint_items():
    model = _model()
    assert model.encoder is model.cmlm.encoder
    assert model.checkpoint_items == model.cmlm.checkpoint_items
    assert set(model.checkpoint_items) == {"encoder", "projection", "mlm_head"}


def test_without_bitext_the_outputs_are_the_cmlm_outputs():
    model = _model()
    inputs = _inputs(with_bitext=False)
    out = model(inputs, training=False)
    assert set(out) == {"mlm_logits", "sentence_vector"}
    assert out["mlm_logits"].shape == (2, 2, VOCAB)
    reference = model.cmlm(inputs["cmlm"], training=False)
    for key in out:
        np.testing.assert_allclose(out[key].numpy(), reference[key].numpy(), atol=1e-6)


def test_bitext_pairs_are_embedded_by_the_shared_encoder():
    model = _model()
    inputs = _inputs()
    out = model(inputs, training=False)
    assert set(out) == {"mlm_logits", "sentence_vector", "bitext"}
    assert set(out["bitext"]) == {"source", "target"}
    for side in ("source", "target"):
        assert out["bitext"][side].shape == (3, 32)
        alone = model.cmlm.encoder(inputs["bitext"][side], training=False)["pooled_output"]
        np.testing.assert_allclose(out["bitext"][side].numpy(), alone.numpy(), atol=1e-5)
    # The sentence vector of the CMLM part is the same encoder on sentence1.
    sentence1 = model.encoder(inputs["cmlm"]["sentence1"], training=False)["pooled_output"]
    np.testing.assert_allclose(out["sentence_vector"].numpy(), sentence1.numpy(), atol=1e-5)


def test_both_losses_train_the_same_encoder_weights():
    model = _model()
    inputs = _inputs()
    with tf.GradientTape(persistent=True) as tape:
        out = model(inputs, training=True)
        mlm = tf.reduce_sum(out["mlm_logits"] ** 2)
        ranking = tf.reduce_sum(out["bitext"]["source"] * out["bitext"]["target"])
    embedding = model.encoder.bert.get_embedding_table()
    for loss in (mlm, ranking):
        grad = tape.gradient(loss, embedding)
        assert grad is not None
        assert float(tf.reduce_max(tf.abs(tf.convert_to_tensor(grad)))) > 0
    ids = {id(v) for v in model.trainable_variables}
    assert {id(v) for v in model.cmlm.trainable_variables} == ids
