"""Tests of `python -m cmlm_tf.mine_hard_negatives`: what it writes, what it leaves out, and
that bitext trains on it."""

import subprocess
import sys

import numpy as np
import pytest

from cmlm_tf.commands import mine_hard_negatives as miner
from tests.conftest import REPO_DIR, subprocess_env

PAIRS = [
    ("the dog is running", "the dog runs"),
    ("a cat is eating", "a cat eats"),
    ("the man plays the guitar", "a man playing guitar"),
    ("the woman slices an onion", "a woman slicing onion"),
    ("a child rides a horse", "a child riding horse"),
    ("the dog is running fast", "The  dog RUNS"),   # the first target again: a duplicate
    ("a mouse and a snake", "mouse with snake"),
    ("red car and blue house", "a red car, a blue house"),
    ("good day and bad night", "good day, bad night"),
    ("hello world", "hello , world !"),
]


def test_the_filters_on_vectors():
    rng = np.random.default_rng(0)
    sources = [s for s, _ in PAIRS]
    targets = [t for _, t in PAIRS]
    candidates = miner.distinct(targets)
    assert len(candidates) == len(targets) - 1  # "The  dog RUNS" is "the dog runs"
    vectors = rng.normal(size=(len(candidates), 8))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    keys = [miner.text_key(c) for c in candidates]
    source_vectors = vectors[[keys.index(miner.text_key(t)) for t in targets]] * 0.9 + \
        0.1 * rng.normal(size=(len(targets), 8))
    source_vectors /= np.linalg.norm(source_vectors, axis=1, keepdims=True)
    found = miner.mine(sources, targets, source_vectors, candidates, candidate_vectors=vectors,
                       num_negatives=3,
                       range_max=8, duplicate_cosine=1.5)
    for target, negatives in zip(targets, found):
        assert negatives is not None and len(negatives) == 3
        assert miner.text_key(target) not in {miner.text_key(n) for n in negatives}
    # Hardest first: each row's negatives come in descending cosine.
    for row, negatives in enumerate(found):
        scores = [source_vectors[row] @ vectors[candidates.index(n)] for n in negatives]
        assert scores == sorted(scores, reverse=True)
    # range_min skips the hardest; a candidate as close as the target itself is a duplicate.
    skipped = miner.mine(sources, targets, source_vectors, candidates, candidate_vectors=vectors,
                         num_negatives=3,
                         range_min=1, range_max=8, duplicate_cosine=1.5)
    assert all(s[:2] == f[1:3] for s, f in zip(skipped, found))
    twin = vectors.copy()
    twin[1] = twin[0]  # candidate 1 now embeds exactly as candidate 0
    near = miner.mine(sources[:1], targets[:1], source_vectors[:1], candidates,
                      candidate_vectors=twin, num_negatives=3,
                      range_max=8)
    assert candidates[1] not in near[0]
    # A margin no candidate can meet leaves every pair out.
    assert miner.mine(sources, targets, source_vectors, candidates, candidate_vectors=vectors,
                      num_negatives=3,
                      margin=3.0) == [None] * len(PAIRS)


def _mine(tmp_path, export, *extra):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS), encoding="utf-8")
    output = tmp_path / "mined.tsv"
    result = subprocess.run(
        [sys.executable, "-m", "cmlm_tf.mine_hard_negatives", "--model", str(export),
         "--pairs", str(pairs), "--output", str(output), *extra],
        capture_output=True, text=True, env=subprocess_env(), cwd=REPO_DIR, timeout=3600)
    return result, output


def test_mined_file_trains_cmlm_tf_bitext(tmp_path, tiny_export):
    result, output = _mine(tmp_path, tiny_export, "--num_negatives", "2", "--range_max", "6")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line.split("\t") for line in output.read_text(encoding="utf-8").splitlines()]
    assert lines and all(len(fields) == 4 for fields in lines)
    for source, target, *negatives in lines:
        # Never the pair's own target, a duplicate of it, or the source itself.
        assert miner.text_key(target) not in {miner.text_key(n) for n in negatives}
        assert miner.text_key(source) not in {miner.text_key(n) for n in negatives}
        if miner.text_key(target) == "the dog runs":
            assert not any("dog runs" in miner.text_key(n) for n in negatives)
    train = subprocess.run(
        [sys.executable, "-m", "cmlm_tf.train", "--experiment=cmlm_tf/bitext",
         "--config_file=bitext_tiny", "--mode=train", f"--model_dir={tmp_path / 'run'}",
         f"--params_override=task.train_data.input_path={output},"
         "task.train_data.num_hard_negatives=2,task.train_data.global_batch_size=4,"
         "trainer.train_steps=2,trainer.optimizer_config.warmup.linear.warmup_steps=1,"
         "trainer.steps_per_loop=1,trainer.checkpoint_interval=2,"
         "task.validation_data.input_path=''"],
        capture_output=True, text=True, env=subprocess_env(), cwd=REPO_DIR, timeout=3600)
    assert train.returncode == 0, train.stderr[-3000:]
    assert (tmp_path / "run" / "ckpt-2.index").exists()


@pytest.mark.parametrize("extra,message", [
    (["--num_negatives", "2", "--margin", "5"], "no pair kept 2 negatives"),
    (["--num_negatives", "0"], "--num_negatives must be positive"),
    (["--num_negatives", "5", "--range_max", "3"], "fewer candidates than --num_negatives"),
])
def test_impossible_requests_are_one_line_errors(tmp_path, tiny_export, extra, message):
    result, output = _mine(tmp_path, tiny_export, *extra)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and message in lines[-1], lines
    assert not output.exists()


def test_an_output_that_is_the_pairs_file_is_refused(tmp_path, capsys):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a\tb\nc\td\n", encoding="utf-8")
    (tmp_path / "model").mkdir()
    code = miner.main(["--model", str(tmp_path / "model"), "--pairs", str(pairs), "--output",
                       str(tmp_path / "." / "pairs.tsv"), "--num_negatives", "1"])
    assert code == 2
    assert capsys.readouterr().err.startswith(
        f"error: --output {tmp_path / '.' / 'pairs.tsv'} is the --pairs file {pairs}; ")
    assert pairs.read_text(encoding="utf-8") == "a\tb\nc\td\n"
