"""The bitext reader (`cmlm_tf.data.bitext`): TSV and TFRecord pairs, skips, the featurizer."""

import collections
import logging

import pytest
import tensorflow as tf

from cmlm_tf import configs
from cmlm_tf.data import bitext, records
from tests.conftest import write_byte_lines


def test_tsv_reader_counts_and_skips_malformed_lines(tmp_path, caplog):
    path = write_byte_lines(tmp_path / "pairs.tsv", [
        b"the dog\tel perro",
        b"only one field",
        b"\tempty source",
        b"a cat \t un gato\tneg one\tneg two",
        b"bad \xff utf8\tmalo",
        b"",
        b"red car\r" + b"\tcoche rojo\r",
    ])
    assert bitext.infer_file_type([str(path)]) == "tsv"
    stats = bitext.scan_bitext([str(path)], "tsv")
    # Line 4 has more columns than configured: a tab inside a text would shift the fields.
    assert (stats.records, stats.pairs, stats.malformed, stats.complete) == (7, 2, 5, True)
    reports = []
    pairs = list(bitext.read_bitext([str(path)], "tsv", is_training=False,
                                    field="task.train_data.input_path",
                                    reports=reports).as_numpy_iterator())
    assert [(p["source"].decode(), p["target"].decode()) for p in pairs] == [
        ("the dog", "el perro"), ("red car", "coche rojo")]
    # The pipeline itself counts and explains what it skipped, with file and line.
    (report,) = reports
    assert report.count == 5 and report.field == "task.train_data.input_path"
    assert [e.split(": ", 1)[0].rsplit(" ", 1)[1] for e in report.examples] == [
        "2", "3", "4", "5", "6"]
    assert "pairs.tsv line 4: 4 fields, expected exactly 2 (more columns" in report.examples[2]
    assert "pairs.tsv line 5: field 1 is not valid UTF-8" in report.examples[3]
    with caplog.at_level(logging.WARNING):
        assert records.log_totals(reports) == [
            ("bitext record", "task.train_data.input_path", 5)]
    assert "5 malformed bitext records skipped in all" in caplog.text and not reports
    with_negatives = list(bitext.read_bitext([str(path)], "tsv", num_hard_negatives=2,
                                             is_training=False,
                                             reports=reports).as_numpy_iterator())
    assert len(with_negatives) == 1
    assert list(with_negatives[0]["hard_negatives"]) == [b"neg one", b"neg two"]
    assert bitext.scan_bitext([str(path)], "tsv", num_hard_negatives=2).pairs == 1
    assert reports[-1].count == 6


def test_only_a_bounded_sample_is_read_before_training(tmp_path):
    lines = [b"no tab"] * 30 + [b"the dog\tel perro"] * 5
    path = write_byte_lines(tmp_path / "pairs.tsv", lines)
    stats = bitext.scan_bitext([str(path)], "tsv", limit=31)
    assert (stats.records, stats.pairs, stats.malformed, stats.complete) == (31, 1, 30, False)
    with pytest.raises(ValueError, match=r"holds no valid tsv translation pair \(the first "
                                         r"20 records read, 20 malformed; first: 1 field"):
        bitext.scan_bitext([str(path)], "tsv", limit=20)
    # The pipeline still reads the whole corpus.
    reports = []
    pairs = list(bitext.read_bitext([str(path)], "tsv", is_training=False, reports=reports))
    assert len(pairs) == 5 and reports[-1].count == 30


def test_training_shuffles_lines_before_parsing_and_keeps_every_pair(tmp_path):
    """Training shuffles raw lines (the buffer fills at reading speed before the first
    batch), then parses them: every valid pair comes as often as the others, in another
    order than the file's, and each malformed line is counted."""
    lines = []
    for number in range(60):
        lines.append(f"source {number}\ttarget {number}".encode())
        if number % 10 == 3:
            lines.append(b"no tab here")
    path = write_byte_lines(tmp_path / "pairs.tsv", lines)
    reports = []
    pairs = bitext.read_bitext([str(path)], "tsv", is_training=True, shuffle_buffer_size=20,
                               seed=3, reports=reports)
    drawn = [pair["source"].decode() for pair in pairs.take(600).as_numpy_iterator()]
    # Ten epochs through a buffer of 20 lines: each pair 10 times, give or take the one
    # still in the buffer at the end.
    counts = collections.Counter(drawn)
    assert set(counts) == {f"source {number}" for number in range(60)}
    assert set(counts.values()) <= {9, 10, 11}
    assert drawn[:60] != [f"source {number}" for number in range(60)]
    assert 54 <= reports[-1].count <= 66


def _example(**fields):
    feature = {k: tf.train.Feature(bytes_list=tf.train.BytesList(value=v))
               for k, v in fields.items()}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def test_tfrecord_reader_and_format_inference(tmp_path):
    path = tmp_path / "pairs.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(_example(src_raw=[b"the dog"], tgt_raw=[b"el perro"]))
        writer.write(_example(src_raw=[b"no target"]))
        writer.write(_example(src_raw=[b"a cat"], tgt_raw=[b"un gato"], neg_raw=[b"x", b"y"]))
        writer.write(b"not a tf.Example")
    assert bitext.infer_file_type([str(path)]) == "tfrecord"
    stats = bitext.scan_bitext([str(path)], "tfrecord")
    assert (stats.records, stats.pairs, stats.malformed) == (4, 2, 2)
    reports = []
    pairs = list(bitext.read_bitext([str(path)], "tfrecord", is_training=False,
                                    reports=reports).as_numpy_iterator())
    assert [p["target"] for p in pairs] == [b"el perro", b"un gato"]
    assert reports[0].examples == [
        f"{path} record 2: 1 field(s), expected at least 2"]
    # A record that is not a tf.Example is counted from the gap it leaves.
    gapped = tmp_path / "gapped.tfrecord"
    with tf.io.TFRecordWriter(str(gapped)) as writer:
        for record in (_example(src_raw=[b"a"], tgt_raw=[b"b"]), b"not a tf.Example", b"nor this",
                       _example(src_raw=[b"c"], tgt_raw=[b"d"])):
            writer.write(record)
    assert len(list(bitext.read_bitext([str(gapped)], "tfrecord", is_training=False,
                                       reports=reports))) == 2
    assert reports[-1].examples == [f"{gapped} record 2-3: not a tf.Example"]
    negatives = list(bitext.read_bitext([str(path)], "tfrecord", num_hard_negatives=2,
                                        is_training=False).as_numpy_iterator())
    assert [list(p["hard_negatives"]) for p in negatives] == [[b"x", b"y"]]
    with pytest.raises(ValueError, match="pairs.dat: cannot tell the bitext format"):
        bitext.infer_file_type([str(tmp_path / "pairs.dat")])
    assert bitext.infer_file_type([str(tmp_path / "pairs.dat")], "tsv") == "tsv"
    with pytest.raises(ValueError, match="file_type must be one of"):
        bitext.infer_file_type([str(path)], "csv")
    empty = write_byte_lines(tmp_path / "empty.tsv", [b"no tab here"])
    with pytest.raises(ValueError, match="empty.tsv holds no valid tsv translation pair"):
        bitext.scan_bitext([str(empty)], "tsv")


def test_featurizer_packs_static_batches_with_fingerprints(tmp_path, tiny_vocab):
    path = write_byte_lines(tmp_path / "p.tsv", [
        b"the dog\tthe cat\ta horse\ta snake",
        b"The dog \ta man\ta woman\ta child"])
    data = bitext.BitextDataConfig(input_path=str(path), global_batch_size=2, seq_length=8,
                                   num_hard_negatives=2, is_training=False)
    batch = next(iter(bitext.bitext_dataset(
        data, configs.TokenizerConfig(vocab_file=str(tiny_vocab)))))
    assert batch["source"]["input_word_ids"].shape == (2, 8)
    assert batch["hard_negatives"]["input_word_ids"].shape == (4, 8)
    # Lower-cased tokenizer: "the dog" and "The dog " are one sentence, hence one fingerprint.
    assert batch["source_id"][0] == batch["source_id"][1]
    assert batch["target_id"][0] != batch["target_id"][1]
