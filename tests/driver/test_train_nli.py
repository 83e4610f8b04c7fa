"""`python -m cmlm_tf.train` with `cmlm_tf/nli` in a subprocess, on a generated task with a
known rule: it learns the rule and exports."""

import json
import random
import subprocess
import sys

import numpy as np

from cmlm_tf import configs, inference
from cmlm_tf.commands import export as export_cli
from cmlm_tf.modeling import sentence_encoder
from cmlm_tf.modeling.sentence_encoder import write_encoder_checkpoint
from cmlm_tf.tasks import nli as nli_task
from tests.conftest import REPO_DIR, subprocess_env, validation_scalars

BIBLE_TSV = REPO_DIR / "cmlm_tf" / "data" / "corpus" / "bible_en_es.tsv"


def _generated_nli(path, count, seed):
    """A task with a known rule, on real English sentences: the hypothesis is the premise
    itself (entailment), another sentence (neutral) or another sentence after "not not"
    (contradiction)."""
    sentences = [line.split("\t")[0] for line in
                 BIBLE_TSV.read_text(encoding="utf-8").splitlines()[:600]]
    rng = random.Random(seed)
    lines = []
    for index in range(count):
        premise = rng.choice(sentences)
        label = index % 3
        other = rng.choice(sentences)
        hypothesis = (premise, other, "not not " + other)[label]
        lines.append(f"{premise}\t{hypothesis}\t{nli_task.pair_classifier.NLI_LABELS[label]}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


NLI_RECIPE = """
task:
  model:
    encoder: {{vocab_size: 3627, hidden_size: 32, num_layers: 1, num_attention_heads: 2,
              intermediate_size: 64, max_position_embeddings: 64, dropout_rate: 0.0,
              attention_dropout_rate: 0.0}}
    tokenizer: {{vocab_file: cmlm_tf/data/corpus/vocab.txt, lower_case: true}}
  init_checkpoint: {init}
  train_data: {{input_path: {train}, global_batch_size: 32, seq_length: 32, seed: 1}}
  validation_data: {{input_path: {dev}, global_batch_size: 60, seq_length: 32}}
trainer:
  train_steps: 60
  steps_per_loop: 30
  summary_interval: 30
  checkpoint_interval: 60
  validation_interval: 60
  validation_steps: -1
  optimizer_config:
    learning_rate: {{polynomial: {{initial_learning_rate: 0.003, decay_steps: 60}}}}
    warmup: {{linear: {{warmup_steps: 10}}}}
"""


def test_driver_learns_a_generated_task_and_exports(tmp_path):
    encoder_config = configs.EncoderConfig(
        vocab_size=3627, hidden_size=32, num_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64)
    donor = sentence_encoder.build_sentence_encoder(encoder_config)
    init = write_encoder_checkpoint(donor, str(tmp_path / "warm"))
    recipe = tmp_path / "nli.yaml"
    recipe.write_text(NLI_RECIPE.format(
        init=init, train=_generated_nli(tmp_path / "train.tsv", 2000, seed=0),
        dev=_generated_nli(tmp_path / "dev.tsv", 300, seed=1)), encoding="utf-8")
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "cmlm_tf.train", "--experiment=cmlm_tf/nli",
         f"--config_file={recipe}", "--mode=train_and_eval", f"--model_dir={run_dir}"],
        cwd=REPO_DIR, capture_output=True, text=True, env=subprocess_env(), timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Warm-started from" in result.stderr
    accuracy = validation_scalars(run_dir / "validation")["accuracy"]
    assert accuracy > 0.6, f"validation accuracy {accuracy} (chance is 1/3)"

    export_dir = tmp_path / "export"
    assert export_cli.main(["--model_dir", str(run_dir), "--export_dir", str(export_dir)]) == 0
    meta = json.loads((export_dir / "cmlm_tf_export.json").read_text(encoding="utf-8"))
    assert meta["dim"] == 32
    vectors = inference.load(str(export_dir)).encode(["And Jesus wept.", "Jesus wept."])
    assert vectors.shape == (2, 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=-1), 1.0, rtol=1e-5)
