r"""Where a restart after Ctrl-C spends its time before it trains again.

    python benchmarks/restart_time.py --model_dir runs/restart -- \
        --experiment=cmlm_tf/bitext --config_file=runs/all-MiniLM-L6-v2/warm_start.yaml \
        --config_file=configs/bitext_minilm.yaml --mode=train

Runs `python -m cmlm_tf.train ARGS --model_dir MODEL_DIR` (MODEL_DIR must not exist) until
its first training step is done and one more progress line came, then sends Ctrl-C (SIGINT)
and waits for it to save and exit. Then runs the same command again (the restart) and, once
its first step is done, stops it the same way. Prints the seconds from the restart's start
to each of its milestones, as the lines arrive on stderr:

- `restored`: the checkpoint is restored (`restored step N from ckpt-N`);
- `loop`: the training loop starts (`training from step N`);
- `first step`: the first step is done, tracing and compiling included.

`--repeat K` restarts K times (each from the checkpoint the previous one saved). Run it
with nothing else on the machine; it asserts nothing.
"""

import argparse
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

MILESTONES = (("restored", re.compile(r"restored step \d+ from ")),
              ("loop", re.compile(r"training from step \d+")),
              ("first step", re.compile(r"first training step done")))
PROGRESS = re.compile(r"progress: step \d+/")


def run_until_first_step(command, env, *, extra_progress: bool):
    """Starts `command`; after its first step (and, with `extra_progress`, one more progress
    line) sends SIGINT. Returns ({milestone: seconds}, exit code)."""
    start = time.perf_counter()
    # The child handles Ctrl-C as a command typed in a terminal does, even where this script
    # was started with SIGINT ignored (in the background from another script).
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=env,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in process.stderr],
                              daemon=True)
    reader.start()
    seen, tail = {}, []
    stopped = False
    while True:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            if process.poll() is not None and not reader.is_alive():
                break
            continue
        tail = (tail + [line])[-20:]
        now = time.perf_counter() - start
        for name, pattern in MILESTONES:
            if name not in seen and pattern.search(line):
                seen[name] = now
        ready = "first step" in seen and (not extra_progress or (
            PROGRESS.search(line) and now > seen["first step"]))
        if ready and not stopped:
            process.send_signal(signal.SIGINT)
            stopped = True
    code = process.wait()
    if not stopped:
        sys.stderr.write("".join(tail))
    return seen, code


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("train_args", nargs=argparse.REMAINDER,
                        help="after --: the arguments of python -m cmlm_tf.train")
    args = parser.parse_args(argv)
    if os.path.exists(args.model_dir):
        parser.error(f"--model_dir {args.model_dir}: exists; give a new folder")
    train_args = [a for a in args.train_args if a != "--"]
    command = [sys.executable, "-m", "cmlm_tf.train", *train_args,
               f"--model_dir={args.model_dir}"]
    env = dict(os.environ, CMLM_TF_HEARTBEAT_SECONDS="0.000001")
    first, code = run_until_first_step(command, env, extra_progress=True)
    print(f"first run: exit {code}; " + ", ".join(f"{k} {v:.1f} s" for k, v in first.items()))
    for index in range(args.repeat):
        seen, code = run_until_first_step(command, env, extra_progress=False)
        print(f"restart {index + 1}: exit {code}; "
              + ", ".join(f"{k} {v:.1f} s" for k, v in seen.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
