"""`python -m cmlm_tf.embed_corpus` in subprocesses: a corpus embedded end to end by the
command, its summary line, and argument errors in one line before TensorFlow or Beam is
imported; the console of a run on two workers (the command's lines only, a count that
moves) and of a Ctrl-C (one line). (In-process: tests/commands/test_embed_corpus.py.)"""

import os
import random
import re
import signal
import subprocess
import sys

import pytest

from cmlm_tf.scale import embedding_files
from tests.conftest import REPO_DIR, TINY_WORDS, cli_env

PROGRESS = re.compile(r"embed_corpus: embedded (\d+) of ~6000 lines \(\d+ lines/s, "
                      r"ETA (?:\d+:\d\d|unknown)\)")


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


def _first_try(tmp_path):
    """6,000 lines, the size of a first try, and an empty folder for the command's
    temporary files (TMPDIR), where the workers' log of a local run goes."""
    rng = random.Random(0)
    words = [word for word in TINY_WORDS if word.isalpha()]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(" ".join(rng.choice(words) for _ in range(rng.randint(2, 12)))
                              + "\n" for _ in range(6000)), encoding="utf-8")
    (tmp_path / "tmp").mkdir()
    return corpus, dict(cli_env(), TMPDIR=str(tmp_path / "tmp"))


def test_a_run_on_two_workers_prints_its_own_lines_and_a_count_that_moves(tmp_path,
                                                                          tiny_export):
    """Nothing of Beam's or TensorFlow's on the console (the workers' lines go to a log,
    removed after a run that succeeds), and a progress line between 0 and the total. A
    small --batch_size keeps the tiny model busy long enough for the command to look."""
    corpus, env = _first_try(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "cmlm_tf.embed_corpus", "--model", str(tiny_export), "--input",
         str(corpus), "--output", str(tmp_path / "out"), "--direct_num_workers=2",
         "--batch_size", "2"], capture_output=True, text=True, env=env, cwd=REPO_DIR,
        timeout=3600)  # a safety net
    assert result.returncode == 0, result.stderr[-3000:]
    *progress, summary = result.stderr.splitlines()
    assert summary.startswith("lines read 6000, embedded 6000, "), result.stderr
    assert progress and all(PROGRESS.fullmatch(line) for line in progress), result.stderr
    counts = [int(PROGRESS.fullmatch(line).group(1)) for line in progress]
    assert any(0 < count < 6000 for count in counts), progress
    assert os.listdir(tmp_path / "tmp") == []


def _sigint_default():
    # A suite run in the background hands its children SIGINT ignored; a terminal does not.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_prints_one_line(tmp_path, tiny_export):
    """SIGINT to the process group, as a terminal sends it, after the first progress line:
    the workers get it too, yet the console shows `interrupted` alone, exit 130, and the
    run leaves no output, staging folder or log."""
    corpus, env = _first_try(tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-m", "cmlm_tf.embed_corpus", "--model", str(tiny_export), "--input",
         str(corpus), "--output", str(tmp_path / "out"), "--direct_num_workers=2",
         "--batch_size", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=env, cwd=REPO_DIR, start_new_session=True, preexec_fn=_sigint_default)
    try:
        first = process.stderr.readline()
        assert PROGRESS.fullmatch(first.rstrip("\n")), first + process.stderr.read()
        os.killpg(process.pid, signal.SIGINT)
        rest = process.stderr.read()
        assert process.wait(timeout=3600) == 130, rest  # a safety net
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert rest == "interrupted\n"
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt", "tmp"]
    assert os.listdir(tmp_path / "tmp") == []
