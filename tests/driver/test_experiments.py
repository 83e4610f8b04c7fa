"""The experiments suite: `--check` over every claim (its data, every stage's strict
config, the smallest arm end to end at 2 steps, in one process) and a learning curve through
the runner's child processes (the runs side by side); the verdict rule; the report from JSON
alone."""

import json
import pathlib
import subprocess
import sys

import pytest

from experiments import arms, claim_results, claims, curves, prepare, processes, report, run, stats
from tests.conftest import REPO_DIR, subprocess_env

BUNDLED_PAIRS = REPO_DIR / "cmlm_tf" / "data" / "corpus" / "bible_en_es.tsv"


def _bundled_pairs():
    return [line.split("\t")[:2]
            for line in BUNDLED_PAIRS.read_text(encoding="utf-8").splitlines()]


BIBLE_VERSES = 2000


def _bundled_bible(folder):
    """A `bible/` folder in the public layout (line-aligned KJV / Reina-Valera 1909) holding
    the first `BIBLE_VERSES` bundled verse pairs, so the runner's Bible split needs no
    public data."""
    bible = folder / "bible"
    bible.mkdir(parents=True)
    pairs = _bundled_pairs()[:BIBLE_VERSES]
    (bible / "eng_kjv.txt").write_text("".join(f"{en}\n" for en, _ in pairs), encoding="utf-8")
    (bible / "spa_rv1909.txt").write_text("".join(f"{es}\n" for _, es in pairs),
                                          encoding="utf-8")
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
    novel = (REPO_DIR / "cmlm_tf" / "data" / "corpus" / "persuasion.txt").read_text(
        encoding="utf-8")
    (prose / "persuasion.txt").write_text(novel, encoding="utf-8")
    (shared / "stsb").mkdir()
    rows = []
    for i, verse in enumerate(english[:40]):
        words = verse.split()
        rows.append(f"main\tbible\t2024\t{i:04d}\t{i % 6:.3f}\t{verse}\t"
                    f"{' '.join(words[:max(2, len(words) // 2)])}")
    (shared / "stsb" / "sts-dev.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return shared


def _all_claims_data(shared):
    """Beside `_curve_data`: the margin claim's Installation Guide (`install_guide/<lang>.tsv`
    for its six languages) and UDHR (`udhr/<lang>.txt`), bundled verse pairs in their layout
    (60 pairs per language, 20 lines), and the five other novels of the stacking claim (the
    bundled one under their names), so every claim reads bundled text only."""
    pairs = _bundled_pairs()
    prose = shared / "english_prose" / "sentences"
    for name in ("emma", "mansfield_park", "northanger_abbey", "pride_and_prejudice",
                 "sense_and_sensibility"):
        (prose / f"{name}.txt").write_text((prose / "persuasion.txt").read_text(
            encoding="utf-8"), encoding="utf-8")
    guide = shared / "install_guide"
    guide.mkdir()
    for i, lang in enumerate(("es", "de", "fr", "ja", "ru", "zh_CN")):
        (guide / f"{lang}.tsv").write_text(
            "".join(f"{en}\t{xx}\n" for en, xx in pairs[i * 60:(i + 1) * 60]),
            encoding="utf-8")
    udhr = shared / "udhr"
    udhr.mkdir()
    (udhr / "eng.txt").write_text("".join(f"{en}\n" for en, _ in pairs[:20]), encoding="utf-8")
    for lang in ("spa", "fra", "deu_1996", "jpn", "rus", "cmn_hans"):
        (udhr / f"{lang}.txt").write_text("".join(f"{es}\n" for _, es in pairs[:20]),
                                          encoding="utf-8")
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
                # A safety net against a hung runner, far above the check's time on a busy
                # machine (about 110 s idle, over 400 s with other jobs on 2 cores).
                stdout, stderr = self.process.communicate(timeout=3600)
            except subprocess.TimeoutExpired:
                self.process.kill()
                stdout, stderr = self.process.communicate()
            self.done = subprocess.CompletedProcess(self.args, self.process.returncode,
                                                    stdout, stderr)
        return self.done


# `--check` over every claim, in two single-threaded processes (their CPU time about even).
CHECKS = {"check_a": "margin,negatives,cmlm_vs_mlm,pcr", "check_b": "queue,cmlm_br,stacking,bgt"}


@pytest.fixture(scope="module")
def runner_runs(tmp_path_factory):
    """`--check` over every claim, started at the module's first test: two runners sharing
    one results folder, every piece in the runner's process, one TensorFlow thread each, so
    two cores overlap them. Yields {name: (results folder, started run)}."""
    check = tmp_path_factory.mktemp("runner_check")
    shared = _all_claims_data(_curve_data(_bundled_bible(check / "shared")))
    runs = {name: (check / "results", _Started((
        "--check", "--claim", names, "--threads", "1", "--results", str(check / "results"),
        "--shared_data", str(shared)))) for name, names in CHECKS.items()}
    yield runs
    for _, started in runs.values():
        if started.process.poll() is None:
            started.process.kill()
            started.process.wait()


def _finished(runner_runs, name):
    results, started = runner_runs[name]
    done = started.wait()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return results, started, done


def _check_context(results):
    """The context of the `--check` runs into `results` (their shared data beside it)."""
    return prepare.Context(results=str(results / "check"),
                           shared=str(results.parent / "shared"), seeds=[1], steps=2,
                           command="")


def test_check_reports_each_failed_claim_in_one_line_and_goes_on(tmp_path):
    shared = _bundled_bible(tmp_path / "shared")  # no Installation Guide, no verse refs
    done = _run("--check", "--claim", "margin,cmlm_vs_mlm", "--results", str(tmp_path),
                "--shared_data", str(shared))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert [line.split(": FAILED: ")[0] for line in lines if ": FAILED: " in line] == \
        ["check margin", "check cmlm_vs_mlm"]
    assert "the Installation Guide" in done.stdout and "verse references" in done.stdout
    assert "check: 2 of 2 claims failed (margin, cmlm_vs_mlm)" in done.stderr


@pytest.mark.usefixtures("runner_runs")  # started first: they run beside this test
def test_a_plain_run_starts_each_piece_as_a_child_process(tmp_path):
    """Outside `--check` a piece is a process of its own, started from the repository root
    with the runner's environment: the seed's init, written by `experiments.train` in a
    child (TensorFlow, tf_keras and the relative recipe paths resolved there)."""
    ctx = prepare.Context(results=str(tmp_path), shared="", seeds=[1], steps=2, command="")
    assert not processes.IN_PROCESS
    directory = pathlib.Path(prepare.ensure_init(1, ctx, "owner"))
    assert (directory / "encoder.index").exists() and (directory / "params.yaml").exists()
    log = (tmp_path / "data" / "init" / "seed1.log").read_text(encoding="utf-8")
    assert log.startswith(f"$ {sys.executable} -m experiments.train ")
    totals = json.loads((tmp_path / "data" / "init" / "seed1.log.cpu.json").read_text(
        encoding="utf-8"))
    # The child's CPU time was counted (how much depends on the machine's speed).
    assert totals["cpu_seconds"] > 0


def test_check_runs_the_smallest_arm_of_every_claim(runner_runs):
    """`--check` passes for every claim on bundled text: each claim's data prepared, every
    stage of every arm a strict config, its smallest arm trained, exported and evaluated at
    2 steps, in one process."""
    outputs = "".join(_finished(runner_runs, name)[2].stdout for name in CHECKS)
    results, inits = runner_runs["check_a"][0] / "check", []
    for claim in claims.CLAIMS.values():
        if claim.results_from:
            assert f"check {claim.name}: runs as {claim.results_from}" in outputs
            continue
        arm = run.smallest_arm(claim)
        stages = sum(len(a.stages) for a in claim.arms)
        assert f"check {claim.name}: ok ({stages} stage configs; {arm.name} at 2 steps" \
            in outputs, claim.name
        result = json.loads((results / claim.name / "steps2" / arm.name / "seed1.json")
                            .read_text(encoding="utf-8"))
        assert (result["claim"], result["arm"], result["seed"], result["steps"]) == \
            (claim.name, arm.name, 1, 2)
        assert result["command"].startswith("python -m experiments.run --check")
        for evaluation in claim.evaluations:  # every kind of evaluation gave its metrics
            assert any(key.startswith(f"{evaluation.kind}/") for key in result["metrics"]), \
                (claim.name, evaluation.kind)
        cpu = result["cpu_seconds"]
        assert cpu.get("export", 0) + cpu.get("export_and_evaluate", 0) > 0
        for index, stage in enumerate(result["stages"], 1):  # each trained 2 steps' worth
            assert result["cpu_seconds"][f"train_stage{index}"] > 0
            assert stage["overrides"]["trainer.train_steps"] == \
                arms.stage_steps(arm.stages[index - 1], prepare.Context("", "", [1], 2, ""))
        inits.append(result["cpu_seconds"].get("init", 0.0))
    # the seed's random init written once, by whichever runner needed it first
    assert len([cpu for cpu in inits if cpu > 0]) == 1


def test_smallest_negatives_arm_trains_from_the_seeds_init_and_is_skipped_once_done(
        runner_runs, capsys):
    results, _, _ = _finished(runner_runs, "check_a")
    path = results / "check" / "negatives" / "steps2" / "batch_128" / "seed1.json"
    result = json.loads(path.read_text(encoding="utf-8"))
    metrics = result["metrics"]
    held_out = metrics["retrieval/bible_es/num_pairs"]
    assert 300 < held_out < 500  # a fifth of the 2,000 verses, English de-duplicated
    for key in ("retrieval/mean/src2tgt", "retrieval/mean/tgt2src", "retrieval/mean/both"):
        assert 0.0 <= metrics[key] <= 1.0
    assert 0.0 < metrics["spread/embedding_std"] < 1.0
    assert "train/ranking_loss" in metrics
    (stage,) = result["stages"]
    assert stage["experiment"] == "cmlm_tf/bitext"
    assert stage["overrides"]["task.train_data.global_batch_size"] == 128
    # a quarter of the claim's 2 steps, at least one, and no warm-up in a one-step run
    assert stage["overrides"]["trainer.train_steps"] == 1
    assert stage["overrides"]["trainer.optimizer_config.warmup.linear.warmup_steps"] == 0
    assert stage["overrides"]["task.init_checkpoint"].endswith("init/seed1/encoder")

    claim = claims.CLAIMS["negatives"]
    assert arms.run_arm(claim, claim.arm("batch_128"), 1, _check_context(results)) == str(path)
    assert "batch_128/seed1: done" in capsys.readouterr().out
    assert json.loads(path.read_text(encoding="utf-8")) == result


def test_learning_curve_evaluates_checkpoints_and_keeps_its_points(runner_runs, capsys,
                                                                  monkeypatch):
    results, _, first = _finished(runner_runs, "check_a")
    assert "mlm/seed1: step 1" in first.stdout

    arm = results / "check" / "cmlm_vs_mlm" / "steps2" / "mlm"
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
    chapters = (results / "check" / "data" / "bible_chapters.txt").read_text(encoding="utf-8")
    blocks = chapters.rstrip("\n").split("\n\n")  # a blank line between chapters
    assert len(blocks) == BIBLE_VERSES // 25 and max(len(b.split("\n")) for b in blocks) == 25
    points = arm / "seed1" / "points"
    assert not (points / "step1_export").exists() and (points / "step2_export").is_dir()

    # A runner stopped before the arm's result file: the evaluated points are kept, not
    # evaluated again (nor trained: no piece runs), and the result is rebuilt from them.
    (arm / "seed1.json").unlink()
    monkeypatch.setattr(processes, "run_counted",
                        lambda *args, **kwargs: pytest.fail("a piece ran"))
    claim, ctx = claims.CLAIMS["cmlm_vs_mlm"], _check_context(results)
    curves.run_curves(claim, [claim.arm("mlm")], 1, ctx)
    curves.finish_curve(claim, claim.arm("mlm"), 1, ctx)
    out = capsys.readouterr().out
    assert "step 1" not in out and "step 2" not in out
    assert json.loads((arm / "seed1.json").read_text(encoding="utf-8"))["curve"] == curve


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
    # The runner counts `children.busy_training`: 1 CPU second, a checkpoint, then 30 more.
    checkpoint_dir = str(model_dir) if with_checkpoints else ""
    runner = subprocess.Popen([sys.executable, "-m", "tests.driver.children",
                               "counted_busy_training", str(model_dir), str(log),
                               checkpoint_dir], cwd=REPO_DIR, env=subprocess_env(),
                              start_new_session=True)
    try:
        children = f"/proc/{runner.pid}/task/{runner.pid}/children"
        deadline, used = time.time() + 3600, 0.0  # a safety net
        while used < 2.5 and time.time() < deadline:  # 1.5 CPU seconds past the checkpoint
            time.sleep(0.05)
            pids = open(children, encoding="ascii").read().split()
            used = (pids and processes.process_cpu_seconds(int(pids[0]))) or 0.0
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

    cpu, _ = processes.run_counted([sys.executable, "-m", "tests.driver.children", "nothing"],
                             str(log))
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
        # Makes it likely that the second runner looks while the first is writing; on a
        # machine slow enough that it looks later, it finds the files: one write either way.
        time.sleep(0.3)
        pathlib.Path(directory).mkdir(parents=True)
        (pathlib.Path(directory) / "encoder.index").write_text("", encoding="utf-8")
        return 1.0, 1.0

    monkeypatch.setattr(processes, "run_counted", write_init)
    ctx = prepare.Context(results=str(tmp_path), shared=str(tmp_path), seeds=[3], steps=2,
                          command="")
    found = []
    runners = [threading.Thread(
        target=lambda arm=arm: found.append(prepare.ensure_init(3, ctx, arm)))
        for arm in ("cmlm", "mlm")]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join()
    assert writes == [str(tmp_path / "data" / "init" / "seed3")]
    assert found == writes * 2


def test_a_piece_run_in_the_runners_process_keeps_its_output_and_its_errors(
        tmp_path, monkeypatch):
    """Under `--check` a piece runs in the runner's process from the repository root: its
    output (print, absl, TensorFlow's logger) goes to its log and nowhere after, an error is
    the one line that says what went wrong, and Ctrl-C stops the runner (not only the
    piece), its CPU time counted."""
    import logging
    import os

    from absl import logging as absl_logging

    # `children.piece` prints, logs through absl and TensorFlow's logger, then exits with its
    # argument, raises, or is interrupted.
    piece = [sys.executable, "-m", "tests.driver.children", "piece"]
    log = tmp_path / "piece.log"
    monkeypatch.setattr(processes, "IN_PROCESS", True)
    cwd, argv = os.getcwd(), list(sys.argv)

    cpu, _ = processes.run_child(piece + ["0"], str(log))
    assert cpu >= 0.0 and (os.getcwd(), sys.argv) == (cwd, argv)
    text = log.read_text(encoding="utf-8")
    assert "printed ['0']" in text and "logged by absl" in text
    assert "logged by tensorflow" in text
    with pytest.raises(RuntimeError) as error:
        processes.run_child(piece + ["raise"], str(log))
    first = str(error.value).splitlines()[0]
    assert first == (f"tests.driver.children failed (1): ValueError: task.model: bad field; "
                     f"log {log}")
    with pytest.raises(RuntimeError, match=r"^tests\.driver\.children failed \(3\)"):
        processes.run_child(piece + ["3"], str(log))
    with pytest.raises(processes.Stopped):
        processes.run_child(piece + ["interrupt"], str(log), record=True)
    assert json.loads((tmp_path / "piece.log.cpu.json").read_text(encoding="utf-8"))[
        "pieces"] == 1
    handlers = [absl_logging.get_absl_handler().python_handler, *logging.getLogger().handlers,
                *logging.getLogger("tensorflow").handlers]
    assert not any(getattr(getattr(h, "stream", None), "name", None) == str(log)
                   for h in handlers)


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
    for name in processes.THREAD_VARIABLES:  # restored after the test
        monkeypatch.setenv(name, "")
    assert run.main(["--claim", "margin", "--arms", "margin_0", "--seed", "3", "--seed", "2",
                     "--threads", "1", "--results", str(tmp_path)]) == 0
    command = "python -m experiments.run --claim margin --seed 2 --seed 3 --threads 1"
    assert ran == [("margin_0", 2, command), ("margin_0", 3, command)]
    # Every child gets the thread count, and the results record it.
    assert [processes.child_env()[name] for name in processes.THREAD_VARIABLES] == ["1", "1"]
    assert processes.tf_threads() == 1
    for bad, message in ((["--seed", "0"], "--seed 0: seeds start at 1"),
                         (["--threads", "0"], "--threads 0: give 1 or more"),
                         (["--arms", "queue_16"], "--arms: claim margin: no arm 'queue_16'"),
                         (["--claim", "margin,bgt"], "give --claim NAME, one claim"),
                         (["--claim", "nope"], "--claim nope: unknown claim (have margin,"),
                         (["--check", "--arms", "minilm"], "--check runs each claim's "
                                                           "smallest arm, seed 1")):
        with pytest.raises(SystemExit):
            run.main(["--claim", "margin", *bad, "--results", str(tmp_path)])
        assert message in capsys.readouterr().err


def test_schedule_warms_up_for_a_share_of_the_run_shorter_than_the_run():
    warmup = "trainer.optimizer_config.warmup.linear.warmup_steps"
    assert arms.schedule(1000, 0.1)[warmup] == 100
    assert arms.schedule(5, 0.1)[warmup] == 1  # at least a step
    assert arms.schedule(2, 0.5)[warmup] == 1
    assert arms.schedule(1, 0.1)[warmup] == 0  # a one-step run trains at the full rate
    assert warmup not in arms.schedule(1000, None)


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
                assert arm in names or arm == claim_results.BEST_QUEUE, (claim.name, arm)
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
