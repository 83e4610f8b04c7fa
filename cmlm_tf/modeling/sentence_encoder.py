"""The one sentence encoder every cmlm_tf objective trains and every export ships.

Model Garden's `BertEncoderV2` + pooling + optional dense projection (linear, or with an
activation as sentence-transformers' `Dense` module) + optional L2 normalisation, taking and
returning the TF Hub text-encoder dicts.
"""

import os
from typing import Dict, Optional

import tensorflow as tf
import tf_keras
from official.nlp.modeling import networks

from cmlm_tf import configs
from cmlm_tf.driver import run_checkpoints
from cmlm_tf.modeling import layers

INPUT_KEYS = ("input_word_ids", "input_mask", "input_type_ids")


class SentenceEncoder(tf_keras.Model):
    """Maps the TF Hub input dict to sentence and token vectors.

    Call args:
        inputs: dict of int32 [batch, seq] `input_word_ids`, `input_mask`, `input_type_ids`;
            with `with_dense_inputs`, also `dense_inputs` float [batch, n, width],
            `dense_mask` and `dense_type_ids` int32 [batch, n], appended after the tokens.
        training: dropout on or off.

    Returns:
        dict with `pooled_output` float [batch, dim] (configured pooling and projection, not
        normalised), `default` (`pooled_output`, L2-normalised when `normalize`),
        `sequence_output` float [batch, seq, width] and `encoder_outputs` (one
        [batch, seq, width] tensor per layer). Pooling covers the tokens only, never the
        dense inputs.
    """

    def __init__(self, config: configs.EncoderConfig, *, with_dense_inputs: bool = False,
                 **kwargs):
        super().__init__(**kwargs)
        self.encoder_config = config
        self.bert = networks.BertEncoderV2(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            num_layers=config.num_layers,
            num_attention_heads=config.num_attention_heads,
            max_sequence_length=config.max_position_embeddings,
            type_vocab_size=config.type_vocab_size,
            inner_dim=config.intermediate_size,
            inner_activation=layers.get_activation(config.hidden_activation),
            output_dropout=config.dropout_rate,
            attention_dropout=config.attention_dropout_rate,
            initializer=tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range),
            with_dense_inputs=with_dense_inputs,
            name="bert")
        # BERT's tanh pooler is never used by sentence pooling: freezing it keeps it out of
        # gradients and optimizer updates (its variables stay, so checkpoints keep one layout).
        self.bert.pooler_layer.trainable = False
        self.pooler = layers.SequencePooling(config.pooling, name="pooling")
        self.projection = None
        if config.projection_size:
            self.projection = tf_keras.layers.Dense(
                config.projection_size, activation=config.projection_activation,
                name="projection")
        self.normalize = layers.L2Normalize(name="normalize") if config.normalize else None

    def get_config(self):
        return {"config": self.encoder_config.as_dict(),
                "with_dense_inputs": self.bert.get_config()["with_dense_inputs"]}

    @classmethod
    def from_config(cls, config):
        return cls(configs.EncoderConfig(**config["config"]),
                   with_dense_inputs=config["with_dense_inputs"])

    @property
    def output_dim(self) -> int:
        return self.encoder_config.projection_size or self.encoder_config.hidden_size

    def call(self, inputs: Dict[str, tf.Tensor], training=None):
        outputs = self.bert(inputs, training=training)
        sequence_output = outputs["sequence_output"]
        num_tokens = tf.shape(inputs["input_mask"])[1]
        token_vectors = sequence_output[:, :num_tokens, :]
        pooled = self.pooler(token_vectors, inputs["input_mask"])
        if self.projection is not None:
            pooled = self.projection(pooled)
        default = self.normalize(pooled) if self.normalize is not None else pooled
        return {
            "pooled_output": pooled,
            "default": default,
            "sequence_output": sequence_output,
            "encoder_outputs": outputs["encoder_outputs"],
        }

    def build_variables(self) -> "SentenceEncoder":
        """Creates all variables by running one tiny batch, then sets every LayerNorm's
        epsilon to `layer_norm_epsilon` (`BertEncoderV2` builds them with 1e-12)."""
        ones = tf.ones([1, 2], tf.int32)
        inputs = {"input_word_ids": ones, "input_mask": ones,
                  "input_type_ids": tf.zeros_like(ones)}
        self(inputs, training=False)
        for layer in self.bert.submodules:
            if isinstance(layer, tf_keras.layers.LayerNormalization):
                layer.epsilon = self.encoder_config.layer_norm_epsilon
        return self


def build_sentence_encoder(config: configs.EncoderConfig,
                           *, with_dense_inputs: bool = False) -> SentenceEncoder:
    configs.validate_model_config(configs.SentenceModelConfig(encoder=config))
    return SentenceEncoder(config, with_dense_inputs=with_dense_inputs).build_variables()


def resolve_checkpoint(path: str) -> str:
    """Returns a checkpoint prefix for a prefix or a directory (its latest checkpoint,
    `run_checkpoints.latest_checkpoint`)."""
    if not path:
        raise ValueError("task.init_checkpoint is empty")
    if tf.io.gfile.isdir(path):
        latest = run_checkpoints.latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"{path}: no checkpoint found in this directory")
        return latest
    if not tf.io.gfile.exists(path + ".index"):
        raise FileNotFoundError(f"{path}: no such checkpoint (expected {path}.index)")
    return path


def restore_encoder(encoder: tf_keras.Model, path: str,
                    extra_items: Optional[Dict[str, tf.Module]] = None,
                    encoder_key: str = "encoder") -> str:
    """Restores `encoder` (and optional `extra_items`) strictly from a checkpoint.

    The checkpoint must hold `encoder_key` (default `encoder`) at its root, as converter and
    training checkpoints do.
    Every variable of `encoder` must be found with a matching shape; anything else in the
    checkpoint (optimizer slots, heads of other objectives) is ignored.

    Returns the checkpoint prefix that was read.
    """
    prefix = resolve_checkpoint(path)
    items = {encoder_key: encoder, **(extra_items or {})}
    checkpoint = tf.train.Checkpoint(**items)
    try:
        status = checkpoint.read(prefix)
        status.expect_partial()
        status.assert_existing_objects_matched()
    except (AssertionError, ValueError, IndexError, tf.errors.OpError) as e:
        problem = run_checkpoints.checkpoint_problem(prefix)
        if problem is not None:
            raise ValueError(f"{prefix}: the checkpoint's files ({prefix}.index, "
                             f"{prefix}.data-*) cannot be read ({problem})") from None
        # The checkpoint's root items: the first component of its variables' names.
        items = sorted({name.split("/")[0] for name, _ in tf.train.list_variables(prefix)}
                       - {"_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter"})
        if encoder_key not in items:
            raise ValueError(
                f"{prefix}: the checkpoint has no item {encoder_key!r} (its items: "
                f"{', '.join(items) or 'none'}); name the one that holds the encoder "
                "(--encoder_key)") from None
        message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"{prefix}: checkpoint does not fit task.model.encoder ({message[:300]})") from None
    return prefix


def write_encoder_checkpoint(encoder: tf_keras.Model, directory: str,
                             name: str = "encoder") -> str:
    """Writes `tf.train.Checkpoint(encoder=encoder)` and returns its prefix."""
    tf.io.gfile.makedirs(directory)
    return tf.train.Checkpoint(encoder=encoder).write(os.path.join(directory, name))
