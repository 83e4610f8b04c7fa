"""The TF Serving model in another precision than float32 (`OUT/serving_bf16/1/`,
`OUT/serving_int8/1/`): the same signatures running the bfloat16 or int8 forward, written
only when its vectors stay close to float32's on the probe texts
(`forward_checks.check_precision`). `bf16.py` and `int8.py` are its two formats."""

from cmlm_tf.export import staging
from cmlm_tf.export.export_metadata import SERVING_FOLDERS
from cmlm_tf.export.formats import tf_hub
from cmlm_tf.export.formats.base import ExportFormat, WriteContext
from cmlm_tf.export.forward_checks import check_precision


def folder(precision: str) -> str:
    """The serving model folder of `precision` (relative to `OUT`, `/`-separated)."""
    return f"{SERVING_FOLDERS[precision]}/1"


def _writer(precision: str):
    def write(context: WriteContext) -> None:
        import tensorflow as tf

        from cmlm_tf.export import serving, serving_forward

        reference = context.module
        forward = serving_forward.InferenceForward(context.encoder, precisions=(precision,))
        rows = serving_forward.PRECISION_BUCKET_ROWS.get(precision, reference.bucket_rows)
        module = serving.ServingModule(forward, reference.tokenizer, reference.seq_length,
                                       bucket_rows=rows, precision=precision)
        cosine = check_precision(reference, module)
        context.stage(f"saving the {precision} serving model {folder(precision)}")
        with staging.writing(context.export_dir, folder(precision)):
            tf.saved_model.save(module, context.path(folder(precision)),
                                signatures=module.signatures())
        context.meta["serving_models"][precision] = {
            "folder": folder(precision), "bucket_rows": rows,
            "min_probe_cosine_to_float32": cosine}
    return write


def _card_rows(precision: str):
    def card_rows(meta: dict) -> str:
        entry = (meta.get("serving_models") or {}).get(precision)
        if not entry:
            return ""
        return (f"| `{entry['folder']}/` | the same TF Serving model in {precision} (a model "
                f"server switches by model name) | {tf_hub.op_list(meta, 'serving')} |\n")
    return card_rows


def precision_format(name: str, precision: str, help: str) -> ExportFormat:
    """The format `name` (its flag `--name`): the serving model in `precision`."""
    return ExportFormat(name=name, write=_writer(precision), help=help, recorded=True,
                        outputs=(f"{folder(precision)}/saved_model.pb",),
                        card_rows=_card_rows(precision))
