"""The model card of an export (`OUT/README.md`): where the weights came from, what the
models compute, the ops each needs, and how to load them. Made from the export's metadata
(`cmlm_tf_export.json`) alone."""

from cmlm_tf.export import formats
from cmlm_tf.export import source as source_lib

_HOW_TO_LOAD = """## Load it

With TF Hub (tf_keras):

```python
import tensorflow as tf, tensorflow_hub as hub, tensorflow_text  # noqa: F401
preprocessor = hub.KerasLayer("preprocessor")
encoder = hub.KerasLayer("encoder", trainable=True)
outputs = encoder(preprocessor(tf.constant(["Hello world."])))
vectors = outputs["default"]
vectors = hub.KerasLayer("serving/1")(tf.constant(["Hello world."]))  # inference, one layer
```

With Keras 3 (inference only):

```python
import keras, tensorflow as tf, tensorflow_text  # noqa: F401
layer = keras.layers.TFSMLayer("serving/1", call_endpoint="serving_default")
vectors = layer(tf.constant(["Hello world."]))["embeddings"]
```

With plain TensorFlow:

```python
import tensorflow as tf, tensorflow_text  # noqa: F401
model = tf.saved_model.load("serving/1")
vectors = model.signatures["serving_default"](sentences=tf.constant(["Hello world."]))["embeddings"]
```

From Python, with length-sorted batching:

```python
import cmlm_tf
model = cmlm_tf.load(".")
vectors = model.encode(["Hello world.", "Bonjour le monde."])
```

With TF Serving (a model server whose build links the TF-Text ops above; otherwise send
token ids to `from_token_ids`):

```
docker run -p 8501:8501 -v "$PWD/serving:/models/encoder" -e MODEL_NAME=encoder tensorflow/serving
curl -d '{"signature_name": "serving_default", "instances": [{"sentences": "Hello world."}]}' \\
    http://localhost:8501/v1/models/encoder:predict
```
"""


def _origin(src: dict) -> str:
    """The card's `Source` line: the run, the imported folder or the checkpoint, hashed."""
    if src.get("kind") == "training_run":
        origin = f"training run `{src['model_dir']}`, checkpoint `{src['checkpoint']}`"
    elif src.get("hf_dir"):
        family = source_lib.family_title(src.get("family", src.get("kind")))
        origin = f"{family} weights from `{src['hf_dir']}` (converted)"
    else:
        origin = f"checkpoint `{src.get('checkpoint', '')}`"
    if src.get("checkpoint_sha256"):
        origin += f" (SHA-256 `{src['checkpoint_sha256'][:16]}…`)"
    return origin


def description(meta: dict) -> str:
    """The card's list: source, architecture, pooling, normalisation, length, tokenizer."""
    enc = meta["encoder"]
    lower_cased = "lower-cased" if meta["tokenizer"]["type"] == "sentencepiece" \
        else "lower-cased, accents stripped"
    casing = f"uncased ({lower_cased})" if meta["tokenizer"]["lower_case"] else "cased"
    implementation = meta["tokenizer"]["implementation"]
    ends = "`<s>` and `</s>`" if meta["tokenizer"]["type"] == "xlmr_sentencepiece" \
        else "`[CLS]` and `[SEP]`"
    return f"""- Source: {_origin(meta["source"])}
- Architecture: BERT, {enc['num_layers']} layers, hidden size {enc['hidden_size']}, \
{enc['num_attention_heads']} heads, activation `{enc['hidden_activation']}`
- Pooling: `{enc['pooling']}`{f", projection to {enc['projection_size']} "
                              f"(`{enc.get('projection_activation', 'linear')}`)"
                              if enc['projection_size'] else ""}
- Embedding dimension: {meta['dim']}
- Normalisation: encoder `default` output is \
{"L2-normalised" if enc['normalize'] else "the pooled output, not normalised"}; \
the serving `embeddings` output is always L2-normalised
- Sequence length: {meta['seq_length']} tokens including {ends}; longer texts are truncated
- Tokenizer: {meta['tokenizer']['type']} (`{implementation['name']}`), vocabulary of \
{meta['vocab_size']} tokens, {casing}
- Exported: {meta['exported_at']} with cmlm_tf {meta['cmlm_tf_version']}
"""


def _contents(meta: dict) -> str:
    """The card's table of the export's models and the custom ops each needs: each format's
    rows (`cmlm_tf.export.formats`)."""
    rows = "".join(export_format.card_rows(meta) for export_format in formats.FORMATS)
    return f"""## Contents and the ops each model needs

| path | what | custom ops (`import tensorflow_text` first) |
| --- | --- | --- |
{rows}
"""


def model_card(meta: dict) -> str:
    """The README.md of an export whose metadata is `meta`."""
    return ("# Sentence encoder exported by cmlm_tf\n\n" + description(meta) + "\n"
            + _contents(meta) + _HOW_TO_LOAD
            + "".join("\n" + section for section in (
                export_format.card_section(meta) for export_format in formats.FORMATS)
                if section))
