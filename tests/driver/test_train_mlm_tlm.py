"""The tiny LaBSE script (`configs/labse_tiny.sh`): MLM + TLM stages, bitext, export."""

import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

import cmlm_tf
from tests.conftest import REPO_DIR, subprocess_env


def test_tiny_labse_script_runs_three_stages_and_exports(tmp_path):
    env = dict(subprocess_env(), PYTHON=sys.executable, STAGE_STEPS="2 2 2",
               BITEXT_STEPS="2", EXTRA_OVERRIDES=",".join([
                   "task.model.encoder.hidden_size=32",
                   "task.model.encoder.num_attention_heads=2",
                   "task.model.encoder.intermediate_size=64",
                   "task.train_data.global_batch_size=8", "trainer.steps_per_loop=2",
                   "trainer.summary_interval=2", "trainer.validation_steps=1"]))
    work = tmp_path / "labse"
    result = subprocess.run(["bash", "configs/labse_tiny.sh", str(work)], cwd=REPO_DIR,
                            capture_output=True, text=True, env=env, timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Stacked 1 layers" in result.stderr and "Stacked 2 layers" in result.stderr
    assert "Warm-started from" in result.stderr
    for stage in ("stage1", "stage2", "stage3", "bitext"):
        assert tf.train.latest_checkpoint(str(work / stage)).endswith("ckpt-2"), stage
    model = cmlm_tf.load(os.fspath(work / "export"))
    vectors = model.encode(["In the beginning was the Word.", "En el principio era el Verbo."])
    assert vectors.shape == (2, 32) and np.isfinite(vectors).all()
