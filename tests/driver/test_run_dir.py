"""Reliability of a run directory (`cmlm_tf/driver/run_dir.py`): one trainer at a time, a stale
lock taken over by one process only, a rerun and a Ctrl-C that resume, a truncated SavedModel.
(Corrupt checkpoints: tests/driver/test_run_checkpoints.py.)"""

import json
import multiprocessing
import os
import pathlib
import queue
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import types

import pytest

import cmlm_tf
from cmlm_tf.driver import run_dir
from cmlm_tf.driver import runner as runner_lib
from tests.conftest import (
    REPO_DIR,
    TINY_CMLM_OVERRIDES,
    TINY_TRAIN,
    cli_env,
    sigint_as_in_a_terminal,
    tiny_train_command,
)


def _run(command, cwd=REPO_DIR):
    return subprocess.run(command, capture_output=True, text=True, env=cli_env(),
                          cwd=cwd, timeout=3600)


def _checkpoints(model_dir):
    return sorted(int(name[5:-6]) for name in os.listdir(model_dir)
                  if name.startswith("ckpt-") and name.endswith(".index"))


def _readme_main_job():
    """The README's main job (train, export, similarity) as argument lists."""
    line = next(line for line in (REPO_DIR / "README.md").read_text().splitlines()
                if "python -m cmlm_tf.train --experiment=cmlm_tf/cmlm" in line)
    steps = [shlex.split(part) for part in line.split(" && ")
             if part.strip().startswith("python -m cmlm_tf.")]
    assert [step[2] for step in steps] == ["cmlm_tf.train", "cmlm_tf.export",
                                           "cmlm_tf.similarity"], steps
    return [[sys.executable] + step[1:] for step in steps]


def test_readme_main_job_twice_resumes_with_its_relative_paths(tmp_path):
    """Rerunning the README's command resumes; its relative --model_dir stays readable."""
    train, export, _ = _readme_main_job()
    assert "--model_dir=runs/cmlm_tiny" in train and "--export_dir=exports/cmlm_tiny" in export
    train = train + [f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps=20"]
    # The hash seed is fixed: the order of same-step paths in a set once decided whether a
    # rerun failed, and this seed is one under which it did.
    env = dict(cli_env(), PYTHONHASHSEED="2")

    def run(command, cwd):
        return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd,
                              timeout=3600)

    first_home, home = tmp_path / "clone", tmp_path / "moved_clone"
    first_home.mkdir()
    for step in (train, export):
        result = run(step, first_home)
        assert result.returncode == 0, result.stderr[-3000:]
    first_home.rename(home)  # the whole checkout, run folder included, moved elsewhere
    run_folder = home / "runs" / "cmlm_tiny"
    params = (run_folder / "params.yaml").read_text()
    assert str(tmp_path) not in params and str(REPO_DIR) not in params, params
    assert "vocab_file: cmlm_tf/data/corpus/vocab.txt" in params
    again = run(train, home)
    assert again.returncode == 0, again.stderr[-3000:]
    # A finished run says so in one line, and builds nothing.
    assert again.stderr.strip().splitlines() == [
        "already finished: step 20 of trainer.train_steps=20 in runs/cmlm_tiny; latest "
        "checkpoint ckpt-20 (raise trainer.train_steps to train further)"], again.stderr
    assert "skipped missing" not in again.stderr
    state = (run_folder / "checkpoint").read_text()
    assert 'model_checkpoint_path: "ckpt-20"' in state and ".." not in state, state
    result = run(export, home)  # over the first export (--overwrite)
    assert result.returncode == 0, result.stderr[-3000:]
    metadata = (home / "exports" / "cmlm_tiny" / "cmlm_tf_export.json").read_text()
    assert '"ckpt-20"' in metadata, metadata


def test_ctrl_c_saves_the_step_reached_and_the_rerun_resumes_there(tmp_path):
    """SIGINT in a run whose checkpoint interval is longer than the run: one line names the
    checkpoint saved at the step reached, and exit 130. The rerun resumes from that step and
    its input skips the batches trained; rerunning the finished run skips none."""
    model_dir = tmp_path / "run"

    def command(steps):
        return TINY_TRAIN + [f"--model_dir={model_dir}",
                        f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps={steps},"
                        f"trainer.steps_per_loop={steps},trainer.checkpoint_interval={steps},"
                        f"trainer.summary_interval={steps}"]

    # A heartbeat interval shorter than any step: a progress line after every step.
    env = dict(cli_env(), CMLM_TF_HEARTBEAT_SECONDS="0.000001")
    process = subprocess.Popen(command(100000), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_DIR,
                               preexec_fn=sigint_as_in_a_terminal)
    lines = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in process.stderr])
    reader.start()
    seen = []
    try:
        while True:
            line = lines.get(timeout=3600)
            seen.append(line)
            if re.search(r"progress: step ([3-9]|\d\d+)/", line):
                break  # past the compiling first step
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=3600) == 130, "".join(seen[-20:])
    finally:
        if process.poll() is None:
            process.kill()
        reader.join()
    while not lines.empty():
        seen.append(lines.get())
    stderr = "".join(seen)
    saved = re.search(r"interrupted at step (\d+): saved checkpoint ckpt-(\d+) in (\S+) ",
                      stderr)
    assert saved, stderr[-3000:]
    step = int(saved.group(1))
    assert 0 < step < 100000 and saved.group(2) == str(step), saved.group(0)
    assert saved.group(3) == str(model_dir) and _checkpoints(model_dir) == [step]
    assert stderr.rstrip().endswith("interrupted"), stderr[-500:]

    rerun = _run(command(step + 5))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"restored step {step} from ckpt-{step}" in rerun.stderr
    assert f"resuming the input after {step} batches" in rerun.stderr
    assert f"finished: step {step + 5}" in rerun.stderr
    idle = _run(command(step + 5))
    assert idle.returncode == 0, idle.stderr[-3000:]
    assert f"already finished: step {step + 5} of trainer.train_steps={step + 5}" \
        in idle.stderr
    assert "resuming the input" not in idle.stderr, idle.stderr[-3000:]


def test_the_end_of_training_does_not_wait_for_the_input_to_close():
    """The runner's close of the training input returns while the iterator's destructor
    (tf.data stopping its threads: up to a minute on busy cores) still runs, and the
    destructor then completes. Nothing is timed: the destructor waits for the test."""
    started, proceed, finished = threading.Event(), threading.Event(), threading.Event()

    class SlowIterator:
        def __del__(self):
            started.set()
            proceed.wait(timeout=3600)  # released by the test; the old driver waited here
            finished.set()

    runner = types.SimpleNamespace(trainer=types.SimpleNamespace(_train_iter=SlowIterator()))
    release = runner_lib.Runner._close_train_input(runner)
    assert runner.trainer._train_iter is None
    assert started.wait(timeout=3600)
    assert not finished.is_set(), "the driver waited for the input to close"
    proceed.set()
    release.join(timeout=3600)
    assert finished.is_set()


def test_two_trainings_started_at_once_on_one_model_dir_one_refuses(tmp_path):
    """Two trainers started together on one --model_dir: one trains to the end, the other
    refuses in one line naming the first's pid, and writes nothing."""
    model_dir = tmp_path / "run"
    processes = [subprocess.Popen(tiny_train_command(model_dir, 400, interval=20),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=cli_env(), cwd=REPO_DIR) for _ in range(2)]
    results = [(process.pid,) + process.communicate(timeout=3600) for process in processes]
    codes = sorted(process.returncode for process in processes)
    assert codes == [0, 2], [err[-2000:] for _, _, err in results]
    winner = next(pid for (pid, _, _), p in zip(results, processes) if p.returncode == 0)
    lines = next(err for (_, _, err), p in zip(results, processes)
                 if p.returncode == 2).strip().splitlines()
    assert len(lines) == 1, lines
    assert "already training here" in lines[0] and str(winner) in lines[0]
    # The winner wrote every checkpoint; the refused one wrote nothing, not even params.
    assert _checkpoints(model_dir)[-1] == 400
    assert "train_steps: 400" in (model_dir / "params.yaml").read_text()
    assert not (model_dir / run_dir.LOCK_FILE).exists()  # released at exit


@pytest.mark.parametrize("relative", [True, False], ids=["relative", "absolute"])
def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path, monkeypatch, relative):
    monkeypatch.chdir(tmp_path)
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    if relative:
        model_dir = pathlib.Path("run")
    dead = subprocess.Popen([sys.executable, "--version"], stdout=subprocess.DEVNULL)
    dead.wait()

    (model_dir / run_dir.LOCK_FILE).write_text(json.dumps(
        {"pid": dead.pid, "host": socket.gethostname(), "started": "earlier"}))
    with run_dir.RunLock(str(model_dir)) as lock:
        assert json.loads(open(lock.path).read())["pid"] == os.getpid()
        with pytest.raises(run_dir.RunDirLocked, match="already training"):
            run_dir.RunLock(str(model_dir)).acquire()
    assert not (model_dir / run_dir.LOCK_FILE).exists()


def test_load_of_a_truncated_savedmodel_is_one_error(tmp_path, tiny_export):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_export, copy)
    variables = next((copy / "serving" / "1" / "variables").glob("variables.data-*"))
    with open(variables, "r+b") as f:
        f.truncate(100)
    with pytest.raises(ValueError, match="serving/1: cannot load the SavedModel") as info:
        cmlm_tf.load(str(copy))
    assert "\n" not in str(info.value)


def _race_for_the_lock(model_dir, barrier, results):
    """One contender of `test_two_processes_never_both_take_over_a_stale_lock`: a winner
    holds the lock until both have tried (the barrier again), however slow the machine."""
    barrier.wait()
    try:
        lock = run_dir.RunLock(model_dir).acquire()
    except run_dir.RunDirLocked:
        results.put("refused")
        barrier.wait()
        return
    results.put("held")
    barrier.wait()
    lock.release()


def test_two_processes_never_both_take_over_a_stale_lock(tmp_path):
    context = multiprocessing.get_context("fork")
    dead = subprocess.Popen([sys.executable, "--version"], stdout=subprocess.DEVNULL)
    dead.wait()
    stale = json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started": "earlier"})
    both = 0
    for round_number in range(40):
        model_dir = tmp_path / f"run{round_number}"
        model_dir.mkdir()
        (model_dir / run_dir.LOCK_FILE).write_text(stale)
        barrier, results = context.Barrier(2), context.Queue()
        contenders = [context.Process(target=_race_for_the_lock,
                                      args=(str(model_dir), barrier, results))
                      for _ in range(2)]
        for process in contenders:
            process.start()
        for process in contenders:
            process.join(3600)  # a safety net
        outcomes = sorted(results.get(timeout=3600) for _ in contenders)
        assert "held" in outcomes  # the stale lock is always taken over
        both += outcomes == ["held", "held"]
    assert both == 0, f"both processes held the lock in {both} of 40 rounds"
