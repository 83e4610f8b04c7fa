"""The TF Hub and TF Serving contracts of `python -m export.export_tfhub`."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub
import tensorflow_text  # noqa: F401
import tf_keras
from tensorflow.core.protobuf import saved_model_pb2

import cmlm_tf
from cmlm_tf.commands import export as export_cli
from cmlm_tf.export import export_lib
from tests.conftest import REPO_DIR, TINY_EXPORT_SEQ_LENGTH

SENTENCES = ["the man is playing a guitar .", "a dog", "", "hello world !"]


@pytest.fixture(params=["wordpiece", "sentencepiece"])
def any_export(request):
    """The contract tests run on a WordPiece and on a SentencePiece export."""
    return request.getfixturevalue(
        {"wordpiece": "tiny_export", "sentencepiece": "tiny_sp_export"}[request.param])


def test_layout_and_metadata(any_export):
    for sub in ("preprocessor", "encoder", "serving/1"):
        assert (any_export / sub / "saved_model.pb").exists(), sub
    meta = json.loads((any_export / "cmlm_tf_export.json").read_text())
    assert meta["seq_length"] == TINY_EXPORT_SEQ_LENGTH
    assert meta["dim"] == 32
    assert not list(any_export.parent.glob(any_export.name + ".tmp-*")), \
        "staging folder left behind"


def test_hub_keras_layer_round_trip_and_gradients(any_export):
    preprocessor = hub.KerasLayer(str(any_export / "preprocessor"))
    encoder = hub.KerasLayer(str(any_export / "encoder"), trainable=True)
    text = tf_keras.layers.Input(shape=(), dtype=tf.string)
    outputs = encoder(preprocessor(text))
    model = tf_keras.Model(text, outputs["default"])
    batch = tf.constant(SENTENCES)

    inputs = preprocessor(batch)
    assert inputs["input_word_ids"].shape == (len(SENTENCES), TINY_EXPORT_SEQ_LENGTH)
    out = encoder(inputs)
    assert set(out) >= {"pooled_output", "default", "sequence_output", "encoder_outputs"}
    assert len(out["encoder_outputs"]) == 2
    np.testing.assert_allclose(tf.norm(out["default"], axis=-1), 1.0, rtol=1e-5)
    # `pooled_output` is the plain mean of the unmasked tokens, not BERT's tanh pooler.
    mask = tf.cast(inputs["input_mask"], tf.float32)[:, :, None]
    mean = tf.reduce_sum(out["sequence_output"] * mask, 1) / tf.reduce_sum(mask, 1)
    np.testing.assert_allclose(out["pooled_output"], mean, atol=1e-5)

    assert len(model.trainable_variables) > 10
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(batch, training=True) * tf.range(32, dtype=tf.float32))
    grads = tape.gradient(loss, model.trainable_variables)
    by_name = {v.name: g for v, g in zip(model.trainable_variables, grads)}
    word_grads = [g for n, g in by_name.items() if "word_embeddings" in n]
    assert word_grads and word_grads[0] is not None
    reached = [n for n, g in by_name.items() if g is not None
               and float(tf.reduce_sum(tf.abs(tf.convert_to_tensor(g)))) > 0]
    # Every trainable variable receives gradient (BERT's unused tanh pooler is frozen).
    assert len(reached) == len(by_name)


def test_training_flag_controls_dropout(any_export):
    preprocessor = hub.KerasLayer(str(any_export / "preprocessor"))
    encoder = hub.KerasLayer(str(any_export / "encoder"), trainable=True)
    inputs = preprocessor(tf.constant(SENTENCES))
    eval_a = encoder(inputs, training=False)["pooled_output"].numpy()
    eval_b = encoder(inputs, training=False)["pooled_output"].numpy()
    train = encoder(inputs, training=True)["pooled_output"].numpy()
    np.testing.assert_array_equal(eval_a, eval_b)
    assert np.abs(train - eval_a).max() > 1e-3


def test_preprocessor_contract_and_seq_length_override(any_export):
    preprocessor = tf.saved_model.load(str(any_export / "preprocessor"))
    special = preprocessor.tokenize.get_special_tokens_dict()
    special = {k: int(v) for k, v in special.items()}
    assert special["start_of_sequence_id"] == 2 and special["end_of_segment_id"] == 3
    assert special["padding_id"] == 0 and special["mask_id"] == 4
    tokens = preprocessor.tokenize(tf.constant(["hello world", "the dog"]))
    meta = json.loads((any_export / "cmlm_tf_export.json").read_text())
    # WordPiece: [batch, (words), (pieces)]; SentencePiece: [batch, (pieces)].
    ragged_rank = {"wordpiece": 2, "sentencepiece": 1}[meta["tokenizer"]["type"]]
    assert isinstance(tokens, tf.RaggedTensor) and tokens.ragged_rank == ragged_rank
    assert special["vocab_size"] == meta["vocab_size"]
    # Lower-casing happens inside the preprocessor.
    upper = preprocessor.tokenize(tf.constant(["HELLO World", "The DOG"]))
    assert upper.to_list() == tokens.to_list()
    # The export-time --seq_length (12, not the run's 16) survived save/load.
    packed = preprocessor(tf.constant(["hello world"]))
    assert packed["input_word_ids"].shape == (1, TINY_EXPORT_SEQ_LENGTH)
    pair = preprocessor.bert_pack_inputs([tokens, tokens], seq_length=tf.constant(8))
    assert pair["input_word_ids"].shape == (2, 8)
    ids = pair["input_word_ids"][0].numpy().tolist()
    assert ids[0] == 2 and ids.count(3) == 2
    assert pair["input_type_ids"][0].numpy().max() == 1


def test_serving_signatures_agree(any_export):
    serving = tf.saved_model.load(str(any_export / "serving" / "1"))
    assert set(serving.signatures) == {"serving_default", "from_token_ids"}
    default = serving.signatures["serving_default"]
    assert list(default.structured_outputs) == ["embeddings"]
    from_sentences = default(sentences=tf.constant(SENTENCES))["embeddings"].numpy()
    preprocessor = tf.saved_model.load(str(any_export / "preprocessor"))
    ids = preprocessor(tf.constant(SENTENCES))
    from_ids = serving.signatures["from_token_ids"](**ids)["embeddings"].numpy()
    np.testing.assert_allclose(from_sentences, from_ids, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(from_sentences, axis=1), 1.0, rtol=1e-5)


def test_serving_truncates_to_exported_seq_length(any_export):
    serving = tf.saved_model.load(str(any_export / "serving" / "1"))
    packed = serving.tokenize(tf.constant(["the man " * 50, "a"]))
    assert packed["input_word_ids"].shape == (2, TINY_EXPORT_SEQ_LENGTH)
    assert packed["input_mask"].numpy().sum(axis=1).tolist() == [TINY_EXPORT_SEQ_LENGTH, 3]


def test_serving_accepts_invalid_utf8(any_export):
    serving = tf.saved_model.load(str(any_export / "serving" / "1"))
    bad = tf.constant([b"hello \xff\xfe world", b"\xc3", b"ok"])
    out = serving.signatures["serving_default"](sentences=bad)["embeddings"].numpy()
    assert np.isfinite(out).all()


def test_encoder_has_no_tf_text_ops(any_export):
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((any_export / "encoder" / "saved_model.pb").read_bytes())
    ops = set()
    for meta_graph in proto.meta_graphs:
        ops.update(node.op for node in meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            ops.update(node.op for node in function.node_def)
    text_ops = {"CaseFoldUTF8", "NormalizeUTF8", "RegexSplitWithOffsets",
                "WordpieceTokenizeWithOffsets", "TFText>RoundRobinTrim", "SentencepieceOp",
                "SentencepieceTokenizeOp"}
    assert not ops & text_ops
    assert not [op for op in ops if op.startswith("TFText")]
    assert "MatMul" in ops or "BatchMatMulV2" in ops or "Einsum" in ops


def test_encoder_loads_in_fresh_process_without_tf_text(tiny_export):
    env = dict(os.environ, PYTHONPATH=str(REPO_DIR), TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, "-m", "tests.export.children",
                             "encoder_without_tensorflow_text", str(tiny_export / "encoder")],
                            capture_output=True, text=True, env=env, timeout=3600)
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-2000:]


def test_export_errors_name_the_bad_seq_length(tmp_path, tiny_run_dir):
    with pytest.raises(ValueError, match="seq_length"):
        export_lib.export(str(tmp_path / "e"), model_dir=str(tiny_run_dir), seq_length=1000)
    assert not (tmp_path / "e").exists()


def test_unknown_encoder_key_names_the_items_the_checkpoint_has(tmp_path, tiny_run_dir,
                                                                 capsys):
    rc = export_cli.main(["--model_dir", str(tiny_run_dir), "--export_dir",
                          str(tmp_path / "out"), "--encoder_key", "nope"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert f"{tiny_run_dir / 'ckpt-1'}: the checkpoint has no item 'nope'" in err
    assert "(its items: encoder)" in err and "does not fit" not in err
    assert not list(tmp_path.iterdir())


def test_an_export_up_to_date_with_its_checkpoint_is_not_redone(tmp_path, tiny_run_dir,
                                                                capsys):
    """`--overwrite` on an export of the same checkpoint with the same flags: one line, the
    export untouched. Another checkpoint or another flag exports again."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run)
    out = tmp_path / "out"
    args = ["--model_dir", str(run), "--export_dir", str(out), "--overwrite"]
    assert export_cli.main(args) == 0
    written = (out / "cmlm_tf_export.json").read_text()
    capsys.readouterr()
    assert export_cli.main(args) == 0
    said = capsys.readouterr().out
    assert f"{out} is up to date with " in said and "exported to" not in said, said
    # The command passed --overwrite: the line says what it does for a current export.
    assert said.strip().endswith(": kept as it is (--overwrite exports again once the "
                                 "checkpoint or a flag has changed)"), said
    assert (out / "cmlm_tf_export.json").read_text() == written
    assert export_cli.main(args + ["--seq_length", "10"]) == 0  # another flag
    assert "exported to" in capsys.readouterr().out
    assert json.loads((out / "cmlm_tf_export.json").read_text())["seq_length"] == 10


def kernel_constants(folder) -> dict:
    """dtype name -> how many 2-D constants the SavedModel at `folder` holds in its graphs."""
    proto = saved_model_pb2.SavedModel.FromString((folder / "saved_model.pb").read_bytes())
    counts = {}
    for meta_graph in proto.meta_graphs:
        nodes = list(meta_graph.graph_def.node)
        for function in meta_graph.graph_def.library.function:
            nodes += function.node_def
        for node in nodes:
            value = node.attr["value"].tensor
            if node.op == "Const" and len(value.tensor_shape.dim) == 2:
                name = tf.as_dtype(value.dtype).name
                counts[name] = counts.get(name, 0) + 1
    return counts


def serving_default(folder):
    loaded = tf.saved_model.load(str(folder))
    signature = loaded.signatures["serving_default"]
    assert list(signature.structured_outputs) == ["embeddings"]
    return loaded, signature(sentences=tf.constant(SENTENCES))["embeddings"].numpy()


def test_bf16_model_is_a_serving_folder_that_encode_runs_too(precision_export):
    """`serving_bf16/1` beside `serving/1`: the same signature, bfloat16 arithmetic (close to
    float32, not equal), and the graph `load(precision="bfloat16")` runs."""
    meta = json.loads((precision_export / "cmlm_tf_export.json").read_text())
    entry = meta["serving_models"]["bfloat16"]
    assert entry["folder"] == "serving_bf16/1" and entry["min_probe_cosine_to_float32"] >= 0.99
    assert meta["serving_models"]["float32"] == {"folder": "serving/1"}
    assert meta["options"]["bf16"] is True and meta["options"]["int8"] is True
    assert "| `serving_bf16/1/` |" in (precision_export / "README.md").read_text()
    _, float32 = serving_default(precision_export / "serving" / "1")
    module, bf16 = serving_default(precision_export / "serving_bf16" / "1")
    assert module.describe()["precision"].numpy() == b"bfloat16"
    assert (float32 * bf16).sum(axis=1).min() >= 0.99
    assert np.abs(float32 - bf16).max() > 0  # bfloat16 rounding shows
    # The dense kernels (2 layers of 4) are constants of the graph, held once however many
    # functions run them; serving/1 holds its bfloat16 ones too, its float32 ones in variables.
    assert kernel_constants(precision_export / "serving_bf16" / "1").get("bfloat16") == 8
    assert kernel_constants(precision_export / "serving" / "1").get("bfloat16") == 8
    model = cmlm_tf.load(str(precision_export), precision="bfloat16")
    assert model._serving.describe()["precision"].numpy() == b"bfloat16"
    assert (model.encode(SENTENCES) * bf16).sum(axis=1).min() >= 0.99999


def test_int8_model_is_a_serving_folder_that_encode_runs_too(precision_export):
    """`serving_int8/1`: the same signature, int8 weights, vectors close to float32's; a
    request of one text at a time is what `encode` gives for it too."""
    meta = json.loads((precision_export / "cmlm_tf_export.json").read_text())
    assert meta["serving_models"]["int8"]["folder"] == "serving_int8/1"
    _, float32 = serving_default(precision_export / "serving" / "1")
    module, int8 = serving_default(precision_export / "serving_int8" / "1")
    assert module.describe()["precision"].numpy() == b"int8"
    assert kernel_constants(precision_export / "serving_int8" / "1").get("int8") == 8
    assert (float32 * int8).sum(axis=1).min() >= 0.98
    assert np.abs(float32 - int8).max() > 0
    model = cmlm_tf.load(str(precision_export), precision="int8")
    signature = module.signatures["serving_default"]
    for text in SENTENCES:
        alone = signature(sentences=tf.constant([text]))["embeddings"].numpy()
        assert (model.encode([text]) * alone).sum() >= 0.99999


def test_an_export_without_int8_refuses_int8_with_the_flag_that_makes_it(tiny_export):
    with pytest.raises(ValueError, match="export it again with --int8"):
        cmlm_tf.load(str(tiny_export), precision="int8")
