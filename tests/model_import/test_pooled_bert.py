"""Tests of `cmlm_tf.model_import.pooled_bert`: the fields of a BERT whose sentence vector is
its pooled output, casing read from a vocabulary, Model Garden's variable names, and an
encoder refused without its pooler."""

import numpy as np
import pytest
import tensorflow as tf

from cmlm_tf.model_import import pooled_bert


def test_the_pooled_output_is_cls_then_the_tanh_pooler():
    fields = pooled_bert.encoder_fields(hidden_size=32, num_layers=2)
    assert fields == {"pooling": "cls", "projection_size": 32, "projection_activation": "tanh",
                      "normalize": False, "hidden_size": 32, "num_layers": 2}
    meta = pooled_bert.import_meta(fields, lower_case=True)
    assert (meta["tokenizer_type"], meta["lower_case"], meta["max_seq_length"],
            meta["position_offset"]) == ("wordpiece", True, None, 0)


def test_casing_comes_from_capitalised_tokens_outside_brackets():
    assert pooled_bert.is_uncased(["[PAD]", "[UNK]", "the", "##s"])
    assert not pooled_bert.is_uncased(["[PAD]", "The", "##s"])


def test_model_garden_names_drop_the_scope_and_the_pooler_splits_off():
    with tf.name_scope("outer"):
        variables = [tf.Variable(np.ones(2, np.float32), name=name) for name in (
            "bert/word_embeddings/embeddings", "bert/transformer/layer_0/output/bias",
            "bert/pooler_transform/kernel", "bert/pooler_transform/bias", "global_step")]
    named = pooled_bert.model_garden_names(variables)
    assert sorted(named) == ["pooler_transform/bias", "pooler_transform/kernel",
                             "transformer/layer_0/output/bias", "word_embeddings/embeddings"]
    rest, pooler = pooled_bert.split_pooler(named)
    assert sorted(rest) == ["transformer/layer_0/output/bias", "word_embeddings/embeddings"]
    assert sorted(pooler) == ["bias", "kernel"]


def test_an_encoder_without_its_pooler_is_refused():
    with pytest.raises(ValueError, match="src: no pooler .* the pooled output cannot be "
                                         "reproduced"):
        pooled_bert.build_pooled_encoder({}, {}, {"kernel": np.zeros(1)}, "src")
