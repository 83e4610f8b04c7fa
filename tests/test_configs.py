"""The config schema: checks that name the field at fault, and the experiments' recipes."""

import ast
import dataclasses

import pytest

from cmlm_tf import configs
from tests.source_tree import PACKAGE


@pytest.mark.parametrize("encoder,tokenizer,field", [
    ({"hidden_size": 30, "num_attention_heads": 4}, {}, "task.model.encoder.hidden_size"),
    ({"num_layers": 0}, {}, "task.model.encoder.num_layers must be positive"),
    ({"pooling": "sum"}, {}, "task.model.encoder.pooling must be one of"),
    ({"projection_activation": "gelu"}, {}, "task.model.encoder.projection_activation"),
    ({"layer_norm_epsilon": 0.0}, {}, "task.model.encoder.layer_norm_epsilon"),
    ({}, {"type": "bpe"}, "task.model.tokenizer.type must be one of"),
])
def test_model_config_errors_name_the_field(encoder, tokenizer, field):
    model = configs.SentenceModelConfig(encoder=configs.EncoderConfig(**encoder),
                                        tokenizer=configs.TokenizerConfig(**tokenizer))
    with pytest.raises(ValueError, match=field):
        configs.validate_model_config(model)


def test_the_default_model_config_is_valid():
    configs.validate_model_config(configs.SentenceModelConfig())


def test_run_config_refuses_a_run_that_trains_nothing():
    params = configs.experiment(configs.SentenceTaskConfig(), configs.lamb_optimizer(),
                                train_steps=0)
    with pytest.raises(ValueError, match="trainer.train_steps must be at least 1, got 0"):
        configs.validate_run_config(params)
    params.trainer.train_steps = 10
    configs.validate_run_config(params)


def test_experiment_puts_trainer_fields_over_the_loop():
    params = configs.experiment(configs.SentenceTaskConfig(), configs.adamw_optimizer(1e-4, 10),
                                train_steps=100, loop=configs.PRETRAINING_LOOP,
                                checkpoint_interval=7)
    assert params.trainer.train_steps == 100
    assert params.trainer.checkpoint_interval == 7
    assert params.trainer.steps_per_loop == configs.PRETRAINING_LOOP["steps_per_loop"]
    assert params.trainer.optimizer_config.optimizer.type == "adamw"


def test_optimizer_recipes():
    lamb = configs.lamb_optimizer()
    assert lamb.optimizer.type == "lamb"
    assert lamb.learning_rate.polynomial.initial_learning_rate == 1e-3
    assert lamb.learning_rate.polynomial.decay_steps == 0  # follows trainer.train_steps
    assert lamb.warmup.linear.warmup_steps == 10000
    inverse_sqrt = configs.adam_inverse_sqrt(1e-3, 400)
    # learning_rate * sqrt(warmup / step) is the learning rate at the end of the warm-up.
    schedule = inverse_sqrt.learning_rate.power
    assert schedule.initial_learning_rate * 400 ** schedule.power == pytest.approx(1e-3)


def test_data_fields_give_each_task_config_its_own_data_config():
    @dataclasses.dataclass
    class TaskConfig(configs.SentenceTaskConfig):
        train_data: configs.TextDataConfig = configs.training_data(configs.TextDataConfig)
        validation_data: configs.TextDataConfig = configs.validation_data(
            configs.TextDataConfig, seq_length=32)

    first, second = TaskConfig(), TaskConfig()
    assert first.train_data.is_training is True and first.train_data.seq_length == 128
    assert first.validation_data.is_training is False
    assert first.validation_data.seq_length == 32
    first.train_data.seq_length = 64
    assert second.train_data.seq_length == 128


def test_task_configs_build_their_data_configs_through_the_data_fields():
    """One home for a split's defaults: a task module states its reader's data config class
    (`configs.training_data`, `configs.validation_data`), never `is_training` itself."""
    for path in sorted((PACKAGE / "tasks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                assert not any(k.arg == "is_training" for k in node.keywords), \
                    f"{path.name}:{node.lineno}: use configs.training_data / validation_data"
