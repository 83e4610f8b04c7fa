"""Turns a cmlm_tf encoder checkpoint into the TF Hub and TF Serving SavedModels.

The library behind `python -m export.export_tfhub` (and `cmlm-tf-export`). Writes,
atomically (to a sibling folder, then renamed):

- `OUT/preprocessor/`: TF Hub text preprocessor (needs `import tensorflow_text`);
- `OUT/encoder/`: TF Hub text encoder, the trainable Keras model, dict in, no TF-Text ops;
- `OUT/serving/1/`: TF Serving model (`cmlm_tf.export.serving.ServingModule`): the
  inference forward built from the encoder, with signatures `serving_default`
  (`sentences` -> `embeddings`) and `from_token_ids`;
- `OUT/tflite/` with `tflite=True` (`cmlm_tf.export.tflite`);
- `OUT/README.md` (model card) and `OUT/cmlm_tf_export.json` (read by `cmlm_tf.load`).

The export never knows which objective trained the encoder: it reads `task.model` and the
checkpoint item `encoder` (or `encoder_key`).
"""

import dataclasses
import datetime
import errno
import json
import os
import shutil
import tempfile
from typing import Optional, Tuple

from cmlm_tf import disk, run_dir, staged_folder
from cmlm_tf.inference import FORMAT_VERSION, METADATA_FILE

DEFAULT_SEQ_LENGTH = 128
SAVED_MODELS = ("preprocessor", "encoder", os.path.join("serving", "1"))
# The inference forward must reproduce the Keras encoder's pooled output within this, or
# the export stops (a layout the forward does not read correctly).
FORWARD_TOLERANCE = 1e-4


def saved_model_ops(saved_model_dir: str) -> set:
    """Every op type in a SavedModel's graphs and functions."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    ops = set()
    for meta_graph in proto.meta_graphs:
        ops.update(node.op for node in meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    return ops


def custom_ops(saved_model_dir: str) -> list:
    """The ops of a SavedModel that core TensorFlow lacks (TF-Text's), sorted.

    A process must `import tensorflow_text` before loading a SavedModel that has any.
    """
    import tensorflow as tf

    core = set(dir(tf.raw_ops))
    return sorted(op for op in saved_model_ops(saved_model_dir) if op not in core)


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
    configs.resolve_bundled_paths(config)  # `cmlm_tf/...` names the installed package's files
    configs.validate_model_config(config)
    return config


def resolve_source(model_dir: Optional[str] = None, checkpoint: Optional[str] = None,
                   hf_dir: Optional[str] = None, work_dir: Optional[str] = None
                   ) -> ExportSource:
    """Finds the config, checkpoint and default seq_length of what is to be exported."""
    from cmlm_tf import configs, import_folder, import_model, tokenization
    from cmlm_tf.modeling import sentence_encoder

    if bool(model_dir) == bool(hf_dir):
        raise ValueError("pass exactly one of --model_dir and --hf_dir")
    if hf_dir:
        converted = os.path.join(work_dir or tempfile.mkdtemp(), "converted")
        import_model.convert(hf_dir, converted)
        source = resolve_source(model_dir=converted, checkpoint=checkpoint)
        source.description = {"kind": source.description["family"],
                              "hf_dir": _base_name(hf_dir)}
        return source
    if not os.path.isdir(model_dir):
        raise FileNotFoundError(f"{model_dir}: model directory not found")
    warm_start = os.path.join(model_dir, import_folder.WARM_START_FILE)
    params_path = os.path.join(model_dir, "params.yaml")
    if os.path.exists(params_path):
        params = _read_yaml(params_path)
        model = _model_config_from(params, params_path)
        prefix = sentence_encoder.resolve_checkpoint(checkpoint or model_dir)
        train_data = (params.get("task") or {}).get("train_data") or {}
        seq_length = train_data.get("seq_length") or DEFAULT_SEQ_LENGTH
        description = {"kind": "training_run", "model_dir": _base_name(model_dir),
                       "checkpoint": os.path.basename(prefix)}
        run_sp_model = os.path.join(model_dir, tokenization.SP_MODEL_FILE)
        if (model.tokenizer.type == "sentencepiece" and os.path.exists(run_sp_model)
                and not os.path.exists(model.tokenizer.sp_model_file)):
            model.tokenizer.sp_model_file = run_sp_model  # the run directory was moved
    elif os.path.exists(warm_start):
        params = configs.resolve_relative(_read_yaml(warm_start), model_dir)
        model = _model_config_from(params, warm_start)
        source = import_folder.check(model_dir, params)
        prefix = sentence_encoder.resolve_checkpoint(
            checkpoint or params["task"].get("init_checkpoint", ""))
        seq_length = source.get("max_seq_length") or DEFAULT_SEQ_LENGTH
        # `hf_dir`: the key of folders converted before other families could be imported.
        description = {"kind": "converted", "family": source.get("family", "hugging_face"),
                       "hf_dir": _base_name(source.get("source_dir") or source.get("hf_dir", "")),
                       "checkpoint": os.path.basename(prefix)}
    else:
        raise FileNotFoundError(
            f"{model_dir}: neither params.yaml (training run) nor "
            f"{import_folder.WARM_START_FILE} (converted weights) found")
    return ExportSource(model=model, checkpoint=prefix, seq_length=int(seq_length),
                        description=description)


def export_options(seq_length: Optional[int], tflite: bool, classic_wordpiece: bool,
                   encoder_key: str) -> dict:
    """The export's flags as its metadata records them (`options`)."""
    return {"seq_length": seq_length, "tflite": bool(tflite),
            "classic_wordpiece": bool(classic_wordpiece), "encoder_key": encoder_key}


def up_to_date(export_dir: str, model_dir: str, checkpoint: Optional[str],
               options: dict) -> Optional[str]:
    """The checkpoint's name when `export_dir` is a whole export of the checkpoint that
    `model_dir` (and `checkpoint`) name now, made by this cmlm_tf version with the same
    `options` (the export's flags); else None. Reads and hashes the checkpoint."""
    import cmlm_tf

    try:
        with open(os.path.join(export_dir, METADATA_FILE), encoding="utf-8") as f:
            meta = json.load(f)
        source = resolve_source(model_dir=model_dir, checkpoint=checkpoint)
    except (OSError, ValueError):
        return None  # the export itself says why, if it fails too
    same = (isinstance(meta, dict) and meta.get("options") == options
            and meta.get("format_version") == FORMAT_VERSION
            and meta.get("cmlm_tf_version") == cmlm_tf.__version__
            and meta.get("encoder") == source.model.encoder.as_dict()
            and all(os.path.isfile(os.path.join(export_dir, name, "saved_model.pb"))
                    for name in SAVED_MODELS)
            and (meta.get("source") or {}).get("checkpoint_sha256")
            == checkpoint_sha256(source.checkpoint))
    return os.path.basename(source.checkpoint) if same else None


def check_vocabulary_fits(model, vocab_size: int) -> None:
    """Refuses a tokenizer that does not belong to the encoder: a WordPiece vocabulary with
    another number of tokens than the embedding table has rows (a file cut short, or another
    model's), or a SentencePiece model with more pieces than rows."""
    rows = model.encoder.vocab_size
    wordpiece = model.tokenizer.type == "wordpiece"
    if vocab_size == rows or (not wordpiece and vocab_size < rows):
        return
    path = model.tokenizer.vocab_file if wordpiece else model.tokenizer.sp_model_file
    raise ValueError(f"{path}: {vocab_size} tokens, but the encoder's embedding table has "
                     f"{rows} rows (task.model.encoder.vocab_size): the tokenizer does not "
                     "belong to this checkpoint")


def _base_name(path: str) -> str:
    """The last component of a path: model cards and metadata record no local paths."""
    return os.path.basename(os.path.normpath(path)) if path else ""


def _checkpoint_files(prefix: str) -> list:
    """The index and data files of the checkpoint at `prefix`, sorted (none: [])."""
    import tensorflow as tf

    if run_dir.is_local(prefix):
        try:
            return run_dir._checkpoint_files(os.path.abspath(prefix))
        except FileNotFoundError:
            return []
    return sorted(tf.io.gfile.glob(prefix + ".index") + tf.io.gfile.glob(prefix + ".data-*"))


def checkpoint_sha256(prefix: str) -> str:
    """SHA-256 over a checkpoint's index and data files, in name order.

    Raises FileNotFoundError when the checkpoint has no files: the hash of nothing would
    name no checkpoint.
    """
    import hashlib

    import tensorflow as tf

    files = _checkpoint_files(prefix)
    if not files:
        raise FileNotFoundError(f"{prefix}: no checkpoint files to hash ({prefix}.index, "
                                f"{prefix}.data-*)")
    digest = hashlib.sha256()
    for path in files:
        digest.update(os.path.basename(path).encode("utf-8"))
        with tf.io.gfile.GFile(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def snapshot_checkpoint(prefix: str, folder: str) -> str:
    """Hard links (or, across filesystems, copies) the checkpoint's files into `folder` and
    returns the snapshot's prefix: a trainer that prunes `prefix` meanwhile cannot take the
    files the export reads and hashes.

    Raises FileNotFoundError when the index or a data shard is gone (pruned).
    """
    import tensorflow as tf

    if "://" not in prefix:
        prefix = os.path.abspath(prefix)
    files = _checkpoint_files(prefix)
    shards = [path for path in files if ".data-" in os.path.basename(path)]
    # Data files are named `<prefix>.data-00000-of-00002`: every shard must be there.
    expected = {int(path.rsplit("-of-", 1)[-1]) for path in shards if "-of-" in path}
    if prefix + ".index" not in files or not shards or (expected
                                                          and expected != {len(shards)}):
        raise FileNotFoundError(f"{prefix}: the checkpoint's files are gone or incomplete")
    tf.io.gfile.makedirs(folder)
    for path in files:
        target = os.path.join(folder, os.path.basename(path))
        try:
            os.link(path, target)
        except OSError as error:
            if error.errno == errno.ENOENT:
                raise FileNotFoundError(f"{path}: removed while the export read it") from None
            with disk.reporting_disk_full(target):  # another filesystem (or a bucket)
                try:
                    tf.io.gfile.copy(path, target, overwrite=True)
                except tf.errors.NotFoundError:
                    raise FileNotFoundError(
                        f"{path}: removed while the export read it") from None
    return os.path.join(folder, os.path.basename(prefix))


def _snapshot_source(source: ExportSource, folder: str, again) -> Tuple[ExportSource, str]:
    """`source` with its checkpoint snapshotted into `folder`, and the checkpoint's own
    prefix; when the checkpoint was pruned first, the latest is resolved (`again()`) and
    snapshotted once more, else one error."""
    for attempt in range(2):
        try:
            original = source.checkpoint
            source.checkpoint = snapshot_checkpoint(original, folder)
            return source, original
        except FileNotFoundError:
            shutil.rmtree(folder, ignore_errors=True)
            if attempt or again is None:
                raise ValueError(
                    f"{source.checkpoint}: the checkpoint's files were removed while the export "
                    "read them (a trainer pruning old checkpoints?); export again, or pass "
                    "--checkpoint naming one the trainer keeps") from None
            source = again()
    raise AssertionError("unreachable")


def check_export_dir(export_dir: str, **sources: Optional[str]) -> None:
    """Refuses an export folder that is, holds or sits inside a source folder (`--model_dir`,
    `--hf_dir`, the `--checkpoint`'s folder): `--overwrite` would replace it."""
    target = os.path.realpath(export_dir)
    for flag, path in sources.items():
        if not path or "://" in path:
            continue
        if flag == "checkpoint" and not os.path.isdir(path):
            path = os.path.dirname(path) or "."  # a prefix: its folder
        source = os.path.realpath(path)
        if target == source:
            relation = "is"
        elif target.startswith(os.path.join(source, "")):
            relation = "is inside"
        elif source.startswith(os.path.join(target, "")):
            relation = "holds"
        else:
            continue
        raise ValueError(f"--export_dir {export_dir} {relation} the --{flag} folder {path}; "
                         "the export would replace it: write the export to a folder of its own")


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


_PROBE_TEXTS = ["A man is playing a guitar.", "", "Un hombre toca la guitarra en la calle.",
                "hello world " * 40]


def check_forward(encoder, module) -> float:
    """Largest |forward - encoder| pooled difference on probe texts, relative to the
    encoder's largest value; raises if above `FORWARD_TOLERANCE`."""
    import numpy as np
    import tensorflow as tf

    tokens = module.tokenize(tf.constant(_PROBE_TEXTS))
    expected = encoder(tokens, training=False)["pooled_output"].numpy()
    actual = module.pooled_float32(**tokens).numpy()
    error = float(np.abs(actual - expected).max() / max(np.abs(expected).max(), 1e-6))
    if not error <= FORWARD_TOLERANCE:
        raise RuntimeError(f"the inference forward differs from the encoder by {error:.2e} "
                           f"(relative; at most {FORWARD_TOLERANCE} allowed): this encoder "
                           "layout is not one cmlm_tf.export.serving_forward reads")
    return error


def _model_card(meta: dict) -> str:
    enc = meta["encoder"]
    src = meta["source"]
    if src.get("kind") == "training_run":
        origin = f"training run `{src['model_dir']}`, checkpoint `{src['checkpoint']}`"
    elif src.get("hf_dir"):
        from cmlm_tf import import_model

        family = import_model.FAMILIES.get(src.get("family", src.get("kind")), "imported")
        origin = f"{family} weights from `{src['hf_dir']}` (converted)"
    else:
        origin = f"checkpoint `{src.get('checkpoint', '')}`"
    if src.get("checkpoint_sha256"):
        origin += f" (SHA-256 `{src['checkpoint_sha256'][:16]}…`)"
    lower_cased = "lower-cased" if meta["tokenizer"]["type"] == "sentencepiece" \
        else "lower-cased, accents stripped"
    casing = f"uncased ({lower_cased})" if meta["tokenizer"]["lower_case"] else "cased"
    implementation = meta["tokenizer"]["implementation"]
    ends = "`<s>` and `</s>`" if meta["tokenizer"]["type"] == "xlmr_sentencepiece" \
        else "`[CLS]` and `[SEP]`"
    ops = meta["custom_ops"]

    def op_list(name):
        return "TF-Text: " + ", ".join(f"`{op}`" for op in ops[name]) if ops[name] else "none"

    tflite = ""
    if meta.get("tflite"):
        tflite = "".join(
            f"| `tflite/{entry['file']}` | TFLite ({entry['quantization']}): "
            f"{entry['inputs']} -> `embeddings` | {', '.join(entry['custom_ops']) or 'none'} |\n"
            for entry in meta["tflite"]["models"])
    return f"""# Sentence encoder exported by cmlm_tf

- Source: {origin}
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

## Contents and the ops each model needs

| path | what | custom ops (`import tensorflow_text` first) |
| --- | --- | --- |
| `preprocessor/` | TF Hub text preprocessor: strings -> `input_word_ids`, `input_mask`, \
`input_type_ids`; `.tokenize`, `.bert_pack_inputs` | {op_list("preprocessor")} |
| `encoder/` | TF Hub text encoder (trainable): dict -> `pooled_output`, `default`, \
`sequence_output`, `encoder_outputs` | {op_list("encoder")} |
| `serving/1/` | TF Serving: `serving_default` (`sentences` -> `embeddings`), \
`from_token_ids` (`input_word_ids`, `input_mask`, `input_type_ids` -> `embeddings`) | \
{op_list("serving")} |
{tflite}
## Load it

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
curl -d '{{"signature_name": "serving_default", "instances": [{{"sentences": "Hello world."}}]}}' \\
    http://localhost:8501/v1/models/encoder:predict
```
"""


def export(export_dir: str, model_dir: Optional[str] = None, checkpoint: Optional[str] = None,
           encoder_key: str = "encoder", hf_dir: Optional[str] = None,
           seq_length: Optional[int] = None, overwrite: bool = False,
           tflite: bool = False, classic_wordpiece: bool = False, stage=None) -> str:
    """Writes the SavedModels, the model card and the metadata; returns `export_dir`.

    `stage`: the `progress.Stages` that reports the export's progress (the command's, started
    before TensorFlow is imported); a new one by default.

    With `tflite`, also `OUT/tflite/` (`cmlm_tf.export.tflite.write_tflite`). With
    `classic_wordpiece`, WordPiece `serving/1` tokenizes with the classic TF-Text ops, which
    TF Serving releases 2.2-2.11 link, instead of the fast ones (2.12 and later).
    """
    import tensorflow as tf

    import cmlm_tf
    from cmlm_tf import progress, tokenization
    from cmlm_tf.export import serving, serving_forward
    from cmlm_tf.modeling import sentence_encoder

    export_dir = os.path.abspath(export_dir)
    stage = stage or progress.Stages("export")
    check_export_dir(export_dir, model_dir=model_dir, hf_dir=hf_dir, checkpoint=checkpoint)
    parent = os.path.dirname(export_dir)
    with disk.reporting_disk_full(export_dir):
        os.makedirs(parent, exist_ok=True)
    with run_dir.folder_lock(parent):
        staged_folder.restore_interrupted(export_dir)
    if os.path.exists(export_dir) and not overwrite:
        raise FileExistsError(f"{export_dir}: already exists (pass --overwrite to replace it)")
    with disk.reporting_disk_full(export_dir):
        staging = staged_folder.owned_tempdir(export_dir)
    try:
        work = os.path.join(staging, "_work")

        def find_source():
            return resolve_source(model_dir=model_dir, checkpoint=checkpoint, hf_dir=hf_dir,
                                  work_dir=work)

        # The files are read, hashed and restored from one snapshot: a trainer may prune
        # the checkpoint while the export runs.
        stage("reading the checkpoint")
        source, original = _snapshot_source(
            find_source(), os.path.join(work, "checkpoint"),
            find_source if model_dir and not checkpoint else None)
        checkpoint_hash = checkpoint_sha256(source.checkpoint)
        model = source.model
        seq_length_flag = seq_length
        seq_length = int(seq_length or source.seq_length)
        if not 2 < seq_length <= model.encoder.max_position_embeddings:
            raise ValueError(
                f"--seq_length {seq_length} must be in 3..{model.encoder.max_position_embeddings}"
                " (task.model.encoder.max_position_embeddings)")
        tokenizer = tokenization.build_tokenizer(  # fails early on a bad path
            model.tokenizer, fast_wordpiece=not classic_wordpiece)
        implementation = tokenization.tokenizer_implementation(tokenizer)
        vocab_size = tokenization.special_token_ids(tokenizer)["vocab_size"]
        check_vocabulary_fits(model, vocab_size)
        if implementation["name"] == "wordpiece":
            # The classic tokenizer reads its vocabulary from a file: a neutral copy, so no
            # local path leaks into the models (the fast one holds its vocabulary itself).
            with _writing(export_dir, "vocab.txt"):
                model.tokenizer.vocab_file = tokenization.copy_vocab_aside(
                    model.tokenizer.vocab_file, os.path.join(work, "assets"))
            tokenizer = tokenization.build_tokenizer(model.tokenizer,
                                                     fast_wordpiece=not classic_wordpiece)

        stage("restoring the encoder")
        encoder = sentence_encoder.build_sentence_encoder(model.encoder)
        try:
            sentence_encoder.restore_encoder(encoder, source.checkpoint, encoder_key=encoder_key)
        except ValueError as error:  # name the checkpoint, not its snapshot
            raise ValueError(str(error).replace(source.checkpoint, original)) from None
        core = _build_core_encoder(encoder)
        preprocessor = tokenization.create_preprocessor(model.tokenizer, seq_length)
        stage("saving encoder/ and preprocessor/")
        with _no_compiled_metrics_warning():
            with _writing(export_dir, "encoder"):
                core.save(os.path.join(staging, "encoder"), include_optimizer=False,
                          save_format="tf")
            with _writing(export_dir, "preprocessor"):
                preprocessor.save(os.path.join(staging, "preprocessor"),
                                  include_optimizer=False, save_format="tf")

        module = serving.ServingModule(serving_forward.InferenceForward(encoder), tokenizer,
                                       seq_length)
        forward_error = check_forward(encoder, module)
        stage("saving the serving model serving/1")
        serving_dir = os.path.join(staging, "serving", "1")
        with _writing(export_dir, os.path.join("serving", "1")):
            tf.saved_model.save(module, serving_dir, signatures=module.signatures())

        meta = {
            "format_version": FORMAT_VERSION,
            "cmlm_tf_version": cmlm_tf.__version__,
            "dim": encoder.output_dim,
            "seq_length": seq_length,
            "vocab_size": vocab_size,
            "encoder": model.encoder.as_dict(),
            "tokenizer": {"type": model.tokenizer.type,
                          "lower_case": model.tokenizer.lower_case,
                          "implementation": implementation},
            "source": {**source.description, "checkpoint_sha256": checkpoint_hash},
            "encoder_key": encoder_key,
            "options": export_options(seq_length_flag, tflite, classic_wordpiece, encoder_key),
            "signatures": {name: {"inputs": inputs, "outputs": outputs}
                           for name, (inputs, outputs) in serving.SIGNATURES.items()},
            "precisions": list(module.forward.precisions),
            "forward_max_relative_error": forward_error,
            "custom_ops": {name.split(os.sep)[0]: custom_ops(os.path.join(staging, name))
                           for name in SAVED_MODELS},
            "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"),
        }
        if tflite:
            from cmlm_tf.export import tflite as tflite_lib

            stage("converting to TFLite")
            with _writing(export_dir, "tflite"):
                meta["tflite"] = tflite_lib.write_tflite(module, os.path.join(staging, "tflite"))
        with _writing(export_dir, METADATA_FILE):
            with open(os.path.join(staging, METADATA_FILE), "w", encoding="utf-8") as f:
                json.dump(meta, f, indent=2)
        with _writing(export_dir, "README.md"):
            with open(os.path.join(staging, "README.md"), "w", encoding="utf-8") as f:
                f.write(_model_card(meta))
        shutil.rmtree(work, ignore_errors=True)
        with _writing(export_dir, ""):
            staged_folder.replace_dir(staging, export_dir, overwrite)
        stage.done()
    except BaseException:
        stage.done()
        shutil.rmtree(staging, ignore_errors=True)
        raise
    with run_dir.folder_lock(parent):
        staged_folder.remove_stale(export_dir)
    return export_dir


def _writing(export_dir: str, name: str):
    """Reports a full disk while writing `OUT/name` as one line naming it."""
    return disk.reporting_disk_full(os.path.join(export_dir, name) if name else export_dir)


