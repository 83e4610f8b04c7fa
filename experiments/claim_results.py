"""One claim's results as `experiments.report` reads them from its summary: each arm's
values per seed (at a learning curve's points), the paired comparisons and their verdicts,
the CPU time; and how the numbers and metrics read on the page and in the plots."""

import math
from typing import Dict, List, Optional, Tuple

import numpy as np

from experiments import stats
from experiments.claim_types import Claim, Comparison

# The arm name a comparison or panel uses for the `queue_*` arm with the best mean metric.
BEST_QUEUE = "BEST_QUEUE"

REACH_LAST = 3  # logged values a run's final level of a compute-to-reach tag averages


class ClaimResults:
    """One claim's summary: metric values per arm and seed, resolved arm names."""

    def __init__(self, claim: Claim, summary: dict):
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

    def equal_cpu(self, comparison: Comparison) -> Tuple[dict, str, float]:
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

    def reach_target(self, comparison: Comparison) -> float:
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

    def comparison(self, comparison: Comparison) -> Tuple[dict, str]:
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
        return sorted({machine_text(r["machine"]) for r in self.records})


def machine_text(machine: dict) -> str:
    """`CPU (flags), N cores[, T TensorFlow thread(s) per process]` of a result."""
    text = machine["cpu"]
    if machine.get("flags"):
        text += f" ({' '.join(machine['flags'])})"
    text += f", {machine['cores']} cores"
    threads = machine.get("tf_threads")
    if threads:
        text += f", {threads} TensorFlow thread{'s' if threads > 1 else ''} per process"
    return text


def fmt(value: float, digits: int = 3) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else f"{value:.{digits}f}"


def mean_se(values: Dict[int, float], digits: int = 3) -> str:
    if not values:
        return "—"
    s = stats.summary(list(values.values()))
    if s["n"] == 1:
        return fmt(s["mean"], digits)
    return f"{fmt(s['mean'], digits)} ± {fmt(s['se'], digits)}"


def signed(value: float, digits: int = 3) -> str:
    return "—" if math.isnan(value) else f"{value:+.{digits}f}"


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


def describe_metric(claim: Claim, metric: str) -> str:
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
