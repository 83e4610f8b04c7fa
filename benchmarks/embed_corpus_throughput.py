r"""Sentences per second through the Beam embedding pipeline against `serving_default` in one
process, on the same lines, in one run.

    python benchmarks/embed_corpus_throughput.py --model EXPORT \
        --input ../shared/data/bible/eng_kjv.txt [--lines 30000] [--workers 1 2]

Systems, each on the first `--lines` non-empty lines of `--input`:
- `serving_default`: the export's `serving/1` signature, loaded in this process, called on
  batches of `--batch_size` sentences sorted by length over the whole input (the best a
  one-process client can do);
- `encode()`: `cmlm_tf.load(EXPORT).encode(lines)` in this process;
- `embed_corpus, W workers`: `cmlm_tf.scale.embed.run` with the DirectRunner in
  multi-processing mode, W worker processes, wall time from the call to the published
  output (worker start-up and model loading included); and "after start-up": the lines
  embedded after the first progress report (the first batch done) over the time from that
  report to the published output, which leaves out the workers' fixed start-up cost.
Each pipeline run's vectors are checked against `encode()` (minimum cosine).
"""

import argparse
import os
import re
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: F401  (the tokenizer ops of serving/1)

import cmlm_tf  # noqa: E402
from cmlm_tf.runtime import host  # noqa: E402
from cmlm_tf.scale import embed, embedding_files  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--lines", type=int, default=30000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batch_size", type=int, default=64)
    args = parser.parse_args()


    with open(args.input, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()][:args.lines]
    print(f"cpu: {host.describe_cpu()}")
    print(f"model {args.model}, {len(lines)} lines of {args.input}, batch {args.batch_size}")
    with tempfile.TemporaryDirectory() as folder:
        corpus = os.path.join(folder, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))

        serving = tf.saved_model.load(os.path.join(args.model, "serving", "1"))
        signature = serving.signatures["serving_default"]
        order = np.argsort([-len(line) for line in lines], kind="stable")
        batches = [[lines[i] for i in order[start:start + args.batch_size]]
                   for start in range(0, len(order), args.batch_size)]
        signature(sentences=tf.constant(batches[0]))  # first call traces nothing; warms up
        start = time.perf_counter()
        for batch in batches:
            signature(sentences=tf.constant(batch))
        serving_rate = len(lines) / (time.perf_counter() - start)
        print(f"{'serving_default, one process':>32}: {serving_rate:8.1f} sentences/s")

        model = cmlm_tf.load(args.model)
        model.encode(lines[:args.batch_size])
        start = time.perf_counter()
        reference = model.encode(lines, batch_size=args.batch_size)
        encode_rate = len(lines) / (time.perf_counter() - start)
        print(f"{'encode(), one process':>32}: {encode_rate:8.1f} sentences/s "
              f"({encode_rate / serving_rate:.0%} of serving_default)")

        for workers in args.workers:
            output = os.path.join(folder, f"out{workers}")
            beam_args = [f"--direct_num_workers={workers}"]
            config = embed.EmbedConfig(args.model, [corpus], output,
                                       batch_size=args.batch_size)
            reports = []

            def keep(line, reports=reports):
                match = re.match(r"embedded (\d+)", line)
                if match and int(match.group(1)):
                    reports.append((time.perf_counter(), int(match.group(1))))

            start = time.perf_counter()
            embed.run(config, beam_args=beam_args, report=keep, progress_every=0.5)
            end = time.perf_counter()
            seconds = end - start
            table = embedding_files.read_embeddings(output)
            vectors = np.empty_like(reference)
            vectors[table.lines - 1] = table.vectors
            cosine = float(np.min(np.sum(vectors * reference, axis=1)))
            rate = len(lines) / seconds
            print(f"{f'embed_corpus, {workers} worker(s)':>32}: {rate:8.1f} sentences/s "
                  f"({rate / serving_rate:.0%} of serving_default; {seconds:.1f} s in all; "
                  f"min cosine to encode() {cosine:.6f})")
            if reports:
                first_time, first_lines = reports[0]
                steady = (len(lines) - first_lines) / (end - first_time)
                print(f"{'after start-up':>32}: {steady:8.1f} sentences/s "
                      f"({steady / serving_rate:.0%} of serving_default; the first "
                      f"{first_lines} lines embedded {first_time - start:.1f} s after the "
                      "call)")


if __name__ == "__main__":
    main()
