"""Exact blocked top-k (`cmlm_tf.evaluation.knn`): a full stable sort's neighbours and ties.

The embeddings are hashed character-trigram counts of real sentences
(`tests/evaluation/conftest.ngram_vectors`), compared with brute-force NumPy/SciPy
computations.
"""

import numpy as np
import pytest

from cmlm_tf.evaluation import knn, readers
from tests.evaluation.conftest import ngram_vectors, shared_file


def test_chunked_top_k_equals_a_full_stable_sort():
    src, tgt = readers.read_bitext_tsv(str(shared_file("install_guide", "fr.tsv")))
    # Raw trigram counts: their inner products are exact small integers, so the full matrix
    # and the blocks agree to the bit and ties (many, and the 50 duplicates) are real ties.
    queries = ngram_vectors(src[:300])
    keys = ngram_vectors(tgt[:400] + tgt[:50])
    full = queries @ keys.T
    expected = np.argsort(-full, axis=1, kind="stable")[:, :7]
    for block_bytes in (1, 5000, 10**9):  # one row per block, a few rows, everything
        scores, indices = knn.top_k(queries, keys, 7, block_bytes=block_bytes)
        np.testing.assert_array_equal(indices, expected)
        np.testing.assert_array_equal(scores, np.take_along_axis(full, expected, 1))
    tied_at_k = np.sum(full >= scores[:, -1:], axis=1) > 7
    assert tied_at_k.sum() > 10  # rows where the 7th score ties with scores left out
    scores32, indices32 = knn.top_k(queries.astype(np.float32), keys.astype(np.float32), 7)
    assert scores32.dtype == np.float32
    np.testing.assert_array_equal(indices32, expected)


def test_top_k_excluding_self():
    texts = readers.read_sentences(str(shared_file("udhr", "eng.txt")))
    vectors = ngram_vectors(texts + texts[:5])
    full = vectors @ vectors.T
    np.fill_diagonal(full, -np.inf)
    expected = np.argsort(-full, axis=1, kind="stable")[:, :4]
    _, indices = knn.top_k(vectors, vectors, 4, exclude_self=True, block_bytes=2000)
    np.testing.assert_array_equal(indices, expected)
    assert not (indices == np.arange(len(vectors))[:, None]).any()
    with pytest.raises(ValueError, match="k must be between 1 and 54"):
        knn.top_k(vectors, vectors, 55, exclude_self=True)
