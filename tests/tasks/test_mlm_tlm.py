"""MLM + TLM pre-training: the recipes, the staged script, the baseline."""

import os
import subprocess

import numpy as np
import tensorflow as tf

from cmlm_tf import configs
from cmlm_tf.data import mlm_tlm
from tests.conftest import REPO_DIR, subprocess_env


def test_recipes_load():
    from cmlm_tf import train

    recipe = str(REPO_DIR / "configs/labse_pretrain_base.yaml")
    base = train.build_params("cmlm_tf/mlm_tlm", [recipe])
    data = base.task.train_data
    assert (data.global_batch_size, data.seq_length, data.mask_ratio,
            data.max_predictions_per_seq) == (8192, 512, 0.2, 80)
    assert base.task.model.tokenizer.lower_case is False
    tiny = train.build_params("cmlm_tf/mlm_tlm", [str(REPO_DIR / "configs/mlm_tlm_tiny.yaml")])
    assert tiny.task.bitext_data.input_path.endswith("bible_en_es.tsv")


def test_tiny_labse_script_runs_three_stages_and_exports(tmp_path):
    import cmlm_tf

    env = dict(subprocess_env(), PYTHON=str(__import__("sys").executable), STAGE_STEPS="2 2 2",
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


def test_frequency_baseline_counts_masked_labels_per_stream(capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "mlm_frequency_baseline", REPO_DIR / "benchmarks/mlm_frequency_baseline.py")
    baseline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(baseline)
    recipe = [str(REPO_DIR / "configs/mlm_tlm_tiny.yaml")]
    overrides = "task.train_data.global_batch_size=8,task.train_data.tlm_fraction={}"
    assert baseline.main(["--config_file", *recipe, "--batches", "2",
                          "--params_override", overrides.format(0.0)]) == 0
    out = capsys.readouterr().out
    assert "tlm: no masked tokens" in out
    mlm_line = next(line for line in out.splitlines() if line.startswith("mlm:"))
    share = float(mlm_line.rsplit("share ", 1)[1])
    assert 0.0 < share < 0.5
    # Counts are taken over masked positions with weight 1 only, split by stream.
    from official.core import exp_factory

    params = configs.load_experiment_config(recipe, overrides.format(1.0),
                                        base=exp_factory.get_exp_config("cmlm_tf/mlm_tlm"))
    counts = baseline.frequency_baseline(params, 2)
    assert not counts["mlm"]
    dataset = mlm_tlm.mlm_tlm_dataset(params.task.train_data, params.task.bitext_data,
                                      params.task.model.tokenizer)
    weights = sum(float(b["masked_lm_weights"].numpy().sum()) for b in dataset.take(2))
    assert sum(counts["tlm"].values()) == weights > 0
