"""`--keras_hub`: `OUT/keras_hub/`, a KerasHub preset (backbone, tokenizer, preprocessor)
that `keras_hub.models.Backbone.from_preset(path)` loads under Keras 3
(`cmlm_tf.export.keras_hub_preset`; the `keras_hub` extra). It is converted from the
sentence-transformers folder, which it turns on."""

from cmlm_tf.export import keras_hub_preset, staging
from cmlm_tf.export.export_metadata import SENTENCE_TRANSFORMERS_FOLDER
from cmlm_tf.export.formats.base import ExportFormat, WriteContext

FOLDER = "keras_hub"


def require() -> None:
    keras_hub_preset.require_keras_hub()


def check(model, flag: str) -> None:
    keras_hub_preset.check_representable(model, flag)


def write(context: WriteContext) -> None:
    context.stage("writing the KerasHub preset")
    with staging.writing(context.export_dir, FOLDER):
        context.meta["keras_hub"] = keras_hub_preset.write_preset(
            context.path(SENTENCE_TRANSFORMERS_FOLDER), context.path(FOLDER))


def card_rows(meta: dict) -> str:
    if not meta.get("keras_hub"):
        return ""
    return (f"| `{FOLDER}/` | KerasHub preset (Keras 3 on TensorFlow or PyTorch): "
            "`keras_hub.models.Backbone.from_preset(path)`, "
            "`keras_hub.models.Tokenizer.from_preset(path)` | none |\n")


def card_section(meta: dict) -> str:
    entry = meta.get("keras_hub")
    if not entry:
        return ""

    return "\n".join(keras_hub_preset.card_lines(entry)) + "\n"


FORMAT = ExportFormat(
    name="keras_hub", write=write, require=require, check=check,
    implies=("sentence_transformers",), outputs=(f"{FOLDER}/config.json",),
    card_rows=card_rows, card_section=card_section,
    help="also write OUT/keras_hub/: a KerasHub preset for Keras 3 "
         "(keras_hub.models.Backbone.from_preset(path); the keras_hub extra)")
