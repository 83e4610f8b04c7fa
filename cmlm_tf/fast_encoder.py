"""A lean numeric forward of an exported sentence encoder, for `cmlm_tf.load(...).encode()`.

The exported encoder is Model Garden's `BertEncoderV2` inside Keras layers: many small ops,
3-D attention kernels and Keras dtype policies. For inference this module rebuilds the same
arithmetic from the exported variables as a handful of plain TF ops, which XLA fuses well:

- query, key and value kernels are concatenated into one [width, 3 * width] matmul;
- LayerNorm, GELU, bias and residual additions are elementwise work that XLA fuses into the
  matmul epilogues and prologues;
- with `precision="bfloat16"` the matmul inputs (weights and activations) and the
  feed-forward bias + GELU are bfloat16, while the residual stream, LayerNorm statistics,
  softmax and pooling stay float32.

Only the encoder layout written by `export.export_tfhub` (`BertEncoderV2` + pooling +
optional projection) is supported; `LeanEncoder.from_module` returns None for anything else
so the caller can fall back to the exported signature.
"""

import re
from typing import Dict, Optional

import numpy as np
import tensorflow as tf

from cmlm_tf.inference import PRECISIONS

_PREFIX = re.compile(r"^(?:.*/)?bert/")
_ACTIVATIONS = ("gelu_exact", "gelu", "gelu_approx", "relu")
# BERT's tanh pooler: exported, never used by sentence pooling.
_UNUSED = {"pooler_transform/kernel", "pooler_transform/bias"}


def _short_name(name: str) -> Optional[str]:
    """`sentence_encoder/bert/transformer/layer_0/output/kernel:0` -> `transformer/...`."""
    name = name.split(":")[0]
    if "/bert/" in "/" + name:
        return _PREFIX.sub("", name)
    match = re.search(r"(?:^|/)(projection/(?:kernel|bias))$", name)
    return match.group(1) if match else None


class LeanEncoder:
    """Pooled sentence vectors from token ids, computed from an export's variables.

    Args:
        weights: numpy arrays by short name (`word_embeddings/embeddings`,
            `transformer/layer_0/self_attention/query/kernel`, ..., `projection/kernel`).
        encoder_config: the export metadata's `encoder` dict (`num_layers`,
            `num_attention_heads`, `hidden_activation`, `pooling`, `projection_size`).
        precision: `float32` or `bfloat16` (matmul inputs and the feed-forward activation).
        layer_norm_epsilon: BERT's 1e-12.

    Call args:
        input_word_ids, input_mask, input_type_ids: int32 [batch, seq].

    Returns:
        float32 [batch, dim] pooled output (before any L2 normalisation).
    """

    def __init__(self, weights: Dict[str, np.ndarray], encoder_config: dict,
                 precision: str = "float32", layer_norm_epsilon: float = 1e-12):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        self.precision = precision
        self.num_layers = int(encoder_config["num_layers"])
        self.num_heads = int(encoder_config["num_attention_heads"])
        self.activation = encoder_config.get("hidden_activation", "gelu_exact")
        self.pooling = encoder_config.get("pooling", "mean")
        self.epsilon = layer_norm_epsilon
        compute = tf.bfloat16 if precision == "bfloat16" else tf.float32
        self.compute_dtype = compute

        self.used_names = set()

        def const(name, dtype=tf.float32):
            self.used_names.add(name)
            return tf.constant(weights[name], dtype=dtype)

        self.word_embeddings = const("word_embeddings/embeddings")
        self.position_embeddings = const("position_embedding/embeddings")
        self.type_embeddings = const("type_embeddings/embeddings")
        self.embedding_norm = (const("embeddings/layer_norm/gamma"),
                               const("embeddings/layer_norm/beta"))
        self.width = int(self.word_embeddings.shape[1])
        self.layers = []
        for index in range(self.num_layers):
            prefix = f"transformer/layer_{index}/"
            attention = prefix + "self_attention/"
            # Scaling the query by 1 / sqrt(head_dim) here saves a multiply per call.
            scales = (1.0 / np.sqrt(self.width // self.num_heads), 1.0, 1.0)
            self.used_names.update(attention + part + suffix
                                   for part in ("query", "key", "value", "attention_output")
                                   for suffix in ("/kernel", "/bias"))
            qkv_kernel = np.concatenate(
                [weights[attention + part + "/kernel"].reshape(self.width, -1) * scale
                 for part, scale in zip(("query", "key", "value"), scales)], axis=1)
            qkv_bias = np.concatenate(
                [weights[attention + part + "/bias"].reshape(-1) * scale
                 for part, scale in zip(("query", "key", "value"), scales)])
            output_kernel = weights[attention + "attention_output/kernel"]
            self.layers.append({
                "qkv_kernel": tf.constant(qkv_kernel, compute),
                "qkv_bias": tf.constant(qkv_bias, compute),
                "attention_kernel": tf.constant(output_kernel.reshape(-1, self.width), compute),
                "attention_bias": const(attention + "attention_output/bias"),
                "attention_norm": (const(prefix + "self_attention_layer_norm/gamma"),
                                   const(prefix + "self_attention_layer_norm/beta")),
                "inner_kernel": const(prefix + "intermediate/kernel", compute),
                "inner_bias": const(prefix + "intermediate/bias", compute),
                "output_kernel": const(prefix + "output/kernel", compute),
                "output_bias": const(prefix + "output/bias"),
                "output_norm": (const(prefix + "output_layer_norm/gamma"),
                                const(prefix + "output_layer_norm/beta")),
            })
        self.projection = None
        if "projection/kernel" in weights:
            self.projection = (const("projection/kernel"), const("projection/bias"))

    @classmethod
    def from_module(cls, module: tf.Module, encoder_config: dict,
                    precision: str = "float32") -> Optional["LeanEncoder"]:
        """Builds from a loaded export's `encoder` variables; None if the layout differs."""
        if encoder_config.get("hidden_activation", "gelu_exact") not in _ACTIVATIONS:
            return None
        if encoder_config.get("pooling", "mean") not in ("mean", "cls", "max"):
            return None
        weights = {}
        for variable in module.variables:
            name = _short_name(variable.name)
            if name is None:
                return None  # a variable this forward would ignore: not our layout
            weights[name] = variable.numpy()
        try:
            encoder = cls(weights, encoder_config, precision)
        except (KeyError, ValueError):
            return None
        if set(weights) - encoder.used_names - _UNUSED:
            return None
        return encoder

    def _layer_norm(self, x, gamma_beta):
        """float32 LayerNorm; returns it and its copy in the compute dtype."""
        gamma, beta = gamma_beta
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        x = tf.nn.batch_normalization(x, mean, variance, beta, gamma, self.epsilon)
        return x, tf.cast(x, self.compute_dtype)

    def _activation(self, x):
        if self.activation == "gelu_exact":
            return tf.nn.gelu(x, approximate=False)
        if self.activation == "relu":
            return tf.nn.relu(x)
        return tf.nn.gelu(x, approximate=True)

    def __call__(self, input_word_ids, input_mask, input_type_ids):
        batch, seq = tf.shape(input_word_ids)[0], tf.shape(input_word_ids)[1]
        width, heads = self.width, self.num_heads
        head_dim = width // heads
        compute = self.compute_dtype
        x = (tf.gather(self.word_embeddings, input_word_ids)
             + self.position_embeddings[tf.newaxis, :seq]
             + tf.gather(self.type_embeddings, input_type_ids))
        x, x_compute = self._layer_norm(tf.reshape(x, [batch * seq, width]),
                                        self.embedding_norm)
        mask = tf.cast(input_mask, tf.float32)
        # Additive attention bias, [batch, 1, 1, seq]: -10000 on padding as in BERT.
        attention_bias = ((1.0 - mask) * -10000.0)[:, tf.newaxis, tf.newaxis, :]
        for layer in self.layers:
            # The query kernel and bias are pre-scaled by 1 / sqrt(head_dim).
            qkv = tf.nn.bias_add(tf.matmul(x_compute, layer["qkv_kernel"]), layer["qkv_bias"])
            qkv = tf.transpose(tf.reshape(qkv, [batch, seq, 3, heads, head_dim]),
                               [2, 0, 3, 1, 4])
            scores = tf.cast(tf.matmul(qkv[0], qkv[1], transpose_b=True), tf.float32)
            probs = tf.cast(tf.nn.softmax(scores + attention_bias, axis=-1), compute)
            context = tf.matmul(probs, qkv[2])
            context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [batch * seq, width])
            attended = tf.cast(tf.matmul(context, layer["attention_kernel"]), tf.float32)
            x, x_compute = self._layer_norm(attended + layer["attention_bias"] + x,
                                            layer["attention_norm"])
            # The feed-forward bias and activation run in the compute dtype: in bfloat16 this
            # saves two casts of the widest activation per layer.
            inner = self._activation(
                tf.nn.bias_add(tf.matmul(x_compute, layer["inner_kernel"]), layer["inner_bias"]))
            output = tf.cast(tf.matmul(inner, layer["output_kernel"]), tf.float32)
            x, x_compute = self._layer_norm(output + layer["output_bias"] + x,
                                            layer["output_norm"])
        sequence = tf.reshape(x, [batch, seq, width])
        pooled = self._pool(sequence, mask)
        if self.projection is not None:
            pooled = tf.matmul(pooled, self.projection[0]) + self.projection[1]
        return pooled

    def _pool(self, sequence, mask):
        if self.pooling == "cls":
            return sequence[:, 0, :]
        weights = mask[:, :, tf.newaxis]
        if self.pooling == "mean":
            total = tf.reduce_sum(sequence * weights, axis=1)
            return total / tf.maximum(tf.reduce_sum(weights, axis=1), 1.0)
        masked = tf.where(weights > 0, sequence, tf.float32.min)
        has_tokens = tf.reduce_any(weights > 0, axis=1)
        return tf.where(has_tokens, tf.reduce_max(masked, axis=1), tf.zeros_like(masked[:, 0]))
