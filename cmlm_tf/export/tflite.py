"""TFLite models of an export (`OUT/tflite/`): text or token ids to sentence embeddings.

Written by `python -m cmlm_tf.export ... --tflite` from the same `ServingModule` as
`serving/1`, in float32 and with dynamic-range int8 weights:

- `model_float32.tflite`, `model_int8.tflite`, each with the signatures
  `serving_default` (`sentences` -> `embeddings`, WordPiece exports only: the fast WordPiece
  ops have TFLite kernels; the text must be valid UTF-8) and `from_token_ids`
  (`input_word_ids`, `input_mask`, `input_type_ids` int32 [batch, seq] -> `embeddings`).
  SentencePiece exports have `from_token_ids` only; `tflite/sp.model` is their tokenizer
  (lower-case first when the export is uncased, then `[CLS] pieces [SEP]`, padding 0).

The text signature needs TF-Text's TFLite kernels: in Python, `load_interpreter(path)`
(LiteRT's interpreter with `tensorflow_text.tflite_registrar`); in an app, link TF-Text's
TFLite ops and register them with the interpreter.
"""

import os
from typing import Dict, List, Optional

import tensorflow as tf

from cmlm_tf import tokenization
from cmlm_tf.export import serving as serving_lib
from cmlm_tf.vectors import l2_normalize

QUANTIZATIONS = ("float32", "int8")


def model_file(quantization: str) -> str:
    return f"model_{quantization}.tflite"


def _functions(module: "serving_lib.ServingModule") -> Dict[str, object]:
    """The functions to convert, by signature name."""
    functions = {"from_token_ids": module.from_token_ids}
    if isinstance(module.tokenizer, tokenization.FastWordpieceTokenizer):
        @tf.function(input_signature=[serving_lib.SENTENCES_SPEC])
        def serving_default(sentences):
            tokens = tokenization.tokenize_and_pack(
                module.tokenizer, tokenization.special_token_ids(module.tokenizer), sentences,
                module.seq_length, replace_invalid_utf8=False)
            pooled = module.forward(tokens["input_word_ids"], tokens["input_mask"],
                                    tokens["input_type_ids"])
            return {"embeddings": l2_normalize(pooled)}

        functions["serving_default"] = serving_default
    return functions


def convert(module: "serving_lib.ServingModule", quantization: str) -> bytes:
    """One TFLite flatbuffer with every signature of `_functions`, named as in serving/1."""
    import tempfile

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
        return converter.convert()


def custom_ops(flatbuffer: bytes) -> List[str]:
    """The custom op names a TFLite flatbuffer uses (kernels an interpreter must register)."""
    from tensorflow.lite.python import schema_py_generated as schema

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
        sp_proto = getattr(module.tokenizer, "_model_serialized_proto", None)
        if sp_proto is not None:
            with open(os.path.join(directory, tokenization.SP_MODEL_FILE), "wb") as f:
                f.write(sp_proto)
            entry["tokenizer"] = tokenization.SP_MODEL_FILE
    return entry


def load_interpreter(path: str, num_threads: Optional[int] = None):
    """A LiteRT interpreter for `path` with TF-Text's TFLite kernels registered.

    Call `get_signature_runner("serving_default")` (text) or
    `get_signature_runner("from_token_ids")` on it.
    """
    import tensorflow_text
    from ai_edge_litert import interpreter as litert

    return litert.InterpreterWithCustomOps(
        model_path=path, num_threads=num_threads,
        custom_op_registerers=tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS)
