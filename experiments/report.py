r"""Writes docs/claims.md and its plots from the runner's JSON.

    python -m experiments.report [--results runs/experiments] [--no_collect]

1. Collects (unless `--no_collect`): every `RESULTS/<claim>/steps<S>/<arm>/seed<k>.json` at
   the claim's default steps (or `--steps`) into `experiments/results/<claim>.json`, the
   committed summary. An (arm, seed) found under RESULTS replaces that arm and seed in the
   summary (its result and its learning-curve points together); the others stay, so seeds
   run on other machines (`experiments.run --seed K`) are kept.
2. Renders: reads only `experiments/results/*.json` and writes `docs/claims.md` and
   `docs/claims/<claim>.png`. Every number on the page comes from those files.
   (`--summary_dir` and `--doc` put both elsewhere, the plots beside the page.)

The summaries are read by `claim_results.py`, drawn by `report_plots.py` and written out as
text by `report_page.py`.
"""

import argparse
import glob
import json
import os
import sys
from typing import Optional

import yaml

from experiments import claims as claims_lib
from experiments.claim_results import ClaimResults
from experiments.claim_types import Claim
from experiments.report_page import DOC, plot_dir, render
from experiments.report_plots import plot

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUMMARY_DIR = os.path.join(REPO, "experiments", "results")
# Optional, hand-written and free of numbers: claim -> a paragraph on how to read its result.
READINGS = "readings.yaml"


# ---------------------------------------------------------------------------------------
# Collect


def collect(results: str, claim: Claim, steps: Optional[int] = None,
            previous: Optional[dict] = None) -> Optional[dict]:
    """The claim's per-seed JSON at `steps` (default: the claim's), as one summary (None if
    there is none), added to the `previous` summary at the same steps: what RESULTS holds for
    an (arm, seed) replaces all of that arm and seed in `previous`."""
    steps = steps or claim.steps
    pattern = os.path.join(results, claim.name, f"steps{steps}", "*", "seed*.json")
    records = []
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
        records.append({
            "arm": result["arm"], "seed": result["seed"], "metrics": result["metrics"],
            "cpu_seconds": result["cpu_seconds"],
            "cpu_seconds_with_reused_stages": result["cpu_seconds_with_reused_stages"],
            "wall_seconds": result["wall_seconds"],
            "train_curves": result["train_curves"],
            "stages": [{key: stage.get(key) for key in
                        ("key", "experiment", "config_files", "overrides", "steps",
                         "cpu_replicas", "command", "cpu_seconds", "reused")}
                       for stage in result["stages"]],
            "command": result["command"], "machine": result["machine"],
            "git_commit": result["git_commit"], "finished": result["finished"]})
    points = []
    pattern = os.path.join(results, claim.name, f"steps{steps}", "*", "seed*", "points",
                           "step*.json")
    for path in sorted(glob.glob(pattern)):
        if not os.path.basename(path)[len("step"):-len(".json")].isdigit():
            continue  # the point's evaluation output and spec
        with open(path, encoding="utf-8") as f:
            point = json.load(f)
        points.append({key: point[key] for key in (
            "arm", "seed", "step", "steps", "fraction", "train_cpu_seconds", "cpu_seconds",
            "metrics")})
    if previous and previous.get("steps") == steps:
        if not records and not points:
            return previous  # nothing run here: the summary as it was
        found = {(item["arm"], item["seed"]) for item in records + points}
        records += [r for r in previous["records"] if (r["arm"], r["seed"]) not in found]
        points += [p for p in previous.get("points", []) if (p["arm"], p["seed"]) not in found]
        records.sort(key=lambda r: (r["arm"], r["seed"]))
        points.sort(key=lambda p: (p["arm"], p["seed"], p["step"]))
    if not records and not points:
        return None
    summary = {"claim": claim.name, "steps": steps, "records": records}
    if claim.eval_points:
        summary["points"] = points
    return summary


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.report",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=os.path.join(REPO, "runs", "experiments"))
    parser.add_argument("--no_collect", action="store_true",
                        help="render from the summaries only")
    parser.add_argument("--steps", type=int, help="collect runs of this step count")
    parser.add_argument("--summary_dir", default=SUMMARY_DIR)
    parser.add_argument("--doc", default=DOC)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    os.makedirs(args.summary_dir, exist_ok=True)
    if not args.no_collect and os.path.isdir(args.results):
        for claim in claims_lib.CLAIMS.values():
            if claim.results_from:
                continue  # rendered from its source claim's summary
            path = os.path.join(args.summary_dir, f"{claim.name}.json")
            previous = None
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    previous = json.load(f)
            summary = collect(args.results, claim, args.steps, previous)
            if summary is not None:
                with open(path, "w", encoding="utf-8") as f:
                    json.dump(summary, f, indent=1)
    summaries = {}
    for path in sorted(glob.glob(os.path.join(args.summary_dir, "*.json"))):
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
        if summary["claim"] in claims_lib.CLAIMS:
            summaries[summary["claim"]] = summary
    for claim in claims_lib.CLAIMS.values():
        if claim.results_from in summaries:
            summaries[claim.name] = dict(summaries[claim.results_from], claim=claim.name)
    for name, summary in summaries.items():
        plot(ClaimResults(claims_lib.CLAIMS[name], summary),
             os.path.join(plot_dir(args.doc), f"{name}.png"))
    readings = {}
    readings_path = os.path.join(args.summary_dir, READINGS)
    if os.path.exists(readings_path):
        with open(readings_path, encoding="utf-8") as f:
            readings = yaml.safe_load(f) or {}
    with open(args.doc, "w", encoding="utf-8") as f:
        f.write(render(summaries, args.doc, readings))
    print(f"wrote {args.doc} ({len(summaries)} claims) and {plot_dir(args.doc)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
