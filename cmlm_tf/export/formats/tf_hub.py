"""The format every export writes: the TF Hub pair (`OUT/preprocessor/`, `OUT/encoder/`) and
the TF Serving model `OUT/serving/1/` (`cmlm_tf.export.serving.ServingModule`: the inference
forward built from the encoder, checked against it before it is saved)."""

import os

from cmlm_tf.export import staging
from cmlm_tf.export.formats.base import ExportFormat, WriteContext
from cmlm_tf.export.forward_checks import check_forward

SAVED_MODELS = ("preprocessor", "encoder", "serving/1")


def op_list(meta: dict, name: str) -> str:
    """The custom ops the SavedModel `name` needs, as the model card lists them."""
    ops = meta["custom_ops"][name]
    return "TF-Text: " + ", ".join(f"`{op}`" for op in ops) if ops else "none"


def _build_core_encoder(encoder):
    """Wraps the sentence encoder as a functional model with named dict inputs."""
    import tensorflow as tf
    import tf_keras

    from cmlm_tf.modeling.sentence_encoder import INPUT_KEYS

    inputs = {key: tf_keras.layers.Input(shape=(None,), dtype=tf.int32, name=key)
              for key in INPUT_KEYS}
    return tf_keras.Model(inputs, encoder(inputs), name="sentence_encoder")


class _no_compiled_metrics_warning:
    """tf_keras warns, on saving any model that was never compiled, that its "compiled
    metrics have yet to be built"; these models are for inference and fine-tuning by their
    users, who compile them themselves."""

    @staticmethod
    def filter(record) -> bool:
        return "compiled metrics have yet to be built" not in record.getMessage()

    def __enter__(self):
        import tensorflow as tf

        tf.get_logger().addFilter(self.filter)

    def __exit__(self, *exc):
        import tensorflow as tf

        tf.get_logger().removeFilter(self.filter)


def _save_hub_models(context: WriteContext) -> None:
    """Writes `encoder/` and `preprocessor/` (the TF Hub pair)."""
    from cmlm_tf.text import packing

    core = _build_core_encoder(context.encoder)
    preprocessor = packing.create_preprocessor(context.model.tokenizer, context.seq_length)
    context.stage("saving encoder/ and preprocessor/")
    with _no_compiled_metrics_warning():
        for name, model in (("encoder", core), ("preprocessor", preprocessor)):
            with staging.writing(context.export_dir, name):
                model.save(context.path(name), include_optimizer=False, save_format="tf")


def write(context: WriteContext) -> None:
    """Writes the TF Hub pair and `serving/1`; sets `context.module` and
    `context.forward_error`."""
    import tensorflow as tf

    from cmlm_tf.export import serving, serving_forward

    _save_hub_models(context)
    module = serving.ServingModule(serving_forward.InferenceForward(context.encoder),
                                   context.tokenizer, context.seq_length)
    context.forward_error = check_forward(context.encoder, module)
    context.stage("saving the serving model serving/1")
    with staging.writing(context.export_dir, os.path.join("serving", "1")):
        tf.saved_model.save(module, context.path("serving/1"), signatures=module.signatures())
    context.module = module


def card_rows(meta: dict) -> str:
    return f"""| `preprocessor/` | TF Hub text preprocessor: strings -> `input_word_ids`, \
`input_mask`, `input_type_ids`; `.tokenize`, `.bert_pack_inputs` | \
{op_list(meta, "preprocessor")} |
| `encoder/` | TF Hub text encoder (trainable): dict -> `pooled_output`, `default`, \
`sequence_output`, `encoder_outputs` | {op_list(meta, "encoder")} |
| `serving/1/` | TF Serving: `serving_default` (`sentences` -> `embeddings`), \
`from_token_ids` (`input_word_ids`, `input_mask`, `input_type_ids` -> `embeddings`) | \
{op_list(meta, "serving")} |
"""


FORMAT = ExportFormat(
    name="tf_hub", write=write, always=True,
    outputs=tuple(f"{name}/saved_model.pb" for name in SAVED_MODELS), card_rows=card_rows)
