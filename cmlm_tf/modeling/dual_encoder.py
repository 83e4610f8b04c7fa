"""A dual encoder: one shared sentence encoder embeds both sides of a translation pair."""

from typing import Dict, Sequence

import tensorflow as tf
import tf_keras

from cmlm_tf import configs
from cmlm_tf.modeling.sentence_encoder import SentenceEncoder

PAIR_KEYS = ("source", "target", "hard_negatives")


def encode_pairs(encoder: tf_keras.Model, features: Dict, training=None,
                 keys: Sequence[str] = PAIR_KEYS) -> Dict[str, tf.Tensor]:
    """Embeds `source`, `target` and (if present) `hard_negatives` in one encoder call.

    The sides are stacked along the batch axis, so the encoder runs one large batch instead
    of two or three small ones; the inputs must share one (static) sequence length.

    Args:
        encoder: a `SentenceEncoder`.
        features: dict with TF Hub input dicts under `source`, `target` and optionally
            `hard_negatives` (int32 [rows, seq_length] each).
        keys: the feature keys to embed, those present in `features` (NLI pairs pass
            `("premise", "hypothesis")`); the first must be present.

    Returns:
        dict of float [rows, dim] `pooled_output` vectors under the same keys.
    """
    keys = [k for k in keys if k in features]
    sizes = [tf.shape(features[k]["input_word_ids"])[0] for k in keys]
    stacked = {name: tf.concat([features[k][name] for k in keys], axis=0)
               for name in features[keys[0]]}
    pooled = encoder(stacked, training=training)["pooled_output"]
    return dict(zip(keys, tf.split(pooled, tf.stack(sizes), axis=0)))


def chunk_of_pairs(features: Dict, index: tf.Tensor, size: int) -> Dict:
    """Pairs `index·size … index·size + size − 1` of a bitext batch (TF Hub input dicts under
    `source`, `target` and, k per pair, `hard_negatives`), with static shapes.

    Args:
        features: the batch; `source` holds [batch, seq_length] tensors of a static `batch`
            that `size` divides, `hard_negatives` [batch·k, seq_length].
        index: int32 scalar (may be a tensor), the chunk, in [0, batch / size).
        size: pairs per chunk.

    Returns:
        the same structure with [size, seq_length] (`hard_negatives`: [size·k, seq_length]).
    """
    out = {}
    batch = features["source"]["input_word_ids"].shape[0]
    chunks = batch // size
    for key in PAIR_KEYS:
        if key not in features:
            continue
        # Reshaped to [chunks, rows, ...] and gathered by chunk rather than sliced with
        # tensor bounds: XLA (TPU, `jit_compile`) needs the chunk's shape to be static.
        out[key] = {name: tf.gather(tf.reshape(value, [chunks, -1] + value.shape[1:].as_list()),
                                    index)
                    for name, value in features[key].items()}
    return out


class DualEncoder(tf_keras.Model):
    """Shared-weight dual encoder for translation ranking.

    Call args:
        inputs: dict from `cmlm_tf.data.bitext.BitextFeaturizer`: `source`, `target`
            [, `hard_negatives`] TF Hub input dicts (plus fingerprints, ignored here).

    Returns:
        dict of float [rows, dim] embeddings (`pooled_output`, not normalised) under
        `source`, `target` [, `hard_negatives`].
    """

    def __init__(self, encoder_config: configs.EncoderConfig, **kwargs):
        super().__init__(**kwargs)
        self.encoder = SentenceEncoder(encoder_config).build_variables()

    @property
    def checkpoint_items(self):
        return {"encoder": self.encoder}

    def call(self, inputs, training=None):
        return encode_pairs(self.encoder, inputs, training=training)
