"""The line policy of corpus jobs: how lines are split and numbered, and which are skipped,
cut or embedded."""

import io

import pytest

from cmlm_tf.evaluation import readers
from cmlm_tf.scale import corpus_lines
from cmlm_tf.scale.corpus_lines import Record


def records(data: bytes, **kwargs):
    return list(corpus_lines.iter_records(io.BytesIO(data), "corpus.txt", **kwargs))


def test_lines_split_on_newline_only_and_one_carriage_return_is_stripped():
    data = "one\u2028two\nthree\rfour\r\nfive\r\r\nlast".encode("utf-8")
    assert records(data) == [Record(1, "one\u2028two"), Record(2, "three\rfour"),
                             Record(3, "five\r"), Record(4, "last")]


def test_a_byte_order_mark_is_stripped_from_line_one_only():
    data = "\ufeffhello\n\ufeffworld\n".encode("utf-8")
    assert records(data) == [Record(1, "hello"), Record(2, "\ufeffworld")]


def test_empty_and_whitespace_lines_are_skipped_and_numbering_goes_on():
    assert records(b"a\n\n \t \r\n\xc2\xa0\nb\n") == [
        Record(1, "a"), Record(2, None, corpus_lines.EMPTY),
        Record(3, None, corpus_lines.EMPTY), Record(4, None, corpus_lines.EMPTY),
        Record(5, "b")]


def test_invalid_utf8_lines_are_skipped_not_fatal():
    assert records(b"good\nbad \xff\xfe\nalso good\n") == [
        Record(1, "good"), Record(2, None, corpus_lines.INVALID_UTF8), Record(3, "also good")]


def test_text_column_picks_a_field_and_skips_short_records():
    data = b"id1\tfirst text\textra\nid2\n\nid3\t \nid4\tfourth\n"
    assert records(data, text_column=2) == [
        Record(1, "first text"), Record(2, None, corpus_lines.MISSING_COLUMN),
        Record(3, None, corpus_lines.EMPTY), Record(4, None, corpus_lines.EMPTY),
        Record(5, "fourth")]
    assert records(b"a\tb\n", text_column=1) == [Record(1, "a")]


def test_over_long_lines_are_cut_to_max_chars_characters_and_still_embedded():
    long = "é" * 12  # two bytes each: the cut counts characters, not bytes
    assert records(f"short\n{long}\n".encode(), max_chars=5) == [
        Record(1, "short"), Record(2, "ééééé", over_long=True)]
    assert records(b"x" * 10 + b"\n", max_chars=10) == [Record(1, "x" * 10)]


def test_an_empty_stream_has_no_lines():
    assert records(b"") == []


def test_embedded_lines_are_the_sentences_mine_reads(tmp_path):
    """On a file `python -m cmlm_tf.mine` accepts, the embedded texts are the sentences it
    reads (`readers.read_sentences(skip_empty=True)`)."""
    path = tmp_path / "sentences.txt"
    path.write_bytes("\ufeffFirst.\r\n\n  \nSecond\u2028half.\nThird.\r\n\t\nlast".encode())
    embedded = [r.text for r in records(path.read_bytes()) if r.skipped is None]
    assert embedded == readers.read_sentences(str(path), skip_empty=True)


class _BrokenStream:
    def __init__(self):
        self.calls = 0

    def readline(self):
        self.calls += 1
        if self.calls > 2:
            raise OSError("connection reset")
        return b"line\n"


def test_a_read_error_names_the_file_and_line():
    with pytest.raises(OSError, match=r"corpus.txt: cannot read line 3 \(connection reset\)"):
        list(corpus_lines.iter_records(_BrokenStream(), "corpus.txt"))


@pytest.mark.parametrize("kwargs,message", [({"text_column": 0}, "text_column must be 1"),
                                            ({"max_chars": 0}, "max_chars must be positive")])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        records(b"a\n", **kwargs)

