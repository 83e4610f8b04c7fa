r"""Converts a Hugging Face BERT folder into a cmlm_tf encoder checkpoint.

    python -m cmlm_tf.convert_hf_bert --hf_dir DIR --output_dir OUT

Reads `config.json`, `model.safetensors`, `vocab.txt` and, when present, the
sentence-transformers metadata (`modules.json`, `1_Pooling/config.json`,
`sentence_bert_config.json`, `tokenizer_config.json`). Writes to OUT:

- `encoder.index` / `encoder.data-*`: `tf.train.Checkpoint(encoder=SentenceEncoder)`;
- `vocab.txt`;
- `warm_start.yaml`: sets `task.model.encoder`, `task.model.tokenizer` and
  `task.init_checkpoint` (absolute paths), to pass as the first `--config_file` of any
  experiment;
- `source.json`: where the weights came from and the folder's `max_seq_length`.

Casing comes from `tokenizer_config.json` (`do_lower_case`), never from
`sentence_bert_config.json`, whose `do_lower_case` describes something else.
"""

import json
import os
import re
import shutil
import sys
from typing import Dict, Optional

import numpy as np

SOURCE_FILE = "source.json"
WARM_START_FILE = "warm_start.yaml"
CHECKPOINT_NAME = "encoder"

# Tensors a sentence encoder never uses; anything else unknown is an error.
_IGNORED = (re.compile(r"^embeddings\.position_ids$"), re.compile(r"^pooler\.dense\."))

_HF_ACTIVATIONS = {
    "gelu": "gelu_exact",
    "gelu_python": "gelu_exact",
    "gelu_new": "gelu_approx",
    "gelu_pytorch_tanh": "gelu_approx",
    "gelu_fast": "gelu_approx",
    "relu": "relu",
    "swish": "swish",
    "silu": "swish",
}


def _read_json(path: str, required: bool = False) -> Optional[dict]:
    if not os.path.exists(path):
        if required:
            raise FileNotFoundError(f"{path}: required file not found")
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: cannot read JSON ({e})") from None


def read_hf_metadata(hf_dir: str) -> dict:
    """Reads encoder, tokenizer and sentence-transformers settings from a HF folder."""
    if not os.path.isdir(hf_dir):
        raise FileNotFoundError(f"{hf_dir}: Hugging Face model folder not found")
    config = _read_json(os.path.join(hf_dir, "config.json"), required=True)
    model_type = config.get("model_type", "bert")
    if model_type != "bert":
        raise ValueError(f"{hf_dir}/config.json: model_type {model_type!r} is not BERT")
    act = config.get("hidden_act", "gelu")
    if act not in _HF_ACTIVATIONS:
        raise ValueError(f"{hf_dir}/config.json: unsupported hidden_act {act!r}")
    encoder = {
        "vocab_size": config["vocab_size"],
        "hidden_size": config["hidden_size"],
        "num_layers": config["num_hidden_layers"],
        "num_attention_heads": config["num_attention_heads"],
        "intermediate_size": config["intermediate_size"],
        "hidden_activation": _HF_ACTIVATIONS[act],
        "max_position_embeddings": config.get("max_position_embeddings", 512),
        "type_vocab_size": config.get("type_vocab_size", 2),
        "dropout_rate": config.get("hidden_dropout_prob", 0.1),
        "attention_dropout_rate": config.get("attention_probs_dropout_prob", 0.1),
        "initializer_range": config.get("initializer_range", 0.02),
        "pooling": "cls",
        "projection_size": 0,
        "normalize": False,
    }
    eps = config.get("layer_norm_eps", 1e-12)
    if abs(eps - 1e-12) > 1e-15:
        raise ValueError(
            f"{hf_dir}/config.json: layer_norm_eps {eps} differs from BertEncoderV2's 1e-12")
    pooling = _read_json(os.path.join(hf_dir, "1_Pooling", "config.json"))
    modules = _read_json(os.path.join(hf_dir, "modules.json"))
    if pooling:
        if pooling.get("pooling_mode_mean_tokens"):
            encoder["pooling"] = "mean"
        elif pooling.get("pooling_mode_cls_token"):
            encoder["pooling"] = "cls"
        elif pooling.get("pooling_mode_max_tokens"):
            encoder["pooling"] = "max"
        else:
            raise ValueError(f"{hf_dir}/1_Pooling/config.json: no supported pooling mode")
    if modules:
        encoder["normalize"] = any(
            m.get("type", "").endswith(".Normalize") for m in modules)
        unsupported = [m.get("type") for m in modules if not m.get("type", "").endswith(
            (".Transformer", ".Pooling", ".Normalize"))]
        if unsupported:
            raise ValueError(f"{hf_dir}/modules.json: unsupported modules {unsupported}")
    tokenizer_config = _read_json(os.path.join(hf_dir, "tokenizer_config.json")) or {}
    st_config = _read_json(os.path.join(hf_dir, "sentence_bert_config.json")) or {}
    return {
        "encoder": encoder,
        "lower_case": bool(tokenizer_config.get("do_lower_case", True)),
        "max_seq_length": st_config.get("max_seq_length")
        or tokenizer_config.get("model_max_length"),
    }


def _split_heads(kernel: np.ndarray, num_heads: int) -> np.ndarray:
    # HF Linear [out, in] -> EinsumDense [in, heads, head_dim].
    hidden_in = kernel.shape[1]
    return kernel.T.reshape(hidden_in, num_heads, -1)


def _map_hf_tensors(tensors: Dict[str, np.ndarray], num_layers: int, num_heads: int,
                    source: str) -> Dict[str, np.ndarray]:
    """Returns {BertEncoderV2 weight path: value} for every tensor of the HF encoder."""
    mapped = {}
    unused = []
    for raw_name, value in tensors.items():
        name = raw_name[len("bert."):] if raw_name.startswith("bert.") else raw_name
        if any(p.search(name) for p in _IGNORED):
            continue
        name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace(
            "LayerNorm.beta", "LayerNorm.bias")
        target = None
        if name == "embeddings.word_embeddings.weight":
            target = ("word_embeddings/embeddings", value)
        elif name == "embeddings.position_embeddings.weight":
            target = ("position_embedding/embeddings", value)
        elif name == "embeddings.token_type_embeddings.weight":
            target = ("type_embeddings/embeddings", value)
        elif name == "embeddings.LayerNorm.weight":
            target = ("embeddings/layer_norm/gamma", value)
        elif name == "embeddings.LayerNorm.bias":
            target = ("embeddings/layer_norm/beta", value)
        else:
            match = re.fullmatch(r"encoder\.layer\.(\d+)\.(.+)\.(weight|bias)", name)
            if match and int(match.group(1)) < num_layers:
                layer = f"transformer/layer_{int(match.group(1))}"
                part, kind = match.group(2), match.group(3)
                is_kernel = kind == "weight"
                if part in ("attention.self.query", "attention.self.key",
                            "attention.self.value"):
                    dest = f"{layer}/self_attention/{part.rsplit('.', 1)[1]}"
                    target = (f"{dest}/kernel", _split_heads(value, num_heads)) if is_kernel \
                        else (f"{dest}/bias", value.reshape(num_heads, -1))
                elif part == "attention.output.dense":
                    dest = f"{layer}/self_attention/attention_output"
                    target = (f"{dest}/kernel", value.T.reshape(num_heads, -1, value.shape[0])) \
                        if is_kernel else (f"{dest}/bias", value)
                elif part == "attention.output.LayerNorm":
                    dest = f"{layer}/self_attention_layer_norm"
                    target = (f"{dest}/gamma" if is_kernel else f"{dest}/beta", value)
                elif part == "intermediate.dense":
                    dest = f"{layer}/intermediate"
                    target = (f"{dest}/kernel", value.T) if is_kernel else (f"{dest}/bias", value)
                elif part == "output.dense":
                    dest = f"{layer}/output"
                    target = (f"{dest}/kernel", value.T) if is_kernel else (f"{dest}/bias", value)
                elif part == "output.LayerNorm":
                    dest = f"{layer}/output_layer_norm"
                    target = (f"{dest}/gamma" if is_kernel else f"{dest}/beta", value)
        if target is None:
            unused.append(raw_name)
        else:
            mapped[target[0]] = target[1]
    if unused:
        shown = ", ".join(sorted(unused)[:5])
        more = f" and {len(unused) - 5} more" if len(unused) > 5 else ""
        raise ValueError(f"{source}: tensors the encoder does not use: {shown}{more}")
    return mapped


def _variable_key(variable) -> str:
    # "[outer/]bert/transformer/layer_0/intermediate/kernel:0" -> "transformer/...".
    name = variable.name.split(":")[0]
    return re.sub(r"^(.*/)?bert/", "", name, count=1)


def warm_start_config(meta: dict, prefix: str, vocab_file: str) -> dict:
    """`warm_start.yaml`'s content: the encoder and tokenizer of `read_hf_metadata`'s `meta`,
    the encoder checkpoint `prefix` and the vocabulary `vocab_file`."""
    from cmlm_tf import configs

    model = configs.SentenceModelConfig(
        encoder=configs.EncoderConfig(**meta["encoder"]),
        tokenizer=configs.TokenizerConfig(
            type="wordpiece", vocab_file=vocab_file, lower_case=meta["lower_case"]))
    return {"task": {"init_checkpoint": os.path.abspath(prefix), "model": model.as_dict()}}


def convert(hf_dir: str, output_dir: str) -> str:
    """Converts `hf_dir` into `output_dir`; returns the path of `warm_start.yaml`."""
    import tensorflow as tf  # noqa: F401  (imported late so --help stays fast)
    from safetensors.numpy import load_file

    from cmlm_tf import configs
    from cmlm_tf.modeling import sentence_encoder

    meta = read_hf_metadata(hf_dir)
    weights_path = os.path.join(hf_dir, "model.safetensors")
    vocab_path = os.path.join(hf_dir, "vocab.txt")
    for path in (weights_path, vocab_path):
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: required file not found")
    try:
        tensors = load_file(weights_path)
    except Exception as e:  # safetensors raises its own error types
        raise ValueError(f"{weights_path}: cannot read safetensors ({e})") from None
    with open(vocab_path, encoding="utf-8") as f:
        vocab_lines = sum(1 for _ in f)
    encoder_config = configs.EncoderConfig(**meta["encoder"])
    if vocab_lines != encoder_config.vocab_size:
        raise ValueError(f"{vocab_path}: {vocab_lines} tokens but config.json says vocab_size "
                         f"{encoder_config.vocab_size}")

    encoder = sentence_encoder.build_sentence_encoder(encoder_config)
    mapped = _map_hf_tensors(tensors, encoder_config.num_layers,
                             encoder_config.num_attention_heads, weights_path)
    bert_weights = {
        _variable_key(v): v for v in encoder.bert.weights
        if not _variable_key(v).startswith("pooler_transform/")}
    missing = sorted(set(bert_weights) - set(mapped))
    if missing:
        raise ValueError(f"{weights_path}: no tensor for encoder weights {missing[:5]}")
    for key, variable in bert_weights.items():
        value = mapped[key]
        if tuple(value.shape) != tuple(variable.shape):
            raise ValueError(f"{weights_path}: tensor for {key} has shape {value.shape}, "
                             f"the encoder expects {tuple(variable.shape)}")
        variable.assign(value.astype(np.float32))

    output_dir = os.path.abspath(output_dir)
    os.makedirs(output_dir, exist_ok=True)
    prefix = sentence_encoder.write_encoder_checkpoint(encoder, output_dir, CHECKPOINT_NAME)
    vocab_out = os.path.join(output_dir, "vocab.txt")
    shutil.copyfile(vocab_path, vocab_out)
    warm_start = warm_start_config(meta, prefix, vocab_out)
    import yaml

    warm_start_path = os.path.join(output_dir, WARM_START_FILE)
    with open(warm_start_path, "w", encoding="utf-8") as f:
        yaml.safe_dump(warm_start, f, sort_keys=False)
    with open(os.path.join(output_dir, SOURCE_FILE), "w", encoding="utf-8") as f:
        json.dump({"hf_dir": os.path.abspath(hf_dir),
                   "max_seq_length": meta["max_seq_length"]}, f, indent=2)
    return warm_start_path


def build_parser():
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m cmlm_tf.convert_hf_bert",
        description="Convert a Hugging Face BERT folder into a cmlm_tf encoder checkpoint.")
    parser.add_argument("--hf_dir", required=True,
                        help="folder with config.json, model.safetensors, vocab.txt")
    parser.add_argument("--output_dir", required=True)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from cmlm_tf import cli

    cli.quiet_tensorflow_logs()
    return cli.run_main(lambda: print(f"wrote {convert(args.hf_dir, args.output_dir)}"))


if __name__ == "__main__":
    sys.exit(main())
