"""Tests of `python -m cmlm_tf.build_vocab`: the command line's vocabularies with
`BertTokenizer` and the tokenizer layer, its one-line errors and a `--help` without
TensorFlow."""

import subprocess
import sys

import pytest
import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as text

from cmlm_tf import configs
from cmlm_tf.commands import build_vocab as bv
from cmlm_tf.text import tokenization
from tests.conftest import REPO_DIR, check_vocab_format, run_child


def test_cli_vocab_works_with_bert_tokenizer(vocab_corpus, tmp_path, capsys):
    out = tmp_path / "vocab.txt"
    rc = bv.main(["--input", vocab_corpus[0], "--input", vocab_corpus[1], "--vocab_size", "150",
                  "--lower_case", "--output", str(out), "--quiet"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "group 1" in printed and "group 2" in printed and str(out) in printed
    content = out.read_text(encoding="utf-8")
    assert content.endswith("\n") and not content.endswith("\n\n")
    vocab = content.splitlines()
    check_vocab_format(vocab, 150)

    tokenizer = text.BertTokenizer(str(out), lower_case=True)
    sentences = ["Hello, my friend reads a book.", "Hola, el niño canta una canción."]
    ids = tokenizer.tokenize(tf.constant(sentences)).merge_dims(1, -1).to_list()
    unk = vocab.index("[UNK]")
    for row in ids:
        assert row and unk not in row and max(row) < len(vocab)
    # Frequent words are single tokens.
    assert [vocab[i] for i in ids[0]] == ["hello", ",", "my", "friend", "reads", "a", "book", "."]


def test_cli_sentencepiece_model_works_with_the_tokenizer(vocab_corpus, tmp_path, capsys):
    out = tmp_path / "sp.model"
    rc = bv.main(["--type", "sentencepiece", "--input", vocab_corpus[0], "--input", vocab_corpus[1],
                  "--vocab_size", "120", "--lower_case", "--output", str(out), "--quiet"])
    assert rc == 0
    pieces = spm.SentencePieceProcessor(model_file=str(out)).get_piece_size()
    assert 8 <= pieces <= 120 and f"{pieces} pieces to {out}" in capsys.readouterr().out
    tokenizer = tokenization.build_tokenizer(configs.TokenizerConfig(
        type="sentencepiece", sp_model_file=str(out), lower_case=True))
    special = tokenization.special_token_ids(tokenizer)
    assert [special[k] for k in ("padding_id", "start_of_sequence_id", "end_of_segment_id",
                                 "mask_id", "vocab_size")] == [0, 2, 3, 4, pieces]
    ids = tokenizer(tf.constant(["Hello, my friend reads a book."])).to_list()[0]
    assert ids and 1 not in ids  # no <unk> for text like the vocab_corpus
    # Lower-cased training text: the tokenizer folds case before the model, as it learned.
    assert tokenizer(tf.constant(["HELLO"])).to_list() == tokenizer(
        tf.constant(["hello"])).to_list()


def test_cli_sentencepiece_rejects_wordpiece_options(vocab_corpus, tmp_path, capsys):
    err = _run_error(["--type", "sentencepiece", "--input", vocab_corpus[1], "--vocab_size", "100",
                      "--smoothing_exponent", "0.5", "--output", str(tmp_path / "sp.model")],
                     capsys)
    assert "--smoothing_exponent" in err
    err = _run_error(["--type", "sentencepiece", "--input", vocab_corpus[1], "--vocab_size", "5",
                      "--output", str(tmp_path / "sp.model")], capsys)
    assert "vocab_size" in err and not (tmp_path / "sp.model").exists()


def _run_error(argv, capsys) -> str:
    assert bv.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_cli_glob_matching_nothing(tmp_path, capsys):
    pattern = str(tmp_path / "missing" / "*.txt")
    err = _run_error(["--input", pattern, "--vocab_size", "100",
                      "--output", str(tmp_path / "v.txt")], capsys)
    assert pattern in err
    assert not (tmp_path / "v.txt").exists()


def test_cli_missing_file(tmp_path, capsys):
    path = str(tmp_path / "nope.txt")
    err = _run_error(["--input", path, "--vocab_size", "100", "--output",
                      str(tmp_path / "v.txt")], capsys)
    assert path in err


def test_cli_empty_file(vocab_corpus, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n\n", encoding="utf-8")
    err = _run_error(["--input", vocab_corpus[1], "--input", str(empty), "--vocab_size", "100",
                      "--output", str(tmp_path / "v.txt"), "--quiet"], capsys)
    assert str(empty) in err and "no words" in err


def test_cli_not_utf8(tmp_path, capsys):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("ok line\nniño\n".encode("latin-1"))
    err = _run_error(["--input", str(bad), "--vocab_size", "100",
                      "--output", str(tmp_path / "v.txt"), "--quiet"], capsys)
    assert str(bad) in err and "line 2" in err


@pytest.mark.parametrize("flags, name", [
    (["--vocab_size", "5"], "vocab_size"),
    (["--vocab_size", "100", "--smoothing_exponent", "0"], "smoothing_exponent"),
    (["--vocab_size", "100", "--smoothing_exponent", "-1"], "smoothing_exponent"),
])
def test_cli_bad_numbers(vocab_corpus, tmp_path, capsys, flags, name):
    err = _run_error(["--input", vocab_corpus[1], *flags, "--output", str(tmp_path / "v.txt")],
                     capsys)
    assert name in err


def test_cli_help_is_fast_and_imports_no_tensorflow():
    child = run_child("imports_tensorflow", "cmlm_tf.build_vocab")
    assert child.returncode == 0 and child.stdout.strip() == "False", child.stderr
    result = subprocess.run([sys.executable, "-m", "cmlm_tf.build_vocab", "--help"],
                            cwd=REPO_DIR, capture_output=True, text=True, check=True)
    assert "--smoothing_exponent" in result.stdout and "--lower_case" in result.stdout


def test_an_output_that_is_an_input_is_refused(tmp_path, capsys):
    corpus = tmp_path / "en.txt"
    corpus.write_text("the dog\n", encoding="utf-8")
    assert bv.main(["--input", str(tmp_path / "*.txt"), "--vocab_size", "50",
                    "--output", str(corpus)]) == 2
    assert capsys.readouterr().err == (f"error: --output {corpus} is the --input file {corpus}; "
                                       "cmlm_tf never writes over an input: choose another "
                                       "--output\n")
    assert corpus.read_text(encoding="utf-8") == "the dog\n"
