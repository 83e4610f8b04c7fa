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
