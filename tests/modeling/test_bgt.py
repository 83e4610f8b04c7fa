"""BGT model: the decoders' targets and latents, ablations, deterministic encoding."""

import numpy as np
import pytest
import tensorflow as tf

from cmlm_tf import configs
from cmlm_tf.modeling import bgt


def tiny_config(vocab_size: int = 50) -> configs.EncoderConfig:
    return configs.EncoderConfig(
        vocab_size=vocab_size, hidden_size=16, num_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16, projection_size=8,
        dropout_rate=0.1, attention_dropout_rate=0.1)



def sentences(first_ids, length: int = 6):
    """A batch packed like `BitextFeaturizer` output: `[CLS]` = 2, `[SEP]` = 3, pad 0."""
    rows = []
    for first in first_ids:
        rows.append([2] + [first + i for i in range(length - 3)] + [3, 0])
    ids = tf.constant(rows, tf.int32)
    return {"input_word_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32),
            "input_type_ids": tf.zeros_like(ids)}



def test_decoders_predict_their_own_language_from_the_intended_latents():
    tf.random.set_seed(0)
    model = bgt.build_bgt(tiny_config())
    source, target = sentences([10, 11]), sentences([30, 31])
    outputs = model({"source": source, "target": target}, training=False)
    decoders = outputs["decoders"]
    assert set(decoders) == set(bgt.RECONSTRUCTION_DECODERS + bgt.TRANSLATION_DECODERS)
    source_next = source["input_word_ids"][:, 1:].numpy()
    target_next = target["input_word_ids"][:, 1:].numpy()
    for name in ("source_reconstruction", "target_to_source"):
        np.testing.assert_array_equal(decoders[name]["targets"], source_next)
    for name in ("target_reconstruction", "source_to_target"):
        np.testing.assert_array_equal(decoders[name]["targets"], target_next)
    np.testing.assert_array_equal(decoders["source_to_target"]["weights"],
                                  target["input_mask"][:, 1:])
    assert outputs["semantic_from_source"].numpy().tolist() == [True, False]

    # Another Spanish side, same English: the English reconstruction of row 0 (z_sem from
    # English) is unchanged, row 1's (z_sem from Spanish) moves; English -> Spanish
    # translation reads its latent from English only, so only its decoder input changed.
    other = model({"source": source, "target": sentences([40, 41])}, training=False)
    logits = decoders["source_reconstruction"]["logits"].numpy()
    moved = other["decoders"]["source_reconstruction"]["logits"].numpy()
    np.testing.assert_allclose(moved[0], logits[0], atol=1e-6)
    assert np.abs(moved[1] - logits[1]).max() > 1e-4
    np.testing.assert_allclose(other["semantic"]["source"]["mean"],
                               outputs["semantic"]["source"]["mean"], atol=1e-6)
    # Another English side: the English -> Spanish decoder (same Spanish input) changes.
    third = model({"source": sentences([20, 21]), "target": target}, training=False)
    assert np.abs(third["decoders"]["source_to_target"]["logits"].numpy()
                  - decoders["source_to_target"]["logits"].numpy()).max() > 1e-4



def test_ablations_drop_what_they_say():
    tf.random.set_seed(0)
    pair = {"source": sentences([10, 11]), "target": sentences([30, 31])}
    no_language = bgt.build_bgt(tiny_config(), language_variables=False)(pair)
    assert "language" not in no_language and "language_source" not in no_language["kl"]
    translation_only = bgt.build_bgt(tiny_config(), reconstruction=False)(pair)
    assert set(translation_only["decoders"]) == set(bgt.TRANSLATION_DECODERS)
    with pytest.raises(ValueError, match="projection_size"):
        bgt.build_bgt(tiny_config().replace(projection_size=0))



def test_encoding_is_deterministic_at_inference_and_sampled_in_training():
    tf.random.set_seed(0)
    model = bgt.build_bgt(tiny_config())
    pair = {"source": sentences([10, 11]), "target": sentences([30, 31])}
    first, second = model.encode(pair["source"]), model.encode(pair["source"])
    np.testing.assert_array_equal(first, second)
    eval_outputs = model(pair, training=False)
    np.testing.assert_allclose(eval_outputs["semantic"]["source"]["mean"], first, atol=1e-6)
    # Outside training the decoders read the posterior means: two passes agree exactly.
    for name, decoder in eval_outputs["decoders"].items():
        np.testing.assert_array_equal(
            decoder["logits"], model(pair, training=False)["decoders"][name]["logits"])
    # The exported item is the semantic encoder with its mean head.
    exported = model.checkpoint_items["encoder"](pair["source"], training=False)
    np.testing.assert_allclose(exported["pooled_output"], first, atol=1e-6)
    np.testing.assert_allclose(tf.norm(exported["default"], axis=-1), 1.0, rtol=1e-5)
    # Training samples z: two training passes decode from different latents.
    a = model(pair, training=True)["decoders"]["source_to_target"]["logits"]
    b = model(pair, training=True)["decoders"]["source_to_target"]["logits"]
    assert np.abs(a.numpy() - b.numpy()).max() > 1e-4
