"""Translation retrieval (`cmlm_tf.evaluation.retrieval`): top-1 accuracy both ways, ties.

The embeddings are hashed character-trigram counts of real sentences
(`tests/evaluation/conftest.ngram_vectors`), compared with brute-force NumPy/SciPy
computations.
"""

import numpy as np
import pytest

from cmlm_tf.evaluation import readers, retrieval
from tests.evaluation.conftest import ngram_vectors, shared_file, unique_pairs, unit


def test_retrieval_accuracy_matches_brute_force():
    src, tgt = unique_pairs(*readers.read_bitext_tsv(str(shared_file("install_guide", "de.tsv"))))
    src_vectors, tgt_vectors = ngram_vectors(src[:500]), ngram_vectors(tgt[:500])
    cosine = unit(src_vectors) @ unit(tgt_vectors).T
    expected_src2tgt = np.mean(cosine.argmax(axis=1) == np.arange(500))
    expected_tgt2src = np.mean(cosine.argmax(axis=0) == np.arange(500))
    result = retrieval.retrieval_accuracy(src_vectors, tgt_vectors)
    assert result == {"src2tgt_accuracy": expected_src2tgt,
                      "tgt2src_accuracy": expected_tgt2src, "num_pairs": 500}
    assert 0.2 < expected_src2tgt < 1.0


def test_retrieval_ties_go_to_the_lower_index():
    vectors = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    # Rows 0 and 1 are identical: both retrieve target 0, so row 1 is wrong.
    assert retrieval.top1_accuracy(vectors, vectors) == pytest.approx(2 / 3)
