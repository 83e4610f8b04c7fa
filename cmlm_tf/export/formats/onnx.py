"""`--onnx`: the ONNX models of the sentence-transformers folder,
`onnx/model.onnx` (float32) and `onnx/model_qint8_avx512_vnni.onnx` (int8), for ONNX Runtime
and sentence-transformers' `backend="onnx"` (`cmlm_tf.export.onnx_model`; the `onnx`
extra). It writes into the folder of `sentence_transformers.py`, which it turns on."""

import os

from safetensors.numpy import load_file

from cmlm_tf.export import onnx_model, staging
from cmlm_tf.export.export_metadata import SENTENCE_TRANSFORMERS_FOLDER as FOLDER
from cmlm_tf.export.formats import sentence_transformers
from cmlm_tf.export.formats.base import ExportFormat, WriteContext


def require() -> None:
    onnx_model.require_onnx()


def write(context: WriteContext) -> None:
    from cmlm_tf.export import sentence_transformers_folder as st_folder

    context.stage("writing the ONNX models")
    folder = context.path(FOLDER)
    # The weights as the folder holds them (an XLM-R table has its two offset rows).
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    with staging.writing(context.export_dir, FOLDER):
        context.meta["sentence_transformers"]["onnx"] = onnx_model.write_onnx(
            os.path.join(folder, onnx_model.FOLDER), tensors, context.model.encoder)
        st_folder.write_readme(folder, context.model, context.seq_length,
                               context.encoder.output_dim, card_lines=context.card_description,
                               onnx=True)


def card_rows(meta: dict) -> str:
    folder = meta.get("sentence_transformers") or {}
    onnx = folder.get("onnx") or {}
    # The XLM-R family's graph has no token types (`onnx_model.graph_layout`).
    xlmr = (meta.get("tokenizer") or {}).get("type") == "xlmr_sentencepiece"
    inputs = "`input_ids`, `attention_mask`" + ("" if xlmr else ", `token_type_ids`")
    return "".join(
        f"| `{folder['folder']}/{onnx[precision]}` | ONNX Runtime, {precision} (opset "
        f"{onnx['opset']}): {inputs} -> "
        f"`last_hidden_state`; `SentenceTransformer(path, backend=\"onnx\")` | none |\n"
        for precision in ("float32", "int8") if precision in onnx)


FORMAT = ExportFormat(
    name="onnx", write=write, require=require, check=sentence_transformers.check,
    implies=("sentence_transformers",), outputs=(f"{FOLDER}/onnx/model.onnx",),
    card_rows=card_rows,
    help="also write OUT/sentence_transformers/ with onnx/model.onnx and "
         "onnx/model_qint8_avx512_vnni.onnx (ONNX Runtime, sentence-transformers' "
         "backend=\"onnx\"; the onnx extra)")
