"""How the runner runs its pieces (`experiments.run`): each command a child process from the
repository root (or, under `--check`, in this process), its output in a log, its CPU time
(user + system) counted into the log's running totals, `log.cpu.json`, even when the runner
is stopped or killed outright."""

import contextlib
import json
import logging
import os
import resource
import runpy
import shlex
import subprocess
import sys
import time
import traceback
from typing import Dict, List, Optional, Tuple

from absl import logging as absl_logging

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Stopped(Exception):
    """SIGTERM or Ctrl-C: the child has been stopped and its CPU time recorded."""


def raise_stopped(signum, frame):
    raise Stopped(f"signal {signum}")


def _cpu_seconds(*, here: bool = False) -> float:
    """CPU time of the finished child processes, or of this process (`here`)."""
    usage = resource.getrusage(resource.RUSAGE_SELF if here else resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# True while `--check` runs: every child command runs in this process (`_run_here`).
IN_PROCESS = False


@contextlib.contextmanager
def in_process():
    """Meanwhile, every child command that can runs in this process (`--check`)."""
    global IN_PROCESS
    IN_PROCESS = True
    try:
        yield
    finally:
        IN_PROCESS = False


# The environment variables of TensorFlow's two thread pools, set by `--threads`.
THREAD_VARIABLES = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


def tf_threads() -> Optional[int]:
    """The TensorFlow threads of every child (`--threads`), None for TensorFlow's default."""
    value = os.environ.get(THREAD_VARIABLES[0])
    return int(value) if value and value.isdigit() else None


# What every piece runs with: quiet TensorFlow, and tf_keras as Keras.
PIECE_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_USE_LEGACY_KERAS": "1"}


def child_env() -> Dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return dict(os.environ, PYTHONPATH=REPO + (os.pathsep + path if path else ""),
                **PIECE_ENV)


def run_child(command: List[str], log_path: str, *, record: bool = False,
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
    cpu_before, wall_before = _cpu_seconds(here=here), time.time()
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
                process = subprocess.Popen(command, cwd=REPO, env=child_env(), stdout=log,
                                           stderr=subprocess.STDOUT)
                returncode = _wait_marking(process, totals_path if record else None,
                                           wall_before, checkpoint_dir)
        except (KeyboardInterrupt, Stopped):
            if process is not None:
                process.terminate()
                process.wait()
            _add_cpu(totals_path, _cpu_seconds(here=here) - cpu_before, time.time() - wall_before)
            raise Stopped(command[2] if len(command) > 2 else command[0]) from None
    cpu, wall = _cpu_seconds(here=here) - cpu_before, time.time() - wall_before
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
            write_json(totals_path, totals)


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
        return read_json(path)
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
        write_json(path, totals)


def _add_cpu(path: str, cpu: float, wall: float) -> Dict[str, float]:
    """Adds one piece's CPU and wall time to the running totals in `path`, in place of its
    mark as the piece still running."""
    totals = _read_totals(path)
    totals.pop("running", None)
    totals["cpu_seconds"] += cpu
    totals["wall_seconds"] += wall
    totals["pieces"] += 1
    write_json(path, totals)
    return totals


def write_json(path: str, value) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1)
    os.replace(path + ".tmp", path)


def read_json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def python_command(*args: str) -> List[str]:
    return [sys.executable, *args]
