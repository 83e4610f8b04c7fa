"""Approximate neighbours (`cmlm_tf.evaluation.ann`): exact scores, the exact search's answer
when every partition is searched, the exact fallback, saved indexes, and margin mining that
keeps the exact miner's pairs on clustered vectors."""

import functools
import sys

import numpy as np
import pytest

from cmlm_tf.evaluation import ann, knn, mining
from cmlm_tf.vectors import unit_rows

pytest.importorskip("faiss", reason="the scale extra (pip install -e '.[scale]')")


def clustered(n, *, dim=32, clusters=20, spread=0.35, seed=0):
    """Unit vectors around `clusters` centres: the shape of real sentence embeddings."""
    rng = np.random.default_rng(seed)
    centres = unit_rows(rng.standard_normal((clusters, dim), dtype=np.float32))
    labels = rng.integers(0, clusters, n)
    return unit_rows(centres[labels] + spread * rng.standard_normal(
        (n, dim), dtype=np.float32) / np.sqrt(dim))


@pytest.mark.parametrize("backend", ann.BACKENDS)
def test_searching_every_partition_gives_the_exact_answer(backend):
    pytest.importorskip(backend)
    keys, queries = clustered(600, seed=1), clustered(150, seed=2)
    index = ann.build_index(keys, backend, partitions=12)
    scores, indices = ann.top_k(queries, keys, 5, index=index, probes=12,
                                candidates=len(keys))
    exact_scores, exact_indices = knn.top_k(queries, keys, 5)
    np.testing.assert_array_equal(indices, exact_indices)
    np.testing.assert_allclose(scores, exact_scores, rtol=0, atol=1e-6)


@pytest.mark.parametrize("backend", ann.BACKENDS)
def test_scores_are_exact_and_recall_is_high_on_clustered_vectors(backend):
    pytest.importorskip(backend)
    keys, queries = clustered(3000, seed=3), clustered(300, seed=4)
    # Tight clusters of 32-dim vectors: more candidates than the default make up for what
    # the 4-bit codes blur.
    scores, indices = ann.top_k(queries, keys, 4, backend=backend, candidates=128)
    np.testing.assert_allclose(scores, np.einsum("nd,nkd->nk", queries, keys[indices]),
                               atol=1e-6)
    assert np.all(np.diff(scores, axis=1) <= 0)
    _, exact = knn.top_k(queries, keys, 4)
    recall = np.mean([len(set(a) & set(b)) / 4 for a, b in zip(indices, exact)])
    assert recall >= 0.9, recall


def test_queries_with_too_few_candidates_are_searched_exactly():
    keys, queries = clustered(100, seed=5), clustered(40, seed=6)
    # 50 lists of about 2 keys, one searched: fewer than k = 6 candidates for every query.
    index = ann.build_index(keys, "faiss", partitions=50)
    assert (index.candidates(queries, 6, probes=1) < 0).any()
    scores, indices = ann.top_k(queries, keys, 6, index=index, probes=1)
    exact_scores, exact_indices = knn.top_k(queries, keys, 6)
    np.testing.assert_array_equal(indices, exact_indices)
    np.testing.assert_allclose(scores, exact_scores, atol=1e-6)


def test_rescore_drops_empty_slots_and_repeats_and_breaks_ties_by_index():
    keys = np.array([[1, 0], [0, 1], [1, 0], [0.6, 0.8]], np.float32)
    queries = np.array([[1, 0]], np.float32)
    scores, indices = ann.rescore(queries, keys, np.array([[2, -1, 0, 3, 3]]), 3)
    np.testing.assert_array_equal(indices, [[0, 2, 3]])
    np.testing.assert_allclose(scores, [[1, 1, 0.6]], atol=1e-7)
    scores, indices = ann.rescore(queries, keys, np.array([[1, 1, -1]]), 2)
    np.testing.assert_array_equal(indices, [[1, -1]])
    assert scores[0, 1] == -np.inf


@pytest.mark.parametrize("backend", ann.BACKENDS)
def test_a_saved_index_proposes_the_same_candidates(tmp_path, backend):
    pytest.importorskip(backend)
    keys, queries = clustered(800, seed=7), clustered(50, seed=8)
    index = ann.build_index(keys, backend)
    path = str(tmp_path / "index")
    index.save(path)
    loaded = ann.load_index(path, backend)
    assert (loaded.num_keys, loaded.dim, loaded.partitions) == \
        (index.num_keys, index.dim, index.partitions)
    np.testing.assert_array_equal(loaded.candidates(queries, 4), index.candidates(queries, 4))


def test_mining_with_the_index_keeps_the_exact_pairs_above_the_best_threshold():
    src = clustered(4000, dim=48, clusters=60, seed=9)
    rng = np.random.default_rng(10)
    planted = rng.permutation(4000)[:2000]
    tgt = clustered(4000, dim=48, clusters=60, seed=11)
    tgt[:2000] = unit_rows(src[planted] + 0.5 * rng.standard_normal(
        (2000, 48), dtype=np.float32) / np.sqrt(48))
    gold = set(zip(planted.tolist(), range(2000)))

    def above_best_threshold(pairs):
        correct = np.array([pair in gold for pair in zip(pairs.src_indices.tolist(),
                                                          pairs.tgt_indices.tolist())])
        threshold, metrics = mining.best_f1_threshold(pairs.scores, correct, len(gold))
        keep = pairs.scores >= threshold
        return set(zip(pairs.src_indices[keep].tolist(),
                       pairs.tgt_indices[keep].tolist())), metrics["f1"]

    exact, exact_f1 = above_best_threshold(mining.mine(src, tgt))
    approximate, approximate_f1 = above_best_threshold(
        mining.mine(src, tgt, search=functools.partial(ann.top_k, backend="faiss")))
    assert len(exact) > 1000
    assert len(exact & approximate) / len(exact) >= 0.99
    assert abs(exact_f1 - approximate_f1) <= 0.005


def test_a_missing_library_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(ann.MissingBackendError, match=r"pip install -e \"\.\[scale\]\""):
        ann.build_index(clustered(50), "faiss")
    with pytest.raises(ValueError, match="backend must be one of"):
        ann.build_index(clustered(50), "annoy")


def test_calibrated_probes_reach_the_recall_asked_for_or_search_every_partition():
    keys, queries = clustered(4000, dim=48, clusters=40, seed=12), \
        clustered(800, dim=48, clusters=40, seed=13)
    index = ann.build_index(keys, "faiss")
    probes, recall = ann.calibrate_probes(queries, keys, 4, index, target=0.9, probes=1,
                                          candidates=128, sample=300)
    assert 1 < probes <= index.partitions and recall >= 0.9
    _, exact = knn.top_k(queries, keys, 4)
    _, found = ann.top_k(queries, keys, 4, index=index, probes=probes, candidates=128)
    assert ann.recall_at_k(found, exact) >= 0.85  # the sample speaks for the rest
    # The sample is seeded: the same call chooses the same probes.
    previous, _ = ann.calibrate_probes(queries, keys, 4, index, target=0.9, probes=1,
                                       candidates=128, sample=300)
    assert previous == probes  # the same sample gives the same answer
    # Isotropic vectors: no partition holds the neighbours, so every partition is searched.
    rng = np.random.default_rng(14)
    keys = unit_rows(rng.standard_normal((3000, 48), dtype=np.float32))
    index = ann.build_index(keys, "faiss")
    probes, _ = ann.calibrate_probes(keys[:300], keys, 4, index, target=0.999, probes=2)
    assert probes == index.partitions
    with pytest.raises(ValueError, match="target recall must be in"):
        ann.calibrate_probes(keys, keys, 4, index, target=1.5)
