"""The experiments suite: one claim's smallest arm end to end through the runner, the verdict
rule, and the report from JSON alone."""

import json
import subprocess
import sys

import pytest
from conftest import REPO_DIR, subprocess_env

from experiments import claims, report, stats

BUNDLED_PAIRS = REPO_DIR / "cmlm_tf" / "data" / "corpus" / "bible_en_es.tsv"


def _bundled_bible(folder):
    """A `bible/` folder in the public layout (line-aligned KJV / Reina-Valera 1909) holding
    the bundled verse pairs, so the runner's Bible split needs no public data."""
    bible = folder / "bible"
    bible.mkdir(parents=True)
    english, spanish = [], []
    for line in BUNDLED_PAIRS.read_text(encoding="utf-8").splitlines():
        source, target = line.split("\t")[:2]
        english.append(source)
        spanish.append(target)
    (bible / "eng_kjv.txt").write_text("\n".join(english) + "\n", encoding="utf-8")
    (bible / "spa_rv1909.txt").write_text("\n".join(spanish) + "\n", encoding="utf-8")
    return folder


def _run(*args):
    return subprocess.run([sys.executable, "-m", "experiments.run", *args], cwd=REPO_DIR,
                          capture_output=True, text=True, env=subprocess_env(), timeout=300)


def test_smallest_arm_runs_end_to_end_and_is_skipped_once_done(tmp_path):
    shared = _bundled_bible(tmp_path / "shared")
    results = tmp_path / "results"
    args = ("--claim", "negatives", "--arms", "batch_8", "--seeds", "1", "--steps", "2",
            "--results", str(results), "--shared_data", str(shared))
    first = _run(*args)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]

    path = results / "negatives" / "steps2" / "batch_8" / "seed1.json"
    result = json.loads(path.read_text(encoding="utf-8"))
    assert (result["claim"], result["arm"], result["seed"], result["steps"]) == \
        ("negatives", "batch_8", 1, 2)
    metrics = result["metrics"]
    held_out = metrics["retrieval/bible_es/num_pairs"]
    assert 800 < held_out < 1100  # a fifth of the 4,783 bundled pairs, English de-duplicated
    for key in ("retrieval/mean/src2tgt", "retrieval/mean/tgt2src", "retrieval/mean/both"):
        assert 0.0 <= metrics[key] <= 1.0
    assert 0.0 < metrics["spread/embedding_std"] < 1.0
    assert "train/ranking_loss" in metrics
    (stage,) = result["stages"]
    assert stage["experiment"] == "cmlm_tf/bitext"
    assert stage["overrides"]["task.train_data.global_batch_size"] == 8
    assert stage["overrides"]["trainer.train_steps"] == 8  # 4x the claim's steps at batch 8
    assert stage["overrides"]["task.init_checkpoint"].endswith("init/seed1/encoder")
    for piece in ("init", "train_stage1", "export", "evaluate", "total"):
        assert result["cpu_seconds"][piece] > 0, piece
    assert result["command"].startswith("python -m experiments.run --claim negatives")

    second = _run(*args)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "batch_8/seed1: done" in second.stdout
    assert json.loads(path.read_text(encoding="utf-8")) == result


def test_list_names_every_claim():
    listing = _run("--list")
    assert listing.returncode == 0, listing.stderr
    for name in list(claims.CLAIMS) + list(claims.NOT_RUN):
        assert name in listing.stdout


def test_claims_name_existing_recipes_and_arms():
    for claim in claims.CLAIMS.values():
        names = {arm.name for arm in claim.arms}
        for comparison in claim.comparisons:
            for arm in (comparison.treatment, comparison.control):
                assert arm in names or arm == report.BEST_QUEUE, (claim.name, arm)
        for arm in claim.arms:
            for stage in arm.stages:
                for path in stage.config_files:
                    if "{" not in path:
                        assert (REPO_DIR / path).exists(), (claim.name, path)


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
    summary_dir = tmp_path / "results"
    summary_dir.mkdir()
    (summary_dir / "negatives.json").write_text(json.dumps(
        {"claim": "negatives", "steps": 1000, "records": records}), encoding="utf-8")
    doc = tmp_path / "claims.md"
    assert report.main(["--no_collect", "--summary_dir", str(summary_dir),
                        "--doc", str(doc)]) == 0
    page = doc.read_text(encoding="utf-8")
    assert "| 2 replicas × 16, gathered (32 candidates) | 3 | 0.620 ± 0.006 |" in page
    assert "+0.093 ± 0.009" in page  # the paired differences 0.09, 0.08, 0.11
    assert "**reproduced**" in page
    assert (tmp_path / "claims" / "negatives.png").stat().st_size > 0
