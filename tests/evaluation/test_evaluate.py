"""Evaluation metrics against brute-force NumPy/SciPy computations on small real data.

The embeddings here are hashed character-trigram counts of real sentences from
`../shared/data`: no model is needed, yet they have what real embeddings have (near
neighbours across languages through names, numbers and cognates, exact duplicates and so
exact ties), so the metric code meets realistic inputs.
"""

import zlib

import numpy as np
import pytest
from scipy import stats

from cmlm_tf.evaluation import bias, knn, mining, pcr, readers, retrieval, sts
from tests.conftest import SHARED_DATA


def ngram_vectors(texts, dim=256):
    """Hashed lower-case character-trigram counts, float64 [n, dim]."""
    vectors = np.zeros([len(texts), dim])
    for row, text in enumerate(texts):
        padded = f"  {text.lower()} "
        for i in range(len(padded) - 2):
            vectors[row, zlib.crc32(padded[i:i + 3].encode("utf-8")) % dim] += 1
    return vectors


def _shared(*parts):
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not found: the shared data folder is not beside the checkout")
    return path


def _unit(vectors):
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _unique_pairs(src, tgt):
    """Drops pairs with a repeated side: distinct vectors never tie after normalisation."""
    src_count, tgt_count = {}, {}
    for a, b in zip(src, tgt):
        src_count[a] = src_count.get(a, 0) + 1
        tgt_count[b] = tgt_count.get(b, 0) + 1
    kept = [(a, b) for a, b in zip(src, tgt) if src_count[a] == 1 and tgt_count[b] == 1]
    return [a for a, _ in kept], [b for _, b in kept]


# ---------------------------------------------------------------- k nearest neighbours

def test_chunked_top_k_equals_a_full_stable_sort():
    src, tgt = readers.read_bitext_tsv(str(_shared("install_guide", "fr.tsv")))
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
    texts = readers.read_sentences(str(_shared("udhr", "eng.txt")))
    vectors = ngram_vectors(texts + texts[:5])
    full = vectors @ vectors.T
    np.fill_diagonal(full, -np.inf)
    expected = np.argsort(-full, axis=1, kind="stable")[:, :4]
    _, indices = knn.top_k(vectors, vectors, 4, exclude_self=True, block_bytes=2000)
    np.testing.assert_array_equal(indices, expected)
    assert not (indices == np.arange(len(vectors))[:, None]).any()
    with pytest.raises(ValueError, match="k must be between 1 and 54"):
        knn.top_k(vectors, vectors, 55, exclude_self=True)


# ---------------------------------------------------------------- STS

def test_sts_spearman_and_pearson_match_brute_force():
    first, second, gold = readers.read_sts(str(_shared("stsb", "sts-dev.csv")))
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


def test_stsb_reader_splits_on_tabs_without_quoting(tmp_path):
    path = _shared("stsb", "sts-dev.csv")
    raw = path.read_text(encoding="utf-8").split("\n")
    quoted = [i for i, line in enumerate(raw) if '"' in line]
    assert quoted  # the file really has quotes a CSV reader would swallow
    first, second, gold = readers.read_sts(str(path), "stsb")
    for i in quoted[:20]:
        fields = raw[i].split("\t")
        assert (first[i], second[i], gold[i]) == (fields[5], fields[6], float(fields[4]))
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text('a "quoted\tsentence b\t4.5\nc\td\t1\n', encoding="utf-8")
    first, second, gold = readers.read_sts(str(tsv))
    assert (first, second, gold.tolist()) == (['a "quoted', "c"], ["sentence b", "d"],
                                              [4.5, 1.0])


# ---------------------------------------------------------------- retrieval

def test_retrieval_accuracy_matches_brute_force():
    src, tgt = _unique_pairs(*readers.read_bitext_tsv(str(_shared("install_guide", "de.tsv"))))
    src_vectors, tgt_vectors = ngram_vectors(src[:500]), ngram_vectors(tgt[:500])
    cosine = _unit(src_vectors) @ _unit(tgt_vectors).T
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


# ---------------------------------------------------------------- margin mining

def _brute_force_margin(src, tgt, k, kind):
    """Every candidate's margin score from the full cosine matrix."""
    cosine = _unit(src) @ _unit(tgt).T
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
    english = readers.read_sentences(str(_shared("bible", "eng_kjv.txt")))
    spanish = readers.read_sentences(str(_shared("bible", "spa_rv1909.txt")))
    rng = np.random.default_rng(0)
    english, spanish = _unique_pairs(english, spanish)
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


# ---------------------------------------------------------------- bias

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
    vectors = {lang: ngram_vectors(readers.read_multiway(str(_shared("udhr")), [lang])[lang])
               for lang in languages}
    pool = _unit(np.concatenate(list(vectors.values())))
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


# ---------------------------------------------------------------- PCR

def test_pcr_removes_exactly_the_first_singular_direction():
    texts = readers.read_sentences(str(_shared("udhr", "spa.txt")))
    matrix = _unit(ngram_vectors(texts, dim=64))
    component = pcr.first_singular_vector(matrix)
    eigenvalues, eigenvectors = np.linalg.eigh(matrix.T @ matrix)  # uncentred Gram matrix
    assert abs(component @ eigenvectors[:, -1]) == pytest.approx(1.0, abs=1e-10)
    removed = pcr.remove_component(matrix, component, renormalize=False)
    np.testing.assert_allclose(removed, matrix - np.outer(matrix @ component, component),
                               atol=1e-12)
    np.testing.assert_allclose(removed @ component, 0.0, atol=1e-12)
    before = np.linalg.svd(matrix, compute_uv=False)
    after = np.linalg.svd(removed, compute_uv=False)
    np.testing.assert_allclose(after[:-1], before[1:], atol=1e-10)  # the rest is untouched
    assert after[-1] == pytest.approx(0.0, abs=1e-10)
    assert before[0] ** 2 == pytest.approx(eigenvalues[-1])
    renormalised = pcr.remove_component(matrix, component)
    np.testing.assert_allclose(np.linalg.norm(renormalised, axis=1), 1.0)


def test_pcr_components_save_load_and_apply(tmp_path):
    rng = np.random.default_rng(3)
    fitted = pcr.PCRComponents.fit({"en": rng.normal(size=(20, 8)) + 2,
                                    "es": rng.normal(size=(30, 8)) - 1})
    path = tmp_path / "pcr.json"
    fitted.save(str(path))
    loaded = pcr.PCRComponents.load(str(path))
    assert loaded.languages == ["en", "es"] and loaded.dim == 8
    for lang in ("en", "es"):
        np.testing.assert_array_equal(loaded.component(lang), fitted.component(lang))
    vectors = rng.normal(size=(5, 8)).astype(np.float32)
    applied = loaded.apply(vectors, "es")
    assert applied.dtype == np.float32
    np.testing.assert_allclose(applied @ loaded.component("es"), 0.0, atol=1e-6)
    with pytest.raises(ValueError, match="no PCR component for language 'de'"):
        loaded.apply(vectors, "de")
    with pytest.raises(ValueError, match="dim 8"):
        loaded.apply(np.ones([2, 4]), "en")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="bad.json: not a PCR file"):
        pcr.PCRComponents.load(str(tmp_path / "bad.json"))


def test_pcr_lowers_same_language_bias_on_udhr():
    languages = ["eng", "spa", "fra", "ita"]
    texts = readers.read_multiway(str(_shared("udhr")), languages)
    vectors = {lang: _unit(ngram_vectors(texts[lang])) for lang in languages}
    before = bias.same_language_share(vectors, k=5)["overall"]
    after = bias.same_language_share(pcr.PCRComponents.fit(vectors).apply_all(vectors),
                                     k=5)["overall"]
    assert after < before


# ---------------------------------------------------------------- readers

@pytest.mark.parametrize("content,reader,message", [
    ("g\tf\ty\ti\tfive\ta\tb\n", lambda p: readers.read_sts(p, "stsb"),
     r"bad\.txt:1: score 'five' is not a number"),
    ("g\tf\ty\ti\t1\ta\tb\ng\tf\ty\t2\n", lambda p: readers.read_sts(p, "stsb"),
     r"bad\.txt:2: expected at least 7 tab-separated fields"),
    ("a\tb\t1\nc\td\n", readers.read_sts, r"bad\.txt:2: expected 3 tab-separated fields"),
    ("one\ttwo\nthree\n", readers.read_bitext_tsv, r"bad\.txt:2: expected 2 tab-separated"),
    ("1\tx\n2\ty\n1\tz\n", readers.read_id_sentences,
     r"bad\.txt:3: duplicate id '1' \(first on line 1\)"),
    ("a\tpos\nb\t \n", readers.read_labelled, r"bad\.txt:2: empty label"),
    (b"fine\n\xff\xfe\n", readers.read_sentences, r"bad\.txt:2: not valid UTF-8"),
    ("", readers.read_sentences, r"bad\.txt: no sentences"),
])
def test_malformed_files_are_one_line_errors_naming_file_and_line(tmp_path, content, reader,
                                                                 message):
    path = tmp_path / "bad.txt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(readers.DataError, match=message) as error:
        reader(str(path))
    assert "\n" not in str(error.value)


def test_aligned_and_multiway_readers_check_alignment(tmp_path):
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    (tmp_path / "b.txt").write_text("uno\n")
    with pytest.raises(readers.DataError, match="b.txt: has 1 lines but .*a.txt has 2"):
        readers.read_aligned(str(tmp_path / "a.txt"), str(tmp_path / "b.txt"))
    with pytest.raises(readers.DataError, match="not line-aligned"):
        readers.read_multiway(str(tmp_path), ["a", "b"])
    with pytest.raises(readers.DataError, match="zz.txt: file not found"):
        readers.read_multiway(str(tmp_path), ["a", "zz"])
    # Only \n ends a line: a U+2028 inside a sentence does not shift the alignment.
    (tmp_path / "c.txt").write_text("x\u2028y\r\nz\n", encoding="utf-8")
    assert readers.read_sentences(str(tmp_path / "c.txt")) == ["x\u2028y", "z"]
