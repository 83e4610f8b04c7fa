"""Tests of `cmlm_tf.model_import.hf_bert`: Hugging Face folders converted, warm starts and
strict restores, and the sentence-transformers stand-ins through every export form."""

import gzip
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub
import tensorflow_text  # noqa: F401
import tf_keras

import cmlm_tf
from cmlm_tf import config_files, configs
from cmlm_tf.commands import export as export_cli
from cmlm_tf.export import export_lib, serving_forward, tflite
from cmlm_tf.model_import import hf_bert
from cmlm_tf.modeling import sentence_encoder
from cmlm_tf.text import tokenization
from tests.conftest import (
    REPO_DIR,
    TESTS_DIR,
    cosines,
    subprocess_env,
    tiny_encoder_config,
)
from tests.model_import.conftest import HIDDEN, make_hf_dir


def test_warm_start_restores_same_weights_into_fresh_model(tmp_path):
    hf_dir, _ = make_hf_dir(tmp_path / "hf")
    warm_start = hf_bert.convert(str(hf_dir), str(tmp_path / "out"))
    params = config_files.load_experiment_config([warm_start])
    first = sentence_encoder.build_sentence_encoder(params.task.model.encoder)
    sentence_encoder.restore_encoder(first, params.task.init_checkpoint)
    fresh = sentence_encoder.build_sentence_encoder(params.task.model.encoder)
    assert any(not np.array_equal(a.numpy(), b.numpy())
               for a, b in zip(first.weights, fresh.weights))
    sentence_encoder.restore_encoder(fresh, params.task.init_checkpoint)
    assert len(first.weights) == len(fresh.weights)
    for a, b in zip(first.weights, fresh.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # A recipe after the warm start still overrides pooling.
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("task:\n  model:\n    encoder:\n      pooling: cls\n")
    params = config_files.load_experiment_config([warm_start, str(recipe)])
    assert params.task.model.encoder.pooling == "cls"
    assert params.task.model.encoder.hidden_size == HIDDEN


def test_restore_errors_name_the_file(tmp_path, tiny_run_dir, tiny_vocab):
    vocab_size = len(tiny_vocab.read_text().splitlines())
    with pytest.raises(FileNotFoundError, match="no_such_ckpt"):
        sentence_encoder.restore_encoder(
            sentence_encoder.build_sentence_encoder(tiny_encoder_config(vocab_size)),
            str(tmp_path / "no_such_ckpt"))
    wider = sentence_encoder.build_sentence_encoder(
        tiny_encoder_config(vocab_size, hidden_size=48))
    with pytest.raises(ValueError, match="ckpt-1"):
        sentence_encoder.restore_encoder(wider, str(tiny_run_dir))
    # A checkpoint without an `encoder` item matches nothing: an error, not a no-op.
    other = tf.train.Checkpoint(something=tf.Variable(1.0)).write(str(tmp_path / "other"))
    narrow = sentence_encoder.build_sentence_encoder(tiny_encoder_config(vocab_size))
    with pytest.raises(ValueError, match="other"):
        sentence_encoder.restore_encoder(narrow, other)


def test_bad_config_key_names_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("task:\n  model:\n    encoder:\n      hiden_size: 8\n")
    with pytest.raises(ValueError, match="hiden_size"):
        config_files.load_experiment_config([str(bad)])
    with pytest.raises(ValueError, match="pooling"):
        sentence_encoder.build_sentence_encoder(configs.EncoderConfig(pooling="sum"))


# sentence-transformers stand-ins (tests/testdata/make_st_standins.py): each family's exact layout,
# random weights, golden ids and vectors from sentence-transformers on UDHR paragraphs.
STANDINS = TESTS_DIR / "testdata" / "st_standins"
STANDIN_LAYOUTS = {
    # name: (tokenizer, pooling, projection_size, projection_activation, lower_case,
    #        layer_norm_epsilon, normalize, vocab_size)
    "labse_layout": ("wordpiece", "cls", 64, "tanh", False, 1e-12, True, 3000),
    "st6_bert_mean": ("wordpiece", "mean", 0, "linear", True, 1e-7, True, 3000),
    "xlmr_layout": ("xlmr_sentencepiece", "mean", 0, "linear", False, 1e-5, False, 4002),
    "bert_sentencepiece": ("xlmr_sentencepiece", "mean", 0, "linear", False, 1e-12, True, 4002),
}


@pytest.fixture(scope="module")
def standin_golden():
    with gzip.open(TESTS_DIR / "testdata" / "st_standins_golden.json.gz", "rt",
                   encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module", params=sorted(STANDIN_LAYOUTS))
def standin_export(request, tmp_path_factory):
    """One export (with TFLite) per stand-in, shared by its checks."""
    export_dir = tmp_path_factory.mktemp("standins") / request.param
    export_lib.export(str(export_dir), hf_dir=str(STANDINS / request.param), tflite=True)
    return request.param, export_dir


def test_standin_layout_is_read(standin_export, standin_golden):
    name, export_dir = standin_export
    meta = json.loads((export_dir / "cmlm_tf_export.json").read_text())
    encoder = meta["encoder"]
    assert (meta["tokenizer"]["type"], encoder["pooling"], encoder["projection_size"],
            encoder["projection_activation"], meta["tokenizer"]["lower_case"],
            encoder["layer_norm_epsilon"], encoder["normalize"], meta["vocab_size"]) == \
        STANDIN_LAYOUTS[name]
    epsilon = encoder["layer_norm_epsilon"]
    assert meta["seq_length"] == 128
    # Every LayerNorm, in the Keras encoder and in the inference forward, has the folder's
    # epsilon.
    keras_encoder = sentence_encoder.build_sentence_encoder(configs.EncoderConfig(**encoder))
    norms = [layer for layer in keras_encoder.bert.submodules
             if isinstance(layer, tf_keras.layers.LayerNormalization)]
    forward = serving_forward.InferenceForward(keras_encoder, precisions=("float32",))
    assert len(norms) == 1 + 2 * 2
    assert {layer.epsilon for layer in norms} | {forward.embedding_epsilon} | {
        layer.epsilon for layer in forward.layers} == {epsilon}
    assert not (STANDINS / name / "vocab.txt").exists()  # read from tokenizer.json
    if name == "xlmr_layout":  # 130 position rows, from the padding id + 1 on
        assert (encoder["max_position_embeddings"], encoder["type_vocab_size"]) == (128, 1)
    assert len({source.split(":")[0] for source in standin_golden["sources"]}) >= 50
    assert len(standin_golden["scripts"]) >= 25


def test_standin_every_export_form_equals_sentence_transformers(standin_export,
                                                                standin_golden):
    """Token ids identical to the stand-in's own tokenizer, and vectors at cosine >= 0.99999
    to sentence-transformers' from encode(), serving/1's serving_default, the TF Hub
    preprocessor + encoder and TFLite float32 (from text, or from serving/1's token ids for
    SentencePiece), on UDHR paragraphs in 68 languages."""
    name, export_dir = standin_export
    texts = standin_golden["texts"]
    expected_ids = standin_golden["models"][name]["ids"]
    expected = standin_golden["models"][name]["vectors"]
    model = cmlm_tf.load(str(export_dir))
    tokens = model._serving.tokenize(tf.constant(texts))
    ids = [row[:length] for row, length in zip(tokens["input_word_ids"].numpy().tolist(),
                                               tokens["input_mask"].numpy().sum(1))]
    differing = [source for source, got, want in zip(standin_golden["sources"], ids,
                                                     expected_ids) if got != want]
    assert not differing, differing
    preprocessor = hub.KerasLayer(str(export_dir / "preprocessor"))
    encoder = hub.KerasLayer(str(export_dir / "encoder"))
    hub_inputs = preprocessor(tf.constant(texts))
    hub_ids = [row[:length] for row, length in zip(hub_inputs["input_word_ids"].numpy().tolist(),
                                                   hub_inputs["input_mask"].numpy().sum(1))]
    assert hub_ids == expected_ids
    runner = tflite.load_interpreter(str(export_dir / "tflite" / "model_float32.tflite"))
    paths = {
        "encode": model.encode(texts),
        "serving_default": model._serving.signatures["serving_default"](
            sentences=tf.constant(texts))["embeddings"].numpy(),
        "hub": encoder(hub_inputs)["default"].numpy(),
    }
    if "serving_default" in runner.get_signature_list():
        paths["tflite_float32"] = tflite.embed(runner, sentences=texts)
    else:
        paths["tflite_float32"] = tflite.embed(
            runner, signature="from_token_ids",
            **{key: value.numpy() for key, value in tokens.items()})
    assert len(paths) == 4
    for path, vectors in paths.items():
        found = cosines(vectors, expected)
        assert found.min() >= 0.99999, (path, standin_golden["sources"][found.argmin()],
                                        found.min())


@pytest.mark.parametrize("change, message", [
    ({"config.json": {"model_type": "t5"}}, r"config\.json: model_type 't5'"),
    ({"config.json": {"model_type": "roberta"}}, r"config\.json: model_type 'roberta'"),
    ({"modules.json": "unknown"}, r"modules\.json: module 1 has type 'sentence_transformers"
                                  r"\.models\.WordWeights'"),
    ({"1_Pooling/config.json": {"pooling_mode": "lasttoken"}},
     r"1_Pooling/config\.json: pooling_mode 'lasttoken'"),
    ({"2_Dense/config.json": {"activation_function": "torch.nn.modules.activation.GELU"}},
     r"2_Dense/config\.json: activation_function 'torch\.nn\.modules\.activation\.GELU'"),
])
def test_unsupported_layout_is_one_line_naming_file_and_field(tmp_path, capsys, change,
                                                              message):
    hf_dir = tmp_path / "labse_layout"
    shutil.copytree(STANDINS / "labse_layout", hf_dir)
    for file_name, fields in change.items():
        path = hf_dir / file_name
        if fields == "unknown":
            modules = json.loads(path.read_text())
            modules.insert(1, {"idx": 1, "name": "1", "path": "1_WordWeights",
                               "type": "sentence_transformers.models.WordWeights"})
            path.write_text(json.dumps(modules))
        else:
            path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))
    rc = export_cli.main(["--hf_dir", str(hf_dir), "--export_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert re.search(message, err[0]), err[0]
    assert not (tmp_path / "out").exists()


def test_plain_hugging_face_folder_is_cls_pooled_and_not_normalised(tmp_path):
    hf_dir, _ = make_hf_dir(tmp_path / "hf")
    (hf_dir / "modules.json").unlink()
    shutil.rmtree(hf_dir / "1_Pooling")
    params = config_files.load_experiment_config([hf_bert.convert(str(hf_dir),
                                                                     str(tmp_path / "out"))])
    encoder = params.task.model.encoder
    assert (encoder.pooling, encoder.normalize, encoder.projection_size) == ("cls", False, 0)


@pytest.mark.parametrize("name, experiment", [("labse_layout", "bitext"),
                                              ("xlmr_layout", "moco")])
def test_fine_tune_from_an_imported_standin_trains_and_exports(tmp_path, name, experiment,
                                                               standin_golden):
    """Convert, `python -m cmlm_tf.train` (additive-margin bitext as docs/import.md shows, or
    momentum contrast, on the bundled pairs) and export: the run starts from the imported
    weights (its vectors stay near the import's) and trains them (they move), with the
    import's tokenizer."""
    warm_start = hf_bert.convert(str(STANDINS / name), str(tmp_path / "imported"))
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "cmlm_tf.train", f"--experiment=cmlm_tf/{experiment}",
         f"--config_file={warm_start}", "--mode=train", f"--model_dir={run_dir}",
         "--params_override=task.train_data.input_path=cmlm_tf/data/corpus/bible_en_es.tsv,"
         "task.train_data.global_batch_size=16,task.train_data.seq_length=32,"
         "trainer.train_steps=4,trainer.steps_per_loop=2,trainer.checkpoint_interval=4,"
         "trainer.optimizer_config.learning_rate.polynomial.initial_learning_rate=0.0001,"
         "trainer.optimizer_config.warmup.linear.warmup_steps=1"
         + (",task.moco.queue_size=32" if experiment == "moco" else "")],
        cwd=REPO_DIR, env=subprocess_env(), capture_output=True, text=True, timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]
    export_lib.export(str(tmp_path / "export"), model_dir=str(run_dir))
    model = cmlm_tf.load(str(tmp_path / "export"))
    texts = standin_golden["texts"][:20]
    tokens = model._serving.tokenize(tf.constant(texts))
    ids = [row[:length] for row, length in zip(tokens["input_word_ids"].numpy().tolist(),
                                               tokens["input_mask"].numpy().sum(1))]
    assert ids == [row[:32] if len(row) <= 32 else row[:31] + row[-1:]
                   for row in standin_golden["models"][name]["ids"][:20]]
    found = cosines(model.encode(texts), standin_golden["models"][name]["vectors"][:20])
    assert 0.9 < found.min() and found.max() < 0.99999, found


def test_xlmr_folder_without_its_sentencepiece_model_is_one_line(tmp_path, capsys):
    hf_dir = tmp_path / "xlmr_layout"
    shutil.copytree(STANDINS / "xlmr_layout", hf_dir)
    (hf_dir / "sentencepiece.bpe.model").unlink()
    rc = export_cli.main(["--hf_dir", str(hf_dir), "--export_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert re.search(r"xlmr_layout/sentencepiece\.bpe\.model: required file not found", err[0])


def test_xlmr_tokenizer_refuses_a_model_without_xlmr_first_pieces(tiny_sp_model):
    with pytest.raises(ValueError, match=r"the first pieces are .* not XLM-R's"):
        tokenization.XlmrSentencepieceTokenizer(str(tiny_sp_model))
    with pytest.raises(ValueError, match="not a SentencePiece model"):
        tokenization.XlmrSentencepieceTokenizer(str(STANDINS / "xlmr_layout" / "config.json"))
