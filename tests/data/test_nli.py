"""The NLI reader (`cmlm_tf.data.nli`): bad lines skipped and counted, the scan, cross-lingual."""

import pytest

from cmlm_tf.data import nli
from tests.conftest import write_byte_lines


def test_reader_skips_and_counts_bad_lines(tmp_path):
    path = write_byte_lines(tmp_path / "nli.tsv", [
        b"premise\thypothesis\tlabel",               # a header: unknown label
        b"A man sleeps.\tA person rests.\tentailment",
        b"A man sleeps.\tA man runs.\tCONTRADICTION\ten\tes",
        b"A dog.\tA cat.\t1",
        b"A dog.\tA cat.\t-",                         # MNLI's no-consensus label
        b"A dog.\tA cat.\tmaybe",
        b"A dog.\tA cat.",                            # no label
        b"   \tA cat.\tneutral",                      # empty premise
        b"A \xff dog.\tA cat.\tneutral",              # invalid UTF-8
        b"Rain.\tWet streets.\t0\r",
        b"A dog.\tA cat.\t0\ten\tes\textra",        # six fields: a tab inside a text?
    ])
    stats = nli.scan_nli([path], max_examples=10)
    assert (stats.records, stats.examples, stats.malformed) == (11, 4, 7)
    assert stats.labels == [2, 1, 1]
    assert "line 1: unknown label" in stats.problems[0]
    assert any("line 11: 6 fields, expected at most 5 (more columns" in problem
               for problem in stats.problems)

    examples = list(nli.read_nli([path], is_training=False).as_numpy_iterator())
    assert [(e["premise"], e["hypothesis"], e["label"]) for e in examples] == [
        (b"A man sleeps.", b"A person rests.", 0), (b"A man sleeps.", b"A man runs.", 2),
        (b"A dog.", b"A cat.", 1), (b"Rain.", b"Wet streets.", 0)]
    assert (examples[1]["premise_language"], examples[1]["hypothesis_language"]) == (b"en",
                                                                                     b"es")

    with pytest.raises(ValueError, match=r"task.train_data.input_path: .* holds no valid NLI"):
        nli.scan_nli([write_byte_lines(tmp_path / "bad.tsv", [b"a\tb\tc"])],
                     field="task.train_data.input_path")


def test_only_a_bounded_sample_is_read_before_training(tmp_path):
    path = write_byte_lines(tmp_path / "nli.tsv", [b"no label"] * 30 + [b"A dog.\tA cat.\t1"] * 5)
    stats = nli.scan_nli([path], limit=31)
    assert (stats.records, stats.examples, stats.malformed, stats.complete) == (31, 1, 30, False)
    with pytest.raises(ValueError, match=r"holds no valid NLI example \(the first 20 lines"):
        nli.scan_nli([path], limit=20, field="task.train_data.input_path")
    # The pipeline still reads the whole file.
    reports = []
    assert len(list(nli.read_nli([path], is_training=False, reports=reports))) == 5
    assert reports[0].count == 30


def test_cross_lingual_pairs_come_from_two_different_languages(tmp_path):
    languages = ("en", "es", "de")
    files = []
    for language in languages:
        lines = [f"{language} premise {i}\t{language} hypothesis {i}\t{i % 3}".encode()
                 for i in range(30)]
        if language == "de":
            lines[7] = b"de premise 7\tde hypothesis 7\t0"  # label disagrees: skipped
        files.append(write_byte_lines(tmp_path / f"mnli.{language}.tsv", lines))
    stats = nli.scan_nli(files, cross_lingual=True)
    assert (stats.examples, stats.malformed) == (29, 1)

    dataset = nli.read_nli(files, cross_lingual=True, is_training=True, seed=3,
                           shuffle_buffer_size=1)
    seen = set()
    for example in dataset.take(400).as_numpy_iterator():
        premise_language = example["premise_language"].decode().split(".")[-1]
        hypothesis_language = example["hypothesis_language"].decode().split(".")[-1]
        assert premise_language != hypothesis_language
        premise, hypothesis = example["premise"].decode(), example["hypothesis"].decode()
        assert premise.startswith(premise_language + " premise ")
        assert hypothesis.startswith(hypothesis_language + " hypothesis ")
        index = int(premise.split()[-1])
        assert hypothesis.split()[-1] == str(index) and index != 7
        assert example["label"] == index % 3
        seen.add((premise_language, hypothesis_language))
    assert len(seen) == 6  # every ordered pair of different languages is drawn

    short = write_byte_lines(tmp_path / "mnli.fr.tsv", [b"fr p\tfr h\t0"])
    with pytest.raises(ValueError, match="mnli.fr.tsv has 1 lines .* line-aligned"):
        nli.scan_nli(files + [short], cross_lingual=True)
    with pytest.raises(ValueError, match="two or more line-aligned files"):
        nli.scan_nli(files[:1], cross_lingual=True)
