r"""Exports a cmlm_tf encoder for TF Hub and TF Serving.

    python -m export.export_tfhub --export_dir OUT \
        (--model_dir DIR [--checkpoint CKPT] [--encoder_key encoder] | --hf_dir DIR) \
        [--seq_length N] [--overwrite]

`--model_dir` is a training run (`params.yaml` + checkpoints) or a folder written by
`cmlm_tf.convert_hf_bert` (`warm_start.yaml`). `--hf_dir` converts a Hugging Face BERT folder
on the fly. Writes, atomically (to a sibling folder, then renamed):

- `OUT/preprocessor/`: TF Hub text preprocessor (needs `import tensorflow_text`);
- `OUT/encoder/`: TF Hub text encoder, dict in, no TF-Text ops;
- `OUT/serving/1/`: end-to-end model for TF Serving with signatures `serving_default`
  (`sentences` -> `embeddings`) and `from_token_ids`;
- `OUT/README.md` (model card) and `OUT/cmlm_tf_export.json` (read by `cmlm_tf.load`).

The export never knows which objective trained the encoder: it reads `task.model` and the
checkpoint item `encoder` (or `--encoder_key`).
"""

import dataclasses
import datetime
import json
import os
import shutil
import sys
import tempfile
from typing import Optional

DEFAULT_SEQ_LENGTH = 128
# TF-Text ops the preprocessor and serving SavedModels contain; the encoder has none.
PREPROCESSOR_OPS = ["CaseFoldUTF8", "NormalizeUTF8", "RegexSplitWithOffsets",
                    "WordpieceTokenizeWithOffsets", "TFText>RoundRobinTrim"]
SERVING_OPS = ["CaseFoldUTF8", "NormalizeUTF8", "RegexSplitWithOffsets",
               "WordpieceTokenizeWithOffsets"]
SENTENCEPIECE_PREPROCESSOR_OPS = ["CaseFoldUTF8", "SentencepieceOp",
                                  "SentencepieceTokenizeOp", "TFText>RoundRobinTrim"]
SENTENCEPIECE_SERVING_OPS = ["CaseFoldUTF8", "SentencepieceOp", "SentencepieceTokenizeOp"]


def custom_ops(tokenizer_type: str) -> dict:
    """The TF-Text ops each exported SavedModel needs, for a tokenizer type."""
    if tokenizer_type == "sentencepiece":
        return {"preprocessor": SENTENCEPIECE_PREPROCESSOR_OPS, "encoder": [],
                "serving": SENTENCEPIECE_SERVING_OPS}
    return {"preprocessor": PREPROCESSOR_OPS, "encoder": [], "serving": SERVING_OPS}


@dataclasses.dataclass
class ExportSource:
    """What to export: the model config, the checkpoint and a description for the card."""

    model: "object"  # configs.SentenceModelConfig
    checkpoint: str
    seq_length: int
    description: dict


def _read_yaml(path: str) -> dict:
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"{path}: cannot read YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return data


def _model_config_from(params: dict, path: str):
    from cmlm_tf import configs

    model = (params.get("task") or {}).get("model") or {}
    if "encoder" not in model:
        raise ValueError(f"{path}: has no task.model.encoder")
    config = configs.SentenceModelConfig()
    try:
        config.override({k: model[k] for k in ("encoder", "tokenizer") if k in model},
                        is_strict=True)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: {str(e).splitlines()[0]}") from None
    configs.validate_model_config(config)
    return config


def resolve_source(model_dir: Optional[str] = None, checkpoint: Optional[str] = None,
                   hf_dir: Optional[str] = None, work_dir: Optional[str] = None
                   ) -> ExportSource:
    """Finds the config, checkpoint and default seq_length of what is to be exported."""
    from cmlm_tf import convert_hf_bert, tokenization
    from cmlm_tf.modeling import sentence_encoder

    if bool(model_dir) == bool(hf_dir):
        raise ValueError("pass exactly one of --model_dir and --hf_dir")
    if hf_dir:
        converted = os.path.join(work_dir or tempfile.mkdtemp(), "converted")
        convert_hf_bert.convert(hf_dir, converted)
        source = resolve_source(model_dir=converted, checkpoint=checkpoint)
        source.description = {"kind": "hugging_face", "hf_dir": os.path.abspath(hf_dir)}
        return source
    if not os.path.isdir(model_dir):
        raise FileNotFoundError(f"{model_dir}: model directory not found")
    warm_start = os.path.join(model_dir, convert_hf_bert.WARM_START_FILE)
    params_path = os.path.join(model_dir, "params.yaml")
    if os.path.exists(params_path):
        params = _read_yaml(params_path)
        model = _model_config_from(params, params_path)
        prefix = sentence_encoder.resolve_checkpoint(checkpoint or model_dir)
        train_data = (params.get("task") or {}).get("train_data") or {}
        seq_length = train_data.get("seq_length") or DEFAULT_SEQ_LENGTH
        description = {"kind": "training_run", "model_dir": os.path.abspath(model_dir),
                       "checkpoint": os.path.abspath(prefix)}
        run_sp_model = os.path.join(model_dir, tokenization.SP_MODEL_FILE)
        if (model.tokenizer.type == "sentencepiece" and os.path.exists(run_sp_model)
                and not os.path.exists(model.tokenizer.sp_model_file)):
            model.tokenizer.sp_model_file = run_sp_model  # the run directory was moved
    elif os.path.exists(warm_start):
        params = _read_yaml(warm_start)
        model = _model_config_from(params, warm_start)
        prefix = sentence_encoder.resolve_checkpoint(
            checkpoint or params["task"].get("init_checkpoint", ""))
        source_file = os.path.join(model_dir, convert_hf_bert.SOURCE_FILE)
        source = json.load(open(source_file, encoding="utf-8")) \
            if os.path.exists(source_file) else {}
        seq_length = source.get("max_seq_length") or DEFAULT_SEQ_LENGTH
        description = {"kind": "converted", "hf_dir": source.get("hf_dir", ""),
                       "checkpoint": os.path.abspath(prefix)}
    else:
        raise FileNotFoundError(
            f"{model_dir}: neither params.yaml (training run) nor "
            f"{convert_hf_bert.WARM_START_FILE} (converted weights) found")
    return ExportSource(model=model, checkpoint=prefix, seq_length=int(seq_length),
                        description=description)


def _build_core_encoder(encoder):
    """Wraps the sentence encoder as a functional model with named dict inputs."""
    import tensorflow as tf
    import tf_keras

    from cmlm_tf.modeling.sentence_encoder import INPUT_KEYS

    inputs = {key: tf_keras.layers.Input(shape=(None,), dtype=tf.int32, name=key)
              for key in INPUT_KEYS}
    return tf_keras.Model(inputs, encoder(inputs), name="sentence_encoder")


def _build_serving_module(core_encoder, tokenizer_config, seq_length: int):
    import tensorflow as tf

    from cmlm_tf import tokenization
    from cmlm_tf.modeling.sentence_encoder import INPUT_KEYS

    tokenizer = tokenization.build_tokenizer(tokenizer_config)
    special = tokenization.special_token_ids(tokenizer)
    module = tf.Module()
    module.encoder = core_encoder
    module.tokenizer = tokenizer

    def embed(inputs):
        pooled = core_encoder(inputs, training=False)["pooled_output"]
        return pooled, tf.math.l2_normalize(pooled, axis=-1, epsilon=1e-12)

    def tokenize(sentences):
        return tokenization.tokenize_and_pack(tokenizer, special, sentences, seq_length)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
    def serve_sentences(sentences):
        _, embeddings = embed(tokenize(sentences))
        return {"embeddings": embeddings}

    @tf.function(input_signature=[
        tf.TensorSpec([None, None], tf.int32, name=key) for key in INPUT_KEYS])
    def serve_token_ids(input_word_ids, input_mask, input_type_ids):
        _, embeddings = embed({"input_word_ids": input_word_ids, "input_mask": input_mask,
                               "input_type_ids": input_type_ids})
        return {"embeddings": embeddings}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
    def encode(sentences):
        """Used by cmlm_tf.load(): both the raw and the normalised embedding."""
        pooled, embeddings = embed(tokenize(sentences))
        return {"pooled_output": pooled, "embeddings": embeddings}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
    def tokenize_fn(sentences):
        return tokenize(sentences)

    module.serve_sentences = serve_sentences
    module.serve_token_ids = serve_token_ids
    module.encode = encode
    module.tokenize = tokenize_fn
    signatures = {"serving_default": serve_sentences, "from_token_ids": serve_token_ids}
    return module, signatures


def _model_card(meta: dict) -> str:
    enc = meta["encoder"]
    src = meta["source"]
    if src.get("kind") == "training_run":
        origin = f"training run `{src['model_dir']}`, checkpoint `{src['checkpoint']}`"
    elif src.get("hf_dir"):
        origin = f"Hugging Face BERT weights from `{src['hf_dir']}` (converted)"
    else:
        origin = f"checkpoint `{src.get('checkpoint', '')}`"
    lower_cased = "lower-cased" if meta["tokenizer"]["type"] == "sentencepiece" \
        else "lower-cased, accents stripped"
    casing = f"uncased ({lower_cased})" if meta["tokenizer"]["lower_case"] else "cased"
    ops = meta["custom_ops"]
    return f"""# Sentence encoder exported by cmlm_tf

- Source: {origin}
- Architecture: BERT, {enc['num_layers']} layers, hidden size {enc['hidden_size']}, \
{enc['num_attention_heads']} heads, activation `{enc['hidden_activation']}`
- Pooling: `{enc['pooling']}`{f", projection to {enc['projection_size']}"
                              if enc['projection_size'] else ""}
- Embedding dimension: {meta['dim']}
- Normalisation: encoder `default` output is \
{"L2-normalised" if enc['normalize'] else "the pooled output, not normalised"}; \
the serving `embeddings` output is always L2-normalised
- Sequence length: {meta['seq_length']} tokens including `[CLS]` and `[SEP]`; longer texts are \
truncated
- Tokenizer: {meta['tokenizer']['type']}, vocabulary of {meta['vocab_size']} tokens, {casing}
- Exported: {meta['exported_at']}

## Contents and the ops each SavedModel needs

| folder | what | custom ops |
| --- | --- | --- |
| `preprocessor/` | TF Hub text preprocessor: strings -> `input_word_ids`, `input_mask`, \
`input_type_ids`; `.tokenize`, `.bert_pack_inputs` | TF-Text: {", ".join(ops["preprocessor"])} |
| `encoder/` | TF Hub text encoder: dict -> `pooled_output`, `default`, `sequence_output`, \
`encoder_outputs` | none |
| `serving/1/` | TF Serving: `serving_default` (`sentences` -> `embeddings`), \
`from_token_ids` (`input_word_ids`, `input_mask`, `input_type_ids` -> `embeddings`) | \
TF-Text: {", ".join(ops["serving"])} |

## Load it

With TF Hub (tf_keras):

```python
import tensorflow as tf, tensorflow_hub as hub, tensorflow_text  # noqa: F401
preprocessor = hub.KerasLayer("preprocessor")
encoder = hub.KerasLayer("encoder", trainable=True)
outputs = encoder(preprocessor(tf.constant(["Hello world."])))
vectors = outputs["default"]
```

Keras 3 users call the SavedModels directly:

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

With TF Serving (the model server must include the TF-Text ops listed above, or send token
ids to `from_token_ids`):

```
docker run -p 8501:8501 -v "$PWD/serving:/models/encoder" -e MODEL_NAME=encoder tensorflow/serving
curl -d '{{"signature_name": "serving_default", "instances": [{{"sentences": "Hello world."}}]}}' \\
    http://localhost:8501/v1/models/encoder:predict
```
"""


def export(export_dir: str, model_dir: Optional[str] = None, checkpoint: Optional[str] = None,
           encoder_key: str = "encoder", hf_dir: Optional[str] = None,
           seq_length: Optional[int] = None, overwrite: bool = False) -> str:
    """Writes the three SavedModels, the model card and the metadata; returns `export_dir`."""
    import tensorflow as tf

    from cmlm_tf import inference, tokenization
    from cmlm_tf.modeling import sentence_encoder

    export_dir = os.path.abspath(export_dir)
    if os.path.exists(export_dir) and not overwrite:
        raise FileExistsError(f"{export_dir}: already exists (pass --overwrite to replace it)")
    parent = os.path.dirname(export_dir)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=os.path.basename(export_dir) + ".tmp-", dir=parent)
    try:
        work = os.path.join(staging, "_work")
        source = resolve_source(model_dir=model_dir, checkpoint=checkpoint, hf_dir=hf_dir,
                                work_dir=work)
        model = source.model
        seq_length = int(seq_length or source.seq_length)
        if not 2 < seq_length <= model.encoder.max_position_embeddings:
            raise ValueError(
                f"--seq_length {seq_length} must be in 3..{model.encoder.max_position_embeddings}"
                " (task.model.encoder.max_position_embeddings)")
        tokenizer = tokenization.build_tokenizer(model.tokenizer)  # fails early on a bad path
        vocab_size = tokenization.special_token_ids(tokenizer)["vocab_size"]
        if model.tokenizer.type == "wordpiece":
            # The vocabulary is read from a neutral copy so no local path leaks into the
            # models (a SentencePiece layer holds its model proto, not a path).
            model.tokenizer.vocab_file = tokenization.copy_vocab_aside(
                model.tokenizer.vocab_file, os.path.join(work, "assets"))

        encoder = sentence_encoder.build_sentence_encoder(model.encoder)
        sentence_encoder.restore_encoder(encoder, source.checkpoint, encoder_key=encoder_key)
        core = _build_core_encoder(encoder)
        core.save(os.path.join(staging, "encoder"), include_optimizer=False, save_format="tf")

        preprocessor = tokenization.create_preprocessor(model.tokenizer, seq_length)
        preprocessor.save(os.path.join(staging, "preprocessor"), include_optimizer=False,
                          save_format="tf")

        module, signatures = _build_serving_module(core, model.tokenizer, seq_length)
        tf.saved_model.save(module, os.path.join(staging, "serving", "1"),
                            signatures=signatures)

        meta = {
            "format_version": inference.FORMAT_VERSION,
            "dim": encoder.output_dim,
            "seq_length": seq_length,
            "vocab_size": vocab_size,
            "encoder": model.encoder.as_dict(),
            "tokenizer": {"type": model.tokenizer.type,
                          "lower_case": model.tokenizer.lower_case},
            "source": source.description,
            "encoder_key": encoder_key,
            "signatures": {"serving_default": {"inputs": ["sentences"],
                                               "outputs": ["embeddings"]},
                           "from_token_ids": {"inputs": list(sentence_encoder.INPUT_KEYS),
                                              "outputs": ["embeddings"]}},
            "custom_ops": custom_ops(model.tokenizer.type),
            "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"),
        }
        with open(os.path.join(staging, inference.METADATA_FILE), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2)
        with open(os.path.join(staging, "README.md"), "w", encoding="utf-8") as f:
            f.write(_model_card(meta))
        shutil.rmtree(work, ignore_errors=True)
        _replace_dir(staging, export_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return export_dir


def _replace_dir(new: str, target: str) -> None:
    """Moves `new` to `target`; an old `target` is removed only once `new` is in place."""
    if os.path.exists(target):
        old = tempfile.mkdtemp(prefix=os.path.basename(target) + ".old-",
                               dir=os.path.dirname(target))
        os.rename(target, os.path.join(old, "export"))
        os.rename(new, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(new, target)


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m export.export_tfhub",
        description="Export a cmlm_tf encoder as TF Hub preprocessor + encoder SavedModels "
                    "and a TF Serving model.")
    parser.add_argument("--export_dir", required=True)
    parser.add_argument("--model_dir", help="training run or convert_hf_bert output folder")
    parser.add_argument("--checkpoint", help="checkpoint prefix (default: the latest)")
    parser.add_argument("--encoder_key", default="encoder",
                        help="checkpoint item holding the encoder (e.g. target_encoder)")
    parser.add_argument("--hf_dir", help="Hugging Face BERT folder to convert and export")
    parser.add_argument("--seq_length", type=int, default=None,
                        help="default: the HF folder's max_seq_length, else the training "
                             f"run's seq_length, else {DEFAULT_SEQ_LENGTH}")
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    if bool(args.model_dir) == bool(args.hf_dir):
        parser.error("pass exactly one of --model_dir and --hf_dir")
    try:
        path = export(args.export_dir, model_dir=args.model_dir, checkpoint=args.checkpoint,
                      encoder_key=args.encoder_key, hf_dir=args.hf_dir,
                      seq_length=args.seq_length, overwrite=args.overwrite)
    except (FileNotFoundError, FileExistsError, ValueError, NotImplementedError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"exported to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
