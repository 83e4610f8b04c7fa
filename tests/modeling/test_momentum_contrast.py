"""Dual momentum contrast model: key encoders as EMA copies, scores, queues, per-side encoders."""

import numpy as np
import pytest
import tensorflow as tf

from cmlm_tf.modeling.momentum_contrast import DualMomentumContrast, _matched_weights
from tests.conftest import MOCO_VOCAB_SIZE, moco_batch, tiny_encoder_config

CONFIG = tiny_encoder_config(MOCO_VOCAB_SIZE, hidden_size=16, num_layers=1,
                             num_attention_heads=2, intermediate_size=32,
                             max_position_embeddings=16)


def _by_path(encoder):
    return {w.name.split("/", 1)[-1]: w.numpy() for w in encoder.weights}


def _assert_same_weights(a, b):
    a, b = _by_path(a), _by_path(b)
    assert a.keys() == b.keys()
    for path in a:
        np.testing.assert_array_equal(a[path], b[path], err_msg=path)


def _normalized(encoder, side):
    pooled = encoder(side, training=False)["pooled_output"].numpy()
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def test_momentum_outside_zero_one_is_an_error():
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\], got 1.5"):
        DualMomentumContrast(CONFIG, queue_size=8, momentum=1.5)
    with pytest.raises(ValueError, match="got -0.1"):
        DualMomentumContrast(CONFIG, queue_size=8, momentum=-0.1)


def test_key_encoders_start_as_frozen_copies_of_their_query_encoders():
    model = DualMomentumContrast(CONFIG, queue_size=8, shared_encoder=False)
    assert set(model.checkpoint_items) == {"encoder", "target_encoder"}
    _assert_same_weights(model.key_encoder, model.encoder)
    _assert_same_weights(model.target_key_encoder, model.target_encoder)
    assert not model.key_encoder.trainable_weights
    assert not model.target_key_encoder.trainable_weights
    trainable = {id(v) for v in model.trainable_variables}
    assert {id(v) for v in model.encoder.trainable_weights} <= trainable
    assert not trainable & {id(v) for v in model.key_encoder.weights}
    # The two query encoders start apart; `copy_encoder_to_target` makes them equal.
    assert not np.array_equal(model.encoder.bert.get_embedding_table().numpy(),
                              model.target_encoder.bert.get_embedding_table().numpy())
    model.copy_encoder_to_target()
    _assert_same_weights(model.target_encoder, model.encoder)
    shared = DualMomentumContrast(CONFIG, queue_size=8)
    assert set(shared.checkpoint_items) == {"encoder"} and len(shared.encoder_pairs()) == 1


def test_a_training_call_moves_keys_by_the_ema_formula():
    momentum = 0.7
    model = DualMomentumContrast(CONFIG, queue_size=8, momentum=momentum)
    rng = np.random.default_rng(0)
    for variable in model.encoder.weights:  # the query moves somewhere unrelated
        variable.assign(rng.normal(size=variable.shape).astype(np.float32))
    keys_before, queries = _by_path(model.key_encoder), _by_path(model.encoder)
    model(moco_batch(4, seed=1), training=True)
    keys_after = _by_path(model.key_encoder)
    for path, query in queries.items():
        expected = momentum * keys_before[path] + (1 - momentum) * query
        np.testing.assert_allclose(keys_after[path], expected, rtol=1e-5, atol=1e-6,
                                   err_msg=path)
    model(moco_batch(4, seed=2), training=False)  # evaluation moves nothing
    for path, value in _by_path(model.key_encoder).items():
        np.testing.assert_array_equal(value, keys_after[path])
    model.reset_key_encoders()
    _assert_same_weights(model.key_encoder, model.encoder)


def test_scores_use_the_key_encoder_for_positives_and_the_queue_for_negatives():
    model = DualMomentumContrast(CONFIG, queue_size=6, momentum=1.0, mask_duplicates=False)
    for variable in model.encoder.trainable_weights:  # queries and keys now differ
        variable.assign_add(tf.fill(variable.shape, 0.05))
    first, second = moco_batch(4, seed=1), moco_batch(4, seed=2, first_id=10)
    keys = {side: _normalized(model.key_encoder, first[side]) for side in ("source", "target")}
    # Momentum 1 keeps the keys; dropout is on in training, but never for the keys.
    out = model(first, training=True)
    np.testing.assert_allclose(np.linalg.norm(out["source"].numpy(), axis=1), 1.0, rtol=1e-5)
    assert float(out["queue_fill"]) == 0.0 and not out["negative_mask"].numpy().any()
    np.testing.assert_allclose(model.source_queue.keys.numpy()[:4], keys["source"], atol=1e-5)
    np.testing.assert_allclose(model.target_queue.keys.numpy()[:4], keys["target"], atol=1e-5)

    out = model(second, training=False)
    queries = {side: _normalized(model.encoder, second[side]) for side in ("source", "target")}
    second_keys = {side: _normalized(model.key_encoder, second[side])
                   for side in ("source", "target")}
    assert not np.allclose(queries["target"], second_keys["target"], atol=1e-3)
    np.testing.assert_allclose(out["source"].numpy(), queries["source"], atol=1e-5)
    np.testing.assert_allclose(out["source_to_target_positive"].numpy(),
                               (queries["source"] * second_keys["target"]).sum(1), atol=1e-5)
    np.testing.assert_allclose(out["target_to_source_positive"].numpy(),
                               (queries["target"] * second_keys["source"]).sum(1), atol=1e-5)
    target_queue = model.target_queue.keys.numpy()
    np.testing.assert_allclose(out["source_to_target_negatives"].numpy(),
                               queries["source"] @ target_queue.T, atol=1e-5)
    np.testing.assert_allclose(out["target_to_source_negatives"].numpy(),
                               queries["target"] @ model.source_queue.keys.numpy().T,
                               atol=1e-5)
    assert float(out["queue_fill"]) == pytest.approx(4 / 6)
    # Without duplicate masking the mask is just the filled slots, for every row.
    np.testing.assert_array_equal(out["negative_mask"].numpy(),
                                  np.tile([True] * 4 + [False] * 2, (4, 1)))
    assert int(model.source_queue.queue_count.numpy()) == 4  # evaluation enqueues nothing


def test_separate_encoders_embed_each_side_with_its_own():
    model = DualMomentumContrast(CONFIG, queue_size=8, shared_encoder=False)
    batch = moco_batch(3, seed=4)
    out = model(batch, training=False)
    np.testing.assert_allclose(out["source"].numpy(), _normalized(model.encoder,
                                                                  batch["source"]), atol=1e-5)
    np.testing.assert_allclose(out["target"].numpy(),
                               _normalized(model.target_encoder, batch["target"]), atol=1e-5)
    np.testing.assert_allclose(out["source_to_target_positive"].numpy(),
                               (_normalized(model.encoder, batch["source"])
                                * _normalized(model.target_key_encoder, batch["target"])).sum(1),
                               atol=1e-5)


def test_encoders_of_different_shapes_cannot_be_matched():
    model = DualMomentumContrast(CONFIG, queue_size=4)
    deeper = DualMomentumContrast(CONFIG.replace(num_layers=2), queue_size=4)
    with pytest.raises(ValueError, match="do not have the same variables"):
        _matched_weights(deeper.key_encoder, model.encoder)
