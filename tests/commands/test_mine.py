"""Tests of `python -m cmlm_tf.mine`'s own checks: flag combinations refused before anything
is loaded, and texts that do not name the embedded files. (Mining end to end:
tests/driver/test_mine_vectors.py; the search and the pairs file:
tests/scale/test_corpus_mining.py.)"""

import sys
import types

import numpy as np
import pyarrow.parquet as pq
import pytest

from cmlm_tf.commands import common, mine
from cmlm_tf.scale import corpus_lines, embedding_files
from tests.conftest import one_error_line

REQUIRED = ["--src", "s.txt", "--tgt", "t.txt", "--output", "pairs.tsv"]


@pytest.mark.parametrize("flags, beam_args, message", [
    (["--model", "m", "--k", "0"], [], "--k must be positive"),
    ([], [], "--model is required"),
    (["--src_vectors", "a"], [], "--src_vectors and --tgt_vectors go together"),
    (["--model", "m", "--recall", "0.9", "--probes", "4"], [], "--recall and --probes"),
    (["--model", "m", "--index", "exact", "--candidates", "8"], [],
     "--candidates applies to --index ann"),
    (["--model", "m", "--work_dir", "w"], [], "--work_dir applies to a Beam run"),
    (["--model", "m", "--allow_different_models"], [],
     "--allow_different_models applies to --src_vectors"),
])
def test_bad_combinations_are_refused(flags, beam_args, message):
    args = mine.build_parser().parse_args(REQUIRED + flags)
    with pytest.raises(common.UsageError, match=message):
        mine.check_arguments(args, beam_args)


def test_texts_must_name_every_embedded_file(tmp_path):
    embedded, other = tmp_path / "a.txt", tmp_path / "b.txt"
    embedded.write_text("x\n", encoding="utf-8")
    other.write_text("y\n", encoding="utf-8")
    table = types.SimpleNamespace(sources=np.array([str(embedded)]))
    mine.check_sources(table, str(tmp_path / "*.txt"), "--src")
    with pytest.raises(common.UsageError, match=r"--src .*b\.txt does not name .*a\.txt"):
        mine.check_sources(table, str(other), "--src")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_threshold_that_is_not_a_finite_number_is_refused(value):
    args = mine.build_parser().parse_args(REQUIRED + ["--model", "m", f"--threshold={value}"])
    with pytest.raises(common.UsageError, match=f"--threshold must be a finite number, got "
                                                f"{value}$"):
        mine.check_arguments(args, [])


def test_ann_without_its_library_is_one_line_and_exit_code_2(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "faiss", None)
    args = mine.build_parser().parse_args(REQUIRED + ["--model", "m", "--index", "ann"])
    assert common.run_main(lambda: mine.check_arguments(args, [])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("error: --index ann: the faiss index needs the faiss-cpu package")


def _empty_vectors(folder):
    """An embeddings folder of a text with no line to embed: one shard of no rows."""
    folder.mkdir()
    pq.write_table(embedding_files.schema().empty_table(),
                   folder / embedding_files.shard_name(0, 1))
    embedding_files.write_manifest(str(folder), embedding_files.make_manifest(
        "/exports/model", 4, [str(folder) + ".txt"], None, shards=1,
        counts=dict.fromkeys(corpus_lines.COUNTS, 0)))
    return folder


def test_an_empty_vectors_folder_is_named_with_its_side(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    empty = _empty_vectors(tmp_path / "empty")
    text = tmp_path / "empty.txt"
    text.write_text("\n", encoding="utf-8")
    code = mine.main(["--src", str(text), "--tgt", str(text), "--src_vectors", str(empty),
                      "--tgt_vectors", str(empty), "--output", str(tmp_path / "pairs.tsv")])
    err = capsys.readouterr().err
    assert code == 2
    assert f"error: --src_vectors {empty}: holds no vectors" in err, err
    assert not (tmp_path / "pairs.tsv").exists()


@pytest.mark.parametrize("case", ["src", "tgt_relative", "inside_vectors", "save_pcr"])
def test_an_output_that_is_an_input_is_refused_before_anything_is_read(case, tmp_path,
                                                                       monkeypatch, capsys):
    """`--output` (or `--save_pcr`) naming an input, by any path, would replace it: one
    line naming both flags, and the input unchanged."""
    monkeypatch.chdir(tmp_path)
    for name in ("en.txt", "es.txt"):
        (tmp_path / name).write_text("a line\nanother line\n", encoding="utf-8")
    (tmp_path / "model").mkdir()
    (tmp_path / "vectors").mkdir()
    flags = {"--src": "en.txt", "--tgt": "es.txt", "--model": "model",
             "--output": str(tmp_path / "pairs.tsv")}
    flag, value, relation = {
        "src": ("--output", str(tmp_path / "en.txt"), "is the --src file"),
        "tgt_relative": ("--output", "./model/../es.txt", "is the --tgt file"),
        "inside_vectors": ("--output", "vectors/pairs.tsv", "is inside the --src_vectors"),
        "save_pcr": ("--save_pcr", "en.txt", "is the --src file"),
    }[case]
    flags[flag] = value
    if case == "inside_vectors":
        del flags["--model"]
        flags.update({"--src_vectors": "vectors", "--tgt_vectors": "vectors"})
    if case == "save_pcr":
        flags["--pcr"] = None
    argv = [item for pair in flags.items() for item in pair if item is not None]
    before = {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert mine.main(argv) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(f"error: {flag} {value} {relation}"), line
    assert line.endswith(f"cmlm_tf never writes over an input: choose another {flag}"), line
    assert {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
