"""Margin mining (`cmlm_tf.evaluation.mining`): LASER margin pairs and the best-F1 threshold.

The embeddings are hashed character-trigram counts of real sentences
(`tests/evaluation/conftest.ngram_vectors`), compared with brute-force NumPy/SciPy
computations.
"""

import numpy as np
import pytest

from cmlm_tf.evaluation import mining, readers
from tests.evaluation.conftest import ngram_vectors, shared_file, unique_pairs, unit


def _brute_force_margin(src, tgt, k, kind):
    """Every candidate's margin score from the full cosine matrix."""
    cosine = unit(src) @ unit(tgt).T
    forward = np.argsort(-cosine, axis=1, kind="stable")[:, :k]
    backward = np.argsort(-cosine.T, axis=1, kind="stable")[:, :k]
    src_mean = np.array([cosine[i, forward[i]].mean() for i in range(len(src))])
    tgt_mean = np.array([cosine[backward[j], j].mean() for j in range(len(tgt))])

    def score(i, j):
        neighbourhood = (src_mean[i] + tgt_mean[j]) / 2
        return cosine[i, j] / neighbourhood if kind == "ratio" else cosine[i, j] - neighbourhood

    proposals = []
    for i in range(len(src)):
        best = max(forward[i], key=lambda j, i=i: (score(i, j), -list(forward[i]).index(j)))
        proposals.append((score(i, best), 0, i, i, best))
    for j in range(len(tgt)):
        best = max(backward[j], key=lambda i, j=j: (score(i, j), -list(backward[j]).index(i)))
        proposals.append((score(best, j), 1, j, best, j))
    proposals.sort(key=lambda p: (-p[0], p[1], p[2]))
    used_src, used_tgt, pairs = set(), set(), []
    for value, _, _, i, j in proposals:
        if i not in used_src and j not in used_tgt:
            used_src.add(i)
            used_tgt.add(j)
            pairs.append((i, j, value))
    return pairs


def _bible_bucc(n_pairs=300, n_extra=60):
    """English/Spanish verses as a BUCC-style task: shuffled sides, gold, unpaired extras."""
    english = readers.read_sentences(str(shared_file("bible", "eng_kjv.txt")))
    spanish = readers.read_sentences(str(shared_file("bible", "spa_rv1909.txt")))
    rng = np.random.default_rng(0)
    english, spanish = unique_pairs(english, spanish)
    src = english[:n_pairs] + english[20000:20000 + n_extra]
    tgt = spanish[:n_pairs] + spanish[25000:25000 + n_extra]
    src_order, tgt_order = rng.permutation(len(src)), rng.permutation(len(tgt))
    src_position, tgt_position = np.argsort(src_order), np.argsort(tgt_order)
    gold = {(f"en-{src_position[i]}", f"es-{tgt_position[i]}") for i in range(n_pairs)}
    return ([src[i] for i in src_order], [tgt[i] for i in tgt_order], gold)


@pytest.mark.parametrize("kind", ["ratio", "distance"])
def test_margin_mining_matches_brute_force(kind):
    src, tgt, _ = _bible_bucc()
    src_vectors, tgt_vectors = ngram_vectors(src), ngram_vectors(tgt)
    expected = _brute_force_margin(src_vectors, tgt_vectors, 4, kind)
    mined = mining.mine(src_vectors, tgt_vectors, k=4, kind=kind, block_bytes=20000)
    assert len(mined) == len(expected)
    np.testing.assert_array_equal(mined.src_indices, [i for i, _, _ in expected])
    np.testing.assert_array_equal(mined.tgt_indices, [j for _, j, _ in expected])
    np.testing.assert_allclose(mined.scores, [s for _, _, s in expected], rtol=1e-12)
    assert len(set(mined.src_indices)) == len(mined) == len(set(mined.tgt_indices))
    assert (np.diff(mined.scores) <= 0).all()


def _brute_force_best_f1(scores, correct, num_gold):
    best = (-1.0, None)
    for threshold in sorted(set(scores), reverse=True):
        kept = scores >= threshold
        hits = np.sum(correct & kept)
        precision, recall = hits / kept.sum(), hits / num_gold
        f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
        if f1 > best[0]:
            best = (f1, threshold)
    return best


def test_best_f1_threshold_matches_brute_force():
    src, tgt, gold = _bible_bucc()
    mined = mining.mine(ngram_vectors(src), ngram_vectors(tgt), k=4)
    correct = np.array([(f"en-{i}", f"es-{j}") in gold
                        for i, j in zip(mined.src_indices, mined.tgt_indices)])
    assert 0 < correct.sum() < len(correct)  # a real mix of right and wrong pairs
    threshold, metrics = mining.best_f1_threshold(mined.scores, correct, len(gold))
    best_f1, lowest_kept_score = _brute_force_best_f1(mined.scores, correct, len(gold))
    assert metrics["f1"] == pytest.approx(best_f1, abs=1e-12)
    kept = mined.scores >= threshold
    assert metrics["num_kept"] == kept.sum() == np.sum(mined.scores >= lowest_kept_score)
    again = mining.metrics_at_threshold(mined.scores, correct, len(gold), threshold)
    assert again["f1"] == pytest.approx(best_f1, abs=1e-12)
    assert metrics["precision"] == pytest.approx(correct[kept].mean())
    assert metrics["recall"] == pytest.approx(correct[kept].sum() / len(gold))


def test_best_f1_at_the_last_candidate_and_ties():
    scores = np.array([0.9, 0.8, 0.7, 0.6])
    threshold, metrics = mining.best_f1_threshold(scores, np.ones(4, bool), num_gold=4)
    assert threshold == 0.6 and metrics == {"precision": 1.0, "recall": 1.0, "f1": 1.0,
                                            "num_kept": 4}
    threshold, metrics = mining.best_f1_threshold(scores, np.array([1, 1, 0, 0], bool), 2)
    assert threshold == pytest.approx(0.75) and metrics["num_kept"] == 2
    # A threshold cannot split tied scores: the wrong pair tied with a right one comes along.
    tied = np.array([0.9, 0.8, 0.8, 0.5])
    threshold, metrics = mining.best_f1_threshold(tied, np.array([1, 1, 0, 0], bool), 2)
    assert metrics["num_kept"] in (1, 3) and (tied >= threshold).sum() == metrics["num_kept"]
    _, none_right = mining.best_f1_threshold(scores, np.zeros(4, bool), 3)
    assert none_right["f1"] == 0.0
