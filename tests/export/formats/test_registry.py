"""The export formats' registry (`cmlm_tf/export/formats/__init__.py`): which formats an
export writes, the flags that ask for them, and what the metadata records."""

import argparse

import pytest

from cmlm_tf import configs
from cmlm_tf.export import export_lib, formats

# The formats' part of the options of exports made before the seam (format version 1).
FIRST_VERSION_OPTIONS = {"tflite": False, "bf16": False, "int8": False}


def _names(flags):
    return [export_format.name for export_format in formats.chosen(flags)]


def test_tf_hub_is_always_written_first_and_the_rest_in_registry_order():
    assert _names({}) == ["tf_hub"]
    assert _names({"keras_hub": True, "tflite": True, "bf16": True}) == [
        "tf_hub", "bf16", "tflite", "sentence_transformers", "keras_hub"]


def test_a_format_turns_on_the_formats_it_implies():
    assert _names({"onnx": True}) == ["tf_hub", "sentence_transformers", "onnx"]
    assert formats.options({"onnx": True})["sentence_transformers"] is True


def test_an_unknown_format_is_refused_as_an_unknown_keyword():
    with pytest.raises(TypeError, match="unexpected keyword argument 'safetensors'"):
        formats.chosen({"safetensors": True})


def test_options_of_an_export_without_new_formats_equal_the_first_versions():
    assert formats.options({}) == FIRST_VERSION_OPTIONS
    options = formats.options({"keras_hub": True})
    assert {key: options[key] for key in FIRST_VERSION_OPTIONS} == FIRST_VERSION_OPTIONS
    assert options["keras_hub"] is options["sentence_transformers"] is True
    assert "onnx" not in options


def test_the_outputs_of_recorded_options_name_each_formats_files():
    outputs = formats.outputs(export_lib.export_options(int8=True, onnx=True))
    assert "serving/1/saved_model.pb" in outputs
    assert "serving_int8/1/saved_model.pb" in outputs
    assert "sentence_transformers/onnx/model.onnx" in outputs
    assert "serving_bf16/1/saved_model.pb" not in outputs


def test_every_flagged_format_has_a_command_line_flag():
    parser = argparse.ArgumentParser()
    formats.add_flags(parser)
    args = parser.parse_args(["--onnx", "--bf16"])
    assert {name for name, on in vars(args).items() if on} == {"onnx", "bf16"}
    assert set(vars(args)) == {export_format.name for export_format in formats.FLAGGED}


def test_a_refusal_names_the_flag_that_asked_for_the_format(tiny_vocab):
    model = configs.SentenceModelConfig(tokenizer=configs.TokenizerConfig(
        type="sentencepiece", vocab_file=str(tiny_vocab)))
    # The sentence-transformers folder is implied: its refusal names the flag given.
    for flag in ("onnx", "keras_hub", "sentence_transformers"):
        with pytest.raises(ValueError, match=f"^--{flag}: the sentencepiece tokenizer"):
            formats.check({flag: True}, model)
    formats.check({"tflite": True, "bf16": True}, model)  # these hold any tokenizer
