"""The checks that make an embeddings folder trustworthy: sound vectors, texts unchanged
since they were embedded (size and time first, the hash when only the time moved), and one
model on both sides."""

import json
import os

import numpy as np
import pytest

from cmlm_tf.export import export_metadata
from cmlm_tf.scale import embedding_checks
from cmlm_tf.scale.embedding_checks import EmbeddingsMismatch


def test_the_first_vector_that_is_not_finite_or_not_unit_is_found():
    vectors = np.eye(4, dtype=np.float32)
    assert embedding_checks.first_bad_vector(vectors) is None
    vectors[2] *= 1 + 5e-4  # within the tolerance
    assert embedding_checks.first_bad_vector(vectors) is None
    vectors[3, 0] = np.inf
    vectors[1] *= 1.01
    assert embedding_checks.first_bad_vector(vectors) == (1, "a vector of norm 1.01, not 1")
    vectors[0, 1] = np.nan
    row, what = embedding_checks.first_bad_vector(vectors)
    assert row == 0 and "not finite" in what


def test_a_changed_file_is_told_apart_from_a_touched_one(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("one\ntwo\n", encoding="utf-8")
    recorded = embedding_checks.fingerprint(str(path))
    assert set(recorded) == {"size", "mtime_ns", "sha256"}
    assert embedding_checks.changed(str(path), recorded) is None
    os.utime(path, ns=(0, recorded["mtime_ns"] + 10**9))  # touched: same bytes
    assert embedding_checks.changed(str(path), recorded) is None
    path.write_text("one\nTwo\n", encoding="utf-8")  # same size, other bytes
    os.utime(path, ns=(0, recorded["mtime_ns"] + 2 * 10**9))
    assert "SHA-256 differs" in embedding_checks.changed(str(path), recorded)
    path.write_text("zero\none\ntwo\n", encoding="utf-8")
    assert embedding_checks.changed(str(path), recorded) == "8 bytes then, 13 now"
    path.unlink()
    assert embedding_checks.changed(str(path), recorded) == "it is gone"


def test_texts_that_changed_are_refused_naming_the_file(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("one\n", encoding="utf-8")
    manifest = {"files": embedding_checks.fingerprint_files([str(path)])}
    embedding_checks.check_texts(manifest, "EMB")
    path.write_text("one\nmore\n", encoding="utf-8")
    with pytest.raises(EmbeddingsMismatch, match=f"^{path}: changed after it was embedded "
                                                 r"into EMB \(4 bytes then, 9 now\)"):
        embedding_checks.check_texts(manifest, "EMB")
    with pytest.raises(EmbeddingsMismatch, match="changed while it was being embedded"):
        embedding_checks.check_unchanged(manifest["files"])


def test_the_model_identity_comes_from_the_export_metadata(tmp_path):
    source = {"model_dir": "/runs/a", "checkpoint": "ckpt-5", "checkpoint_sha256": "ab" * 32}
    (tmp_path / export_metadata.METADATA_FILE).write_text(json.dumps({"source": source}))
    fields = embedding_checks.manifest_fields([], str(tmp_path), 8)
    assert fields == {"files": {}, "model_identity": {"checkpoint_sha256": "ab" * 32,
                                                     "source": source, "dim": 8}}


def test_two_models_are_refused_and_old_manifests_only_warned_about():
    first = {"model": "/e/a", "model_identity": {"checkpoint_sha256": "a" * 64, "dim": 8}}
    other = {"model": "/e/b", "model_identity": {"checkpoint_sha256": "b" * 64, "dim": 8}}
    moved = {"model": "/e/moved", "model_identity": {"checkpoint_sha256": "a" * 64, "dim": 8}}
    embedding_checks.check_same_model([first, moved], ["A", "B"])
    with pytest.raises(EmbeddingsMismatch, match="^A was embedded by /e/a and B by /e/b, "
                                                 "another model"):
        embedding_checks.check_same_model([first, other], ["A", "B"])
    old = {"model": "/e/b"}
    embedding_checks.check_same_model([first, old], ["A", "B"])
    assert embedding_checks.missing_fingerprints({"files": {}, **first}, "A") is None
    assert "B records no fingerprints" in embedding_checks.missing_fingerprints(old, "B")
