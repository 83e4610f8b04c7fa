r"""Evaluates one export for the runner: the claim's evaluations, and its training logs.

    python -m experiments.evaluate --model EXPORT_DIR --spec spec.json --output metrics.json \
        [--export_checkpoint RUN_DIR/ckpt-N --export_seq_length 48]

`spec.json` holds `evaluations` (`experiments.claim_types.Evaluation` fields), `data` (the
runner's prepared data folder), `shared` (the public data sets) and `train_dirs` (the arm's
training runs, oldest first). Metrics are flat keys (`retrieval/bible_es/src2tgt`,
`stsb/spearman`, ...); `both` is the mean of the two retrieval directions, `mean` the
pair-weighted mean over held-out sets. Every number comes from `cmlm_tf.evaluation`.
`--export_checkpoint` first exports that training checkpoint (`cmlm_tf.export`, the run's
`params.yaml` beside it) to `--model`, in the same process.
"""

import argparse
import glob
import importlib.util
import json
import os
import sys
from typing import Dict, List, Sequence

import numpy as np
import tensorflow as tf

import cmlm_tf
from cmlm_tf.evaluation import readers, retrieval, sts
from cmlm_tf.evaluation.pcr import PCRComponents
from cmlm_tf.export import export_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _heldout_sets(folder: str):
    """`benchmarks/heldout_retrieval.py`'s reading of a split's held-out folder."""
    path = os.path.join(REPO, "benchmarks", "heldout_retrieval.py")
    spec = importlib.util.spec_from_file_location("heldout_retrieval", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.heldout_sets(folder)


def _both(scores: Dict[str, float]) -> Dict[str, float]:
    return {"src2tgt": scores["src2tgt_accuracy"], "tgt2src": scores["tgt2src_accuracy"],
            "both": (scores["src2tgt_accuracy"] + scores["tgt2src_accuracy"]) / 2,
            "num_pairs": scores["num_pairs"]}


def _weighted_mean(rows: Dict[str, Dict[str, float]]) -> Dict[str, float]:
    total = sum(row["num_pairs"] for row in rows.values())
    mean = {key: sum(row[key] * row["num_pairs"] for row in rows.values()) / total
            for key in ("src2tgt", "tgt2src", "both")}
    mean["num_pairs"] = total
    return mean


def _flatten(prefix: str, rows: Dict[str, Dict[str, float]]) -> Dict[str, float]:
    return {f"{prefix}/{name}/{key}": value for name, row in rows.items()
            for key, value in row.items()}


def evaluate_retrieval(encode, folder: str, sets: Sequence[str], *, pcr: bool) -> Dict[str, float]:
    raw, removed = {}, {}
    for name, english_path, other_path in _heldout_sets(folder):
        if sets and name not in sets:
            continue
        english, other = readers.read_aligned(english_path, other_path)
        src, tgt = np.asarray(encode(english)), np.asarray(encode(other))
        raw[name] = _both(retrieval.retrieval_accuracy(src, tgt))
        if pcr:  # one component per side, fitted on the evaluated sentences
            components = PCRComponents.fit({"en": src, "xx": tgt})
            removed[name] = _both(retrieval.retrieval_accuracy(
                components.apply(src, "en"), components.apply(tgt, "xx")))
    missing = sorted(set(sets) - set(raw))
    if missing or not raw:
        raise ValueError(f"{folder}: held-out sets {missing or 'all'} not found")
    metrics = _flatten("retrieval", {**raw, "mean": _weighted_mean(raw)})
    if pcr:
        metrics.update(_flatten("retrieval_pcr", {**removed, "mean": _weighted_mean(removed)}))
    return metrics


def evaluate_udhr(encode, folder: str, langs: Sequence[str]) -> Dict[str, float]:
    texts = readers.read_multiway(folder, ["eng", *langs])
    english = np.asarray(encode(texts["eng"]))
    rows = {lang: _both(retrieval.retrieval_accuracy(english, np.asarray(encode(texts[lang]))))
            for lang in langs}
    return _flatten("udhr", {**rows, "mean": _weighted_mean(rows)})


def _read_stsb(shared: str):
    return readers.read_sts(os.path.join(shared, "stsb", "sts-dev.csv"), "stsb")


def _without_first_component(first: np.ndarray, second: np.ndarray):
    """PCR for one language: the first principal component (not centred) of both sides'
    vectors together, removed from each."""
    components = PCRComponents.fit({"en": np.concatenate([first, second])})
    return components.apply(first, "en"), components.apply(second, "en")


def evaluate_stsb(encode, shared: str, *, pcr: bool = False) -> Dict[str, float]:
    """Spearman and Pearson of the cosines with the gold scores; with `pcr` also
    `stsb_pcr/...`, the same after PCR fitted on the dev sentences."""
    first, second, gold = _read_stsb(shared)
    first, second = np.asarray(encode(first)), np.asarray(encode(second))
    variants = {"stsb": (first, second)}
    if pcr:
        variants["stsb_pcr"] = _without_first_component(first, second)
    metrics = {}
    for prefix, (a, b) in variants.items():
        scores = sts.sts_correlations(a, b, gold)
        metrics.update({f"{prefix}/spearman": scores["spearman"],
                        f"{prefix}/pearson": scores["pearson"],
                        f"{prefix}/num_pairs": scores["num_pairs"]})
    return metrics


def evaluate_stsb_nn(encode, shared: str, min_score: float, *, pcr: bool = False
                     ) -> Dict[str, float]:
    """Top-1 retrieval between the two sides of the STS-B dev pairs scored ≥ `min_score`:
    is a sentence's nearest neighbour among the other sides its near-paraphrase? With `pcr`
    also `stsb_nn_pcr/...`, after PCR fitted on those sentences."""
    first, second, gold = _read_stsb(shared)
    keep = np.asarray(gold) >= min_score
    first = np.asarray(encode([text for text, kept in zip(first, keep) if kept]))
    second = np.asarray(encode([text for text, kept in zip(second, keep) if kept]))
    variants = {"stsb_nn": (first, second)}
    if pcr:
        variants["stsb_nn_pcr"] = _without_first_component(first, second)
    return {f"{prefix}/{key}": value for prefix, (a, b) in variants.items()
            for key, value in _both(retrieval.retrieval_accuracy(a, b)).items()}


def spread(vectors: np.ndarray) -> Dict[str, float]:
    """`embedding_std`: the mean over dimensions of the standard deviation over sentences of
    the L2-normalised vectors (about 1/sqrt(dim) when spread out, 0 when collapsed);
    `mean_cosine`: the mean cosine between two different sentences."""
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    n = len(unit)
    total = unit.sum(axis=0)
    return {"spread/embedding_std": float(unit.std(axis=0).mean()),
            "spread/mean_cosine": float((total @ total - n) / (n * (n - 1))),
            "spread/dim": int(unit.shape[1])}


def evaluate_spread(encode, source: str, data: str, shared: str) -> Dict[str, float]:
    if source == "bible":
        (_, english_path, other_path), = _heldout_sets(
            os.path.join(data, "bible_split", "heldout"))
        english, other = readers.read_aligned(english_path, other_path)
        texts = english + other
    elif source == "stsb":
        first, second, _ = _read_stsb(shared)
        texts = sorted(set(first) | set(second))
    else:
        raise ValueError(f"spread: unknown source {source!r}")
    return spread(np.asarray(encode(texts)))


def training_curves(train_dir: str, kind: str = "train") -> Dict[str, List[List[float]]]:
    """Every scalar of the run's TensorBoard summaries of `kind` (train or validation):
    tag -> [[step, value], ...]."""
    curves: Dict[str, Dict[int, float]] = {}
    for path in sorted(glob.glob(os.path.join(train_dir, kind, "events.out.tfevents.*"))):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                scalar = float(tf.make_ndarray(value.tensor)) if value.HasField("tensor") \
                    else float(value.simple_value)
                curves.setdefault(value.tag, {})[int(event.step)] = scalar
    return {tag: [[step, points[step]] for step in sorted(points)]
            for tag, points in curves.items()}


def run(model_dir: str, spec: dict) -> dict:
    model = cmlm_tf.load(model_dir)
    encode = model.encode
    data, shared = spec["data"], spec["shared"]
    metrics: Dict[str, float] = {}
    for evaluation in spec["evaluations"]:
        kind = evaluation["kind"]
        if kind == "retrieval":
            metrics.update(evaluate_retrieval(
                encode, os.path.join(data, evaluation["split"], "heldout"),
                evaluation["sets"], pcr=evaluation["pcr"]))
        elif kind == "udhr":
            metrics.update(evaluate_udhr(encode, os.path.join(shared, "udhr"),
                                         evaluation["langs"]))
        elif kind == "stsb":
            metrics.update(evaluate_stsb(encode, shared, pcr=evaluation.get("pcr", False)))
        elif kind == "stsb_nn":
            metrics.update(evaluate_stsb_nn(encode, shared, evaluation["min_score"],
                                            pcr=evaluation.get("pcr", False)))
        elif kind == "spread":
            metrics.update(evaluate_spread(encode, evaluation["source"], data, shared))
        elif kind == "validation":
            validation = training_curves(spec["train_dirs"][-1], "validation")
            if not validation:
                raise ValueError(f"{spec['train_dirs'][-1]}/validation: no summaries (the "
                                 "runner's --mode=eval step writes them)")
            metrics.update({f"validation/{tag}": points[-1][1]
                            for tag, points in validation.items() if points})
        else:
            raise ValueError(f"unknown evaluation {kind!r}")
    curves = [training_curves(train_dir) for train_dir in spec.get("train_dirs", [])]
    if curves:
        for tag, points in curves[-1].items():
            if points:
                metrics[f"train/{tag}"] = points[-1][1]
    return {"metrics": metrics, "train_curves": curves}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.evaluate",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--spec", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--export_checkpoint",
                        help="export this training checkpoint to --model first")
    parser.add_argument("--export_seq_length", type=int)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    with open(args.spec, encoding="utf-8") as f:
        spec = json.load(f)
    if args.export_checkpoint:
        export_lib.export(args.model, model_dir=os.path.dirname(args.export_checkpoint),
                          checkpoint=args.export_checkpoint,
                          seq_length=args.export_seq_length, overwrite=True)
    report = run(args.model, spec)
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
