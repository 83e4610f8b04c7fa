"""A dense layer with int8 weights and int8 arithmetic, for the int8 serving model.

oneDNN's quantized matmul (`QuantizedMatMulWithBiasAndDequantize`: uint8 activations times
int8 weights, int32 sums, the bias added and float32 out, in one kernel; VNNI on AVX-512,
AMX on Intel Xeons that have it) is the only int8 matmul the TensorFlow CPU runtime runs
without XLA, so the TF Serving model runs it with its default flags. It takes one scale
for the whole activation matrix and one for the whole weight matrix, in its `SCALED` mode
with activations that are not negative. The layer fits that kernel exactly:

- weights: each output column is divided by its largest magnitude (`column_scale`) and
  rounded to int8 over [-127, 127] once, at export; the column scales multiply the output;
- activations: quantized at run time, per call, over [0, max(x) - min(x)] after a shift by
  -min(x) (when min(x) < 0); the shift's contribution, shift * (the column sums of the
  quantized weights), is taken off the bias, so the result is x @ W + b up to rounding;
- the int8 kernel is a constant of the graph that calls the layer (`graph_kernel`), so that
  oneDNN reorders it into its blocked layout once and keeps it; read from a variable, it is
  reordered on every call.

Requires TensorFlow's oneDNN kernels (on by default on x86-64 Linux; off with
TF_ENABLE_ONEDNN_OPTS=0): where the kernel cannot run, building a layer raises
`Int8Unavailable` with one line saying so (`available()` asks without raising).
"""

import numpy as np
import tensorflow as tf

from cmlm_tf import host

# Activations are quantized over at least this range, so that an all-zero input does not
# divide by zero.
_MIN_RANGE = 1e-6


class Int8Unavailable(RuntimeError):
    """oneDNN's int8 matmul does not run in this TensorFlow."""


def available() -> bool:
    """Whether oneDNN's int8 matmul runs here, in a graph as the serving model runs it
    (`host.int8_matmul_runs`)."""
    return host.int8_matmul_runs()


def graph_kernel(kernel) -> tf.Tensor:
    """A dense layer's kernel as its matmul reads it: a NumPy array becomes a constant of
    the graph being traced, a variable is read.

    grappler marks a fused matmul whose weights are a constant (`is_filter_const`) and
    oneDNN then keeps them in its own blocked layout, reordered once, and runs its brgemm
    kernels for inference; weights read from a variable are taken as changing between
    calls: the float matmuls run oneDNN's older `gemm:jit` path and the int8 one reorders
    its weights on every call.
    """
    if isinstance(kernel, np.ndarray):
        return tf.constant(kernel)
    return tf.convert_to_tensor(kernel)


def _quantized_product(activations, kernel, bias, low, high):
    """uint8 activations (range [low, high]) times int8 weights (range [-1, 1]), plus the
    float32 bias: float32, in one oneDNN kernel."""
    return tf.raw_ops.QuantizedMatMulWithBiasAndDequantize(
        a=activations, b=kernel, bias=bias, min_a=low, max_a=high, min_b=-1.0, max_b=1.0,
        min_freezed_output=-1.0, max_freezed_output=1.0, Toutput=tf.float32,
        input_quant_mode="SCALED")


class Int8Dense(tf.Module):
    """x @ kernel + bias with int8 weights and uint8 activations.

    Args:
        kernel: float [in, out] NumPy array or tensor.
        bias: float [out], or None.
        constant_kernel: keep the int8 kernel as a NumPy array that each trace makes a
            graph constant (`graph_kernel`; not saved as a variable), else a variable.

    Call args:
        x: float32 [rows, in].

    Returns:
        float32 [rows, out].
    """

    def __init__(self, kernel, bias=None, name: str = "int8_dense",
                 constant_kernel: bool = True):
        super().__init__(name=name)
        if not available():
            raise Int8Unavailable(
                "int8 needs TensorFlow's oneDNN int8 matmul, which does not run here (is "
                "TF_ENABLE_ONEDNN_OPTS=0 set, or is this not an x86-64 build?)")
        kernel = np.asarray(kernel, np.float32)
        column_scale = np.maximum(np.abs(kernel).max(axis=0), 1e-12).astype(np.float32)
        quantized = np.clip(np.round(kernel / column_scale * 127.0), -127, 127).astype(np.int8)
        bias = (np.zeros(kernel.shape[1], np.float32) if bias is None
                else np.asarray(bias, np.float32))
        # Stored as int8 (exactly) and seen as qint8 by the matmul.
        self.kernel = (quantized if constant_kernel
                       else tf.Variable(quantized, trainable=False, name="kernel"))
        self.column_scale = tf.Variable(column_scale, trainable=False, name="column_scale")
        # In units of the column scale: the kernel adds the bias before the scale multiplies.
        self.scaled_bias = tf.Variable(bias / column_scale, trainable=False, name="scaled_bias")
        # Column sums of the quantized kernel in the same units (for the activation shift).
        self.column_sums = tf.Variable(quantized.astype(np.float32).sum(axis=0) / 127.0,
                                       trainable=False, name="column_sums")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        shift = -tf.minimum(tf.reduce_min(x), 0.0)
        shifted = x + shift
        top = tf.maximum(tf.reduce_max(shifted), _MIN_RANGE)
        activations, low, high = tf.raw_ops.QuantizeV2(input=shifted, min_range=0.0,
                                                       max_range=top, T=tf.quint8,
                                                       mode="SCALED")
        product = _quantized_product(activations, tf.bitcast(graph_kernel(self.kernel),
                                                             tf.qint8),
                                     self.scaled_bias - shift * self.column_sums, low, high)
        return product * self.column_scale
