"""The fast `encode()` path: length buckets, order, bfloat16 and thread settings."""

import numpy as np
import pytest

import cmlm_tf
from cmlm_tf import inference

TEXTS = [
    "the dog",
    "a man is riding a horse on the red house",
    "hello",
    "the woman is slicing an onion . the man is playing a guitar . the child is eating",
    "blue car",
    "a cat is running in the house at night with the dog and the horse",
    "good day",
    "the snake is eating a mouse",
    "",
]
# bfloat16 keeps 8 significant bits: tiny-model vectors agree with float32 within this.
BF16_ATOL = 2e-2


@pytest.fixture(scope="module")
def fp32_model(tiny_export):
    return cmlm_tf.load(str(tiny_export), jit_compile=True)


def reference_vectors(model, texts, key):
    """The saved functions in one call for all texts: `serving_default` for `embeddings`
    (which cuts the request into its own length buckets in the graph), tokenize + the plain
    float32 forward, padded to the longest text, for `pooled_output`."""
    import tensorflow as tf

    serving = model._serving
    if key == "embeddings":
        return serving.signatures["serving_default"](
            sentences=tf.constant(texts))["embeddings"].numpy()
    return serving.pooled_float32(**serving.tokenize(tf.constant(texts))).numpy()


def test_bucketed_output_equals_unbucketed_signature(fp32_model):
    for normalize, key in ((True, "embeddings"), (False, "pooled_output")):
        vectors = fp32_model.encode(TEXTS, batch_size=3, normalize=normalize)
        np.testing.assert_allclose(vectors, reference_vectors(fp32_model, TEXTS, key),
                                   atol=2e-5)
    # Several batches fell in different buckets; each bucket traced once, then reused.
    assert len({length for _, length in fp32_model._graphs}) >= 2
    graphs = dict(fp32_model._graphs)
    fp32_model.encode(TEXTS, batch_size=3)
    assert fp32_model._graphs == graphs


def test_input_order_is_preserved(fp32_model):
    permutation = np.random.default_rng(0).permutation(len(TEXTS))
    vectors = fp32_model.encode(TEXTS, batch_size=2)
    shuffled = fp32_model.encode([TEXTS[i] for i in permutation], batch_size=2)
    np.testing.assert_allclose(shuffled, vectors[permutation], atol=2e-5)
    # Each row is its own text's vector, as one call of the signature gives it.
    np.testing.assert_allclose(vectors, reference_vectors(fp32_model, TEXTS, "embeddings"),
                               atol=2e-5)
    # Distinct texts get distinct vectors, so a reordering could not go unnoticed.
    assert np.abs(vectors[0] - vectors[1]).max() > 1e-3


def test_length_buckets_in_the_graph_equal_one_text_at_a_time(tiny_export):
    """The default path: each batch runs `bucketed_float32`, which sorts it again and runs
    it in sub-batches of 8 rows padded to their own longest text."""
    model = cmlm_tf.load(str(tiny_export))
    calls = []
    bucketed = model._bucketed
    model._bucketed = lambda *ids: calls.append(ids[0].shape) or bucketed(*ids)
    alone = {text: model.encode(text) for text in TEXTS}
    same_length = ["the dog", "a cat", "blue car", "good day", "the house"] * 4
    alone.update({text: model.encode([text])[0] for text in same_length})
    one_long = ["hello"] * 9 + [TEXTS[3]] + ["blue car", "the dog"] * 5
    for texts in (TEXTS * 3, same_length, one_long):
        expected = np.stack([alone[text] for text in texts])
        for batch_size in (64, 7):
            vectors = model.encode(texts, batch_size=batch_size)
            assert (vectors * expected).sum(axis=1).min() >= 0.99999, (texts, batch_size)
    # Each batch went to the graph whole, trimmed to its longest text but not padded.
    assert calls[-1] == (len(one_long) - 14, 3) and (27, 12) in calls  # 3: [CLS] hello [SEP]
    assert model.encode([]).shape == (0, 32)


def test_bfloat16_within_tolerance_of_float32(tiny_export, fp32_model):
    model = cmlm_tf.load(str(tiny_export), precision="bfloat16")
    assert model.precision == "bfloat16" and not model.jit_compile
    vectors = model.encode(TEXTS, batch_size=4)
    assert vectors.dtype == np.float32
    reference = fp32_model.encode(TEXTS, batch_size=4)
    np.testing.assert_allclose(vectors, reference, atol=BF16_ATOL)
    assert (vectors * reference).sum(axis=1).min() > 0.999


def test_graph_mode_without_xla_matches(tiny_export, fp32_model):
    model = cmlm_tf.load(str(tiny_export), jit_compile=False)
    np.testing.assert_allclose(model.encode(TEXTS), fp32_model.encode(TEXTS), atol=2e-5)


def test_bad_precision_names_the_choices(tiny_export):
    with pytest.raises(ValueError, match="bfloat16"):
        cmlm_tf.load(str(tiny_export), precision="float16")


def test_thread_settings_after_start_are_reported_not_applied(tiny_export, fp32_model):
    import tensorflow as tf

    current = tf.config.threading.get_intra_op_parallelism_threads()
    model = cmlm_tf.load(str(tiny_export), intra_op_threads=current)
    assert model.threads["applied"]
    with pytest.warns(RuntimeWarning, match="not applied"):
        model = cmlm_tf.load(str(tiny_export), intra_op_threads=current + 3)
    assert model.threads == {"intra_op_threads": current + 3, "inter_op_threads": None,
                             "applied": False}


def test_buckets():
    assert [inference.bucket_length(n, 256) for n in (1, 8, 9, 64, 65, 129, 300)] == \
        [8, 8, 16, 64, 80, 160, 256]
    assert inference.bucket_length(13, 12) == 12
    assert [inference.bucket_rows(n, 64) for n in (1, 3, 64)] == [1, 4, 64]
    assert inference.bucket_rows(40, 48) == 48
