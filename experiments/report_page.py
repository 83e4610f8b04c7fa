"""The text of docs/claims.md (`experiments.report`): the introduction, the overview of
every claim's verdicts, the CPU budget, and each claim's section with its tables."""

import math
import os
from typing import Dict, List, Optional

from experiments import claims as claims_lib
from experiments import stats
from experiments.claim_results import (
    BEST_QUEUE,
    METRIC_NAMES,
    ClaimResults,
    describe_metric,
    fmt,
    mean_se,
    signed,
)
from experiments.claim_types import CMLM, LABSE, MOCO, Claim
from experiments.pretraining_claims import BGT

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                   "claims.md")


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
claims are in `experiments/retrieval_claims.py` and `pretraining_claims.py`, their
recipes in `experiments/recipes/`; the training runs go through `cmlm_tf.train`
(`experiments/train.py` adds the seed and the logical CPU devices for two replicas).

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
                 *, reading: str = "") -> List[str]:
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
        cells = [arm.label, str(len(seeds)), mean_se(results.values(arm.name, claim.metric))]
        cells += [mean_se(results.values(arm.name, key)) for key, _ in claim.columns]
        cells.append(fmt(results.cpu_minutes(arm.name) / len(seeds), 1))
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
            f"[{signed(difference['low'])}, {signed(difference['high'])}]"
        effect = _effect(difference)
        if difference.get("fraction") is not None:
            says += f" (at {_fraction(difference['fraction'])} of the steps)"
        if comparison.to_reach:
            says += f" (training CPU min to {comparison.to_reach} " \
                    f"{fmt(difference['target'])})"
        lines.append(f"| {says} | {effect} | {interval} | {difference['n']} | "
                     f"**{verdict}** |")
    lines.append("")
    if results.has_curves:
        lines += render_curves(results)
    if verdicts:
        first, difference, verdict = verdicts[0]
        metric_label = describe_metric(claim, first.metric or claim.metric)
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
    lines += [f"**CPU time:** {fmt(total, 1)} min for the {runs} runs above{machines}.", ""]
    relative = os.path.relpath(plot_path, os.path.dirname(doc))
    lines += [f"![{claim.title}]({relative})", ""]
    return lines


def _effect(difference: dict) -> str:
    """The paired difference's mean, with its standard error when there are two seeds or
    more."""
    effect = signed(difference["mean"])
    return effect + (f" ± {fmt(difference['se'])}" if difference["n"] > 1 else "")


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
            f"[{signed(difference['low'])}, {signed(difference['high'])}]"
        effect = _effect(difference)
        rows.append(f"| {comparison.says} | {fmt(budget / 60, 1)} | {effect} | {interval} | "
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
        [METRIC_NAMES.get(m) or describe_metric(claim, m) for m in metrics]
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
            cells = [arm.label, f"{step:,}", str(len(points)), fmt(cpu, 1)]
            cells += [mean_se({p["seed"]: p["metrics"][m] for p in points
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
                     f"{fmt(estimated, 0)} | "
                     f"{fmt(minutes, 1) if results else '—'} |")
    lines += [f"| all | | {fmt(estimate, 0)} | {fmt(measured, 1)} |", ""]
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
                    fmt(results.cpu_minutes(), 1)
            else:
                link = paper = cpu = ""
            lines.append(f"| {link} | {paper} | {says} | {effect} | {difference['n']} | "
                         f"**{verdict}** | {cpu} |")
    lines += [""] + render_budget(all_results)
    for number, (name, _) in enumerate(available, start=1):
        plot_path = os.path.join(plot_dir(doc), f"{name}.png")
        lines += render_claim(number, all_results[name], plot_path, doc,
                              reading=readings.get(name, ""))
    not_run = [(name, why) for name, why in claims_lib.NOT_RUN.items()]
    not_run += [(name, "no results yet") for name in claims_lib.CLAIMS
                if name not in summaries]
    if not_run:
        lines += ["## Not run", ""]
        lines += [f"- **{name}**: {why}" for name, why in not_run]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def plot_dir(doc: str) -> str:
    return os.path.join(os.path.dirname(doc), os.path.splitext(os.path.basename(doc))[0])


def _anchor(number: int, claim: Claim) -> str:
    text = f"{number}. {claim.title} ({claim.name})".lower()
    keep = "".join(c for c in text if c.isalnum() or c in " -_")
    return keep.replace(" ", "-")


def _short_paper(paper: str) -> str:
    return {LABSE: "LaBSE", CMLM: "CMLM",
            MOCO: "Dual MoCo", BGT.paper: "BGT"}.get(paper, paper)
