"""A run's checkpoints (`cmlm_tf/driver/run_checkpoints.py`): the `checkpoint` state kept or
rewritten so it resolves, a corrupt checkpoint set aside on resume, and named by the export."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from cmlm_tf.commands import export as export_cli
from cmlm_tf.driver import run_checkpoints
from tests.conftest import cli_env, tiny_train_command


def _run(command, cwd):
    return subprocess.run(command, capture_output=True, text=True, env=cli_env(),
                          cwd=cwd, timeout=3600)


def _wait_for(predicate, process, seconds=3600):
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


def _save_checkpoints(model_dir, steps):
    """A bare `tf.train.CheckpointManager` saving one variable at each of `steps`."""
    value = tf.Variable(0.0)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(value=value), str(model_dir),
                                         max_to_keep=5)
    for step in steps:
        value.assign(float(step))
        manager.save(checkpoint_number=step)


def _state(model_dir):
    state = tf.train.get_checkpoint_state(str(model_dir))
    return state.model_checkpoint_path, list(state.all_model_checkpoint_paths)


@pytest.mark.parametrize("relative", [True, False], ids=["relative", "absolute"])
def test_recover_keeps_the_state_of_an_intact_run(tmp_path, monkeypatch, relative):
    monkeypatch.chdir(tmp_path)
    model_dir = "runs/x" if relative else str(tmp_path / "runs" / "x")
    _save_checkpoints(model_dir, [800, 1200])
    before = (tmp_path / "runs" / "x" / "checkpoint").read_text()
    prefix = run_checkpoints.recover_latest_checkpoint(model_dir)
    assert os.path.normpath(prefix) == os.path.join(model_dir, "ckpt-1200")
    assert os.path.exists(prefix + ".index")
    assert (tmp_path / "runs" / "x" / "checkpoint").read_text() == before


@pytest.mark.parametrize("relative", [True, False], ids=["relative", "absolute"])
def test_recover_after_a_missing_checkpoint_writes_a_state_that_resolves(
        tmp_path, monkeypatch, relative):
    monkeypatch.chdir(tmp_path)
    model_dir = "runs/x" if relative else str(tmp_path / "runs" / "x")
    _save_checkpoints(model_dir, [400, 800, 1200])
    for path in (tmp_path / "runs" / "x").glob("ckpt-1200.*"):
        path.unlink()  # the state names ckpt-1200; its files are gone
    prefix = run_checkpoints.recover_latest_checkpoint(model_dir)
    assert os.path.normpath(prefix) == os.path.join(model_dir, "ckpt-800")
    text = (tmp_path / "runs" / "x" / "checkpoint").read_text()
    assert 'model_checkpoint_path: "ckpt-800"' in text and ".." not in text, text
    latest, listed = _state(model_dir)
    assert os.path.normpath(latest) == os.path.join(model_dir, "ckpt-800")
    assert [os.path.basename(p) for p in listed] == ["ckpt-400", "ckpt-800"]
    assert tf.train.latest_checkpoint(model_dir) is not None
    # A second look finds nothing to repair, from another directory too.
    assert os.path.normpath(run_checkpoints.recover_latest_checkpoint(model_dir)) == \
        os.path.join(model_dir, "ckpt-800")
    monkeypatch.chdir(tmp_path / "runs")
    assert os.path.normpath(run_checkpoints.recover_latest_checkpoint("x")) == \
        os.path.join("x", "ckpt-800")
    assert (tmp_path / "runs" / "x" / "checkpoint").read_text() == text


def test_killed_run_with_a_corrupt_checkpoint_resumes_from_the_newest_intact_one(tmp_path):
    # A relative --model_dir, as the README's: the repaired checkpoint state must resolve.
    # (Absolute folders: the `recover_latest_checkpoint` tests above and the rest of the suite.)
    command = tiny_train_command("run", 200, interval=10)
    model_dir = tmp_path / "run"
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=cli_env(), cwd=tmp_path)
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
    rerun = _run(command, cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert f"ckpt-{newest} is unreadable" in rerun.stderr
    assert f"restored step {intact} from ckpt-{intact}" in rerun.stderr
    assert _checkpoints(model_dir)[-1] == 200
    assert (model_dir / "corrupt" / data.name).exists()  # set aside, never deleted
    assert not (model_dir / f"ckpt-{newest + 10}_temp").exists()
    state = (model_dir / "checkpoint").read_text()
    assert 'model_checkpoint_path: "ckpt-200"' in state and ".." not in state, state


@pytest.mark.parametrize("relative", [True, False], ids=["relative", "absolute"])
def test_export_of_a_corrupt_checkpoint_names_the_file(tmp_path, tiny_run_dir, monkeypatch,
                                                       relative):
    run = tmp_path / "run"
    shutil.copytree(tiny_run_dir, run)
    data = next(run.glob("ckpt-*.data-*"))
    with open(data, "r+b") as f:
        f.truncate(64)
    monkeypatch.chdir(tmp_path)
    model_dir, export_dir = ("run", "out") if relative else (str(run), str(tmp_path / "out"))
    result = subprocess.run([sys.executable, "-m", "cmlm_tf.export", f"--model_dir={model_dir}",
                             f"--export_dir={export_dir}"], capture_output=True,
                            text=True, env=cli_env(), cwd=tmp_path, timeout=3600)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, lines
    assert data.name.split(".data")[0] in lines[0] and "cannot be read" in lines[0]
    assert not (tmp_path / "out").exists()
    assert export_cli.main(["--model_dir", model_dir, "--export_dir", export_dir]) == 2
