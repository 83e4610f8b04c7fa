r"""Memory and time of one translation-ranking training step with and without cached
gradients (`task.margin_softmax.mini_batch_size`), at all-MiniLM-L6-v2 shapes.

    python benchmarks/cached_batch_memory.py [--batch 4096] [--chunks 64,128,256] \
        [--uncached 256,512,1024] [--seq 32] [--steps 1]

Each configuration runs in its own process: a `cmlm_tf/bitext` dual encoder with random
weights (BERT, 6 layers, hidden 384, 12 heads, intermediate 1536, vocabulary 30,522; dropout
0.1), random token ids of `--seq` tokens with a random amount of padding, Adam, and
`--steps` timed steps after one untimed step (which also traces the graph). Printed per
configuration: the global batch, the chunk (0 = uncached), seconds per step, pairs/s and the
process's peak resident memory. The uncached step is measured at smaller batches to show how
its memory grows with the batch; run it at `--batch` only where that projection fits.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

MINILM = {"vocab_size": 30522, "hidden_size": 384, "num_layers": 6, "num_attention_heads": 12,
          "intermediate_size": 1536, "max_position_embeddings": 512, "dropout_rate": 0.1,
          "attention_dropout_rate": 0.1}


def one_configuration(batch: int, chunk: int, seq: int, steps: int) -> dict:
    import numpy as np
    import tensorflow as tf
    import tf_keras

    from cmlm_tf.tasks import bitext

    config = bitext.BitextTaskConfig()
    config.model.override({"encoder": MINILM})
    config.margin_softmax.override({"margin": 0.0, "scale": 20.0, "mini_batch_size": chunk})
    task = bitext.BitextTask(config)
    model = task.build_model()
    optimizer = tf_keras.optimizers.Adam(1e-5)
    rng = np.random.default_rng(0)

    def tokens():
        ids = rng.integers(1000, 30000, size=(batch, seq)).astype(np.int32)
        lengths = rng.integers(seq // 4, seq + 1, size=batch)
        mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32)
        return {"input_word_ids": tf.constant(ids * mask), "input_mask": tf.constant(mask),
                "input_type_ids": tf.zeros((batch, seq), tf.int32)}

    inputs = {"source": tokens(), "target": tokens(),
              "source_id": tf.range(batch, dtype=tf.int64),
              "target_id": tf.range(batch, dtype=tf.int64)}
    step = tf.function(lambda x: task.train_step(x, model, optimizer))
    started = time.perf_counter()
    loss = float(step(inputs)["loss"])
    first = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(steps):
        loss = float(step(inputs)["loss"])
    seconds = (time.perf_counter() - started) / steps
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"batch": batch, "chunk": chunk, "first_step_s": first, "step_s": seconds,
            "peak_mb": peak_mb, "loss": loss}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--chunks", default="64,128,256")
    parser.add_argument("--uncached", default="256,512,1024",
                        help="global batches of the uncached step")
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--one", nargs=2, type=int, metavar=("BATCH", "CHUNK"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from cmlm_tf.runtime.host import describe_cpu

    if args.one:
        print(json.dumps(one_configuration(args.one[0], args.one[1], args.seq, args.steps)))
        return 0
    runs = [(b, 0) for b in map(int, filter(None, args.uncached.split(",")))]
    runs += [(args.batch, c) for c in map(int, filter(None, args.chunks.split(",")))]
    print(f"CPU: {describe_cpu()}; seq {args.seq}, {args.steps} timed step(s)")
    print(f"{'batch':>6} {'chunk':>6} {'step s':>8} {'pairs/s':>8} {'peak MB':>8} "
          f"{'1st step s':>10}")
    for batch, chunk in runs:
        result = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--one", str(batch), str(chunk),
             "--seq", str(args.seq), "--steps", str(args.steps)],
            capture_output=True, text=True)
        if result.returncode != 0:
            tail = result.stderr.strip().splitlines()[-1:] or ["(no output)"]
            print(f"{batch:>6} {chunk or '-':>6} failed (exit {result.returncode}): {tail[0]}")
            continue
        r = json.loads(result.stdout.strip().splitlines()[-1])
        print(f"{batch:>6} {chunk or '-':>6} {r['step_s']:>8.1f} {batch / r['step_s']:>8.1f} "
              f"{r['peak_mb']:>8.0f} {r['first_step_s']:>10.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
