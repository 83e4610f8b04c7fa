"""The fast WordPiece tokenizer: ids equal to the classic BertTokenizer's, word grouping,
the documented whitespace difference and the fallback. (Packing: tests/text/test_packing.py.)"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from cmlm_tf import configs
from cmlm_tf.text import bert_normalizer, tokenization
from tests.conftest import SHARED_DATA


def classic_ids(vocab_file, lower_case, texts):
    table = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
        str(vocab_file), tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64,
        tf.lookup.TextFileIndex.LINE_NUMBER), -1)
    # The fast tokenizer's word-length limit (Model Garden's layer keeps TF-Text's 100).
    tokenizer = tf_text.BertTokenizer(table, lower_case=lower_case,
                                      max_bytes_per_word=tokenization.MAX_BYTES_PER_WORD)
    ids = []
    for start in range(0, len(texts), 512):
        ids += tokenizer.tokenize(tf.constant(texts[start:start + 512])).merge_dims(1, -1)\
            .to_list()
    return ids


def fast_ids(vocab_file, lower_case, texts):
    tokenizer = tokenization.build_tokenizer(configs.TokenizerConfig(
        vocab_file=str(vocab_file), lower_case=lower_case))
    assert isinstance(tokenizer, tokenization.FastWordpieceTokenizer)
    ids = []
    for start in range(0, len(texts), 512):
        ids += tokenizer(tf.constant(texts[start:start + 512])).to_list()
    return ids


def shared_lines():
    lines = []
    for path in sorted((SHARED_DATA / "udhr").glob("*.txt")):
        if path.name.startswith("LICENSE"):
            continue
        lines += path.read_text(encoding="utf-8").splitlines()
    for path in sorted((SHARED_DATA / "install_guide").glob("*.tsv")):
        for line in path.read_text(encoding="utf-8").splitlines():
            lines += line.split("\t")
    return lines


def _normalised_differently(lines, lower_case):
    """The characters of `lines` that TF-Text's own normaliser maps otherwise than BERT's."""
    chars = sorted(set("".join(lines)))
    own = tf_text.FastBertNormalizer(lower_case_nfd_strip_accents=lower_case)
    bert = tf_text.FastBertNormalizer(
        model_buffer=bert_normalizer.bert_normalizer_model(lower_case=lower_case))
    return {char for char, a, b in zip(chars, own.normalize(tf.constant(chars)).numpy(),
                                       bert.normalize(tf.constant(chars)).numpy()) if a != b}


@pytest.mark.skipif(not (SHARED_DATA / "udhr").exists(),
                    reason="../shared/data (UDHR, installation guide) is not beside the checkout")
@pytest.mark.parametrize("lower_case", [True, False], ids=["uncased", "cased"])
def test_fast_ids_equal_classic_ids_on_multilingual_text(minilm_hf_dir, lower_case):
    """Every UDHR line (441 languages) and installation-guide paragraph (19 languages) whose
    characters TF-Text's normaliser (which the classic tokenizer keeps) and BERT's (the fast
    one's, `cmlm_tf.text.bert_normalizer`) treat alike: the split and the WordPiece lookup agree.
    Lines with format characters, NFKC-folded ones and the like differ on purpose;
    `tests/text/test_bert_normalizer.py` checks the fast ids against Hugging Face's on all."""
    vocab = minilm_hf_dir / "vocab.txt"
    lines = shared_lines()
    assert len(lines) > 40_000
    differently = _normalised_differently(lines, lower_case)
    # Cased, TF-Text turns the zero-width non-joiner into a space, BERT deletes it;
    # uncased, TF-Text folds "ß" to "ss", BERT keeps it.
    assert ("ß" if lower_case else "\u200c") in differently
    lines = [line for line in lines if not differently.intersection(line)]
    assert len(lines) > 30_000
    differing = [i for i, (a, b) in enumerate(zip(classic_ids(vocab, lower_case, lines),
                                                   fast_ids(vocab, lower_case, lines)))
                 if a != b]
    assert not differing, [lines[i][:80] for i in differing[:5]]


def test_unicode_whitespace_separates_words(minilm_hf_dir):
    """The one known difference: non-ASCII whitespace splits words in the fast tokenizer
    (as in the original BERT and Hugging Face tokenizers), while the classic one keeps it
    inside the word: U+2028 in both modes, U+00A0 and U+3000 in cased mode (lower-casing
    folds those two to a space first). ASCII text is unaffected."""
    vocab = minilm_hf_dir / "vocab.txt"
    for lower_case, spaces in ((True, "\u2028"), (False, "\u00a0\u3000\u2028")):
        separated = fast_ids(vocab, lower_case, ["ls ls"])[0]
        texts = [f"ls{space}ls" for space in spaces] + ["plain ascii text, with punctuation!"]
        fast = fast_ids(vocab, lower_case, texts)
        classic = classic_ids(vocab, lower_case, texts)
        for space, fast_row, classic_row in zip(spaces, fast, classic):
            assert fast_row == separated and classic_row != separated, (lower_case, hex(ord(space)))
        assert fast[-1] == classic[-1]
    # Lower-cased, U+00A0 and U+3000 separate words in both tokenizers.
    folded = ["ls\u00a0ls", "ls\u3000ls"]
    assert fast_ids(vocab, True, folded) == classic_ids(vocab, True, folded)


def test_words_layout_groups_continuation_pieces(tiny_vocab):
    tokenizer = tokenization.build_tokenizer(configs.TokenizerConfig(vocab_file=str(tiny_vocab)))
    vocab = tiny_vocab.read_text(encoding="utf-8").splitlines()
    texts = tf.constant(["the dogs xyz", "", "hello"])
    words = tokenizer.tokenize_words(texts)
    assert words.ragged_rank == 2
    as_tokens = [[[vocab[i] for i in word] for word in row] for row in words.to_list()]
    assert as_tokens == [[["the"], ["dog", "##s"], ["x", "##y", "##z"]], [], [["hello"]]]
    np.testing.assert_array_equal(words.merge_dims(1, -1).flat_values,
                                  tokenizer(texts).flat_values)


def test_unexpressible_vocabulary_falls_back_with_a_reason(tmp_path, caplog):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[CLS]\n[SEP]\n[MASK]\nhello\n##s\n", encoding="utf-8")  # no [UNK]
    tokenizer = tokenization.build_tokenizer(configs.TokenizerConfig(vocab_file=str(vocab)))
    implementation = tokenization.tokenizer_implementation(tokenizer)
    assert implementation["name"] == "wordpiece"
    assert "unk" in implementation["fallback_reason"].lower()
    assert "fast WordPiece tokenizer cannot express" in caplog.text

