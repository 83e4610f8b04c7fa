"""MLM + TLM pre-training: progressive stacking, the recipe, the staged script, the baseline."""

import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from cmlm_tf import configs
from cmlm_tf.data import mlm_tlm
from cmlm_tf.modeling import masked_lm
from tests.conftest import REPO_DIR, subprocess_env, tiny_encoder_config


def _trained_like(config, seed):
    model = masked_lm.MaskedLMPretrainer(config).build_variables()
    rng = np.random.default_rng(seed)
    for variable in model.encoder.weights + model.mlm_head.weights:
        variable.assign(rng.normal(0, 0.1, variable.shape).astype(np.float32))
    return model


def _inputs(vocab_size, batch=3, length=10):
    rng = np.random.default_rng(1)
    mask = np.ones([batch, length], np.int32)
    mask[0, 6:] = 0
    return {"input_word_ids": tf.constant(rng.integers(5, vocab_size, [batch, length]),
                                          tf.int32),
            "input_mask": tf.constant(mask), "input_type_ids": tf.zeros([batch, length],
                                                                        tf.int32)}


def test_progressive_stacking_copies_layers_exactly(tmp_path):
    shallow_config = tiny_encoder_config(60, num_layers=2)
    shallow = _trained_like(shallow_config, seed=0)
    prefix = tf.train.Checkpoint(**shallow.checkpoint_items).write(str(tmp_path / "ckpt"))
    deep = masked_lm.MaskedLMPretrainer(shallow_config.replace(num_layers=5)).build_variables()
    assert masked_lm.stack_from_checkpoint(deep, prefix) == 2
    shallow_layers = shallow.encoder.bert.transformer_layers
    for index, layer in enumerate(deep.encoder.bert.transformer_layers):
        for a, b in zip(layer.weights, shallow_layers[index % 2].weights):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(deep.mlm_head.weights, shallow.mlm_head.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(deep.encoder.bert.get_embedding_table().numpy(),
                                  shallow.encoder.bert.get_embedding_table().numpy())

    # The deeper model differs only through the new layers: the first two layers' outputs
    # are the shallow model's, and each new layer i is old layer i mod 2 applied on top.
    inputs = _inputs(60)
    deep_outputs = deep.encoder(inputs, training=False)["encoder_outputs"]
    shallow_outputs = shallow.encoder(inputs, training=False)["encoder_outputs"]
    for a, b in zip(deep_outputs[:2], shallow_outputs):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)
    bert = shallow.encoder.bert
    attention_mask = bert._attention_mask_layer(deep_outputs[0], inputs["input_mask"])
    for index in range(2, 5):
        expected = shallow_layers[index % 2]([deep_outputs[index - 1], attention_mask])
        np.testing.assert_allclose(deep_outputs[index].numpy(), expected.numpy(), atol=1e-5)
    assert not np.allclose(deep_outputs[-1].numpy(), shallow_outputs[-1].numpy(), atol=1e-3)


def test_progressive_stacking_errors_name_the_option(tmp_path):
    shallow = masked_lm.MaskedLMPretrainer(tiny_encoder_config(60, num_layers=2))
    shallow.build_variables()
    prefix = tf.train.Checkpoint(**shallow.checkpoint_items).write(str(tmp_path / "ckpt"))
    wider = masked_lm.MaskedLMPretrainer(tiny_encoder_config(60, num_layers=4, hidden_size=48))
    with pytest.raises(ValueError, match=r"task.init_stack_from: .*\(2 layers\) does not fit"
                                         r" task.model.encoder") as error:
        masked_lm.stack_from_checkpoint(wider.build_variables(), prefix)
    assert "\n" not in str(error.value)
    shallower = masked_lm.MaskedLMPretrainer(tiny_encoder_config(60, num_layers=1))
    with pytest.raises(ValueError, match="has 2 layers, more than"):
        masked_lm.stack_from_checkpoint(shallower.build_variables(), prefix)


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
                            capture_output=True, text=True, env=env, timeout=900)
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
