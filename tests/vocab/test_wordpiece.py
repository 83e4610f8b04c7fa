"""Tests of `cmlm_tf.vocab.wordpiece`: vocabularies learned from small generated corpora,
casing, the size limit and the language smoothing's effect."""

import random

from cmlm_tf.vocab import wordpiece
from cmlm_tf.vocab.wordpiece import RESERVED_TOKENS, build_vocab
from tests.conftest import check_vocab_format


def test_fit_to_size_drops_long_pieces_before_characters():
    vocab = list(RESERVED_TOKENS) + ["a", "b", "hello", "##a", "##b", "##llo", "world"]
    fitted = wordpiece.fit_to_size(vocab, 9, len(RESERVED_TOKENS))
    assert fitted == list(RESERVED_TOKENS) + ["a", "b", "##a", "##b"]
    assert wordpiece.fit_to_size(vocab, 100, 5) == vocab



def test_two_languages(vocab_corpus):
    log = []
    vocab = build_vocab(vocab_corpus, 200, log=log.append)
    check_vocab_format(vocab, 200)
    for word in ["the", "Hello", "book", "teacher", "el", "la", "Hola", "libro", "maestra"]:
        assert word in vocab, word
    assert "ñ" in vocab  # cased: accents kept
    assert len(log) == 4
    assert log[0].startswith(f"group 1 {vocab_corpus[0]!r}: 2 file(s), 400 lines")
    assert log[1].startswith(f"group 2 {vocab_corpus[1]!r}: 1 file(s), 300 lines")


def test_lower_case(vocab_corpus):
    vocab = build_vocab(vocab_corpus, 200, lower_case=True)
    check_vocab_format(vocab, 200)
    assert "Hello" not in vocab and "Hola" not in vocab
    assert "hello" in vocab and "hola" in vocab
    assert all(t == t.lower() for t in vocab[5:])
    assert "ñ" not in vocab and "ó" not in vocab  # accents stripped: niño -> nino
    assert "nino" in vocab


def test_never_exceeds_vocab_size(vocab_corpus):
    groups = [[vocab_corpus[0]], vocab_corpus[1]]  # a group may be a list of paths/globs
    for size in (6, 20, 57):
        vocab = build_vocab(groups, size)
        check_vocab_format(vocab, size)


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
        check_vocab_format(vocab, 120)
        whole = [t for t in vocab if t in set(major) | set(minor)]
        assert len(whole) > 20
        return sum(t in set(minor) for t in whole) / len(whole)

    plain, smoothed = minority_share(1.0), minority_share(0.3)
    assert smoothed > 2 * plain and smoothed > plain + 0.1, (plain, smoothed)
