"""Batches of similar length: the padded shapes of a batch, and rows back in input order."""

import numpy as np

from cmlm_tf.text import batching


def test_buckets():
    assert [batching.bucket_length(n, 256) for n in (1, 8, 9, 64, 65, 129, 300)] == \
        [8, 8, 16, 64, 80, 160, 256]
    assert batching.bucket_length(13, 12) == 12
    assert [batching.bucket_rows(n, 64) for n in (1, 3, 64)] == [1, 4, 64]
    assert batching.bucket_rows(40, 48) == 48


def test_sorted_batches_cover_every_position_longest_first_ties_in_order():
    batches = batching.sorted_batches([3, 7, 3, 1, 7], batch_size=2)
    assert [index.tolist() for index in batches] == [[1, 4], [0, 2], [3]]


def test_encode_sorted_embeds_batches_of_similar_length_and_keeps_input_order():
    texts = ["ccc", "a", "bbbbb", "dd", "eeee"]
    seen = []

    def embed_batch(batch):
        seen.append(batch)
        return np.array([[len(text), ord(text[0])] for text in batch], np.float32)

    vectors = batching.encode_sorted(texts, embed_batch, batch_size=2)
    assert seen == [["bbbbb", "eeee"], ["ccc", "dd"], ["a"]]
    np.testing.assert_array_equal(vectors[:, 0], [len(text) for text in texts])
    np.testing.assert_array_equal(vectors[:, 1], [ord(text[0]) for text in texts])
    assert vectors.dtype == np.float32
    assert batching.encode_sorted([], embed_batch, batch_size=2).shape == (0, 0)
