"""The TF Serving models (`OUT/serving/1`, and `serving_bf16/1`, `serving_int8/1` where the
export wrote them): strings or token ids to sentence embeddings.

One module holds the tokenizer and the `InferenceForward` built from the trained encoder.
Its signatures are what TF Serving, `TFSMLayer` and `tf.saved_model.load` users call, its
root call is what `hub.KerasLayer("serving/1")` calls, and its other functions are what
`cmlm_tf.load()` calls. Nothing in it needs XLA.

Every request runs in length buckets (`InferenceForward.in_length_buckets`): its rows are
sorted by token count, cut into sub-batches of `bucket_rows` rows (default
`serving_forward.BUCKET_ROWS`, 8), each padded only to its own longest row, and the
vectors come back in input order. The plan is part of the traced graph, so a server runs it
with no Python; each vector equals the one its text gets alone, up to float rounding.

Every function checks its inputs in the graph, before any tokenizer op or gather runs: a
called signature does not enforce its declared shapes, and the tokenizer ops crash the
process on a scalar string (TF Serving's columnar request with a bare string sends one). A
string input of another shape than [batch], token ids of another rank than 2, token-id inputs
of different shapes, ids outside the vocabulary and sequences longer than the position
embeddings raise `InvalidArgumentError` naming the input.

A module has one `precision`, the one its signatures and root call run: `serving/1` runs
float32 (and keeps bfloat16 functions for `cmlm_tf.load`), `serving_bf16/1` bfloat16 and
`serving_int8/1` int8, with the same signatures, so a TF Serving user switches precision by
model name. A module whose forward has int8 layers calibrates their activation ranges when
it is built (`InferenceForward.calibrate_int8` on `CALIBRATION_TEXTS`, the export's probe
texts, through its tokenizer), so every int8 request is quantized over the same ranges.
"""

from typing import Dict, Optional

import tensorflow as tf

from cmlm_tf.export.forward_checks import PROBE_TEXTS as CALIBRATION_TEXTS
from cmlm_tf.export.serving_forward import BUCKET_ROWS, InferenceForward
from cmlm_tf.modeling.sentence_encoder import INPUT_KEYS
from cmlm_tf.text import packing, tokenization
from cmlm_tf.vectors import l2_normalize

SENTENCES_SPEC = tf.TensorSpec([None], tf.string, name="sentences")
TOKEN_ID_SPECS = [tf.TensorSpec([None, None], tf.int32, name=key) for key in INPUT_KEYS]
# The exported signatures: name -> (inputs, outputs).
SIGNATURES = {"serving_default": (["sentences"], ["embeddings"]),
              "from_token_ids": (list(INPUT_KEYS), ["embeddings"])}


def _checked_sentences(sentences: tf.Tensor) -> tf.Tensor:
    """`sentences`, with a run-time check that it is [batch]: `InvalidArgumentError` (`Shape
    of tensor sentences [] is not compatible with expected shape [?]`) otherwise.

    `tf.ensure_shape` and not a rank assertion: the traced rank is already 1, so an
    assertion on it is folded away and never runs.
    """
    return tf.ensure_shape(sentences, [None])


def _require(condition: tf.Tensor, message: str) -> tf.Operation:
    return tf.debugging.Assert(condition, [message])


class ServingModule(tf.Module):
    """What `serving/1` holds.

    Root call (`hub.KerasLayer("serving/1")`, `model(sentences)`): strings [batch] -> float32
    [batch, dim], L2-normalised: what `serving_default` returns as `embeddings`.

    Signatures (named inputs and outputs, no XLA):
        serving_default: `sentences` string [batch] -> `embeddings` float32 [batch, dim],
            L2-normalised; texts are truncated to `seq_length` tokens.
        from_token_ids: `input_word_ids`, `input_mask`, `input_type_ids` int32
            [batch, seq] -> `embeddings`.

    Both signatures and the root call run the request in length buckets of `bucket_rows`
    rows (`InferenceForward.in_length_buckets`), in `precision` (one of the forward's).

    Functions for `cmlm_tf.load()`:
        tokenize: strings [batch] -> dict of int32 [batch, longest] token ids.
        pooled_PRECISION (one per precision of the forward: `pooled_float32`, ...): token ids
            -> float32 [batch, dim], not normalised; the whole batch in one forward (one
            shape per call: what XLA compiles).
        bucketed_PRECISION: the same in length buckets, as the signatures run it.
        describe: no input -> `dim`, `seq_length`, `vocab_size` (int32 scalars), `pooling`,
            `hidden_activation`, `precision` (strings): what the model itself computes, so
            a loader need not trust the metadata file.
    """

    def __init__(self, forward: InferenceForward, tokenizer, seq_length: int,
                 *, bucket_rows: int = BUCKET_ROWS, precision: str = "float32"):
        super().__init__(name="serving")
        if bucket_rows < 1:
            raise ValueError(f"bucket_rows must be at least 1, got {bucket_rows}")
        if precision not in forward.precisions:
            raise ValueError(f"precision {precision!r} is not among the forward's "
                             f"{forward.precisions}")
        self.precision = precision
        self.forward = forward
        self.tokenizer = tokenizer
        self.seq_length = seq_length
        self.bucket_rows = int(bucket_rows)
        self._special = tokenization.special_token_ids(tokenizer)
        if "int8" in forward.precisions and not forward.int8_calibrated:
            # The int8 layers' activation ranges, from the float32 forward on the texts the
            # export checks its forwards with, through this module's own tokenizer.
            forward.calibrate_int8(**self.tokenize(tf.constant(CALIBRATION_TEXTS)))

        def pooled_function(precision: str, *, bucketed: bool):
            @tf.function(input_signature=TOKEN_ID_SPECS)
            def pooled(input_word_ids, input_mask, input_type_ids):
                return self.pooled(*self.checked_token_ids(
                    input_word_ids, input_mask, input_type_ids), precision=precision,
                    bucketed=bucketed)
            return pooled

        for prepared in forward.precisions:
            setattr(self, f"pooled_{prepared}", pooled_function(prepared, bucketed=False))
            setattr(self, f"bucketed_{prepared}", pooled_function(prepared, bucketed=True))

    @tf.function(input_signature=[])
    def describe(self):
        return {"dim": tf.constant(self.forward.output_dim, tf.int32),
                "seq_length": tf.constant(self.seq_length, tf.int32),
                "vocab_size": tf.constant(self._special["vocab_size"], tf.int32),
                "num_attention_heads": tf.constant(self.forward.num_heads, tf.int32),
                "pooling": tf.constant(self.forward.pooling),
                "hidden_activation": tf.constant(self.forward.hidden_activation),
                "precision": tf.constant(self.precision)}

    def checked_token_ids(self, input_word_ids, input_mask, input_type_ids):
        """The three int32 [batch, seq] inputs, checked at run time: rank 2, one shape,
        `seq` within the position embeddings and ids within their embedding tables (a GPU
        gather returns zeros for an id out of range instead of failing)."""
        names = ("input_word_ids", "input_mask", "input_type_ids")
        inputs = [tf.ensure_shape(tensor, [None, None])
                  for tensor in (input_word_ids, input_mask, input_type_ids)]
        shape = tf.shape(inputs[0])
        max_positions = int(self.forward.position_embeddings.shape[0])
        checks = [_require(tf.reduce_all(tf.equal(tf.shape(tensor), shape)),
                           f"{name} must have the shape of input_word_ids [batch, seq]")
                  for name, tensor in zip(names[1:], inputs[1:])]
        checks.append(_require(shape[1] <= max_positions,
                               f"input_word_ids is longer than the {max_positions} positions "
                               "of the model; truncate it to at most that many tokens"))
        for name, tensor, table in ((names[0], inputs[0], self.forward.word_embeddings),
                                    (names[2], inputs[2], self.forward.type_embeddings)):
            size = int(table.shape[0])
            checks.append(_require(
                tf.reduce_all((tensor >= 0) & (tensor < size)),
                f"{name} has an id outside [0, {size}); take the ids from the "
                "tokenizer of this export"))
        with tf.control_dependencies(checks):
            return [tf.identity(tensor) for tensor in inputs]

    def pooled(self, input_word_ids, input_mask, input_type_ids, *, precision: Optional[str] = None,
               bucketed: bool = True) -> tf.Tensor:
        """The forward's pooled output, float [batch, dim], not normalised, in `precision`
        (default: the module's); in length buckets of `bucket_rows` rows unless `bucketed`
        is False."""
        precision = precision or self.precision
        if not bucketed:
            return self.forward(input_word_ids, input_mask, input_type_ids, precision=precision)
        return self.forward.in_length_buckets(input_word_ids, input_mask, input_type_ids,
                                              precision=precision, bucket_rows=self.bucket_rows)

    def _tokens(self, sentences) -> Dict[str, tf.Tensor]:
        return packing.tokenize_and_pack(self.tokenizer, self._special,
                                              _checked_sentences(sentences), self.seq_length)

    def _embeddings(self, sentences) -> tf.Tensor:
        tokens = self._tokens(sentences)
        return l2_normalize(self.pooled(tokens["input_word_ids"], tokens["input_mask"],
                                        tokens["input_type_ids"]))

    @tf.function(input_signature=[SENTENCES_SPEC])
    def tokenize(self, sentences):
        return self._tokens(sentences)

    @tf.function(input_signature=[SENTENCES_SPEC])
    def __call__(self, sentences):
        return self._embeddings(sentences)

    @tf.function(input_signature=[SENTENCES_SPEC])
    def serving_default(self, sentences):
        return {"embeddings": self._embeddings(sentences)}

    @tf.function(input_signature=TOKEN_ID_SPECS)
    def from_token_ids(self, input_word_ids, input_mask, input_type_ids):
        pooled = self.pooled(*self.checked_token_ids(input_word_ids, input_mask,
                                                     input_type_ids))
        return {"embeddings": l2_normalize(pooled)}

    def signatures(self) -> dict:
        return {"serving_default": self.serving_default, "from_token_ids": self.from_token_ids}
