"""The BERT masked-LM pretrainer (MLM and TLM) and progressive stacking.

Progressive stacking (Gong et al. 2019; LaBSE §3.4) trains L/4, then L/2, then L layers,
initialising each stage from the previous one. `stack_from_checkpoint` does the copy:
embeddings, their LayerNorm, the (frozen) pooler and the MLM head are copied as they are,
and **layer i of the deeper model is layer i mod L_prev** of the shallower one, so an
L_prev-layer model [0, 1, …, L_prev−1] becomes [0, …, L_prev−1, 0, …, L_prev−1, …] (Gong et
al.'s "stack the trained layers on top of themselves"). L_prev is read from the checkpoint.
"""

import re
from typing import Dict

import tensorflow as tf
import tf_keras
from absl import logging

from cmlm_tf import configs
from cmlm_tf.modeling import layers, sentence_encoder
from cmlm_tf.modeling.sentence_encoder import SentenceEncoder


class MaskedLMPretrainer(tf_keras.Model):
    """Sentence encoder + MLM head whose output embedding is tied to the input embedding.

    Call args:
        inputs: TF Hub input dict (already masked) plus `masked_lm_positions` int32
            [batch, P].

    Returns:
        dict with `mlm_logits` float [batch, P, vocab].
    """

    def __init__(self, encoder_config: configs.EncoderConfig,
                 mlm_activation: str = "gelu_exact", **kwargs):
        super().__init__(**kwargs)
        self.encoder = SentenceEncoder(encoder_config).build_variables()
        self.mlm_head = layers.tied_masked_lm(self.encoder, mlm_activation,
                                              encoder_config.initializer_range)
        self.encoder_config = encoder_config
        self.mlm_activation = mlm_activation

    @property
    def checkpoint_items(self) -> Dict[str, tf.Module]:
        return {"encoder": self.encoder, "mlm_head": self.mlm_head}

    def call(self, inputs, training=None):
        encoder_inputs = {k: inputs[k] for k in sentence_encoder.INPUT_KEYS}
        sequence = self.encoder(encoder_inputs, training=training)["sequence_output"]
        return {"mlm_logits": self.mlm_head(sequence,
                                            masked_positions=inputs["masked_lm_positions"])}

    def build_variables(self, num_predictions: int = 1) -> "MaskedLMPretrainer":
        ones = tf.ones([1, 2], tf.int32)
        self({"input_word_ids": ones, "input_mask": ones, "input_type_ids": ones * 0,
              "masked_lm_positions": tf.zeros([1, num_predictions], tf.int32)})
        return self


_LAYER_PATTERN = re.compile(r"^encoder/bert/_transformer_layers/(\d+)/")


def checkpoint_num_layers(prefix: str) -> int:
    """The number of transformer layers of the encoder saved at `prefix`."""
    indices = {int(m.group(1)) for name, _ in tf.train.list_variables(prefix)
               if (m := _LAYER_PATTERN.match(name))}
    if not indices:
        raise ValueError(f"{prefix}: holds no encoder transformer layers "
                         "(task.init_stack_from)")
    return max(indices) + 1


def _layer_variable_refs(bert) -> set:
    return {v.ref() for layer in bert.transformer_layers for v in layer.weights}


def _copy(targets, sources, what: str) -> None:
    if len(targets) != len(sources):
        raise ValueError(f"{what}: {len(sources)} variables to copy into {len(targets)}")
    for target, source in zip(targets, sources):
        if target.shape != source.shape:
            raise ValueError(f"{what}: {source.name} {source.shape} does not fit "
                             f"{target.name} {target.shape}")
        target.assign(source)


def stack_from_checkpoint(model: MaskedLMPretrainer, path: str) -> int:
    """Initialises `model` from a shallower run at `path` (prefix or run directory).

    See the module docstring for the mapping. The MLM head is copied when the checkpoint
    holds one. Raises a one-line ValueError when the checkpoint does not fit
    `task.model.encoder` (other widths, more layers). Returns L_prev.
    """
    prefix = sentence_encoder.resolve_checkpoint(path)
    previous = checkpoint_num_layers(prefix)
    config = model.encoder_config
    if previous > config.num_layers:
        raise ValueError(f"task.init_stack_from: {prefix} has {previous} layers, more than "
                         f"task.model.encoder.num_layers ({config.num_layers})")
    shallow = MaskedLMPretrainer(config.replace(num_layers=previous),
                                 mlm_activation=model.mlm_activation).build_variables()
    has_head = any(name.startswith("mlm_head/") for name, _ in tf.train.list_variables(prefix))
    extra = {"mlm_head": shallow.mlm_head} if has_head else {}
    try:
        sentence_encoder.restore_encoder(shallow.encoder, prefix, extra_items=extra)
    except ValueError as e:
        raise ValueError(f"task.init_stack_from: {prefix} ({previous} layers) does not fit "
                         f"task.model.encoder: {str(e).split(': ', 1)[-1]}") from None
    deep_bert, shallow_bert = model.encoder.bert, shallow.encoder.bert
    deep_layer_refs = _layer_variable_refs(deep_bert)
    shallow_layer_refs = _layer_variable_refs(shallow_bert)
    _copy([v for v in model.encoder.weights if v.ref() not in deep_layer_refs],
          [v for v in shallow.encoder.weights if v.ref() not in shallow_layer_refs],
          "task.init_stack_from (embeddings)")
    for index, layer in enumerate(deep_bert.transformer_layers):
        _copy(layer.weights, shallow_bert.transformer_layers[index % previous].weights,
              f"task.init_stack_from (layer {index})")
    if extra:
        _copy(model.mlm_head.weights, shallow.mlm_head.weights, "task.init_stack_from (head)")
    logging.info("Stacked %d layers from %s into %d (layer i <- layer i mod %d)%s", previous,
                 prefix, config.num_layers, previous, ", with mlm_head" if extra else "")
    return previous
