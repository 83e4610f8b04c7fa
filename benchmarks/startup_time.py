r"""Start-up time of training against corpus size: a one-step run of the tiny recipes on
generated corpora, for this checkout and (optionally) another one, in one run.

    python benchmarks/startup_time.py --lines 1000000,10000000 [--objectives cmlm,bitext] \
        [--before /path/to/an/older/checkout] [--workdir /tmp/startup]

Each measurement is the wall time of `python -m cmlm_tf.train --mode=train` with
`trainer.train_steps=1` from process start to exit: importing TensorFlow, reading the config,
checking the corpus, building the model and the input pipeline, one training step and one
checkpoint. Only the corpus changes between rows, so what grows with the corpus is the
reading done before training. The corpora repeat the bundled text (`persuasion.txt` for
CMLM, `bible_en_es.tsv` for bitext) up to the requested number of lines, under `--workdir`,
and are deleted at the end unless `--keep`.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from cmlm_tf.runtime.host import describe_cpu

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS_DIR = os.path.join(REPO, "cmlm_tf", "data", "corpus")
OBJECTIVES = {
    # objective: (experiment, recipe, bundled source file, config field of the corpus)
    "cmlm": ("cmlm_tf/cmlm", "cmlm_tiny", "persuasion.txt", "task.train_data.input_path"),
    "bitext": ("cmlm_tf/bitext", "bitext_tiny", "bible_en_es.tsv",
               "task.train_data.input_path"),
}


def write_corpus(source: str, lines: int, path: str) -> str:
    """`path` holding the lines of `source` repeated up to `lines` lines."""
    with open(source, "rb") as f:
        block = f.read().splitlines(keepends=True)
    with open(path, "wb") as out:
        written = 0
        while written < lines:
            chunk = block[:lines - written]
            out.writelines(chunk)
            written += len(chunk)
    return path


def one_step_run(checkout: str, objective: str, corpus: str, model_dir: str) -> float:
    """Seconds from process start to exit of a one-step training run of `checkout`."""
    experiment, recipe, _, field = OBJECTIVES[objective]
    env = dict(os.environ, PYTHONPATH=checkout, TF_CPP_MIN_LOG_LEVEL="3")
    command = [sys.executable, "-m", "cmlm_tf.train", f"--experiment={experiment}",
               f"--config_file={recipe}", "--mode=train", f"--model_dir={model_dir}",
               f"--params_override={field}={corpus},trainer.train_steps=1,"
               "trainer.checkpoint_interval=1,trainer.steps_per_loop=1,"
               "trainer.summary_interval=1,trainer.optimizer_config.warmup.linear."
               "warmup_steps=0"]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"{checkout}: {objective} run failed:\n{result.stderr[-3000:]}")
    shutil.rmtree(model_dir, ignore_errors=True)
    return seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", default="1000000,10000000",
                        help="comma-separated corpus sizes in lines")
    parser.add_argument("--objectives", default="cmlm,bitext")
    parser.add_argument("--before", default="",
                        help="another checkout to time the same way (e.g. an older commit)")
    parser.add_argument("--workdir", default="")
    parser.add_argument("--keep", action="store_true", help="keep the generated corpora")
    args = parser.parse_args(argv)

    sizes = [int(n) for n in args.lines.split(",") if n]
    objectives = [o for o in args.objectives.split(",") if o]
    for objective in objectives:
        if objective not in OBJECTIVES:
            parser.error(f"--objectives: unknown {objective!r}; choose from {list(OBJECTIVES)}")
    checkouts = [("this checkout", REPO)]
    if args.before:
        checkouts.insert(0, ("--before", os.path.abspath(args.before)))
    workdir = args.workdir or tempfile.mkdtemp(prefix="startup_time_")
    os.makedirs(workdir, exist_ok=True)
    print(f"CPU: {describe_cpu()}")
    print(f"{'objective':<8} {'lines':>11} {'size MB':>8} " +
          " ".join(f"{label + ' s':>16}" for label, _ in checkouts))
    try:
        for objective in objectives:
            source = os.path.join(CORPUS_DIR, OBJECTIVES[objective][2])
            for lines in sizes:
                suffix = os.path.splitext(source)[1]
                corpus = write_corpus(source, lines, os.path.join(
                    workdir, f"{objective}_{lines}{suffix}"))
                size = os.path.getsize(corpus) / 1e6
                seconds = [one_step_run(path, objective, corpus,
                                        os.path.join(workdir, "run")) for _, path in checkouts]
                print(f"{objective:<8} {lines:>11,} {size:>8.0f} " +
                      " ".join(f"{s:>16.1f}" for s in seconds), flush=True)
                if not args.keep:
                    os.remove(corpus)
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
