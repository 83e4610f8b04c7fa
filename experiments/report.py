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
"""

import argparse
import glob
import json
import math
import os
import sys
from typing import Dict, List, Optional, Tuple

import numpy as np

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


def collect(results: str, claim: claims_lib.Claim, steps: Optional[int] = None,
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


# ---------------------------------------------------------------------------------------
# Numbers


REACH_LAST = 3  # logged values a run's final level of a compute-to-reach tag averages


class ClaimResults:
    """One claim's summary: metric values per arm and seed, resolved arm names."""

    def __init__(self, claim: claims_lib.Claim, summary: dict):
        self.claim = claim
        self.steps = summary.get("steps", claim.steps)
        # A summary of learning curves (an older one of the same claim has one point each).
        self.has_curves = bool(claim.eval_points) and "points" in summary
        self.records = summary["records"]
        self.by_arm: Dict[str, Dict[int, dict]] = {}
        for record in self.records:
            self.by_arm.setdefault(record["arm"], {})[record["seed"]] = record
        # Learning curves: arm -> seed -> points by step (an arm without stages: its one
        # evaluation, at step 0 and no training CPU).
        self.curves: Dict[str, Dict[int, List[dict]]] = {}
        for point in sorted(summary.get("points", []), key=lambda p: p["step"]):
            self.curves.setdefault(point["arm"], {}).setdefault(point["seed"], []).append(point)
        if self.has_curves:
            for arm in claim.arms:
                if not arm.stages:
                    for seed, record in self.by_arm.get(arm.name, {}).items():
                        self.curves.setdefault(arm.name, {})[seed] = [
                            {"arm": arm.name, "seed": seed, "step": 0, "steps": 0,
                             "fraction": None, "train_cpu_seconds": 0.0,
                             "cpu_seconds": record["cpu_seconds"],
                             "metrics": record["metrics"]}]
        self.by_arm.update({arm: {seed: points[-1] for seed, points in seeds.items()}
                            for arm, seeds in self.curves.items()})

    def values(self, arm: str, metric: str) -> Dict[int, float]:
        """Each seed's value (for a learning curve: at the seed's last evaluated point)."""
        arm = self.resolve(arm)
        return {seed: record["metrics"][metric]
                for seed, record in self.by_arm.get(arm, {}).items()
                if metric in record["metrics"]}

    def is_curve(self, arm: str) -> bool:
        """An arm with a learning curve (trained, evaluated at several points)."""
        try:
            return bool(self.has_curves and self.claim.arm(arm).stages)
        except KeyError:
            return False

    def at_fraction(self, arm: str, metric: str, fraction: float) -> Dict[int, float]:
        """Each seed's value at the point `fraction` of the arm's steps (an arm without a
        curve: its one value)."""
        if not self.is_curve(arm):
            return self.values(arm, metric)
        return {seed: point["metrics"][metric] for seed, points in
                self.curves.get(arm, {}).items() for point in points
                if abs(point["fraction"] - fraction) < 1e-9 and metric in point["metrics"]}

    def last_common_fraction(self, treatment: str, control: str, metric: str,
                             control_metric: str) -> Optional[float]:
        """The latest fraction of the steps with the most seeds evaluated in both arms."""
        fractions = {point["fraction"] for arm in (treatment, control) if self.is_curve(arm)
                     for points in self.curves.get(arm, {}).values() for point in points}
        best, best_n = None, 0
        for fraction in sorted(fractions):
            n = len(set(self.at_fraction(treatment, metric, fraction))
                    & set(self.at_fraction(control, control_metric, fraction)))
            if n and n >= best_n:
                best, best_n = fraction, n
        return best

    def cpu_curve(self, arm: str, seed: int, metric: str) -> List[Tuple[float, float]]:
        """(training CPU seconds, value) of the seed's points, from step 0 (the untrained
        arm's value of the seed, which shares the initialisation) when there is one."""
        points = [(p["train_cpu_seconds"], p["metrics"][metric])
                  for p in self.curves.get(arm, {}).get(seed, []) if metric in p["metrics"]]
        start = [(0.0, p["metrics"][metric]) for name in self.curves
                 if not self.is_curve(name) and self.has_curves
                 for p in self.curves[name].get(seed, []) if metric in p["metrics"]]
        return start[:1] + points

    def equal_cpu(self, comparison: claims_lib.Comparison) -> Tuple[dict, str, float]:
        """The comparison at equal training CPU time: per seed, both arms' curves linearly
        interpolated at the larger CPU time both reached; returns the paired difference,
        its verdict and the mean of those CPU times (seconds)."""
        metric = comparison.metric or self.claim.metric
        control_metric = comparison.control_metric or metric
        treatment, control, budgets = {}, {}, []
        seeds = set(self.curves.get(comparison.treatment, {})) & \
            set(self.curves.get(comparison.control, {}))
        for seed in sorted(seeds):
            a = self.cpu_curve(comparison.treatment, seed, metric)
            b = self.cpu_curve(comparison.control, seed, control_metric)
            if len(a) < 2 or len(b) < 2:
                continue
            budget = min(a[-1][0], b[-1][0])
            treatment[seed] = float(np.interp(budget, *zip(*a)))
            control[seed] = float(np.interp(budget, *zip(*b)))
            budgets.append(budget)
        difference = stats.paired_difference(treatment, control)
        return (difference, stats.verdict(difference, comparison.direction,
                                          comparison.tolerance),
                float(np.mean(budgets)) if budgets else float("nan"))

    def reach_target(self, comparison: claims_lib.Comparison) -> float:
        """The level of `comparison.to_reach` every run of both arms reached: the lowest,
        over those runs, of a run's mean of its last `REACH_LAST` logged values (one of
        which is at least that mean, so the run reached it)."""
        finals = [float(np.mean([y for _, y in curve[-REACH_LAST:]]))
                  for arm in (comparison.treatment, comparison.control)
                  for record in self.by_arm.get(self.resolve(arm), {}).values()
                  for curve in [training_curve(record, comparison.to_reach, "cpu")] if curve]
        return min(finals) if finals else float("nan")

    def cpu_to_reach(self, arm: str, tag: str, target: float) -> Dict[int, float]:
        """Each seed's training CPU minutes to first reach `target` on the training-summary
        `tag`, interpolated linearly from the logged point before (from 0 at the start)."""
        reached = {}
        for seed, record in self.by_arm.get(self.resolve(arm), {}).items():
            before = None
            for x, y in training_curve(record, tag, "cpu"):
                if y >= target:
                    reached[seed] = x if before is None or before[1] >= target else \
                        before[0] + (x - before[0]) * (target - before[1]) / (y - before[1])
                    break
                before = (x, y)
        return reached

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
        """Paired by seed; for learning curves at the last point both arms reached (the same
        fraction of each arm's steps: `difference["fraction"]`)."""
        if comparison.to_reach:
            target = self.reach_target(comparison)
            difference = stats.paired_difference(
                self.cpu_to_reach(comparison.treatment, comparison.to_reach, target),
                self.cpu_to_reach(comparison.control, comparison.to_reach, target))
            difference.update(fraction=None, target=target)
            return difference, stats.verdict(difference, comparison.direction,
                                             comparison.tolerance)
        metric = comparison.metric or self.claim.metric
        control_metric = comparison.control_metric or metric
        treatment = self.values(comparison.treatment, metric)
        control = self.values(comparison.control, control_metric)
        fraction = None
        if self.is_curve(comparison.treatment) or self.is_curve(comparison.control):
            fraction = self.last_common_fraction(comparison.treatment, comparison.control,
                                                 metric, control_metric)
            if fraction is not None:
                treatment = self.at_fraction(comparison.treatment, metric, fraction)
                control = self.at_fraction(comparison.control, control_metric, fraction)
            elif any(self.curves.get(arm) for arm in (comparison.treatment, comparison.control)
                     if self.is_curve(arm)):
                treatment, control = {}, {}  # no point in common yet
        difference = stats.paired_difference(
            treatment, control, control_is_fixed=self.is_fixed(comparison.control))
        difference["fraction"] = fraction
        return difference, stats.verdict(difference, comparison.direction,
                                         comparison.tolerance)

    def cpu_minutes(self, arm: Optional[str] = None) -> float:
        """Recorded CPU time; for a curve still running, its points so far (training up to
        the last point, and every export and evaluation)."""
        arms = [self.resolve(arm)] if arm else sorted(self.by_arm)
        total = 0.0
        for name in arms:
            for seed, record in self.by_arm.get(name, {}).items():
                points = self.curves.get(name, {}).get(seed) if self.is_curve(name) else None
                finished = [r for r in self.records if r["arm"] == name and r["seed"] == seed]
                if finished or not points:
                    total += (finished[0] if finished else record)["cpu_seconds"]["total"]
                else:
                    total += max(p["train_cpu_seconds"] for p in points) + sum(
                        sum(p["cpu_seconds"].values()) for p in points)
        return total / 60

    def commands(self) -> List[str]:
        return sorted({r["command"] for r in self.records})

    def machines(self) -> List[str]:
        return sorted({_machine(r["machine"]) for r in self.records})


def _machine(machine: dict) -> str:
    """`CPU (flags), N cores[, T TensorFlow thread(s) per process]` of a result."""
    text = machine["cpu"]
    if machine.get("flags"):
        text += f" ({' '.join(machine['flags'])})"
    text += f", {machine['cores']} cores"
    threads = machine.get("tf_threads")
    if threads:
        text += f", {threads} TensorFlow thread{'s' if threads > 1 else ''} per process"
    return text


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
    if results.has_curves:
        _plot_learning_curves(plt, results, path)
        return
    figure, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.8),
                                squeeze=False, sharey=results.claim.share_y)
    for axis, panel in zip(axes[0], panels):
        if panel.curve in ("steps", "cpu"):
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


def _plot_learning_curves(plt, results: ClaimResults, path: str) -> None:
    """Each panel's metric per arm, mean ± s.e. over seeds at every evaluated checkpoint
    (thin lines: each seed), against the step (top row) and against training CPU minutes
    (bottom row); an arm without training is a dashed line at its mean."""
    panels = results.claim.panels
    figure, axes = plt.subplots(2, len(panels), figsize=(4.4 * len(panels), 7.2),
                                squeeze=False)
    for column, panel in enumerate(panels):
        for row, x_key in enumerate(("step", "cpu")):
            axis = axes[row][column]
            for colour, arm in zip(("C0", "C1", "C2", "C3", "C4"), panel.arms):
                if not results.is_curve(arm):
                    values = list(results.values(arm, panel.metric).values())
                    if values:
                        axis.axhline(sum(values) / len(values), color="0.4", linestyle="--",
                                     linewidth=1, label=results.label(arm))
                    continue
                seeds = results.curves.get(arm, {})
                by_x: Dict[int, List[Tuple[float, float]]] = {}
                for points in seeds.values():
                    xs, ys = [], []
                    for point in points:
                        if panel.metric not in point["metrics"]:
                            continue
                        x = point["step"] if x_key == "step" else \
                            point["train_cpu_seconds"] / 60
                        xs.append(x)
                        ys.append(point["metrics"][panel.metric])
                        by_x.setdefault(point["step"], []).append((x, ys[-1]))
                    axis.plot(xs, ys, color=colour, linewidth=0.6, alpha=0.35)
                if not by_x:
                    continue
                steps = sorted(by_x)
                xs = [float(np.mean([x for x, _ in by_x[step]])) for step in steps]
                summaries = [stats.summary([y for _, y in by_x[step]]) for step in steps]
                axis.errorbar(xs, [s["mean"] for s in summaries],
                              yerr=[0.0 if math.isnan(s["se"]) else s["se"]
                                    for s in summaries],
                              color=colour, fmt="o-", markersize=3, capsize=3, linewidth=1.2,
                              label=results.label(arm))
            axis.set_xlabel("training step" if x_key == "step" else
                            "training CPU minutes (mean over seeds)", fontsize=8)
            axis.set_ylabel(METRIC_NAMES.get(panel.metric)
                            or _metric_label(results.claim, panel.metric), fontsize=8)
            axis.set_title(panel.title, fontsize=9)
            axis.grid(alpha=0.3)
            if column == 0:
                axis.legend(fontsize=7, loc="best")
    figure.suptitle(f"{results.claim.title}: mean ± s.e. over seeds at each checkpoint "
                    "(thin: each seed)", fontsize=10)
    figure.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def training_curve(record: dict, tag: str, x: str) -> List[Tuple[float, float]]:
    """A run's training-summary `tag` over all its stages, against the step (`x` "steps")
    or the cumulative training CPU minutes ("cpu"; each stage's points spread evenly over
    the stage's CPU time)."""
    points, offset = [], 0.0
    for stage, curves in zip(record["stages"], record["train_curves"]):
        width = stage["cpu_seconds"] / 60 if x == "cpu" else stage["steps"]
        points += [(offset + width * step / stage["steps"], value)
                   for step, value in curves.get(tag, [])]
        offset += width
    return points


def _plot_curves(axis, results: ClaimResults, panel) -> None:
    """The training-summary tag `panel.metric` of every seed against the step, or against
    cumulative training CPU minutes, with the level a compute-to-reach comparison uses."""
    colours = ["C0", "C1", "C2", "C3", "C4"]
    for colour, arm in zip(colours, panel.arms):
        for number, record in enumerate(results.by_arm.get(results.resolve(arm),
                                                            {}).values()):
            points = training_curve(record, panel.metric, panel.curve)
            axis.plot([x for x, _ in points], [y for _, y in points], color=colour, linewidth=1,
                      label=results.label(arm) if number == 0 else None)
    for comparison in results.claim.comparisons:
        if comparison.to_reach == panel.metric and panel.curve == "cpu":
            target = results.reach_target(comparison)
            if not math.isnan(target):
                axis.axhline(target, color="0.4", linestyle="--", linewidth=1,
                             label=f"level to reach: {target:.3f}")
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
    "stsb_pcr/spearman": "STS-B dev Spearman, PCR",
    "stsb_nn_pcr/both": "nearest-neighbour top-1, PCR",
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
`python -m experiments.run --claim NAME [--seeds 3 | --seed K] [--steps S]` (`--list` shows
the claims and their CPU time; `python -m experiments.run --check` tries every claim in a
few minutes first: its data, every stage's config, and its smallest arm at 2 steps). The
recipes are in `experiments/claims.py` and
`experiments/recipes/`; the training runs go through `cmlm_tf.train` (`experiments/train.py`
adds the seed and the logical CPU devices for two replicas).

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
share is counted once, under the arm that trained it. A training piece stopped outright (a
machine's session ending) counts up to its last checkpoint, from the runner's mark every
30 s. The runs shared their 2 cores with other jobs, so wall times are not reported. All
arms of one seed run on one machine, so a paired difference never mixes machines; the seeds
of a claim may come from different machines (`--seed K`), listed under the claim with the
vector extensions of their CPU.
"""


def render_claim(number: int, results: ClaimResults, plot_path: str, doc: str,
                 reading: str = "") -> List[str]:
    claim = results.claim
    lines = [f"## {number}. {claim.title} (`{claim.name}`)", ""]
    lines += [f"*{claim.paper}*: {claim.says}", ""]
    lines += [f"**Setup.** {claim.setup}", ""]
    if results.steps != claim.steps:
        lines += [f"**Steps.** The runs below are at `--steps {results.steps}` (the claim's "
                  f"default is {claim.steps:,}; step counts above scale with it).", ""]
    if claim.results_from:
        lines += [f"The numbers come from the exports of *{claim.results_from}*; no "
                  "training of its own.", ""]
    commands = results.commands() or [
        f"python -m experiments.run --claim {claim.name} --seeds 3"]
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
        effect = _effect(difference)
        if difference.get("fraction") is not None:
            says += f" (at {_fraction(difference['fraction'])} of the steps)"
        if comparison.to_reach:
            says += f" (training CPU min to {comparison.to_reach} " \
                    f"{_fmt(difference['target'])})"
        lines.append(f"| {says} | {effect} | {interval} | {difference['n']} | "
                     f"**{verdict}** |")
    lines.append("")
    if results.has_curves:
        lines += render_curves(results)
    if verdicts:
        first, difference, verdict = verdicts[0]
        metric_label = _metric_label(claim, first.metric or claim.metric)
        at = "" if difference.get("fraction") is None else \
            f", at {_fraction(difference['fraction'])} of the steps"
        lines += [f"**Verdict: {verdict}** for the main comparison ({first.says}): "
                  f"{_effect(difference)} ({metric_label}, {_seeds(difference['n'])}{at}).",
                  ""]
    if claim.scale_note:
        lines += [f"**Scale.** {claim.scale_note}", ""]
    if reading:
        lines += [f"**Reading.** {' '.join(reading.split())}", ""]
    total = results.cpu_minutes()
    runs = sum(len(seeds) for seeds in results.by_arm.values())
    machines = f" ({'; '.join(results.machines())})" if results.machines() else ""
    lines += [f"**CPU time:** {_fmt(total, 1)} min for the {runs} runs above{machines}.", ""]
    relative = os.path.relpath(plot_path, os.path.dirname(doc))
    lines += [f"![{claim.title}]({relative})", ""]
    return lines


def _effect(difference: dict) -> str:
    """The paired difference's mean, with its standard error when there are two seeds or
    more."""
    effect = _signed(difference["mean"])
    return effect + (f" ± {_fmt(difference['se'])}" if difference["n"] > 1 else "")


def _seeds(count: int) -> str:
    return f"{count} seed" if count == 1 else f"{count} seeds"


def _fraction(fraction: float) -> str:
    return f"{100 * fraction:g} %"


def render_curves(results: ClaimResults) -> List[str]:
    """A learning-curve claim: how far the runs are, the comparisons at equal training CPU
    time, and the curves as a table."""
    claim = results.claim
    lines = []
    progress = []
    for arm in claim.arms:
        seeds = results.curves.get(arm.name, {})
        if arm.stages:
            counts = ", ".join(f"{len(seeds[seed])}" for seed in sorted(seeds))
            progress.append(f"{arm.label}: {_seeds(len(seeds))}, "
                            f"{counts or 0} of {len(claim.eval_points)} points")
        else:
            progress.append(f"{arm.label}: {_seeds(len(seeds))}")
    lines += ["**Runs so far.** " + "; ".join(progress) + ". The last-point comparisons "
              "above use, for each comparison, the latest fraction of the steps with the most "
              "seeds evaluated in both arms (the full run when every seed is done).", ""]
    rows = []
    for comparison in claim.comparisons:
        if not (results.is_curve(comparison.treatment) and
                results.is_curve(comparison.control)):
            continue
        difference, verdict, budget = results.equal_cpu(comparison)
        interval = "—" if math.isnan(difference["low"]) else \
            f"[{_signed(difference['low'])}, {_signed(difference['high'])}]"
        effect = _effect(difference)
        rows.append(f"| {comparison.says} | {_fmt(budget / 60, 1)} | {effect} | {interval} | "
                    f"{difference['n']} | **{verdict}** |")
    if rows:
        lines += ["**At equal training CPU time.** For each seed, both arms' curves "
                  "(training CPU time of the checkpoint, metric) are interpolated linearly "
                  "at the larger CPU time both reached, from the untrained encoder at 0; "
                  "earlier points are checkpoints in the middle of a schedule whose learning "
                  "rate decays to 0 only at the arm's last step.", "",
                  "| comparison | training CPU min (mean) | effect, mean ± s.e. | "
                  "95 % interval | seeds | verdict |",
                  "| --- | ---: | ---: | ---: | ---: | --- |"] + rows + [""]
    metrics = [panel.metric for panel in claim.panels if panel.curve == "points"]
    header = ["arm", "step", "seeds", "training CPU min"] + \
        [METRIC_NAMES.get(m) or _metric_label(claim, m) for m in metrics]
    table = ["| " + " | ".join(header) + " |",
             "| " + " | ".join(["---"] + ["---:"] * (len(header) - 1)) + " |"]
    for arm in claim.arms:
        by_step: Dict[int, List[dict]] = {}
        for points in results.curves.get(arm.name, {}).values():
            for point in points:
                by_step.setdefault(point["step"], []).append(point)
        for step in sorted(by_step):
            points = by_step[step]
            cpu = stats.summary([p["train_cpu_seconds"] / 60 for p in points])["mean"]
            cells = [arm.label, f"{step:,}", str(len(points)), _fmt(cpu, 1)]
            cells += [_mean_se({p["seed"]: p["metrics"][m] for p in points
                                if m in p["metrics"]}) for m in metrics]
            table.append("| " + " | ".join(cells) + " |")
    lines += ["**The curves** (mean ± s.e. over seeds at each evaluated checkpoint; training "
              "CPU time is user + system time of the arm's training processes up to that "
              "checkpoint, each stop and restart at an evaluation point included):", ""]
    lines += table + [""]
    return lines


def render_budget(all_results: Dict[str, "ClaimResults"]) -> List[str]:
    """Every claim's CPU budget: the runner's `--list` estimate for 3 seeds against the CPU
    time measured so far, with how many of the planned arm × seed runs have finished."""
    lines = ["## CPU budget", "",
             "The estimate is `python -m experiments.run --list` (3 seeds, the claim's default "
             "steps); measured is the CPU time recorded in the runs on this page, a learning "
             "curve still running counted up to its last evaluated point.", "",
             "| claim | runs finished | estimate, CPU min | measured, CPU min |",
             "| --- | ---: | ---: | ---: |"]
    estimate = measured = 0.0
    for name, claim in claims_lib.CLAIMS.items():
        if claim.results_from:
            continue
        results = all_results.get(name)
        finished = len({(r["arm"], r["seed"]) for r in results.records}) if results else 0
        minutes = results.cpu_minutes() if results else 0.0
        steps = f" at {results.steps:,} steps" if results and results.steps != claim.steps \
            else ""
        estimated = claim.estimated_cpu_minutes(3)
        estimate += estimated
        measured += minutes
        lines.append(f"| {name}{steps} | {finished} of {claim.planned_runs(3)} | "
                     f"{_fmt(estimated, 0)} | "
                     f"{_fmt(minutes, 1) if results else '—'} |")
    lines += [f"| all | | {_fmt(estimate, 0)} | {_fmt(measured, 1)} |", ""]
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
            effect = _effect(difference)
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
    lines += [""] + render_budget(all_results)
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
