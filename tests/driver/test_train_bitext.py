"""`python -m cmlm_tf.train` through the staged CMLM → CMLM+BR recipe, in subprocesses."""

import subprocess
import sys

import tensorflow as tf

from tests.conftest import REPO_DIR, TINY_CMLM_OVERRIDES, subprocess_env


def test_staged_recipe_through_the_driver(tmp_path):
    """cmlm_tiny for 10 steps, then the CMLM → CMLM+BR recipe for 10 more, then export."""
    run_1, run_2 = tmp_path / "stage1", tmp_path / "stage2"
    base = [sys.executable, "-m", "cmlm_tf.train", "--mode=train",
            "--config_file=configs/cmlm_tiny.yaml"]
    first = subprocess.run(
        base + ["--experiment=cmlm_tf/cmlm", f"--model_dir={run_1}",
                f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps=10"],
        cwd=REPO_DIR, capture_output=True, text=True, env=subprocess_env(), timeout=3600)
    assert first.returncode == 0, first.stderr[-3000:]
    second = subprocess.run(
        base + ["--experiment=cmlm_tf/cmlm_bitext",
                "--config_file=configs/cmlm_then_cmlm_br_tiny.yaml", f"--model_dir={run_2}",
                f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps=10,"
                f"task.init_checkpoint={run_1},task.bitext_data.global_batch_size=8"],
        cwd=REPO_DIR, capture_output=True, text=True, env=subprocess_env(), timeout=3600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "Warm-started from" in second.stderr and "projection, mlm_head" in second.stderr
    assert "ranking_loss" in second.stderr
    assert tf.train.latest_checkpoint(str(run_2)).endswith("ckpt-10")
