"""Tests of `python -m cmlm_tf.embed_corpus` in this process: the missing Beam extra named in
one line, and the flags of `--help` and Beam's pass-through. (End to end in subprocesses:
tests/driver/test_embed_corpus.py.)"""

import shutil
import sys

import pytest

import cmlm_tf.scale
from cmlm_tf.commands import embed_corpus


def test_missing_beam_names_the_extra(tmp_path, tiny_export, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "apache_beam", None)  # "import apache_beam" fails
    monkeypatch.delitem(sys.modules, "cmlm_tf.scale.embed", raising=False)
    monkeypatch.delattr(cmlm_tf.scale, "embed", raising=False)
    (tmp_path / "a.txt").write_text("the dog\n")
    code = embed_corpus.main(["--model", str(tiny_export), "--input", str(tmp_path / "a.txt"),
                              "--output", str(tmp_path / "out")])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        'error: apache_beam is not installed; embed_corpus needs the scale extra: '
        'pip install -e ".[scale]"')


def test_help_lists_the_flags_and_beam_options_pass_through(capsys):
    with pytest.raises(SystemExit) as exit_info:
        embed_corpus.main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--model", "--input", "--output", "--text_column", "--batch_size",
                 "--max_chars", "--overwrite", "Beam pipeline options"):
        assert flag in text, flag
    parser = embed_corpus.build_parser()
    assert parser.unrecognised_flags(["--runner=DataflowRunner", "--direct_num_workers", "4",
                                      "--max_num_workers=9", "--ouput=x"]) == ["--ouput"]


def test_an_output_inside_the_model_is_refused(tmp_path, tiny_export, capsys):
    """`--output` inside the export (or on an input) would write into it: one line, and
    the export unchanged."""
    model = tmp_path / "model"
    shutil.copytree(tiny_export, model)
    before = sorted(p.name for p in model.iterdir())
    (tmp_path / "a.txt").write_text("the dog\n", encoding="utf-8")
    assert embed_corpus.main(["--model", str(model), "--input", str(tmp_path / "a.txt"),
                              "--output", str(model / "emb")]) == 2
    assert capsys.readouterr().err == (
        f"error: --output {model / 'emb'} is inside the --model folder {model}; cmlm_tf "
        "never writes over an input: choose another --output\n")
    assert sorted(p.name for p in model.iterdir()) == before
