"""CMLM sentence pairs (`cmlm_tf.data.sentence_pairs`): consecutive pairs, swaps, the scan."""

import pytest

from cmlm_tf.data import sentence_pairs
from tests.conftest import write_corpus


def test_pairs_are_consecutive_and_swapped_half_the_time(tmp_path):
    docs = [[f"first {i}", f"second {i}"] for i in range(600)] + [["alone"]]
    corpus = write_corpus(tmp_path / "c.txt", docs)
    stats = sentence_pairs.scan_corpus([str(corpus)])
    assert (stats.pairs, stats.single_sentence_documents) == (600, 1)
    pairs = list(sentence_pairs.sentence_pairs(
        [str(corpus)], is_training=False, swap_probability=0.5, seed=3).as_numpy_iterator())
    assert len(pairs) == 600
    swapped = 0
    for s1, s2 in pairs:
        a, b = s1.decode(), s2.decode()
        assert a.split()[1] == b.split()[1]  # the two sentences of one document
        swapped += a.startswith("second")
    assert 0.44 < swapped / 600 < 0.56
    unswapped = list(sentence_pairs.sentence_pairs(
        [str(corpus)], is_training=False, swap_probability=0.0).as_numpy_iterator())
    assert all(s1.startswith(b"first") for s1, _ in unswapped)


def test_empty_corpus_and_missing_files_are_clear_errors(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(ValueError, match="empty.txt"):
        sentence_pairs.scan_corpus([str(empty)])
    with pytest.raises(FileNotFoundError, match="nothing_here"):
        sentence_pairs.list_files(str(tmp_path / "nothing_here*.txt"))


def test_only_a_bounded_sample_of_a_corpus_is_read_before_training(tmp_path):
    corpus = write_corpus(tmp_path / "c.txt", [["alone"]] * 20 + [["one", "two"]] * 5)
    stats = sentence_pairs.scan_corpus([str(corpus)], limit=200)
    assert stats.complete and stats.pairs == 5
    with pytest.raises(ValueError, match="holds no pair of consecutive sentences in its "
                                         "first 30 lines"):
        sentence_pairs.scan_corpus([str(corpus)], limit=30)
