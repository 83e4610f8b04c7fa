"""The sentence-transformers folder's files (cmlm_tf/export/sentence_transformers_folder.py),
and the encoders it refuses. sentence-transformers itself loads the folders in the MTEB venv
(tests/mteb_extra/test_sentence_transformers_export.py)."""

import json

import numpy as np
import onnx
import pytest
import tf_keras
from safetensors.numpy import load_file

import cmlm_tf
from cmlm_tf import configs
from cmlm_tf.export import export_lib
from cmlm_tf.export import sentence_transformers_folder as st_folder
from cmlm_tf.export.export_metadata import METADATA_FILE
from cmlm_tf.modeling import sentence_encoder
from tests.conftest import TESTS_DIR, tiny_encoder_config

STANDINS = TESTS_DIR / "testdata" / "st_standins"
XLMR_SP_MODEL = STANDINS / "xlmr_layout" / "sentencepiece.bpe.model"


def _labse_layout_model(tiny_vocab):
    vocab_size = len(tiny_vocab.read_text(encoding="utf-8").splitlines())
    encoder = tiny_encoder_config(vocab_size, pooling="cls", projection_size=6,
                                  projection_activation="tanh")
    return configs.SentenceModelConfig(
        encoder=encoder, tokenizer=configs.TokenizerConfig(vocab_file=str(tiny_vocab),
                                                           lower_case=False))


def test_the_labse_layout_is_written_as_sentence_transformers_saves_it(tiny_vocab, tmp_path):
    model = _labse_layout_model(tiny_vocab)
    tf_keras.utils.set_random_seed(2)
    encoder = sentence_encoder.build_sentence_encoder(model.encoder)
    folder = tmp_path / "st"
    written = st_folder.write_folder(str(folder), encoder, model, seq_length=20,
                                     card_lines="- Source: a test", dim=6, onnx=True)
    assert written["modules"] == ["Transformer", "Pooling", "Dense", "Normalize"]
    assert written["onnx"]["int8"] == "onnx/model_qint8_avx512_vnni.onnx"
    assert sorted(p.name for p in (folder / "onnx").iterdir()) == [
        "model.onnx", "model_qint8_avx512_vnni.onnx"]

    def read(name):
        return json.loads((folder / name).read_text(encoding="utf-8"))

    assert [m["path"] for m in read("modules.json")] == ["", "1_Pooling", "2_Dense",
                                                         "3_Normalize"]
    assert read("sentence_bert_config.json")["max_seq_length"] == 20
    pooling = read("1_Pooling/config.json")
    assert pooling["pooling_mode_cls_token"] and not pooling["pooling_mode_mean_tokens"]
    dense = read("2_Dense/config.json")
    assert (dense["in_features"], dense["out_features"]) == (32, 6)
    assert dense["activation_function"] == "torch.nn.modules.activation.Tanh"
    weights = load_file(str(folder / "2_Dense" / "model.safetensors"))
    np.testing.assert_array_equal(weights["linear.weight"], encoder.projection.kernel.numpy().T)
    config = read("config.json")
    assert (config["model_type"], config["hidden_act"], config["num_hidden_layers"]) == \
        ("bert", "gelu", 2)
    assert config["vocab_size"] == len(load_file(str(folder / "model.safetensors"))[
        "embeddings.word_embeddings.weight"])
    tokenizer = read("tokenizer.json")
    assert tokenizer["normalizer"]["lowercase"] is False  # a cased vocabulary
    assert tokenizer["model"]["vocab"]["[CLS]"] == 2 and read("tokenizer_config.json")[
        "model_max_length"] == 20
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert "library_name: sentence-transformers" in card and "- Source: a test" in card
    assert "cls pooling, a tanh Dense projection to 6, L2 normalisation" in card
    assert 'backend="onnx", model_kwargs={"file_name": "onnx/model_qint8_avx512_vnni.onnx"}' \
        in card


def test_a_case_folded_xlmr_tokenizer_is_refused_in_one_line():
    """Transformers' XLM-R tokenizer does not case-fold as `lower_case` does."""
    model = configs.SentenceModelConfig(
        encoder=tiny_encoder_config(4002), tokenizer=configs.TokenizerConfig(
            type="xlmr_sentencepiece", sp_model_file=str(XLMR_SP_MODEL), lower_case=True))
    with pytest.raises(ValueError, match="^--onnx: task.model.tokenizer.lower_case is true"):
        st_folder.check_representable(model, "--onnx")
    model.tokenizer.lower_case = False
    st_folder.check_representable(model)


@pytest.mark.parametrize("field, value, named", [
    ("tokenizer.type", "sentencepiece", "the sentencepiece tokenizer"),
    ("encoder.hidden_activation", "mish", "hidden_activation 'mish'"),
    ("encoder.projection_activation", "softmax", "projection_activation 'softmax'")])
def test_an_encoder_the_layout_cannot_hold_is_refused_in_one_line(tiny_vocab, field, value,
                                                                   named):
    model = _labse_layout_model(tiny_vocab)
    part, name = field.split(".")
    setattr(getattr(model, part), name, value)
    with pytest.raises(ValueError, match="--sentence_transformers: " + named) as refused:
        st_folder.check_representable(model)
    assert "\n" not in str(refused.value)


def test_a_refused_export_writes_nothing(tiny_sp_run_dir, tmp_path):
    export_dir = tmp_path / "out"
    with pytest.raises(ValueError, match="the sentencepiece tokenizer"):
        export_lib.export(str(export_dir), model_dir=str(tiny_sp_run_dir),
                          sentence_transformers=True)
    assert list(tmp_path.iterdir()) == []


def test_the_folder_imports_back_to_the_same_vectors(tmp_path):
    """The way back: the LaBSE-layout stand-in exported with its sentence-transformers
    folder (by `onnx`, which implies it and records its models), that folder imported again
    (`--hf_dir OUT/sentence_transformers`), gives the same vectors, Dense projection and
    casing included."""
    first, second = tmp_path / "first", tmp_path / "second"
    export_lib.export(str(first), hf_dir=str(STANDINS / "labse_layout"), onnx=True)
    meta = json.loads((first / METADATA_FILE).read_text(encoding="utf-8"))
    assert meta["options"]["onnx"] and meta["sentence_transformers"]["onnx"] == {
        "float32": "onnx/model.onnx", "int8": "onnx/model_qint8_avx512_vnni.onnx", "opset": 17}
    export_lib.export(str(second), hf_dir=str(first / st_folder.FOLDER))
    texts = ["Hello World.", "hello world.", "Tous les êtres humains naissent libres.",
             "人人生而自由", "zero\u200bwidth"]
    vectors = [cmlm_tf.load(str(folder)).encode(texts) for folder in (first, second)]
    assert np.sum(vectors[0] * vectors[1], axis=1).min() >= 0.99999
    assert np.abs(vectors[0][0] - vectors[0][1]).max() > 1e-3  # cased: the texts differ


def test_the_xlmr_family_is_written_as_xlm_roberta_and_imports_back(tmp_path):
    """The XLM-R stand-in exported (with `onnx`) as Transformers' `XLMRobertaModel`: its own
    tensors again, the two position rows before RoBERTa's first position id back in the
    table, XLM-R's tokenizer files, ONNX models without `token_type_ids`; that folder
    imported again gives the same vectors, Khmer and zero-width characters included."""
    first, second = tmp_path / "first", tmp_path / "second"
    export_lib.export(str(first), hf_dir=str(STANDINS / "xlmr_layout"), onnx=True)
    folder = first / st_folder.FOLDER
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    source = json.loads((STANDINS / "xlmr_layout" / "config.json").read_text(encoding="utf-8"))
    assert config["architectures"] == ["XLMRobertaModel"]
    for field in ("model_type", "max_position_embeddings", "pad_token_id", "type_vocab_size",
                  "vocab_size", "layer_norm_eps"):
        assert config[field] == source[field], field
    ours = load_file(str(folder / "model.safetensors"))
    theirs = load_file(str(STANDINS / "xlmr_layout" / "model.safetensors"))
    assert set(theirs) <= set(ours)
    for name, value in theirs.items():
        if name.startswith("pooler."):  # unused by sentence encoders; the import skips it
            continue
        expected = value.copy()
        if name == "embeddings.position_embeddings.weight":
            expected[:2] = 0  # rows no token reads; the import dropped them
        np.testing.assert_allclose(ours[name], expected, atol=1e-7, err_msg=name)
    assert (folder / "sentencepiece.bpe.model").read_bytes() == \
        XLMR_SP_MODEL.read_bytes()
    assert json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))[
        "tokenizer_class"] == "XLMRobertaTokenizer"
    model = onnx.load(str(folder / "onnx" / "model.onnx"))
    assert [i.name for i in model.graph.input] == ["input_ids", "attention_mask"]
    assert "An XLM-RoBERTa encoder" in (folder / "README.md").read_text(encoding="utf-8")

    export_lib.export(str(second), hf_dir=str(folder))
    texts = ["Hello World.", "hello world.", "ក្រុង\u200bភ្នំពេញ", "zero\u200bwidth "
             "joiner\u200d and non\u200cjoiner", "人人生而自由", "Ｗｈａｔ？", ""]
    vectors = [cmlm_tf.load(str(export)).encode(texts) for export in (first, second)]
    vectors = [v / np.linalg.norm(v, axis=1, keepdims=True) for v in vectors]
    assert np.sum(vectors[0] * vectors[1], axis=1).min() >= 0.99999
