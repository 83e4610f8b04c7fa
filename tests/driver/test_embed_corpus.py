"""`python -m cmlm_tf.embed_corpus` in subprocesses: a corpus embedded end to end by the
command, its summary line, and argument errors in one line before TensorFlow or Beam is
imported. (In-process: tests/commands/test_embed_corpus.py.)"""

import os
import re
import subprocess
import sys

import pytest

from cmlm_tf.scale import embedding_files
from tests.conftest import REPO_DIR, cli_env


def _command(*args, importtime=False):
    python = [sys.executable] + (["-X", "importtime"] if importtime else [])
    return subprocess.run(python + ["-m", "cmlm_tf.embed_corpus", *map(str, args)],
                          capture_output=True, text=True, env=cli_env(), cwd=REPO_DIR,
                          timeout=3600)


def test_the_command_embeds_a_corpus_and_prints_the_summary(tmp_path, tiny_export):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_bytes(b"the dog\n\na red car\n")
    (corpus / "b.txt").write_bytes(b"hello world\n\xff\n")
    out = tmp_path / "out"
    # The second glob matches a.txt again: each file is read once. The first is relative (to
    # the command's folder, REPO_DIR): sources and inputs are recorded absolute.
    relative = os.path.relpath(corpus / "*.txt", REPO_DIR)
    result = _command("--model", tiny_export, "--input", relative, "--input",
                      corpus / "a.txt", "--output", out, "--direct_num_workers=2")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        r"lines read 5, embedded 3, skipped 2 \(empty 1, invalid UTF-8 1, missing column 0\), "
        rf"cut to max_chars 0; \d+ shards in {re.escape(str(out))} \(\d+ s\)", summary), summary
    embeddings = embedding_files.read_embeddings(str(out))
    assert list(zip(embeddings.sources, embeddings.lines)) == [
        (str(corpus / "a.txt"), 1), (str(corpus / "a.txt"), 3), (str(corpus / "b.txt"), 1)]
    assert embeddings.manifest["inputs"] == [str(corpus / "*.txt"), str(corpus / "a.txt")]


@pytest.mark.parametrize("case", ["no_model", "no_match", "output_exists", "text_column",
                                  "misspelt_flag"])
def test_argument_errors_are_one_line_before_tensorflow_or_beam(tmp_path, tiny_export, case):
    (tmp_path / "a.txt").write_text("the dog\n")
    (tmp_path / "out").mkdir()
    args = {"--model": tiny_export, "--input": tmp_path / "*.txt", "--output": tmp_path / "new"}
    expected = {
        "no_model": ("--model", tmp_path / "missing", "argument --model: .*/missing: not found"),
        "no_match": ("--input", tmp_path / "*.tsv", r"--input .*\*\.tsv: no file matches"),
        "output_exists": ("--output", tmp_path / "out",
                          "out: already exists; pass --overwrite to replace it"),
        "text_column": ("--text_column", 0, r"--text_column must be 1 or more"),
        "misspelt_flag": ("--ouptut", tmp_path / "new",
                          "--ouptut: not recognised; did you mean --output?"),
    }
    flag, value, message = expected[case]
    args[flag] = value
    if case == "misspelt_flag":
        del args["--output"]
    result = _command(*[item for pair in args.items() for item in pair], importtime=True)
    imported = {line.split("|")[-1].strip().split(".")[0]
                for line in result.stderr.splitlines() if line.startswith("import time:")}
    lines = [line for line in result.stderr.splitlines() if not line.startswith(
        ("import time:", "usage:", " "))]
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-2000:]
    assert re.search(message, lines[0]), lines[0]
    assert "cmlm_tf" in imported and not imported & {"tensorflow", "apache_beam", "pyarrow"}
