"""Tests of `cmlm_tf.scale.corpus_mining`: the index chosen by size, the pairs of two vector sets
found by each in-process search, and the pairs file."""

import dataclasses
import sys

import numpy as np
import pytest

from cmlm_tf.evaluation import mining
from cmlm_tf.scale import corpus_mining
from tests.conftest import run_child


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
                                       src, tgt, (), stage=stages.append)
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


@pytest.mark.parametrize("num_src, num_tgt", [(3, 3), (40, 3)])
def test_an_index_over_too_few_vectors_falls_back_to_the_exact_search(capsys, num_src,
                                                                       num_tgt):
    """faiss cannot train its codes on fewer keys than centroids: the exact search runs
    instead, and one line says so."""
    src, tgt, _ = _translations(max(num_src, num_tgt))
    settings = corpus_mining.SearchSettings(k=4, margin="ratio", index="ann")
    stages = []
    pairs = corpus_mining.mine_vectors(settings, src[:num_src], tgt[:num_tgt], (),
                                       stage=stages.append)
    exact = corpus_mining.mine_vectors(dataclasses.replace(settings, index="exact"),
                                       src[:num_src], tgt[:num_tgt], (), stage=lambda line: None)
    assert pairs.src_indices.tolist() == exact.src_indices.tolist()
    assert pairs.tgt_indices.tolist() == exact.tgt_indices.tolist()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "searching exactly instead" in err, err
    assert stages[0].startswith("k-NN search (exact")


def test_an_index_where_the_exact_search_is_faster_is_named_in_a_warning(capsys):
    """`--index ann` at a size where `auto` searches exactly: one warning names the faster
    choice, and the index still runs, as asked."""
    pytest.importorskip("faiss", reason="the scale extra (pip install -e '.[scale]')")
    src, tgt, _ = _translations(300)
    stages = []
    corpus_mining.mine_vectors(corpus_mining.SearchSettings(k=4, margin="ratio", index="ann"),
                               src, tgt, (), stage=stages.append)
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == ["mine: warning: --index ann on 300 × 300 sentences is slower than the "
                        "exact search, which --index auto picks up to 400,000,000 candidate "
                        "pairs; searching with the index as asked"]
    assert stages[0].startswith("k-NN search (ann")


def test_the_eta_leaves_out_the_index_training():
    """The rate counts the seconds spent on queries: an index trained for 100 s before
    the first 50 of 200 queries took 10 s gives 0:30 to go, not 5:30."""
    now = [0.0]
    lines = []
    progress = corpus_mining.SearchProgress(200, every=0.0, clock=lambda: now[0])
    now[0] = 100.0
    progress.side_started()
    now[0] = 110.0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "stderr", type("Lines", (), {"write": lambda _, text: lines.append(
            text), "flush": lambda _: None})())
        progress(50, 100)
    assert "".join(lines) == "mine: searched 50 of 200 queries (5/s, ETA 0:30)\n"


def test_the_flat_search_prints_no_cpp_log_lines():
    """XLA logs "Compiled cluster using XLA!" (and absl's preamble) through absl, past
    TF_CPP_MIN_LOG_LEVEL: a fresh process that mines with the flat product prints only
    its own lines."""
    result = run_child("mine_flat", 64)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [line for line in result.stderr.splitlines()
            if not line.startswith("mine: ")] == [], result.stderr


def test_an_index_that_cannot_tell_a_weak_models_vectors_apart_falls_back_to_exact(capsys):
    """Vectors close to one direction (a weak model's): the index's 4-bit codes miss most
    neighbours even with every partition searched; mining measures that and searches
    exactly, so it keeps every exact pair."""
    pytest.importorskip("faiss")
    rng = np.random.default_rng(1)
    base = rng.standard_normal(16)
    src, tgt = ((base + 0.05 * rng.standard_normal((300, 16))).astype(np.float32)
                for _ in range(2))
    settings = corpus_mining.SearchSettings(k=4, margin="ratio", index="ann")
    pairs = corpus_mining.mine_vectors(settings, src, tgt, (), stage=lambda line: None)
    exact = corpus_mining.mine_vectors(dataclasses.replace(settings, index="exact"), src, tgt,
                                       (), stage=lambda line: None)
    assert pairs.src_indices.tolist() == exact.src_indices.tolist()
    assert pairs.tgt_indices.tolist() == exact.tgt_indices.tolist()
    err = capsys.readouterr().err
    assert "mine: ann: recall@4 0." in err and "searching exactly (float32) instead" in err
