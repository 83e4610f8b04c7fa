"""Input files: path and glob expansion, errors naming the field, sharding across pipelines."""

import pytest
import tensorflow as tf

from cmlm_tf.data import files


def _write(folder, names, lines=("x",)):
    paths = []
    for name in names:
        path = folder / name
        path.write_text("".join(f"{name}:{line}\n" for line in lines), encoding="utf-8")
        paths.append(str(path))
    return paths


def _context(pipelines, pipeline_id):
    return tf.distribute.InputContext(num_input_pipelines=pipelines,
                                      input_pipeline_id=pipeline_id,
                                      num_replicas_in_sync=pipelines)


def test_list_files_expands_commas_and_globs_sorted(tmp_path):
    c, a, d, b, tsv = _write(tmp_path, ["c.txt", "a.txt", "d.txt", "b.txt", "c.tsv"])
    assert files.list_files(f"{tmp_path}/*.txt") == [a, b, c, d]
    # Comma-separated patterns keep their order; blanks and spaces around commas are dropped.
    assert files.list_files(f" {tsv} ,, {tmp_path}/[ab].txt ") == [tsv, a, b]
    assert files.list_files([tsv, f"{tmp_path}/b*"]) == [tsv, b]


def test_list_files_errors_name_the_field_and_the_pattern(tmp_path):
    _write(tmp_path, ["a.txt"])
    with pytest.raises(ValueError, match=r"^task\.train_data\.input_path is empty$"):
        files.list_files(" , ", field="task.train_data.input_path")
    with pytest.raises(ValueError, match="input_path is empty"):
        files.list_files([])
    missing = f"{tmp_path}/*.tsv"
    with pytest.raises(FileNotFoundError) as error:
        files.list_files(f"{tmp_path}/a.txt,{missing}", field="task.bitext_data.input_path")
    assert str(error.value) == f"{missing}: no file matches (task.bitext_data.input_path)"
    with pytest.raises(FileNotFoundError, match=r"nope\.txt: no file matches \(input_path\)"):
        files.list_files(str(tmp_path / "nope.txt"))


def test_shard_files_splits_files_or_asks_for_record_sharding():
    names = ["f0", "f1", "f2", "f3", "f4"]
    assert files.shard_files(names) == (names, False)
    assert files.shard_files(names, _context(1, 0)) == (names, False)
    assert files.shard_files(names, _context(2, 0)) == (["f0", "f2", "f4"], False)
    assert files.shard_files(names, _context(2, 1)) == (["f1", "f3"], False)
    # Fewer files than pipelines: every pipeline reads all of them and shards records.
    assert files.shard_files(names[:2], _context(3, 2)) == (names[:2], True)


def _records(dataset, count=None):
    dataset = dataset.take(count) if count is not None else dataset
    return [record.decode() for record in dataset.as_numpy_iterator()]


def test_evaluation_reads_each_record_once_and_in_the_same_order(tmp_path):
    paths = _write(tmp_path, ["a", "b", "c"], lines=("1", "2"))
    expected = sorted(f"{name}:{line}" for name in "abc" for line in "12")
    read = tf.data.TextLineDataset
    first = _records(files.interleave_files(paths, read, is_training=False))
    assert sorted(first) == expected
    assert _records(files.interleave_files(paths, read, is_training=False)) == first


def test_training_repeats_the_files(tmp_path):
    paths = _write(tmp_path, ["a", "b"], lines=("1", "2", "3"))
    dataset = files.interleave_files(paths, tf.data.TextLineDataset, seed=3)
    records = _records(dataset, 12)  # two epochs of two equal files, read side by side
    assert sorted(records) == sorted([f"{n}:{i}" for n in "ab" for i in "123"] * 2)
    assert sorted(records[:6]) == sorted(records[6:])
    assert _records(files.interleave_files(paths, tf.data.TextLineDataset, seed=3), 12) \
        == records


def test_pipelines_split_files_or_records_without_overlap(tmp_path):
    paths = _write(tmp_path, ["a", "b", "c"], lines=("1", "2"))
    read = tf.data.TextLineDataset
    by_file = [_records(files.interleave_files(paths, read, input_context=_context(2, i),
                                               is_training=False))
               for i in range(2)]
    assert sorted(by_file[0]) == ["a:1", "a:2", "c:1", "c:2"]
    assert sorted(by_file[1]) == ["b:1", "b:2"]
    one = _write(tmp_path, ["d"], lines=("1", "2", "3", "4", "5"))
    by_record = [_records(files.interleave_files(one, read, input_context=_context(2, i),
                                                 is_training=False))
                 for i in range(2)]
    assert by_record == [["d:1", "d:3", "d:5"], ["d:2", "d:4"]]
