"""The command lines: --help, one-line errors through the real entry points, the learning
rate of a continued run, and configs read safely."""

import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO_DIR, TINY_CMLM_OVERRIDES, cli_env

CLIS = {
    "cmlm_tf.train": ["--experiment", "--mode", "--model_dir", "--config_file",
                      "--params_override"],
    "cmlm_tf.export.cli": ["--export_dir", "--model_dir", "--hf_dir", "--import_dir",
                           "--tflite", "--classic_wordpiece"],
    "cmlm_tf.evaluate": ["sts", "retrieval", "mining", "bias", "classify", "pcr"],
    "cmlm_tf.mine": ["--model", "--src", "--tgt", "--output"],
    "cmlm_tf.mine_hard_negatives": ["--model", "--pairs", "--num_negatives", "--range_max",
                                    "--margin"],
    "cmlm_tf.similarity": ["--model"],
    "cmlm_tf.build_vocab": ["--input", "--vocab_size", "--type"],
    "cmlm_tf.convert_hf_bert": ["--hf_dir", "--output_dir"],
    "cmlm_tf.import_model": ["--import_dir", "--output_dir"],
    "cmlm_tf.convert_nli": ["--by_language", "--languages"],
}


@pytest.mark.parametrize("module", sorted(CLIS))
def test_help_exits_0_and_lists_the_flags(module, capsys):
    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for flag in CLIS[module]:
        assert flag in text, flag
    if module == "cmlm_tf.train":
        from cmlm_tf import experiments

        for name in experiments.EXPERIMENTS:
            assert name in text
        assert "cmlm_tiny" in text  # packaged recipes by name


def test_the_static_experiment_list_is_the_registry():
    from official.core import exp_factory

    from cmlm_tf import experiments

    experiments.register()
    # Model Garden's registry nests names by their "/" parts.
    registered = {f"cmlm_tf/{name}" for name in exp_factory._REGISTERED_CONFIGS["cmlm_tf"]}
    assert registered == set(experiments.EXPERIMENTS)


def _train(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "cmlm_tf.train", *args], capture_output=True,
                          text=True, env=cli_env(), cwd=cwd or REPO_DIR, timeout=3600)


BASE = ["--experiment=cmlm_tf/cmlm", "--config_file=cmlm_tiny", "--mode=train"]


@pytest.mark.parametrize("args,names", [
    (["--params_override=trainer.train_steps=abc"], "trainer.train_steps"),
    (["--params_override=task.train_data.global_batch_size=abc"],
     "task.train_data.global_batch_size"),
    (["--config_file=/nowhere/missing.yaml"], "missing.yaml"),
    (["--config_file=BAD_YAML"], "bad.yaml"),
    (["--params_override=!!python/name:os.system"], "python/name"),
])
def test_config_mistakes_are_one_line_errors(tmp_path, args, names):
    args = [a.replace("BAD_YAML", str(tmp_path / "bad.yaml")) for a in args]
    (tmp_path / "bad.yaml").write_text("task:\n  model: [1, 2\n")
    result = _train(*BASE, f"--model_dir={tmp_path / 'run'}", *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and names in lines[0], lines
    assert not (tmp_path / "run").exists()


def test_unknown_experiment_and_unwritable_model_dir(tmp_path):
    result = _train("--experiment=cmlm_tf/nope", "--mode=train",
                    f"--model_dir={tmp_path / 'run'}")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, lines
    assert "--experiment cmlm_tf/nope: unknown experiment" in lines[0]
    assert "cmlm_tf/bitext" in lines[0]
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    result = _train(*BASE, f"--model_dir={blocker / 'run'}",
                    "--params_override=trainer.train_steps=2")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "a_file" in lines[0], lines


def test_yaml_tags_are_not_resolved(tmp_path):
    from cmlm_tf import configs

    recipe = tmp_path / "evil.yaml"
    recipe.write_text("task: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ValueError, match="evil.yaml"):
        configs.load_experiment_config([str(recipe)])


def _encoder_weights(prefix):
    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_dtype_map()
            if name.startswith("encoder/") and "optimizer" not in name}


def test_raising_train_steps_continues_training(tmp_path):
    run_dir = tmp_path / "run"
    common = [*BASE, f"--model_dir={run_dir}"]
    first = _train(*common, f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps=10")
    assert first.returncode == 0, first.stderr[-2000:]
    assert (run_dir / "params.yaml").exists()
    assert list((run_dir / "train").glob("events.out.tfevents.*"))
    more = _train(*common, f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps=20")
    assert more.returncode == 0, more.stderr[-2000:]
    assert "restored step 10 from ckpt-10" in more.stderr
    assert tf.train.latest_checkpoint(str(run_dir)).endswith("ckpt-20")
    names = [name for name, _ in tf.train.list_variables(str(run_dir / "ckpt-20"))]
    assert any(n.startswith("encoder/") for n in names)
    assert any(n.startswith("optimizer/") for n in names)
    assert "resuming the input after 10 batches" in more.stderr  # not from the head again
    before, after = _encoder_weights(run_dir / "ckpt-10"), _encoder_weights(run_dir / "ckpt-20")
    changed = [name for name in before if not np.array_equal(before[name], after[name])]
    assert len(changed) > len(before) // 2, "the added steps did not train the encoder"
    # A decay that ended before the added steps would train at learning rate 0: refused.
    stuck = _train(*common, f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps=30,"
                   "trainer.optimizer_config.learning_rate.polynomial.decay_steps=20")
    lines = stuck.stderr.strip().splitlines()
    assert stuck.returncode == 2 and len(lines) <= 6, lines
    assert "learning rate is 0 from step 20" in lines[-1] and "decay_steps" in lines[-1]
    assert not (run_dir / "ckpt-30.index").exists()
    assert "train_steps: 20" in (run_dir / "params.yaml").read_text()  # not overwritten
    # Rerunning a finished run says so, not a list of unrestored values.
    again = _train(*common, f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps=20")
    assert again.returncode == 0 and "already finished: step 20 of" in again.stderr
    assert "Unresolved object" not in again.stderr and "could not be found" not in again.stderr


def test_main_job_log_is_quiet_and_once(tmp_path):
    """No ERROR line, each block of metrics once, as plain numbers, no FLOPs warning."""
    result = _train(*BASE, f"--model_dir={tmp_path / 'run'}",
                    f"--params_override={TINY_CMLM_OVERRIDES},trainer.train_steps=20")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stderr.splitlines()
    assert not [line for line in lines if line.startswith("E") or "ERROR" in line]
    metric_lines = [line for line in lines + result.stdout.splitlines() if "output:" in line]
    assert len(metric_lines) == 2, metric_lines  # steps 10 and 20, each once
    assert "np.float32" not in result.stderr + result.stdout
    assert "FLOPs" not in result.stderr
    assert "finished: step 20" in result.stderr
    # No wait for tf.data's threads after training (they are freed in the background, and
    # the command exits without Python's teardown): the finished line ends the log.
    assert "finished: step 20" in lines[-1], lines[-3:]
    # A heartbeat at the end of each loop, one plain line each.
    assert "progress: step 10/20 (50%), " in result.stderr and "\r" not in result.stderr
    assert "progress: step 20/20 (100%), " in result.stderr
    # Orbit asks for the checkpoint more than once: the fresh start is logged once.
    assert result.stderr.count("starting at step 0") == 1
    assert "Customized initialization" not in result.stderr


def test_recipes_and_bundled_data_resolve_from_any_directory(tmp_path, monkeypatch):
    from cmlm_tf import configs, train

    monkeypatch.chdir(tmp_path)
    params = train.build_params("cmlm_tf/cmlm", ["cmlm_tiny"])
    for path in (params.task.train_data.input_path, params.task.model.tokenizer.vocab_file):
        assert os.path.isabs(path) and os.path.exists(path), path
    assert params.trainer.optimizer_config.learning_rate.polynomial.decay_steps == \
        params.trainer.train_steps
    with pytest.raises(FileNotFoundError, match="cmlm_tinyy.*cmlm_tiny"):
        configs.resolve_recipe("cmlm_tinyy")


def test_exporter_argument_errors_come_before_tensorflow():
    code = ("import sys\nfrom cmlm_tf.export import cli\n"
            "try:\n    cli.main(['--export_dir', 'out', '--model_dir', 'configs', '--hf_dir', "
            "'docs'])\n"
            "except SystemExit as e:\n    print(e.code, 'tensorflow' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=cli_env(), cwd=REPO_DIR, timeout=3600)
    assert result.stdout.split() == ["2", "False"], result.stderr[-1000:]
    assert "--model_dir and --hf_dir" in result.stderr


_TYPOS = """
import contextlib, io, json, sys
from cmlm_tf import evaluate, mine, similarity, train
from cmlm_tf.export import cli as export_cli

TRAIN = ["--experiment=cmlm_tf/cmlm", "--mode=train"]
cases = {
    "recipe": (train.main, TRAIN + ["--config_file=cmlm_tiyn", "--model_dir=run"]),
    "experiment": (train.main, ["--experiment=cmlm_tf/cmml", "--mode=train",
                                "--config_file=cmlm_tiny", "--model_dir=run"]),
    "train_flag": (train.main, TRAIN + ["--config_file=cmlm_tiny", "--model-dir=run"]),
    "export_flag": (export_cli.main, ["--export_dir=out", "--model-dir=run"]),
    "evaluate_flag": (evaluate.main, ["sts", "--modle=x", "--data=y"]),
    "mine_flag": (mine.main, ["--model=x", "--src=a", "--tgt=b", "--ouput=c"]),
    "similarity_flag": (similarity.main, ["--mdoel=x", "a", "b"]),
}
report = {}
for name, (main, argv) in cases.items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit:
            code = exit.code
    report[name] = [code, err.getvalue().strip().splitlines()[-1]]
report["tensorflow"] = "tensorflow" in sys.modules
print(json.dumps(report))
"""


def test_typos_get_did_you_mean_before_tensorflow_starts():
    """Recipe, experiment and flag typos: exit code 2, one line naming the typo and the
    closest valid name, and TensorFlow never imported (the error comes in well under 2 s;
    the test checks the import, not the time)."""
    result = subprocess.run([sys.executable, "-c", _TYPOS], capture_output=True, text=True,
                            env=cli_env(), cwd=REPO_DIR, timeout=3600)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report.pop("tensorflow") is False
    assert all(code == 2 for code, _ in report.values()), report
    lines = {name: line for name, (_, line) in report.items()}
    assert lines["recipe"] == ("error: --config_file cmlm_tiyn: no such file or packaged "
                               "recipe; did you mean 'cmlm_tiny'?")
    assert "unknown experiment; did you mean cmlm_tf/cmlm? (registered: " in lines["experiment"]
    assert lines["train_flag"] == ("python -m cmlm_tf.train: error: --model-dir: not "
                                   "recognised; did you mean --model_dir?")
    assert lines["export_flag"].endswith("--model-dir: not recognised; did you mean "
                                         "--model_dir?")
    assert lines["evaluate_flag"].endswith("--modle: not recognised; did you mean --model?")
    assert lines["mine_flag"].endswith("--ouput: not recognised; did you mean --output?")
    assert lines["similarity_flag"].endswith("--mdoel: not recognised; did you mean --model?")


def test_flag_check_knows_prefixes_numbers_and_subcommands():
    from cmlm_tf import cli, evaluate

    parser = cli.ArgumentParser(prog="x")
    parser.add_argument("--model_dir")
    parser.add_argument("--steps", type=int)
    assert parser.unrecognised_flags(["--model=a", "--steps", "-3", "--", "--zzz"]) == []
    assert parser.unrecognised_flags(["--model-dir", "a", "-q"]) == ["--model-dir", "-q"]
    # The top-level parser of a command with subcommands knows their flags.
    assert evaluate.build_parser().unrecognised_flags(["sts", "--model", "m"]) == []


def test_user_errors_are_one_line_and_internal_errors_keep_their_traceback(capsys, monkeypatch):
    from cmlm_tf import cli

    def mistake():
        raise ValueError("task.train_data.input_path: no file matches 'x*.txt'\nmore detail")

    def bug():
        raise KeyError("internal")

    monkeypatch.delenv("CMLM_TF_DEBUG", raising=False)
    assert cli.run_main(mistake) == 2
    assert capsys.readouterr().err == \
        "error: task.train_data.input_path: no file matches 'x*.txt'\n"
    with pytest.raises(KeyError, match="internal"):
        cli.run_main(bug)
    assert cli.run_main(lambda: None) == 0 and cli.run_main(lambda: 3) == 3
    monkeypatch.setenv("CMLM_TF_DEBUG", "1")  # the full traceback on request
    with pytest.raises(ValueError, match="input_path"):
        cli.run_main(mistake)


def test_unknown_config_keys_suggest_the_closest_valid_keys(tmp_path, capsys):
    from cmlm_tf import cli, train

    def error(override="", files=("cmlm_tiny",)):
        with pytest.raises(ValueError) as raised:
            train.build_params("cmlm_tf/cmlm", list(files), override)
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
    assert cli.run_main(lambda: train.build_params(
        "cmlm_tf/cmlm", ["cmlm_tiny"], "trainer.train_step=10")) == 2
    assert capsys.readouterr().err == ("error: --params_override: unknown key "
                                       "trainer.train_step; did you mean trainer.train_steps?\n")


@pytest.mark.parametrize("override,start_step,fix", [
    # The short experiment: the warm-up (100) lasts the whole decay (100 steps).
    ("trainer.train_steps=100", 0, "trainer.optimizer_config.warmup.linear.warmup_steps=10"),
    # A finished run continued past its explicit decay.
    ("trainer.train_steps=30,trainer.optimizer_config.warmup.linear.warmup_steps=2,"
     "trainer.optimizer_config.learning_rate.polynomial.decay_steps=20", 20,
     "trainer.optimizer_config.learning_rate.polynomial.decay_steps=0"),
])
def test_zero_learning_rate_guard_ends_with_the_override_that_fixes_it(override, start_step,
                                                                        fix):
    from cmlm_tf import train

    params = train.build_params("cmlm_tf/cmlm", ["cmlm_tiny"], override)
    with pytest.raises(ValueError, match="learning rate is 0") as raised:
        train.check_learning_rate(params, start_step)
    assert str(raised.value).endswith(f": --params_override={fix}"), raised.value
    # Pasting it (after the other overrides) lets the run train.
    fixed = train.build_params("cmlm_tf/cmlm", ["cmlm_tiny"], f"{override},{fix}")
    train.check_learning_rate(fixed, start_step)


@pytest.mark.parametrize("argv,flag", [
    (["cmlm_tf.export", "--model_dir={tmp}/runs/cmlm_tny", "--export_dir={tmp}/out"],
     "--model_dir"),
    (["cmlm_tf.export", "--hf_dir={tmp}/runs/cmlm_tny", "--export_dir={tmp}/out"],
     "--hf_dir/--import_dir"),
    (["cmlm_tf.similarity", "--model={tmp}/exports/cmlm_tny", "a", "b"], "--model"),
    (["cmlm_tf.mine", "--model={tmp}/exports/cmlm_tny", "--src=a", "--tgt=b", "--output=c"],
     "--model"),
    (["cmlm_tf.embed_corpus", "--model={tmp}/exports/cmlm_tny", "--input=a", "--output=c"],
     "--model"),
    (["cmlm_tf.evaluate", "sts", "--model={tmp}/exports/cmlm_tny", "--data=d"], "--model"),
], ids=["export_model_dir", "export_hf_dir", "similarity", "mine", "embed_corpus", "evaluate"])
def test_a_misspelled_input_folder_gets_the_sibling_before_tensorflow(tmp_path, argv, flag):
    """One line naming the close sibling, exit 2, and TensorFlow never imported (Python's
    import log of the run has no `tensorflow`)."""
    (tmp_path / "runs" / "cmlm_tiny").mkdir(parents=True)
    (tmp_path / "exports" / "cmlm_tiny").mkdir(parents=True)
    argv = [part.format(tmp=tmp_path) for part in argv]
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", *argv],
                            capture_output=True, text=True, env=cli_env(), cwd=REPO_DIR,
                            timeout=3600)
    assert result.returncode == 2, result.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")]
    assert "tensorflow" not in imported
    messages = [line for line in result.stderr.splitlines()
                if not line.startswith("import time:")]
    typo = argv[1 + (argv[0] == "cmlm_tf.evaluate")].split("=", 1)[1]
    sibling = typo.replace("cmlm_tny", "cmlm_tiny")
    assert messages[-1].endswith(f"error: argument {flag}: {typo}: not found; did you mean "
                                 f"{sibling}?"), messages[-1]
