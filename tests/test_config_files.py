"""Config files read into an experiment config: packaged recipes by name, bundled data from
any directory, YAML read safely, strict overrides with "did you mean", typed fields."""

import os

import pytest

from cmlm_tf import config_files
from cmlm_tf.commands import common
from cmlm_tf.driver import train_lib


def test_yaml_tags_are_not_resolved(tmp_path):
    recipe = tmp_path / "evil.yaml"
    recipe.write_text("task: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ValueError, match="evil.yaml"):
        config_files.load_experiment_config([str(recipe)])


def test_recipes_and_bundled_data_resolve_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = train_lib.build_params("cmlm_tf/cmlm", ["cmlm_tiny"])
    for path in (params.task.train_data.input_path, params.task.model.tokenizer.vocab_file):
        assert os.path.isabs(path) and os.path.exists(path), path
    assert params.trainer.optimizer_config.learning_rate.polynomial.decay_steps == \
        params.trainer.train_steps
    with pytest.raises(FileNotFoundError, match="cmlm_tinyy.*cmlm_tiny"):
        config_files.resolve_recipe("cmlm_tinyy")


def test_unknown_config_keys_suggest_the_closest_valid_keys(tmp_path, capsys):
    def error(override="", files=("cmlm_tiny",)):
        with pytest.raises(ValueError) as raised:
            train_lib.build_params("cmlm_tf/cmlm", list(files), override)
        return str(raised.value)

    assert error("trainer.train_step=10") == \
        "--params_override: unknown key trainer.train_step; did you mean trainer.train_steps?"
    assert error("task.train_dat.input_path=x").endswith("did you mean task.train_data?")
    assert error("task.model.encoder.hiden_size=8").endswith(
        "did you mean task.model.encoder.hidden_size?")
    # A key in the wrong place: the keys of that name elsewhere.
    assert "did you mean task.train_data.seq_length or " in error("trainer.seq_length=8")
    assert error("zzz=1").endswith("unknown key zzz; the keys at the top level are runtime, "
                                   "task, trainer")
    recipe = tmp_path / "typo.yaml"
    recipe.write_text("trainer:\n  optimizer_config:\n    warmup:\n      linear:\n"
                      "        warmup_step: 3\n")
    assert error(files=["cmlm_tiny", str(recipe)]) == (
        f"{recipe}: unknown key trainer.optimizer_config.warmup.linear.warmup_step; did you "
        "mean trainer.optimizer_config.warmup.linear.warmup_steps?")
    # Through the command line's error path: one line, exit code 2.
    assert common.run_main(lambda: train_lib.build_params(
        "cmlm_tf/cmlm", ["cmlm_tiny"], "trainer.train_step=10")) == 2
    assert capsys.readouterr().err == ("error: --params_override: unknown key "
                                       "trainer.train_step; did you mean trainer.train_steps?\n")


def test_numbers_without_a_dot_in_overrides_are_numbers():
    """YAML 1.1 reads `1e-7` (no dot) as a string: float fields still get the number, and a
    word in a float field is still a one-line error naming the field."""
    params = train_lib.build_params(
        "cmlm_tf/bitext", params_override="task.model.encoder.layer_norm_epsilon=1e-7,"
        "trainer.optimizer_config.learning_rate.polynomial.initial_learning_rate=5e-5")
    assert params.task.model.encoder.layer_norm_epsilon == 1e-7
    assert params.trainer.optimizer_config.learning_rate.polynomial.initial_learning_rate \
        == 5e-5
    with pytest.raises(ValueError, match="layer_norm_epsilon must be a number"):
        train_lib.build_params("cmlm_tf/bitext",
                               params_override="task.model.encoder.layer_norm_epsilon=tiny")


def test_a_value_given_to_a_block_of_settings_is_refused_naming_the_field(capsys):
    """`task.model.encoder=5` would replace the encoder's block with a number, and training
    would fail later, far from the flag."""
    assert common.run_main(lambda: train_lib.build_params(
        "cmlm_tf/cmlm", ["cmlm_tiny"], "task.model.encoder=5")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("error: --params_override: task.model.encoder is a block of "
                          "settings, not a value (got 5)")
    assert "task.model.encoder.hidden_size" in err or "hidden_size" in err
    # Its fields can still be set, and a block given as a mapping still works.
    params = train_lib.build_params("cmlm_tf/cmlm", ["cmlm_tiny"],
                                    "task.model.encoder.num_layers=1")
    assert params.task.model.encoder.num_layers == 1
