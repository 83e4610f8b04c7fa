"""What an export reads: the model config, checkpoint and seq_length of a training run
(`params.yaml`), of an imported folder (`warm_start.yaml`) or of a Hugging Face folder
converted on the way (`--hf_dir`).

The one place the exporter reaches into `cmlm_tf.model_import.importer` (the conversion of
`--hf_dir` and the family names of the model card).
"""

import dataclasses
import os
import tempfile
from typing import Optional

import yaml

DEFAULT_SEQ_LENGTH = 128


@dataclasses.dataclass
class ExportSource:
    """What to export: the model config, the checkpoint and a description for the card."""

    model: "object"  # configs.SentenceModelConfig
    checkpoint: str
    seq_length: int
    description: dict


def _import_model():
    """The library module that converts imported weights (see the module docstring)."""
    from cmlm_tf.model_import import importer

    return importer


def family_title(family: str) -> str:
    """How the model card names an imported family (`imported` for an unknown one)."""
    return _import_model().FAMILIES.get(family, "imported")


def base_name(path: str) -> str:
    """The last component of a path: model cards and metadata record no local paths."""
    return os.path.basename(os.path.normpath(path)) if path else ""


def _read_yaml(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"{path}: cannot read YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return data


def _model_config_from(params: dict, path: str):
    from cmlm_tf import config_files, configs

    model = (params.get("task") or {}).get("model") or {}
    if "encoder" not in model:
        raise ValueError(f"{path}: has no task.model.encoder")
    config = configs.SentenceModelConfig()
    try:
        config.override({k: model[k] for k in ("encoder", "tokenizer") if k in model},
                        is_strict=True)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: {str(e).splitlines()[0]}") from None
    config_files.resolve_bundled_paths(config)  # `cmlm_tf/...` names the installed package's files
    configs.validate_model_config(config)
    return config


def _training_run(model_dir: str, params_path: str, checkpoint: Optional[str]) -> ExportSource:
    """The source of a training run's folder (`params.yaml`)."""
    from cmlm_tf.modeling import sentence_encoder
    from cmlm_tf.text import tokenization

    params = _read_yaml(params_path)
    model = _model_config_from(params, params_path)
    prefix = sentence_encoder.resolve_checkpoint(checkpoint or model_dir)
    train_data = (params.get("task") or {}).get("train_data") or {}
    seq_length = train_data.get("seq_length") or DEFAULT_SEQ_LENGTH
    description = {"kind": "training_run", "model_dir": base_name(model_dir),
                   "checkpoint": os.path.basename(prefix)}
    run_sp_model = os.path.join(model_dir, tokenization.SP_MODEL_FILE)
    if (model.tokenizer.type == "sentencepiece" and os.path.exists(run_sp_model)
            and not os.path.exists(model.tokenizer.sp_model_file)):
        model.tokenizer.sp_model_file = run_sp_model  # the run directory was moved
    return ExportSource(model=model, checkpoint=prefix, seq_length=int(seq_length),
                        description=description)


def _imported_folder(model_dir: str, warm_start: str, checkpoint: Optional[str]
                     ) -> ExportSource:
    """The source of a folder `convert_hf_bert` or `import_model` wrote (`warm_start.yaml`)."""
    from cmlm_tf import config_files
    from cmlm_tf.model_import import import_folder
    from cmlm_tf.modeling import sentence_encoder

    params = config_files.resolve_relative(_read_yaml(warm_start), model_dir)
    model = _model_config_from(params, warm_start)
    source = import_folder.check(model_dir, params)
    prefix = sentence_encoder.resolve_checkpoint(
        checkpoint or params["task"].get("init_checkpoint", ""))
    seq_length = source.get("max_seq_length") or DEFAULT_SEQ_LENGTH
    # `hf_dir`: the key of folders converted before other families could be imported.
    description = {"kind": "converted", "family": source.get("family", "hugging_face"),
                   "hf_dir": base_name(source.get("source_dir") or source.get("hf_dir", "")),
                   "checkpoint": os.path.basename(prefix)}
    return ExportSource(model=model, checkpoint=prefix, seq_length=int(seq_length),
                        description=description)


def resolve_source(model_dir: Optional[str] = None, checkpoint: Optional[str] = None,
                   hf_dir: Optional[str] = None, work_dir: Optional[str] = None
                   ) -> ExportSource:
    """Finds the config, checkpoint and default seq_length of what is to be exported."""
    from cmlm_tf.model_import import import_folder

    if bool(model_dir) == bool(hf_dir):
        raise ValueError("pass exactly one of --model_dir and --hf_dir")
    if hf_dir:
        converted = os.path.join(work_dir or tempfile.mkdtemp(), "converted")
        _import_model().convert(hf_dir, converted)
        source = resolve_source(model_dir=converted, checkpoint=checkpoint)
        source.description = {"kind": source.description["family"],
                              "hf_dir": base_name(hf_dir)}
        return source
    if not os.path.isdir(model_dir):
        raise FileNotFoundError(f"{model_dir}: model directory not found")
    warm_start = os.path.join(model_dir, import_folder.WARM_START_FILE)
    params_path = os.path.join(model_dir, "params.yaml")
    if os.path.exists(params_path):
        return _training_run(model_dir, params_path, checkpoint)
    if os.path.exists(warm_start):
        return _imported_folder(model_dir, warm_start, checkpoint)
    raise FileNotFoundError(
        f"{model_dir}: neither params.yaml (training run) nor "
        f"{import_folder.WARM_START_FILE} (converted weights) found")
