"""`ServingModule` in process: tokenize, embeddings, signatures, describe, and input checks."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from cmlm_tf import configs
from cmlm_tf.export import serving, serving_forward
from cmlm_tf.modeling import sentence_encoder
from cmlm_tf.text import tokenization
from tests.conftest import tiny_encoder_config

SEQ_LENGTH = 8
SENTENCES = ["the man is playing a guitar", "a dog", "", "hello world !",
             "the woman is slicing an onion . the child is eating"]


@pytest.fixture(scope="module")
def built(tiny_vocab):
    """(module with sub-batches of 2 rows, its Keras encoder, the vocabulary list)."""
    vocab = tiny_vocab.read_text(encoding="utf-8").splitlines()
    tf_keras.utils.set_random_seed(5)
    encoder = sentence_encoder.build_sentence_encoder(tiny_encoder_config(len(vocab)))
    tokenizer = tokenization.build_tokenizer(configs.TokenizerConfig(vocab_file=str(tiny_vocab)))
    module = serving.ServingModule(serving_forward.InferenceForward(encoder), tokenizer,
                                   SEQ_LENGTH, bucket_rows=2)
    return module, encoder, vocab


def test_bucket_rows_must_be_positive(built):
    module, _, _ = built
    with pytest.raises(ValueError, match="bucket_rows must be at least 1, got 0"):
        serving.ServingModule(module.forward, module.tokenizer, SEQ_LENGTH, bucket_rows=0)


def test_describe_reports_what_the_model_computes(built):
    module, encoder, vocab = built
    info = {key: value.numpy() for key, value in module.describe().items()}
    assert info == {"dim": 32, "seq_length": SEQ_LENGTH, "vocab_size": len(vocab),
                    "num_attention_heads": 4, "pooling": b"mean",
                    "hidden_activation": b"gelu_exact", "precision": b"float32"}
    assert encoder.output_dim == 32


def test_tokenize_packs_cls_tokens_sep_truncated_to_seq_length(built):
    module, _, vocab = built
    tokens = {key: value.numpy() for key, value in
              module.tokenize(tf.constant(["The man", "a dog is running on the red car"]))
              .items()}
    cls, sep = vocab.index("[CLS]"), vocab.index("[SEP]")
    ids = [vocab.index(word) for word in "the man".split()]
    long = [vocab.index(word) for word in "a dog is running on the".split()]  # 8 − 2 kept
    np.testing.assert_array_equal(tokens["input_word_ids"],
                                  [[cls, *ids, sep, 0, 0, 0, 0], [cls, *long, sep]])
    np.testing.assert_array_equal(tokens["input_mask"], [[1] * 4 + [0] * 4, [1] * 8])
    np.testing.assert_array_equal(tokens["input_type_ids"], np.zeros([2, 8]))


def test_every_text_path_gives_the_normalised_encoder_output(built):
    module, encoder, _ = built
    tokens = module.tokenize(tf.constant(SENTENCES))
    pooled = encoder(tokens, training=False)["pooled_output"].numpy()
    expected = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    root = module(tf.constant(SENTENCES)).numpy()
    np.testing.assert_allclose(root, expected, atol=2e-5)
    np.testing.assert_allclose(np.linalg.norm(root, axis=1), 1.0, rtol=1e-5)
    signatures = module.signatures()
    assert set(signatures) == set(serving.SIGNATURES)
    by_text = signatures["serving_default"](tf.constant(SENTENCES))
    by_ids = signatures["from_token_ids"](**tokens)
    for name, out in (("serving_default", by_text), ("from_token_ids", by_ids)):
        assert list(out) == serving.SIGNATURES[name][1]
        np.testing.assert_allclose(out["embeddings"].numpy(), expected, atol=2e-5)
    # The loader's functions: not normalised; in one forward or in buckets of 2 rows.
    for function in (module.pooled_float32, module.bucketed_float32):
        np.testing.assert_allclose(function(**tokens).numpy(), pooled, atol=2e-5)
    np.testing.assert_allclose(module.pooled_bfloat16(**tokens).numpy(), pooled, atol=5e-2)
    assert module(tf.constant([], tf.string)).shape == (0, 32)


def test_checked_sentences_refuses_anything_but_a_vector():
    vector = tf.constant(["a", "b"])
    np.testing.assert_array_equal(serving._checked_sentences(vector).numpy(), vector.numpy())

    @tf.function(input_signature=[tf.TensorSpec(None, tf.string, name="sentences")])
    def check(sentences):
        return serving._checked_sentences(sentences)

    assert check(vector).shape == (2,)
    for bad in (tf.constant("a"), tf.constant([["a", "b"]])):
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"sentences .* is not compatible with expected shape \[\?\]"):
            check(bad)


def test_require_raises_with_its_message_only_when_false():
    @tf.function
    def guarded(condition):
        with tf.control_dependencies([serving._require(condition, "x must be positive")]):
            return tf.constant(1)

    assert int(guarded(tf.constant(True))) == 1
    with pytest.raises(tf.errors.InvalidArgumentError, match="x must be positive"):
        guarded(tf.constant(False))


@pytest.mark.parametrize("change, message", [
    (dict(input_mask=tf.ones([2, 3], tf.int32)), "input_mask must have the shape of"),
    (dict(input_type_ids=tf.zeros([1, 4], tf.int32)), "input_type_ids must have the shape of"),
    (dict(input_word_ids=tf.constant([[2, 5, 3, 9999], [2, 3, 0, 0]])),
     r"input_word_ids has an id outside \[0, \d+\)"),
    (dict(input_word_ids=-tf.ones([2, 4], tf.int32)), "input_word_ids has an id outside"),
    (dict(input_type_ids=tf.fill([2, 4], 2)), r"input_type_ids has an id outside \[0, 2\)"),
])
def test_token_id_checks_name_the_bad_input(built, change, message):
    module, _, _ = built
    inputs = {"input_word_ids": tf.constant([[2, 5, 3, 0], [2, 3, 0, 0]]),
              "input_mask": tf.constant([[1, 1, 1, 0], [1, 1, 0, 0]]),
              "input_type_ids": tf.zeros([2, 4], tf.int32)}
    assert module.from_token_ids(**inputs)["embeddings"].shape == (2, 32)
    for function in (module.from_token_ids, module.pooled_float32):
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            function(**{**inputs, **change})


def test_token_ids_longer_than_the_positions_are_refused(built):
    module, _, _ = built
    ids = tf.ones([1, 65], tf.int32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="longer than the 64 positions"):
        module.from_token_ids(ids, ids, ids * 0)
