"""BGT task: training on real pairs, export of the posterior mean, the SentencePiece vocabulary."""

import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub
import tensorflow_text  # noqa: F401
import tf_keras
import yaml
from official.core import task_factory

import cmlm_tf
from cmlm_tf import configs
from cmlm_tf.driver import train_lib
from cmlm_tf.export import export_lib
from cmlm_tf.tasks import bgt as bgt_task
from cmlm_tf.text import tokenization
from tests.conftest import REPO_DIR, write_bundled_pairs

TINY_OVERRIDES = {
    "task": {
        "model": {"encoder": {"hidden_size": 32, "num_layers": 1, "num_attention_heads": 2,
                              "intermediate_size": 64, "max_position_embeddings": 32,
                              "projection_size": 16}},
        "sp_vocab_size": 20000,  # far more than 300 pairs hold: the vocabulary adapts down
        "bgt": {"kl_anneal_steps": 20},
        "train_data": {"global_batch_size": 16, "seq_length": 24, "shuffle_buffer_size": 300},
        "validation_data": {"global_batch_size": 16, "seq_length": 24},
    },
    "trainer": {"train_steps": 80, "steps_per_loop": 40, "summary_interval": 40,
                "checkpoint_interval": 80, "optimizer_config": {
                    "learning_rate": {"power": {"initial_learning_rate": 0.02}},
                    "warmup": {"linear": {"warmup_steps": 10}}}},
}


@pytest.fixture(scope="module")
def tiny_bgt_run(tmp_path_factory):
    """`cmlm_tf/bgt` trained through the driver for 80 steps on 300 bundled pairs."""
    folder = tmp_path_factory.mktemp("bgt")
    pairs = write_bundled_pairs(folder / "pairs.tsv", 300)
    params = train_lib.build_params("cmlm_tf/bgt", [str(REPO_DIR / "configs" / "bgt_tiny.yaml")])
    params = params.replace(**TINY_OVERRIDES)
    params.override({"task": {"train_data": {"input_path": str(pairs)},
                              "validation_data": {"input_path": str(pairs)}}})
    params.lock()
    model_dir = folder / "run"
    tf_keras.utils.set_random_seed(1)
    model, _ = train_lib.run(params, str(model_dir), mode="train")
    return params, model_dir, model


def test_tiny_bgt_loss_falls_on_real_pairs(tiny_bgt_run):
    params, model_dir, trained = tiny_bgt_run
    # The vocabulary was trained at start-up, adapted down, and recorded for export.
    recorded = yaml.safe_load((model_dir / "params.yaml").read_text())["task"]["model"]
    assert recorded["tokenizer"]["sp_model_file"] == str(model_dir / "sp.model")
    assert (model_dir / "sp.model").exists()
    assert 50 < recorded["encoder"]["vocab_size"] < 20000

    task = task_factory.get_task(params.task, logging_dir=str(model_dir))
    assert task.task_config.model.encoder.vocab_size == recorded["encoder"]["vocab_size"]
    batch = next(iter(task.build_inputs(task.task_config.validation_data)))
    tf_keras.utils.set_random_seed(1)
    untrained = task.build_model()
    before = task.compute_losses(batch, untrained(batch, training=False))
    after = task.compute_losses(batch, trained(batch, training=False))
    for name in ("loss", "reconstruction_loss", "translation_loss"):
        assert float(after[name]) < 0.8 * float(before[name]), name
    assert float(after["kl_weight"]) == 1.0  # evaluation reports the full ELBO


def test_tiny_bgt_exports_its_posterior_mean(tiny_bgt_run, tmp_path):
    _, model_dir, trained = tiny_bgt_run
    export_dir = export_lib.export(str(tmp_path / "bgt"), model_dir=str(model_dir))
    preprocessor = hub.KerasLayer(f"{export_dir}/preprocessor")
    encoder = hub.KerasLayer(f"{export_dir}/encoder")
    texts = ["In the beginning was the Word.", "En el principio era el Verbo."]
    inputs = preprocessor(tf.constant(texts))
    outputs = encoder(inputs)
    np.testing.assert_allclose(outputs["pooled_output"], trained.encode(inputs), atol=1e-5)
    np.testing.assert_allclose(tf.norm(outputs["default"], axis=-1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(encoder(inputs)["default"], outputs["default"])
    vectors = cmlm_tf.load(export_dir).encode(texts)
    np.testing.assert_allclose(vectors, outputs["default"], atol=1e-5)


def test_building_the_task_learns_and_writes_nothing(tmp_path):
    config = bgt_task.BgtTaskConfig()
    config.model.tokenizer.type = "sentencepiece"
    config.train_data.input_path = str(write_bundled_pairs(tmp_path / "pairs.tsv", 50))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    task = bgt_task.BgtTask(config, logging_dir=str(run_dir))
    assert list(run_dir.iterdir()) == []  # the driver's vocabulary step learns sp.model
    assert task.task_config.model.tokenizer.sp_model_file == ""


def test_a_resumed_run_reuses_its_sentencepiece_model(tmp_path, tiny_sp_model):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(tiny_sp_model, run_dir / "sp.model")
    params = train_lib.build_params("cmlm_tf/bgt", [str(REPO_DIR / "configs" / "bgt_tiny.yaml")],
                                    f"task.train_data.input_path={tmp_path / 'missing.tsv'}")
    prepared = train_lib.prepare_vocabulary(params, str(run_dir))  # no data read: nothing learned
    tokenizer = prepared.task.model.tokenizer
    assert tokenizer.sp_model_file == str(run_dir / "sp.model")
    assert 8 <= prepared.task.model.encoder.vocab_size <= 200
    assert params.task.model.tokenizer.sp_model_file == ""  # the caller's params unchanged
    assert train_lib.prepare_vocabulary(prepared, str(run_dir)) is prepared


def test_sentencepiece_errors_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="sp_model_file is empty"):
        tokenization.build_tokenizer(configs.TokenizerConfig(type="sentencepiece"))
    with pytest.raises(FileNotFoundError, match="task.model.tokenizer.sp_model_file"):
        tokenization.build_tokenizer(configs.TokenizerConfig(
            type="sentencepiece", sp_model_file=str(tmp_path / "missing.model")))
