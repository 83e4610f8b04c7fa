r"""Writes docs/claims.md and its plots from the runner's JSON.

    python -m experiments.report [--results runs/experiments] [--no_collect]

1. Collects (unless `--no_collect`): every `RESULTS/<claim>/steps<S>/<arm>/seed<k>.json` at
   the claim's default steps (or `--steps`) into `experiments/results/<claim>.json`, the
   committed summary.
2. Renders: reads only `experiments/results/*.json` and writes `docs/claims.md` and
   `docs/claims/<claim>.png`. Every number on the page comes from those files.
   (`--summary_dir` and `--doc` put both elsewhere, the plots beside the page.)
"""

import argparse
import glob
import json
import math
import os
import sys
from typing import Dict, List, Optional, Tuple

from experiments import claims as claims_lib
from experiments import stats

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUMMARY_DIR = os.path.join(REPO, "experiments", "results")
# Optional, hand-written and free of numbers: claim -> a paragraph on how to read its result.
READINGS = "readings.yaml"
DOC = os.path.join(REPO, "docs", "claims.md")
BEST_QUEUE = "BEST_QUEUE"


# ---------------------------------------------------------------------------------------
# Collect


def collect(results: str, claim: claims_lib.Claim, steps: Optional[int] = None
            ) -> Optional[dict]:
    """The claim's per-seed JSON at `steps` (default: the claim's), as one summary (None if
    there is none)."""
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
    if not records:
        return None
    return {"claim": claim.name, "steps": steps, "records": records}


# ---------------------------------------------------------------------------------------
# Numbers


class ClaimResults:
    """One claim's summary: metric values per arm and seed, resolved arm names."""

    def __init__(self, claim: claims_lib.Claim, summary: dict):
        self.claim = claim
        self.records = summary["records"]
        self.by_arm: Dict[str, Dict[int, dict]] = {}
        for record in self.records:
            self.by_arm.setdefault(record["arm"], {})[record["seed"]] = record

    def values(self, arm: str, metric: str) -> Dict[int, float]:
        arm = self.resolve(arm)
        return {seed: record["metrics"][metric]
                for seed, record in self.by_arm.get(arm, {}).items()
                if metric in record["metrics"]}

    def resolve(self, arm: str) -> str:
        """`BEST_QUEUE`: the queue arm with the best mean of the claim's metric."""
        if arm != BEST_QUEUE:
            return arm
        means = {name: stats.summary(list(self.values(name, self.claim.metric).values()))
                 for name in self.by_arm if name.startswith("queue_")}
        means = {name: s["mean"] for name, s in means.items() if s["n"]}
        return max(means, key=means.get) if means else BEST_QUEUE

    def label(self, arm: str) -> str:
        name = self.resolve(arm)
        try:
            label = self.claim.arm(name).label
        except KeyError:
            return name
        return f"{label} (best)" if arm == BEST_QUEUE else label

    def is_fixed(self, arm: str) -> bool:
        try:
            return self.claim.arm(self.resolve(arm)).deterministic
        except KeyError:
            return False

    def comparison(self, comparison: claims_lib.Comparison) -> Tuple[dict, str]:
        metric = comparison.metric or self.claim.metric
        control_metric = comparison.control_metric or metric
        difference = stats.paired_difference(
            self.values(comparison.treatment, metric),
            self.values(comparison.control, control_metric),
            control_is_fixed=self.is_fixed(comparison.control))
        return difference, stats.verdict(difference, comparison.direction,
                                         comparison.tolerance)

    def cpu_minutes(self, arm: Optional[str] = None) -> float:
        records = self.records if arm is None else self.by_arm.get(self.resolve(arm),
                                                                   {}).values()
        return sum(r["cpu_seconds"]["total"] for r in records) / 60

    def commands(self) -> List[str]:
        return sorted({r["command"] for r in self.records})

    def machines(self) -> List[str]:
        return sorted({f"{r['machine']['cpu']}, {r['machine']['cores']} cores"
                       for r in self.records})


def _fmt(value: float, digits: int = 3) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else f"{value:.{digits}f}"


def _mean_se(values: Dict[int, float], digits: int = 3) -> str:
    if not values:
        return "—"
    s = stats.summary(list(values.values()))
    if s["n"] == 1:
        return _fmt(s["mean"], digits)
    return f"{_fmt(s['mean'], digits)} ± {_fmt(s['se'], digits)}"


def _signed(value: float, digits: int = 3) -> str:
    return "—" if math.isnan(value) else f"{value:+.{digits}f}"


# ---------------------------------------------------------------------------------------
# Plots


def plot(results: ClaimResults, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = results.claim.panels
    figure, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.8),
                                squeeze=False, sharey=results.claim.share_y)
    for axis, panel in zip(axes[0], panels):
        if panel.curve:
            _plot_curves(axis, results, panel)
            continue
        arms = [arm for arm in panel.arms if results.values(arm, panel.metric)]
        xs = [_arm_x(results, arm) for arm in arms]
        numeric = panel.log_x or (panel.x_label and all(x is not None for x in xs))
        positions = xs if numeric else list(range(len(arms)))
        means, errors = [], []
        for position, arm in zip(positions, arms):
            values = list(results.values(arm, panel.metric).values())
            s = stats.summary(values)
            means.append(s["mean"])
            errors.append(0.0 if math.isnan(s["se"]) else s["se"])
            axis.scatter([position] * len(values), values, s=12, color="0.55", zorder=3)
        if numeric:
            axis.errorbar(positions, means, yerr=errors, fmt="o-", capsize=4, zorder=4)
            if panel.log_x:
                axis.set_xscale("log", base=2)
            axis.set_xticks(positions)
            axis.set_xticklabels([f"{x:g}" for x in positions])
            axis.set_xlabel(panel.x_label)
        else:
            axis.errorbar(positions, means, yerr=errors, fmt="o", capsize=6, markersize=7,
                          zorder=4)
            axis.set_xlim(-0.5, len(positions) - 0.5)
            axis.set_xticks(positions)
            axis.set_xticklabels([_wrap(results.label(arm)) for arm in arms], fontsize=8)
        reference = list(results.values(panel.reference, panel.metric).values()) \
            if panel.reference else []
        if reference:
            level = sum(reference) / len(reference)
            low, high = min(means), max(means)
            span = max(high - low, 0.01)
            label = f"{results.label(panel.reference)}: {level:.3f}"
            if low - span <= level <= high + span:
                axis.axhline(level, color="0.4", linestyle="--", linewidth=1, label=label)
                axis.legend(fontsize=7, loc="best")
            else:  # far off the axis: a line would flatten the arms' differences
                axis.text(0.02, 0.03, label, transform=axis.transAxes, fontsize=7,
                          color="0.3")
        axis.set_title(panel.title, fontsize=9)
        axis.set_ylabel(METRIC_NAMES.get(panel.metric)
                        or _metric_label(results.claim, panel.metric), fontsize=8)
        axis.grid(axis="y", alpha=0.3)
    figure.suptitle(f"{results.claim.title}: mean ± s.e. over seeds (grey: each seed)",
                    fontsize=10)
    figure.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _plot_curves(axis, results: ClaimResults, panel) -> None:
    """The training-summary tag `panel.metric` of every seed against the step, or against
    cumulative training CPU minutes (each stage's points spread over its CPU time)."""
    colours = ["C0", "C1", "C2", "C3", "C4"]
    for colour, arm in zip(colours, panel.arms):
        for number, record in enumerate(results.by_arm.get(results.resolve(arm),
                                                            {}).values()):
            xs, ys, offset = [], [], 0.0
            for stage, curves in zip(record["stages"], record["train_curves"]):
                width = stage["cpu_seconds"] / 60 if panel.curve == "cpu" else stage["steps"]
                for step, value in curves.get(panel.metric, []):
                    xs.append(offset + width * step / stage["steps"])
                    ys.append(value)
                offset += width
            axis.plot(xs, ys, color=colour, linewidth=1,
                      label=results.label(arm) if number == 0 else None)
    axis.set_xlabel("training CPU minutes (cumulative over stages)" if panel.curve == "cpu"
                    else "step", fontsize=8)
    axis.set_ylabel(panel.metric, fontsize=8)
    axis.set_title(panel.title, fontsize=9)
    axis.legend(fontsize=7)
    axis.grid(alpha=0.3)


def _arm_x(results: ClaimResults, arm: str) -> Optional[float]:
    try:
        return results.claim.arm(results.resolve(arm)).x
    except KeyError:
        return None


def _wrap(text: str, width: int = 18) -> str:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + len(word) + 1 > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "\n".join(lines + [line])


def _metric_label(claim: claims_lib.Claim, metric: str) -> str:
    if metric == claim.metric:
        return claim.metric_label
    for key, label in claim.columns:
        if key == metric:
            return label
    return METRIC_NAMES.get(metric, metric)


METRIC_NAMES = {
    "retrieval/mean/both": "held-out retrieval, mean of both directions",
    "retrieval_pcr/mean/both": "held-out retrieval with PCR, mean of both directions",
    "udhr/mean/both": "UDHR retrieval, mean of both directions",
    "stsb/spearman": "STS-B dev Spearman",
    "stsb_nn/both": "nearest-neighbour top-1, STS-B pairs ≥ 4",
    "spread/embedding_std": "std per dimension (held-out)",
}


# ---------------------------------------------------------------------------------------
# The page


INTRO = """\
# The papers' claims, reproduced in miniature

Each section below takes one sentence from one of the papers cmlm_tf implements, trains
every arm of the comparison for several seeds with the library's own experiments and
recipes, and evaluates the exports on held-out data. Everything on this page (every number,
table and plot) is written by `python -m experiments.report` from the runner's JSON
(`experiments/results/<claim>.json`); the runner is
`python -m experiments.run --claim NAME [--seeds 3] [--steps S]` (`--list` shows the claims
and their CPU time). The recipes are in `experiments/claims.py` and `experiments/recipes/`;
the training runs go through `cmlm_tf.train` (`experiments/train.py` adds the seed and the
logical CPU devices for two replicas).

**How to read the verdicts.** Arms of one seed share the random initialisation (or the
pre-trained weights) and the data order, so each comparison is a paired difference over
seeds: treatment − control, mean ± standard error, and its 95 % confidence interval (Student
t, n − 1 degrees of freedom). *Reproduced*: the interval lies on the side the paper
predicts. *Not reproduced (opposite)*: it lies on the other side. *Not reproduced (no
effect)*: it lies within ±tolerance (1 point of accuracy or correlation unless stated), so an
effect of that size is ruled out at this scale. *Inconclusive*: anything else. With three
seeds the interval is ±4.3 standard errors wide, so only clear effects count. These are
tiny models and short runs: a verdict says what happens at this scale, not whether the
paper is right at its own.

**CPU time** is user + system time of the child processes (training, export, evaluation, and
writing the shared random initialisation), measured by the runner per piece; a stage two arms
share is counted once, under the arm that trained it. The runs shared their 2 cores with
other jobs, so wall times are not reported.
"""


def render_claim(number: int, results: ClaimResults, plot_path: str, doc: str,
                 reading: str = "") -> List[str]:
    claim = results.claim
    lines = [f"## {number}. {claim.title} (`{claim.name}`)", ""]
    lines += [f"*{claim.paper}*: {claim.says}", ""]
    lines += [f"**Setup.** {claim.setup}", ""]
    if claim.results_from:
        lines += [f"The numbers come from the exports of *{claim.results_from}*; no "
                  "training of its own.", ""]
    commands = results.commands()
    lines += ["**Command** (from the repository root; niced on a shared machine):", "",
              "```bash"] + commands + ["python -m experiments.report", "```", ""]
    # Arms table
    header = ["arm", "seeds", claim.metric_label] + [label for _, label in claim.columns] + \
        ["CPU min per seed"]
    lines += ["| " + " | ".join(header) + " |",
              "| " + " | ".join(["---"] + ["---:"] * (len(header) - 1)) + " |"]
    for arm in claim.arms:
        seeds = results.by_arm.get(arm.name, {})
        if not seeds:
            lines.append(f"| {arm.label} | 0 | not run |" + " |" * (len(header) - 3))
            continue
        cells = [arm.label, str(len(seeds)), _mean_se(results.values(arm.name, claim.metric))]
        cells += [_mean_se(results.values(arm.name, key)) for key, _ in claim.columns]
        cells.append(_fmt(results.cpu_minutes(arm.name) / len(seeds), 1))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    # Comparisons
    lines += ["| comparison (paper's prediction) | effect, mean ± s.e. | 95 % interval | "
              "seeds | verdict |", "| --- | ---: | ---: | ---: | --- |"]
    verdicts = []
    for comparison in claim.comparisons:
        difference, verdict = results.comparison(comparison)
        verdicts.append((comparison, difference, verdict))
        says = comparison.says
        if BEST_QUEUE in (comparison.treatment, comparison.control):
            says += f" ({results.label(BEST_QUEUE)})"
        interval = "—" if math.isnan(difference["low"]) else \
            f"[{_signed(difference['low'])}, {_signed(difference['high'])}]"
        effect = _signed(difference["mean"])
        if difference["n"] > 1:
            effect += f" ± {_fmt(difference['se'])}"
        lines.append(f"| {says} | {effect} | {interval} | {difference['n']} | "
                     f"**{verdict}** |")
    lines.append("")
    if verdicts:
        first, difference, verdict = verdicts[0]
        metric_label = _metric_label(claim, first.metric or claim.metric)
        lines += [f"**Verdict: {verdict}** for the main comparison ({first.says}): "
                  f"{_signed(difference['mean'])} ± {_fmt(difference['se'])} "
                  f"({metric_label}, {difference['n']} seeds).", ""]
    if claim.scale_note:
        lines += [f"**Scale.** {claim.scale_note}", ""]
    if reading:
        lines += [f"**Reading.** {' '.join(reading.split())}", ""]
    total = results.cpu_minutes()
    lines += [f"**CPU time:** {_fmt(total, 1)} min for the {len(results.records)} runs above "
              f"({'; '.join(results.machines())}).", ""]
    relative = os.path.relpath(plot_path, os.path.dirname(doc))
    lines += [f"![{claim.title}]({relative})", ""]
    return lines


def render(summaries: Dict[str, dict], doc: str = DOC,
           readings: Optional[Dict[str, str]] = None) -> str:
    readings = readings or {}
    lines = [INTRO]
    available = [(name, claims_lib.CLAIMS[name]) for name in claims_lib.CLAIMS
                 if name in summaries]
    # Overview
    lines += ["## Overview", "",
              "| claim | paper | comparison (the paper's prediction) | effect, mean ± s.e. | "
              "seeds | verdict | CPU min |", "| --- | --- | --- | ---: | ---: | --- | ---: |"]
    all_results = {}
    for number, (name, claim) in enumerate(available, start=1):
        results = ClaimResults(claim, summaries[name])
        all_results[name] = results
        for index, comparison in enumerate(claim.comparisons):
            difference, verdict = results.comparison(comparison)
            effect = _signed(difference["mean"]) + (
                f" ± {_fmt(difference['se'])}" if difference["n"] > 1 else "")
            says = comparison.says
            if BEST_QUEUE in (comparison.treatment, comparison.control):
                says += f" ({results.label(BEST_QUEUE)})"
            if index == 0:
                link = f"[{number}. {claim.title}](#{_anchor(number, claim)})"
                paper = _short_paper(claim.paper)
                cpu = "(in " + claim.results_from + ")" if claim.results_from else \
                    _fmt(results.cpu_minutes(), 1)
            else:
                link = paper = cpu = ""
            lines.append(f"| {link} | {paper} | {says} | {effect} | {difference['n']} | "
                         f"**{verdict}** | {cpu} |")
    total = sum(r.cpu_minutes() for n, r in all_results.items()
                if not claims_lib.CLAIMS[n].results_from)
    lines += ["", f"Total CPU time of the runs on this page: {_fmt(total, 1)} min.", ""]
    for number, (name, _) in enumerate(available, start=1):
        plot_path = os.path.join(_plot_dir(doc), f"{name}.png")
        lines += render_claim(number, all_results[name], plot_path, doc,
                              readings.get(name, ""))
    not_run = [(name, why) for name, why in claims_lib.NOT_RUN.items()]
    not_run += [(name, "no results yet") for name in claims_lib.CLAIMS
                if name not in summaries]
    if not_run:
        lines += ["## Not run", ""]
        lines += [f"- **{name}**: {why}" for name, why in not_run]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _plot_dir(doc: str) -> str:
    return os.path.join(os.path.dirname(doc), os.path.splitext(os.path.basename(doc))[0])


def _anchor(number: int, claim: claims_lib.Claim) -> str:
    text = f"{number}. {claim.title} ({claim.name})".lower()
    keep = "".join(c for c in text if c.isalnum() or c in " -_")
    return keep.replace(" ", "-")


def _short_paper(paper: str) -> str:
    return {claims_lib.LABSE: "LaBSE", claims_lib.CMLM: "CMLM",
            claims_lib.MOCO: "Dual MoCo", claims_lib.BGT.paper: "BGT"}.get(paper, paper)


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
            summary = collect(args.results, claim, args.steps)
            if summary is not None:
                with open(os.path.join(args.summary_dir, f"{claim.name}.json"), "w",
                          encoding="utf-8") as f:
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
             os.path.join(_plot_dir(args.doc), f"{name}.png"))
    readings = {}
    readings_path = os.path.join(args.summary_dir, READINGS)
    if os.path.exists(readings_path):
        import yaml

        with open(readings_path, encoding="utf-8") as f:
            readings = yaml.safe_load(f) or {}
    with open(args.doc, "w", encoding="utf-8") as f:
        f.write(render(summaries, args.doc, readings))
    print(f"wrote {args.doc} ({len(summaries)} claims) and {_plot_dir(args.doc)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
