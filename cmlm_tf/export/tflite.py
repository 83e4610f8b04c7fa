"""TFLite models of an export (`OUT/tflite/`): text or token ids to sentence embeddings.

Written by `python -m cmlm_tf.export ... --tflite` from the same `ServingModule` as
`serving/1`, in float32 and with dynamic-range int8 weights:

- `model_float32.tflite`, `model_int8.tflite`, each with the signatures
  `serving_default` (`sentences` -> `embeddings`, WordPiece exports only: the fast WordPiece
  ops have TFLite kernels; the text must be valid UTF-8) and `from_token_ids`
  (`input_word_ids`, `input_mask`, `input_type_ids` int32 [batch, seq] -> `embeddings`).
  SentencePiece exports have `from_token_ids` only; `tflite/sp.model` is their tokenizer
  (lower-case first when the export is uncased, then `[CLS] pieces [SEP]`, padding 0; for
  `xlmr_sentencepiece`, XLM-R's ids: `<s>` 0, the model's piece ids + 1 with its `<unk>` as
  3, `</s>` 2, padding 1).
  Both run a batch in length buckets, as `serving/1` does (`serving.py`).

The text signature needs TF-Text's TFLite kernels: in Python, `load_interpreter(path)`
(LiteRT's interpreter with `tensorflow_text.tflite_registrar`); in an app, link TF-Text's
TFLite ops and register them with the interpreter. `embed(interpreter, ...)` runs a signature
from Python with the input checks of `serving/1` and returns float32 [0, dim] for an empty
batch, which TFLite's kernels refuse (an empty request to the raw interpreter is the caller's
error).

The converter's own C++ log lines follow `TF_CPP_MIN_LOG_LEVEL` as TensorFlow's do (the
command lines set it to hide INFO and WARNING lines unless the user set it).
"""

import contextlib
import os
import sys
import tempfile
from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf
import tensorflow_text
from ai_edge_litert import interpreter as litert
from tensorflow.lite.python import schema_py_generated as schema

from cmlm_tf.export import serving as serving_lib
from cmlm_tf.runtime import internals, tf_logs
from cmlm_tf.text import packing, tokenization
from cmlm_tf.vectors import l2_normalize

QUANTIZATIONS = ("float32", "int8")


def model_file(quantization: str) -> str:
    return f"model_{quantization}.tflite"


def _functions(module: "serving_lib.ServingModule") -> Dict[str, object]:
    """The functions to convert, by signature name. Both run the batch in `serving/1`'s
    length buckets (a WHILE loop over sub-batches of similar length, each trimmed to its own
    longest row), so the interpreter does the work of the real tokens, not of the padding."""
    @tf.function(input_signature=serving_lib.TOKEN_ID_SPECS)
    def from_token_ids(input_word_ids, input_mask, input_type_ids):
        pooled = module.pooled(*module.checked_token_ids(input_word_ids, input_mask,
                                                         input_type_ids))
        return {"embeddings": l2_normalize(pooled)}

    functions = {"from_token_ids": from_token_ids}
    if isinstance(module.tokenizer, tokenization.FastWordpieceTokenizer):
        @tf.function(input_signature=[serving_lib.SENTENCES_SPEC])
        def serving_default(sentences):
            tokens = packing.tokenize_and_pack(
                module.tokenizer, tokenization.special_token_ids(module.tokenizer), sentences,
                module.seq_length, replace_invalid_utf8=False)
            pooled = module.pooled(tokens["input_word_ids"], tokens["input_mask"],
                                   tokens["input_type_ids"])
            return {"embeddings": l2_normalize(pooled)}

        functions["serving_default"] = serving_default
    return functions


def convert(module: "serving_lib.ServingModule", quantization: str) -> bytes:
    """One TFLite flatbuffer with every signature of `_functions`, named as in serving/1."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {quantization!r}")
    functions = _functions(module)
    with tempfile.TemporaryDirectory() as work:
        # Through a SavedModel, so the TFLite signatures keep their names.
        tf.saved_model.save(module, work, signatures=functions)
        converter = tf.lite.TFLiteConverter.from_saved_model(
            work, signature_keys=sorted(functions))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        # The fast WordPiece ops are TF-Text custom ops with TFLite kernels.
        converter.allow_custom_ops = True
        if quantization == "int8":
            converter.optimizations = [tf.lite.Optimize.DEFAULT]  # dynamic range: int8 weights
        with tf_logs.filtered_cpp_logs():
            return converter.convert()


def custom_ops(flatbuffer: bytes) -> List[str]:
    """The custom op names a TFLite flatbuffer uses (kernels an interpreter must register)."""
    model = schema.ModelT.InitFromPackedBuf(bytearray(flatbuffer), 0)
    names = {code.customCode.decode("utf-8") for code in model.operatorCodes
             if code.customCode}
    return sorted(names)


def write_tflite(module: "serving_lib.ServingModule", directory: str) -> dict:
    """Writes the models of this module's docstring; returns their metadata entry."""
    tf.io.gfile.makedirs(directory)
    models = []
    for quantization in QUANTIZATIONS:
        flatbuffer = convert(module, quantization)
        name = model_file(quantization)
        with open(os.path.join(directory, name), "wb") as f:
            f.write(flatbuffer)
        signatures = sorted(_functions(module))
        models.append({"file": name, "quantization": quantization,
                       "signatures": signatures,
                       "inputs": "`sentences` or token ids" if "serving_default" in signatures
                       else "token ids",
                       "custom_ops": custom_ops(flatbuffer), "bytes": len(flatbuffer)})
    entry = {"models": models}
    if not isinstance(module.tokenizer, tokenization.FastWordpieceTokenizer):
        sp_proto = internals.sentencepiece_model(module.tokenizer)
        if sp_proto is not None:
            with open(os.path.join(directory, tokenization.SP_MODEL_FILE), "wb") as f:
                f.write(sp_proto)
            entry["tokenizer"] = tokenization.SP_MODEL_FILE
    return entry


def load_interpreter(path: str, num_threads: Optional[int] = None):
    """A LiteRT interpreter for `path` with TF-Text's TFLite kernels registered.

    Run it with `embed(interpreter, sentences=...)`, or call
    `get_signature_runner("serving_default")` (text) or
    `get_signature_runner("from_token_ids")` on it.
    """
    # LiteRT announces its default CPU delegate on stderr from C++, whatever the log level.
    # The delegate is applied when tensors are first allocated: done here, quietly.
    with _without_stderr_lines(_DELEGATE_NOTICE):
        interpreter = litert.InterpreterWithCustomOps(
            model_path=path, num_threads=num_threads,
            custom_op_registerers=tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS)
        interpreter.allocate_tensors()
    return interpreter


_DELEGATE_NOTICE = "INFO: Created TensorFlow Lite XNNPACK delegate for CPU."


@contextlib.contextmanager
def _without_stderr_lines(notice: str):
    """Inside the block, what native code writes to file descriptor 2 is held back; after
    it, every line but `notice` is written to stderr (errors still reach the user)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().decode("utf-8", errors="replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if line.strip() != notice)
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


def embed(interpreter, signature: str = "serving_default", **inputs) -> np.ndarray:
    """Runs one signature of a `load_interpreter` model; returns float32 [batch, dim].

    Inputs are checked as `serving/1` checks them, before the interpreter runs: `sentences`
    str or bytes [batch]; `input_word_ids`, `input_mask`, `input_type_ids` integers
    [batch, seq] of one shape. An empty batch returns float32 [0, dim] without running the
    interpreter, whose kernels refuse empty tensors.

    Example:
        interpreter = load_interpreter("OUT/tflite/model_float32.tflite")
        vectors = embed(interpreter, sentences=["Hello world."])
    """
    signatures = interpreter.get_signature_list()
    if signature not in signatures:
        raise ValueError(f"signature {signature!r} is not in this model; it has "
                         f"{sorted(signatures)}")
    expected = sorted(signatures[signature]["inputs"])
    if sorted(inputs) != expected:
        raise ValueError(f"{signature} takes the inputs {expected}, got {sorted(inputs)}")
    if signature == "serving_default":
        arrays = {"sentences": _sentences_array(inputs["sentences"])}
    else:
        arrays = {name: _token_ids_array(name, value) for name, value in inputs.items()}
        shapes = {name: array.shape for name, array in arrays.items()}
        if len(set(shapes.values())) > 1:
            raise ValueError(f"{signature}: the token-id inputs must have one shape "
                             f"[batch, seq], got {shapes}")
    runner = interpreter.get_signature_runner(signature)
    if len(next(iter(arrays.values()))) == 0:
        dim = int(runner.get_output_details()["embeddings"]["shape_signature"][-1])
        return np.zeros([0, dim], np.float32)
    return runner(**arrays)["embeddings"]


def _sentences_array(sentences) -> np.ndarray:
    if isinstance(sentences, (str, bytes)):
        raise ValueError("sentences must be a list of strings [batch], got one string; "
                         "pass [text]")
    array = np.asarray(sentences, dtype=object)
    if array.ndim != 1:
        raise ValueError(f"sentences must have the shape [batch], got {list(array.shape)}")
    if not all(isinstance(text, (str, bytes)) for text in array):
        raise ValueError("sentences must hold str or bytes items")
    return array


def _token_ids_array(name: str, value) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != 2 or not (np.issubdtype(array.dtype, np.integer) or array.size == 0):
        raise ValueError(f"{name} must be integers [batch, seq], got {array.dtype} "
                         f"{list(array.shape)}")
    return array.astype(np.int32)
