"""Packing token ids into encoder inputs: one segment, dense and padded, and a pair trimmed
longer segment first."""

import pytest
import tensorflow as tf

from cmlm_tf.text import packing


@pytest.mark.parametrize("pad", [False, True])
def test_dense_packing(pad):
    ids = tf.ragged.constant([[5, 6, 7, 8, 9, 10], [], [11]], dtype=tf.int32)
    packed = packing.pack_single_segment(ids, 5, 2, 3, pad_id=0, pad_to_seq_length=pad)
    assert packed["input_word_ids"].numpy().tolist() == [[2, 5, 6, 7, 3], [2, 3, 0, 0, 0],
                                                         [2, 11, 3, 0, 0]]
    assert packed["input_mask"].numpy().tolist() == [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0],
                                                     [1, 1, 1, 0, 0]]
    assert packed["input_type_ids"].numpy().max() == 0
    longest = packing.pack_single_segment(ids[1:], 8, 2, 3, pad_id=0)["input_word_ids"]
    assert longest.numpy().tolist() == [[2, 3, 0], [2, 11, 3]]
    empty = packing.pack_single_segment(ids[1:2], 8, 2, 3, pad_id=0)["input_word_ids"]
    assert empty.numpy().tolist() == [[2, 3]]
    words = tf.ragged.constant([[[1, 2], [3]], [[4]]], dtype=tf.int32)
    assert packing.pack_single_segment(words, 8, 2, 3, pad_id=0)["input_word_ids"].numpy()\
        .tolist() == [[2, 1, 2, 3, 3], [2, 4, 3, 0, 0]]


def test_pair_packing_trims_the_longer_segment_and_skips_an_empty_second():
    first = tf.ragged.constant([[1, 2, 3, 4, 5], [8]], dtype=tf.int32)
    second = tf.ragged.constant([[6, 7], []], dtype=tf.int32)
    packed = packing.pack_two_segments(first, second, 6, 2, end_id=3, pad_id=0)
    assert packed["input_word_ids"].numpy().tolist() == [[2, 1, 3, 6, 7, 3],
                                                         [2, 8, 3, 0, 0, 0]]
    assert packed["input_type_ids"].numpy().tolist() == [[0, 0, 0, 1, 1, 1],
                                                         [0, 0, 0, 0, 0, 0]]
    assert packed["input_mask"].numpy().tolist() == [[1, 1, 1, 1, 1, 1],
                                                     [1, 1, 1, 0, 0, 0]]
