"""The folder an import writes (`cmlm_tf.convert_hf_bert`, `cmlm_tf.import_model`), and its
reader's checks.

    OUT/encoder.index, OUT/encoder.data-*   tf.train.Checkpoint(encoder=SentenceEncoder)
    OUT/vocab.txt or sentencepiece.bpe.model
    OUT/warm_start.yaml                     task.model and task.init_checkpoint
    OUT/source.json                         where the weights came from, max_seq_length

The folder is self-contained: the paths in `warm_start.yaml` are relative to the folder
(`config_files.resolve_relative` reads them so), so it can be moved or copied. It is
published whole (`cmlm_tf.files.staged_folder`): written into a staging sibling and renamed into
place as the last step, never changed in place, and an existing OUT is replaced only with
`overwrite`. A reader (`check`) finds every file there and the vocabulary as long as the
checkpoint's embedding table, or refuses in one line naming the file.
"""

import json
import os
import shutil
from typing import Optional

import tensorflow as tf
import yaml

from cmlm_tf import config_files, configs
from cmlm_tf.files import disk, locks, output_folders, staged_folder
from cmlm_tf.modeling import sentence_encoder

WARM_START_FILE = "warm_start.yaml"
SOURCE_FILE = "source.json"
CHECKPOINT_NAME = "encoder"
VOCAB_FILE = "vocab.txt"
SP_MODEL_FILE = "sentencepiece.bpe.model"
_EMBEDDINGS = "/bert/_embedding_layer/embeddings/"


class ImportFolderError(ValueError):
    """An import folder that is incomplete or inconsistent; the message names the file."""


def check_output(output_dir: str, *, overwrite: bool) -> str:
    """The absolute `output_dir` once it may be written: it does not exist, or `overwrite`
    is set and it is an import folder (or empty; `output_folders.check_output`). Restores
    or removes, with a warning, what an interrupted import left beside it."""
    output_dir = os.path.abspath(output_dir)
    parent = os.path.dirname(output_dir)
    os.makedirs(parent, exist_ok=True)
    with locks.folder_lock(parent):
        staged_folder.remove_stale(output_dir, "import")
    output_folders.check_output(output_dir, "--output_dir", marker=WARM_START_FILE,
                                what="an import folder", overwrite=overwrite)
    return output_dir


def write(encoder, meta: dict, tokenizer, output_dir: str, *, source: dict,
          overwrite: bool = False) -> str:
    """Writes an imported `encoder` as the folder `output_dir`, whole or not at all.

    Args:
        encoder: the SentenceEncoder with its weights.
        meta: `model_import.hf_folder.read_hf_metadata`'s fields (`encoder`, `tokenizer_type`,
            `lower_case`, `max_seq_length`).
        tokenizer: the WordPiece vocabulary as a list, or the path of XLM-R's SentencePiece
            model.
        output_dir: the folder to publish.
        source: what `source.json` records besides `max_seq_length`.
        overwrite: replace an existing import folder.

    Returns:
        The path of `warm_start.yaml` in the published folder.
    """
    output_dir = check_output(output_dir, overwrite=overwrite)
    with disk.reporting_disk_full(output_dir):
        staging = staged_folder.owned_tempdir(output_dir)
    try:
        with disk.reporting_disk_full(output_dir):
            _write_files(staging, encoder, meta, tokenizer, source=source)
        staged_folder.replace_dir(staging, output_dir, overwrite=overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return os.path.join(output_dir, WARM_START_FILE)


def _write_files(staging: str, encoder, meta: dict, tokenizer, *, source: dict) -> None:
    sentence_encoder.write_encoder_checkpoint(encoder, staging, CHECKPOINT_NAME)
    if meta["tokenizer_type"] == "xlmr_sentencepiece":
        tokenizer_name = SP_MODEL_FILE
        shutil.copyfile(tokenizer, os.path.join(staging, SP_MODEL_FILE))
    else:
        tokenizer_name = VOCAB_FILE
        with open(os.path.join(staging, VOCAB_FILE), "w", encoding="utf-8") as f:
            f.write("".join(token + "\n" for token in tokenizer))
    with open(os.path.join(staging, SOURCE_FILE), "w", encoding="utf-8") as f:
        json.dump({**source, "max_seq_length": meta["max_seq_length"]}, f, indent=2)
    with open(os.path.join(staging, WARM_START_FILE), "w", encoding="utf-8") as f:
        yaml.safe_dump(warm_start_config(meta, CHECKPOINT_NAME, tokenizer_name), f,
                       sort_keys=False)


def warm_start_config(meta: dict, prefix: str, tokenizer_file: str) -> dict:
    """`warm_start.yaml`'s content: the encoder and tokenizer of `meta`, the encoder
    checkpoint `prefix` and the vocabulary or SentencePiece model `tokenizer_file` (names
    relative to the folder)."""
    files = {"sp_model_file" if meta["tokenizer_type"] == "xlmr_sentencepiece"
             else "vocab_file": tokenizer_file}
    model = configs.SentenceModelConfig(
        encoder=configs.EncoderConfig(**meta["encoder"]),
        tokenizer=configs.TokenizerConfig(type=meta["tokenizer_type"],
                                          lower_case=meta["lower_case"], **files))
    return {"task": {"init_checkpoint": prefix, "model": model.as_dict()}}


def check(folder: str, config: Optional[dict] = None) -> dict:
    """Checks the import folder `folder`: its files are there, and its vocabulary has as
    many tokens as the checkpoint's embedding table has rows (a WordPiece vocabulary; a
    SentencePiece model may have fewer). `config` is `warm_start.yaml`'s content, resolved
    (`config_files.resolve_relative`); read here when None. Returns `source.json`'s content.

    Raises:
        ImportFolderError: naming the missing or inconsistent file.
    """
    folder = os.path.abspath(folder)  # resolved paths are then absolute, relative ones too
    warm_start = os.path.join(folder, WARM_START_FILE)
    if config is None:
        try:
            with open(warm_start, encoding="utf-8") as f:
                config = config_files.resolve_relative(yaml.safe_load(f) or {}, folder)
        except (OSError, yaml.YAMLError) as e:
            raise ImportFolderError(f"{warm_start}: cannot read it ({e})") from None
    source_file = os.path.join(folder, SOURCE_FILE)
    try:
        with open(source_file, encoding="utf-8") as f:
            source = json.load(f)
    except FileNotFoundError:
        raise ImportFolderError(f"{source_file}: missing from the import folder (import the "
                                "model again)") from None
    except (OSError, ValueError) as e:
        raise ImportFolderError(f"{source_file}: cannot read it ({e})") from None
    if not isinstance(source, dict):
        raise ImportFolderError(f"{source_file}: expected a JSON object")
    task = config.get("task") if isinstance(config.get("task"), dict) else {}
    prefix = _in_folder(folder, str(task.get("init_checkpoint") or ""))
    if not tf.io.gfile.exists(prefix + ".index"):
        raise ImportFolderError(f"{prefix}.index: the import folder's checkpoint is missing "
                                "(import the model again)")
    try:
        shapes = dict(tf.train.list_variables(prefix))
    except (tf.errors.OpError, ValueError) as e:
        raise ImportFolderError(f"{prefix}: cannot read the checkpoint "
                                f"({str(e).strip().splitlines()[0]})") from None
    rows = next((shape[0] for name, shape in shapes.items()
                 if name.startswith(CHECKPOINT_NAME + "/") and _EMBEDDINGS in name
                 and "OPTIMIZER_SLOT" not in name), None)
    tokenizer = ((task.get("model") or {}).get("tokenizer") or {})
    vocab_file = tokenizer.get("vocab_file")
    if tokenizer.get("type", "wordpiece") == "wordpiece" and vocab_file:
        vocab_file = _in_folder(folder, vocab_file)
        try:
            with open(vocab_file, encoding="utf-8") as f:
                tokens = sum(1 for _ in f)  # a token a line, as the tokenizer reads it
        except OSError as e:
            raise ImportFolderError(f"{vocab_file}: cannot read the import folder's "
                                    f"vocabulary ({e.strerror or e})") from None
        if rows is not None and tokens != rows:
            raise ImportFolderError(
                f"{vocab_file}: {tokens} tokens, but the checkpoint's embedding table has "
                f"{rows} rows: the folder is damaged (import the model again)")
    return source


def _in_folder(folder: str, path: str) -> str:
    """A path of `warm_start.yaml` as the error names it: relative ones within `folder`."""
    if os.path.isabs(path) or "://" in path or os.path.exists(path) or \
            os.path.exists(path + ".index"):
        return path  # absolute, or already resolved (relative to the working directory)
    return os.path.join(folder, path)
