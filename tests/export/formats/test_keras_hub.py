"""`--keras_hub` (`cmlm_tf/export/formats/keras_hub.py`): the folder it implies, its refusal
and its card row (the preset itself: tests/export/test_keras_hub_preset.py and the MTEB
venv's tests)."""

import pytest

from cmlm_tf import configs
from cmlm_tf.export.formats import keras_hub


def test_the_preset_is_converted_from_the_sentence_transformers_folder():
    assert keras_hub.FORMAT.implies == ("sentence_transformers",)
    assert keras_hub.FORMAT.outputs == ("keras_hub/config.json",)


def test_a_model_the_preset_cannot_hold_is_refused_with_its_flag(tiny_vocab):
    model = configs.SentenceModelConfig(tokenizer=configs.TokenizerConfig(
        type="sentencepiece", vocab_file=str(tiny_vocab)))
    with pytest.raises(ValueError, match="^--keras_hub: the sentencepiece tokenizer"):
        keras_hub.FORMAT.check(model, keras_hub.FORMAT.flag)


def test_the_card_lists_the_preset_only_when_written():
    assert keras_hub.card_rows({}) == keras_hub.card_section({}) == ""
    assert keras_hub.card_rows({"keras_hub": {"folder": "keras_hub"}}).startswith(
        "| `keras_hub/` | KerasHub preset")
