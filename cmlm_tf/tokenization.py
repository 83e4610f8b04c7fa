"""Text to token ids, in one place: the preprocessor export, the serving export and training
data all tokenise through these functions.

Strings are first made valid UTF-8 (invalid bytes become U+FFFD) with a core TensorFlow op,
so any byte string yields finite vectors.
"""

import os
from typing import Dict

import tensorflow as tf
import tf_keras

from cmlm_tf import configs


def _text_layers():
    # tensorflow_text registers its ops on import; only string-handling code needs it.
    from official.nlp.modeling.layers import text_layers

    return text_layers


def _existing_file(tokenizer: configs.TokenizerConfig, field: str, what: str) -> str:
    path = getattr(tokenizer, field)
    if not path:
        raise ValueError(f"task.model.tokenizer.{field} is empty")
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{path}: {what} not found (task.model.tokenizer.{field})")
    return path


def build_tokenizer(tokenizer: configs.TokenizerConfig) -> tf_keras.layers.Layer:
    """Returns a Model Garden tokenizer layer: strings [batch] -> int32 ragged ids."""
    if tokenizer.type == "wordpiece":
        return _text_layers().BertTokenizer(
            vocab_file=_existing_file(tokenizer, "vocab_file", "vocabulary file"),
            lower_case=tokenizer.lower_case)
    if tokenizer.type == "sentencepiece":
        _existing_file(tokenizer, "sp_model_file", "SentencePiece model")
        # The layer keeps the serialized proto, so no path ends up in a SavedModel; it
        # case-folds (`tensorflow_text.case_fold_utf8`) before the SentencePiece op.
        layer = _text_layers().SentencepieceTokenizer(
            lower_case=tokenizer.lower_case, model_file_path=tokenizer.sp_model_file)
        missing = set(SPECIAL_PIECES) - set(layer.get_special_tokens_dict())
        if missing:
            raise ValueError(
                f"{tokenizer.sp_model_file}: SentencePiece model lacks the pieces for "
                f"{sorted(missing)}; train it with `train_sentencepiece` "
                "(task.model.tokenizer.sp_model_file)")
        return layer
    raise ValueError(f"task.model.tokenizer.type: unknown tokenizer {tokenizer.type!r}")


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


def pack_single_segment(token_ids: tf.RaggedTensor, seq_length, start_id: int, end_id: int,
                        pad_id: int, pad_to_seq_length: bool = False) -> Dict[str, tf.Tensor]:
    """Packs one segment as `[CLS] tokens [SEP]`, truncated to `seq_length` in total.

    Uses core TensorFlow ops only (no TF-Text trimmer), so TF Serving can run it. The result
    is padded to the longest row of the batch, or to `seq_length` with `pad_to_seq_length`
    (static shapes, as training on TPUs and cross-replica gathers need).

    Args:
        token_ids: int32 RaggedTensor [batch, (words), (pieces)] or [batch, (tokens)].
        seq_length: maximum length including the two special tokens.
    """
    if token_ids.ragged_rank > 1:
        token_ids = token_ids.merge_dims(1, -1)
    token_ids = tf.cast(token_ids, tf.int32)
    token_ids = token_ids[:, : seq_length - 2]
    batch_size = token_ids.nrows(out_type=tf.int32)
    starts = tf.fill([batch_size, 1], tf.constant(start_id, tf.int32))
    ends = tf.fill([batch_size, 1], tf.constant(end_id, tf.int32))
    packed = tf.concat([starts, token_ids, ends], axis=1)
    shape = [None, seq_length] if pad_to_seq_length else None
    word_ids = packed.to_tensor(default_value=pad_id, shape=shape)
    mask = tf.ones_like(packed).to_tensor(default_value=0, shape=shape)
    return {
        "input_word_ids": word_ids,
        "input_mask": mask,
        "input_type_ids": tf.zeros_like(word_ids),
    }


def pack_two_segments(first: tf.RaggedTensor, second: tf.RaggedTensor, seq_length: int,
                      start_id: int, end_id: int, pad_id: int) -> Dict[str, tf.Tensor]:
    """Packs `[CLS] first [SEP] second [SEP]` (type ids 0 then 1), padded to `seq_length`.

    A row whose `second` is empty packs as `[CLS] first [SEP]`. Pairs longer than
    `seq_length` are trimmed from their ends, the longer segment first: each segment keeps at
    least half of the room when it needs it (as BERT's pair truncation). Core TF ops only.

    Args:
        first, second: int RaggedTensors [batch, (words), (pieces)] or [batch, (tokens)].
        seq_length: total length including the special tokens.

    Returns:
        dict of int32 [batch, seq_length] `input_word_ids`, `input_mask`, `input_type_ids`.
    """
    if first.ragged_rank > 1:
        first = first.merge_dims(1, -1)
    if second.ragged_rank > 1:
        second = second.merge_dims(1, -1)
    first = tf.cast(first, tf.int32).with_row_splits_dtype(tf.int64)
    second = tf.cast(second, tf.int32).with_row_splits_dtype(tf.int64)
    has_second = tf.cast(second.row_lengths() > 0, tf.int32)
    room = seq_length - 2 - has_second
    len_first = tf.cast(first.row_lengths(), tf.int32)
    len_second = tf.cast(second.row_lengths(), tf.int32)
    keep_first = tf.minimum(len_first, tf.maximum(room // 2, room - len_second))
    keep_second = tf.minimum(len_second, room - keep_first)

    def head(tokens, keep):
        positions = tf.ragged.range(tf.cast(tokens.row_lengths(), tf.int32))
        return tf.ragged.boolean_mask(tokens, positions < keep[:, None])

    first, second = head(first, keep_first), head(second, keep_second)
    batch_size = first.nrows(out_type=tf.int32)
    starts = tf.fill([batch_size, 1], tf.constant(start_id, tf.int32))
    ends = tf.fill([batch_size, 1], tf.constant(end_id, tf.int32))
    second_ends = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(has_second)], tf.constant(end_id, tf.int32)),
        tf.cast(has_second, tf.int64))
    starts = tf.RaggedTensor.from_tensor(starts)
    ends = tf.RaggedTensor.from_tensor(ends)
    packed = tf.concat([starts, first, ends, second, second_ends], axis=1)
    type_ids = tf.concat([tf.zeros_like(starts), tf.zeros_like(first), tf.zeros_like(ends),
                          tf.ones_like(second), tf.ones_like(second_ends)], axis=1)
    shape = [None, seq_length]
    return {
        "input_word_ids": packed.to_tensor(default_value=pad_id, shape=shape),
        "input_mask": tf.ones_like(packed).to_tensor(default_value=0, shape=shape),
        "input_type_ids": type_ids.to_tensor(default_value=0, shape=shape),
    }


def tokenize_and_pack(tokenizer: tf_keras.layers.Layer, special: Dict[str, int],
                      sentences: tf.Tensor, seq_length,
                      pad_to_seq_length: bool = False) -> Dict[str, tf.Tensor]:
    """Strings [batch] -> TF Hub input dict of `[CLS] tokens [SEP]`, via `pack_single_segment`.

    `special` is `special_token_ids(tokenizer)`.
    """
    ids = tokenizer(valid_utf8(sentences))
    return pack_single_segment(ids, seq_length, special["start_of_sequence_id"],
                               special["end_of_segment_id"], special["padding_id"],
                               pad_to_seq_length=pad_to_seq_length)


class _ValidUtf8(tf_keras.layers.Layer):
    """Keras wrapper of `valid_utf8`, so the preprocessor stays a plain functional model."""

    def call(self, inputs):
        return valid_utf8(inputs)


def create_preprocessor(tokenizer_config: configs.TokenizerConfig,
                        seq_length: int) -> tf_keras.Model:
    """Builds a model that implements the TF Hub text preprocessor contract.

    Root call: strings [batch] -> dict of int32 [batch, seq_length]. Attached:
    `.tokenize` (strings -> ragged ids, with `.get_special_tokens_dict()`) and
    `.bert_pack_inputs(segments, seq_length=...)` for one or two segments.
    """
    text_layers = _text_layers()
    from official.nlp.tools import export_tfhub_lib

    tokenizer = build_tokenizer(tokenizer_config)
    special_tokens = tokenizer.get_special_tokens_dict()
    sentences = tf_keras.layers.Input(shape=(), dtype=tf.string, name="sentences")
    tokens = tokenizer(_ValidUtf8(name="valid_utf8")(sentences))
    pack = text_layers.BertPackInputs(seq_length=seq_length, special_tokens_dict=special_tokens)
    preprocessor = tf_keras.Model(sentences, pack(tokens))
    preprocessor.tokenize = tf_keras.Model(sentences, tokens)
    preprocessor.tokenize.get_special_tokens_dict = tf.train.Checkpoint()
    preprocessor.tokenize.get_special_tokens_dict.__call__ = tf.function(
        lambda: tokenizer.get_special_tokens_dict(), input_signature=[])
    preprocessor.bert_pack_inputs = export_tfhub_lib.BertPackInputsSavedModelWrapper(pack)
    return preprocessor


def special_token_ids(tokenizer: tf_keras.layers.Layer) -> Dict[str, int]:
    """The tokenizer's special-token ids as Python ints."""
    return {k: int(v) for k, v in tokenizer.get_special_tokens_dict().items()}


def copy_vocab_aside(vocab_file: str, directory: str) -> str:
    """Copies the vocabulary so no path of the user's machine ends up in a SavedModel."""
    target = os.path.join(directory, os.path.basename(vocab_file) or "vocab.txt")
    tf.io.gfile.makedirs(directory)
    tf.io.gfile.copy(vocab_file, target, overwrite=True)
    return target
