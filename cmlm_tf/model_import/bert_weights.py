"""Hugging Face BERT weights in Model Garden's `BertEncoderV2`: the tensor names and layouts
mapped (`map_hf_tensors`), and the values loaded into a sentence encoder, every shape
checked (`assign_bert_weights`, `assign`, `assign_dense` for a sentence-transformers
`Dense` module). The way out, `hf_bert_tensors`, is the same mapping read backwards: an
encoder's weights as the tensors of Transformers' `BertModel`."""

import re
from typing import Dict

import numpy as np
from safetensors.numpy import load_file

# Tensors a sentence encoder never uses; anything else unknown is an error.
_IGNORED = (re.compile(r"^embeddings\.position_ids$"), re.compile(r"^pooler\.dense\."))


def _split_heads(kernel: np.ndarray, num_heads: int) -> np.ndarray:
    # HF Linear [out, in] -> EinsumDense [in, heads, head_dim].
    hidden_in = kernel.shape[1]
    return kernel.T.reshape(hidden_in, num_heads, -1)


def map_hf_tensors(tensors: Dict[str, np.ndarray], num_layers: int, num_heads: int,
                    source: str, *, position_offset: int = 0) -> Dict[str, np.ndarray]:
    """Returns {BertEncoderV2 weight path: value} for every tensor of the HF encoder (BERT or
    XLM-RoBERTa, whose position rows before `position_offset` are dropped)."""
    mapped = {}
    unused = []
    for raw_name, value in tensors.items():
        name = re.sub(r"^(bert|roberta)\.", "", raw_name)
        if any(p.search(name) for p in _IGNORED):
            continue
        name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace(
            "LayerNorm.beta", "LayerNorm.bias")
        target = None
        if name == "embeddings.word_embeddings.weight":
            target = ("word_embeddings/embeddings", value)
        elif name == "embeddings.position_embeddings.weight":
            target = ("position_embedding/embeddings", value[position_offset:])
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


def hf_bert_tensors(encoder) -> Dict[str, np.ndarray]:
    """{Transformers `BertModel` tensor name: float32 value} of `encoder.bert`'s weights,
    BERT's tanh pooler included (`map_hf_tensors` of the result gives the weights back)."""
    tensors = {}
    for variable in encoder.bert.weights:
        key = _variable_key(variable)
        value = variable.numpy().astype(np.float32)
        name = _hf_name(key, value)
        if name is None:
            raise ValueError(f"encoder weight {key} has no Hugging Face BERT tensor")
        tensors[name[0]] = np.ascontiguousarray(name[1])
    return tensors


_EMBEDDING_NAMES = {
    "word_embeddings/embeddings": "embeddings.word_embeddings.weight",
    "position_embedding/embeddings": "embeddings.position_embeddings.weight",
    "type_embeddings/embeddings": "embeddings.token_type_embeddings.weight",
    "embeddings/layer_norm/gamma": "embeddings.LayerNorm.weight",
    "embeddings/layer_norm/beta": "embeddings.LayerNorm.bias",
    "pooler_transform/kernel": "pooler.dense.weight",
    "pooler_transform/bias": "pooler.dense.bias",
}
_NORM_NAMES = {"self_attention_layer_norm": "attention.output.LayerNorm",
               "output_layer_norm": "output.LayerNorm"}


def _hf_name(key: str, value: np.ndarray):
    """(Hugging Face name, value in its layout) of one `BertEncoderV2` weight, or None."""
    if key in _EMBEDDING_NAMES:
        return _EMBEDDING_NAMES[key], value.T if key.endswith("kernel") else value
    match = re.fullmatch(r"transformer/layer_(\d+)/(.+)/(kernel|bias|gamma|beta)", key)
    if not match:
        return None
    layer, part, kind = f"encoder.layer.{match.group(1)}", match.group(2), match.group(3)
    suffix = "weight" if kind in ("kernel", "gamma") else "bias"
    if part in _NORM_NAMES:
        return f"{layer}.{_NORM_NAMES[part]}.{suffix}", value
    if part in ("self_attention/query", "self_attention/key", "self_attention/value"):
        name = f"{layer}.attention.self.{part.rsplit('/', 1)[1]}.{suffix}"
        # EinsumDense [in, heads, head_dim] -> Linear [out, in]; bias [heads, head_dim].
        return name, value.reshape(value.shape[0], -1).T if kind == "kernel" \
            else value.reshape(-1)
    if part == "self_attention/attention_output":
        # [heads, head_dim, out] -> [out, heads * head_dim].
        return f"{layer}.attention.output.dense.{suffix}", \
            value.reshape(-1, value.shape[-1]).T if kind == "kernel" else value
    dense = {"intermediate": "intermediate.dense", "output": "output.dense"}.get(part)
    if dense is None:
        return None
    return f"{layer}.{dense}.{suffix}", value.T if kind == "kernel" else value


def _variable_key(variable) -> str:
    # "[outer/]bert/transformer/layer_0/intermediate/kernel:0" -> "transformer/...".
    name = variable.name.split(":")[0]
    return re.sub(r"^(.*/)?bert/", "", name, count=1)


def assign_bert_weights(encoder, mapped: Dict[str, np.ndarray], source: str) -> None:
    """Loads {BertEncoderV2 weight path: value} into `encoder.bert`; every weight but BERT's
    unused tanh pooler must be there, with its shape."""
    bert_weights = {
        _variable_key(v): v for v in encoder.bert.weights
        if not _variable_key(v).startswith("pooler_transform/")}
    missing = sorted(set(bert_weights) - set(mapped))
    if missing:
        raise ValueError(f"{source}: no tensor for encoder weights {missing[:5]}")
    for key, variable in bert_weights.items():
        assign(variable, mapped[key], source, key)


def load_safetensors(path: str) -> Dict[str, np.ndarray]:
    try:
        return load_file(path)
    except Exception as e:  # safetensors raises its own error types
        raise ValueError(f"{path}: cannot read safetensors ({e})") from None


def assign(variable, value: np.ndarray, source: str, key: str) -> None:
    if tuple(value.shape) != tuple(variable.shape):
        raise ValueError(f"{source}: tensor for {key} has shape {value.shape}, "
                         f"the encoder expects {tuple(variable.shape)}")
    variable.assign(value.astype(np.float32))


def assign_dense(projection, dense: dict) -> None:
    """Loads a sentence-transformers `Dense` module (`linear.weight` [out, in],
    `linear.bias`) into the encoder's projection."""
    tensors = load_safetensors(dense["weights"])
    expected = {"linear.weight"} | ({"linear.bias"} if dense["bias"] else set())
    if set(tensors) != expected:
        raise ValueError(f"{dense['weights']}: tensors {sorted(tensors)}, expected "
                         f"{sorted(expected)}")
    assign(projection.kernel, tensors["linear.weight"].T, dense["weights"], "linear.weight")
    bias = tensors.get("linear.bias", np.zeros(dense["size"], np.float32))
    assign(projection.bias, bias, dense["weights"], "linear.bias")
