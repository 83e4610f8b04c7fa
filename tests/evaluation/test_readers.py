"""Task file readers (`cmlm_tf.evaluation.readers`): STS-B fields read from the shared data
as the file has them, one-line errors naming file and line, and the alignment checks."""

import pytest

from cmlm_tf.evaluation import readers
from tests.evaluation.conftest import shared_file


def test_stsb_reader_splits_on_tabs_without_quoting(tmp_path):
    path = shared_file("stsb", "sts-dev.csv")
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
