"""`--sentence_transformers` (`cmlm_tf/export/formats/sentence_transformers.py`): its
refusal and card row (the folder itself: tests/export/test_sentence_transformers_folder.py)."""

import pytest

from cmlm_tf import configs
from cmlm_tf.export.formats import sentence_transformers


def test_a_tokenizer_the_folder_cannot_hold_is_refused_with_the_flag_given(tiny_vocab):
    model = configs.SentenceModelConfig(tokenizer=configs.TokenizerConfig(
        type="sentencepiece", vocab_file=str(tiny_vocab)))
    with pytest.raises(ValueError, match="^--some_flag: the sentencepiece tokenizer"):
        sentence_transformers.check(model, "--some_flag")


def test_the_card_row_names_the_folders_modules():
    meta = {"sentence_transformers": {"folder": "sentence_transformers",
                                      "modules": ["Transformer", "Pooling"]}}
    assert sentence_transformers.card_rows(meta) == (
        "| `sentence_transformers/` | sentence-transformers, Transformers: "
        "`SentenceTransformer(path)` (Transformer, Pooling) | none |\n")
    assert sentence_transformers.card_rows({}) == ""
