"""The experiments' report from JSON alone (learning curves, equal CPU time, compute to a fixed
training accuracy, the budget), the summary collected across machines, and the verdict rule."""

import json

import pytest

from experiments import claims, report, stats


def _render(tmp_path, summary):
    """docs/claims.md as `python -m experiments.report --no_collect` writes it from this
    one summary (plots beside it, in tmp_path/claims/)."""
    summary_dir = tmp_path / "results"
    summary_dir.mkdir()
    (summary_dir / f"{summary['claim']}.json").write_text(json.dumps(summary),
                                                          encoding="utf-8")
    doc = tmp_path / "claims.md"
    assert report.main(["--no_collect", "--summary_dir", str(summary_dir),
                        "--doc", str(doc)]) == 0
    return doc.read_text(encoding="utf-8")


def _curve_summary():
    """A learning-curve summary: 3 seeds, points at half and all of each arm's steps."""
    claim = claims.CLAIMS["cmlm_vs_mlm"]
    metric = claim.metric
    points, records = [], []
    # (arm, steps, [(train CPU s, value) at half, at all], per-seed offset)
    arms = [("mlm", 10000, [(300, 0.50), (600, 0.55)], 0.0),
            ("mlm_2x", 20000, [(600, 0.54), (1200, 0.56)], 0.0),
            ("cmlm", 10000, [(600, 0.60), (1200, 0.70)], 0.01)]
    for seed in (1, 2, 3):
        records.append({"arm": "untrained", "seed": seed,
                        "metrics": {metric: 0.40, "stsb_nn/both": 0.3},
                        "cpu_seconds": {"total": 30.0},
                        "command": "python -m experiments.run --claim cmlm_vs_mlm --seeds 3",
                        "machine": {"cpu": "test CPU", "cores": 2,
                                    "flags": ["avx2", "avx512f"] if seed == 3 else ["avx2"],
                                    "tf_threads": 1 if seed == 3 else None}})
        for arm, steps, values, offset in arms:
            for (cpu, value), fraction in zip(values, (0.5, 1.0)):
                value += offset * (seed - 1)
                points.append({"arm": arm, "seed": seed, "step": int(steps * fraction),
                               "steps": steps, "fraction": fraction,
                               "train_cpu_seconds": float(cpu),
                               "cpu_seconds": {"export_and_evaluate": 20.0},
                               "metrics": {metric: value, "stsb_nn/both": value / 2}})
    return {"claim": "cmlm_vs_mlm", "steps": 10000, "records": records, "points": points}


def test_report_draws_learning_curves_and_compares_at_equal_cpu(tmp_path):
    page = _render(tmp_path, _curve_summary())
    # At the last point: CMLM 0.70/0.71/0.72 against MLM 0.55.
    assert "CMLM beats MLM at the same steps (at 100 % of the steps) | +0.160 ± 0.006" in page
    # At equal CPU time (600 s, MLM's last point): CMLM at its half-way point, 0.60/0.61/0.62.
    assert "| CMLM beats MLM at the same steps | 10.0 | +0.060 ± 0.006 |" in page
    # Against MLM with twice the steps: both reach 1200 s; 0.70/0.71/0.72 against 0.56.
    assert "| CMLM beats MLM with twice the steps | 20.0 | +0.150 ± 0.006 |" in page
    assert "| CMLM | 5,000 | 3 | 10.0 | 0.610 ± 0.006 |" in page
    assert "MLM, twice the steps: 3 seeds, 2, 2, 2 of 7 points" in page
    assert ("(test CPU (avx2 avx512f), 2 cores, 1 TensorFlow thread per process; "
            "test CPU (avx2), 2 cores)") in page
    assert (tmp_path / "claims" / "cmlm_vs_mlm.png").stat().st_size > 0


def test_report_compares_compute_to_a_fixed_training_accuracy(tmp_path):
    """Stacking's compute-to-reach comparison, from the stages' CPU time and training
    curves: the level is the lowest over all runs of a run's mean of its last three
    training accuracies (scratch's 0.3, 0.4, 0.5)."""
    records = []
    for seed, scratch_cpu in ((1, 600.0), (2, 660.0), (3, 720.0)):
        common = {"seed": seed, "command": "python -m experiments.run --claim stacking",
                  "machine": {"cpu": "test CPU", "cores": 2},
                  "metrics": {"validation/mlm_accuracy": 0.2, "validation/tlm_accuracy": 0.1}}
        # Scratch reaches 0.4 at step 75: 7.5, 8.25, 9 CPU min.
        records.append({**common, "arm": "scratch", "cpu_seconds": {"total": scratch_cpu},
                        "stages": [{"steps": 100, "cpu_seconds": scratch_cpu}],
                        "train_curves": [{"mlm_accuracy": [[25, 0.1], [50, 0.3], [75, 0.4],
                                                           [100, 0.5]]}]})
        # Stacked, in cumulative CPU min: (1, 0.1), (2, 0.3), then (3.5, 0.35), (5, 0.65),
        # its last three 0.433 on average: 0.4 at 3.5 + 1.5 * 0.05 / 0.3 = 3.75 min.
        records.append({**common, "arm": "stacked", "cpu_seconds": {"total": 300.0},
                        "stages": [{"steps": 100, "cpu_seconds": 120.0},
                                   {"steps": 100, "cpu_seconds": 180.0}],
                        "train_curves": [{"mlm_accuracy": [[50, 0.1], [100, 0.3]]},
                                         {"mlm_accuracy": [[50, 0.35], [100, 0.65]]}]})
    page = _render(tmp_path, {"claim": "stacking", "steps": 1000, "records": records})
    # 3.75 - 7.5, 3.75 - 8.25, 3.75 - 9: -4.5 ± 0.433, below -0.5 min on the predicted side.
    assert ("fixed training MLM accuracy (training CPU min to mlm_accuracy 0.400) | "
            "-4.500 ± 0.433 |") in page
    row = next(line for line in page.splitlines() if "mlm_accuracy 0.400" in line)
    assert row.endswith("**reproduced** |")
    assert (tmp_path / "claims" / "stacking.png").stat().st_size > 0


def _write_arm_seed(results, arm, seed, value, *, steps=(5000, 10000)):
    """A finished curve arm and seed under the runner's RESULTS: its result file and its
    points at `steps`, each with the metric `value`."""
    folder = results / "cmlm_vs_mlm" / "steps10000" / arm
    (folder / f"seed{seed}" / "points").mkdir(parents=True)
    (folder / f"seed{seed}.json").write_text(json.dumps({
        "arm": arm, "seed": seed, "metrics": {"stsb/spearman": value},
        "cpu_seconds": {"total": 60.0}, "cpu_seconds_with_reused_stages": {"total": 60.0},
        "wall_seconds": {"total": 40.0}, "train_curves": [], "stages": [],
        "command": f"python -m experiments.run --claim cmlm_vs_mlm --seed {seed}",
        "machine": {"cpu": "this CPU", "cores": 2}, "git_commit": "abc", "finished": ""}),
        encoding="utf-8")
    for step in steps:
        (folder / f"seed{seed}" / "points" / f"step{step}.json").write_text(json.dumps({
            "arm": arm, "seed": seed, "step": step, "steps": 10000, "fraction": step / 1e4,
            "train_cpu_seconds": step / 100, "cpu_seconds": {"export_and_evaluate": 5.0},
            "metrics": {"stsb/spearman": value}}), encoding="utf-8")


def test_collect_adds_this_machines_seeds_to_the_committed_summary(tmp_path):
    """Seeds run on another machine stay in the summary; an (arm, seed) run here replaces
    that arm and seed whole, stale points included."""
    claim = claims.CLAIMS["cmlm_vs_mlm"]
    first, second, here = (tmp_path / name for name in ("first", "second", "here"))
    _write_arm_seed(first, "cmlm", 2, 0.7)
    previous = report.collect(str(first), claim)
    _write_arm_seed(second, "cmlm", 1, 0.5, steps=(500, 1000, 2000))
    _write_arm_seed(second, "mlm", 2, 0.6)
    previous = report.collect(str(second), claim, previous=previous)
    # This machine: cmlm seed 1 again (now with two points) and cmlm seed 3.
    _write_arm_seed(here, "cmlm", 1, 0.55)
    _write_arm_seed(here, "cmlm", 3, 0.65)
    summary = report.collect(str(here), claim, previous=previous)
    assert [(r["arm"], r["seed"], r["metrics"]["stsb/spearman"]) for r in summary["records"]] \
        == [("cmlm", 1, 0.55), ("cmlm", 2, 0.7), ("cmlm", 3, 0.65), ("mlm", 2, 0.6)]
    assert [(p["arm"], p["seed"], p["step"]) for p in summary["points"]] == [
        (arm, seed, step) for arm, seed in (("cmlm", 1), ("cmlm", 2), ("cmlm", 3), ("mlm", 2))
        for step in (5000, 10000)]
    # Nothing run here: the summary is kept as it is (no reordering of other claims' files).
    assert report.collect(str(tmp_path / "empty"), claim, previous=summary) is summary
    # A summary at other steps is not mixed in.
    assert report.collect(str(here), claim, steps=20, previous=summary) is None


@pytest.mark.parametrize("diffs, expected", [
    ([0.10, 0.12, 0.11], stats.REPRODUCED),
    ([-0.10, -0.12, -0.11], stats.OPPOSITE),
    ([0.001, -0.001, 0.0], stats.NO_EFFECT),
    ([0.10, -0.08, 0.02], stats.INCONCLUSIVE),
    ([0.10], stats.INCONCLUSIVE),
])
def test_verdict_rule(diffs, expected):
    treatment = {seed: 0.5 + d for seed, d in enumerate(diffs, start=1)}
    control = {seed: 0.5 for seed in treatment}
    difference = stats.paired_difference(treatment, control)
    assert stats.verdict(difference, direction=1, tolerance=0.01) == expected


def test_paired_difference_matches_hand_computation():
    difference = stats.paired_difference({1: 0.6, 2: 0.7, 3: 0.65}, {1: 0.5, 2: 0.55, 3: 0.6})
    assert difference["mean"] == pytest.approx(0.1)
    assert difference["se"] == pytest.approx(0.05 / 3 ** 0.5)  # sd of (0.1, 0.15, 0.05)
    assert difference["low"] == pytest.approx(0.1 - 4.302653 * 0.05 / 3 ** 0.5, abs=1e-5)


def test_report_renders_only_numbers_from_the_summary(tmp_path):
    claim = claims.CLAIMS["negatives"]
    records = []
    for seed, (gathered, local) in enumerate([(0.61, 0.52), (0.63, 0.55), (0.62, 0.51)], 1):
        for arm, value in (("two_replicas_gather", gathered), ("two_replicas_local", local)):
            records.append({"arm": arm, "seed": seed,
                            "metrics": {claim.metric: value, "spread/mean_cosine": 0.2},
                            "cpu_seconds": {"total": 60.0},
                            "command": "python -m experiments.run --claim negatives --seeds 3",
                            "machine": {"cpu": "test CPU", "cores": 2}})
    page = _render(tmp_path, {"claim": "negatives", "steps": 1000, "records": records})
    assert "| 2 replicas × 16, gathered (32 candidates) | 3 | 0.620 ± 0.006 |" in page
    assert "+0.093 ± 0.009" in page  # the paired differences 0.09, 0.08, 0.11
    assert "**reproduced**" in page
    assert (tmp_path / "claims" / "negatives.png").stat().st_size > 0
    # The budget: 6 of the 15 planned runs (5 arms, 3 seeds), 60 s each; --list's estimate.
    estimate = claim.estimated_cpu_minutes(3)
    assert f"| negatives | 6 of 15 | {estimate:.0f} | 6.0 |" in page
    assert "| bgt | 0 of 6 |" in page
