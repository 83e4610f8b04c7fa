"""The flat product search (`cmlm_tf.scale.flat_search`): the exact search's neighbours and
scores, in float32 and in bfloat16, across block edges, ties and padding; both directions
from one product; and mining's pairs."""

import functools

import numpy as np
import pytest

from cmlm_tf.evaluation import ann, knn, mining
from cmlm_tf.scale import corpus_mining, flat_search
from cmlm_tf.vectors import unit_rows


def _unit(rng, n, dim=32):
    return unit_rows(rng.standard_normal((n, dim)).astype(np.float32))


@pytest.fixture(scope="module")
def vectors():
    rng = np.random.default_rng(0)
    # Sizes that are not whole chunks; targets close to some sources, as translations are.
    src = _unit(rng, 1203)
    tgt = _unit(rng, 1001)
    tgt[:400] = unit_rows(src[:400] + 0.5 * _unit(rng, 400))
    return src, tgt


@pytest.mark.parametrize("block_bytes", [flat_search.DEFAULT_BLOCK_BYTES, 300 * 1008 * 4])
def test_float32_product_gives_the_exact_neighbours_across_blocks(vectors, block_bytes):
    src, tgt = vectors
    exact_forward, exact_backward = knn.top_k(src, tgt, 4), knn.top_k(tgt, src, 4)
    forward, backward = flat_search.top_k_both(src, tgt, 4, precision="float32",
                                               block_bytes=block_bytes)
    for got, expected in ((forward, exact_forward), (backward, exact_backward)):
        np.testing.assert_array_equal(got[1], expected[1])
        np.testing.assert_allclose(got[0], expected[0], atol=1e-6)
    alone = flat_search.top_k(src, tgt, 4, precision="float32", block_bytes=block_bytes)
    np.testing.assert_array_equal(alone[1], exact_forward[1])


def test_bfloat16_product_keeps_the_neighbours_and_their_exact_scores(vectors):
    src, tgt = vectors
    (scores, indices), (back_scores, back_indices) = flat_search.top_k_both(
        src, tgt, 4, precision="bfloat16")
    _, exact = knn.top_k(src, tgt, 4)
    _, exact_back = knn.top_k(tgt, src, 4)
    assert np.mean(indices == exact) >= 0.999
    assert np.mean(back_indices == exact_back) >= 0.999
    # Every score is the float32 inner product of the pair returned, not a bfloat16 one.
    np.testing.assert_allclose(scores, np.einsum("nd,nkd->nk", src, tgt[indices]), atol=1e-6)
    np.testing.assert_allclose(back_scores, np.einsum("nd,nkd->nk", tgt, src[back_indices]),
                               atol=1e-6)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_duplicate_keys_are_ordered_by_index_as_the_exact_search_orders_them(precision):
    rng = np.random.default_rng(1)
    keys = _unit(rng, 300)
    keys[[17, 90, 211, 250, 299]] = keys[5]  # six copies of key 5
    queries = np.concatenate([keys[5:6], _unit(rng, 99)])
    scores, indices = flat_search.top_k(queries, keys, 4, precision=precision)
    np.testing.assert_array_equal(indices[0], [5, 17, 90, 211])
    np.testing.assert_array_equal(indices[1:], knn.top_k(queries, keys, 4)[1][1:])


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_inputs_smaller_than_the_chunks_kept_are_searched_whole(precision):
    rng = np.random.default_rng(2)
    queries, few = _unit(rng, 50), _unit(rng, 13)
    forward, backward = flat_search.top_k_both(queries, few, 4, precision=precision)
    np.testing.assert_array_equal(forward[1], knn.top_k(queries, few, 4)[1])
    np.testing.assert_array_equal(backward[1], knn.top_k(few, queries, 4)[1])
    np.testing.assert_array_equal(flat_search.top_k(queries, few, 13, precision=precision)[1],
                                  knn.top_k(queries, few, 13)[1])


def test_k_above_the_shortlist_takes_the_exact_search():
    rng = np.random.default_rng(2)
    queries, keys = _unit(rng, 50), _unit(rng, 200)
    k = flat_search.MAX_K + 1
    np.testing.assert_array_equal(flat_search.top_k(queries, keys, k)[1],
                                  knn.top_k(queries, keys, k)[1])


def test_progress_reports_reach_every_query_of_both_directions(vectors):
    src, tgt = vectors
    reports = []
    flat_search.top_k_both(src, tgt, 4, precision="float32", block_bytes=300 * 1008 * 4,
                           report=lambda done, total: reports.append((done, total)))
    assert len(reports) == 5  # 1203 sources in blocks of 296 rows
    assert [done for done, _ in reports] == sorted(done for done, _ in reports)
    assert reports[-1] == (src.shape[0] + tgt.shape[0],) * 2


def test_bad_inputs_are_refused_before_any_product():
    rng = np.random.default_rng(3)
    with pytest.raises(ValueError, match="same width"):
        flat_search.top_k(_unit(rng, 100, 16), _unit(rng, 100, 8), 4)
    with pytest.raises(ValueError, match="k must be between 1 and 100"):
        flat_search.top_k(_unit(rng, 100), _unit(rng, 100), 0)
    with pytest.raises(ValueError, match="precision must be one of"):
        flat_search.top_k(_unit(rng, 100), _unit(rng, 100), 4, precision="int8")


def test_auto_precision_follows_the_cpu(monkeypatch):
    monkeypatch.setattr(flat_search.host, "native_bfloat16", lambda: True)
    assert flat_search.compute_dtype() == "bfloat16"
    monkeypatch.setattr(flat_search.host, "native_bfloat16", lambda: False)
    assert flat_search.compute_dtype() == "float32"
    monkeypatch.setattr(flat_search.host, "native_bfloat16", lambda: None)
    assert flat_search.compute_dtype() == "float32"


def test_mining_with_the_flat_product_returns_the_exact_pairs(vectors):
    src, tgt = vectors
    exact = mining.mine(src, tgt)
    flat = mining.mine(src, tgt, search_both=functools.partial(flat_search.top_k_both,
                                                               precision="bfloat16"))
    # The same pairs with the same scores (to float32 rounding: two pairs whose scores differ
    # in the last bit may be listed in either order).
    pairs = lambda mined: dict(zip(zip(mined.src_indices.tolist(),  # noqa: E731
                                       mined.tgt_indices.tolist()), mined.scores.tolist()))
    assert pairs(flat).keys() == pairs(exact).keys()
    np.testing.assert_allclose(list(pairs(flat).values()),
                               [pairs(exact)[pair] for pair in pairs(flat)], atol=1e-6)
    with pytest.raises(ValueError, match="exclusive"):
        mining.margin_candidates(src, tgt, search=knn.top_k,
                                 search_both=flat_search.top_k_both)


def _weak_model_vectors(seed, count=300, dim=16):
    """Vectors close to one direction, as a weak model gives: their cosines lie closer
    together than bfloat16 resolves, so the product's shortlists miss neighbours."""
    rng = np.random.default_rng(seed)
    base = np.random.default_rng(0).standard_normal(dim)
    return unit_rows((base + 0.05 * rng.standard_normal((count, dim))).astype(np.float32))


def test_a_product_that_misses_neighbours_is_measured_and_replaced_by_the_exact_search():
    src, tgt = _weak_model_vectors(1), _weak_model_vectors(2)
    found = flat_search.top_k_both(src, tgt, 4, precision="bfloat16")
    exact = knn.top_k(src, tgt, 4), knn.top_k(tgt, src, 4)
    said = []
    kept = ann.keep_recall(src, tgt, found, 0.99, say=said.append, name="flat")
    for side, expected in zip(kept, exact):
        np.testing.assert_array_equal(side[1], expected[1])
    assert len(said) == 1 and said[0].startswith("flat: recall@4 0.")
    assert "on 600 sampled queries" in said[0] and "searching exactly (float32)" in said[0]
    # An answer that reaches the target is kept, and the recall it reached printed.
    said.clear()
    assert ann.keep_recall(src, tgt, exact, 0.99, say=said.append, name="flat") is exact
    assert said == ["flat: recall@4 1.0000 on 600 sampled queries against the exact search "
                    "(target 0.99)"]


def test_mining_a_weak_models_vectors_with_flat_keeps_every_exact_pair(capsys):
    src, tgt = _weak_model_vectors(1), _weak_model_vectors(2)
    settings = corpus_mining.SearchSettings(k=4, margin="ratio", index="flat")
    pairs = corpus_mining.mine_vectors(settings, src, tgt, (), stage=lambda line: None)
    exact = mining.max_retrieval(mining.margin_candidates(src, tgt, k=4, kind="ratio"))
    assert pairs.src_indices.tolist() == exact.src_indices.tolist()
    assert pairs.tgt_indices.tolist() == exact.tgt_indices.tolist()
    assert "mine: flat: recall@4" in capsys.readouterr().err
