"""The XLA proxy for Cloud TPU on a CPU: every experiment's train and validation steps compile
with `jit_compile=True` on batches from the task's own `build_inputs`, in float32 and in
mixed bfloat16, and every input pipeline has the fully static shapes a TPU needs."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tf_keras
from official.core import task_factory

from cmlm_tf import configs
from cmlm_tf.data import bitext
from cmlm_tf.driver import train_lib
from cmlm_tf.tasks import base, cmlm, experiment_registry
from cmlm_tf.text import tokenization
from cmlm_tf.training import op_census, recompute, steps
from tests.conftest import (
    REPO_DIR,
    TINY_CMLM_OVERRIDES,
    TINY_WORDS,
    subprocess_env,
    tiny_cmlm_config,
    validation_scalars,
    write_corpus,
)

CORPUS = REPO_DIR / "cmlm_tf" / "data" / "corpus"

# One layer of 16, short sequences, batches of 8: the graph a TPU would compile, in small.
SHRINK = ("task.model.encoder.hidden_size=16,task.model.encoder.num_layers=1,"
          "task.model.encoder.num_attention_heads=2,task.model.encoder.intermediate_size=32,"
          "task.model.encoder.max_position_embeddings=32,"
          "task.train_data.global_batch_size=8,task.validation_data.global_batch_size=8,"
          "task.train_data.seq_length=12,task.validation_data.seq_length=12,"
          "task.train_data.shuffle_buffer_size=16")
MASKING = ("task.train_data.max_predictions_per_seq=3,"
           "task.validation_data.max_predictions_per_seq=3")
READS = "task.train_data.input_path={{{0}}},task.validation_data.input_path={{{0}}}"

# Case id -> (objective, case): every objective's XLA cases, from the registration table.
CASES = {case.name: (objective, case) for objective in experiment_registry.OBJECTIVES
         for case in objective.xla_cases}


def case_overrides(case: experiment_registry.XlaCase) -> str:
    """The case's overrides after `SHRINK`: the files both splits read, masking, its own."""
    parts = [READS.format(case.reads) if case.reads else "",
             MASKING if case.masked_lm else "", case.overrides]
    return ",".join(part for part in parts if part)


@pytest.fixture(scope="module")
def data_files(tmp_path_factory, tiny_sp_model):
    """Format values for `CASES`: bitext with one hard negative per pair, NLI triples, and
    the SentencePiece model BGT needs."""
    folder = tmp_path_factory.mktemp("xla_data")
    words = TINY_WORDS[:20]
    pairs, negatives = folder / "pairs.tsv", folder / "negatives.tsv"
    pairs.write_text("".join(f"{a} {b}\t{b} {a}\n" for a in words[:6] for b in words[6:12]),
                     encoding="utf-8")
    negatives.write_text("".join(f"{a} {b}\t{b} {a}\t{a} {a}\n" for a in words[:6]
                                 for b in words[6:12]), encoding="utf-8")
    nli = folder / "nli.tsv"
    labels = ("entailment", "neutral", "contradiction")
    nli.write_text("".join(f"the {a}\tthe {b}\t{labels[i % 3]}\n"
                           for i, (a, b) in enumerate(zip(words, reversed(words)))),
                   encoding="utf-8")
    tokenizer = configs.TokenizerConfig(type="sentencepiece", sp_model_file=str(tiny_sp_model))
    vocab_size = tokenization.special_token_ids(
        tokenization.build_tokenizer(tokenizer))["vocab_size"]
    return {"pairs": pairs, "negatives": negatives, "nli": nli, "sp_model": tiny_sp_model,
            "sp_vocab_size": vocab_size, "vocab": CORPUS / "vocab.txt"}


def case_params(case, files, extra=""):
    objective, xla_case = CASES[case]
    recipes = xla_case.base_recipes + ((objective.tiny_recipe,) if objective.tiny_recipe else ())
    return train_lib.build_params(objective.experiment,
                                  [str(REPO_DIR / "configs" / f) for f in recipes],
                                  SHRINK + "," + case_overrides(xla_case).format(**files) + extra)


def build_task(case, files, extra=""):
    params = case_params(case, files, extra)
    return params, task_factory.get_task(params.task)


def _first_batch(task, data_config):
    """The first batch of `task.build_inputs(data_config)`, whose `element_spec` must be
    fully static, as TPUStrategy requires of every input."""
    dataset = task.build_inputs(data_config)
    dynamic = {str(spec) for spec in tf.nest.flatten(dataset.element_spec)
               if not spec.shape.is_fully_defined()}
    assert not dynamic, f"{base_field(data_config)}: dynamic shapes {sorted(dynamic)}"
    return next(iter(dataset))


def base_field(data_config):
    return base.data_field(data_config)


@pytest.fixture(scope="module")
def case_batches(data_files):
    """(case id, extra overrides) -> (task, its first train batch, its first validation
    batch), built once for both precisions where they share the task: the inputs do not
    depend on the Keras policy, only the model does."""
    cache = {}

    def get(case, extra=""):
        if (case, extra) not in cache:
            params, task = build_task(case, data_files, extra)
            cache[case, extra] = (task, _first_batch(task, params.task.train_data),
                                  _first_batch(task, params.task.validation_data))
        return cache[case, extra]

    return get


@pytest.fixture(params=["float32", "mixed_bfloat16"])
def policy(request):
    previous = tf_keras.mixed_precision.global_policy()
    tf_keras.mixed_precision.set_global_policy(request.param)
    yield request.param
    tf_keras.mixed_precision.set_global_policy(previous)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.usefixtures("driver_runs")
def test_train_and_validation_steps_compile_with_xla(case, policy, case_batches):
    """Static input shapes, one compiled train step and one compiled validation step; in
    float32 the compiled validation step gives the plain step's loss. SGD keeps the traced
    graph small (the recipes' optimizers compile in `test_driver_runs_with_xla`)."""
    bfloat16 = CASES[case][1].bfloat16_overrides
    extra = "," + bfloat16 if policy == "mixed_bfloat16" and bfloat16 else ""
    task, train_batch, eval_batch = case_batches(case, extra)
    tf_keras.utils.set_random_seed(1)
    model = task.build_model()
    optimizer = tf_keras.optimizers.SGD(learning_rate=0.1)
    train_metrics = task.build_metrics(training=True)
    eval_metrics = task.build_metrics(training=False)
    # Every variable exists before the first trace (an eager forward builds the lazy heads),
    # so `tf.function` traces each step once instead of again after creating variables.
    task.validation_step(eval_batch, model, None)
    optimizer.build(model.trainable_variables)
    before = [v.numpy() for v in model.trainable_variables]

    train_step = tf.function(lambda x: task.train_step(x, model, optimizer, train_metrics),
                             jit_compile=True)
    # Two steps: MoCo's first one has an empty queue, no negatives and no gradient.
    for _ in range(2):
        loss = float(train_step(train_batch)[task.loss])
    assert np.isfinite(loss) and loss > 0, loss
    assert int(optimizer.iterations) == 2
    moved = [not np.array_equal(b, v.numpy()) for b, v in zip(before, model.trainable_variables)]
    assert sum(moved) > len(moved) // 2, f"{sum(moved)} of {len(moved)} weights moved"
    for metric in train_metrics:
        assert np.all(np.isfinite(metric.result())), metric.name
    # No serial loop on an accelerator: no `sort` (the `tf.unique` of a sparse embedding
    # gradient lowers to sorts and a loop over every token id), and no `while` but the
    # cached step's two passes over its chunks (unrolled where there are few).
    census = op_census.op_census(train_step.experimental_get_compiler_ir(train_batch)(stage="hlo"))
    passes = 2 if "cached" in case else 0
    assert census["sort"] == 0 and census["while"] <= passes, census

    eval_step = tf.function(lambda x: task.validation_step(x, model, eval_metrics),
                            jit_compile=True)
    eval_loss = float(eval_step(eval_batch)[task.loss])
    assert np.isfinite(eval_loss), eval_loss
    if policy == "float32":
        plain = float(task.validation_step(eval_batch, model, None)[task.loss])
        np.testing.assert_allclose(eval_loss, plain, rtol=1e-4)


def _real_rows(batch):
    """`batch` without its filler rows (`example_weight` 0), at their dynamic size."""
    keep = batch["example_weight"] > 0
    rows = batch["example_weight"].shape[0]
    return tf.nest.map_structure(
        lambda value: tf.boolean_mask(value, keep) if value.shape[:1] == [rows] else value,
        batch)


def test_padded_evaluation_counts_every_example_once(tmp_path, tiny_vocab):
    """CMLM validation over 10 sentence pairs at batch 4: three static batches, the last with
    two filler rows of weight 0; the aggregated metrics equal those of the same batches with
    the fillers cut out, and every pair is counted exactly once."""
    corpus = write_corpus(tmp_path / "c.txt", [["the dog", "a cat", "a man"]] * 5)
    config = tiny_cmlm_config(tiny_vocab, corpus)
    config.validation_data.override(dict(
        input_path=str(corpus), global_batch_size=4, seq_length=8, max_predictions_per_seq=2,
        mask_ratio=1.0, seed=3))

    task = cmlm.CMLMTask(config)
    dataset = task.build_inputs(config.validation_data)
    assert dataset.element_spec["sentence2"]["input_word_ids"].shape == [4, 8]
    batches = list(dataset)
    weights = np.concatenate([b["example_weight"].numpy() for b in batches])
    np.testing.assert_array_equal(weights, [1.0] * 10 + [0.0] * 2)
    assert float(tf.reduce_sum(batches[-1]["masked_lm_weights"][2:])) == 0.0

    tf_keras.utils.set_random_seed(0)
    model = task.build_model()
    padded, unpadded = task.build_metrics(training=False), task.build_metrics(training=False)
    step = tf.function(lambda x: task.validation_step(x, model, padded), jit_compile=True)
    for batch in batches:
        step(batch)
        task.validation_step(_real_rows(batch), model, unpadded)
    for got, expected in zip(padded, unpadded):
        np.testing.assert_allclose(float(got.result()), float(expected.result()), rtol=1e-5,
                                   err_msg=got.name)
    assert float({m.name: m for m in unpadded}["mlm_loss"].result()) > 0
    # The accuracy's denominator: the real predictions of the ten pairs, no filler's.
    accuracy = {m.name: m for m in padded}["masked_lm_accuracy"]
    real = sum(float(tf.reduce_sum(b["masked_lm_weights"])) for b in batches)
    assert float(accuracy.count) == real > 0


def test_padding_needs_row_weights(tmp_path, tiny_vocab):
    pairs = tmp_path / "p.tsv"
    pairs.write_text("the dog\tthe cat\na man\ta woman\n", encoding="utf-8")
    data = bitext.BitextDataConfig(input_path=str(pairs), global_batch_size=4, seq_length=8,
                                   is_training=False, drop_remainder=False)
    with pytest.raises(ValueError, match="task.validation_data.drop_remainder: false pads"):
        bitext.bitext_dataset(data, configs.TokenizerConfig(vocab_file=str(tiny_vocab)),
                              field="task.validation_data")


# Two short `--mode=train_and_eval` runs of the driver with `runtime.enable_xla` (10 steps,
# an evaluation of 2 batches after each 5): cmlm_tiny, and bitext_tiny with cached ranking.
DRIVER_RUNS = {
    "cmlm_tiny": ("cmlm_tf/cmlm", "cmlm_tiny.yaml",
                  TINY_CMLM_OVERRIDES + ",task.validation_data.global_batch_size=8"),
    "bitext_tiny_cached": (
        "cmlm_tf/bitext", "bitext_tiny.yaml",
        TINY_CMLM_OVERRIDES + ",task.validation_data.global_batch_size=8,"
        "task.train_data.seq_length=32,task.validation_data.seq_length=32,"
        "task.margin_softmax.mini_batch_size=4"),
}
DRIVER_STEPS = ("trainer.train_steps=10,trainer.steps_per_loop=5,trainer.summary_interval=5,"
                "trainer.checkpoint_interval=10,trainer.validation_interval=5,"
                "trainer.validation_steps=2,task.train_data.shuffle_buffer_size=100")


def start_driver(name, model_dir):
    """Starts `DRIVER_RUNS[name]` with `runtime.enable_xla` to `model_dir`, its log
    (TensorFlow's INFO lines included) going to `model_dir`.log; returns the process and the
    log's path."""
    experiment, recipe, overrides = DRIVER_RUNS[name]
    env = dict(subprocess_env(), XLA_FLAGS=os.environ["XLA_FLAGS"], TF_CPP_MIN_LOG_LEVEL="0")
    log = model_dir.parent / f"{model_dir.name}.log"
    with open(log, "w", encoding="utf-8") as stream:
        process = subprocess.Popen(
            [sys.executable, "-m", "cmlm_tf.train", f"--experiment={experiment}",
             f"--config_file=configs/{recipe}", "--mode=train_and_eval",
             f"--model_dir={model_dir}",
             f"--params_override={overrides},{DRIVER_STEPS},runtime.enable_xla=true"],
            cwd=REPO_DIR, stdout=subprocess.DEVNULL, stderr=stream, text=True, env=env)
    return process, log


@pytest.fixture(scope="module")
def driver_runs(tmp_path_factory):
    """The runs of `test_driver_runs_with_xla`, started by the module's first test: each run
    is mostly single-threaded tracing and compiling, so on two cores they go on beside the
    in-process compiles, and the test at the end of the module collects them."""
    folder = tmp_path_factory.mktemp("xla_driver")
    runs = {name: start_driver(name, folder / name) for name in sorted(DRIVER_RUNS)}
    yield folder, runs
    for process, _ in runs.values():
        process.kill()


def test_driver_runs_with_xla(driver_runs):
    """`runtime.enable_xla: true` compiles the driver's train and eval steps (static eval
    batches included): each run trains and evaluates twice with finite losses."""
    folder, runs = driver_runs
    returncodes = {name: process.wait(timeout=3600) for name, (process, _) in runs.items()}
    for name, (_, log_path) in runs.items():
        log = log_path.read_text(encoding="utf-8")
        assert returncodes[name] == 0, f"{name}: {log[-3000:]}"
        assert "Compiled cluster using XLA" in log, name
        train_logs = validation_scalars(folder / name / "train")
        eval_logs = validation_scalars(folder / name / "validation")
        assert np.isfinite(train_logs["training_loss"]) and train_logs["training_loss"] > 0
        assert np.isfinite(eval_logs["validation_loss"]) and eval_logs["validation_loss"] > 0
        assert tf.train.latest_checkpoint(str(folder / name)).endswith("ckpt-10"), name


def test_lean_step_gives_the_plain_update(case_batches):
    """The step as an accelerator runs it now (the embedding's gradient dense, so no
    `tf.unique` and no serial loop; attention cores and GELU recomputed in the backward pass)
    gives, compiled, the loss and the AdamW update (weight decay on, dropout off) of the step
    as it was (the sparse gradient Keras deduplicated, every intermediate kept), within
    1e-5."""
    task, train_batch, _ = case_batches("bitext")

    def one_step(*, now: bool):
        tf_keras.utils.set_random_seed(1)
        model = task.build_model()
        for layer in model.submodules:
            if isinstance(layer, tf_keras.layers.Dropout):
                layer.rate = 0.0
            if isinstance(layer, tf_keras.layers.MultiHeadAttention):
                layer._dropout = 0.0
        optimizer = tf_keras.optimizers.AdamW(learning_rate=1e-2, weight_decay=0.01)
        optimizer.build(model.trainable_variables)
        dense_gradient, make_lean = steps.dense_gradient, recompute.make_lean
        if not now:
            steps.dense_gradient = lambda grad: grad
            recompute.make_lean = lambda model: 0
        try:
            step = tf.function(lambda x: task.train_step(x, model, optimizer, None),
                               jit_compile=True)
            loss = float(step(train_batch)[task.loss])
            hlo = step.experimental_get_compiler_ir(train_batch)(stage="hlo")
            # (sorts, recomputations: each lean layer ties its second run with a barrier)
            sorts = op_census.op_census(hlo)["sort"], hlo.count(" opt-barrier(")
        finally:
            steps.dense_gradient, recompute.make_lean = dense_gradient, make_lean
        return loss, sorts, [v.numpy() for v in model.trainable_variables]

    lean_loss, lean_sorts, lean_weights = one_step(now=True)
    plain_loss, plain_sorts, plain_weights = one_step(now=False)
    assert lean_sorts[0] == 0 and plain_sorts[0] > 0, (lean_sorts, plain_sorts)
    # One transformer layer: its attention core and its GELU recomputed; nothing in the plain
    # step.
    assert lean_sorts[1] == 2 and plain_sorts[1] == 0, (lean_sorts, plain_sorts)
    np.testing.assert_allclose(lean_loss, plain_loss, rtol=1e-5)
    for lean, plain in zip(lean_weights, plain_weights):
        np.testing.assert_allclose(lean, plain, rtol=1e-5, atol=1e-7)

