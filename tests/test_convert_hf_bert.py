"""Weight import from Hugging Face BERT folders, warm starts and strict restores."""

import gzip
import json
import re

import numpy as np
import pytest
import tensorflow as tf

from cmlm_tf import configs, convert_hf_bert
from cmlm_tf.modeling import sentence_encoder
from tests.conftest import (
    REPO_DIR,
    TESTS_DIR,
    cosines,
    subprocess_env,
    tiny_encoder_config,
    write_tiny_vocab,
)

HIDDEN, LAYERS, HEADS, INNER = 32, 2, 4, 64


def _fake_hf_tensors(vocab_size, rng, prefix=""):
    def r(*shape):
        return rng.standard_normal(shape).astype(np.float32) * 0.05

    t = {
        "embeddings.word_embeddings.weight": r(vocab_size, HIDDEN),
        "embeddings.position_embeddings.weight": r(64, HIDDEN),
        "embeddings.token_type_embeddings.weight": r(2, HIDDEN),
        "embeddings.LayerNorm.weight": 1 + r(HIDDEN),
        "embeddings.LayerNorm.bias": r(HIDDEN),
        "embeddings.position_ids": np.arange(64, dtype=np.int64)[None],
        "pooler.dense.weight": r(HIDDEN, HIDDEN),
        "pooler.dense.bias": r(HIDDEN),
    }
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for name in ("query", "key", "value"):
            t[p + f"attention.self.{name}.weight"] = r(HIDDEN, HIDDEN)
            t[p + f"attention.self.{name}.bias"] = r(HIDDEN)
        t[p + "attention.output.dense.weight"] = r(HIDDEN, HIDDEN)
        t[p + "attention.output.dense.bias"] = r(HIDDEN)
        t[p + "attention.output.LayerNorm.weight"] = 1 + r(HIDDEN)
        t[p + "attention.output.LayerNorm.bias"] = r(HIDDEN)
        t[p + "intermediate.dense.weight"] = r(INNER, HIDDEN)
        t[p + "intermediate.dense.bias"] = r(INNER)
        t[p + "output.dense.weight"] = r(HIDDEN, INNER)
        t[p + "output.dense.bias"] = r(HIDDEN)
        t[p + "output.LayerNorm.weight"] = 1 + r(HIDDEN)
        t[p + "output.LayerNorm.bias"] = r(HIDDEN)
    return {prefix + k: v for k, v in t.items()}


def make_hf_dir(path, extra_tensors=None, prefix="", drop=None):
    from safetensors.numpy import save_file

    path.mkdir(parents=True, exist_ok=True)
    vocab = write_tiny_vocab(path / "vocab.txt")
    vocab_size = len(vocab.read_text(encoding="utf-8").splitlines())
    (path / "config.json").write_text(json.dumps({
        "model_type": "bert", "hidden_act": "gelu", "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "intermediate_size": INNER,
        "max_position_embeddings": 64, "type_vocab_size": 2, "vocab_size": vocab_size,
        "layer_norm_eps": 1e-12}))
    # The casing trap: sentence_bert_config's do_lower_case is not the tokenizer's casing.
    (path / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": 20, "do_lower_case": False}))
    (path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    (path / "1_Pooling").mkdir(exist_ok=True)
    (path / "1_Pooling" / "config.json").write_text(json.dumps(
        {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}))
    (path / "modules.json").write_text(json.dumps([
        {"type": "sentence_transformers.models.Transformer"},
        {"type": "sentence_transformers.models.Pooling"},
        {"type": "sentence_transformers.models.Normalize"}]))
    tensors = _fake_hf_tensors(vocab_size, np.random.default_rng(0), prefix)
    tensors.update(extra_tensors or {})
    for name in drop or []:
        tensors.pop(name)
    save_file(tensors, str(path / "model.safetensors"))
    return path, tensors


def _reference_bert(tensors, ids, prefix=""):
    """An independent numpy BERT forward (HF layout) returning mean-pooled vectors."""
    from scipy.special import erf

    def w(name):
        return tensors[prefix + name].astype(np.float64)

    def layer_norm(x, name):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * w(name + ".weight") + w(name + ".bias")

    def linear(x, name):
        return x @ w(name + ".weight").T + w(name + ".bias")

    seq = ids.shape[1]
    x = w("embeddings.word_embeddings.weight")[ids] + w(
        "embeddings.position_embeddings.weight")[:seq] + w(
        "embeddings.token_type_embeddings.weight")[0]
    x = layer_norm(x, "embeddings.LayerNorm")
    head = HIDDEN // HEADS
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."

        def split(t):
            return t.reshape(t.shape[0], seq, HEADS, head).transpose(0, 2, 1, 3)

        q, k, v = (split(linear(x, p + f"attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = layer_norm(x + linear(context, p + "attention.output.dense"),
                       p + "attention.output.LayerNorm")
        hidden = linear(x, p + "intermediate.dense")
        hidden = 0.5 * hidden * (1 + erf(hidden / np.sqrt(2)))
        x = layer_norm(x + linear(hidden, p + "output.dense"), p + "output.LayerNorm")
    return x.mean(1)


@pytest.mark.parametrize("prefix", ["", "bert."])
def test_conversion_matches_independent_forward(tmp_path, prefix):
    hf_dir, tensors = make_hf_dir(tmp_path / "hf", prefix=prefix)
    warm_start = convert_hf_bert.convert(str(hf_dir), str(tmp_path / "out"))
    params = configs.load_experiment_config([warm_start])
    model = params.task.model
    assert model.encoder.pooling == "mean" and model.encoder.normalize
    assert model.encoder.hidden_activation == "gelu_exact"
    assert model.tokenizer.lower_case is True
    source = json.loads((tmp_path / "out" / "source.json").read_text())
    assert source["max_seq_length"] == 20
    encoder = sentence_encoder.build_sentence_encoder(model.encoder)
    sentence_encoder.restore_encoder(encoder, params.task.init_checkpoint)
    ids = np.array([[2, 10, 11, 12, 3], [2, 20, 21, 22, 3]])
    ones = tf.ones(ids.shape, tf.int32)
    out = encoder({"input_word_ids": tf.constant(ids, tf.int32), "input_mask": ones,
                   "input_type_ids": tf.zeros_like(ones)}, training=False)
    np.testing.assert_allclose(out["pooled_output"].numpy(),
                               _reference_bert(tensors, ids, prefix), atol=2e-5)


def test_warm_start_restores_same_weights_into_fresh_model(tmp_path):
    hf_dir, _ = make_hf_dir(tmp_path / "hf")
    warm_start = convert_hf_bert.convert(str(hf_dir), str(tmp_path / "out"))
    params = configs.load_experiment_config([warm_start])
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
    params = configs.load_experiment_config([warm_start, str(recipe)])
    assert params.task.model.encoder.pooling == "cls"
    assert params.task.model.encoder.hidden_size == HIDDEN


def test_unused_tensor_is_an_error(tmp_path):
    hf_dir, _ = make_hf_dir(tmp_path / "hf", extra_tensors={
        "cls.predictions.bias": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match=r"cls\.predictions\.bias"):
        convert_hf_bert.convert(str(hf_dir), str(tmp_path / "out"))


def test_missing_tensor_is_an_error(tmp_path):
    hf_dir, _ = make_hf_dir(tmp_path / "hf", drop=["encoder.layer.1.output.dense.bias"])
    with pytest.raises(ValueError, match="model.safetensors"):
        convert_hf_bert.convert(str(hf_dir), str(tmp_path / "out"))


def test_converter_cli_reports_missing_folder(tmp_path, capsys):
    assert convert_hf_bert.main(["--hf_dir", str(tmp_path / "nope"),
                                 "--output_dir", str(tmp_path / "out")]) == 2
    assert "nope" in capsys.readouterr().err


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
        configs.load_experiment_config([str(bad)])
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
    from cmlm_tf.export import export_lib

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
    import tf_keras

    from cmlm_tf.export import serving_forward

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
    import tensorflow as tf
    import tensorflow_hub as hub
    import tensorflow_text  # noqa: F401

    import cmlm_tf
    from cmlm_tf.export import tflite

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
    import shutil

    from cmlm_tf.export import cli as export_cli

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


def test_old_pooling_flags_and_vocab_txt_still_read(tmp_path):
    # make_hf_dir writes sentence-transformers 2's flags and a vocab.txt; here both layouts
    # of the pooling config name the same mode.
    assert convert_hf_bert._pooling_mode({"pooling_mode_cls_token": True}, "p") == "cls"
    assert convert_hf_bert._pooling_mode({"pooling_mode": "max"}, "p") == "max"
    with pytest.raises(ValueError, match="pooling_mode_mean_sqrt_len_tokens"):
        convert_hf_bert._pooling_mode({"pooling_mode_mean_sqrt_len_tokens": True}, "p")


def test_plain_hugging_face_folder_is_cls_pooled_and_not_normalised(tmp_path):
    import shutil

    hf_dir, _ = make_hf_dir(tmp_path / "hf")
    (hf_dir / "modules.json").unlink()
    shutil.rmtree(hf_dir / "1_Pooling")
    params = configs.load_experiment_config([convert_hf_bert.convert(str(hf_dir),
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
    import subprocess
    import sys

    import cmlm_tf
    from cmlm_tf.export import export_lib

    warm_start = convert_hf_bert.convert(str(STANDINS / name), str(tmp_path / "imported"))
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
    import shutil

    from cmlm_tf.export import cli as export_cli

    hf_dir = tmp_path / "xlmr_layout"
    shutil.copytree(STANDINS / "xlmr_layout", hf_dir)
    (hf_dir / "sentencepiece.bpe.model").unlink()
    rc = export_cli.main(["--hf_dir", str(hf_dir), "--export_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert re.search(r"xlmr_layout/sentencepiece\.bpe\.model: required file not found", err[0])


def test_xlmr_tokenizer_refuses_a_model_without_xlmr_first_pieces(tiny_sp_model):
    from cmlm_tf import tokenization

    with pytest.raises(ValueError, match=r"the first pieces are .* not XLM-R's"):
        tokenization.XlmrSentencepieceTokenizer(str(tiny_sp_model))
    with pytest.raises(ValueError, match="not a SentencePiece model"):
        tokenization.XlmrSentencepieceTokenizer(str(STANDINS / "xlmr_layout" / "config.json"))


@pytest.mark.parametrize("file,change,message", [
    ("config.json", [1, 2], r"config\.json: expected a JSON object, got list"),
    ("config.json", {"hidden_size": "384"},
     r"config\.json: hidden_size: expected an integer, got '384'"),
    ("config.json", {"num_hidden_layers": 0},
     r"config\.json: num_hidden_layers: must be at least 1"),
    ("config.json", {"num_attention_heads": 5},
     r"config\.json: hidden_size: 32 is not a multiple of num_attention_heads 5"),
    ("config.json", {"hidden_dropout_prob": 1.5},
     r"config\.json: hidden_dropout_prob: must be in \[0, 1\], got 1\.5"),
    ("config.json", {"vocab_size": None}, r"config\.json: vocab_size: expected an integer"),
    ("sentence_bert_config.json", {"max_seq_length": 1000},
     r"sentence_bert_config\.json: max_seq_length: must be in \[1, 64\], got 1000"),
    ("sentence_bert_config.json", {"max_seq_length": "abc"},
     r"sentence_bert_config\.json: max_seq_length: expected an integer, got 'abc'"),
    ("modules.json", {"not": "a list"}, r"modules\.json: expected a JSON list, got dict"),
    ("modules.json", ["Transformer"], r"modules\.json: module 0: expected a JSON object"),
])
def test_every_config_field_read_is_checked_and_named(tmp_path, capsys, file, change, message):
    from cmlm_tf.export import cli as export_cli

    hf_dir, _ = make_hf_dir(tmp_path / "hf")
    path = hf_dir / file
    if isinstance(change, dict) and file != "modules.json":
        change = {**json.loads(path.read_text()), **change}
    path.write_text(json.dumps(change))
    with pytest.raises(ValueError, match=message):
        convert_hf_bert.read_hf_metadata(str(hf_dir))
    # The command says it in one line, exit 2, before any weight is read.
    rc = export_cli.main(["--hf_dir", str(hf_dir), "--export_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert re.search(message, err[0]), err
    assert not (tmp_path / "out").exists()


def test_a_huge_tokenizer_model_max_length_is_capped_at_the_position_table(tmp_path):
    hf_dir, _ = make_hf_dir(tmp_path / "hf")
    (hf_dir / "sentence_bert_config.json").unlink()
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(
        {"do_lower_case": True, "model_max_length": 1000000000000000019884624838656}))
    assert convert_hf_bert.read_hf_metadata(str(hf_dir))["max_seq_length"] == 64
