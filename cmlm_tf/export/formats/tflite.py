"""`--tflite`: `OUT/tflite/`, the serving model converted to TFLite, float32 and
dynamic-range int8 (`cmlm_tf.export.tflite`)."""

from cmlm_tf.export import staging
from cmlm_tf.export.formats.base import ExportFormat, WriteContext


def write(context: WriteContext) -> None:
    from cmlm_tf.export import tflite as tflite_lib

    context.stage("converting to TFLite")
    with staging.writing(context.export_dir, "tflite"):
        context.meta["tflite"] = tflite_lib.write_tflite(context.module,
                                                         context.path("tflite"))


def card_rows(meta: dict) -> str:
    return "".join(
        f"| `tflite/{entry['file']}` | TFLite ({entry['quantization']}): "
        f"{entry['inputs']} -> `embeddings` | {', '.join(entry['custom_ops']) or 'none'} |\n"
        for entry in (meta.get("tflite") or {}).get("models", ()))


FORMAT = ExportFormat(
    name="tflite", write=write, recorded=True, outputs=("tflite",), card_rows=card_rows,
    help="also write OUT/tflite/ (float32 and dynamic-range int8)")
