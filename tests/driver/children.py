"""Children of the tests: functions a test runs in a fresh interpreter, by name.

    python -m tests.driver.children FUNCTION [ARGS...]

run from the repository root with the tests' environment (`tests.conftest.cli_env()`). A
function's return value is the child's exit status. Nothing here imports TensorFlow at
module level: several children report whether a command imported it.
"""

import contextlib
import io
import json
import os
import pathlib
import sys
import time

REPO_DIR = pathlib.Path(__file__).resolve().parents[2]


def imports_tensorflow(module):
    """Imports `module`; prints whether TensorFlow came with it."""
    import importlib

    importlib.import_module(module)
    print("tensorflow" in sys.modules)


def _exit_code(main, argv):
    """`main(argv)`'s return value, or the code it exits with."""
    try:
        return main(argv)
    except SystemExit as exit:
        return exit.code


def exporter_argument_error():
    """The exporter given two sources: prints its exit code and whether TensorFlow was
    imported (the error goes to stderr)."""
    from cmlm_tf.commands import export

    code = _exit_code(export.main, ["--export_dir", "out", "--model_dir", "configs",
                                    "--hf_dir", "docs"])
    print(code, "tensorflow" in sys.modules)


_TRAIN = ["--experiment=cmlm_tf/cmlm", "--mode=train"]


def typo_report():
    """Prints one JSON line: {case: [exit code, last stderr line]} for a typo in a recipe
    name, an experiment and a flag of each command, and whether TensorFlow was imported."""
    from cmlm_tf.commands import evaluate, mine, similarity, train
    from cmlm_tf.commands import export as export_cli

    cases = {
        "recipe": (train.main, _TRAIN + ["--config_file=cmlm_tiyn", "--model_dir=run"]),
        "experiment": (train.main, ["--experiment=cmlm_tf/cmml", "--mode=train",
                                    "--config_file=cmlm_tiny", "--model_dir=run"]),
        "train_flag": (train.main, _TRAIN + ["--config_file=cmlm_tiny", "--model-dir=run"]),
        "export_flag": (export_cli.main, ["--export_dir=out", "--model-dir=run"]),
        "evaluate_flag": (evaluate.main, ["sts", "--modle=x", "--data=y"]),
        "mine_flag": (mine.main, ["--model=x", "--src=a", "--tgt=b", "--ouput=c"]),
        "similarity_flag": (similarity.main, ["--mdoel=x", "a", "b"]),
    }
    report = {}
    for name, (main, argv) in cases.items():
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = _exit_code(main, argv)
        report[name] = [code, err.getvalue().strip().splitlines()[-1]]
    report["tensorflow"] = "tensorflow" in sys.modules
    print(json.dumps(report))


def export_reporting_first_stage(*argv):
    """The exporter's command line on `argv`; prints its first stage's name and whether
    TensorFlow was imported when that stage began."""
    from cmlm_tf import progress
    from cmlm_tf.commands import export as export_cli

    real = progress.Stages.__call__
    first = []

    def call(self, what):
        if not first:
            first.append(what)
            print(f"first stage: {what}; tensorflow imported: {'tensorflow' in sys.modules}")
        return real(self, what)

    progress.Stages.__call__ = call
    return export_cli.main(list(argv))


def train_interrupted_in_evaluation(*argv):
    """The training command line on `argv`, with a Ctrl-C during its final evaluation."""
    from cmlm_tf.commands import train
    from cmlm_tf.driver import chunked_trainer

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    chunked_trainer.ChunkedTrainer.evaluate = interrupted
    return train.main(list(argv))


def train_killed_while_recording(*argv):
    """The training command line on `argv`, killed (`os._exit(137)`) once the files of its
    first checkpoint are written, before the checkpoint state records them."""
    import os

    from tensorflow.python.checkpoint import checkpoint_management

    from cmlm_tf.commands import train

    def killed(*args, **kwargs):
        os._exit(137)

    checkpoint_management.update_checkpoint_state_internal = killed
    return train.main(list(argv))


def _burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def busy_training(model_dir):
    """A training child: 1 CPU second, a checkpoint in `model_dir`, then 30 more."""
    _burn(1.0)
    (pathlib.Path(model_dir) / "checkpoint").write_text("ckpt-1")
    _burn(30.0)


def counted_busy_training(model_dir, log, checkpoint_dir=""):
    """`experiments.processes.run_counted` of `busy_training`, its CPU time polled every 0.1
    s."""
    from experiments import processes

    processes.CPU_POLL_SECONDS = 0.1
    child = [sys.executable, "-m", "tests.driver.children", "busy_training", model_dir]
    processes.run_counted(child, log, checkpoint_dir or None)


def nothing():
    """A child that does nothing and exits 0."""


def piece(outcome):
    """A piece of `--check`: prints, logs through absl and TensorFlow's logger, then exits
    with `outcome` (a number), raises (`raise`) or is interrupted (`interrupt`)."""
    import logging

    from absl import logging as absl_logging

    absl_logging.use_absl_handler()
    print("printed", [outcome])
    absl_logging.warning("logged by absl")
    logging.getLogger("tensorflow").warning("logged by tensorflow")
    if outcome == "raise":
        raise ValueError("task.model: bad field")
    if outcome == "interrupt":
        raise KeyboardInterrupt
    return int(outcome)


def _run_as_main(name, argv):
    """Runs module `name` (or a script path ending in .py) as `__main__` with `argv`;
    returns (exit code, stdout)."""
    import runpy

    saved, out = sys.argv, io.StringIO()
    sys.argv = [name, *argv]
    try:
        with contextlib.redirect_stdout(out):
            if name.endswith(".py"):
                runpy.run_path(name, run_name="__main__")
            else:
                runpy.run_module(name, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) or exit.code is None else 1
    finally:
        sys.argv = saved
    return code or 0, out.getvalue()


def help_of_commands(*modules):
    """`python -m MODULE --help` for each module in this interpreter; prints one JSON line
    per module: {"module", "exit_code", "first_line"} (the first line of its output)."""
    for module in modules:
        code, output = _run_as_main(module, ["--help"])
        lines = output.strip().splitlines()
        print(json.dumps({"module": module, "exit_code": code,
                          "first_line": lines[0] if lines else ""}), flush=True)


def doc_snippet(page, first_line):
    """Runs the fenced ```python block of `page` (relative to the repository) whose code
    starts at line `first_line`, as a user who pastes it into `python` would."""
    lines = (REPO_DIR / page).read_text(encoding="utf-8").splitlines()[int(first_line) - 1:]
    code = []
    for line in lines:
        if line.strip() == "```":
            break
        code.append(line)
    exec(compile("\n".join(code) + "\n", f"{page}:{first_line}", "exec"),
         {"__name__": "__main__"})


def import_then_tensorflow():
    """`import cmlm_tf`, then TensorFlow: prints the sum of an int64 op and the
    TF_CPP_MIN_LOG_LEVEL the import left."""
    import os

    import cmlm_tf  # noqa: F401  (first, as a user's script may)

    # isort: split
    import tensorflow as tf

    print(int(tf.reduce_sum(tf.constant([1, 2], tf.int64))))
    print(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "unset"))


def load_export(first, export):
    """Loads `export`'s serving/1 with `tf.saved_model.load` and its preprocessor with
    `hub.KerasLayer`, after `import cmlm_tf` when `first` is "cmlm_tf"; prints the batch
    size of each output."""
    if first == "cmlm_tf":
        import cmlm_tf  # noqa: F401  (before TensorFlow, as a user's script may)
    import tensorflow as tf
    import tensorflow_hub as hub

    serving = tf.saved_model.load(export + "/serving/1").signatures["serving_default"]
    print(serving(sentences=tf.constant(["a cat"]))["embeddings"].shape[0])
    preprocessor = hub.KerasLayer(export + "/preprocessor")
    print(preprocessor(tf.constant(["a cat"]))["input_word_ids"].shape[0])


def int8_load(export):
    """Prints whether oneDNN's int8 matmul runs, then `cmlm_tf.load(export, "int8")`'s
    error (or `loaded`)."""
    import cmlm_tf
    from cmlm_tf.runtime import host

    print(host.int8_matmul_runs())
    try:
        cmlm_tf.load(export, precision="int8")
    except ValueError as error:
        print(error)
        return 0
    print("loaded")


def import_without_tensorflow_text():
    """`import cmlm_tf` and TensorFlow where tensorflow_text cannot be imported."""
    sys.modules["tensorflow_text"] = None
    import cmlm_tf  # noqa: F401

    # isort: split
    import tensorflow  # noqa: F401


def stsb_spearman_of_every_path(stsb_csv, export):
    """Prints one JSON line: the STS-B Spearman of `encode()`, `serving_default` (batches of
    64) and the int8 TFLite model of `export`, on the STS-B file `stsb_csv`, and of
    `serving_default` and `encode(precision=...)` of each other precision's serving model
    the export has (`serving_bf16/1`: `serving_bfloat16`, `encode_bfloat16`; `int8`). TFLite
    float32 agrees with encode() at cosine >= 0.9999 (tests/test_parity.py); the others
    differ by design, so their Spearman is measured here."""
    import numpy as np
    import tensorflow as tf
    from scipy.stats import spearmanr

    from cmlm_tf.export import tflite
    from cmlm_tf.inference import load

    with open(stsb_csv, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t")[:7] for line in f]
    gold = [float(row[4]) for row in rows]
    texts = [row[5] for row in rows] + [row[6] for row in rows]
    batches = [np.array(texts[i:i + 64], dtype=object) for i in range(0, len(texts), 64)]

    def served(signature):
        return np.concatenate([signature(sentences=batch)["embeddings"].numpy()
                               for batch in batches])

    model = load(export)
    runner = tflite.load_interpreter(f"{export}/tflite/model_int8.tflite").get_signature_runner(
        "serving_default")
    vectors = {
        "encode": model.encode(texts),
        "serving_default": served(model._serving.signatures["serving_default"]),
        "tflite_int8": np.concatenate(
            [runner(sentences=batch)["embeddings"] for batch in batches]),
    }
    for precision, entry in model.metadata.get("serving_models", {}).items():
        if precision != "float32":
            path = os.path.join(export, *entry["folder"].split("/"))
            vectors[f"serving_{precision}"] = served(
                tf.saved_model.load(path).signatures["serving_default"])
            vectors[f"encode_{precision}"] = load(export, precision=precision).encode(texts)
    n = len(rows)
    print(json.dumps({name: spearmanr((v[:n] * v[n:]).sum(1), gold)[0]
                      for name, v in vectors.items()}))


def tfsm_vectors(serving_dir, texts_file, vectors_file):
    """Embeds the JSON list in `texts_file` with `serving_dir`'s `serving_default` through
    Keras 3's `TFSMLayer`, in batches of 64; saves the vectors to `vectors_file` (.npy)."""
    import keras
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    layer = keras.layers.TFSMLayer(serving_dir, call_endpoint="serving_default")
    with open(texts_file, encoding="utf-8") as f:
        texts = json.load(f)
    np.save(vectors_file, np.concatenate([
        layer(tf.constant(texts[i:i + 64]))["embeddings"].numpy()
        for i in range(0, len(texts), 64)]))


def sleep(seconds, *labels):
    """Sleeps `seconds`; `labels` only show in the command line (a stand-in for a process
    that another looks for by its command line)."""
    time.sleep(float(seconds))


def say_on_stderr(*lines):
    """Prints each of `lines` to stderr."""
    for line in lines:
        print(line, file=sys.stderr, flush=True)


def mine_flat(count):
    """`corpus_mining.mine_vectors` with the flat product on `count` random vectors a side
    (XLA compiles it); the stage line goes to stdout."""
    import numpy as np

    from cmlm_tf.scale import corpus_mining

    vectors = np.random.default_rng(0).standard_normal((int(count), 16)).astype(np.float32)
    settings = corpus_mining.SearchSettings(k=4, margin="ratio", index="flat")
    corpus_mining.mine_vectors(settings, vectors, vectors[::-1], (), stage=print)


def main(argv, functions=None):
    """Runs the function named by `argv[0]` with the rest as its arguments; the function is
    one of this module's, or of `functions` (another children module's globals)."""
    name, *args = argv
    function = (globals() if functions is None else functions).get(name)
    if not callable(function) or name.startswith("_") or name == "main":
        print(f"no child named {name!r}", file=sys.stderr)
        return 2
    return function(*args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
