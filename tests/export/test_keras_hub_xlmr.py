"""The XLM-R family's part of the KerasHub preset, without keras-hub: the layout read from
the XLM-R stand-in, and the refusal of a BERT encoder under XLM-R's tokenizer (the preset
itself, loaded by KerasHub on TensorFlow and PyTorch: tests/mteb_extra/test_keras_hub_preset.py)."""

import pytest

from cmlm_tf.export import keras_hub_xlmr
from cmlm_tf.model_import import hf_folder
from tests.conftest import TESTS_DIR

STANDINS = TESTS_DIR / "testdata" / "st_standins"


def _metadata(standin: str) -> dict:
    return hf_folder.read_hf_metadata(str(STANDINS / standin))


def test_the_standin_gets_the_xlm_roberta_classes_over_its_sentencepiece_model():
    metadata = _metadata("xlmr_layout")
    assert metadata["tokenizer_type"] == keras_hub_xlmr.TOKENIZER_TYPE
    parts = keras_hub_xlmr.layout_parts(metadata, "--keras_hub")
    assert parts == {"tokenizer": {"class": "XLMRobertaTokenizer",
                                   "proto": "sentencepiece.bpe.model"},
                     "backbone": {"class": "XLMRobertaBackbone", "notes": []}}
    assert (STANDINS / "xlmr_layout" / parts["tokenizer"]["proto"]).is_file()


@pytest.mark.parametrize("changes, note", [
    ({"hidden_activation": "gelu_approx"},
     "the tanh approximation of GELU runs as KerasHub's exact (erf) GELU"),
    ({"layer_norm_epsilon": 1e-12}, "LayerNorm epsilon 1e-12 runs as KerasHub's 1e-05"),
])
def test_what_the_backbone_runs_differently_is_noted(changes, note):
    metadata = _metadata("xlmr_layout")
    metadata["encoder"].update(changes)
    assert keras_hub_xlmr.layout_parts(metadata, "--keras_hub")["backbone"]["notes"] == [note]


def test_a_bert_encoder_under_xlmr_ids_is_refused_in_one_line():
    metadata = _metadata("bert_sentencepiece")
    assert metadata["tokenizer_type"] == keras_hub_xlmr.TOKENIZER_TYPE
    with pytest.raises(ValueError) as error:
        keras_hub_xlmr.layout_parts(metadata, "--keras_hub: folder")
    message = str(error.value)
    assert "\n" not in message and message.startswith("--keras_hub: folder: a BERT encoder "
                                                      "with XLM-R's SentencePiece tokenizer")
