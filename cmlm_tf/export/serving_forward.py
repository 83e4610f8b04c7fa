"""The inference forward: token ids to pooled sentence vectors in a few plain TF ops.

`SentenceEncoder` is Model Garden's `BertEncoderV2` inside Keras layers: the model to train
and the TF Hub encoder to fine-tune. For inference the same arithmetic runs faster as plain
ops on weights laid out for it, and this module builds that forward from a live
`SentenceEncoder` (not from variable names), once, at export time:

- the query, key and value kernels are concatenated into one [width, 3 * width] matmul, the
  query part pre-scaled by 1 / sqrt(head_dim);
- everything else is the encoder's own computation: embeddings, LayerNorm (with the
  encoder's epsilon), attention with BERT's additive padding bias, the feed-forward layer
  with the encoder's activation (`layers.get_activation`), the encoder's pooling
  (`layers.pool`) and projection with its activation;
- every dense layer is one `MatMul` + `BiasAdd` (+ the feed-forward GELU) in the dtype of
  its kernel, the op pattern that grappler's remapper fuses into one oneDNN kernel with its
  epilogue (`_FusedMatMul`; `tests/export/test_serving_forward.py` counts them);
- in bfloat16 and int8 the dense kernels are constants of the forward's graph, not
  variables: grappler then marks each fused matmul's weights constant, and oneDNN runs it on
  its brgemm inner product (`brgemm:avx512_core_bf16` on AVX-512, `brgemm:avx10_1_512_amx` on
  AMX) for inference, with the weights reordered into its blocked layout once and kept.
  Read from variables, the same `_FusedMatMul` runs oneDNN's older `gemm:jit` inner product
  (`forward_training`) and the int8 matmul reorders its weights on every call
  (`tests/export/test_onednn_kernels.py` checks the kernels of saved models). float32
  kernels stay variables (`CONSTANT_KERNEL_PRECISIONS`). The forward of each precision is
  one `tf.function` that every caller calls, so a SavedModel holds the constants once per
  precision; past `CONSTANT_KERNEL_BYTES` of them (a protocol buffer holds at most 2 GB)
  they stay variables too;
- with `precision="bfloat16"` the dense layers (bfloat16 copies of the kernels and biases,
  made here once), their bias and the feed-forward activation are bfloat16; the residual
  stream, LayerNorm, softmax and pooling stay float32;
- with `precision="int8"` each dense layer is an `Int8Dense` (int8 weights with a scale per
  output column, activations quantized over a range calibrated at export by
  `calibrate_int8`, oneDNN's fused int8 matmul with the scales, bias and activation in its
  kernel; the feed-forward layer hands its output to the output layer already quantized);
  everything between the dense layers stays float32.

No XLA is needed (TF Serving runs XLA only when started with
`--xla_cpu_compilation_enabled`); callers that want it wrap the call in
`tf.function(jit_compile=True)`. The exporter saves this module inside `serving/1`, and
`cmlm_tf.load()` calls what was saved.

`InferenceForward.in_length_buckets` runs the same forward on a batch of mixed lengths, sorted
into sub-batches of `BUCKET_ROWS` rows that are each trimmed to their own longest row: the
plan the serving model runs on every request.
"""

from typing import Optional, Tuple

import numpy as np
import tensorflow as tf

from cmlm_tf.export.export_metadata import PRECISIONS
from cmlm_tf.export.int8_dense import FUSED_ACTIVATIONS, Int8Dense, graph_kernel
from cmlm_tf.modeling import layers
from cmlm_tf.runtime import internals

# What `serving/1` prepares: its signatures run float32, `cmlm_tf.load` may run bfloat16 on
# exports without `serving_bf16/1`.
SERVING_PRECISIONS = ("float32", "bfloat16")
# Rows per length-sorted sub-batch of `in_length_buckets`. Requests of 64 STS-B dev
# sentences in file order, padded to their longest sentence, hold 1.78x their real tokens;
# sorted and cut into sub-batches of 8, each padded to its own longest, 1.08x (MiniLM's
# tokenizer; sub-batches of 16: 1.17x, of 32: 1.36x). On an AVX2 machine, 8 rows served
# MiniLM fastest in TF and TFLite alike; 4 rows were slower (smaller matmuls), see
# docs/results.md.
BUCKET_ROWS = 8
# The int8 forward runs sub-batches of 16: on the Zen 5 machine of docs/results.md, with
# activation ranges measured per call, 16 rows served it 1.4x faster than 8 (32: no
# faster). Not measured again since the ranges are calibrated at export.
PRECISION_BUCKET_ROWS = {"int8": 16}
# Additive attention bias on padding, as BERT: exp(-10000) is 0 in float32.
_PADDING_BIAS = -10000.0
# The most bytes of dense kernels, over the prepared precisions that keep them as graph
# constants (module docstring); a larger model's kernels stay variables, as a SavedModel's
# graphs must fit in one 2 GB protocol buffer. BERT-base's are 170 MB in bfloat16,
# BERT-large's 600 MB.
CONSTANT_KERNEL_BYTES = 1 << 30
# The precisions whose dense kernels are graph constants. Not float32: oneDNN's float32
# brgemm inner product picks its weights' blocked layout by the number of rows, which
# changes with every sub-batch, and reorders the kept weights again whenever it differs: on
# MiniLM serving 64 STS-B sentences, 432 weight reorders for 576 dense layers, more passes
# than the `gemm:jit` path makes.
CONSTANT_KERNEL_PRECISIONS = ("bfloat16", "int8")
_TOKEN_IDS = [tf.TensorSpec([None, None], tf.int32)] * 3


class _TransformerLayer(tf.Module):
    """One post-norm Transformer layer's weights, in the layout the forward uses."""

    def __init__(self, block, kernels: dict, precisions: Tuple[str, ...], name: str,
                 *, constant_kernels: bool):
        super().__init__(name=name)
        # One set of dense weights per precision, cast (or quantized) once here rather than
        # per call: (kernel, bias), or an `Int8Dense`.
        self.dense = {precision: {key: _dense_weights(kernel, bias, precision,
                                                      constant_kernels=constant_kernels)
                                  for key, (kernel, bias) in kernels.items()}
                      for precision in precisions}
        parts = internals.encoder_block_parts(block)
        self.attention_norm = _norm_weights(parts.attention_norm)
        self.output_norm = _norm_weights(parts.output_norm)
        self.epsilon = float(parts.output_norm.epsilon)


def _dense_kernels(block) -> dict:
    """The dense layers of one Transformer layer in the forward's layout, float32 NumPy:
    name (`qkv`, `attention`, `inner`, `output`) -> (kernel [in, out], bias [out])."""
    parts = internals.encoder_block_parts(block)
    attention = internals.attention_projections(parts.attention)
    width = attention.query.kernel.shape[0]
    head_dim = attention.query.kernel.shape[-1]
    scales = (1.0 / np.sqrt(head_dim), 1.0, 1.0)
    denses = (attention.query, attention.key, attention.value)
    qkv_kernel = np.concatenate([d.kernel.numpy().reshape(width, -1) * scale
                                 for d, scale in zip(denses, scales)], axis=1)
    qkv_bias = np.concatenate([d.bias.numpy().reshape(-1) * scale
                               for d, scale in zip(denses, scales)])
    return {"qkv": (qkv_kernel, qkv_bias),
            "attention": (attention.output.kernel.numpy().reshape(-1, width),
                          attention.output.bias.numpy()),
            "inner": (parts.intermediate_dense.kernel.numpy(),
                      parts.intermediate_dense.bias.numpy()),
            "output": (parts.output_dense.kernel.numpy(), parts.output_dense.bias.numpy())}


def _kernel_bytes(kernels, precisions) -> int:
    """Bytes of the dense kernels `kernels` (one `_dense_kernels` per layer) in
    `precisions`."""
    params = sum(kernel.size for layer in kernels for kernel, _ in layer.values())
    return sum(params * (1 if precision == "int8" else tf.as_dtype(precision).size)
               for precision in precisions)


def _dense_weights(kernel, bias, precision: str, *, constant_kernels: bool):
    """(kernel, bias), or an `Int8Dense`; the kernel a NumPy array (a graph constant when
    traced, `graph_kernel`) where `constant_kernels` and the precision allow, else a
    variable."""
    constant = constant_kernels and precision in CONSTANT_KERNEL_PRECISIONS
    if precision == "int8":
        return Int8Dense(kernel, bias, constant_kernel=constant)
    dtype = tf.as_dtype(precision)
    kernel = (np.asarray(kernel).astype(dtype.as_numpy_dtype) if constant
              else _constant_variable(kernel, dtype))
    return kernel, _constant_variable(bias, dtype)


def _dense(x, weights, activation: Optional[str] = None, output_for=None):
    """x @ kernel + bias (then the activation named `activation`) as one matmul op with its
    epilogue: `MatMul` + `BiasAdd` (+ GELU), the pattern grappler's remapper fuses into
    `_FusedMatMul`; or the int8 layer, with the activation in its kernel where oneDNN has
    it and its output quantized for `output_for` (the next `Int8Dense`) there. Returns
    float32 (or `Quantized`) for int8, else the weights' dtype."""
    if isinstance(weights, Int8Dense):
        if activation is None or activation in FUSED_ACTIVATIONS:
            return weights(x, activation=activation, output_for=output_for)
        output = weights(x)
    else:
        output = tf.nn.bias_add(tf.matmul(x, graph_kernel(weights[0])), weights[1])
    return output if activation is None else layers.get_activation(activation)(output)


def _observed_dense(x, weights: Int8Dense, activation: Optional[str] = None, output_for=None):
    """The float32 layer in place of an `Int8Dense`, its input range observed (calibration);
    `output_for` is for `_dense`'s signature."""
    del output_for
    return weights.observe(x, None if activation is None else layers.get_activation(activation))


def _constant_variable(value, dtype=tf.float32) -> tf.Variable:
    return tf.Variable(tf.cast(tf.convert_to_tensor(value), dtype), trainable=False)


def _norm_weights(layer_norm) -> Tuple[tf.Variable, tf.Variable]:
    return _constant_variable(layer_norm.gamma), _constant_variable(layer_norm.beta)


class InferenceForward(tf.Module):
    """Pooled sentence vectors from token ids, with a `SentenceEncoder`'s weights.

    Args:
        encoder: a built `cmlm_tf.modeling.sentence_encoder.SentenceEncoder` (post-norm
            `BertEncoderV2`, no embedding projection, no dense inputs). Its weights are
            copied: later changes to the encoder do not reach the forward.
        precisions: the precisions to prepare dense weights for (`float32`, `bfloat16`,
            `int8`).

    Call args:
        input_word_ids, input_mask, input_type_ids: int32 [batch, seq].
        precision: one of `precisions`.

    Returns:
        float32 [batch, dim]: the encoder's `pooled_output` (pooling, then projection; not
        L2-normalised).
    """

    def __init__(self, encoder, precisions: Tuple[str, ...] = SERVING_PRECISIONS,
                 name: str = "inference_forward"):
        super().__init__(name=name)
        unknown = set(precisions) - set(PRECISIONS)
        if unknown:
            raise ValueError(f"precisions must be among {PRECISIONS}, got {sorted(unknown)}")
        config = encoder.encoder_config
        bert = internals.bert_encoder_parts(encoder.bert)
        if bert.embedding_projection is not None:
            raise ValueError("InferenceForward: encoders with an embedding projection "
                             "(embedding width != hidden size) are not supported")
        blocks = bert.transformer_layers
        if any(internals.encoder_block_parts(block).norm_first for block in blocks):
            raise ValueError("InferenceForward: pre-norm Transformer layers are not supported")
        self.precisions = tuple(precisions)
        self.num_heads = int(config.num_attention_heads)
        self.hidden_activation = config.hidden_activation
        self.pooling = config.pooling
        self.word_embeddings = _constant_variable(bert.word_embedding.embeddings)
        self.position_embeddings = _constant_variable(bert.position_embeddings)
        self.type_embeddings = _constant_variable(bert.type_embedding.embeddings)
        self.embedding_norm = _norm_weights(bert.embedding_norm)
        self.embedding_epsilon = float(bert.embedding_norm.epsilon)
        kernels = [_dense_kernels(block) for block in blocks]
        # Whether the dense kernels of `CONSTANT_KERNEL_PRECISIONS` are graph constants
        # (module docstring).
        self.constant_kernels = CONSTANT_KERNEL_BYTES >= _kernel_bytes(
            kernels, [p for p in self.precisions if p in CONSTANT_KERNEL_PRECISIONS])
        self.layers = [_TransformerLayer(block, layer_kernels, self.precisions,
                                         name=f"layer_{index}",
                                         constant_kernels=self.constant_kernels)
                       for index, (block, layer_kernels) in enumerate(zip(blocks, kernels))]
        self.projection = None
        if encoder.projection is not None:
            self.projection = (_constant_variable(encoder.projection.kernel),
                               _constant_variable(encoder.projection.bias))
            self._projection_activation = encoder.projection.activation
        layers.get_activation(config.hidden_activation)  # an unknown name fails here
        # One traced forward per precision, which every caller calls: its graph, with the
        # kernels in it, exists once in a SavedModel however many functions run it.
        self._forwards = {precision: tf.function(self._forward_function(precision),
                                                 input_signature=_TOKEN_IDS)
                          for precision in self.precisions}

    @property
    def output_dim(self) -> int:
        if self.projection is not None:
            return int(self.projection[0].shape[1])
        return int(self.word_embeddings.shape[1])

    def __call__(self, input_word_ids, input_mask, input_type_ids,
                 precision: str = "float32") -> tf.Tensor:
        if precision not in self.precisions:
            raise ValueError(f"precision {precision!r} was not prepared; this forward has "
                             f"{self.precisions}")
        return self._forwards[precision](input_word_ids, input_mask, input_type_ids)

    @property
    def int8_calibrated(self) -> bool:
        """Whether the int8 dense layers have their input ranges (`calibrate_int8`)."""
        return all(dense.calibrated for layer in self.layers
                   for dense in layer.dense.get("int8", {}).values())

    def calibrate_int8(self, input_word_ids, input_mask, input_type_ids) -> None:
        """Fixes each int8 dense layer's input range: the lowest and highest value its
        input takes in the float32 forward over these rows, each row run alone, trimmed
        to its last unmasked token (padding does not widen a range). Eager, at export; the
        float32 weights the layers kept for it are dropped after.

        Args:
            input_word_ids, input_mask, input_type_ids: int [rows, seq], e.g. the export's
                probe texts through its tokenizer (`ServingModule` does this).
        """
        if "int8" not in self.precisions:
            raise ValueError(f"this forward has no int8 layers to calibrate ({self.precisions})")
        inputs = [np.asarray(tensor, np.int32)
                  for tensor in (input_word_ids, input_mask, input_type_ids)]
        for row in range(inputs[0].shape[0]):
            unmasked = np.flatnonzero(inputs[1][row])
            length = int(unmasked[-1]) + 1 if unmasked.size else 1
            self._forward(*[tensor[row:row + 1, :length] for tensor in inputs],
                          precision="int8", observe=True)
        for layer in self.layers:
            for dense in layer.dense["int8"].values():
                dense.finish_calibration()

    def _forward_function(self, precision: str):
        def forward(input_word_ids, input_mask, input_type_ids):
            return self._forward(input_word_ids, input_mask, input_type_ids, precision)
        return forward

    def _forward(self, input_word_ids, input_mask, input_type_ids, precision: str,
                 *, observe: bool = False):
        # `observe`: the float32 layers in place of the int8 ones, observing their inputs
        # (`calibrate_int8`).
        dense_call = _observed_dense if observe else _dense
        # int8 quantizes inside each dense layer; everything between runs in float32.
        compute = tf.float32 if precision == "int8" else tf.as_dtype(precision)
        batch, seq = tf.shape(input_word_ids)[0], tf.shape(input_word_ids)[1]
        width = int(self.word_embeddings.shape[1])
        head_dim = width // self.num_heads
        # Slices and reshapes rather than `x[tf.newaxis]` indexing: TFLite's converter
        # turns the latter into a StridedSlice it has no kernel for.
        positions = tf.slice(self.position_embeddings, [0, 0], [seq, width])
        x = (tf.gather(self.word_embeddings, input_word_ids)
             + tf.expand_dims(positions, 0)
             + tf.gather(self.type_embeddings, input_type_ids))
        x, x_compute = _layer_norm(tf.reshape(x, [batch * seq, width]), self.embedding_norm,
                                   self.embedding_epsilon, compute)
        mask = tf.cast(input_mask, tf.float32)
        attention_bias = tf.reshape((1.0 - mask) * _PADDING_BIAS, [batch, 1, 1, seq])
        for layer in self.layers:
            dense = layer.dense[precision]
            qkv = dense_call(x_compute, dense["qkv"])
            query, key, value = tf.unstack(tf.transpose(
                tf.reshape(qkv, [batch, seq, 3, self.num_heads, head_dim]), [2, 0, 3, 1, 4]))
            scores = tf.cast(tf.matmul(query, key, transpose_b=True), tf.float32)
            probs = tf.cast(tf.nn.softmax(scores + attention_bias, axis=-1), compute)
            context = tf.matmul(probs, value)
            context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [batch * seq, width])
            attended = tf.cast(dense_call(context, dense["attention"]), tf.float32)
            x, x_compute = _layer_norm(attended + x, layer.attention_norm, layer.epsilon,
                                       compute)
            # Bias and activation in the compute dtype, fused into the matmul (in int8, its
            # output quantized there for the output layer).
            inner = dense_call(x_compute, dense["inner"], self.hidden_activation,
                               output_for=dense["output"])
            output = tf.cast(dense_call(inner, dense["output"]), tf.float32)
            x, x_compute = _layer_norm(output + x, layer.output_norm, layer.epsilon, compute)
        pooled = layers.pool(tf.reshape(x, [batch, seq, width]), mask, self.pooling)
        if self.projection is not None:
            pooled = self._projection_activation(
                tf.matmul(pooled, self.projection[0]) + self.projection[1])
        return pooled

    def in_length_buckets(self, input_word_ids, input_mask, input_type_ids,
                          *, precision: str = "float32",
                          bucket_rows: int = BUCKET_ROWS) -> tf.Tensor:
        """The forward on a batch of mixed lengths, run in sub-batches of similar length.

        A row's length is the position after its last unmasked token. The rows are sorted
        by length (longest first; ties keep their order), cut into sub-batches of
        `bucket_rows` consecutive sorted rows, each trimmed to its own longest row and run
        one after another in a `tf.while_loop` that writes its vectors back to their rows in
        input order. Trailing padding
        adds nothing to a row's vector (its attention weight is exactly 0 in float32), so
        each row equals its vector from a call on the whole padded batch, or alone, up to
        float rounding. Plain graph ops: no Python per call and no XLA, so a traced function
        built on it runs as it is in TF Serving.

        Args:
            input_word_ids, input_mask, input_type_ids: int32 [batch, seq].
            precision: as `__call__`.
            bucket_rows: rows per sub-batch.

        Returns:
            float32 [batch, dim]: `__call__`'s output for the same rows.
        """
        inputs = (input_word_ids, input_mask, input_type_ids)
        batch, seq = tf.shape(input_word_ids)[0], tf.shape(input_word_ids)[1]
        lengths = tf.reduce_max(
            tf.where(tf.not_equal(input_mask, 0), tf.range(1, seq + 1), 0), axis=1)
        order = tf.argsort(lengths, direction="DESCENDING", stable=True)
        sorted_inputs = [tf.gather(tensor, order) for tensor in inputs]
        sorted_lengths = tf.gather(lengths, order)
        num_buckets = (batch + bucket_rows - 1) // bucket_rows

        def run_bucket(index, pooled):
            start = index * bucket_rows
            rows = tf.minimum(bucket_rows, batch - start)
            # The first row is the longest; at least one position, so that `cls` pooling
            # of rows whose mask is all zero still has a token to take.
            length = tf.maximum(tf.gather(sorted_lengths, start), 1)
            bucket = [tf.slice(tensor, [start, 0], [rows, length]) for tensor in sorted_inputs]
            positions = tf.expand_dims(tf.slice(order, [start], [rows]), 1)
            return index + 1, tf.tensor_scatter_nd_update(
                pooled, positions, self(*bucket, precision=precision))

        # Each sub-batch's vectors are written straight to their rows in input order.
        _, pooled = tf.while_loop(lambda index, _: index < num_buckets, run_bucket,
                                  [tf.constant(0), tf.zeros([batch, self.output_dim])])
        return pooled


def _layer_norm(x, gamma_beta, epsilon: float, compute_dtype):
    """float32 LayerNorm over the last axis; returns it and its copy in `compute_dtype`."""
    gamma, beta = gamma_beta
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    x = tf.nn.batch_normalization(x, mean, variance, beta, gamma, epsilon)
    return x, tf.cast(x, compute_dtype)
