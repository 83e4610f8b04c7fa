"""The command lines: --help, one-line errors through the real entry points, and the learning
rate of a continued run. (Config files read safely: tests/test_config_files.py.)"""

import importlib
import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from cmlm_tf.driver import train_lib
from cmlm_tf.tasks import experiment_registry
from tests.conftest import REPO_DIR, TINY_CMLM_OVERRIDES, cli_env, run_child

CLIS = {
    "cmlm_tf.commands.train": ["--experiment", "--mode", "--model_dir", "--config_file",
                      "--params_override"],
    "cmlm_tf.commands.export": ["--export_dir", "--model_dir", "--hf_dir", "--import_dir",
                           "--tflite", "--classic_wordpiece"],
    "cmlm_tf.commands.evaluate": ["sts", "retrieval", "mining", "bias", "classify", "pcr"],
    "cmlm_tf.commands.mine": ["--model", "--src", "--tgt", "--output"],
    "cmlm_tf.commands.mine_hard_negatives": ["--model", "--pairs", "--num_negatives", "--range_max",
                                    "--margin"],
    "cmlm_tf.commands.similarity": ["--model"],
    "cmlm_tf.commands.build_vocab": ["--input", "--vocab_size", "--type"],
    "cmlm_tf.commands.convert_hf_bert": ["--hf_dir", "--output_dir"],
    "cmlm_tf.commands.import_model": ["--import_dir", "--output_dir"],
    "cmlm_tf.commands.convert_nli": ["--by_language", "--languages"],
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
    if module == "cmlm_tf.commands.train":
        for name in experiment_registry.EXPERIMENTS:
            assert name in text
        assert "cmlm_tiny" in text  # packaged recipes by name


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


def test_exporter_argument_errors_come_before_tensorflow():
    result = run_child("exporter_argument_error")
    assert result.stdout.split() == ["2", "False"], result.stderr[-1000:]
    assert "--model_dir and --hf_dir" in result.stderr


def test_typos_get_did_you_mean_before_tensorflow_starts():
    """Recipe, experiment and flag typos: exit code 2, one line naming the typo and the
    closest valid name, and TensorFlow never imported (the error comes in well under 2 s;
    the test checks the import, not the time)."""
    result = run_child("typo_report")
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
    params = train_lib.build_params("cmlm_tf/cmlm", ["cmlm_tiny"], override)
    with pytest.raises(ValueError, match="learning rate is 0") as raised:
        train_lib.check_learning_rate(params, start_step)
    assert str(raised.value).endswith(f": --params_override={fix}"), raised.value
    # Pasting it (after the other overrides) lets the run train.
    fixed = train_lib.build_params("cmlm_tf/cmlm", ["cmlm_tiny"], f"{override},{fix}")
    train_lib.check_learning_rate(fixed, start_step)


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
