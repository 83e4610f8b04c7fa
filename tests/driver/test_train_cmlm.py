"""`python -m cmlm_tf.train` with `cmlm_tf/cmlm` in subprocesses: one-line config and data
errors, two workers on localhost."""

import json
import socket
import subprocess
import sys

import tensorflow as tf

from tests.conftest import REPO_DIR, TINY_CMLM_OVERRIDES, subprocess_env


def _train(model_dir, steps, *, extra="", env=None, timeout=3600):
    cmd = [sys.executable, "-m", "cmlm_tf.train", "--experiment=cmlm_tf/cmlm",
           "--config_file=configs/cmlm_tiny.yaml", "--mode=train", f"--model_dir={model_dir}",
           f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps={steps}{extra}"]
    return subprocess.run(cmd, cwd=REPO_DIR, capture_output=True, text=True,
                          env=env or subprocess_env(), timeout=timeout)


def test_bad_config_key_is_a_one_line_error(tmp_path):
    result = _train(tmp_path / "run", 1, extra=",task.model.encoder.hiden_size=3")
    assert result.returncode == 2
    assert "hiden_size" in result.stderr.strip().splitlines()[-1]


def test_empty_corpus_through_the_driver(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    result = _train(tmp_path / "run", 1, extra=f",task.train_data.input_path={empty}")
    assert result.returncode == 2
    assert "empty.txt" in result.stderr.strip().splitlines()[-1]


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_two_workers_on_localhost(tmp_path):
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for index in range(2):
        env = subprocess_env()
        env["TF_CONFIG"] = json.dumps({"cluster": cluster,
                                       "task": {"type": "worker", "index": index}})
        cmd = [sys.executable, "-m", "cmlm_tf.train", "--experiment=cmlm_tf/cmlm",
               "--config_file=configs/cmlm_tiny.yaml", "--mode=train",
               f"--model_dir={tmp_path / 'run'}",
               f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps=10,"
               "runtime.distribution_strategy=multi_worker_mirrored"]
        procs.append(subprocess.Popen(cmd, cwd=REPO_DIR, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outputs = []
    for proc in procs:
        try:
            outputs.append(proc.communicate(timeout=3600))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
    for proc, (_, err) in zip(procs, outputs):
        assert proc.returncode == 0, err[-3000:]
    assert tf.train.latest_checkpoint(str(tmp_path / "run")).endswith("ckpt-10")
