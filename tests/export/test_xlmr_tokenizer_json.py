"""XLM-R's tokenizer files (cmlm_tf/export/xlmr_tokenizer_json.py), against the ones
Transformers itself wrote for the XLM-R stand-in. That the `tokenizers` library gives
cmlm_tf's ids with them is checked in the MTEB venv
(tests/mteb_extra/test_sentence_transformers_export.py)."""

import json

import pytest

from cmlm_tf.export import xlmr_tokenizer_json
from tests.conftest import TESTS_DIR

XLMR_LAYOUT = TESTS_DIR / "testdata" / "st_standins" / "xlmr_layout"
SP_MODEL = XLMR_LAYOUT / "sentencepiece.bpe.model"


def test_the_tokenizer_json_is_the_one_transformers_writes():
    """Pieces, scores, fairseq's ids, the precompiled normaliser, the pre-tokenizer and the
    `<s> ... </s>` template: all as Transformers 5 saved the stand-in's tokenizer."""
    model = xlmr_tokenizer_json.read_model(str(SP_MODEL))
    assert xlmr_tokenizer_json.unsupported(model) is None
    ours = xlmr_tokenizer_json.tokenizer_json(model)
    theirs = json.loads((XLMR_LAYOUT / "tokenizer.json").read_text(encoding="utf-8"))
    assert ours == theirs
    assert [token for token, _ in ours["model"]["vocab"][:4]] == ["<s>", "<pad>", "</s>",
                                                                  "<unk>"]
    assert len(ours["model"]["vocab"]) == len(model["pieces"]) + 2  # <pad> and <mask> added


def test_the_files_are_written_beside_the_model(tmp_path):
    xlmr_tokenizer_json.write_files(str(tmp_path), str(SP_MODEL), seq_length=64)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "sentencepiece.bpe.model", "special_tokens_map.json", "tokenizer.json",
        "tokenizer_config.json"]
    assert (tmp_path / "sentencepiece.bpe.model").read_bytes() == SP_MODEL.read_bytes()
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["tokenizer_class"] == "XLMRobertaTokenizer"
    assert (config["model_max_length"], config["pad_token"], config["mask_token"]) == \
        (64, "<pad>", "<mask>")


def test_a_model_transformers_cannot_reproduce_is_named(tmp_path):
    """A BPE model (a TrainerSpec with model_type 2 merged after the stand-in's) is named."""
    bpe = tmp_path / "bpe.model"
    bpe.write_bytes(SP_MODEL.read_bytes() + b"\x12\x02\x18\x02")
    model = xlmr_tokenizer_json.read_model(str(bpe))
    assert model["model_type"] == 2
    assert xlmr_tokenizer_json.unsupported(model) == \
        "a SentencePiece model of type 2 (only unigram)"


def test_a_file_that_is_no_sentencepiece_model_is_one_line(tmp_path):
    broken = tmp_path / "broken.model"
    broken.write_bytes(SP_MODEL.read_bytes()[:1000])
    with pytest.raises(ValueError, match=r"broken\.model: not a SentencePiece model") as error:
        xlmr_tokenizer_json.read_model(str(broken))
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match=r"absent\.model: cannot read the SentencePiece model"):
        xlmr_tokenizer_json.read_model(str(tmp_path / "absent.model"))
