"""The `cmlm_tf/mlm_tlm` task and experiment: registration, model checks, losses, metrics, step."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from official.core import exp_factory, task_factory

from cmlm_tf import configs
from cmlm_tf.losses.masked_lm import masked_lm_loss
from cmlm_tf.modeling import masked_lm
from cmlm_tf.tasks import mlm_tlm
from tests.conftest import TINY_WORDS, tiny_encoder_config

VOCAB = 40


def _task(**encoder):
    config = mlm_tlm.MLMTLMTaskConfig()
    values = dict(num_layers=1, dropout_rate=0.0, attention_dropout_rate=0.0)
    values.update(encoder)
    config.model.encoder = tiny_encoder_config(VOCAB, **values)
    config.train_data.seq_length = 8
    return mlm_tlm.MLMTLMTask(config)


def _batch():
    """Two rows of 8 tokens, 3 predictions each (the second row's last one padding)."""
    ids = tf.constant([[2, 10, 4, 12, 13, 3, 0, 0], [2, 15, 4, 3, 17, 4, 19, 3]])
    return {"input_word_ids": ids, "input_mask": tf.cast(ids > 0, tf.int32),
            "input_type_ids": tf.constant([[0] * 8, [0] * 4 + [1] * 4]),
            "masked_lm_positions": tf.constant([[2, 1, 3], [2, 5, 0]]),
            "masked_lm_ids": tf.constant([[11, 10, 12], [16, 18, 0]]),
            "masked_lm_weights": tf.constant([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]),
            "is_tlm": tf.constant([0.0, 1.0])}


def test_experiment_is_registered_with_pretraining_defaults():
    experiment = exp_factory.get_exp_config("cmlm_tf/mlm_tlm")
    task = experiment.task
    assert isinstance(task, mlm_tlm.MLMTLMTaskConfig)
    assert isinstance(task_factory.get_task(task), mlm_tlm.MLMTLMTask)
    assert experiment.trainer.train_steps == 400000
    assert experiment.trainer.optimizer_config.optimizer.type == "lamb"
    for field, value in configs.PRETRAINING_LOOP.items():
        assert getattr(experiment.trainer, field) == value, field
    assert task.train_data.is_training and task.bitext_data.is_training
    assert task.validation_data.is_training is False
    assert task.validation_data.drop_remainder is False
    assert (task.train_data.seq_length, task.train_data.mask_ratio,
            task.train_data.max_predictions_per_seq) == (512, 0.2, 80)
    assert task.model.mlm_activation == "gelu_exact" and task.init_stack_from == ""


def test_build_model_errors_name_the_fields():
    task = _task()
    task.task_config.train_data.seq_length = 65
    with pytest.raises(ValueError, match=r"task\.model\.encoder\.max_position_embeddings \(64\) "
                                         r"must cover task\.train_data\.seq_length \(65\)"):
        task.build_model()
    with pytest.raises(ValueError, match=r"task\.model\.encoder\.hidden_size \(30\) must be a "
                                         r"multiple"):
        _task(hidden_size=30).build_model()
    model = _task().build_model()
    assert isinstance(model, masked_lm.MaskedLMPretrainer)
    assert set(model.checkpoint_items) == {"encoder", "mlm_head"}


def test_initialize_stacks_a_shallower_stage_or_refuses_two_sources(tmp_path):
    tf_keras.utils.set_random_seed(1)
    shallow = _task().build_model()
    prefix = tf.train.Checkpoint(**shallow.checkpoint_items).write(str(tmp_path / "ckpt"))
    task = _task(num_layers=2)
    task.task_config.init_stack_from = prefix
    deep = task.build_model()
    task.initialize(deep)
    source = shallow.encoder.bert.transformer_layers[0].weights
    for layer in deep.encoder.bert.transformer_layers:
        for a, b in zip(layer.weights, source):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    task.task_config.init_checkpoint = prefix
    with pytest.raises(ValueError, match="init_stack_from or task.init_checkpoint, not both"):
        task.initialize(deep)


def test_compute_losses_is_the_masked_lm_loss():
    logits = tf.random.stateless_normal([2, 3, VOCAB], seed=[1, 2])
    losses = _task().compute_losses(_batch(), {"mlm_logits": logits})
    assert set(losses) == {"loss", "mlm_loss"}
    expected = float(masked_lm_loss(_batch(), logits))
    assert float(losses["loss"]) == float(losses["mlm_loss"]) == expected


def test_metrics_split_accuracy_by_stream_and_skip_filler_rows():
    task = _task()
    metrics = task.build_metrics()
    assert [m.name for m in metrics] == list(mlm_tlm.METRICS)
    # Row 0 (MLM) gets 1 of 2 right; row 1 (TLM) 2 of 2; row 2 is a TLM filler row (weight 0)
    # predicted wrong.
    inputs = {"masked_lm_ids": tf.constant([[1, 2], [3, 4], [1, 1]]),
              "masked_lm_weights": tf.constant([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]),
              "is_tlm": tf.constant([0.0, 1.0, 1.0]),
              "example_weight": tf.constant([1.0, 1.0, 0.0])}
    logits = tf.one_hot([[1, 0], [3, 4], [0, 0]], 5) * 4.0
    task.update_metrics(metrics, inputs, {"mlm_logits": logits},
                        {"loss": tf.constant(2.5), "mlm_loss": tf.constant(2.5)})
    results = {m.name: float(m.result()) for m in metrics}
    assert results == {"masked_lm_accuracy": 0.75, "mlm_accuracy": 0.5, "tlm_accuracy": 1.0,
                       "mlm_loss": 2.5, "tlm_fraction": 0.5}


def test_train_step_returns_the_loss_before_the_update_and_lowers_it():
    task = _task()
    tf_keras.utils.set_random_seed(2)
    model = task.build_model()
    batch = _batch()
    before = float(masked_lm_loss(batch, model(batch, training=True)["mlm_logits"]))
    weights = [v.numpy() for v in model.trainable_variables]
    metrics = task.build_metrics()
    logs = task.train_step(batch, model, tf_keras.optimizers.SGD(0.05), metrics)
    assert set(logs) == {"loss"}
    assert float(logs["loss"]) == pytest.approx(before, rel=1e-5)
    assert any(not np.array_equal(a, v.numpy())
               for a, v in zip(weights, model.trainable_variables))
    after = float(masked_lm_loss(batch, model(batch, training=True)["mlm_logits"]))
    assert after < before
    by_name = {m.name: float(m.result()) for m in metrics}
    assert by_name["mlm_loss"] == pytest.approx(before, rel=1e-5)
    assert by_name["tlm_fraction"] == 0.5


def test_build_inputs_errors_name_the_split_and_the_field(tmp_path):
    """The task tells its reader which split it reads, so errors name the field to fix."""
    text = tmp_path / "text.txt"
    text.write_text("\n".join(" ".join(TINY_WORDS[i:i + 5]) for i in range(20)) + "\n")
    task = _task()  # the inputs need no model
    config = task.task_config
    config.train_data.override(dict(input_path=str(tmp_path / "missing*.txt"), tlm_fraction=0.5))
    with pytest.raises(FileNotFoundError, match=r"\(task\.train_data\.input_path\)$"):
        task.build_inputs(config.train_data)
    config.validation_data.input_path = str(tmp_path / "held_out.txt")
    with pytest.raises(FileNotFoundError, match=r"\(task\.validation_data\.input_path\)$"):
        task.build_inputs(config.validation_data)
    # The text is there; the pairs are not.
    config.train_data.input_path = str(text)
    config.bitext_data.input_path = str(tmp_path / "pairs.tsv")
    with pytest.raises(FileNotFoundError, match=r"\(task\.bitext_data\.input_path\)$"):
        task.build_inputs(config.train_data)
    config.validation_data.override(dict(input_path=str(text),
                                         bitext_input_path=str(tmp_path / "dev.tsv")))
    with pytest.raises(FileNotFoundError,
                       match=r"\(task\.validation_data\.bitext_input_path\)$"):
        task.build_inputs(config.validation_data)
    config.train_data.tlm_fraction = 1.5
    with pytest.raises(ValueError, match=r"task\.train_data\.tlm_fraction must be in \[0, 1\]"):
        task.build_inputs(config.train_data)
