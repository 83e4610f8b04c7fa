"""The machine `encode()` and the corpus jobs run on: its CPU, and TensorFlow's threads there.

What the CPU is (`cpu_model`, `cpu_flags`, `describe_cpu` for the speed figures of
benchmarks), whether it multiplies bfloat16 natively (`native_bfloat16`; a warning, once, when
`precision='bfloat16'` would run emulated), whether oneDNN's int8 matmul runs
(`int8_matmul_runs`), which oneDNN kernels a process ran (`onednn_kernel_counts`, from its
`ONEDNN_VERBOSE=1` output), and TensorFlow's thread pools, set before its
runtime starts (`apply_thread_settings`). TensorFlow is imported only where it is asked.
"""

import functools
import logging
import os
import warnings
from typing import Dict, List, Optional

# CPU flags (Linux /proc/cpuinfo) of native bfloat16 arithmetic.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# The CPU flags that matter for speed figures (vector and matrix extensions).
SPEED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16",
               "amx_int8")


def cpu_flags() -> Optional[set]:
    """The CPU feature flags from /proc/cpuinfo, or None where it cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        return None
    return None


def speed_flags() -> List[str]:
    """The CPU's flags that matter for speed figures (vector and matrix extensions)."""
    flags = cpu_flags() or set()
    return [flag for flag in SPEED_FLAGS if flag in flags]


def cpu_model() -> Optional[str]:
    """The CPU's model name from /proc/cpuinfo, or None where it cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return next((line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name")), None)
    except OSError:
        return None


def describe_cpu() -> str:
    """`model name, N cores, flags: ...` with the flags that matter for speed figures."""
    return (f"{cpu_model() or 'unknown CPU'}, {os.cpu_count()} cores, "
            f"flags: {' '.join(speed_flags()) or 'unknown'}")


def native_bfloat16() -> Optional[bool]:
    """Whether the CPU multiplies bfloat16 natively (AVX512_BF16 or AMX); None where its
    flags cannot be read."""
    flags = cpu_flags()
    return None if flags is None else bool(flags & set(NATIVE_BF16_FLAGS))


def warn_if_bfloat16_is_emulated() -> bool:
    """Warns (once per process) when bfloat16 would run emulated, and slower than float32.

    That is a CPU whose flags show neither AVX512_BF16 nor AMX, with no GPU. Returns whether
    it warned. Machines whose flags cannot be read are not warned about.
    """
    if native_bfloat16() in (None, True):
        return False
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        return False
    warn_once("precision='bfloat16': this CPU has neither AVX512_BF16 nor AMX, so "
              "TensorFlow emulates bfloat16 and it runs slower than float32 here; use "
              "precision='float32'")
    return True


@functools.cache
def int8_matmul_runs() -> bool:
    """Whether TensorFlow's oneDNN int8 kernels run here, asked once per process with one
    tiny call of its `QuantizedMatMulWithBiasAndDequantize` (the int8 serving model runs
    `_QuantizedMatMul` of the same kernels, `export/int8_dense.py`, and needs oneDNN's
    `QuantizeV2`, which like this call is off with TF_ENABLE_ONEDNN_OPTS=0).

    The call runs in a graph, as a SavedModel runs it: with TF_ENABLE_ONEDNN_OPTS=0 the
    eager kernel still runs, but a graph has no output for it ("Missing 0-th output").
    """
    import tensorflow as tf

    @tf.function
    def product():
        return tf.raw_ops.QuantizedMatMulWithBiasAndDequantize(
            a=tf.zeros([1, 4], tf.quint8), b=tf.zeros([4, 2], tf.qint8), bias=tf.zeros([2]),
            min_a=0.0, max_a=1.0, min_b=-1.0, max_b=1.0, min_freezed_output=-1.0,
            max_freezed_output=1.0, Toutput=tf.float32, input_quant_mode="SCALED")

    try:
        product().numpy()
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError,
            tf.errors.UnimplementedError, tf.errors.InternalError):
        return False
    return True


def onednn_kernel_counts(verbose_output: str) -> Dict[str, int]:
    """How many times each oneDNN kernel ran, from what a process printed with
    `ONEDNN_VERBOSE=1` (TensorFlow's and torch's oneDNN both print it to stdout).

    Each primitive execution line counts once, keyed `KIND IMPLEMENTATION PROPAGATION`, for
    example `inner_product brgemm:avx512_core_bf16 forward_inference`: `gemm:jit` is oneDNN's
    older inner product, `brgemm`/`brg_matmul` its batch-reduce kernels (`avx10_1_512_amx`
    where they run on AMX tiles); a matmul or reorder has no propagation kind (`undef`).
    Other lines (the model's own output, oneDNN's info and creation lines) are skipped.
    """
    counts: Dict[str, int] = {}
    for line in verbose_output.splitlines():
        fields = line.strip().split(",")
        if fields[0] not in ("onednn_verbose", "dnnl_verbose") or "exec" not in fields:
            continue
        # onednn_verbose[,v1][,primitive],exec,ENGINE,KIND,IMPLEMENTATION,PROPAGATION,...
        # (the graph API's lines, `graph,exec`, name partitions, not kernels).
        start = fields.index("exec") + 2
        if "graph" in fields[:start] or len(fields) < start + 3:
            continue
        key = " ".join(fields[start:start + 3])
        counts[key] = counts.get(key, 0) + 1
    return counts


@functools.cache
def warn_once(message: str) -> None:
    """Logs `message` and issues it as a RuntimeWarning, the first time in a process only
    (`warn_once.cache_clear()` forgets what was said)."""
    logging.getLogger(__name__).warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=4)


def apply_thread_settings(intra_op_threads: Optional[int],
                          inter_op_threads: Optional[int]) -> Dict[str, object]:
    """Sets TensorFlow's thread pools if its runtime has not started yet.

    Returns `{"intra_op_threads", "inter_op_threads", "applied"}`. TensorFlow fixes its pools
    when it first runs an op; after that a different request cannot take effect: it is logged
    as a warning and reported with `applied=False` (a request equal to the current setting
    counts as applied).
    """
    import tensorflow as tf

    settings = {"intra_op_threads": intra_op_threads, "inter_op_threads": inter_op_threads,
                "applied": True}
    threading = tf.config.threading
    setters = (
        (intra_op_threads, threading.get_intra_op_parallelism_threads,
         threading.set_intra_op_parallelism_threads),
        (inter_op_threads, threading.get_inter_op_parallelism_threads,
         threading.set_inter_op_parallelism_threads),
    )
    for value, getter, setter in setters:
        if value is None:
            continue
        if value < 0:
            raise ValueError(f"thread counts must be >= 0 (0 = TensorFlow's default), "
                             f"got {value}")
        if getter() == value:
            continue
        try:
            setter(int(value))
        except RuntimeError:
            settings["applied"] = False
    if not settings["applied"]:
        message = (f"cmlm_tf.load: thread settings intra_op_threads={intra_op_threads}, "
                   f"inter_op_threads={inter_op_threads} not applied: TensorFlow's runtime "
                   "has already started in this process (pass them to the first load(), "
                   "before any other TensorFlow work)")
        logging.getLogger(__name__).warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    return settings
