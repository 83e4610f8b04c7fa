"""An export's metadata file (`cmlm_tf_export.json`): its name and format version, reading
it with errors that name the file and the field, checking it against what the SavedModel
computes, and the serving model folder of each precision.

Standard library only: the exporter writes what this module reads, and `cmlm_tf.load`
reads it before TensorFlow starts.
"""

import json
import os

# The precisions an export can serve, and the TF Serving model folder of each (each holds
# version `1/`): `serving/1` always, `serving_bf16/1` and `serving_int8/1` with the export's
# `--bf16` and `--int8`.
PRECISIONS = ("float32", "bfloat16", "int8")
SERVING_FOLDERS = {"float32": "serving", "bfloat16": "serving_bf16", "int8": "serving_int8"}
# The export's metadata file, which `python -m cmlm_tf.export` writes and `load` reads, and
# the version of its format.
METADATA_FILE = "cmlm_tf_export.json"
FORMAT_VERSION = 2
# The export's sentence-transformers folder (`--sentence_transformers`): a Hugging Face folder
# of its own, which the importer reads back as any other.
SENTENCE_TRANSFORMERS_FOLDER = "sentence_transformers"


def read_metadata(export_dir: str) -> dict:
    """The export's `cmlm_tf_export.json`, checked; errors name the file and the field."""
    meta_path = os.path.join(export_dir, METADATA_FILE)
    if not os.path.isdir(export_dir):
        raise FileNotFoundError(f"{export_dir}: export directory not found")
    if not os.path.exists(meta_path):
        raise FileNotFoundError(
            f"{meta_path}: not found; is {export_dir} written by python -m cmlm_tf.export?")
    try:
        with open(meta_path, encoding="utf-8") as f:
            metadata = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{meta_path}: cannot read export metadata ({e})") from None
    if not isinstance(metadata, dict):
        raise ValueError(f"{meta_path}: expected a JSON object, got "
                         f"{type(metadata).__name__}")
    version = metadata.get("format_version")
    if version != FORMAT_VERSION:
        raise ValueError(f"{meta_path}: format_version {version!r}, this cmlm_tf reads "
                         f"{FORMAT_VERSION}; export the model again with this version "
                         "(python -m cmlm_tf.export)")
    return metadata


def serving_model_dir(export_dir: str, metadata: dict, precision: str) -> str:
    """The serving model `precision` runs: its own folder where the export wrote one
    (`serving_bf16/1`, `serving_int8/1`), else `serving/1` (bfloat16 has functions there)."""
    entry = (metadata.get("serving_models") or {}).get(precision) or {}
    if entry.get("folder"):
        return os.path.join(export_dir, *str(entry["folder"]).split("/"))
    if precision == "int8":
        raise ValueError(f"{export_dir}: the export has no int8 model (serving_int8/1); "
                         "export it again with --int8")
    return os.path.join(export_dir, "serving", "1")


def check_metadata(export_dir: str, metadata: dict, described: dict) -> None:
    """Refuses metadata that disagrees with what the SavedModel computes."""
    encoder = metadata.get("encoder") if isinstance(metadata.get("encoder"), dict) else {}
    path = os.path.join(export_dir, "cmlm_tf_export.json")
    top_level = ("dim", "seq_length", "vocab_size")
    for field in top_level + ("num_attention_heads", "pooling", "hidden_activation"):
        if field not in described:  # exports written before the field was described
            continue
        where = field if field in top_level else f"encoder.{field}"
        if field not in (metadata if field in top_level else encoder):
            raise ValueError(f"{path}: {where} is missing; export the model again")
        value = metadata[field] if field in top_level else encoder[field]
        actual = described[field]
        actual = actual.decode("utf-8") if isinstance(actual, bytes) else int(actual)
        if value != actual:
            raise ValueError(f"{path}: {where} is {value!r} but serving/1 computes "
                             f"{actual!r}; the metadata does not belong to this model")
