"""Tests of `cmlm_tf.model_import.importer` (and the readers it dispatches to,
`checkpoints.py`, `hub.py`, `pooled_bert.py`): imports of TF1 BERT checkpoints, Model
Garden TF2 checkpoints and TF Hub BERT encoders.

The three are made here from one stand-in's weights (tests/testdata/st_standins/labse_layout:
LaBSE's layout, whose `Dense` module is BERT's tanh pooler): the original BERT's variable
names written to a checkpoint, Model Garden's own TF1 -> TF2 converter
(`tf2_bert_encoder_checkpoint_converter`) on it, and Model Garden's `export_tfhub_lib` on
that, so each has its family's exact layout. The reference vectors are the TF Hub encoder's
`pooled_output`, computed by Model Garden's network.
"""

import gzip
import json
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub
import tensorflow_text  # noqa: F401
from official.legacy.bert import configs as bert_configs
from official.nlp.tools import export_tfhub_lib, tf2_bert_encoder_checkpoint_converter
from safetensors.numpy import load_file

import cmlm_tf
from cmlm_tf.commands import export as export_cli
from cmlm_tf.export import export_lib, tflite
from cmlm_tf.model_import import hf_folder, importer
from tests.conftest import TESTS_DIR, cosines

STANDIN = TESTS_DIR / "testdata" / "st_standins" / "labse_layout"


def _tf1_name(hf_name):
    """Hugging Face BERT tensor name -> the original TF1 BERT's (kernels [in, out])."""
    name = re.sub(r"layer\.(\d+)", r"layer_\1", hf_name)
    name = name.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
        "LayerNorm.bias", "LayerNorm.beta")
    if name.startswith("embeddings.") and name.endswith("_embeddings.weight"):
        name = name[:-len(".weight")]
    transpose = name.endswith(".weight")
    if transpose:
        name = name[:-len("weight")] + "kernel"
    return "bert/" + name.replace(".", "/"), transpose


def _write_tf1_checkpoint(folder):
    config = json.loads((STANDIN / "config.json").read_text())
    folder.mkdir()
    (folder / "bert_config.json").write_text(json.dumps({
        key: config[key] for key in (
            "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "intermediate_size", "hidden_dropout_prob", "attention_probs_dropout_prob",
            "max_position_embeddings", "type_vocab_size", "initializer_range")} | {
        "hidden_act": "gelu"}))
    vocab = hf_folder.read_wordpiece_vocab(str(STANDIN))
    (folder / "vocab.txt").write_text("".join(token + "\n" for token in vocab),
                                      encoding="utf-8")
    variables = {}
    for hf_name, value in load_file(str(STANDIN / "model.safetensors")).items():
        if hf_name.endswith("position_ids"):
            continue
        name, transpose = _tf1_name(hf_name)
        variables[name] = value.T if transpose else value
    dense = load_file(str(STANDIN / "2_Dense" / "model.safetensors"))
    variables["bert/pooler/dense/kernel"] = dense["linear.weight"].T
    variables["bert/pooler/dense/bias"] = dense["linear.bias"]
    # What a pre-training checkpoint also holds, and an import leaves out.
    variables["bert/pooler/dense/kernel/adam_m"] = np.zeros_like(dense["linear.weight"])
    variables["global_step"] = np.asarray(1000, np.int64)
    names = sorted(variables)
    tf.raw_ops.SaveV2(prefix=str(folder / "bert_model.ckpt"), tensor_names=names,
                      shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(variables[name]) for name in names])
    return folder


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    """{family: folder} for tf1_checkpoint, tf2_checkpoint and tf_hub, and the TF Hub
    encoder's pooled vectors on the stand-in golden ids."""
    root = tmp_path_factory.mktemp("families")
    tf1 = _write_tf1_checkpoint(root / "tf1")
    bert_config = bert_configs.BertConfig.from_json_file(str(tf1 / "bert_config.json"))
    tf2 = root / "tf2"
    tf2.mkdir()
    tf2_bert_encoder_checkpoint_converter.convert_checkpoint(
        bert_config, str(tf2 / "bert_model.ckpt"), str(tf1 / "bert_model.ckpt"))
    for name in ("bert_config.json", "vocab.txt"):
        shutil.copy(tf1 / name, tf2 / name)
    hub = root / "hub_encoder"
    export_tfhub_lib.export_model(str(hub), bert_config=bert_config,
                                  model_checkpoint_path=tf.train.latest_checkpoint(str(tf2)),
                                  with_mlm=False, vocab_file=str(tf1 / "vocab.txt"),
                                  do_lower_case=False)
    return {"tf1_checkpoint": tf1, "tf2_checkpoint": tf2, "tf_hub": hub}


@pytest.fixture(scope="module")
def golden():
    with gzip.open(TESTS_DIR / "testdata" / "st_standins_golden.json.gz", "rt",
                   encoding="utf-8") as f:
        data = json.load(f)
    return data["texts"], data["sources"], data["models"]["labse_layout"]


@pytest.fixture(scope="module")
def hub_reference(families, golden):
    """The TF Hub encoder's own pooled_output on the golden ids, L2-normalised."""
    _, _, model = golden
    ids = tf.ragged.constant(model["ids"]).to_tensor()
    inputs = {"input_word_ids": tf.cast(ids, tf.int32),
              "input_mask": tf.cast(ids != 0, tf.int32),
              "input_type_ids": tf.zeros_like(ids, tf.int32)}
    pooled = hub.KerasLayer(str(families["tf_hub"]))(inputs)["pooled_output"].numpy()
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def test_families_are_detected(families):
    for family, folder in families.items():
        assert importer.detect(str(folder))[0] == family
    assert importer.detect(str(STANDIN)) == ("hugging_face", str(STANDIN))


def test_the_made_families_hold_the_standin(hub_reference, golden):
    # BERT's TF code uses the tanh GELU, sentence-transformers the exact one: the vectors
    # agree closely, not exactly.
    _, _, model = golden
    assert cosines(hub_reference, model["vectors"]).min() > 0.999


@pytest.mark.parametrize("family", ["tf1_checkpoint", "tf2_checkpoint", "tf_hub"])
def test_every_export_form_of_an_import_equals_the_tf_hub_encoder(tmp_path, families, golden,
                                                                 hub_reference, family):
    """Import, then export with TFLite: the ids equal BERT's tokenizer's (Hugging Face's, on
    the stand-in's vocabulary) and every form's vectors reach cosine 0.99999 to the TF Hub
    encoder's on UDHR paragraphs in 68 languages."""
    texts, sources, model = golden
    export_dir = tmp_path / "export"
    export_lib.export(str(export_dir), hf_dir=str(families[family]), tflite=True)
    meta = json.loads((export_dir / "cmlm_tf_export.json").read_text())
    assert meta["source"]["kind"] == family
    encoder_config = meta["encoder"]
    assert (encoder_config["pooling"], encoder_config["projection_activation"],
            encoder_config["hidden_activation"], meta["tokenizer"]["lower_case"]) == (
        "cls", "tanh", "gelu_approx", False)
    loaded = cmlm_tf.load(str(export_dir))
    tokens = loaded._serving.tokenize(tf.constant(texts))
    ids = [row[:length] for row, length in zip(tokens["input_word_ids"].numpy().tolist(),
                                               tokens["input_mask"].numpy().sum(1))]
    differing = [source for source, got, want in zip(sources, ids, model["ids"]) if got != want]
    assert not differing, differing
    hub_inputs = hub.KerasLayer(str(export_dir / "preprocessor"))(tf.constant(texts))
    runner = tflite.load_interpreter(str(export_dir / "tflite" / "model_float32.tflite"))
    paths = {
        "encode": loaded.encode(texts),
        "serving_default": loaded._serving.signatures["serving_default"](
            sentences=tf.constant(texts))["embeddings"].numpy(),
        "hub": hub.KerasLayer(str(export_dir / "encoder"))(hub_inputs)["default"].numpy(),
        "tflite_float32": tflite.embed(runner, sentences=texts),
    }
    for path, vectors in paths.items():
        found = cosines(vectors, hub_reference)
        assert found.min() >= 0.99999, (path, sources[found.argmin()], found.min())


def test_not_a_model_folder_is_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    rc = export_cli.main(["--import_dir", str(tmp_path / "empty"),
                          "--export_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "empty: not a model this can import: no config.json" in err[0]


def test_checkpoint_config_errors_name_the_file_and_field(tmp_path, families):
    folder = tmp_path / "tf1"
    shutil.copytree(families["tf1_checkpoint"], folder)
    config = json.loads((folder / "bert_config.json").read_text())
    (folder / "bert_config.json").write_text(json.dumps({**config, "hidden_act": "tanh"}))
    with pytest.raises(ValueError, match=r"bert_config\.json: hidden_act 'tanh'"):
        importer.convert(str(folder), str(tmp_path / "out"))
    del config["num_hidden_layers"]
    (folder / "bert_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"bert_config\.json: field num_hidden_layers"):
        importer.convert(str(folder), str(tmp_path / "out"))
