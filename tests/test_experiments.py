"""The experiments suite: every arm's stages build a valid config; the smallest arm of a
claim and of a learning curve end to end through the runner (the two runs side by side); the
verdict rule; the report from JSON alone."""

import json
import pathlib
import subprocess
import sys

import pytest
from conftest import REPO_DIR, subprocess_env

from experiments import claims, report, run, stats

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


def _curve_data(shared):
    """Beside `_bundled_bible`: the Bible's verse references (chapters of 25 verses), one
    bundled novel as the English prose, and 40 STS-B-layout pairs (bundled verses against
    their first half, scored 0-5)."""
    english = (shared / "bible" / "eng_kjv.txt").read_text(encoding="utf-8").splitlines()
    (shared / "bible" / "refs.txt").write_text(
        "".join(f"OT\tGen.{i // 25 + 1}.{i % 25 + 1}\n" for i in range(len(english))),
        encoding="utf-8")
    prose = shared / "english_prose" / "sentences"
    prose.mkdir(parents=True)
    novel = REPO_DIR / "cmlm_tf" / "data" / "corpus" / "persuasion.txt"
    (prose / "persuasion.txt").write_text(novel.read_text(encoding="utf-8"), encoding="utf-8")
    (shared / "stsb").mkdir()
    rows = []
    for i, verse in enumerate(english[:40]):
        words = verse.split()
        rows.append(f"main\tbible\t2024\t{i:04d}\t{i % 6:.3f}\t{verse}\t"
                    f"{' '.join(words[:max(2, len(words) // 2)])}")
    (shared / "stsb" / "sts-dev.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return shared


def _run(*args):
    return _Started(args).wait()


class _Started:
    """A runner started in the background; `wait()` gives its CompletedProcess."""

    def __init__(self, args):
        self.args = args
        self.process = subprocess.Popen(
            [sys.executable, "-m", "experiments.run", *args], cwd=REPO_DIR,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env())
        self.done = None

    def wait(self):
        if self.done is None:
            try:
                stdout, stderr = self.process.communicate(timeout=400)
            except subprocess.TimeoutExpired:
                self.process.kill()
                stdout, stderr = self.process.communicate()
            self.done = subprocess.CompletedProcess(self.args, self.process.returncode,
                                                    stdout, stderr)
        return self.done


@pytest.fixture(scope="module")
def runner_runs(tmp_path_factory):
    """The two end-to-end runs of the runner, started together at the module's first test:
    each is one process at a time, mostly single-threaded tracing and saving, so two cores
    overlap them. Yields {name: (results folder, started run)}."""
    runs = {}
    for name, claim, arm, data in (("arm", "negatives", "batch_8", _bundled_bible),
                                   ("curve", "cmlm_vs_mlm", "mlm",
                                    lambda folder: _curve_data(_bundled_bible(folder)))):
        folder = tmp_path_factory.mktemp(f"runner_{name}")
        shared, results = data(folder / "shared"), folder / "results"
        args = ("--claim", claim, "--arms", arm, "--seeds", "1", "--steps", "2",
                "--results", str(results), "--shared_data", str(shared))
        runs[name] = (results, _Started(args))
    yield runs
    for _, started in runs.values():
        if started.process.poll() is None:
            started.process.kill()
            started.process.wait()


@pytest.mark.usefixtures("runner_runs")  # started first: they run beside this test
def test_every_stage_of_every_claim_builds_a_valid_config(tmp_path, minilm_hf_dir):
    """Each stage's recipe files and overrides, as the runner writes them, make a config
    the driver accepts (strict: an unknown or mistyped field fails), for every arm."""
    import yaml

    from cmlm_tf import convert_hf_bert, train

    ctx = run.Context(results=str(tmp_path / "results"), shared=str(tmp_path / "shared"),
                      seeds=[1], steps=2, command="")
    values = {**run.arm_values(1, ctx), "best_queue_size": 16}
    warm_start = convert_hf_bert.warm_start_config(
        convert_hf_bert.read_hf_metadata(str(minilm_hf_dir)),
        str(tmp_path / "minilm" / "encoder"), str(minilm_hf_dir / "vocab.txt"))
    minilm = tmp_path / "results" / "data" / "all-MiniLM-L6-v2"
    assert values["minilm"] == str(minilm)
    minilm.mkdir(parents=True)
    (minilm / "warm_start.yaml").write_text(yaml.safe_dump(warm_start), encoding="utf-8")
    built = set()
    for claim in claims.CLAIMS.values():
        for arm in claim.arms:
            previous = None
            for index, stage in enumerate(arm.stages):
                config_files, fields = run.stage_config(
                    stage, 1, previous, values, ctx, str(tmp_path / "init"))
                overrides = run.write_overrides(
                    str(tmp_path / claim.name / arm.name / f"stage{index}.yaml"), fields)
                where = f"{claim.name}/{arm.name} stage {index + 1}"
                try:
                    params = train.build_params(stage.experiment, [
                        *(str(REPO_DIR / path) for path in config_files), overrides])
                except (ValueError, FileNotFoundError) as error:
                    pytest.fail(f"{where}: {error}")
                assert params.trainer.train_steps == run.stage_steps(stage, ctx), where
                assert params.task.train_data.seed == 1, where
                previous = str(tmp_path / claim.name / arm.name / f"stage{index}")
                built.add(claim.name)
    assert built == set(claims.CLAIMS)


def test_smallest_arm_runs_end_to_end_and_is_skipped_once_done(runner_runs):
    results, started = runner_runs["arm"]
    first = started.wait()
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

    second = _run(*started.args)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "batch_8/seed1: done" in second.stdout
    assert json.loads(path.read_text(encoding="utf-8")) == result


def test_learning_curve_evaluates_checkpoints_and_keeps_its_points(runner_runs):
    results, started = runner_runs["curve"]
    first = started.wait()
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    assert "mlm/seed1: step 1" in first.stdout

    arm = results / "cmlm_vs_mlm" / "steps2" / "mlm"
    result = json.loads((arm / "seed1.json").read_text(encoding="utf-8"))
    curve = result["curve"]
    assert [(p["step"], p["fraction"]) for p in curve] == [(1, 0.5), (2, 1.0)]
    assert 0 < curve[0]["train_cpu_seconds"] < curve[1]["train_cpu_seconds"]
    for point in curve:  # each checkpoint evaluated, with and without PCR
        for key in ("stsb/spearman", "stsb_pcr/spearman", "stsb_nn/both",
                    "stsb_nn_pcr/both"):
            assert -1.0 <= point["metrics"][key] <= 1.0, key
    assert curve[0]["metrics"]["stsb/spearman"] != curve[1]["metrics"]["stsb/spearman"]
    assert result["metrics"] == curve[-1]["metrics"]
    assert curve[-1]["train_cpu_seconds"] == result["cpu_seconds"]["train_stage1"]
    (stage,) = result["stages"]
    assert stage["overrides"]["trainer.train_steps"] == 2
    assert stage["overrides"]["task.train_data.input_path"].endswith("bible_chapters.txt")
    chapters = (results / "data" / "bible_chapters.txt").read_text(encoding="utf-8")
    blocks = chapters.rstrip("\n").split("\n\n")  # a blank line between chapters
    assert len(blocks) > 100 and max(len(b.split("\n")) for b in blocks) == 25
    points = arm / "seed1" / "points"
    assert not (points / "step1_export").exists() and (points / "step2_export").is_dir()

    # A runner stopped before the arm's result file: the evaluated points are kept, not
    # evaluated again, and the result is rebuilt from them.
    (arm / "seed1.json").unlink()
    second = _run(*started.args)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "step 1" not in second.stdout and "step 2" not in second.stdout
    assert json.loads((arm / "seed1.json").read_text(encoding="utf-8"))["curve"] == curve


# A training child: 1 CPU second, a checkpoint, then 30 more.
_BUSY_CHILD = """import pathlib, sys, time
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
burn(1.0)
(pathlib.Path(sys.argv[1]) / "checkpoint").write_text("ckpt-1")
burn(30.0)
"""


@pytest.mark.parametrize("with_checkpoints", [False, True])
def test_cpu_of_a_runner_killed_outright_is_counted_by_the_next_piece(tmp_path,
                                                                       with_checkpoints):
    """A runner killed with SIGKILL (a session's end) leaves its child's CPU time as the
    running piece (a training child's: up to its last checkpoint, the work kept); the next
    piece on the same log counts it."""
    import os
    import signal
    import time

    log, model_dir = tmp_path / "stage" / "train.log", tmp_path / "stage" / "run"
    model_dir.mkdir(parents=True)
    totals_path = tmp_path / "stage" / "train.log.cpu.json"
    child = [sys.executable, "-c", _BUSY_CHILD, str(model_dir)]
    checkpoint_dir = str(model_dir) if with_checkpoints else None
    script = (f"from experiments import run\nrun.CPU_POLL_SECONDS = 0.1\n"
              f"run.run_counted({child!r}, {str(log)!r}, {checkpoint_dir!r})")
    runner = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_DIR,
                              env=subprocess_env(), start_new_session=True)
    try:
        children = f"/proc/{runner.pid}/task/{runner.pid}/children"
        deadline, used = time.time() + 60, 0.0
        while used < 2.5 and time.time() < deadline:  # 1.5 CPU seconds past the checkpoint
            time.sleep(0.05)
            pids = open(children, encoding="ascii").read().split()
            used = (pids and run.process_cpu_seconds(int(pids[0]))) or 0.0
        assert used >= 2.5 and (model_dir / "checkpoint").exists(), used
    finally:
        os.killpg(runner.pid, signal.SIGKILL)  # the runner and its child, no clean-up
        runner.wait()
    killed = json.loads(totals_path.read_text(encoding="utf-8"))
    marked = killed["running"]["cpu_seconds"]
    assert killed["pieces"] == 0
    if with_checkpoints:
        assert 0.9 <= marked < 1.6, marked  # at the checkpoint, not at the kill
    else:
        assert marked > 2.0, marked

    cpu, _ = run.run_counted([sys.executable, "-c", "pass"], str(log))
    totals = json.loads(totals_path.read_text(encoding="utf-8"))
    assert (totals["pieces"], totals["interrupted"]) == (2, 1)
    assert "running" not in totals
    assert cpu == totals["cpu_seconds"] > marked


def test_runners_started_side_by_side_write_the_seeds_initialisation_once(tmp_path,
                                                                          monkeypatch):
    """Per-arm runners of one seed (`--arms cmlm` beside `--arms mlm`) both need the seed's
    random encoder: the first writes it, the second waits and reads it (two writers of one
    checkpoint had failed in TensorFlow's MergeV2Checkpoints)."""
    import threading
    import time

    writes = []

    def write_init(command, log, checkpoint_dir=None):
        directory = next(a for a in command if a.startswith("--write_init=")).split("=", 1)[1]
        writes.append(directory)
        time.sleep(0.3)  # the first runner is still writing when the second looks
        pathlib.Path(directory).mkdir(parents=True)
        (pathlib.Path(directory) / "encoder.index").write_text("", encoding="utf-8")
        return 1.0, 1.0

    monkeypatch.setattr(run, "run_counted", write_init)
    ctx = run.Context(results=str(tmp_path), shared=str(tmp_path), seeds=[3], steps=2,
                      command="")
    found = []
    runners = [threading.Thread(target=lambda arm=arm: found.append(run.ensure_init(3, ctx, arm)))
               for arm in ("cmlm", "mlm")]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join()
    assert writes == [str(tmp_path / "data" / "init" / "seed3")]
    assert found == writes * 2


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


def _write_arm_seed(results, arm, seed, value, steps=(5000, 10000)):
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


def test_seed_and_threads_reach_the_runs_and_bad_values_are_one_line_errors(
        monkeypatch, tmp_path, capsys):
    ran = []
    monkeypatch.setattr(run, "prepare", lambda needs, ctx: None)
    monkeypatch.setattr(run, "run_arm",
                        lambda claim, arm, seed, ctx: ran.append((arm.name, seed, ctx.command)))
    for name in run.THREAD_VARIABLES:  # restored after the test
        monkeypatch.setenv(name, "")
    assert run.main(["--claim", "margin", "--arms", "margin_0", "--seed", "3", "--seed", "2",
                     "--threads", "1", "--results", str(tmp_path)]) == 0
    command = "python -m experiments.run --claim margin --seed 2 --seed 3 --threads 1"
    assert ran == [("margin_0", 2, command), ("margin_0", 3, command)]
    # Every child gets the thread count, and the results record it.
    assert [run._env()[name] for name in run.THREAD_VARIABLES] == ["1", "1"]
    assert run._tf_threads() == 1
    for bad, message in ((["--seed", "0"], "--seed 0: seeds start at 1"),
                         (["--threads", "0"], "--threads 0: give 1 or more"),
                         (["--arms", "queue_16"], "--arms: claim margin: no arm 'queue_16'")):
        with pytest.raises(SystemExit):
            run.main(["--claim", "margin", *bad, "--results", str(tmp_path)])
        assert message in capsys.readouterr().err


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
    page = _render(tmp_path, {"claim": "negatives", "steps": 1000, "records": records})
    assert "| 2 replicas × 16, gathered (32 candidates) | 3 | 0.620 ± 0.006 |" in page
    assert "+0.093 ± 0.009" in page  # the paired differences 0.09, 0.08, 0.11
    assert "**reproduced**" in page
    assert (tmp_path / "claims" / "negatives.png").stat().st_size > 0
    # The budget: 6 of the 15 planned runs (5 arms, 3 seeds), 60 s each; --list's estimate.
    estimate = claim.estimated_cpu_minutes(3)
    assert f"| negatives | 6 of 15 | {estimate:.0f} | 6.0 |" in page
    assert "| bgt | 0 of 6 |" in page
