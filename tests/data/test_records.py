"""The malformed-record rule shared by the readers (cmlm_tf/data/records.py): why a record
is malformed, the error for files without a valid one, and reading a bounded sample."""

import pytest

from cmlm_tf.data import records


@pytest.mark.parametrize("fields,needed,most,why", [
    ([b"a", b"b"], 2, 2, None),
    ([b"a"], 2, 2, "1 field(s), expected exactly 2"),
    ([b"a", b"b", b"c"], 2, 2, "3 fields, expected exactly 2 (more columns than configured)"),
    ([b"a", b"b", b"c", b"d"], 2, 3,
     "4 fields, expected at most 3 (more columns than configured)"),
    ([b"a", b" \t"], 2, None, "field 2 is empty"),
    ([b"\xff", b"b"], 2, None, "field 1 is not valid UTF-8"),
])
def test_why_a_record_is_malformed(fields, needed, most, why):
    assert records.check_text_fields(fields, needed, most=most) == why


def test_only_the_leading_text_fields_are_checked():
    assert records.check_text_fields([b"a", b"b", b""], 3, text_fields=2) is None


def test_no_valid_records_names_the_field_the_files_and_what_was_read():
    error = records.no_valid_records(["a.tsv", "b.tsv", "c.tsv", "d.tsv"], "task.train_data",
                                     "pair", 10, malformed=10, unit="lines", complete=False,
                                     first_problem="field 2 is empty")
    assert str(error) == ("task.train_data: a.tsv, b.tsv, c.tsv... holds no valid pair (the "
                          "first 10 lines read, 10 malformed; first: field 2 is empty)")


def test_a_sample_stops_at_its_limit_and_names_an_unreadable_file(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_bytes(b"one\ntwo\nthree\n")
    assert records.sample_records([str(path)], records.file_lines, "f", limit=2) == (
        [b"one\n", b"two\n"], False)
    assert records.sample_records([str(path)], records.file_lines, "f") == (
        [b"one\n", b"two\n", b"three\n"], True)
    with pytest.raises(OSError, match=r"missing.txt: cannot read \(task.train_data.input_path\)"):
        records.sample_records([str(tmp_path / "missing.txt")], records.file_lines,
                               "task.train_data.input_path")
