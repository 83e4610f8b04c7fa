"""Same-language bias (`cmlm_tf.evaluation.bias`): counted by hand and by brute force.

The embeddings are hashed character-trigram counts of real sentences
(`tests/evaluation/conftest.ngram_vectors`), compared with brute-force NumPy/SciPy
computations.
"""

import numpy as np
import pytest

from cmlm_tf.evaluation import bias, readers
from tests.evaluation.conftest import ngram_vectors, shared_file, unit


def test_bias_counted_by_hand_on_three_languages():
    def at(degrees):
        return [np.cos(np.radians(degrees)), np.sin(np.radians(degrees))]

    # Angles: a 0°, 10°; b 25°, 100°; c 95°, 200°. Nearest two of each (query excluded):
    # a0: a1 b0 (1/2)  a1: a0 b0 (1/2)  b0: a1 a0 (0)  b1: c0 b0 (1/2)  c0: b1 b0 (0)
    # c1: b1 c0 (1/2).
    embeddings = {"a": np.array([at(0), at(10)]), "b": np.array([at(25), at(100)]),
                  "c": np.array([at(95), at(200)])}
    result = bias.same_language_share(embeddings, k=2)
    assert result["per_language"] == pytest.approx({"a": 0.5, "b": 0.25, "c": 0.25})
    assert result["overall"] == pytest.approx(1 / 3)
    assert result["num_sentences"] == 6
    # k=1: a0 and a1 are each other's nearest; b0→a1, b1→c0, c0→b1, c1→b1.
    result = bias.same_language_share(embeddings, k=1)
    assert result["per_language"] == pytest.approx({"a": 1.0, "b": 0.0, "c": 0.0})


def test_bias_matches_brute_force_on_udhr():
    languages = ["eng", "spa", "deu_1996", "fra"]
    vectors = {lang: ngram_vectors(readers.read_multiway(str(shared_file("udhr")), [lang])[lang])
               for lang in languages}
    pool = unit(np.concatenate(list(vectors.values())))
    labels = np.repeat(np.arange(4), 50)
    cosine = pool @ pool.T
    np.fill_diagonal(cosine, -np.inf)
    neighbours = np.argsort(-cosine, axis=1, kind="stable")[:, :10]
    share = (labels[neighbours] == labels[:, None]).mean(axis=1)
    result = bias.same_language_share(vectors, k=10)
    for i, lang in enumerate(languages):
        assert result["per_language"][lang] == pytest.approx(share[labels == i].mean())
    assert result["overall"] == pytest.approx(share.mean())
    assert result["overall"] > 0.5  # trigrams cluster by language
