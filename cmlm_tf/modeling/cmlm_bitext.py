"""The CMLM + bitext retrieval multitask model: one shared encoder, two objectives.

`ConditionalMLM` (`cmlm_tf.modeling.conditional_mlm`) on a text batch, and its own encoder as
a dual encoder (`cmlm_tf.modeling.dual_encoder.encode_pairs`) on a translation batch, so the
CMLM loss and the translation-ranking loss train the same weights (CMLM paper §4.2).
"""

import tf_keras

from cmlm_tf.modeling import dual_encoder
from cmlm_tf.modeling.conditional_mlm import ConditionalMLM


class CMLMBitextModel(tf_keras.Model):
    """The CMLM pretrainer plus translation ranking through its own encoder.

    Args:
        conditional_mlm: the `ConditionalMLM` whose encoder both objectives share.

    Call args:
        inputs: dict with `cmlm` (the CMLM batch) and, in training, `bitext` (the
            `BitextFeaturizer` batch).

    Returns:
        dict: `mlm_logits` and `sentence_vector` from CMLM; `bitext`, the pair embeddings,
        when the bitext batch is given.
    """

    def __init__(self, conditional_mlm: ConditionalMLM, **kwargs):
        super().__init__(**kwargs)
        self.cmlm = conditional_mlm
        self.encoder = conditional_mlm.encoder

    @property
    def checkpoint_items(self):
        return self.cmlm.checkpoint_items

    def call(self, inputs, training=None):
        outputs = dict(self.cmlm(inputs["cmlm"], training=training))
        if "bitext" in inputs:
            outputs["bitext"] = dual_encoder.encode_pairs(self.encoder, inputs["bitext"],
                                                          training=training)
        return outputs
