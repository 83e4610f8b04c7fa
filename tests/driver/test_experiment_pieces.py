"""The experiments runner's pieces: a child process's CPU time counted after its runner is killed
outright, the seed's initialisation written once by runners side by side, a piece run in the
runner's own process (`--check`), and the runner's seed and thread flags."""

import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest
from absl import logging as absl_logging

from experiments import prepare, processes, run
from tests.conftest import REPO_DIR, subprocess_env


@pytest.mark.parametrize("with_checkpoints", [False, True])
def test_cpu_of_a_runner_killed_outright_is_counted_by_the_next_piece(tmp_path,
                                                                       with_checkpoints):
    """A runner killed with SIGKILL (a session's end) leaves its child's CPU time as the
    running piece (a training child's: up to its last checkpoint, the work kept); the next
    piece on the same log counts it."""
    log, model_dir = tmp_path / "stage" / "train.log", tmp_path / "stage" / "run"
    model_dir.mkdir(parents=True)
    totals_path = tmp_path / "stage" / "train.log.cpu.json"
    # The runner counts `children.busy_training`: 1 CPU second, a checkpoint, then 30 more.
    checkpoint_dir = str(model_dir) if with_checkpoints else ""
    runner = subprocess.Popen([sys.executable, "-m", "tests.driver.children",
                               "counted_busy_training", str(model_dir), str(log),
                               checkpoint_dir], cwd=REPO_DIR, env=subprocess_env(),
                              start_new_session=True)
    try:
        children = f"/proc/{runner.pid}/task/{runner.pid}/children"
        deadline, used = time.time() + 3600, 0.0  # a safety net
        while used < 2.5 and time.time() < deadline:  # 1.5 CPU seconds past the checkpoint
            time.sleep(0.05)
            pids = open(children, encoding="ascii").read().split()
            used = (pids and processes.process_cpu_seconds(int(pids[0]))) or 0.0
        assert used >= 2.5 and (model_dir / "checkpoint").exists(), used
    finally:
        os.killpg(runner.pid, signal.SIGKILL)  # the runner and its child, no clean-up
        runner.wait()
    killed = json.loads(totals_path.read_text(encoding="utf-8"))
    marked = killed["running"]["cpu_seconds"]
    assert killed["pieces"] == 0
    if with_checkpoints:
        assert 0.9 <= marked < 1.6, marked  # at the checkpoint, not at the kill
    else:
        assert marked > 2.0, marked

    cpu, _ = processes.run_counted([sys.executable, "-m", "tests.driver.children", "nothing"],
                             str(log))
    totals = json.loads(totals_path.read_text(encoding="utf-8"))
    assert (totals["pieces"], totals["interrupted"]) == (2, 1)
    assert "running" not in totals
    assert cpu == totals["cpu_seconds"] > marked


def test_runners_started_side_by_side_write_the_seeds_initialisation_once(tmp_path,
                                                                          monkeypatch):
    """Per-arm runners of one seed (`--arms cmlm` beside `--arms mlm`) both need the seed's
    random encoder: the first writes it, the second waits and reads it (two writers of one
    checkpoint had failed in TensorFlow's MergeV2Checkpoints)."""
    writes = []

    def write_init(command, log, checkpoint_dir=None):
        directory = next(a for a in command if a.startswith("--write_init=")).split("=", 1)[1]
        writes.append(directory)
        # Makes it likely that the second runner looks while the first is writing; on a
        # machine slow enough that it looks later, it finds the files: one write either way.
        time.sleep(0.3)
        pathlib.Path(directory).mkdir(parents=True)
        (pathlib.Path(directory) / "encoder.index").write_text("", encoding="utf-8")
        return 1.0, 1.0

    monkeypatch.setattr(processes, "run_counted", write_init)
    ctx = prepare.Context(results=str(tmp_path), shared=str(tmp_path), seeds=[3], steps=2,
                          command="")
    found = []
    runners = [threading.Thread(
        target=lambda arm=arm: found.append(prepare.ensure_init(3, ctx, arm)))
        for arm in ("cmlm", "mlm")]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join()
    assert writes == [str(tmp_path / "data" / "init" / "seed3")]
    assert found == writes * 2


def test_a_piece_run_in_the_runners_process_keeps_its_output_and_its_errors(
        tmp_path, monkeypatch):
    """Under `--check` a piece runs in the runner's process from the repository root: its
    output (print, absl, TensorFlow's logger) goes to its log and nowhere after, an error is
    the one line that says what went wrong, and Ctrl-C stops the runner (not only the
    piece), its CPU time counted."""
    # `children.piece` prints, logs through absl and TensorFlow's logger, then exits with its
    # argument, raises, or is interrupted.
    piece = [sys.executable, "-m", "tests.driver.children", "piece"]
    log = tmp_path / "piece.log"
    monkeypatch.setattr(processes, "IN_PROCESS", True)
    cwd, argv = os.getcwd(), list(sys.argv)

    cpu, _ = processes.run_child(piece + ["0"], str(log))
    assert cpu >= 0.0 and (os.getcwd(), sys.argv) == (cwd, argv)
    text = log.read_text(encoding="utf-8")
    assert "printed ['0']" in text and "logged by absl" in text
    assert "logged by tensorflow" in text
    with pytest.raises(RuntimeError) as error:
        processes.run_child(piece + ["raise"], str(log))
    first = str(error.value).splitlines()[0]
    assert first == (f"tests.driver.children failed (1): ValueError: task.model: bad field; "
                     f"log {log}")
    with pytest.raises(RuntimeError, match=r"^tests\.driver\.children failed \(3\)"):
        processes.run_child(piece + ["3"], str(log))
    with pytest.raises(processes.Stopped):
        processes.run_child(piece + ["interrupt"], str(log), record=True)
    assert json.loads((tmp_path / "piece.log.cpu.json").read_text(encoding="utf-8"))[
        "pieces"] == 1
    handlers = [absl_logging.get_absl_handler().python_handler, *logging.getLogger().handlers,
                *logging.getLogger("tensorflow").handlers]
    assert not any(getattr(getattr(h, "stream", None), "name", None) == str(log)
                   for h in handlers)


def test_seed_and_threads_reach_the_runs_and_bad_values_are_one_line_errors(
        monkeypatch, tmp_path, capsys):
    ran = []
    monkeypatch.setattr(run, "prepare", lambda needs, ctx: None)
    monkeypatch.setattr(run, "run_arm",
                        lambda claim, arm, seed, ctx: ran.append((arm.name, seed, ctx.command)))
    for name in processes.THREAD_VARIABLES:  # restored after the test
        monkeypatch.setenv(name, "")
    assert run.main(["--claim", "margin", "--arms", "margin_0", "--seed", "3", "--seed", "2",
                     "--threads", "1", "--results", str(tmp_path)]) == 0
    command = "python -m experiments.run --claim margin --seed 2 --seed 3 --threads 1"
    assert ran == [("margin_0", 2, command), ("margin_0", 3, command)]
    # Every child gets the thread count, and the results record it.
    assert [processes.child_env()[name] for name in processes.THREAD_VARIABLES] == ["1", "1"]
    assert processes.tf_threads() == 1
    for bad, message in ((["--seed", "0"], "--seed 0: seeds start at 1"),
                         (["--threads", "0"], "--threads 0: give 1 or more"),
                         (["--arms", "queue_16"], "--arms: claim margin: no arm 'queue_16'"),
                         (["--claim", "margin,bgt"], "give --claim NAME, one claim"),
                         (["--claim", "nope"], "--claim nope: unknown claim (have margin,"),
                         (["--check", "--arms", "minilm"], "--check runs each claim's "
                                                           "smallest arm, seed 1")):
        with pytest.raises(SystemExit):
            run.main(["--claim", "margin", *bad, "--results", str(tmp_path)])
        assert message in capsys.readouterr().err
