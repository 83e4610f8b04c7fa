r"""The losses of a training run with every random source seeded, for comparing two checkouts.

    python benchmarks/seeded_losses.py [--repo DIR] [--seed 7] -- \
        --experiment=cmlm_tf/bitext --config_file=bitext_tiny --mode=train --model_dir=DIR

Runs `python -m cmlm_tf.train ARGS` from the checkout `--repo` (default: this one), in a
process that first seeds Python, NumPy and TensorFlow (`tf_keras.utils.set_random_seed`) and
turns on TensorFlow's deterministic ops (`tf.config.experimental.enable_op_determinism`), so
the weights' initialisation and the dropout masks are the same from run to run. The data
order is seeded by the recipe (`task.*_data.seed`). Two runs of one checkout then log the same
losses to every digit; a change that keeps the computation keeps them too.

Prints one line per logged training step (`step N: name value ...`, the losses and
accuracies of the Orbit summary line) and the run's wall time. `--model_dir` is emptied first.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

# What the child process runs before the driver: the checkout first on sys.path, every seed
# set, deterministic ops on.
_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
import tensorflow as tf
import tf_keras
tf_keras.utils.set_random_seed(int(sys.argv[2]))
tf.config.experimental.enable_op_determinism()
from cmlm_tf import train
sys.exit(train.main(sys.argv[3:]))
"""
_STEP_LINE = re.compile(r"train \| step:\s+(\d+) \| .*?output: (.*)$")
_REPORTED = ("loss", "accuracy", "cosine")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), help="the checkout to run (default: this one)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("train_args", nargs="+", help="arguments of python -m cmlm_tf.train")
    args = parser.parse_args(argv)
    model_dirs = [a.split("=", 1)[1] for a in args.train_args if a.startswith("--model_dir=")]
    if len(model_dirs) != 1:
        parser.error("give the driver one --model_dir=DIR")
    shutil.rmtree(model_dirs[0], ignore_errors=True)
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
    start = time.time()
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, os.path.abspath(args.repo), str(args.seed),
         *args.train_args], cwd=args.repo, env=env, capture_output=True, text=True)
    if result.returncode:
        sys.stderr.write(result.stderr[-3000:])
        return result.returncode
    for line in result.stderr.splitlines():
        match = _STEP_LINE.search(line)
        if not match:
            continue
        fields = match.group(2).split()
        values = [f"{name} {value}" for name, value in zip(fields[::2], fields[1::2])
                  if any(word in name for word in _REPORTED)]
        print(f"step {match.group(1)}: {' '.join(values)}")
    print(f"{args.repo}: {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
