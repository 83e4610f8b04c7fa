"""Reading a Hugging Face or sentence-transformers folder: the encoder's settings, the
tokenizer and the sentence-transformers modules, each field checked and any error one line
naming the file and the field.

`read_hf_metadata` reads `config.json` (`model_type` bert or xlm-roberta), the
sentence-transformers metadata when present (`modules.json`: Transformer, Pooling, optionally
one `Dense` module with its activation, Normalize; the Pooling module's `config.json`, with
the `pooling_mode_*_tokens` flags of sentence-transformers 2-4 or the `pooling_mode` of 5 and
6; `sentence_bert_config.json`), and the tokenizer's files. Casing comes from
`tokenizer_config.json` (`do_lower_case`; else `tokenizer.json`'s normalizer), never from
`sentence_bert_config.json`, whose `do_lower_case` describes something else; XLM-R's
tokenizer is cased.
"""

import json
import os
from typing import Optional

from cmlm_tf.model_import import import_folder

MODEL_TYPES = ("bert", "xlm-roberta")
SP_MODEL_FILE = import_folder.SP_MODEL_FILE  # XLM-R's name, kept in the import folder too

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
# The way out: EncoderConfig.hidden_activation -> Hugging Face's `hidden_act` (the name
# Transformers' BERT computes exactly so).
HF_ACTIVATION_NAMES = {"gelu_exact": "gelu", "gelu_approx": "gelu_new", "relu": "relu",
                       "swish": "silu"}


def read_json(path: str, *, required: bool = False, kind: type = dict) -> Optional[dict]:
    """The JSON value of `path` (an object, or `kind`); None when absent and not required."""
    if not os.path.exists(path):
        if required:
            raise FileNotFoundError(f"{path}: required file not found")
        return None
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot read JSON ({e})") from None
    if not isinstance(value, kind):
        expected = "object" if kind is dict else "list"
        raise ValueError(f"{path}: expected a JSON {expected}, got {type(value).__name__}")
    return value


_REQUIRED = object()


def checked_number(config: dict, path: str, name: str, *, default=_REQUIRED, integer: bool = True,
            minimum: float = 1, maximum: Optional[float] = None):
    """`config[name]` checked: an int (or a number), within [minimum, maximum]; the error
    reads `FILE: FIELD: what is wrong`."""
    value = config.get(name, default)
    if value is _REQUIRED:
        raise ValueError(f"{path}: {name}: missing")
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        what = "an integer" if integer else "a number"
        raise ValueError(f"{path}: {name}: expected {what}, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"at least {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{path}: {name}: must be {bound}, got {value!r}")
    return value


# sentence-transformers module types (the last component of `modules.json`'s `type`).
_ST_MODULES = ("Transformer", "Pooling", "Dense", "Normalize")
# sentence-transformers pooling: the v2-v4 flags and the v5/v6 `pooling_mode` values.
_POOLING_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                  "pooling_mode_max_tokens": "max"}
_UNSUPPORTED_POOLING_FLAGS = ("pooling_mode_mean_sqrt_len_tokens",
                              "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")
# A `Dense` module's `activation_function` -> EncoderConfig.projection_activation.
_DENSE_ACTIVATIONS = {
    "torch.nn.modules.activation.Tanh": "tanh",
    "torch.nn.modules.linear.Identity": "linear",
    "torch.nn.modules.activation.ReLU": "relu",
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
}
# The way out: EncoderConfig.projection_activation -> a `Dense` module's activation_function.
DENSE_ACTIVATION_CLASSES = {name: torch_class
                            for torch_class, name in _DENSE_ACTIVATIONS.items()}


def pooling_mode(pooling: dict, path: str) -> str:
    """`cls`, `mean` or `max` from a `1_Pooling/config.json`, old flags or new field."""
    if "pooling_mode" in pooling:
        mode = pooling["pooling_mode"]
        if mode not in ("cls", "mean", "max"):
            raise ValueError(f"{path}: pooling_mode {mode!r} is not supported (cls, mean, max)")
        return mode
    modes = [mode for flag, mode in _POOLING_FLAGS.items() if pooling.get(flag)]
    unsupported = [flag for flag in _UNSUPPORTED_POOLING_FLAGS if pooling.get(flag)]
    if unsupported or len(modes) != 1:
        fields = unsupported or [flag for flag in _POOLING_FLAGS if pooling.get(flag)]
        raise ValueError(f"{path}: pooling {', '.join(fields) or 'with no mode set'} is not "
                         "supported (exactly one of pooling_mode_cls_token, "
                         "pooling_mode_mean_tokens, pooling_mode_max_tokens)")
    return modes[0]


def _read_modules(hf_dir: str) -> list:
    """`modules.json` as [(kind, folder)] with kind in `_ST_MODULES`, in order; a folder
    without it is one plain Hugging Face model: [("Transformer", hf_dir)]."""
    path = os.path.join(hf_dir, "modules.json")
    modules = read_json(path, kind=list)
    if modules is None:
        return [("Transformer", hf_dir)]
    read = []
    for index, module in enumerate(modules):
        if not isinstance(module, dict):
            raise ValueError(f"{path}: module {index}: expected a JSON object, got "
                             f"{type(module).__name__}")
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        if kind not in _ST_MODULES:
            raise ValueError(f"{path}: module {index} has type {module.get('type')!r}, which "
                             f"is not supported (supported: {', '.join(_ST_MODULES)})")
        path_in_folder = module.get("path")
        if path_in_folder is None:  # sentence-transformers' own default
            path_in_folder = "" if kind == "Transformer" else f"{index}_{kind}"
        read.append((kind, os.path.join(hf_dir, path_in_folder)))
    kinds = [kind for kind, _ in read]
    if kinds[:2] != ["Transformer", "Pooling"] or kinds[2:] not in (
            [], ["Dense"], ["Normalize"], ["Dense", "Normalize"]):
        raise ValueError(f"{path}: modules {kinds} are not supported (Transformer, Pooling, "
                         "then optionally one Dense and Normalize)")
    return read


def _read_dense(folder: str, width: int) -> dict:
    """A sentence-transformers `Dense` module: its size, activation and weights' file."""
    path = os.path.join(folder, "config.json")
    config = read_json(path, required=True)
    if config.get("in_features") != width:
        raise ValueError(f"{path}: in_features {config.get('in_features')} differs from the "
                         f"pooled width {width}")
    activation = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    if activation not in _DENSE_ACTIVATIONS:
        raise ValueError(f"{path}: activation_function {activation!r} is not supported "
                         f"({', '.join(_DENSE_ACTIVATIONS)})")
    weights = os.path.join(folder, "model.safetensors")
    if not os.path.exists(weights):
        raise FileNotFoundError(f"{weights}: required file not found (a Dense module saved as "
                                "pytorch_model.bin only: save it again with "
                                "sentence-transformers 3 or later)")
    return {"size": checked_number(config, path, "out_features"),
            "bias": bool(config.get("bias", True)),
            "activation": _DENSE_ACTIVATIONS[activation], "weights": weights}


def _encoder_settings(config: dict, config_path: str) -> tuple:
    """(EncoderConfig fields, position offset) from a `config.json`; the sentence-transformers
    modules' settings are the defaults (cls pooling, no projection, not normalised)."""
    model_type = config.get("model_type", "bert")
    if model_type not in MODEL_TYPES:
        raise ValueError(f"{config_path}: model_type {model_type!r} is not supported "
                         f"({', '.join(MODEL_TYPES)})")
    # RoBERTa numbers positions from its padding id + 1.
    position_offset = checked_number(config, config_path, "pad_token_id", default=1,
                                     minimum=0) + 1 \
        if model_type == "xlm-roberta" else 0
    act = config.get("hidden_act", "gelu")
    if act not in _HF_ACTIVATIONS:
        raise ValueError(f"{config_path}: unsupported hidden_act {act!r}")
    hidden_size = checked_number(config, config_path, "hidden_size")
    heads = checked_number(config, config_path, "num_attention_heads")
    if hidden_size % heads:
        raise ValueError(f"{config_path}: hidden_size: {hidden_size} is not a multiple of "
                         f"num_attention_heads {heads}")
    positions = checked_number(config, config_path, "max_position_embeddings", default=512,
                               minimum=position_offset + 1)
    probability = {"integer": False, "minimum": 0, "maximum": 1}
    encoder = {
        "vocab_size": checked_number(config, config_path, "vocab_size"),
        "hidden_size": hidden_size,
        "num_layers": checked_number(config, config_path, "num_hidden_layers"),
        "num_attention_heads": heads,
        "intermediate_size": checked_number(config, config_path, "intermediate_size"),
        "hidden_activation": _HF_ACTIVATIONS[act],
        "max_position_embeddings": positions - position_offset,
        "type_vocab_size": checked_number(config, config_path, "type_vocab_size", default=2),
        "dropout_rate": checked_number(config, config_path, "hidden_dropout_prob", default=0.1,
                                       **probability),
        "attention_dropout_rate": checked_number(config, config_path,
                                                 "attention_probs_dropout_prob", default=0.1,
                                                 **probability),
        "initializer_range": checked_number(config, config_path, "initializer_range", default=0.02,
                                            integer=False, minimum=0),
        "layer_norm_epsilon": float(checked_number(config, config_path, "layer_norm_eps",
                                                   default=1e-12, integer=False, minimum=0)),
        "pooling": "cls",
        "projection_size": 0,
        "projection_activation": "linear",
        "normalize": False,
    }
    return encoder, position_offset


def _apply_modules(encoder: dict, modules: list) -> Optional[dict]:
    """Sets the pooling, projection and normalisation of `encoder` from the
    sentence-transformers modules after the Transformer; returns the Dense module, if any."""
    dense = None
    for kind, folder in modules:
        if kind == "Pooling":
            path = os.path.join(folder, "config.json")
            encoder["pooling"] = pooling_mode(read_json(path, required=True), path)
        elif kind == "Dense":
            dense = _read_dense(folder, encoder["hidden_size"])
            encoder["projection_size"] = dense["size"]
            encoder["projection_activation"] = dense["activation"]
        elif kind == "Normalize":
            encoder["normalize"] = True
    return dense


def read_hf_metadata(hf_dir: str) -> dict:
    """Reads encoder, tokenizer and sentence-transformers settings from a HF folder.

    Returns `encoder` (EncoderConfig fields), `tokenizer_type` (`wordpiece` or
    `xlmr_sentencepiece`), `lower_case`, `max_seq_length`, `position_offset` (the position
    rows before the first position id), `transformer_dir` (where config.json, the weights and
    the tokenizer are) and `dense` (None, or the Dense module's `size`, `bias`, `activation`
    and `weights` file).
    """
    if not os.path.isdir(hf_dir):
        raise FileNotFoundError(f"{hf_dir}: Hugging Face model folder not found")
    modules = _read_modules(hf_dir)
    transformer_dir = modules[0][1]
    config_path = os.path.join(transformer_dir, "config.json")
    config = read_json(config_path, required=True)
    encoder, position_offset = _encoder_settings(config, config_path)
    dense = _apply_modules(encoder, modules[1:])
    tokenizer_path = os.path.join(transformer_dir, "tokenizer_config.json")
    tokenizer_config = read_json(tokenizer_path) or {}
    st_path = os.path.join(hf_dir, "sentence_bert_config.json")
    st_config = read_json(st_path) or {}
    tokenizer_json = read_json(os.path.join(transformer_dir, "tokenizer.json")) or {}
    is_xlmr = str(tokenizer_config.get("tokenizer_class", "")).startswith("XLMRoberta") or (
        (tokenizer_json.get("model") or {}).get("type") == "Unigram")
    lower_case = tokenizer_config.get("do_lower_case")
    if lower_case is not None and not isinstance(lower_case, bool):
        raise ValueError(f"{tokenizer_path}: do_lower_case: expected true or false, got "
                         f"{lower_case!r}")
    if lower_case is None:
        lower_case = False if is_xlmr else (
            tokenizer_json.get("normalizer") or {}).get("lowercase", True)
    return {
        "encoder": encoder,
        "tokenizer_type": "xlmr_sentencepiece" if is_xlmr else "wordpiece",
        "lower_case": bool(lower_case),
        "position_offset": position_offset,
        "max_seq_length": _max_seq_length(st_config, st_path, tokenizer_config,
                                          tokenizer_path,
                                          positions=encoder["max_position_embeddings"]),
        "transformer_dir": transformer_dir,
        "dense": dense,
    }


def _max_seq_length(st_config: dict, st_path: str, tokenizer_config: dict,
                    tokenizer_path: str, *, positions: int) -> Optional[int]:
    """sentence-transformers' `max_seq_length`, which must fit the position table; else the
    tokenizer's `model_max_length` (capped at the table: Hugging Face writes a huge number
    for "no limit"); else None."""
    if st_config.get("max_seq_length") is not None:
        return checked_number(st_config, st_path, "max_seq_length", maximum=positions)
    if tokenizer_config.get("model_max_length") is not None:
        return min(positions, checked_number(tokenizer_config, tokenizer_path, "model_max_length"))
    return None


def read_wordpiece_vocab(transformer_dir: str) -> list:
    """The WordPiece vocabulary, in id order: `vocab.txt`, else `tokenizer.json`'s
    `model.vocab` (sentence-transformers 5/6 and transformers 5 save only the latter)."""
    vocab_path = os.path.join(transformer_dir, "vocab.txt")
    if os.path.exists(vocab_path):
        return read_vocab_file(vocab_path)
    path = os.path.join(transformer_dir, "tokenizer.json")
    tokenizer = read_json(path)
    if tokenizer is None:
        raise FileNotFoundError(f"{vocab_path}: required file not found (nor {path})")
    model = tokenizer.get("model") or {}
    if model.get("type") != "WordPiece":
        raise ValueError(f"{path}: model.type {model.get('type')!r} is not supported "
                         "(WordPiece)")
    if model.get("continuing_subword_prefix", "##") != "##":
        raise ValueError(f"{path}: model.continuing_subword_prefix "
                         f"{model['continuing_subword_prefix']!r} is not supported ('##')")
    vocab = model.get("vocab") or {}
    tokens = [None] * len(vocab)
    for token, index in vocab.items():
        if not 0 <= index < len(tokens) or tokens[index] is not None:
            raise ValueError(f"{path}: model.vocab ids are not 0..{len(vocab) - 1}, each once")
        tokens[index] = token
    if any("\n" in token or "\r" in token for token in tokens):
        raise ValueError(f"{path}: model.vocab has a token with a line break")
    return tokens


def sentencepiece_model(transformer_dir: str) -> str:
    """The path of XLM-R's SentencePiece model in a folder whose tokenizer is XLM-R's."""
    path = os.path.join(transformer_dir, SP_MODEL_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: required file not found (XLM-R's tokenizer is read "
                                "from its SentencePiece model, not from tokenizer.json)")
    return path


def read_vocab_file(path: str) -> list:
    """A vocabulary file's tokens, one per line, in id order."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: required file not found")
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\r\n") for line in f]
