"""STS correlations (`cmlm_tf.evaluation.sts`): cosines, Spearman and Pearson.

The embeddings are hashed character-trigram counts of real sentences
(`tests/evaluation/conftest.ngram_vectors`), compared with brute-force NumPy/SciPy
computations.
"""

import numpy as np
import pytest
from scipy import stats

from cmlm_tf.evaluation import readers, sts
from tests.evaluation.conftest import ngram_vectors, shared_file


def test_sts_spearman_and_pearson_match_brute_force():
    first, second, gold = readers.read_sts(str(shared_file("stsb", "sts-dev.csv")))
    assert len(gold) == 1500 and gold.min() >= 0 and gold.max() <= 5
    a, b = ngram_vectors(first[:400]), ngram_vectors(second[:400])
    loop = np.array([x @ y / np.linalg.norm(x) / np.linalg.norm(y) for x, y in zip(a, b)])
    cosines = sts.cosine_pairs(a, b)
    np.testing.assert_allclose(cosines, loop, atol=1e-12)
    # Ranks from the library's cosines: identical pairs (cosine 1) must tie in both.
    ranks = stats.rankdata(cosines), stats.rankdata(gold[:400])
    result = sts.sts_correlations(a, b, gold[:400])
    assert result["num_pairs"] == 400
    assert result["spearman"] == pytest.approx(np.corrcoef(*ranks)[0, 1], abs=1e-12)
    assert result["pearson"] == pytest.approx(np.corrcoef(cosines, gold[:400])[0, 1],
                                              abs=1e-12)
    assert 0.3 < result["spearman"] < 0.95  # trigram overlap does track similarity
