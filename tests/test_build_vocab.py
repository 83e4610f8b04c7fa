"""Tests of `python -m cmlm_tf.build_vocab`: smoothing math, vocabularies learned from small
generated corpora, casing, the command line's errors, and use with `BertTokenizer`."""

import random
import subprocess
import sys

import pytest

from cmlm_tf import build_vocab as bv
from cmlm_tf.build_vocab import RESERVED_TOKENS, VocabError, build_vocab, language_weights
from tests.conftest import REPO_DIR

EN = {
    "greet": ["Hello", "Hi"],
    "subj": ["the man", "the woman", "my friend", "the child", "our teacher"],
    "verb": ["reads", "writes", "likes", "wants", "sees"],
    "obj": ["a book", "the letter", "some music", "the garden", "a song"],
}
ES = {
    "greet": ["Hola", "Buenas"],
    "subj": ["el hombre", "la mujer", "mi amigo", "el niño", "nuestra maestra"],
    "verb": ["lee", "escribe", "quiere", "ve", "canta"],
    "obj": ["un libro", "la carta", "una canción", "el jardín", "la música"],
}


def _sentences(lang: dict, n: int, rng: random.Random) -> list[str]:
    return [f"{rng.choice(lang['greet'])}, {rng.choice(lang['subj'])} "
            f"{rng.choice(lang['verb'])} {rng.choice(lang['obj'])}." for _ in range(n)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """English in two files (a glob), Spanish in one; a few hundred lines each."""
    rng = random.Random(0)
    root = tmp_path_factory.mktemp("corpus")
    (root / "en").mkdir()
    for i in range(2):
        lines = _sentences(EN, 200, rng)
        (root / "en" / f"part{i}.txt").write_text("\n".join(lines) + "\n\n", encoding="utf-8")
    (root / "es.txt").write_text("\n".join(_sentences(ES, 300, rng)) + "\n", encoding="utf-8")
    return [str(root / "en" / "*.txt"), str(root / "es.txt")]


def _check_format(vocab: list[str], vocab_size: int):
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert list(RESERVED_TOKENS) == vocab[:5]
    assert len(vocab) == len(set(vocab))
    assert len(vocab) <= vocab_size
    assert all(t and t == t.strip() and "\n" not in t for t in vocab)


# --- smoothing math -------------------------------------------------------------------------


def test_language_weights_900_100():
    weights = language_weights([900, 100], 0.3)
    p = [0.9, 0.1]
    powered = [x**0.3 for x in p]
    q = [x / sum(powered) for x in powered]
    assert q == pytest.approx([0.65907, 0.34093], abs=1e-5)
    assert weights == pytest.approx([q[0] / p[0], q[1] / p[1]], rel=1e-12)
    assert weights == pytest.approx([0.73230, 3.40927], abs=1e-5)
    # The re-weighted counts keep their total and have the smoothed shares.
    weighted = [900 * weights[0], 100 * weights[1]]
    assert sum(weighted) == pytest.approx(1000)
    assert [w / 1000 for w in weighted] == pytest.approx(q)


def test_language_weights_no_smoothing_and_uniform():
    assert language_weights([900, 100], 1.0) == [1.0, 1.0]
    assert language_weights([5, 5, 5], 0.3) == pytest.approx([1.0, 1.0, 1.0])
    # A tiny exponent pushes the shares towards uniform.
    weights = language_weights([990, 10], 1e-6)
    assert [990 * weights[0] / 1000, 10 * weights[1] / 1000] == pytest.approx([0.5, 0.5],
                                                                              abs=1e-4)


@pytest.mark.parametrize("exponent", [0.0, -0.3, float("nan"), float("inf")])
def test_language_weights_rejects_bad_exponent(exponent):
    with pytest.raises(VocabError, match="smoothing_exponent"):
        language_weights([900, 100], exponent)


def test_language_weights_rejects_empty_group():
    with pytest.raises(VocabError):
        language_weights([900, 0], 0.3)
    with pytest.raises(VocabError):
        language_weights([], 0.3)


def test_fit_to_size_drops_long_pieces_before_characters():
    vocab = list(RESERVED_TOKENS) + ["a", "b", "hello", "##a", "##b", "##llo", "world"]
    fitted = bv.fit_to_size(vocab, 9, len(RESERVED_TOKENS))
    assert fitted == list(RESERVED_TOKENS) + ["a", "b", "##a", "##b"]
    assert bv.fit_to_size(vocab, 100, 5) == vocab


# --- learning -------------------------------------------------------------------------------


def test_two_languages(corpus):
    log = []
    vocab = build_vocab(corpus, 200, log=log.append)
    _check_format(vocab, 200)
    for word in ["the", "Hello", "book", "teacher", "el", "la", "Hola", "libro", "maestra"]:
        assert word in vocab, word
    assert "ñ" in vocab  # cased: accents kept
    assert len(log) == 4
    assert log[0].startswith(f"group 1 {corpus[0]!r}: 2 file(s), 400 lines")
    assert log[1].startswith(f"group 2 {corpus[1]!r}: 1 file(s), 300 lines")


def test_lower_case(corpus):
    vocab = build_vocab(corpus, 200, lower_case=True)
    _check_format(vocab, 200)
    assert "Hello" not in vocab and "Hola" not in vocab
    assert "hello" in vocab and "hola" in vocab
    assert all(t == t.lower() for t in vocab[5:])
    assert "ñ" not in vocab and "ó" not in vocab  # accents stripped: niño -> nino
    assert "nino" in vocab


def test_never_exceeds_vocab_size(corpus):
    groups = [[corpus[0]], corpus[1]]  # a group may be a list of paths/globs
    for size in (6, 20, 57):
        vocab = build_vocab(groups, size)
        _check_format(vocab, size)


def test_smoothing_favours_minority_language(tmp_path):
    """Majority 20x larger with a disjoint alphabet: smoothing gives the minority more
    whole-word tokens when the vocabulary size forces a choice."""
    rng = random.Random(1)

    def words(alphabet):
        out = set()
        while len(out) < 150:
            out.add("".join(rng.choice(alphabet) for _ in range(rng.randint(4, 7))))
        return sorted(out)

    major, minor = words("abcdefghijklm"), words("nopqrstuvwxyz")
    for name, lexicon, n in [("major.txt", major, 8000), ("minor.txt", minor, 400)]:
        zipf = [1 / (r + 1) for r in range(len(lexicon))]
        lines = [" ".join(rng.choices(lexicon, zipf, k=5)) for _ in range(n)]
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    inputs = [tmp_path / "major.txt", tmp_path / "minor.txt"]  # os.PathLike works too

    def minority_share(exponent):
        vocab = build_vocab(inputs, 120, smoothing_exponent=exponent)
        _check_format(vocab, 120)
        whole = [t for t in vocab if t in set(major) | set(minor)]
        assert len(whole) > 20
        return sum(t in set(minor) for t in whole) / len(whole)

    plain, smoothed = minority_share(1.0), minority_share(0.3)
    assert smoothed > 2 * plain and smoothed > plain + 0.1, (plain, smoothed)


# --- command line ---------------------------------------------------------------------------


def test_cli_vocab_works_with_bert_tokenizer(corpus, tmp_path, capsys):
    import tensorflow as tf
    import tensorflow_text as text

    out = tmp_path / "vocab.txt"
    rc = bv.main(["--input", corpus[0], "--input", corpus[1], "--vocab_size", "150",
                  "--lower_case", "--output", str(out), "--quiet"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "group 1" in printed and "group 2" in printed and str(out) in printed
    content = out.read_text(encoding="utf-8")
    assert content.endswith("\n") and not content.endswith("\n\n")
    vocab = content.splitlines()
    _check_format(vocab, 150)

    tokenizer = text.BertTokenizer(str(out), lower_case=True)
    sentences = ["Hello, my friend reads a book.", "Hola, el niño canta una canción."]
    ids = tokenizer.tokenize(tf.constant(sentences)).merge_dims(1, -1).to_list()
    unk = vocab.index("[UNK]")
    for row in ids:
        assert row and unk not in row and max(row) < len(vocab)
    # Frequent words are single tokens.
    assert [vocab[i] for i in ids[0]] == ["hello", ",", "my", "friend", "reads", "a", "book", "."]


def test_cli_sentencepiece_model_works_with_the_tokenizer(corpus, tmp_path, capsys):
    import sentencepiece as spm
    import tensorflow as tf

    from cmlm_tf import configs, tokenization

    out = tmp_path / "sp.model"
    rc = bv.main(["--type", "sentencepiece", "--input", corpus[0], "--input", corpus[1],
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
    assert ids and 1 not in ids  # no <unk> for text like the corpus
    # Lower-cased training text: the tokenizer folds case before the model, as it learned.
    assert tokenizer(tf.constant(["HELLO"])).to_list() == tokenizer(
        tf.constant(["hello"])).to_list()


def test_cli_sentencepiece_rejects_wordpiece_options(corpus, tmp_path, capsys):
    err = _run_error(["--type", "sentencepiece", "--input", corpus[1], "--vocab_size", "100",
                      "--smoothing_exponent", "0.5", "--output", str(tmp_path / "sp.model")],
                     capsys)
    assert "--smoothing_exponent" in err
    err = _run_error(["--type", "sentencepiece", "--input", corpus[1], "--vocab_size", "5",
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


def test_cli_empty_file(corpus, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n\n", encoding="utf-8")
    err = _run_error(["--input", corpus[1], "--input", str(empty), "--vocab_size", "100",
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
def test_cli_bad_numbers(corpus, tmp_path, capsys, flags, name):
    err = _run_error(["--input", corpus[1], *flags, "--output", str(tmp_path / "v.txt")],
                     capsys)
    assert name in err


def test_cli_help_is_fast_and_imports_no_tensorflow():
    code = ("import sys; from cmlm_tf import build_vocab; "
            "assert 'tensorflow' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=REPO_DIR, check=True)
    result = subprocess.run([sys.executable, "-m", "cmlm_tf.build_vocab", "--help"],
                            cwd=REPO_DIR, capture_output=True, text=True, check=True)
    assert "--smoothing_exponent" in result.stdout and "--lower_case" in result.stdout
