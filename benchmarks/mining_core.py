r"""Time and peak memory of the bitext-mining core (`cmlm_tf.evaluation.mining.mine`).

    python benchmarks/mining_core.py [--n 100000] [--dim 384] [--k 4] [--reference_n 5000]
    python benchmarks/mining_core.py --n 100000 --index ann --backend faiss [--data clustered]
    python benchmarks/mining_core.py --n 100000 --index flat [--precision bfloat16]
    python benchmarks/mining_core.py --n 1000000 --index ann --no_exact --reference_n 0

Synthetic float32 unit vectors: half of the targets are noisy copies of a source (planted
translations, shuffled), the rest random. `--data isotropic` (default) draws every vector
uniformly on the sphere; `--data clustered` draws them around `--clusters` centres, as
sentence embeddings cluster by topic (`--spread`: distance from the centre, relative).

`--index flat` also mines with every pair scored by a bfloat16 (or float32) product and each
sentence's shortlist re-scored exactly (`cmlm_tf.scale.flat_search`); `--index ann` also
mines with an index per side (`cmlm_tf.evaluation.ann`) and compares
its pairs with the exact miner's, in the same run: the share of the exact pairs above the
exact best-F1 threshold that it keeps, and both best F1s (`--no_exact` skips the exact run,
for sizes where it would take hours). Each measurement runs in a fresh process and
reports wall time, the peak memory the core allocates on top of its inputs (tracemalloc,
which sees NumPy's buffers) and the process's peak resident set (ru_maxrss). A brute-force
reference (full N×N similarity matrix) runs at `--reference_n`, checks that both give the same
pairs, and gives the time and memory ratios there; at `--n` the full matrix's size is only
computed.
"""

import argparse
import functools
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from typing import Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cmlm_tf.evaluation import ann, mining  # noqa: E402
from cmlm_tf.runtime import host  # noqa: E402
from cmlm_tf.scale import flat_search  # noqa: E402
from cmlm_tf.vectors import unit_rows  # noqa: E402


def _points(rng, n: int, dim: int, centres: Optional[np.ndarray], *, spread: float):
    """n unit vectors: uniform, or around random `centres` at relative distance `spread`."""
    noise = rng.standard_normal((n, dim), dtype=np.float32)
    if centres is None:
        return unit_rows(noise)
    labels = rng.integers(0, len(centres), n)
    return unit_rows(centres[labels] + np.float32(spread / np.sqrt(dim)) * noise)


def synthetic(n: int, dim: int, planted: float, noise: float, *, seed: int,
              clusters: int = 0, spread: float = 1.0):
    """Sources, targets and the planted (source, target) index pairs (`clusters` > 0: the
    vectors lie around that many random centres)."""
    rng = np.random.default_rng(seed)
    centres = unit_rows(rng.standard_normal((clusters, dim), dtype=np.float32)) \
        if clusters else None
    src = _points(rng, n, dim, centres, spread=spread)
    tgt = _points(rng, n, dim, centres, spread=spread)
    count = int(n * planted)
    sources = rng.choice(n, count, replace=False)
    targets = rng.choice(n, count, replace=False)
    tgt[targets] = unit_rows(src[sources] + noise * rng.standard_normal(
        (count, dim), dtype=np.float32) / np.sqrt(dim))
    return src, tgt, set(zip(sources.tolist(), targets.tolist()))


def brute_force_mine(src: np.ndarray, tgt: np.ndarray, k: int) -> mining.MinedPairs:
    """The same mining from the full similarity matrix (memory O(N²))."""
    similarity = src @ tgt.T

    def top(matrix):
        indices = np.argsort(-matrix, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(matrix, indices, 1), indices

    forward_cosines, forward_indices = top(similarity)
    backward_cosines, backward_indices = top(similarity.T)
    src_mean, tgt_mean = forward_cosines.mean(1), backward_cosines.mean(1)
    forward = forward_cosines / ((src_mean[:, None] + tgt_mean[forward_indices]) / 2)
    backward = backward_cosines / ((tgt_mean[:, None] + src_mean[backward_indices]) / 2)
    return mining.max_retrieval(mining.MarginCandidates(
        forward_indices, forward, forward_cosines, backward_indices, backward,
        backward_cosines))


def measure(args) -> dict:
    """One run in this process: build inputs, then time and trace the mining core."""
    clusters = args.clusters if args.data == "clustered" else 0
    src, tgt, planted = synthetic(args.n, args.dim, args.planted, args.noise, seed=args.seed,
                                  clusters=clusters, spread=args.spread)
    if args.method == "flat":  # TensorFlow's start-up, once per process, is not the search's

        flat_search.top_k(src[:100], tgt[:100], args.k)
    rss_inputs = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # tracemalloc sees NumPy's buffers, not faiss's or ScaNN's C++ ones: for the indexes,
    # the process's peak resident set is the figure.
    tracemalloc.start()
    start = time.perf_counter()
    if args.method == "chunked":
        pairs = mining.mine(src, tgt, k=args.k, block_bytes=args.block_mb * 2**20)
    elif args.method == "flat":
        pairs = mining.mine(src, tgt, k=args.k, search_both=functools.partial(
            flat_search.top_k_both, precision=args.precision))
        chosen = [flat_search.compute_dtype(args.precision)]
    elif args.method.startswith("ann-"):
        backend = args.method.split("-")[1]
        calibrated = args.method.endswith("-calibrated")
        chosen = []

        def search(queries, keys, k):
            index = ann.build_index(keys, backend)
            probes = args.probes
            if calibrated:
                probes, _ = ann.calibrate_probes(queries, keys, k, index, target=args.recall)
            chosen.append(f"{probes}/{index.partitions}")
            return ann.top_k(queries, keys, k, index=index, probes=probes)

        pairs = mining.mine(src, tgt, k=args.k, search=search)
    else:
        pairs = brute_force_mine(src, tgt, args.k)
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    correct = np.array([pair in planted for pair in zip(pairs.src_indices.tolist(),
                                                         pairs.tgt_indices.tolist())])
    threshold, best = mining.best_f1_threshold(pairs.scores, correct, len(planted))
    if args.pairs_out:
        np.savez(args.pairs_out, src=pairs.src_indices, tgt=pairs.tgt_indices,
                 scores=pairs.scores, threshold=threshold)
    return {"method": args.method, "n": args.n, "seconds": seconds,
            "probes": " and ".join(chosen) if args.method.startswith(("ann-", "flat")) else "",
            "core_peak_mib": peak / 2**20,
            "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_after_inputs_mib": rss_inputs, "inputs_mib": (src.nbytes + tgt.nbytes) / 2**20,
            "pairs": len(pairs), "planted_found": int(correct.sum()),
            "best_f1": best["f1"],
            "pairs_digest": int(np.sum(pairs.src_indices * 1000003 + pairs.tgt_indices)
                                % (2**61 - 1))}


def in_subprocess(args, n: int, method: str, pairs_out: str = "") -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--child", "--n", str(n),
               "--method", method, "--dim", str(args.dim), "--k", str(args.k),
               "--planted", str(args.planted), "--noise", str(args.noise),
               "--seed", str(args.seed), "--block_mb", str(args.block_mb),
               "--data", args.data, "--clusters", str(args.clusters),
               "--spread", str(args.spread), "--probes", str(args.probes),
               "--recall", str(args.recall), "--precision", args.precision,
               "--pairs_out", pairs_out]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def kept_pairs(exact_file: str, other_file: str) -> dict:
    """The share of the exact pairs above the exact best-F1 threshold that the other run
    also returns."""
    exact, other = np.load(exact_file), np.load(other_file)
    keep = exact["scores"] >= exact["threshold"]
    wanted = set(zip(exact["src"][keep].tolist(), exact["tgt"][keep].tolist()))
    got = set(zip(other["src"].tolist(), other["tgt"].tolist()))
    return {"above_threshold": len(wanted), "kept": len(wanted & got) / max(1, len(wanted))}


def show(result: dict) -> None:
    print(f"{result['method']:>11} n={result['n']:>7}  {result['seconds']:8.1f} s  "
          f"core peak {result['core_peak_mib']:8.1f} MiB  max RSS {result['max_rss_mib']:8.1f} "
          f"MiB (inputs {result['inputs_mib']:.1f} MiB)  pairs {result['pairs']}  "
          f"planted found {result['planted_found']}  best F1 {result['best_f1']:.4f}")


def compare_indexes(args) -> None:
    """Exact and approximate mining at --n, in fresh processes, and the pairs they share."""
    backends = list(ann.BACKENDS) if args.backend == "both" else [args.backend]
    methods = [f"ann-{backend}" for backend in backends]
    if args.recall:
        methods.append(f"ann-{backends[0]}-calibrated")
    if args.index == "flat":
        methods = ["flat"]
    with tempfile.TemporaryDirectory() as folder:
        exact_file = os.path.join(folder, "exact.npz")
        if not args.no_exact:
            show(in_subprocess(args, args.n, "chunked", exact_file))
        for method in methods:
            ann_file = os.path.join(folder, f"{method}.npz")
            result = in_subprocess(args, args.n, method, ann_file)
            show(result)
            if not args.no_exact:
                kept = kept_pairs(exact_file, ann_file)
                what = "precision" if method == "flat" else "probes/partitions"
                print(f"{'':>11} {what} {result['probes']}: keeps "
                      f"{kept['kept']:.2%} of the {kept['above_threshold']} exact pairs "
                      "above the exact best-F1 threshold")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100000, help="sentences per side")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--planted", type=float, default=0.5,
                        help="share of targets that are noisy copies of a source")
    parser.add_argument("--noise", type=float, default=4.0,
                        help="noise norm relative to the unit vector, times sqrt(dim)")
    parser.add_argument("--block_mb", type=int, default=128,
                        help="similarity block size (knn.DEFAULT_BLOCK_BYTES is 128 MiB)")
    parser.add_argument("--reference_n", type=int, default=5000,
                        help="size for the brute-force comparison (0: skip)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", choices=["isotropic", "clustered"], default="isotropic")
    parser.add_argument("--clusters", type=int, default=1000,
                        help="centres of --data clustered")
    parser.add_argument("--spread", type=float, default=1.0,
                        help="distance of a point from its centre, relative to the centre")
    parser.add_argument("--index", choices=["exact", "ann", "flat"], default="exact",
                        help="ann: also mine with an index per side, flat: also mine with "
                             "the low-precision product (cmlm_tf.scale.flat_search), and "
                             "compare the pairs")
    parser.add_argument("--precision", choices=["auto", "bfloat16", "float32"],
                        default="auto", help="the product's precision for --index flat")
    parser.add_argument("--backend", choices=list(ann.BACKENDS) + ["both"], default="faiss")
    parser.add_argument("--probes", type=int, default=ann.DEFAULT_PROBES)
    parser.add_argument("--no_exact", action="store_true",
                        help="with --index ann: skip the exact run at --n")
    parser.add_argument("--recall", type=float, default=0.0,
                        help="with --index ann: also mine with the probes calibrated to this "
                             "recall@k on a sample (cmlm_tf.evaluation.ann.calibrate_probes)")
    parser.add_argument("--method", default="chunked",
                        choices=["chunked", "brute_force", "flat", "ann-faiss", "ann-scann",
                                 "ann-faiss-calibrated", "ann-scann-calibrated"])
    parser.add_argument("--pairs_out", default="", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args)))
        return
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"numpy {np.__version__}")
    print(f"cpu: {host.describe_cpu()}")
    print(f"dim {args.dim}, k {args.k}, float32, block {args.block_mb} MiB, "
          f"{args.planted:.0%} planted pairs, noise {args.noise}, {args.data} data"
          + (f" ({args.clusters} centres, spread {args.spread})"
             if args.data == "clustered" else ""))
    if args.reference_n:
        chunked = in_subprocess(args, args.reference_n, "chunked")
        brute = in_subprocess(args, args.reference_n, "brute_force")
        show(chunked)
        show(brute)
        same = chunked["pairs_digest"] == brute["pairs_digest"] and (
            chunked["pairs"] == brute["pairs"])
        print(f"same pairs: {same}; chunked/brute-force time "
              f"{chunked['seconds'] / brute['seconds']:.2f}, core memory "
              f"{chunked['core_peak_mib'] / brute['core_peak_mib']:.2f}")
    if args.index in ("ann", "flat"):
        compare_indexes(args)
        return
    result = in_subprocess(args, args.n, "chunked")
    show(result)
    full = args.n * args.n * 4 / 2**30
    print(f"a full {args.n}×{args.n} float32 similarity matrix alone would take {full:.1f} GiB")


if __name__ == "__main__":
    main()
