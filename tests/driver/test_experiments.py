"""The experiments suite: `--check` over every claim (its data, every stage's strict
config, the smallest arm end to end at 2 steps, in one process) and a learning curve through
the runner's child processes (the runs side by side); the claims' arms, recipes and warm-up.
The runner's pieces are in test_experiment_pieces.py, the report and the verdict rule in
test_experiment_report.py."""

import json
import pathlib
import subprocess
import sys

import pytest

from experiments import arms, claim_results, claims, curves, prepare, processes, run
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
