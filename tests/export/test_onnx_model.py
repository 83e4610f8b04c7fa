"""The ONNX models of the sentence-transformers folder (cmlm_tf/export/onnx_model.py), run by
ONNX's own reference evaluator against the encoder they come from. ONNX Runtime and
sentence-transformers load them in the MTEB venv
(tests/mteb_extra/test_sentence_transformers_export.py)."""

import sys

import numpy as np
import onnx
import pytest
import tensorflow as tf
import tf_keras
from onnx.reference import ReferenceEvaluator

from cmlm_tf import configs
from cmlm_tf.commands import export as export_command
from cmlm_tf.export import export_lib, onnx_model
from cmlm_tf.model_import import bert_weights
from cmlm_tf.modeling import sentence_encoder
from cmlm_tf.text import packing, tokenization
from tests.conftest import tiny_encoder_config

SENTENCES = ["the man is playing the guitar .", "a woman is slicing an onion",
             "hello world !", "the dog"]


def _tiny_encoder(tiny_vocab, **overrides):
    vocab_size = len(tiny_vocab.read_text(encoding="utf-8").splitlines())
    config = tiny_encoder_config(vocab_size, **overrides)
    tf_keras.utils.set_random_seed(3)
    return sentence_encoder.build_sentence_encoder(config), config


def _inputs(tiny_vocab, seq_length=12) -> dict:
    """The sentences as cmlm_tf packs them (padded to `seq_length`), as int64 ONNX inputs."""
    tokenizer = tokenization.build_tokenizer(configs.TokenizerConfig(vocab_file=str(tiny_vocab)))
    packed = packing.SentencePacker(tokenizer, seq_length)(tf.constant(SENTENCES))
    return {"input_ids": packed["input_word_ids"].numpy().astype(np.int64),
            "attention_mask": packed["input_mask"].numpy().astype(np.int64),
            "token_type_ids": packed["input_type_ids"].numpy().astype(np.int64)}


def _run(model, inputs: dict) -> np.ndarray:
    return ReferenceEvaluator(model).run(None, inputs)[0]


def _mean_pooled(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' mean pooling and Normalize modules, in NumPy."""
    pooled = (hidden * mask[..., None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


@pytest.mark.parametrize("activation", ["gelu_exact", "gelu_approx", "relu", "swish"])
def test_the_graph_gives_the_encoders_token_and_sentence_vectors(tiny_vocab, activation):
    encoder, config = _tiny_encoder(tiny_vocab, hidden_activation=activation)
    model = onnx_model.bert_graph(bert_weights.hf_bert_tensors(encoder), config)
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["input_ids", "attention_mask",
                                                   "token_type_ids"]
    assert [o.name for o in model.graph.output] == ["last_hidden_state"]
    inputs = _inputs(tiny_vocab)
    assert inputs["attention_mask"].min() == 0  # padding in the batch
    hidden = _run(model, inputs)
    ours = encoder({"input_word_ids": inputs["input_ids"].astype(np.int32),
                    "input_mask": inputs["attention_mask"].astype(np.int32),
                    "input_type_ids": inputs["token_type_ids"].astype(np.int32)},
                   training=False)
    np.testing.assert_allclose(hidden, ours["sequence_output"].numpy(), atol=2e-5)
    np.testing.assert_allclose(_mean_pooled(hidden, inputs["attention_mask"]),
                               ours["default"].numpy(), atol=2e-6)
    # Both axes are dynamic: one text, padded further, gives its vectors again.
    longer = {name: np.pad(value[:1], [(0, 0), (0, 4)]) for name, value in inputs.items()}
    np.testing.assert_allclose(_run(model, longer)[:, :12], hidden[:1], atol=2e-5)


def test_an_xlm_roberta_folder_gets_roberta_positions_and_no_token_types(tiny_vocab,
                                                                       tmp_path):
    """In a folder of `XLMRobertaModel` (its config.json), with the position table holding the
    two rows before RoBERTa's first position id, the graph takes `input_ids` and
    `attention_mask` only and gives the encoder's vectors (type 0 for every token)."""
    encoder, config = _tiny_encoder(tiny_vocab)
    tensors = bert_weights.hf_bert_tensors(encoder)
    assert onnx_model.graph_layout(str(tmp_path / "onnx"), tensors, config) == {
        "position_offset": 0, "token_type_input": True}
    (tmp_path / "config.json").write_text('{"model_type": "xlm-roberta"}', encoding="utf-8")
    name = "embeddings.position_embeddings.weight"
    tensors[name] = np.concatenate([np.full((2, config.hidden_size), 9, np.float32),
                                    tensors[name]])
    layout = onnx_model.graph_layout(str(tmp_path / "onnx"), tensors, config)
    assert layout == {"position_offset": 2, "token_type_input": False}
    model = onnx_model.bert_graph(tensors, config, **layout)
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["input_ids", "attention_mask"]
    inputs = _inputs(tiny_vocab)
    hidden = _run(model, {key: inputs[key] for key in ("input_ids", "attention_mask")})
    ours = encoder({"input_word_ids": inputs["input_ids"].astype(np.int32),
                    "input_mask": inputs["attention_mask"].astype(np.int32),
                    "input_type_ids": np.zeros_like(inputs["input_ids"], np.int32)},
                   training=False)
    np.testing.assert_allclose(hidden, ours["sequence_output"].numpy(), atol=2e-5)
    pooled = _mean_pooled(hidden, inputs["attention_mask"])
    cosines = np.sum(pooled * ours["default"].numpy(), axis=1)
    assert cosines.min() >= 0.99999


def test_the_int8_graph_quantises_every_linear_layer_and_keeps_the_vectors(tiny_vocab):
    encoder, config = _tiny_encoder(tiny_vocab)
    tensors = bert_weights.hf_bert_tensors(encoder)
    model = onnx_model.bert_graph(tensors, config, int8=True)
    onnx.checker.check_model(model, full_check=True)
    ops = [node.op_type for node in model.graph.node]
    assert ops.count("MatMulInteger") == 6 * config.num_layers
    # One per input: the query, key and value projections share theirs.
    assert ops.count("DynamicQuantizeLinear") == 4 * config.num_layers
    assert ops.count("MatMul") == 2 * config.num_layers  # the attention products only
    weights = {init.name: init for init in model.graph.initializer}
    assert weights["encoder.layer.0.intermediate.dense.weight_int8"].data_type == \
        onnx.TensorProto.INT8
    assert "encoder.layer.0.intermediate.dense.weight" not in weights
    inputs = _inputs(tiny_vocab)
    floats = _run(onnx_model.bert_graph(tensors, config), inputs)
    int8 = _run(model, inputs)
    mask = inputs["attention_mask"]
    cosines = np.sum(_mean_pooled(floats, mask) * _mean_pooled(int8, mask), axis=1)
    assert cosines.min() > 0.999 and np.abs(int8 - floats).max() > 1e-5, cosines


def test_weights_are_quantised_per_column():
    matrix = np.array([[0.5, -2.0, 0.0], [-0.25, 1.0, 0.0]], np.float32)
    values, scales = onnx_model.quantize_columns(matrix)
    assert values.dtype == np.int8 and scales.dtype == np.float32
    np.testing.assert_allclose(scales, [0.5 / 127, 2.0 / 127, 1.0])
    np.testing.assert_array_equal(values, [[127, -127, 0], [-64, 64, 0]])
    assert np.abs(values * scales - matrix).max() <= scales.max() / 2


def test_a_large_model_keeps_its_tensors_beside_it(tiny_vocab, tmp_path):
    """Past `external_data_bytes` (2 GiB is protobuf's limit), each model's tensors go to
    `<file>_data`, which ONNX loads from beside the model."""
    encoder, config = _tiny_encoder(tiny_vocab)
    tensors = bert_weights.hf_bert_tensors(encoder)
    written = onnx_model.write_onnx(str(tmp_path / "onnx"), tensors, config,
                                    external_data_bytes=0)
    assert written == {"float32": "onnx/model.onnx",
                       "int8": "onnx/model_qint8_avx512_vnni.onnx", "opset": 17}
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == [
        "model.onnx", "model.onnx_data", "model_qint8_avx512_vnni.onnx",
        "model_qint8_avx512_vnni.onnx_data"]
    assert (tmp_path / "onnx" / "model.onnx").stat().st_size < 100_000
    inputs = _inputs(tiny_vocab)
    np.testing.assert_array_equal(_run(str(tmp_path / "onnx" / "model.onnx"), inputs),
                                  _run(onnx_model.bert_graph(tensors, config), inputs))


def test_without_the_onnx_package_the_flag_is_refused_before_anything_is_written(
        monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "onnx", None)  # what find_spec reports when absent
    source, out = tmp_path / "model", tmp_path / "out"
    source.mkdir()
    with pytest.raises(ValueError, match=r'^--onnx: .* pip install "cmlm_tf\[onnx\]"$'):
        export_lib.export(str(out), hf_dir=str(source), onnx=True)
    code = export_command.main(["--export_dir", str(out), "--hf_dir", str(source), "--onnx"])
    error = capsys.readouterr().err
    assert code == 2 and error.count("\n") == 1 and "cmlm_tf[onnx]" in error, error
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_a_model_the_folder_cannot_hold_is_refused_under_the_flag_given(tiny_sp_run_dir,
                                                                        tmp_path):
    """`--onnx` implies the sentence-transformers folder, and its refusal names `--onnx`."""
    with pytest.raises(ValueError, match="^--onnx: the sentencepiece tokenizer"):
        export_lib.export(str(tmp_path / "out"), model_dir=str(tiny_sp_run_dir), onnx=True)
    assert list(tmp_path.iterdir()) == []


def test_the_options_record_onnx_with_its_folder():
    options = export_lib.export_options(onnx=True)
    assert options["sentence_transformers"] is True and options["onnx"] is True
    assert "onnx" not in export_lib.export_options(sentence_transformers=True)
