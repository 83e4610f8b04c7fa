"""Tests of `cmlm_tf.model_import.hf_folder`: both layouts of the pooling config, every
field read checked and named (also by the export command, in one line), and the
tokenizer's huge `model_max_length` capped."""

import json
import re

import pytest

from cmlm_tf.commands import export as export_cli
from cmlm_tf.model_import import hf_folder
from tests.model_import.conftest import make_hf_dir


def test_old_pooling_flags_and_vocab_txt_still_read(tmp_path):
    # make_hf_dir writes sentence-transformers 2's flags and a vocab.txt; here both layouts
    # of the pooling config name the same mode.
    assert hf_folder.pooling_mode({"pooling_mode_cls_token": True}, "p") == "cls"
    assert hf_folder.pooling_mode({"pooling_mode": "max"}, "p") == "max"
    with pytest.raises(ValueError, match="pooling_mode_mean_sqrt_len_tokens"):
        hf_folder.pooling_mode({"pooling_mode_mean_sqrt_len_tokens": True}, "p")


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
    hf_dir, _ = make_hf_dir(tmp_path / "hf")
    path = hf_dir / file
    if isinstance(change, dict) and file != "modules.json":
        change = {**json.loads(path.read_text()), **change}
    path.write_text(json.dumps(change))
    with pytest.raises(ValueError, match=message):
        hf_folder.read_hf_metadata(str(hf_dir))
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
    assert hf_folder.read_hf_metadata(str(hf_dir))["max_seq_length"] == 64
