"""The TF Serving model (`OUT/serving/1`): strings or token ids to sentence embeddings.

One module holds the tokenizer and the `InferenceForward` built from the trained encoder.
Its signatures are what TF Serving, `TFSMLayer` and `tf.saved_model.load` users call; its
other functions are what `cmlm_tf.load()` calls. Nothing in it needs XLA.
"""

from typing import Dict

import tensorflow as tf

from cmlm_tf import tokenization
from cmlm_tf.modeling.inference_forward import InferenceForward
from cmlm_tf.modeling.sentence_encoder import INPUT_KEYS
from cmlm_tf.vectors import l2_normalize

SENTENCES_SPEC = tf.TensorSpec([None], tf.string, name="sentences")
TOKEN_ID_SPECS = [tf.TensorSpec([None, None], tf.int32, name=key) for key in INPUT_KEYS]
# The exported signatures: name -> (inputs, outputs).
SIGNATURES = {"serving_default": (["sentences"], ["embeddings"]),
              "from_token_ids": (list(INPUT_KEYS), ["embeddings"])}


class ServingModule(tf.Module):
    """What `serving/1` holds.

    Signatures (named inputs and outputs, no XLA):
        serving_default: `sentences` string [batch] -> `embeddings` float32 [batch, dim],
            L2-normalised; texts are truncated to `seq_length` tokens.
        from_token_ids: `input_word_ids`, `input_mask`, `input_type_ids` int32
            [batch, seq] -> `embeddings`.

    Functions for `cmlm_tf.load()`:
        tokenize: strings [batch] -> dict of int32 [batch, longest] token ids.
        pooled_float32, pooled_bfloat16: token ids -> float32 [batch, dim], not normalised.
        describe: no input -> `dim`, `seq_length`, `vocab_size` (int32 scalars), `pooling`,
            `hidden_activation` (strings): what the model itself computes, so a loader need
            not trust the metadata file.
    """

    def __init__(self, forward: InferenceForward, tokenizer, seq_length: int):
        super().__init__(name="serving")
        self.forward = forward
        self.tokenizer = tokenizer
        self.seq_length = seq_length
        self._special = tokenization.special_token_ids(tokenizer)

        def pooled_function(precision: str):
            @tf.function(input_signature=TOKEN_ID_SPECS)
            def pooled(input_word_ids, input_mask, input_type_ids):
                return self.forward(input_word_ids, input_mask, input_type_ids,
                                    precision=precision)
            return pooled

        for precision in forward.precisions:
            setattr(self, f"pooled_{precision}", pooled_function(precision))

    @tf.function(input_signature=[])
    def describe(self):
        return {"dim": tf.constant(self.forward.output_dim, tf.int32),
                "seq_length": tf.constant(self.seq_length, tf.int32),
                "vocab_size": tf.constant(self._special["vocab_size"], tf.int32),
                "num_attention_heads": tf.constant(self.forward.num_heads, tf.int32),
                "pooling": tf.constant(self.forward.pooling),
                "hidden_activation": tf.constant(self.forward.hidden_activation)}

    def _tokens(self, sentences) -> Dict[str, tf.Tensor]:
        return tokenization.tokenize_and_pack(self.tokenizer, self._special, sentences,
                                              self.seq_length)

    @tf.function(input_signature=[SENTENCES_SPEC])
    def tokenize(self, sentences):
        return self._tokens(sentences)

    @tf.function(input_signature=[SENTENCES_SPEC])
    def serving_default(self, sentences):
        tokens = self._tokens(sentences)
        pooled = self.forward(tokens["input_word_ids"], tokens["input_mask"],
                              tokens["input_type_ids"])
        return {"embeddings": l2_normalize(pooled)}

    @tf.function(input_signature=TOKEN_ID_SPECS)
    def from_token_ids(self, input_word_ids, input_mask, input_type_ids):
        pooled = self.forward(input_word_ids, input_mask, input_type_ids)
        return {"embeddings": l2_normalize(pooled)}

    def signatures(self) -> dict:
        return {"serving_default": self.serving_default, "from_token_ids": self.from_token_ids}
