"""The encoder as ONNX models in the sentence-transformers folder (`--onnx`): the layout that
sentence-transformers' `backend="onnx"` (through Optimum) and any ONNX Runtime user load.

`OUT/sentence_transformers/onnx/` holds

- `model.onnx`: Transformers' `BertModel` as its ONNX export looks from outside: int64
  `input_ids`, `attention_mask`, `token_type_ids` [batch, sequence] in, float32
  `last_hidden_state` [batch, sequence, hidden] out, both axes dynamic. The pooling, Dense
  and Normalize modules stay sentence-transformers modules, as in the torch layout;
- `model_qint8_avx512_vnni.onnx`: the same graph with every linear layer in int8 (dynamic
  quantisation), under the name sentence-transformers gives the file its
  `export_dynamic_quantized_onnx_model(model, "avx512_vnni", ...)` writes. Each weight matrix
  is int8, symmetric, one scale per output column; each activation entering it is quantised
  per tensor at run time (`DynamicQuantizeLinear`, uint8) and the product is `MatMulInteger`,
  rescaled to float32 before the bias. Embeddings, attention scores, softmax and layer norms
  stay float32.

Where the folder holds Transformers' `XLMRobertaModel` (its `config.json`, written first,
says so: an encoder that reads XLM-R's ids), the graph has no `token_type_ids` input, as
Optimum's XLM-R export has none (its tokenizer gives none): every token adds type row 0.
Given the position table with RoBERTa's rows before its first position id (more rows than
the encoder's `max_position_embeddings`), the graph's positions start after them.

The graphs are built here from the encoder's weights (the tensors of
`bert_weights.hf_bert_tensors`) with standard ONNX operators of opset 17: no torch, no
converter. The `onnx` package comes with the `onnx` extra (`pip install "cmlm_tf[onnx]"`);
`require_onnx` refuses the flag in one line when it is missing.
"""

import importlib.util
import json
import math
import os
from typing import Dict, List

import numpy as np

__all__ = ["EXTERNAL_DATA_BYTES", "FOLDER", "FLOAT32_FILE", "INT8_FILE", "OPSET", "bert_graph",
           "graph_layout", "quantize_columns", "require_onnx", "write_onnx"]
FOLDER = "onnx"  # inside OUT/sentence_transformers/
FLOAT32_FILE = "model.onnx"
INT8_FILE = "model_qint8_avx512_vnni.onnx"
OPSET = 17  # the first with LayerNormalization
_IR_VERSION = 8  # opset 17's, which every ONNX Runtime since 1.13 reads
# A protobuf file cannot exceed 2 GiB: larger models keep their tensors in `<file>_data`.
EXTERNAL_DATA_BYTES = 1_800_000_000
# Added to the attention scores of padding keys (Keras' masked softmax adds the same).
_MASKED_SCORE = -1e9


def require_onnx() -> None:
    """Raises ValueError, one line, when the `onnx` package is not installed."""
    if importlib.util.find_spec("onnx") is None:
        raise ValueError('--onnx: the onnx package is not installed; install the extra: '
                         'pip install "cmlm_tf[onnx]"')


def quantize_columns(matrix: np.ndarray):
    """Symmetric int8 of a float [in, out] matrix, one scale per column: (int8 [in, out],
    float32 scales [out]) with matrix ~= values * scales."""
    largest = np.abs(matrix).max(axis=0)
    scales = np.where(largest > 0, largest / 127.0, 1.0).astype(np.float32)
    values = np.clip(np.rint(matrix / scales), -127, 127).astype(np.int8)
    return values, scales


class _GraphBuilder:
    """The nodes and initializers of one graph, each output named after the step; `quantized`:
    tensor -> its `DynamicQuantizeLinear` outputs, so that the query, key and value
    projections of one input quantise it once."""

    def __init__(self):
        self.nodes: List = []
        self.initializers: List = []
        self.quantized: Dict[str, List[str]] = {}
        self._names: Dict[str, int] = {}

    def _fresh(self, name: str) -> str:
        self._names[name] = self._names.get(name, 0) + 1
        count = self._names[name]
        return name if count == 1 else f"{name}_{count}"

    def const(self, name: str, value) -> str:
        from onnx import numpy_helper

        name = self._fresh(name)
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op_type: str, inputs: List[str], name: str, outputs: int = 1, **attributes):
        from onnx import helper

        names = [self._fresh(name if outputs == 1 else f"{name}_{i}") for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=names[0],
                                           **attributes))
        return names[0] if outputs == 1 else names


def _linear(graph: _GraphBuilder, x: str, tensors: dict, prefix: str, *, int8: bool) -> str:
    """x [..., in] @ W.T + b of Transformers' Linear `prefix` (weight [out, in])."""
    kernel = np.ascontiguousarray(tensors[f"{prefix}.weight"].T)
    bias = graph.const(f"{prefix}.bias", tensors[f"{prefix}.bias"])
    if not int8:
        product = graph.op("MatMul", [x, graph.const(f"{prefix}.weight", kernel)],
                           f"{prefix}/matmul")
        return graph.op("Add", [product, bias], f"{prefix}/output")
    values, scales = quantize_columns(kernel)
    if x not in graph.quantized:
        graph.quantized[x] = graph.op("DynamicQuantizeLinear", [x], f"{prefix}/input_q",
                                      outputs=3)
    quantized, x_scale, x_zero = graph.quantized[x]
    product = graph.op("MatMulInteger",
                       [quantized, graph.const(f"{prefix}.weight_int8", values), x_zero],
                       f"{prefix}/matmul_int32")
    rescale = graph.op("Mul", [x_scale, graph.const(f"{prefix}.weight_scale", scales)],
                       f"{prefix}/scale")
    product = graph.op("Mul", [graph.op("Cast", [product], f"{prefix}/matmul_float",
                                        to=1), rescale], f"{prefix}/matmul")
    return graph.op("Add", [product, bias], f"{prefix}/output")


def _activation(graph: _GraphBuilder, x: str, activation: str, prefix: str) -> str:
    """The encoder's feed-forward activation (`EncoderConfig.hidden_activation`)."""
    if activation == "relu":
        return graph.op("Relu", [x], f"{prefix}/relu")
    if activation == "swish":
        return graph.op("Mul", [x, graph.op("Sigmoid", [x], f"{prefix}/sigmoid")],
                        f"{prefix}/swish")
    if activation == "gelu_exact":  # x/2 (1 + erf(x / sqrt 2))
        inner = graph.op("Erf", [graph.op("Mul", [x, graph.const(
            f"{prefix}/inv_sqrt2", np.float32(1 / math.sqrt(2)))], f"{prefix}/scaled")],
            f"{prefix}/erf")
    elif activation == "gelu_approx":  # x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = graph.op("Mul", [graph.op("Mul", [x, x], f"{prefix}/square"), x],
                        f"{prefix}/cube")
        inner = graph.op("Add", [x, graph.op("Mul", [cube, graph.const(
            f"{prefix}/cube_coefficient", np.float32(0.044715))], f"{prefix}/cube_term")],
            f"{prefix}/polynomial")
        inner = graph.op("Tanh", [graph.op("Mul", [inner, graph.const(
            f"{prefix}/sqrt_2_over_pi", np.float32(math.sqrt(2 / math.pi)))],
            f"{prefix}/tanh_input")], f"{prefix}/tanh")
    else:
        raise ValueError(f"--onnx: hidden_activation {activation!r} has no ONNX graph here")
    one_plus = graph.op("Add", [inner, graph.const(f"{prefix}/one", np.float32(1))],
                        f"{prefix}/one_plus")
    half_x = graph.op("Mul", [x, graph.const(f"{prefix}/half", np.float32(0.5))],
                      f"{prefix}/half_x")
    return graph.op("Mul", [half_x, one_plus], f"{prefix}/gelu")


def _layer_norm(graph: _GraphBuilder, x: str, tensors: dict, prefix: str, *, eps: float) -> str:
    return graph.op("LayerNormalization", [x, graph.const(f"{prefix}.weight",
                                                          tensors[f"{prefix}.weight"]),
                                           graph.const(f"{prefix}.bias",
                                                       tensors[f"{prefix}.bias"])],
                    f"{prefix}/output", axis=-1, epsilon=float(eps))


def _embeddings(graph: _GraphBuilder, tensors: dict, eps: float, position_offset: int,
                *, token_type_input: bool) -> str:
    """Word + position + token type embeddings, layer-normalised: [batch, seq, hidden].
    Positions are `position_offset` + 0, 1, ...; without `token_type_input`, every token
    has type 0."""
    def table(name):
        return graph.const(f"embeddings.{name}.weight", tensors[f"embeddings.{name}.weight"])

    words = graph.op("Gather", [table("word_embeddings"), "input_ids"], "embeddings/words")
    if token_type_input:
        types = graph.op("Gather", [table("token_type_embeddings"), "token_type_ids"],
                         "embeddings/types")
    else:
        types = graph.const("embeddings.token_type_embeddings.row_0",
                            tensors["embeddings.token_type_embeddings.weight"][0])
    length = graph.op("Gather", [graph.op("Shape", ["input_ids"], "embeddings/shape"),
                                 graph.const("embeddings/seq_axis", np.int64(1))],
                      "embeddings/length")
    first = graph.const("embeddings/first_position", np.int64(position_offset))
    positions = graph.op("Range", [first, graph.op("Add", [length, first],
                                                   "embeddings/position_end"),
                                   graph.const("embeddings/step", np.int64(1))],
                         "embeddings/position_ids")
    position_vectors = graph.op("Gather", [table("position_embeddings"), positions],
                                "embeddings/positions")
    summed = graph.op("Add", [graph.op("Add", [words, types], "embeddings/words_types"),
                              position_vectors], "embeddings/sum")
    return _layer_norm(graph, summed, tensors, "embeddings.LayerNorm", eps=eps)


def _attention(graph: _GraphBuilder, x: str, mask_bias: str, tensors: dict, *, prefix: str,
               heads: int, hidden: int, int8: bool) -> str:
    """Multi-head self-attention of layer `prefix`, before its residual: [batch, seq, hidden]."""
    head_dim = hidden // heads
    split = graph.const(f"{prefix}/split_shape", np.array([0, 0, heads, head_dim], np.int64))

    def heads_of(name, perm):
        projected = _linear(graph, x, tensors, f"{prefix}.attention.self.{name}", int8=int8)
        if name == "query":  # scaled before the product, as Keras' attention does
            projected = graph.op("Mul", [projected, graph.const(
                f"{prefix}/query_scale", np.float32(1 / math.sqrt(head_dim)))],
                f"{prefix}/query_scaled")
        return graph.op("Transpose", [graph.op("Reshape", [projected, split],
                                               f"{prefix}/{name}_split")],
                        f"{prefix}/{name}_heads", perm=perm)

    query = heads_of("query", [0, 2, 1, 3])  # [batch, heads, seq, head_dim]
    key = heads_of("key", [0, 2, 3, 1])  # [batch, heads, head_dim, seq]
    value = heads_of("value", [0, 2, 1, 3])
    scores = graph.op("Add", [graph.op("MatMul", [query, key], f"{prefix}/scores"),
                              mask_bias], f"{prefix}/masked_scores")
    weights = graph.op("Softmax", [scores], f"{prefix}/attention_weights", axis=-1)
    context = graph.op("Transpose", [graph.op("MatMul", [weights, value],
                                              f"{prefix}/context_heads")],
                       f"{prefix}/context_split", perm=[0, 2, 1, 3])
    context = graph.op("Reshape", [context, graph.const(
        f"{prefix}/merge_shape", np.array([0, 0, hidden], np.int64))], f"{prefix}/context")
    return _linear(graph, context, tensors, f"{prefix}.attention.output.dense", int8=int8)


def _mask_bias(graph: _GraphBuilder) -> str:
    """0 for the tokens of `attention_mask`, a large negative number for padding:
    [batch, 1, 1, seq], added to every head's scores."""
    mask = graph.op("Cast", ["attention_mask"], "mask/float", to=1)
    padding = graph.op("Sub", [graph.const("mask/one", np.float32(1)), mask], "mask/padding")
    bias = graph.op("Mul", [padding, graph.const("mask/negative", np.float32(_MASKED_SCORE))],
                    "mask/bias")
    return graph.op("Unsqueeze", [bias, graph.const("mask/axes", np.array([1, 2], np.int64))],
                    "mask/bias_4d")


def bert_graph(tensors: Dict[str, np.ndarray], encoder_config, *, int8: bool = False,
               position_offset: int = 0, token_type_input: bool = True):
    """The `onnx.ModelProto` of Transformers' `BertModel` with `tensors` (Transformers' names,
    `bert_weights.hf_bert_tensors`) and the sizes of `encoder_config` (an `EncoderConfig`):
    `last_hidden_state` of `input_ids`, `attention_mask`, `token_type_ids`. With `int8`,
    every linear layer is int8 (module docstring). `position_offset` (the first position
    row) and no `token_type_input` give `XLMRobertaModel` (module docstring)."""
    from onnx import TensorProto, helper

    heads, hidden = encoder_config.num_attention_heads, encoder_config.hidden_size
    eps = encoder_config.layer_norm_epsilon
    graph = _GraphBuilder()
    x = _embeddings(graph, tensors, eps, position_offset, token_type_input=token_type_input)
    mask_bias = _mask_bias(graph)
    for index in range(encoder_config.num_layers):
        prefix = f"encoder.layer.{index}"
        attended = _attention(graph, x, mask_bias, tensors, prefix=prefix, heads=heads,
                              hidden=hidden, int8=int8)
        x = _layer_norm(graph, graph.op("Add", [attended, x], f"{prefix}/attention_residual"),
                        tensors, f"{prefix}.attention.output.LayerNorm", eps=eps)
        inner = _activation(graph, _linear(graph, x, tensors, f"{prefix}.intermediate.dense",
                                           int8=int8),
                            encoder_config.hidden_activation, f"{prefix}/intermediate")
        output = _linear(graph, inner, tensors, f"{prefix}.output.dense", int8=int8)
        x = _layer_norm(graph, graph.op("Add", [output, x], f"{prefix}/output_residual"),
                        tensors, f"{prefix}.output.LayerNorm", eps=eps)
    graph.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"],
                                        name="last_hidden_state"))
    axes = ["batch_size", "sequence_length"]
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if token_type_input else [])
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, axes) for name in names]
    output = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                           axes + [hidden])
    return helper.make_model(
        helper.make_graph(graph.nodes, "bert", inputs, [output], graph.initializers),
        opset_imports=[helper.make_opsetid("", OPSET)], producer_name="cmlm_tf",
        ir_version=_IR_VERSION)


def _save(model, path: str, external_data_bytes: int) -> None:
    import onnx

    external = model.ByteSize() > external_data_bytes
    onnx.save_model(model, path, save_as_external_data=external,
                    all_tensors_to_one_file=True, location=os.path.basename(path) + "_data")
    onnx.checker.check_model(path)


def graph_layout(folder: str, tensors: Dict[str, np.ndarray], encoder_config) -> dict:
    """`bert_graph`'s `position_offset` and `token_type_input` for the ONNX folder `folder`
    of a sentence-transformers folder (module docstring)."""
    config_path = os.path.join(os.path.dirname(os.path.abspath(folder)), "config.json")
    model_type = "bert"
    if os.path.exists(config_path):
        with open(config_path, encoding="utf-8") as f:
            model_type = json.load(f).get("model_type", "bert")
    rows = tensors["embeddings.position_embeddings.weight"].shape[0]
    return {"position_offset": max(0, rows - encoder_config.max_position_embeddings),
            "token_type_input": model_type != "xlm-roberta"}


def write_onnx(folder: str, tensors: Dict[str, np.ndarray], encoder_config,
               external_data_bytes: int = EXTERNAL_DATA_BYTES) -> dict:
    """Writes `model.onnx` and its int8 twin into the new folder `folder` (the folder's
    `onnx/`, in a folder whose `config.json` is written: `graph_layout`; tensors beside
    each model in `<file>_data` when it is larger than `external_data_bytes`); returns what
    the export's metadata records of them."""
    require_onnx()
    layout = graph_layout(folder, tensors, encoder_config)
    os.makedirs(folder)
    written = {}
    for precision, name in (("float32", FLOAT32_FILE), ("int8", INT8_FILE)):
        _save(bert_graph(tensors, encoder_config, int8=precision == "int8", **layout),
              os.path.join(folder, name), external_data_bytes)
        written[precision] = f"{FOLDER}/{name}"
    return {**written, "opset": OPSET}

