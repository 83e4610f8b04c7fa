"""Encode-then-score pipelines on a fake `encode` over a fixed table of vectors."""

import numpy as np
import pytest

from cmlm_tf.evaluation import suite

# Tiny classifier fits: more BLAS threads only contend for the cores.
pytestmark = pytest.mark.usefixtures("one_blas_thread")


E = np.eye(5)
# Three sentence directions that sum to zero (dims 0-2) plus a large per-language offset
# (dim 3 for `src`, dim 4 for `tgt`): the first singular vector of each language's matrix is
# exactly its offset direction, so PCR removes the offset and leaves the sentence parts.
SENTENCE = [E[0] - E[1], E[1] - E[2], E[2] - E[0]]
TABLE = {
    **{f"s{i}": v + 5 * E[3] for i, v in enumerate(SENTENCE)},
    **{f"t{i}": v + 5 * E[4] for i, v in enumerate(SENTENCE)},
    **{f"one{i}": E[i] for i in range(3)},
}


class FakeEncoder:
    """`encode` from `TABLE`, recording each call."""

    def __init__(self, table=None):
        self.table = TABLE if table is None else table
        self.calls = []

    def __call__(self, texts):
        self.calls.append(list(texts))
        return np.stack([self.table[text] for text in texts]).astype(np.float32)


def test_sts_correlates_pair_cosines_with_gold():
    table = {"x": np.array([1.0, 0.0]), "same": np.array([2.0, 0.0]),
             "diagonal": np.array([1.0, 1.0]), "orthogonal": np.array([0.0, 3.0])}
    encode = FakeEncoder(table)
    first, second = ["x", "x", "x"], ["same", "diagonal", "orthogonal"]
    gold = np.array([5.0, 3.0, 1.0])
    result = suite.run_sts(encode, first, second, gold)
    cosines = np.array([1.0, np.sqrt(0.5), 0.0])
    assert result["spearman"] == pytest.approx(1.0)
    assert result["pearson"] == pytest.approx(np.corrcoef(cosines, gold)[0, 1])
    assert result["num_pairs"] == 3
    assert encode.calls == [first, second]
    assert suite.run_sts(encode, first, second, gold[::-1])["spearman"] == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="2 gold scores for 3 pairs"):
        suite.run_sts(encode, first, second, gold[:2])


def test_retrieval_accuracy_both_ways():
    table = {"a": E[0], "b": E[1], "c": E[1] + 0.5 * E[2],
             "A": E[0], "B": E[1], "C": E[2]}
    result, fitted = suite.run_retrieval(FakeEncoder(table), ["a", "b", "c"], ["A", "B", "C"])
    # "c" is nearer "B" (cos 0.89) than "C" (0.45); from the target side all three are right.
    assert result == {"src2tgt_accuracy": pytest.approx(2 / 3), "tgt2src_accuracy": 1.0,
                      "num_pairs": 3}
    assert fitted is None


def test_pcr_fits_one_component_per_language_or_applies_given_ones():
    encode = FakeEncoder()
    src, tgt = ["s0", "s1", "s2"], ["t0", "t1", "t2"]
    result, fitted = suite.run_retrieval(encode, src, tgt, src_lang="en", tgt_lang="fr",
                                         fit_pcr=True)
    assert result["src2tgt_accuracy"] == result["tgt2src_accuracy"] == 1.0
    assert sorted(fitted.components) == ["en", "fr"]
    np.testing.assert_allclose(fitted.components["en"], E[3], atol=1e-6)
    np.testing.assert_allclose(fitted.components["fr"], E[4], atol=1e-6)
    assert encode.calls == [src, tgt]
    again, none = suite.run_retrieval(encode, src, tgt, src_lang="en", tgt_lang="fr", pcr=fitted)
    assert again == result and none is None
    with pytest.raises(ValueError, match="exclusive"):
        suite.run_retrieval(encode, src, tgt, fit_pcr=True, pcr=fitted)
    with pytest.raises(ValueError, match="no PCR component for language 'de'"):
        suite.run_retrieval(encode, src, tgt, src_lang="de", tgt_lang="fr", pcr=fitted)


def test_parts_in_one_language_share_one_component():
    rng = np.random.default_rng(0)
    table = {f"w{i}": rng.normal(size=4) + [3.0, 0, 0, 0] for i in range(6)}
    first, second = ["w0", "w1", "w2"], ["w3", "w4", "w5"]
    vectors, fitted = suite.embed_languages(FakeEncoder(table), [("en", first),
                                                                  ("en", second)], fit_pcr=True)
    assert list(fitted.components) == ["en"]
    matrix = np.stack([table[f"w{i}"] for i in range(6)])
    expected = np.linalg.svd(matrix)[2][0]
    assert abs(fitted.components["en"] @ expected) == pytest.approx(1.0)
    for part in vectors:
        assert part.shape == (3, 4)
        np.testing.assert_allclose(part @ expected, 0.0, atol=1e-5)
        np.testing.assert_allclose(np.linalg.norm(part, axis=1), 1.0, rtol=1e-5)


def test_mine_texts_recovers_a_permuted_alignment():
    # Sources one0..one2, targets the same vectors in the order 2, 0, 1. With k = 2 each
    # sentence's neighbourhood mean is (1 + 0) / 2, so a translation scores 1 / 0.5 = 2.
    pairs, fitted = suite.mine_texts(FakeEncoder(), ["one0", "one1", "one2"],
                                     ["one2", "one0", "one1"], k=2)
    assert dict(zip(pairs.src_indices.tolist(), pairs.tgt_indices.tolist())) == \
        {0: 1, 1: 2, 2: 0}
    np.testing.assert_allclose(pairs.scores, 2.0, rtol=1e-6)
    assert fitted is None
    distance, _ = suite.mine_texts(FakeEncoder(), ["one0", "one1"], ["one1", "one0"], k=2,
                                   margin="distance")
    np.testing.assert_allclose(distance.scores, 0.5, rtol=1e-6)


def _mining(gold, **kwargs):
    return suite.run_mining(FakeEncoder(), ["id0", "id1", "id2"], ["one0", "one1", "one2"],
                            ["tid2", "tid0", "tid1"], tgt=["one2", "one0", "one1"], gold=gold, k=2,
                            **kwargs)[0]


def test_run_mining_scores_mined_ids_against_gold():
    right = [("id0", "tid0"), ("id1", "tid1"), ("id2", "tid2")]
    metrics = _mining(right)
    assert (metrics["precision"], metrics["recall"], metrics["f1"]) == (1.0, 1.0, 1.0)
    assert metrics["threshold"] == pytest.approx(2.0)
    assert (metrics["threshold_choice"], metrics["num_candidates"], metrics["num_gold"],
            metrics["k"], metrics["margin"]) == ("best_f1", 3, 3, 2, "ratio")
    # A gold pair that was not mined lowers recall only.
    metrics = _mining(right + [("id0", "tid9")])
    assert (metrics["precision"], metrics["recall"]) == (1.0, 0.75)
    assert metrics["f1"] == pytest.approx(6 / 7)
    # Gold by ids, not positions: id1 belongs with tid2 here, so one mined pair is wrong.
    metrics = _mining([("id0", "tid0"), ("id1", "tid2"), ("id2", "tid2")])
    assert metrics["precision"] == pytest.approx(2 / 3) and metrics["num_kept"] == 3


def test_run_mining_with_a_given_threshold_keeps_the_pairs_above_it():
    gold = [("id0", "tid0"), ("id1", "tid1"), ("id2", "tid2")]
    above = _mining(gold, threshold=2.5)
    assert (above["num_kept"], above["f1"], above["threshold"], above["threshold_choice"]) \
        == (0, 0.0, 2.5, "given")
    assert _mining(gold, threshold=1.5)["num_kept"] == 3


def test_bias_measures_same_language_neighbours_and_pcr_removes_it():
    texts = {"en": ["s0", "s1", "s2"], "fr": ["t0", "t1", "t2"]}
    # The language offsets dominate: each sentence's nearest neighbour is in its language.
    result, fitted = suite.run_bias(FakeEncoder(), texts, k=1)
    assert result["per_language"] == {"en": 1.0, "fr": 1.0}
    assert (result["overall"], result["k"], result["num_sentences"]) == (1.0, 1, 6)
    assert fitted is None
    # Without the offsets a sentence's translation is identical to it: the share drops to 0.
    cleaned, fitted = suite.run_bias(FakeEncoder(), texts, k=1, fit_pcr=True)
    assert cleaned["overall"] == 0.0 and sorted(fitted.components) == ["en", "fr"]


def test_run_classify_encodes_each_split_and_probes():
    rng = np.random.default_rng(3)
    table = {f"{label}{i}": centre + rng.normal(0, 0.2, 3)
             for label, centre in (("pos", E[0, :3] * 3), ("neg", E[1, :3] * 3))
             for i in range(12)}
    encode = FakeEncoder(table)

    def split(indices):
        texts = [f"{label}{i}" for label in ("pos", "neg") for i in indices]
        return texts, [text[:3] for text in texts]

    train, test, dev = split(range(6)), split(range(6, 10)), split(range(10, 12))
    result = suite.run_classify(encode, train, test)
    assert result["accuracy"] == 1.0 and result["selection"] == "cv"
    assert (result["num_train"], result["num_test"], result["num_labels"]) == (12, 8, 2)
    assert encode.calls == [train[0], test[0]]
    with_dev = suite.run_classify(encode, train, test, dev)
    assert with_dev["selection"] == "dev" and with_dev["selection_accuracy"] == 1.0
    assert dev[0] in encode.calls
