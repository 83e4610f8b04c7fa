"""NLI finetuning: the MNLI/XNLI converter, the moco multitask, the recipes and the
`cmlm_tf/nli` driver on a generated task with a known rule."""

import json
import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from cmlm_tf import convert_nli
from cmlm_tf.data import nli
from cmlm_tf.modeling import pair_classifier
from cmlm_tf.modeling.sentence_encoder import write_encoder_checkpoint
from cmlm_tf.tasks import nli as nli_task
from tests.conftest import (
    REPO_DIR,
    moco_batch,
    subprocess_env,
    tiny_moco_task,
    validation_scalars,
    write_byte_lines,
)

BIBLE_TSV = REPO_DIR / "cmlm_tf" / "data" / "corpus" / "bible_en_es.tsv"


def test_converter_reads_mnli_and_aligns_xnli_by_pair(tmp_path):
    mnli = tmp_path / "mnli.txt"
    mnli.write_text(
        "gold_label\tsentence1_parse\tsentence1\tsentence2\tpairID\n"
        "neutral\t(x)\tA man.\tA tall man.\t1\n"
        "-\t(x)\tNo consensus.\tNone.\t2\n"
        "contradiction\t(x)\tA dog.\tNo  dog.\t3\n", encoding="utf-8")
    out = tmp_path / "out" / "mnli.tsv"
    assert convert_nli.main([str(mnli), str(out)]) == 0
    assert out.read_text(encoding="utf-8").splitlines() == [
        "A man.\tA tall man.\tneutral", "A dog.\tNo dog.\tcontradiction"]

    xnli = tmp_path / "xnli.tsv"
    xnli.write_text(
        "language\tgold_label\tsentence1\tsentence2\tpairID\n"
        "en\tentailment\tHi.\tHello.\t1\nes\tentailment\tHola.\tBuenas.\t1\n"
        "en\tneutral\tRain.\tCold.\t2\n"                      # no Spanish side: dropped
        "es\tcontradiction\tSol.\tLluvia.\t3\nen\tcontradiction\tSun.\tRain.\t3\n",
        encoding="utf-8")
    counts = convert_nli.convert(str(xnli), str(tmp_path / "x"), by_language=True)
    assert counts == {"written": 2, "dropped": 1, "files": 2}
    english = (tmp_path / "x.en.tsv").read_text(encoding="utf-8").splitlines()
    spanish = (tmp_path / "x.es.tsv").read_text(encoding="utf-8").splitlines()
    assert english == ["Hi.\tHello.\tentailment", "Sun.\tRain.\tcontradiction"]
    assert spanish == ["Hola.\tBuenas.\tentailment", "Sol.\tLluvia.\tcontradiction"]
    assert nli.scan_nli([str(tmp_path / "x.en.tsv"), str(tmp_path / "x.es.tsv")],
                        cross_lingual=True).examples == 2


def _nli_batch(rows, seed):
    pairs = moco_batch(rows, seed)
    return {"premise": pairs["source"], "hypothesis": pairs["target"],
            "label": tf.constant(np.arange(rows) % 3, tf.int32)}


def test_multitask_loss_is_moco_plus_alpha_nli(tmp_path):
    nli_file = write_byte_lines(tmp_path / "nli.tsv", [b"a\tb\tneutral"])
    task = tiny_moco_task(queue_size=12)
    task.task_config.nli_data.input_path = nli_file
    assert task.task_config.nli_weight == 0.1
    assert task.task_config.nli_data.global_batch_size == 128
    assert task.task_config.nli_head.hidden_sizes == [256]
    model = task.build_model()
    assert "nli_head" in model.checkpoint_items
    inputs = dict(moco_batch(4, seed=1), nli=_nli_batch(6, seed=2))
    outputs = model(inputs, training=False)
    losses = task.compute_losses(inputs, outputs)

    logits = outputs["nli_logits"].numpy().astype(np.float64)
    labels = inputs["nli"]["label"].numpy()
    log_probs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    expected_nli = -log_probs[np.arange(6), labels].mean()
    np.testing.assert_allclose(losses["nli_loss"].numpy(), expected_nli, rtol=1e-5)
    without_nli = task.compute_losses(
        inputs, {k: v for k, v in outputs.items() if k != "nli_logits"})
    np.testing.assert_allclose(losses["contrastive_loss"].numpy(),
                               without_nli["loss"].numpy(), rtol=1e-6)
    np.testing.assert_allclose(losses["loss"].numpy(),
                               without_nli["loss"].numpy() + 0.1 * expected_nli, rtol=1e-5)

    # The NLI term trains the shared query encoder and the head, not the key encoder.
    with tf.GradientTape() as tape:
        nli_only = task.compute_losses(inputs, model(inputs, training=False))["nli_loss"]
    grads = tape.gradient(nli_only, model.encoder.trainable_variables
                          + model.pair_head.trainable_variables)
    assert all(g is not None for g in grads)
    assert not model.key_encoder.trainable_variables

    task.task_config.nli_weight = 0.0
    with pytest.raises(ValueError, match="task.nli_weight must be positive"):
        task.build_model()


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
    from cmlm_tf import configs, inference
    from cmlm_tf.export import cli as export_cli
    from cmlm_tf.modeling import sentence_encoder

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


def test_recipes_load_and_config_errors_name_the_field():
    from cmlm_tf import train

    moco = train.build_params("cmlm_tf/moco", [str(REPO_DIR / "configs/moco_bert_base.yaml"),
                                               str(REPO_DIR / "configs/moco_nli.yaml")])
    assert (moco.task.nli_weight, moco.task.nli_data.global_batch_size) == (0.1, 128)
    assert moco.task.nli_head.hidden_sizes == [256]
    crossed = train.build_params("cmlm_tf/nli",
                                 [str(REPO_DIR / "configs/nli_cross_lingual_base.yaml")])
    assert crossed.task.train_data.cross_lingual and not crossed.task.nli_head.hidden_sizes
    with pytest.raises(ValueError, match="task.nli_head.dropout_rate must be in"):
        pair_classifier.build_head(pair_classifier.NLIHeadConfig(dropout_rate=1.5))
