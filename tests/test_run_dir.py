"""Reliability of a run directory and of exports: one trainer at a time, a crash mid-run,
corrupt checkpoints and SavedModels, debris of interrupted writes."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO_DIR, TINY_CMLM_OVERRIDES, cli_env

from cmlm_tf import run_dir

TRAIN = [sys.executable, "-m", "cmlm_tf.train", "--experiment=cmlm_tf/cmlm",
         "--config_file=cmlm_tiny", "--mode=train"]


def _command(model_dir, steps, interval=10):
    return TRAIN + [f"--model_dir={model_dir}",
                    f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps={steps},"
                    f"trainer.steps_per_loop={interval},trainer.checkpoint_interval={interval},"
                    f"trainer.summary_interval={interval},"
                    "trainer.max_to_keep=10"]


def _run(command):
    return subprocess.run(command, capture_output=True, text=True, env=cli_env(),
                          cwd=REPO_DIR, timeout=600)


def _wait_for(predicate, process, seconds=240):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        if process.poll() is not None:
            return predicate()
        time.sleep(0.2)
    return False


def _checkpoints(model_dir):
    return sorted(int(name[5:-6]) for name in os.listdir(model_dir)
                  if name.startswith("ckpt-") and name.endswith(".index"))


def test_second_trainer_on_a_model_dir_refuses(tmp_path):
    model_dir = tmp_path / "run"
    first = subprocess.Popen(_command(model_dir, 400, interval=20), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=cli_env(),
                             cwd=REPO_DIR)
    try:
        assert _wait_for(lambda: (model_dir / run_dir.LOCK_FILE).exists(), first)
        holder = json.loads((model_dir / run_dir.LOCK_FILE).read_text())
        assert holder["pid"] == first.pid
        second = _run(_command(model_dir, 400, interval=20))
        lines = second.stderr.strip().splitlines()
        assert second.returncode == 2 and len(lines) == 1, lines
        assert "already training here" in lines[0] and str(first.pid) in lines[0]
    finally:
        out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-2000:]
    # The first run wrote every checkpoint; the refused one wrote nothing, not even params.
    assert _checkpoints(model_dir)[-1] == 400
    assert "train_steps: 400" in (model_dir / "params.yaml").read_text()
    assert not (model_dir / run_dir.LOCK_FILE).exists()  # released at exit


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    model_dir = tmp_path / "run"
    model_dir.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import socket

    (model_dir / run_dir.LOCK_FILE).write_text(json.dumps(
        {"pid": dead.pid, "host": socket.gethostname(), "started": "earlier"}))
    with run_dir.RunLock(str(model_dir)) as lock:
        assert json.loads(open(lock.path).read())["pid"] == os.getpid()
        with pytest.raises(run_dir.RunDirLocked, match="already training"):
            run_dir.RunLock(str(model_dir)).acquire()
    assert not (model_dir / run_dir.LOCK_FILE).exists()


def test_killed_run_with_a_corrupt_checkpoint_resumes_from_the_newest_intact_one(tmp_path):
    model_dir = tmp_path / "run"
    command = _command(model_dir, 200, interval=10)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=cli_env(), cwd=REPO_DIR)
    try:
        assert _wait_for(lambda: model_dir.exists() and len(_checkpoints(model_dir)) >= 3,
                         process)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    steps = _checkpoints(model_dir)
    newest, intact = steps[-1], steps[-2]
    data = model_dir / f"ckpt-{newest}.data-00000-of-00001"
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    (model_dir / f"ckpt-{newest + 10}_temp").mkdir()  # a write the kill interrupted
    rerun = _run(command)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"ckpt-{newest} is unreadable" in rerun.stderr
    assert f"restored step {intact} from ckpt-{intact}" in rerun.stderr
    assert _checkpoints(model_dir)[-1] == 200
    assert (model_dir / "corrupt" / data.name).exists()  # set aside, never deleted
    assert not (model_dir / f"ckpt-{newest + 10}_temp").exists()


def test_export_of_a_corrupt_checkpoint_names_the_file(tmp_path, tiny_run_dir):
    from cmlm_tf.export import cli

    run = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run)
    data = next(run.glob("ckpt-*.data-*"))
    with open(data, "r+b") as f:
        f.truncate(64)
    result = subprocess.run([sys.executable, "-m", "cmlm_tf.export", f"--model_dir={run}",
                             f"--export_dir={tmp_path / 'out'}"], capture_output=True,
                            text=True, env=cli_env(), cwd=REPO_DIR, timeout=300)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, lines
    assert data.name.split(".data")[0] in lines[0] and "cannot be read" in lines[0]
    assert not (tmp_path / "out").exists()
    assert cli.main(["--model_dir", str(run), "--export_dir", str(tmp_path / "out")]) == 2


def test_interrupted_export_folders_are_removed_by_the_next_export(tmp_path, tiny_run_dir):
    from cmlm_tf.export import export_lib

    target = tmp_path / "out"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    import socket

    for name in ("out.tmp-abc", "out.old-def"):
        (tmp_path / name).mkdir()
        (tmp_path / name / export_lib._OWNER_FILE).write_text(json.dumps(
            {"pid": dead.pid, "host": socket.gethostname()}))
    live = tmp_path / "out.tmp-live"
    live.mkdir()
    (live / export_lib._OWNER_FILE).write_text(json.dumps(
        {"pid": os.getpid(), "host": socket.gethostname()}))
    export_lib.export(str(target), model_dir=str(tiny_run_dir))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "out.tmp-live"]
    assert not (target / export_lib._OWNER_FILE).exists()


def test_load_of_a_truncated_savedmodel_is_one_error(tmp_path, tiny_export):
    import cmlm_tf

    copy = tmp_path / "copy"
    shutil.copytree(tiny_export, copy)
    variables = next((copy / "serving" / "1" / "variables").glob("variables.data-*"))
    with open(variables, "r+b") as f:
        f.truncate(100)
    with pytest.raises(ValueError, match="serving/1: cannot load the SavedModel") as info:
        cmlm_tf.load(str(copy))
    assert "\n" not in str(info.value)
