"""Turns a cmlm_tf encoder checkpoint into the TF Hub and TF Serving SavedModels.

The library behind `python -m export.export_tfhub` (and `cmlm-tf-export`). Writes,
atomically (to a sibling folder, then renamed):

- `OUT/preprocessor/`: TF Hub text preprocessor (needs `import tensorflow_text`);
- `OUT/encoder/`: TF Hub text encoder, the trainable Keras model, dict in, no TF-Text ops;
- `OUT/serving/1/`: TF Serving model (`cmlm_tf.export.serving.ServingModule`): the
  inference forward built from the encoder, with signatures `serving_default`
  (`sentences` -> `embeddings`) and `from_token_ids`;
- `OUT/serving_bf16/1/` with `bf16=True`, `OUT/serving_int8/1/` with `int8=True`: the same
  model and signatures running the bfloat16 or int8 forward;
- `OUT/tflite/` with `tflite=True` (`cmlm_tf.export.tflite`);
- `OUT/README.md` (model card) and `OUT/cmlm_tf_export.json` (read by `cmlm_tf.load`).

The export never knows which objective trained the encoder: it reads `task.model` and the
checkpoint item `encoder` (or `encoder_key`). Its steps live beside it: what is exported
(`source.py`), the checkpoint held still and hashed (`snapshot.py`), the staging folder and
its swap into OUT (`staging.py`) and the model card (`model_card.py`).
"""

import datetime
import json
import os
import shutil
from typing import Optional

from cmlm_tf.export import snapshot, staging
from cmlm_tf.export import source as source_lib
from cmlm_tf.export.forward_checks import check_forward, check_precision
from cmlm_tf.export_metadata import FORMAT_VERSION, METADATA_FILE, SERVING_FOLDERS

SAVED_MODELS = ("preprocessor", "encoder", os.path.join("serving", "1"))


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


def export_options(seq_length: Optional[int], tflite: bool, classic_wordpiece: bool,
                   encoder_key: str, bf16: bool = False, int8: bool = False, *,
                   sentence_transformers: bool = False, onnx: bool = False) -> dict:
    """The export's flags as its metadata records them (`options`; a format the export
    does not write is left out, so earlier exports compare equal; `onnx` implies the
    sentence-transformers folder)."""
    options = {"seq_length": seq_length, "tflite": bool(tflite),
               "classic_wordpiece": bool(classic_wordpiece), "encoder_key": encoder_key,
               "bf16": bool(bf16), "int8": bool(int8)}
    if sentence_transformers or onnx:
        options["sentence_transformers"] = True
    if onnx:
        options["onnx"] = True
    return options


def precision_folders(bf16: bool, int8: bool) -> dict:
    """precision -> the serving model folder (relative, `/`-separated) an export with these
    flags writes."""
    wanted = {"float32": True, "bfloat16": bf16, "int8": int8}
    return {precision: f"{SERVING_FOLDERS[precision]}/1"
            for precision, on in wanted.items() if on}


def up_to_date(export_dir: str, model_dir: str, checkpoint: Optional[str],
               options: dict) -> Optional[str]:
    """The checkpoint's name when `export_dir` is a whole export of the checkpoint that
    `model_dir` (and `checkpoint`) name now, made by this cmlm_tf version with the same
    `options` (the export's flags); else None. Reads and hashes the checkpoint."""
    import cmlm_tf

    try:
        with open(os.path.join(export_dir, METADATA_FILE), encoding="utf-8") as f:
            meta = json.load(f)
        source = source_lib.resolve_source(model_dir=model_dir, checkpoint=checkpoint)
    except (OSError, ValueError):
        return None  # the export itself says why, if it fails too
    same = (isinstance(meta, dict) and meta.get("options") == options
            and meta.get("format_version") == FORMAT_VERSION
            and meta.get("cmlm_tf_version") == cmlm_tf.__version__
            and meta.get("encoder") == source.model.encoder.as_dict()
            and all(os.path.isfile(os.path.join(export_dir, name, "saved_model.pb"))
                    for name in SAVED_MODELS + tuple(precision_folders(
                       options["bf16"], options["int8"]).values()))
            and (meta.get("source") or {}).get("checkpoint_sha256")
            == snapshot.checkpoint_sha256(source.checkpoint))
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


def _save_precision_models(encoder, reference, folders: dict, staged: str, export_dir: str,
                           stage) -> dict:
    """Writes the serving model of each precision in `folders` but float32 (`serving/1`,
    `reference`, already written); returns the metadata of each: its folder and lowest
    probe cosine to float32."""
    import tensorflow as tf

    from cmlm_tf.export import serving, serving_forward

    written = {}
    for precision, folder in folders.items():
        if precision == "float32":
            continue
        forward = serving_forward.InferenceForward(encoder, precisions=(precision,))
        rows = serving_forward.PRECISION_BUCKET_ROWS.get(precision, reference.bucket_rows)
        module = serving.ServingModule(forward, reference.tokenizer, reference.seq_length,
                                       bucket_rows=rows, precision=precision)
        cosine = check_precision(reference, module)
        stage(f"saving the {precision} serving model {folder}")
        with staging.writing(export_dir, folder):
            tf.saved_model.save(module, os.path.join(staged, *folder.split("/")),
                                signatures=module.signatures())
        written[precision] = {"folder": folder, "bucket_rows": rows,
                              "min_probe_cosine_to_float32": cosine}
    return written


def _read_checkpoint(model_dir: Optional[str], checkpoint: Optional[str],
                     hf_dir: Optional[str], work: str):
    """(source, the checkpoint's own prefix, its SHA-256) with the source's checkpoint
    snapshotted under `work`: the files are read, hashed and restored from one snapshot, as
    a trainer may prune the checkpoint while the export runs."""
    def find_source():
        return source_lib.resolve_source(model_dir=model_dir, checkpoint=checkpoint,
                                         hf_dir=hf_dir, work_dir=work)

    source, original = snapshot.snapshot_source(
        find_source(), os.path.join(work, "checkpoint"),
        find_source if model_dir and not checkpoint else None)
    return source, original, snapshot.checkpoint_sha256(source.checkpoint)


def _checked_seq_length(seq_length: Optional[int], source: source_lib.ExportSource) -> int:
    """`--seq_length`, else the source's, within the encoder's position embeddings."""
    seq_length = int(seq_length or source.seq_length)
    limit = source.model.encoder.max_position_embeddings
    if not 2 < seq_length <= limit:
        raise ValueError(f"--seq_length {seq_length} must be in 3..{limit}"
                         " (task.model.encoder.max_position_embeddings)")
    return seq_length


def _build_tokenizer(model, classic_wordpiece: bool, export_dir: str, work: str):
    """(tokenizer, its implementation, vocab_size), checked against the encoder's vocabulary;
    a classic WordPiece tokenizer reads a neutral copy of the vocabulary under `work`."""
    from cmlm_tf import tokenization

    tokenizer = tokenization.build_tokenizer(  # fails early on a bad path
        model.tokenizer, fast_wordpiece=not classic_wordpiece)
    implementation = tokenization.tokenizer_implementation(tokenizer)
    vocab_size = tokenization.special_token_ids(tokenizer)["vocab_size"]
    check_vocabulary_fits(model, vocab_size)
    if implementation["name"] == "wordpiece":
        # The classic tokenizer reads its vocabulary from a file: a neutral copy, so no
        # local path leaks into the models (the fast one holds its vocabulary itself).
        with staging.writing(export_dir, "vocab.txt"):
            model.tokenizer.vocab_file = tokenization.copy_vocab_aside(
                model.tokenizer.vocab_file, os.path.join(work, "assets"))
        tokenizer = tokenization.build_tokenizer(model.tokenizer,
                                                 fast_wordpiece=not classic_wordpiece)
    return tokenizer, implementation, vocab_size


def _restore_encoder(source: source_lib.ExportSource, original: str, encoder_key: str):
    """The sentence encoder with the snapshot's weights; errors name the checkpoint."""
    from cmlm_tf.modeling import sentence_encoder

    encoder = sentence_encoder.build_sentence_encoder(source.model.encoder)
    try:
        sentence_encoder.restore_encoder(encoder, source.checkpoint, encoder_key=encoder_key)
    except ValueError as error:  # name the checkpoint, not its snapshot
        raise ValueError(str(error).replace(source.checkpoint, original)) from None
    return encoder


def _save_hub_models(encoder, model, seq_length: int, staged: str, export_dir: str,
                     stage) -> None:
    """Writes `encoder/` and `preprocessor/` (the TF Hub pair) into the staging folder."""
    from cmlm_tf import packing

    core = _build_core_encoder(encoder)
    preprocessor = packing.create_preprocessor(model.tokenizer, seq_length)
    stage("saving encoder/ and preprocessor/")
    with _no_compiled_metrics_warning():
        with staging.writing(export_dir, "encoder"):
            core.save(os.path.join(staged, "encoder"), include_optimizer=False,
                      save_format="tf")
        with staging.writing(export_dir, "preprocessor"):
            preprocessor.save(os.path.join(staged, "preprocessor"),
                              include_optimizer=False, save_format="tf")


def _metadata(source: source_lib.ExportSource, checkpoint_hash: str, encoder, module,
              tokenizer_info: dict, options: dict, forward_error: float, staged: str) -> dict:
    """The export's `cmlm_tf_export.json`; `tokenizer_info`: `seq_length`, `vocab_size`
    and `implementation`."""
    import cmlm_tf
    from cmlm_tf.export import serving

    model = source.model
    return {
        "format_version": FORMAT_VERSION,
        "cmlm_tf_version": cmlm_tf.__version__,
        "dim": encoder.output_dim,
        "seq_length": tokenizer_info["seq_length"],
        "vocab_size": tokenizer_info["vocab_size"],
        "encoder": model.encoder.as_dict(),
        "tokenizer": {"type": model.tokenizer.type,
                      "lower_case": model.tokenizer.lower_case,
                      "implementation": tokenizer_info["implementation"]},
        "source": {**source.description, "checkpoint_sha256": checkpoint_hash},
        "encoder_key": options["encoder_key"],
        "options": options,
        "signatures": {name: {"inputs": inputs, "outputs": outputs}
                       for name, (inputs, outputs) in serving.SIGNATURES.items()},
        "precisions": list(module.forward.precisions),
        "forward_max_relative_error": forward_error,
        "custom_ops": {name.split(os.sep)[0]: custom_ops(os.path.join(staged, name))
                       for name in SAVED_MODELS},  # the other precisions' are serving/1's
        "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"),
    }


def _write_metadata_and_card(meta: dict, staged: str, export_dir: str) -> None:
    """Writes `cmlm_tf_export.json` and the model card `README.md`."""
    from cmlm_tf.export import model_card

    with staging.writing(export_dir, METADATA_FILE):
        with open(os.path.join(staged, METADATA_FILE), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2)
    with staging.writing(export_dir, "README.md"):
        with open(os.path.join(staged, "README.md"), "w", encoding="utf-8") as f:
            f.write(model_card.model_card(meta))


def _write_sentence_transformers(encoder, model, meta: dict, seq_length: int, onnx: bool,
                                 folders, stage) -> dict:
    """Writes `OUT/sentence_transformers/` (with `onnx`, its ONNX models too) into the staged
    export; `folders`: (the staged folder, `OUT`). Returns its metadata entry."""
    from cmlm_tf.export import model_card
    from cmlm_tf.export import sentence_transformers_folder as st_folder

    staged, export_dir = folders
    stage("writing the sentence-transformers folder" + (" and its ONNX models" if onnx else ""))
    with staging.writing(export_dir, st_folder.FOLDER):
        return st_folder.write_folder(os.path.join(staged, st_folder.FOLDER), encoder, model,
                                      seq_length, card_lines=model_card.description(meta),
                                      dim=encoder.output_dim, onnx=onnx)


def export(export_dir: str, model_dir: Optional[str] = None, checkpoint: Optional[str] = None,
           encoder_key: str = "encoder", hf_dir: Optional[str] = None,
           seq_length: Optional[int] = None, overwrite: bool = False,
           tflite: bool = False, classic_wordpiece: bool = False, bf16: bool = False,
           int8: bool = False, stage=None, sentence_transformers: bool = False,
           onnx: bool = False) -> str:
    """Writes the SavedModels, the model card and the metadata; returns `export_dir`.

    `stage`: the `progress.Stages` that reports the export's progress (the command's, started
    before TensorFlow is imported); a new one by default.

    With `tflite`, also `OUT/tflite/` (`cmlm_tf.export.tflite.write_tflite`). With
    `classic_wordpiece`, WordPiece `serving/1` tokenizes with the classic TF-Text ops, which
    TF Serving releases 2.2-2.11 link, instead of the fast ones (2.12 and later). With
    `bf16` / `int8`, also `OUT/serving_bf16/1/` / `OUT/serving_int8/1/`. With
    `sentence_transformers` (or `onnx`: with its ONNX models), also `OUT/sentence_transformers/`
    (`sentence_transformers_folder`, `onnx_model`); an encoder that layout cannot hold, or
    `onnx` without the onnx package, is refused before anything is written.
    """
    import tensorflow as tf

    from cmlm_tf import progress
    from cmlm_tf.export import onnx_model, serving, serving_forward
    from cmlm_tf.export import sentence_transformers_folder as st_folder

    if onnx:
        onnx_model.require_onnx()
    export_dir = os.path.abspath(export_dir)
    stage = stage or progress.Stages("export")
    staging.check_export_dir(export_dir, model_dir=model_dir, hf_dir=hf_dir,
                             checkpoint=checkpoint)
    staged = staging.start(export_dir, overwrite)
    try:
        work = os.path.join(staged, staging.WORK_DIR)
        stage("reading the checkpoint")
        source, original, checkpoint_hash = _read_checkpoint(model_dir, checkpoint, hf_dir,
                                                             work)
        options = export_options(seq_length, tflite, classic_wordpiece, encoder_key, bf16,
                                 int8, sentence_transformers=sentence_transformers, onnx=onnx)
        if options.get("sentence_transformers"):
            st_folder.check_representable(source.model, "--onnx" if onnx else None)
        seq_length = _checked_seq_length(seq_length, source)
        tokenizer, implementation, vocab_size = _build_tokenizer(
            source.model, classic_wordpiece, export_dir, work)

        stage("restoring the encoder")
        encoder = _restore_encoder(source, original, encoder_key)
        _save_hub_models(encoder, source.model, seq_length, staged, export_dir, stage)
        module = serving.ServingModule(serving_forward.InferenceForward(encoder), tokenizer,
                                       seq_length)
        forward_error = check_forward(encoder, module)
        stage("saving the serving model serving/1")
        with staging.writing(export_dir, os.path.join("serving", "1")):
            tf.saved_model.save(module, os.path.join(staged, "serving", "1"),
                                signatures=module.signatures())

        meta = _metadata(source, checkpoint_hash, encoder, module,
                         {"seq_length": seq_length, "vocab_size": vocab_size,
                          "implementation": implementation}, options, forward_error, staged)
        meta["serving_models"] = {"float32": {"folder": "serving/1"}, **_save_precision_models(
            encoder, module, precision_folders(bf16, int8), staged, export_dir, stage)}
        if tflite:
            from cmlm_tf.export import tflite as tflite_lib

            stage("converting to TFLite")
            with staging.writing(export_dir, "tflite"):
                meta["tflite"] = tflite_lib.write_tflite(module, os.path.join(staged, "tflite"))
        if options.get("sentence_transformers"):
            meta["sentence_transformers"] = _write_sentence_transformers(
                encoder, source.model, meta, seq_length, onnx, (staged, export_dir), stage)
        _write_metadata_and_card(meta, staged, export_dir)
        staging.publish(staged, export_dir, overwrite)
        stage.done()
    except BaseException:
        stage.done()
        shutil.rmtree(staged, ignore_errors=True)
        raise
    staging.remove_stale(export_dir)
    return export_dir
