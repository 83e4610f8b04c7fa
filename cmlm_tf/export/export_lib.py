"""Turns a cmlm_tf encoder checkpoint into the TF Hub and TF Serving SavedModels, and into
the other formats asked for.

The library behind `python -m cmlm_tf.export` (and `python -m export.export_tfhub`). Writes,
atomically (to a sibling folder, then renamed):

- what each chosen format writes (`cmlm_tf.export.formats`, one module each): always the
  TF Hub pair `OUT/preprocessor/` and `OUT/encoder/` and the TF Serving model
  `OUT/serving/1/` (`formats/tf_hub.py`); with `bf16=True` / `int8=True`,
  `OUT/serving_bf16/1/` / `OUT/serving_int8/1/`; with `tflite=True`, `OUT/tflite/`; with
  `sentence_transformers=True`, `onnx=True` or `keras_hub=True`,
  `OUT/sentence_transformers/` (with its ONNX models) and `OUT/keras_hub/`;
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

import cmlm_tf
from cmlm_tf import progress
from cmlm_tf.export import formats, model_card, snapshot, staging
from cmlm_tf.export import source as source_lib
from cmlm_tf.export.export_metadata import FORMAT_VERSION, METADATA_FILE
from cmlm_tf.export.formats import tf_hub


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


def export_options(*, seq_length: Optional[int] = None, classic_wordpiece: bool = False,
                   encoder_key: str = "encoder", **flags: bool) -> dict:
    """The export's flags as its metadata records them (`options`): the formats' part from
    `formats.options` (a format of a later version is left out when off, so earlier exports
    compare equal; one a format implies is on with it)."""
    return {"seq_length": seq_length, "classic_wordpiece": bool(classic_wordpiece),
            "encoder_key": encoder_key, **formats.options(flags)}


def up_to_date(export_dir: str, model_dir: str, checkpoint: Optional[str],
               options: dict) -> Optional[str]:
    """The checkpoint's name when `export_dir` is a whole export of the checkpoint that
    `model_dir` (and `checkpoint`) name now, made by this cmlm_tf version with the same
    `options` (the export's flags); else None. Reads and hashes the checkpoint."""
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
            and all(os.path.exists(os.path.join(export_dir, *path.split("/")))
                    for path in formats.outputs(options))
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


def _build_tokenizer(model, *, classic_wordpiece: bool, export_dir: str, work: str):
    """(tokenizer, its implementation, vocab_size), checked against the encoder's vocabulary;
    a classic WordPiece tokenizer reads a neutral copy of the vocabulary under `work`."""
    from cmlm_tf.text import tokenization

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


def _metadata(source: source_lib.ExportSource, checkpoint_hash: str, encoder, module,
              *, tokenizer_info: dict, options: dict, forward_error: float, staged: str) -> dict:
    """The export's `cmlm_tf_export.json`; `tokenizer_info`: `seq_length`, `vocab_size`
    and `implementation`."""
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
        "custom_ops": {name.split("/")[0]: custom_ops(os.path.join(staged, *name.split("/")))
                       for name in tf_hub.SAVED_MODELS},  # the other precisions': serving's
        "exported_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"),
    }


def _write_metadata_and_card(meta: dict, staged: str, export_dir: str) -> None:
    """Writes `cmlm_tf_export.json` and the model card `README.md`."""
    with staging.writing(export_dir, METADATA_FILE):
        with open(os.path.join(staged, METADATA_FILE), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2)
    with staging.writing(export_dir, "README.md"):
        with open(os.path.join(staged, "README.md"), "w", encoding="utf-8") as f:
            f.write(model_card.model_card(meta))




def _write_formats(chosen, context: formats.WriteContext, source, checkpoint_hash: str,
                   *, tokenizer_info: dict, options: dict) -> dict:
    """Runs the writers of the `chosen` formats; returns the export's metadata. The TF Hub
    and TF Serving format comes first: the metadata describes its models, and every later
    writer adds its entry to it."""
    first, *rest = chosen
    first.write(context)
    context.meta = _metadata(source, checkpoint_hash, context.encoder, context.module,
                             tokenizer_info=tokenizer_info, options=options,
                             forward_error=context.forward_error, staged=context.staged)
    context.meta["serving_models"] = {"float32": {"folder": "serving/1"}}
    context.card_description = model_card.description(context.meta)
    for export_format in rest:
        export_format.write(context)
    return context.meta


def export(export_dir: str, *, model_dir: Optional[str] = None,
           checkpoint: Optional[str] = None, encoder_key: str = "encoder",
           hf_dir: Optional[str] = None, seq_length: Optional[int] = None,
           overwrite: bool = False, classic_wordpiece: bool = False, stage=None,
           **flags: bool) -> str:
    """Writes the SavedModels, the model card and the metadata; returns `export_dir`.

    `stage`: the `progress.Stages` that reports the export's progress (the command's, started
    before TensorFlow is imported); a new one by default. With `classic_wordpiece`, WordPiece
    `serving/1` tokenizes with the classic TF-Text ops, which TF Serving releases 2.2-2.11
    link, instead of the fast ones (2.12 and later).

    `flags`: the formats to write besides the TF Hub and TF Serving models, by name
    (`cmlm_tf.export.formats`: `tflite`, `bf16`, `int8`, `sentence_transformers`, `onnx`,
    `keras_hub`). A package a format needs that is missing, or a model it cannot hold, is
    refused in one line before anything is written.
    """
    chosen = formats.chosen(flags)
    formats.require(flags)
    export_dir = os.path.abspath(export_dir)
    stage = stage or progress.Stages("export")
    staging.check_export_dir(export_dir, model_dir=model_dir, hf_dir=hf_dir,
                             checkpoint=checkpoint)
    staged = staging.start(export_dir, overwrite=overwrite)
    try:
        work = os.path.join(staged, staging.WORK_DIR)
        stage("reading the checkpoint")
        source, original, checkpoint_hash = _read_checkpoint(model_dir, checkpoint, hf_dir,
                                                             work)
        options = export_options(seq_length=seq_length, classic_wordpiece=classic_wordpiece,
                                 encoder_key=encoder_key, **flags)
        formats.check(flags, source.model)
        seq_length = _checked_seq_length(seq_length, source)
        tokenizer, implementation, vocab_size = _build_tokenizer(
            source.model, classic_wordpiece=classic_wordpiece, export_dir=export_dir, work=work)
        stage("restoring the encoder")
        context = formats.WriteContext(
            encoder=_restore_encoder(source, original, encoder_key), model=source.model,
            tokenizer=tokenizer, seq_length=seq_length, staged=staged,
            export_dir=export_dir, stage=stage)
        meta = _write_formats(chosen, context, source, checkpoint_hash,
                              tokenizer_info={"seq_length": seq_length, "vocab_size": vocab_size,
                               "implementation": implementation}, options=options)
        _write_metadata_and_card(meta, staged, export_dir)
        staging.publish(staged, export_dir, overwrite=overwrite)
        stage.done()
    except BaseException:
        stage.done()
        shutil.rmtree(staged, ignore_errors=True)
        raise
    staging.remove_stale(export_dir)
    return export_dir
