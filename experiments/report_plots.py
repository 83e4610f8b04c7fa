"""The plots of docs/claims.md (`experiments.report`): per panel, each arm's metric over
seeds (points, or a sweep over `Arm.x`), training-summary curves against steps or CPU
minutes, and learning curves at every evaluated checkpoint."""

import math
import os
from typing import Dict, List, Optional, Tuple

import numpy as np

from experiments import stats
from experiments.claim_results import METRIC_NAMES, ClaimResults, describe_metric, training_curve


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
                        or describe_metric(results.claim, panel.metric), fontsize=8)
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
                            or describe_metric(results.claim, panel.metric), fontsize=8)
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
