r"""What an accelerator would run: each experiment's train step compiled with XLA, its op census
(serial loops) and the compiled program's temporary memory, on this machine's CPU backend.

    python benchmarks/accelerator_step.py [--cases bitext_b256_f32,...] [--list]
    python benchmarks/accelerator_step.py --cpu_speed 20

Each case is a task's `train_step` with its recipe's optimizer inside
`tf.function(jit_compile=True)` (what `runtime.enable_xla` compiles on a GPU or TPU), traced
on a batch from the task's own `build_inputs` at all-MiniLM-L6-v2's shapes (6 layers, hidden
384, 12 heads, intermediate 1536, vocabulary 30,522, dropout 0.1) unless the case says
otherwise. Each runs in its own process with `XLA_FLAGS=--xla_dump_to=...`, and prints:

- the census of the HLO TensorFlow hands to XLA: `sort`, `while` and random-number ops
  (`rng`, `rng-bit-generator`). A `sort` or `while` over the batch's token ids is a serial
  loop on a GPU or TPU (it cost the MiniLM bitext step 94 % of its time on an H100);
- the compiled program's temporary memory (XLA's buffer assignment: the `preallocated-temp`
  allocation), besides parameters and outputs; XLA's CPU backend schedules differently from
  the GPU or TPU backends, so compare cases with each other, measured the same way.

Nothing is executed: the step is traced and compiled only, so batch 1024 at MiniLM size
measures in about a minute on 2 cores. Step times on a GPU against PyTorch come from the
shared harness `../shared/tools/xla_accelerator/` (see docs/tpu.md).
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(REPO_DIR, "cmlm_tf", "data", "corpus")
MINILM = {"vocab_size": 30522, "hidden_size": 384, "num_layers": 6, "num_attention_heads": 12,
          "intermediate_size": 1536, "hidden_activation": "gelu_exact",
          "max_position_embeddings": 512, "dropout_rate": 0.1, "attention_dropout_rate": 0.1}
BERT_BASE = dict(MINILM, hidden_size=768, num_layers=12, intermediate_size=3072)
SIZES = {"minilm": MINILM, "bert_base": BERT_BASE}

# name -> (experiment, recipe under configs/, size, global batch, seq, precision, options)
CASES = {
    "bitext_b256_f32": ("cmlm_tf/bitext", "bitext_minilm", "minilm", 256, 128, "float32", {}),
    "bitext_b256_bf16": ("cmlm_tf/bitext", "bitext_minilm", "minilm", 256, 128, "bfloat16",
                         {}),
    "bitext_b1024_bf16": ("cmlm_tf/bitext", "bitext_minilm", "minilm", 1024, 128, "bfloat16",
                          {}),
    "bitext_b1024_f32_cached128": ("cmlm_tf/bitext", "bitext_minilm", "minilm", 1024, 128,
                                   "float32", {"chunk": 128}),
    "bitext_base_b256_bf16": ("cmlm_tf/bitext", "bitext_minilm", "bert_base", 256, 128,
                              "bfloat16", {}),
    "bitext_b64_bf16": ("cmlm_tf/bitext", "bitext_minilm", "minilm", 64, 128, "bfloat16", {}),
    "bitext_base_b64_bf16": ("cmlm_tf/bitext", "bitext_minilm", "bert_base", 64, 128,
                             "bfloat16", {}),
    "cmlm_b64_bf16": ("cmlm_tf/cmlm", "cmlm_tiny", "minilm", 64, 128, "bfloat16", {}),
    "cmlm_base_b64_bf16": ("cmlm_tf/cmlm", "cmlm_tiny", "bert_base", 64, 128, "bfloat16", {}),
    "cmlm_b256_f32": ("cmlm_tf/cmlm", "cmlm_tiny", "minilm", 256, 128, "float32", {}),
    "cmlm_b256_bf16": ("cmlm_tf/cmlm", "cmlm_tiny", "minilm", 256, 128, "bfloat16", {}),
    "cmlm_base_b256_bf16": ("cmlm_tf/cmlm", "cmlm_tiny", "bert_base", 256, 128, "bfloat16",
                            {}),
    "moco_b256_f32": ("cmlm_tf/moco", "moco_tiny", "minilm", 256, 128, "float32", {}),
}
DEFAULT_CASES = ("bitext_b256_f32", "bitext_b256_bf16", "bitext_b1024_bf16", "cmlm_b256_f32",
                 "moco_b256_f32")


def _case_params(name: str, workdir: str):
    from cmlm_tf.driver import train_lib

    experiment, recipe, size, batch, seq, precision, options = CASES[name]
    overrides = [f"task.model.encoder.{key}={value}" for key, value in SIZES[size].items()]
    overrides += [f"task.train_data.global_batch_size={batch}",
                  f"task.train_data.seq_length={seq}",
                  "task.train_data.shuffle_buffer_size=100",
                  f"task.model.encoder.max_position_embeddings={max(512, seq)}"]
    # A WordPiece vocabulary of MiniLM's size: the bundled one, then fillers. Only the batch's
    # shapes matter here, not which ids it holds.
    vocab = os.path.join(workdir, "vocab.txt")
    with open(os.path.join(CORPUS, "vocab.txt"), encoding="utf-8") as f:
        words = [line.rstrip("\n") for line in f]
    words += [f"[unused{i}]" for i in range(MINILM["vocab_size"] - len(words))]
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(words) + "\n")
    overrides += [f"task.model.tokenizer.vocab_file={vocab}",
                  "task.model.tokenizer.type=wordpiece", "task.model.tokenizer.lower_case=true"]
    if experiment in ("cmlm_tf/bitext", "cmlm_tf/moco"):
        overrides.append(f"task.train_data.input_path={CORPUS}/bible_en_es.tsv")
    if experiment == "cmlm_tf/moco":
        overrides.append("task.moco.queue_size=4096")
    if experiment == "cmlm_tf/cmlm":
        overrides.append("task.train_data.max_predictions_per_seq=20")
    if "chunk" in options:
        overrides.append(f"task.margin_softmax.mini_batch_size={options['chunk']}")
    if precision == "bfloat16":
        overrides.append("runtime.mixed_precision_dtype=bfloat16")
    return train_lib.build_params(experiment, [os.path.join(REPO_DIR, "configs", recipe + ".yaml")],
                                  ",".join(overrides))


def temp_bytes(dump_dir: str) -> int:
    """The largest `preallocated-temp` allocation of the compiled programs dumped in
    `dump_dir` (the train step is the largest program)."""
    largest = 0
    for path in glob.glob(os.path.join(dump_dir, "*buffer-assignment.txt")):
        with open(path, encoding="utf-8") as f:
            for match in re.finditer(r"allocation \d+: size (\d+), preallocated-temp", f.read()):
                largest = max(largest, int(match.group(1)))
    return largest


def one_case(name: str, dump_dir: str) -> dict:
    import tensorflow as tf
    import tf_keras
    from official.core import task_factory

    from cmlm_tf.training import op_census

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as workdir:
        params = _case_params(name, workdir)
        if params.runtime.mixed_precision_dtype == "bfloat16":
            tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
        task = task_factory.get_task(params.task)
        batch = next(iter(task.build_inputs(params.task.train_data)))
    tf_keras.utils.set_random_seed(1)
    model = task.build_model()
    optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
    task.validation_step(batch, model, None)  # builds every layer before the trace
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if hasattr(type(inner), "build"):
        inner.build(model.trainable_variables)
    step = tf.function(lambda x: task.train_step(x, model, optimizer, None), jit_compile=True)
    compiler_ir = step.experimental_get_compiler_ir(batch)
    counts = op_census.op_census(compiler_ir(stage="hlo"))
    compiler_ir(stage="optimized_hlo")  # compiles: the buffer assignment is dumped
    weights = sum(int(tf.size(v)) * v.dtype.size for v in model.trainable_variables)
    return dict(case=name, **counts, temp_bytes=temp_bytes(dump_dir), weights_bytes=weights,
                seconds=time.perf_counter() - started)


def cpu_speed(rounds: int) -> None:
    """The CPU path: MiniLM bitext at the recipe's batch (32 pairs of 32 tokens), a plain
    `tf.function` step (no XLA, as training on a CPU runs it), as it is now (dense embedding
    gradient, lean attention and GELU) and as it was (the sparse gradient Keras deduplicates,
    every intermediate kept), alternating in one process so both see the same load."""
    import numpy as np
    import tensorflow as tf
    import tf_keras
    from official.core import task_factory

    from cmlm_tf.training import recompute, steps

    with tempfile.TemporaryDirectory() as workdir:
        params = _case_params("bitext_b256_f32", workdir)
        params.task.train_data.global_batch_size = 32
        params.task.train_data.seq_length = 32
        task = task_factory.get_task(params.task)
        batch = next(iter(task.build_inputs(params.task.train_data)))
    dense_gradient, make_lean = steps.dense_gradient, recompute.make_lean
    variants = {"now": (dense_gradient, make_lean),
                "before": (lambda grad: grad, lambda model: 0)}
    runs = {}
    for name, (gradient, lean) in variants.items():
        tf_keras.utils.set_random_seed(1)
        model = task.build_model()
        optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
        steps.dense_gradient, recompute.make_lean = gradient, lean
        step = tf.function(lambda x, m=model, o=optimizer: task.train_step(x, m, o, None))
        step(batch)  # traces this variant
        runs[name] = step
    steps.dense_gradient, recompute.make_lean = dense_gradient, make_lean
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, step in runs.items():
            started = time.perf_counter()
            float(step(batch)[task.loss])
            times[name].append(time.perf_counter() - started)
    for name, values in times.items():
        print(f"CPU step, MiniLM bitext batch 32 seq 32, {name}: median "
              f"{np.median(values) * 1000:.0f} ms over {rounds} steps", flush=True)


def run_case(name: str) -> dict:
    with tempfile.TemporaryDirectory() as dump_dir:
        env = dict(os.environ)
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + f" --xla_dump_to={dump_dir}"
                            " --xla_backend_optimization_level=0"
                            " --xla_llvm_disable_expensive_passes=true").strip()
        result = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", name,
                                 "--dump_dir", dump_dir], capture_output=True, text=True,
                                cwd=REPO_DIR, env=env)
    if result.returncode != 0:
        tail = result.stderr.strip().splitlines()[-1:] or ["(no output)"]
        return {"case": name, "error": f"exit {result.returncode}: {tail[0]}"}
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES),
                        help="comma-separated case names (--list shows them)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--cpu_speed", type=int, default=0, metavar="ROUNDS",
                        help="instead: time the plain CPU step as it is now and as it was "
                             "(sparse gradient, no lean layers), ROUNDS steps each, "
                             "alternating")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--dump_dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.list:
        for name, (experiment, recipe, size, batch, seq, precision, options) in CASES.items():
            print(f"{name}: {experiment} ({recipe}), {size}, batch {batch}, seq {seq}, "
                  f"{precision}, {options or ''}")
        return 0
    if args.one:
        print(json.dumps(one_case(args.one, args.dump_dir)))
        return 0
    if args.cpu_speed:
        cpu_speed(args.cpu_speed)
        return 0
    names = [n for n in args.cases.split(",") if n]
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        raise SystemExit(f"--cases: unknown {unknown}; --list shows the cases")
    from cmlm_tf.runtime.host import describe_cpu

    print(f"CPU: {describe_cpu()}")
    print(f"{'case':<28} {'sort':>4} {'while':>5} {'rng':>4} {'temp GiB':>9} {'s':>5}",
          flush=True)
    results = []
    for name in names:
        r = run_case(name)
        results.append(r)
        if "error" in r:
            print(f"{name:<28} failed ({r['error']})", flush=True)
            continue
        rng = r["rng"] + r["rng-bit-generator"]
        print(f"{name:<28} {r['sort']:>4} {r['while']:>5} {rng:>4} "
              f"{r['temp_bytes'] / 2 ** 30:>9.2f} {r['seconds']:>5.0f}", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
