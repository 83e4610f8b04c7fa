"""Tests of `cmlm_tf.corpus_mining`: the index chosen by size, the pairs of two vector sets
found by each in-process search, and the pairs file."""

import sys

import numpy as np
import pytest

from cmlm_tf import corpus_mining
from cmlm_tf.evaluation import mining


def _translations(count: int, dim: int = 16):
    """Source vectors and a permuted, slightly noisy copy of them: pair i is
    (i, position of i in the copy)."""
    rng = np.random.default_rng(0)
    src = rng.standard_normal((count, dim)).astype(np.float32)
    order = rng.permutation(count)
    tgt = src[order] + 0.01 * rng.standard_normal((count, dim)).astype(np.float32)
    return src, tgt, {int(source): target for target, source in enumerate(order)}


def test_the_index_follows_the_candidate_pairs(monkeypatch):
    side = int(corpus_mining.FLAT_ABOVE ** 0.5)
    assert corpus_mining.choose_index("auto", side, side, "faiss") == "exact"
    assert corpus_mining.choose_index("auto", side + 1, side, "faiss") == "flat"
    assert corpus_mining.choose_index("ann", 10, 10, "faiss") == "ann"
    assert corpus_mining.choose_index("flat", 10, 10, "faiss") == "flat"
    big = int(corpus_mining.ANN_ABOVE ** 0.5) + 1
    assert corpus_mining.choose_index("auto", big, big, "faiss") == "ann"
    # Without the index library, large inputs stay on the flat product.
    monkeypatch.setitem(sys.modules, "faiss", None)
    assert corpus_mining.choose_index("auto", big, big, "faiss") == "flat"


@pytest.mark.parametrize("index", ["exact", "flat"])
def test_mined_pairs_are_the_translations(index):
    src, tgt, expected = _translations(40)
    stages = []
    pairs = corpus_mining.mine_vectors(corpus_mining.SearchSettings(k=4, margin="ratio",
                                                                    index=index),
                                       src, tgt, (), stages.append)
    assert len(pairs) == 40
    assert {int(s): int(t) for s, t in zip(pairs.src_indices, pairs.tgt_indices)} == expected
    assert np.all(np.diff(pairs.scores) <= 0)
    assert len(stages) == 1 and stages[0].startswith(f"k-NN search ({index}")
    assert "ratio margin scoring, k=4" in stages[0]


def test_the_pairs_file_stops_at_the_threshold_and_keeps_three_columns(tmp_path):
    pairs = mining.MinedPairs(src_indices=np.array([1, 0, 2]), tgt_indices=np.array([0, 2, 1]),
                              scores=np.array([1.5, 1.2, 0.9]))
    path = tmp_path / "out" / "pairs.tsv"
    written = corpus_mining.write_pairs(str(path), pairs, ["a", "b\tb", "c"],
                                        {0: "x", 1: "y", 2: "z"}, threshold=1.0)
    assert written == 2
    assert path.read_text(encoding="utf-8") == "1.500000\tb b\tx\n1.200000\ta\tz\n"
