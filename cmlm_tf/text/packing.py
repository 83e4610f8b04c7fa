"""Token ids packed into the TF Hub encoder inputs, and the TF Hub text preprocessor.

`pack_single_segment` packs `[CLS] tokens [SEP]`, `pack_two_segments` a pair with type ids 0
then 1; both give the dict of int32 `input_word_ids`, `input_mask` and `input_type_ids`
the encoder takes. `tokenize_and_pack` and `SentencePacker` go from strings to that dict with
a tokenizer of `tokenization`, for the serving export and the training data alike;
`create_preprocessor` is the exported preprocessor model.
"""

from typing import Dict

import tensorflow as tf
import tf_keras
from official.nlp.modeling.layers import text_layers
from official.nlp.tools import export_tfhub_lib

from cmlm_tf import configs
from cmlm_tf.text import tokenization


def pack_single_segment(token_ids: tf.RaggedTensor, seq_length, start_id: int, end_id: int,
                        *, pad_id: int, pad_to_seq_length: bool = False) -> Dict[str, tf.Tensor]:
    """Packs one segment as `[CLS] tokens [SEP]`, truncated to `seq_length` in total.

    Dense core ops only (gather, select; no ragged or TF-Text op), so TF Serving and TFLite
    run it. The result is padded to the longest row of the batch, or to `seq_length` with
    `pad_to_seq_length` (static shapes, as training on TPUs and cross-replica gathers need).

    Args:
        token_ids: int RaggedTensor [batch, (words), (pieces)] or [batch, (tokens)].
        seq_length: maximum length including the two special tokens.

    Returns:
        dict of int32 [batch, length] `input_word_ids`, `input_mask`, `input_type_ids`.
    """
    if token_ids.ragged_rank > 1:
        token_ids = token_ids.merge_dims(1, -1)
    values = tf.cast(token_ids.values, tf.int32)
    # Row starts and lengths without `x[a:b]` slicing, which TFLite's converter keeps as a
    # StridedSlice it has no kernel for.
    row_lengths = tf.cast(token_ids.row_lengths(), tf.int32)
    row_starts = tf.cumsum(row_lengths, exclusive=True)
    lengths = tf.minimum(row_lengths, seq_length - 2)
    if pad_to_seq_length:
        width = seq_length
    else:
        width = tf.reduce_max(tf.concat([lengths, [0]], axis=0)) + 2
    kept = tf.expand_dims(lengths, 1)
    positions = tf.expand_dims(tf.range(width), 0)
    # Position p > 0 holds token p - 1 of its row; a pad value at the end keeps the gather
    # in range for empty rows and batches.
    last = tf.shape(values)[0]
    tokens = tf.gather(tf.concat([values, [pad_id]], axis=0),
                       tf.clip_by_value(tf.expand_dims(row_starts, 1) + positions - 1, 0, last))
    is_token = tf.logical_and(positions > 0, positions <= kept)
    word_ids = tf.where(
        positions == 0, start_id,
        tf.where(is_token, tokens, tf.where(positions == kept + 1, end_id, pad_id)))
    return {
        "input_word_ids": word_ids,
        "input_mask": tf.cast(positions <= kept + 1, tf.int32),
        "input_type_ids": tf.zeros_like(word_ids),
    }


def pack_two_segments(first: tf.RaggedTensor, second: tf.RaggedTensor, seq_length: int,
                      start_id: int, *, end_id: int, pad_id: int) -> Dict[str, tf.Tensor]:
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
                      *, pad_to_seq_length: bool = False,
                      replace_invalid_utf8: bool = True) -> Dict[str, tf.Tensor]:
    """Strings [batch] -> TF Hub input dict of `[CLS] tokens [SEP]`, via `pack_single_segment`.

    `special` is `tokenization.special_token_ids(tokenizer)`. `replace_invalid_utf8=False`
    leaves out the `tokenization.valid_utf8` step (TFLite has no kernel for it): the caller
    then passes valid UTF-8.
    """
    if replace_invalid_utf8:
        sentences = tokenization.valid_utf8(sentences)
    ids = tokenizer(sentences)
    return pack_single_segment(ids, seq_length, special["start_of_sequence_id"],
                               special["end_of_segment_id"], pad_id=special["padding_id"],
                               pad_to_seq_length=pad_to_seq_length)


class SentencePacker:
    """Packs batches of sentences with one tokenizer: a string [batch] tensor -> a TF Hub
    input dict of int32 [batch, seq_length], padded to `seq_length` (static shapes, as the
    train and validation pipelines give them). Attributes: `tokenizer`, its `special` ids
    and `seq_length`."""

    def __init__(self, tokenizer: tf_keras.layers.Layer, seq_length: int):
        self.tokenizer = tokenizer
        self.special = tokenization.special_token_ids(tokenizer)
        self.seq_length = seq_length

    def __call__(self, sentences: tf.Tensor) -> Dict[str, tf.Tensor]:
        return tokenize_and_pack(self.tokenizer, self.special, sentences, self.seq_length,
                                 pad_to_seq_length=True)


class _ValidUtf8(tf_keras.layers.Layer):
    """Keras wrapper of `tokenization.valid_utf8`, so the preprocessor stays a plain functional
    model."""

    def call(self, inputs):
        return tokenization.valid_utf8(inputs)


class _WordPieces(tf_keras.layers.Layer):
    """`FastWordpieceTokenizer.tokenize_words` as a layer: the preprocessor's `.tokenize`
    returns [batch, (words), (pieces)] for WordPiece, as TF Hub BERT preprocessors do."""

    def __init__(self, tokenizer: "tokenization.FastWordpieceTokenizer", **kwargs):
        super().__init__(**kwargs)
        self.tokenizer = tokenizer

    def call(self, inputs):
        return self.tokenizer.tokenize_words(inputs)


def create_preprocessor(tokenizer_config: configs.TokenizerConfig,
                        seq_length: int) -> tf_keras.Model:
    """Builds a model that implements the TF Hub text preprocessor contract.

    Root call: strings [batch] -> dict of int32 [batch, seq_length]. Attached:
    `.tokenize` (strings -> ragged ids, with `.get_special_tokens_dict()`) and
    `.bert_pack_inputs(segments, seq_length=...)` for one or two segments.
    """
    tokenizer = tokenization.build_tokenizer(tokenizer_config)
    special_tokens = tokenizer.get_special_tokens_dict()
    sentences = tf_keras.layers.Input(shape=(), dtype=tf.string, name="sentences")
    valid = _ValidUtf8(name="valid_utf8")(sentences)
    if isinstance(tokenizer, tokenization.FastWordpieceTokenizer):
        tokens = _WordPieces(tokenizer, name="fast_wordpiece")(valid)
    else:
        tokens = tokenizer(valid)
    pack = text_layers.BertPackInputs(seq_length=seq_length, special_tokens_dict=special_tokens)
    preprocessor = tf_keras.Model(sentences, pack(tokens))
    preprocessor.tokenize = tf_keras.Model(sentences, tokens)
    preprocessor.tokenize.get_special_tokens_dict = tf.train.Checkpoint()
    preprocessor.tokenize.get_special_tokens_dict.__call__ = tf.function(
        lambda: tokenizer.get_special_tokens_dict(), input_signature=[])
    preprocessor.bert_pack_inputs = export_tfhub_lib.BertPackInputsSavedModelWrapper(pack)
    return preprocessor
