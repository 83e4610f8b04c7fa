"""The k-NN queries of mining on Beam (`cmlm_tf.scale.knn`): the DirectRunner's workers,
in separate processes, return what the search returns in this process, and a shard that
never came back is refused by name."""

import numpy as np
import pytest

pytest.importorskip("apache_beam", reason="the scale extra (pip install -e '.[scale]')")
pytest.importorskip("faiss", reason="the scale extra (pip install -e '.[scale]')")

from cmlm_tf.evaluation import ann, knn, mining  # noqa: E402
from cmlm_tf.scale import knn as beam_knn  # noqa: E402
from tests.evaluation.test_ann import clustered  # noqa: E402

TWO_PROCESSES = ["--direct_running_mode=multi_processing",
                 "--direct_num_workers=2"]


def test_shards_cover_both_directions_once():
    found = beam_knn.shards(5, 3, 2)
    assert found == [("forward", 0, 2), ("forward", 2, 4), ("forward", 4, 5),
                     ("backward", 0, 2), ("backward", 2, 3)]
    with pytest.raises(ValueError, match="shard_rows must be positive"):
        beam_knn.shards(5, 3, 0)


def test_two_worker_processes_return_the_in_process_neighbours(tmp_path, capfd):
    src, tgt = clustered(700, seed=21), clustered(500, seed=22)
    spec = beam_knn.SearchSpec(index="ann", backend="faiss", threads=1)
    work_dir = tmp_path / "work"
    capfd.readouterr()
    found = beam_knn.search_both_sides(src, tgt, 4, spec, work_dir=str(work_dir),
                                       options=TWO_PROCESSES,
                                       shard_rows=128, own_prefix="mine: ")
    # The workers' own lines (Beam's notes on cloud clients it cannot load, its logging
    # handler) go to a log file that is removed when the pipeline succeeds; faiss's notes
    # on the index built here, before the pipeline, are this process's.
    assert [line for line in capfd.readouterr().err.splitlines()
            if not line.startswith("WARNING clustering")] == []
    forward = ann.top_k(src, tgt, 4, index=ann.build_index(tgt, "faiss"))
    backward = ann.top_k(tgt, src, 4, index=ann.build_index(src, "faiss"))
    for got, expected in zip(found, forward + backward):
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, atol=1e-6)
    assert not work_dir.exists()  # a local work folder is removed afterwards
    pairs = mining.max_retrieval(mining.margin_scores(*found))
    reference = mining.mine(src, tgt, search=lambda q, k_, n: ann.top_k(
        q, k_, n, index=ann.build_index(k_, "faiss")))
    np.testing.assert_array_equal(pairs.src_indices, reference.src_indices)
    np.testing.assert_array_equal(pairs.tgt_indices, reference.tgt_indices)


def test_the_exact_search_on_beam_equals_the_blocked_search(tmp_path):
    src, tgt = clustered(90, seed=23), clustered(60, seed=24)
    found = beam_knn.search_both_sides(
        src, tgt, 3, beam_knn.SearchSpec(index="exact"), work_dir=str(tmp_path / "work"),
        options=["--direct_running_mode=in_memory"], shard_rows=25)
    expected = knn.top_k(src, tgt, 3) + knn.top_k(tgt, src, 3)
    for got, want in zip(found, expected):
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_a_missing_shard_is_refused_by_name(tmp_path):
    src, tgt = clustered(30, seed=25), clustered(20, seed=26)
    spec = beam_knn.SearchSpec(index="exact")
    beam_knn.prepare(src, tgt, str(tmp_path), spec)
    with pytest.raises(RuntimeError, match=r"neighbours-forward-000000000000\.npz: missing"):
        beam_knn.collect(str(tmp_path), 30, 20, 4, shard_rows=10)
