"""Conditional masked language modelling (CMLM).

*Universal Sentence Representation Learning with Conditional Masked Language Model*: the
sentence vector v of s1 is projected into N vectors, which are appended to the token
embeddings of masked s2; the same encoder must then predict s2's masked tokens.
"""

import dataclasses

import tensorflow as tf
import tf_keras
from official.modeling import hyperparams

from cmlm_tf import configs
from cmlm_tf.modeling import layers
from cmlm_tf.modeling.sentence_encoder import SentenceEncoder


@dataclasses.dataclass
class CMLMHeadConfig(hyperparams.Config):
    """`num_projections`: N conditioning vectors (paper: 15); one of them is v itself."""

    num_projections: int = 15
    mlm_activation: str = "gelu_exact"
    dense_type_id: int = 0


@dataclasses.dataclass
class CMLMModelConfig(configs.SentenceModelConfig):
    """`task.model` of the CMLM experiments: the shared encoder plus `cmlm`, the CMLM head."""

    cmlm: CMLMHeadConfig = dataclasses.field(default_factory=CMLMHeadConfig)


@tf_keras.utils.register_keras_serializable(package="cmlm_tf")
class ConditionalProjection(tf_keras.layers.Layer):
    """Projects a sentence vector into `num_projections` conditioning vectors.

    Output 0 is v itself (the identity projection). The other N-1 share the paper's
    appendix-C network FC(h, 2h, ReLU) -> FC(2h, 2h, ReLU) -> FC(2h, h) up to its last layer,
    which produces all N-1 at once: FC(2h, (N-1)·h), reshaped to [N-1, h]. Sharing the first
    two layers keeps the cost near one projection's; the paper does not say whether its
    projections share them.

    Args:
        hidden_size: h, the encoder width.
        num_projections: N (paper: 15).

    Call args:
        v: float [batch, h].

    Returns:
        float [batch, N, h], with [:, 0, :] == v.
    """

    def __init__(self, hidden_size: int, num_projections: int,
                 initializer_range: float = 0.02, **kwargs):
        super().__init__(**kwargs)
        if num_projections < 1:
            raise ValueError(f"task.model.cmlm.num_projections must be >= 1, got "
                             f"{num_projections}")
        self.hidden_size = hidden_size
        self.num_projections = num_projections
        self.initializer_range = initializer_range

        def init():
            return tf_keras.initializers.TruncatedNormal(stddev=initializer_range)

        self.hidden_1 = tf_keras.layers.Dense(2 * hidden_size, activation="relu",
                                              kernel_initializer=init(), name="hidden_1")
        self.hidden_2 = tf_keras.layers.Dense(2 * hidden_size, activation="relu",
                                              kernel_initializer=init(), name="hidden_2")
        self.output_layer = None
        if num_projections > 1:
            self.output_layer = tf_keras.layers.Dense(
                (num_projections - 1) * hidden_size, kernel_initializer=init(), name="output")

    def call(self, v):
        identity = v[:, tf.newaxis, :]
        if self.output_layer is None:
            return identity
        others = self.output_layer(self.hidden_2(self.hidden_1(v)))
        others = tf.reshape(others, [-1, self.num_projections - 1, self.hidden_size])
        return tf.concat([identity, others], axis=1)

    def get_config(self):
        return {**super().get_config(), "hidden_size": self.hidden_size,
                "num_projections": self.num_projections,
                "initializer_range": self.initializer_range}


class ConditionalMLM(tf_keras.Model):
    """The CMLM pretrainer: shared encoder, conditional projection, tied-embedding MLM head.

    Call args:
        inputs: dict with `sentence1` and `sentence2` (TF Hub input dicts; s2 already
            masked) and `masked_lm_positions` int32 [batch, P].

    Returns:
        dict with `mlm_logits` float [batch, P, vocab] and `sentence_vector` (v) [batch, h].
    """

    def __init__(self, encoder_config: configs.EncoderConfig, num_projections: int,
                 mlm_activation: str = "gelu_exact", dense_type_id: int = 0, **kwargs):
        super().__init__(**kwargs)
        if encoder_config.projection_size:
            raise ValueError("task.model.encoder.projection_size must be 0 for CMLM: the "
                             "conditioning vectors join the encoder's own token width")
        self.encoder = SentenceEncoder(encoder_config, with_dense_inputs=True).build_variables()
        self.projection = ConditionalProjection(
            encoder_config.hidden_size, num_projections,
            initializer_range=encoder_config.initializer_range, name="conditional_projection")
        self.mlm_head = layers.tied_masked_lm(self.encoder, mlm_activation,
                                              encoder_config.initializer_range)
        self.num_projections = num_projections
        self.dense_type_id = dense_type_id

    @property
    def checkpoint_items(self):
        return {"encoder": self.encoder, "projection": self.projection,
                "mlm_head": self.mlm_head}

    def call(self, inputs, training=None):
        sentence_vector = self.encoder(inputs["sentence1"], training=training)["pooled_output"]
        conditioning = self.projection(sentence_vector)
        batch_size = tf.shape(conditioning)[0]
        dense_shape = [batch_size, self.num_projections]
        second = dict(inputs["sentence2"],
                      dense_inputs=tf.cast(conditioning, tf.float32),
                      dense_mask=tf.ones(dense_shape, tf.int32),
                      dense_type_ids=tf.fill(dense_shape, self.dense_type_id))
        sequence = self.encoder(second, training=training)["sequence_output"]
        logits = self.mlm_head(sequence, masked_positions=inputs["masked_lm_positions"])
        return {"mlm_logits": logits, "sentence_vector": sentence_vector}


def build_conditional_mlm(model_config: CMLMModelConfig, seq_length: int) -> ConditionalMLM:
    """The CMLM model of `task.model`, checked against `task.train_data.seq_length`."""
    configs.validate_model_config(model_config)
    encoder = model_config.encoder
    needed = seq_length + model_config.cmlm.num_projections
    if needed > encoder.max_position_embeddings:
        raise ValueError(
            f"task.model.encoder.max_position_embeddings ({encoder.max_position_embeddings}"
            f") must cover task.train_data.seq_length + task.model.cmlm.num_projections "
            f"({needed})")
    return ConditionalMLM(
        encoder, model_config.cmlm.num_projections,
        mlm_activation=model_config.cmlm.mlm_activation,
        dense_type_id=model_config.cmlm.dense_type_id)
