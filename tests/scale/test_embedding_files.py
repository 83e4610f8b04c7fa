"""The embeddings folder: shards and a manifest that pandas and pyarrow read, a reader that
refuses unfinished or inconsistent folders in one line, and outputs published whole."""

import json
import os
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cmlm_tf.files import output_folders
from cmlm_tf.scale import corpus_lines, embedding_files
from cmlm_tf.scale.embedding_files import EmbeddingFilesError

DIM = 4
# A process id above any pid_max: no process has it.
DEAD_PID = 2 ** 22 + 1


def write_output(folder, shards, dim=DIM, embedded=None):
    """An embeddings folder: `shards` lists the (source, line) rows of each shard; the vector
    of a row is (1, line, 0, ...) normalised, so that each row's vector is its own. Returns
    {(source, line): vector}."""
    folder.mkdir(parents=True, exist_ok=True)
    vectors = {}
    for index, rows in enumerate(shards):
        embedding = []
        for source, line in rows:
            vector = np.zeros(dim, np.float32)
            vector[0], vector[1] = 1.0, line
            vector /= np.linalg.norm(vector)
            vectors[(source, line)] = vector
            embedding.append(vector)
        table = pa.table({"source": [source for source, _ in rows],
                          "line": [line for _, line in rows], "embedding": embedding},
                         schema=embedding_files.schema())
        pq.write_table(table, folder / embedding_files.shard_name(index, len(shards)))
    counts = dict.fromkeys(corpus_lines.COUNTS, 0)
    counts["embedded"] = sum(len(rows) for rows in shards) if embedded is None else embedded
    embedding_files.write_manifest(str(folder), embedding_files.make_manifest(
        "/exports/model", dim, ["corpus/*.txt"], None, shards=len(shards), counts=counts))
    return vectors


SHARDS = [[("b.txt", 2), ("a.txt", 3)], [("a.txt", 1), ("b.txt", 1), ("a.txt", 10)]]


def test_reader_sorts_by_source_and_line_and_keeps_each_vector_with_its_row(tmp_path):
    vectors = write_output(tmp_path / "out", SHARDS)
    embeddings = embedding_files.read_embeddings(str(tmp_path / "out"))
    ids = list(zip(embeddings.sources.tolist(), embeddings.lines.tolist()))
    assert ids == [("a.txt", 1), ("a.txt", 3), ("a.txt", 10), ("b.txt", 1), ("b.txt", 2)]
    assert embeddings.lines.dtype == np.int64 and embeddings.vectors.dtype == np.float32
    assert embeddings.vectors.shape == (5, DIM) and len(embeddings) == 5
    np.testing.assert_array_equal(embeddings.vectors, np.stack([vectors[i] for i in ids]))
    assert embeddings.manifest["counts"]["embedded"] == 5


def test_pandas_and_pyarrow_read_the_folder_and_skip_the_manifest(tmp_path):
    write_output(tmp_path / "out", SHARDS)
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        "_cmlm_tf_embeddings.json", "part-00000-of-00002.parquet", "part-00001-of-00002.parquet"]
    assert pq.read_table(tmp_path / "out").num_rows == 5
    frame = pd.read_parquet(tmp_path / "out")
    assert sorted(frame.columns) == ["embedding", "line", "source"] and len(frame) == 5


def test_the_manifest_is_the_documented_record(tmp_path):
    write_output(tmp_path / "out", SHARDS)
    manifest = json.loads((tmp_path / "out" / embedding_files.MANIFEST).read_text())
    assert list(manifest) == ["format", "version", "model", "dim", "inputs", "text_column",
                              "shards", "counts"]
    assert (manifest["format"], manifest["version"], manifest["shards"]) == (
        "cmlm_tf_embeddings", 1, 2)
    assert list(manifest["counts"]) == list(corpus_lines.COUNTS) == [
        "lines_read", "embedded", "empty", "invalid_utf8", "missing_column", "over_long"]


def _no_manifest(folder):
    (folder / embedding_files.MANIFEST).unlink()


def _missing_shard(folder):
    (folder / "part-00001-of-00002.parquet").unlink()


def _extra_shard(folder):
    (folder / "part-00000-of-00002.parquet").rename(folder / "part-00000-of-00003.parquet")
    write_output(folder, SHARDS)


def _duplicate(folder):
    write_output(folder, [[("a.txt", 1), ("a.txt", 2)], [("a.txt", 2)]])


def _wrong_width(folder):
    write_output(folder, SHARDS, dim=3)
    manifest = json.loads((folder / embedding_files.MANIFEST).read_text())
    manifest["dim"] = DIM
    (folder / embedding_files.MANIFEST).write_text(json.dumps(manifest))


def _wrong_count(folder):
    write_output(folder, SHARDS, embedded=6)


def _vector(folder, value):
    """Row 2 of the second shard (a.txt line 10) gets the vector `value`."""
    path = folder / "part-00001-of-00002.parquet"
    table = pq.read_table(path)
    embedding = table.column("embedding").to_pylist()
    embedding[2] = value
    pq.write_table(table.set_column(2, "embedding", pa.array(
        embedding, pa.list_(pa.float32()))), path)


def _nan_vector(folder):
    _vector(folder, [np.nan, 0.0, 0.0, 0.0])


def _long_vector(folder):
    _vector(folder, [2.0, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("damage,message", [
    (_nan_vector, "part-00001-of-00002.parquet: row 2 (a.txt line 10) holds a vector that "
                  "is not finite"),
    (_long_vector, "part-00001-of-00002.parquet: row 2 (a.txt line 10) holds a vector of "
                   "norm 2, not 1"),
    (_no_manifest, "no _cmlm_tf_embeddings.json, so the embedding did not finish"),
    (_missing_shard, "missing shard part-00001-of-00002.parquet"),
    (_extra_shard, "unexpected file part-00000-of-00003.parquet"),
    (_duplicate, "a.txt line 2 is embedded twice"),
    (_wrong_width, "a vector of width 3, the manifest's dim is 4"),
    (_wrong_count, "the shards hold 5 rows but the manifest counts 6 embedded"),
])
def test_unfinished_or_inconsistent_folders_are_refused_in_one_line(tmp_path, damage, message):
    folder = tmp_path / "out"
    write_output(folder, SHARDS)
    damage(folder)
    with pytest.raises(EmbeddingFilesError) as error:
        embedding_files.read_embeddings(str(folder))
    assert message in str(error.value) and "\n" not in str(error.value)
    assert str(folder) in str(error.value)


def test_shard_names_follow_beams_template():
    assert embedding_files.shard_name(0, 2) == "part-00000-of-00002.parquet"
    assert embedding_files.shard_prefix("/x/OUT") == "/x/OUT/part"
    assert embedding_files.SHARD_NAME_TEMPLATE == "-SSSSS-of-NNNNN"


def test_an_existing_output_is_refused_unless_overwrite(tmp_path):
    out = tmp_path / "out"
    write_output(out, SHARDS)
    with pytest.raises(EmbeddingFilesError, match=f"{out}: already exists; pass --overwrite"):
        embedding_files.check_output(str(out), overwrite=False)
    assert embedding_files.check_output(str(out), overwrite=True) == []
    assert embedding_files.check_output(str(tmp_path / "new"), overwrite=False) == []


def test_overwrite_never_replaces_a_folder_that_is_not_an_output(tmp_path):
    (tmp_path / "papers").mkdir()
    (tmp_path / "papers" / "thesis.tex").write_text("years of work")
    with pytest.raises(EmbeddingFilesError, match="not an embeddings folder"):
        embedding_files.check_output(str(tmp_path / "papers"), overwrite=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(EmbeddingFilesError, match="exists and is not a folder"):
        embedding_files.check_output(str(tmp_path / "file"), overwrite=True)
    (tmp_path / "empty").mkdir()
    assert embedding_files.check_output(str(tmp_path / "empty"), overwrite=True) == []


def test_leftovers_of_killed_runs_are_removed_with_a_note(tmp_path):
    out = tmp_path / "out"
    # A killed run's (its name records a process that is gone).
    staging = tmp_path / f"out.staging-{output_folders.host_tag()}-{DEAD_PID}-0123abcd"
    (staging / ".temp-beam-1").mkdir(parents=True)
    (staging / ".temp-beam-1" / "shard").write_text("partial")
    aside = tmp_path / "out.replaced-4567"
    write_output(aside, SHARDS)
    (tmp_path / "out.other").mkdir()
    notes = embedding_files.check_output(str(out), overwrite=False)
    assert not staging.exists() and aside.exists() and (tmp_path / "out.other").exists()
    assert notes[0] == f"removed {staging}, left by a run that did not finish"
    assert notes[1].startswith(f"kept {aside}: the old output") and len(notes) == 2
    # Once OUT exists, an old output set aside is stale.
    write_output(out, SHARDS)
    notes = embedding_files.check_output(str(out), overwrite=True)
    assert not aside.exists() and notes == [
        f"removed {aside}, an old output that an interrupted --overwrite had set aside"]


def test_a_staging_folder_of_a_live_run_is_left_alone(tmp_path):
    """A second run on the same OUT keeps the staging folder of one still writing (this
    process stands in for it); one named by an earlier version is removed once it is old."""
    out = tmp_path / "out"
    live = embedding_files.staging_folder(str(out))
    assert f".staging-{output_folders.writer_tag()}-" in live
    os.makedirs(os.path.join(live, ".temp-beam-1"))
    legacy = tmp_path / "out.staging-0123abcd"
    legacy.mkdir()
    assert embedding_files.check_output(str(out), overwrite=False) == []
    assert os.path.isdir(live) and legacy.is_dir()  # legacy: too young to tell
    os.utime(legacy, (time.time() - 3600,) * 2)
    notes = embedding_files.check_output(str(out), overwrite=False)
    assert notes == [f"removed {legacy}, left by a run that did not finish"]
    assert os.path.isdir(live)


def test_publish_renames_the_staging_folder_into_place(tmp_path):
    out, staging = tmp_path / "out", embedding_files.staging_folder(str(tmp_path / "out"))
    assert staging.startswith(f"{out}.staging-")
    write_output(tmp_path / staging, [[("new.txt", 1)]])
    embedding_files.publish(staging, str(out))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert embedding_files.read_embeddings(str(out)).sources.tolist() == ["new.txt"]


def test_publish_with_overwrite_replaces_the_old_output_only_when_complete(tmp_path):
    out = tmp_path / "out"
    write_output(out, SHARDS)
    staging = tmp_path / "out.staging-1"
    write_output(staging, [[("new.txt", 1)]])
    with pytest.raises(EmbeddingFilesError, match=f"the new embeddings are in {staging}"):
        embedding_files.publish(str(staging), str(out))
    assert staging.exists() and len(embedding_files.read_embeddings(str(out))) == 5
    unfinished = tmp_path / "out.staging-2"
    unfinished.mkdir()
    with pytest.raises(EmbeddingFilesError, match="only a finished output is published"):
        embedding_files.publish(str(unfinished), str(out), overwrite=True)
    assert len(embedding_files.read_embeddings(str(out))) == 5
    embedding_files.publish(str(staging), str(out), overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "out.staging-2"]
    assert embedding_files.read_embeddings(str(out)).sources.tolist() == ["new.txt"]


def test_count_rows_reads_the_footers(tmp_path):
    write_output(tmp_path / "out", SHARDS)
    assert embedding_files.count_rows(str(tmp_path / "out")) == 5
    assert embedding_files.list_shards(str(tmp_path / "out")) == [
        "part-00000-of-00002.parquet", "part-00001-of-00002.parquet"]


def test_a_shard_damaged_inside_fails_its_page_checksums_in_one_line(tmp_path):
    """Bytes flipped inside a shard, its size and footer intact: without checksums they
    would decode to other numbers; with them the shard is refused, by name."""
    folder = tmp_path / "out"
    rows = [("a.txt", line) for line in range(1, 401)]
    write_output(folder, [rows])
    path = folder / embedding_files.shard_name(0, 1)
    table = pq.read_table(path)
    pq.write_table(table, path, write_page_checksum=True)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle - 100:middle + 100] = bytes(b ^ 0x5A for b in data[middle - 100:middle + 100])
    path.write_bytes(bytes(data))
    with pytest.raises(EmbeddingFilesError) as error:
        embedding_files.read_embeddings(str(folder))
    assert str(error.value).startswith(f"{path}: cannot read the shard")
    assert "checksum" in str(error.value) and "\n" not in str(error.value)
