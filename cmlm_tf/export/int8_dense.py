"""A dense layer with int8 weights and int8 arithmetic, for the int8 serving model.

The product runs in oneDNN's fused quantized matmul (`_QuantizedMatMul`: uint8 activations
times int8 weights, int32 sums, then the scales, the bias, an optional activation and the
output's own conversion in one kernel; VNNI on AVX-512, AMX on Intel Xeons that have it),
the int8 matmul that the TensorFlow CPU runtime runs without XLA, so the TF Serving model
runs it with its default flags:

- weights: each output column is divided by its largest magnitude (`column_scale`) and
  rounded to int8 over [-127, 127] once, at export; the kernel takes the column scales as
  its per-channel weight scales, so no pass over the output multiplies them;
- activations: quantized over a range fixed at export (`calibrate`): the float32 forward
  runs on the export's own probe texts and each layer keeps the lowest and highest value
  its input took (`observe`, then `finish_calibration`). At run time one `QuantizeV2`
  (`MIN_FIRST`: value - low, times 255 / (high - low), rounded and saturated, so values
  outside the range are clipped to it) converts the input: no pass measures the range
  of a request, and a text's vector no longer depends on the other texts of its request.
  The kernel takes the shift by `low` off the bias itself, once, and keeps the result;
- where the next dense layer reads this one's output (the feed-forward layer, whose
  activation feeds the output layer), the kernel applies the activation and quantizes
  its output straight into the next layer's calibrated range (`Requantize`): the uint8
  tensor goes from one matmul to the next without a float pass between them;
- the int8 kernel is a constant of the graph that calls the layer (`graph_kernel`), so that
  oneDNN reorders it into its blocked layout once and keeps it; read from a variable, it is
  reordered on every call.

`_QuantizedMatMul` has no Python wrapper in `tf.raw_ops`; `_fused_matmul` adds it to the
graph being traced by name (`tf.Graph.create_op`), so the layer is called inside a
`tf.function` (an eager call traces one).

Requires TensorFlow's oneDNN kernels (on by default on x86-64 Linux; off with
TF_ENABLE_ONEDNN_OPTS=0): where the kernel cannot run, building a layer raises
`Int8Unavailable` with one line saying so (`available()` asks without raising).
"""

import math
from typing import NamedTuple, Optional

import numpy as np
import tensorflow as tf

from cmlm_tf.runtime import host

# A calibrated range spans at least this, so that an input that was always zero does not
# divide by zero.
_MIN_RANGE = 1e-6
# oneDNN's fused activations by `EncoderConfig.hidden_activation` (the same formulas as
# `cmlm_tf.modeling.layers.get_activation`'s); another activation runs in float32
# between a dequantized output and a quantized input.
FUSED_ACTIVATIONS = {"gelu_exact": "GeluExact", "gelu": "GeluApproximate",
                     "gelu_approx": "GeluApproximate", "relu": "Relu", "tanh": "Tanh"}


class Int8Unavailable(RuntimeError):
    """oneDNN's int8 matmul does not run in this TensorFlow."""


class Quantized(NamedTuple):
    """A uint8 activation matrix and the float range [low, high] its 0 and 255 stand for."""
    values: tf.Tensor
    low: tf.Tensor
    high: tf.Tensor


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


def calibrated_range(low: float, high: float):
    """[low, high] widened to hold 0, and `low` moved down so that 0 falls exactly on a
    uint8 step (the kernel takes `low` off unrounded, `QuantizeV2` rounds its zero point):
    float32 (low, high)."""
    low, high = min(float(low), 0.0), max(float(high), 0.0)
    high = max(high, low + _MIN_RANGE)
    # Rounded up, which moves `low` down: the range only widens.
    zero_point = math.ceil(-low * 255.0 / (high - low) - 1e-6)
    if zero_point >= 255:  # all inputs at or below 0: keep low, move high onto a step
        return np.float32(low), np.float32(low * -1.0 / 254.0)
    return np.float32(-zero_point * high / (255.0 - zero_point)), np.float32(high)


def _type_list(dtypes) -> tf.compat.v1.AttrValue:
    return tf.compat.v1.AttrValue(list=tf.compat.v1.AttrValue.ListValue(
        type=[dtype.as_datatype_enum for dtype in dtypes]))


def _fused_matmul(inputs: Quantized, kernel, column_scale, bias, *, fused_ops,
                  output_range=None, constant_kernel: bool = True):
    """oneDNN's `_QuantizedMatMul`: float32 out, or (`output_range` given) uint8 out over
    that range, as `Quantized`."""
    attr = tf.compat.v1.AttrValue
    out_type = tf.float32 if output_range is None else tf.quint8
    device_inputs = [inputs.values, kernel, tf.convert_to_tensor(bias)]
    column_scale = tf.convert_to_tensor(column_scale)
    host_inputs = [inputs.low, inputs.high, -column_scale, column_scale]
    host_outputs = []
    if output_range is not None:
        host_inputs += list(output_range)
        host_outputs = [tf.float32, tf.float32]
    attrs = {"Tdevice_inputs": _type_list([t.dtype for t in device_inputs]),
             "Thost_inputs": _type_list([tf.float32] * len(host_inputs)),
             "Tdevice_outputs": _type_list([out_type]), "Thost_outputs": _type_list(host_outputs),
             "T1": attr(type=tf.quint8.as_datatype_enum),
             "T2": attr(type=tf.qint8.as_datatype_enum),
             "Tbias": attr(type=tf.float32.as_datatype_enum),
             "Tout": attr(type=out_type.as_datatype_enum),
             "U": attr(type=tf.float32.as_datatype_enum),
             "fused_ops": attr(list=attr.ListValue(s=[op.encode() for op in fused_ops])),
             "input_quant_mode": attr(s=b"MIN_FIRST"), "output_quant_mode": attr(s=b"MIN_FIRST"),
             "is_weight_const": attr(b=constant_kernel), "is_bias_const": attr(b=True),
             "transpose_a": attr(b=False), "transpose_b": attr(b=False),
             "leakyrelu_alpha": attr(f=0.2)}
    op = tf.compat.v1.get_default_graph().create_op(
        "_QuantizedMatMul", device_inputs + [tf.convert_to_tensor(t) for t in host_inputs],
        dtypes=[out_type] + host_outputs, attrs=attrs, name="quantized_matmul")
    if output_range is None:
        return op.outputs[0]
    return Quantized(*op.outputs)


class Int8Dense(tf.Module):
    """x @ kernel + bias (then an activation) with int8 weights and uint8 activations.

    Args:
        kernel: float [in, out] NumPy array or tensor.
        bias: float [out], or None.
        constant_kernel: keep the int8 kernel as a NumPy array that each trace makes a
            graph constant (`graph_kernel`; not saved as a variable), else a variable.

    Call args:
        x: float32 [rows, in], or a `Quantized` uint8 input (the output of a layer called
            with `output_for=self`).
        activation: a key of `FUSED_ACTIVATIONS`, applied in the kernel; None for none.
        output_for: another, calibrated `Int8Dense`: return this layer's output quantized
            into that layer's input range, as `Quantized`, for it to read.

    Returns:
        float32 [rows, out], or `Quantized` [rows, out] (with `output_for`).

    Before its first call the layer needs its input range: `calibrate(low, high)`, or
    `observe` on the calibration inputs and then `finish_calibration()`.
    """

    def __init__(self, kernel, bias=None, name: str = "int8_dense",
                 *, constant_kernel: bool = True):
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
        self.constant_kernel = constant_kernel
        self.kernel = (quantized if constant_kernel
                       else tf.Variable(quantized, trainable=False, name="kernel"))
        self.column_scale = tf.Variable(column_scale, trainable=False, name="column_scale")
        self.bias = tf.Variable(bias, trainable=False, name="bias")
        # [low, high] of the input, fixed by calibration; saved with the model.
        self.input_range = tf.Variable([0.0, 0.0], trainable=False, name="input_range")
        self.calibrated = False
        # The float32 weights, for `observe`, until `finish_calibration` drops them.
        self._float_weights = (kernel, bias)
        self._observed = (np.inf, -np.inf)

    def calibrate(self, low: float, high: float) -> None:
        """Fixes the input range (`calibrated_range` of [low, high])."""
        self.input_range.assign(calibrated_range(low, high))
        self.calibrated = True

    def observe(self, x, activation=None) -> np.ndarray:
        """The float32 layer on `x` (float [rows, in]), `activation` (a callable) after it;
        widens the observed input range. Eager, at export."""
        x = np.asarray(x, np.float32)
        if x.size:
            self._observed = (min(self._observed[0], float(x.min())),
                              max(self._observed[1], float(x.max())))
        kernel, bias = self._float_weights
        output = x @ kernel + bias
        return output if activation is None else np.asarray(activation(output))

    def finish_calibration(self) -> None:
        """Fixes the input range to the observed one, and drops the float32 weights."""
        low, high = self._observed
        if low > high:
            raise ValueError(f"{self.name}: observed no input to calibrate on")
        self.calibrate(low, high)
        self._float_weights = None

    def quantize(self, x: tf.Tensor) -> Quantized:
        """x (float32) as uint8 over the calibrated range, clipped to it."""
        values, low, high = tf.raw_ops.QuantizeV2(
            input=x, min_range=self.input_range[0], max_range=self.input_range[1],
            T=tf.quint8, mode="MIN_FIRST")
        return Quantized(values, low, high)

    def __call__(self, x, activation: Optional[str] = None,
                 output_for: Optional["Int8Dense"] = None):
        if not self.calibrated:
            raise RuntimeError(f"{self.name}: the int8 layer has no input range yet; "
                               "calibrate it first (InferenceForward.calibrate_int8)")
        if tf.executing_eagerly():
            return tf.function(self.__call__)(x, activation, output_for)
        inputs = x if isinstance(x, Quantized) else self.quantize(x)
        fused_ops = ["BiasAdd"] + ([FUSED_ACTIVATIONS[activation]] if activation else [])
        output_range = None
        if output_for is not None:
            fused_ops.append("Requantize")
            output_range = (output_for.input_range[0], output_for.input_range[1])
        else:
            fused_ops.append("Dequantize")
        kernel = tf.bitcast(graph_kernel(self.kernel), tf.qint8)
        return _fused_matmul(inputs, kernel, self.column_scale, self.bias, fused_ops=fused_ops,
                             output_range=output_range, constant_kernel=self.constant_kernel)
