"""A joint unigram SentencePiece model learned from the lines of text files, with the
pieces the TF Hub contract needs: `<pad>` 0, `<unk>` 1, `[CLS]` 2, `[SEP]` 3, `[MASK]` 4.

No language smoothing; `vocab_size` is an upper bound (a corpus too small for it yields fewer
pieces). A training run whose tokenizer is sentencepiece with an empty `sp_model_file` learns
its model with `train_sentencepiece` (`cmlm_tf.driver.train_lib.prepare_vocabulary`).
"""

import itertools
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence

import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as tf_text

from cmlm_tf.text import tokenization
from cmlm_tf.vocab import counts
from cmlm_tf.vocab.counts import VocabError

# The smallest SentencePiece model: its 5 reserved pieces and a few learned ones.
MIN_SENTENCEPIECE_SIZE = 8


def train_sentencepiece(sentences: Iterable[str], model_file: str, vocab_size: int,
                        *, lower_case: bool = True, max_sentences: int = 1_000_000) -> int:
    """Trains a joint unigram SentencePiece model on `sentences` and writes it to `model_file`.

    Ids: `<pad>` 0, `<unk>` 1, `[CLS]` 2, `[SEP]` 3, `[MASK]` 4, then the learned pieces.
    `vocab_size` is an upper bound: a corpus too small for it yields fewer pieces. With
    `lower_case`, sentences are case-folded as the tokenizer layer will fold them.

    Returns:
        The number of pieces of the written model.
    """
    with tempfile.TemporaryDirectory() as work:
        corpus = os.path.join(work, "corpus.txt")
        count = 0
        with open(corpus, "w", encoding="utf-8") as f:
            batch = []
            for sentence in itertools.islice(sentences, max_sentences):
                batch.append(sentence)
                if len(batch) == 4096:
                    count += _write_sentencepiece_lines(f, batch, lower_case=lower_case)
                    batch = []
            count += _write_sentencepiece_lines(f, batch, lower_case=lower_case)
        if not count:
            raise ValueError(f"{model_file}: no text to train a SentencePiece model on")
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=os.path.join(work, "sp"), vocab_size=vocab_size,
            model_type="unigram", character_coverage=1.0, hard_vocab_limit=False,
            pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
            user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"],
            input_sentence_size=max_sentences, shuffle_input_sentence=True,
            minloglevel=2)
        tf.io.gfile.makedirs(os.path.dirname(model_file) or ".")
        tf.io.gfile.copy(os.path.join(work, "sp.model"), model_file, overwrite=True)
    return spm.SentencePieceProcessor(model_file=model_file).get_piece_size()


def _write_sentencepiece_lines(f, batch: list[str], *, lower_case: bool) -> int:
    """Writes the non-blank sentences of `batch` (whitespace folded; case-folded with
    `lower_case`, as `tensorflow_text.case_fold_utf8` does); returns how many."""
    lines = [" ".join(s.split()) for s in batch]
    lines = [s for s in lines if s]
    if not lines:
        return 0
    if lower_case:
        folded = tf_text.case_fold_utf8(tokenization.valid_utf8(tf.constant(lines))).numpy()
        lines = [s.decode("utf-8") for s in folded]
    f.write("\n".join(lines) + "\n")
    return len(lines)


def build_sentencepiece(input_groups: Sequence[Sequence[str] | str], vocab_size: int,
                        model_file: str, *, lower_case: bool = False,
                        log: Callable[[str], None] | None = None) -> int:
    """Learns a SentencePiece model from the lines of text files; returns its piece count.

    Args:
        input_groups: file paths or globs (as for `wordpiece.build_vocab`); all their
            non-blank lines form one joint corpus.
        vocab_size: most pieces in the model (at least `MIN_SENTENCEPIECE_SIZE`).
        model_file: where to write the model.
        lower_case: case-fold the text first; the tokenizer must use the same setting.
        log: called with a line of summary.

    Raises:
        VocabError: for a bad argument or input (a pattern matching nothing, an unreadable
            or non-UTF-8 file, no text).
    """
    if isinstance(input_groups, (str, os.PathLike)):
        input_groups = [input_groups]
    if vocab_size < MIN_SENTENCEPIECE_SIZE:
        raise VocabError(f"vocab_size must be at least {MIN_SENTENCEPIECE_SIZE} for "
                         f"SentencePiece, got {vocab_size}")
    if not input_groups:
        raise VocabError("no input groups")
    files = counts.input_files(input_groups)
    sentences = (text for path in files for text, _ in counts.read_lines(path) if text)
    try:
        pieces = train_sentencepiece(sentences, model_file, vocab_size, lower_case=lower_case)
    except VocabError:
        raise
    except ValueError as e:  # no text at all
        raise VocabError(str(e)) from None
    if log:
        log(f"SentencePiece model: {pieces:,} pieces (asked for at most {vocab_size:,}) from "
            f"{len(files)} file(s)")
    return pieces
