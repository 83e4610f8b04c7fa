"""Tests of `cmlm_tf.vocab.sentencepiece`: a model learned from text files, with its reserved
pieces, and the one-line errors of a bad size or no text. (The tokenizer layer reading such
a model: `tests/commands/test_build_vocab.py`.)"""

import pytest
import sentencepiece as spm

from cmlm_tf.vocab import sentencepiece
from cmlm_tf.vocab.counts import VocabError


def test_a_model_of_at_most_vocab_size_pieces_with_the_reserved_ones_first(vocab_corpus,
                                                                          tmp_path):
    log = []
    model_file = str(tmp_path / "sp.model")
    pieces = sentencepiece.build_sentencepiece(vocab_corpus, 60, model_file, log=log.append)
    model = spm.SentencePieceProcessor(model_file=model_file)
    assert pieces == model.get_piece_size() and sentencepiece.MIN_SENTENCEPIECE_SIZE <= pieces <= 60
    assert [model.id_to_piece(i) for i in range(5)] == ["<pad>", "<unk>", "[CLS]", "[SEP]",
                                                        "[MASK]"]
    assert log == [f"SentencePiece model: {pieces:,} pieces (asked for at most 60) from "
                   "3 file(s)"]


def test_a_size_below_the_smallest_model_is_refused(vocab_corpus, tmp_path):
    with pytest.raises(VocabError, match="vocab_size must be at least 8"):
        sentencepiece.build_sentencepiece(vocab_corpus, 7, str(tmp_path / "sp.model"))


def test_files_without_text_are_refused(tmp_path):
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(VocabError, match="no text to train a SentencePiece model on"):
        sentencepiece.build_sentencepiece(str(blank), 50, str(tmp_path / "sp.model"))
    assert not (tmp_path / "sp.model").exists()
