"""A Beam pipeline run with progress lines: the work to do, counted before it starts; the
work done, counted by the workers in progress files; and one line that says why it failed.

Workers are other processes, so each encoder keeps its count in a file of a local folder
(`ProgressFile`), and the command sums the files (`read_progress`) while the pipeline runs on
a background thread (`run_pipeline`). Used by `cmlm_tf.scale.embed`, and by `cmlm_tf.scale.knn`
for its workers' lines.

Local workers are started by Beam with this process's stderr and in its process group: what
they print (Beam's warnings about cloud clients it cannot load, their tracebacks when they
fail or get the terminal's Ctrl-C) would drown the command's lines. `run_pipeline` can send
every line but the command's own to a log file, and stops the workers itself when it is
interrupted.
"""

import contextlib
import os
import re
import signal
import tempfile
import threading
import time
import uuid
from typing import Callable, List, Optional, Sequence, Set, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from cmlm_tf.files import disk
from cmlm_tf.runtime import tf_logs

# How long an interrupted run waits for its stopped workers and its pipeline, and then for
# Beam's other threads to end.
_STOP_WAIT = 10.0
_SETTLE = 3.0


class PipelineFailed(RuntimeError):
    """The Beam pipeline failed; the message is the one line that says why."""


class ProgressFile:
    """One encoder's count of embedded lines, in `FOLDER/<hex>.txt`, which the command reads
    to print progress (workers are other processes). FOLDER must exist.

    The file is rewritten atomically (a temporary file, then `os.replace`) at the first
    `add()`, so that the command's count moves as soon as lines are embedded, then at most
    every `every` seconds and at `write()`. A failed write is ignored: progress never fails
    a bundle.
    """

    def __init__(self, folder: str, every: float = 2.0,
                 clock: Callable[[], float] = time.monotonic):
        self.folder = folder
        self.path = os.path.join(folder, f"{uuid.uuid4().hex}.txt")
        self.count = 0
        self._every = every
        self._clock = clock
        self._written = None

    def add(self, count: int) -> None:
        self.count += count
        if self._written is None or self._clock() - self._written >= self._every:
            self.write()

    def write(self) -> None:
        temp = self.path + ".tmp"
        try:
            # Into the folder the command made: once a failed or interrupted run has removed
            # it, a worker that is still finishing must not make it again.
            with open(temp, "w", encoding="utf-8") as f:
                f.write(f"{self.count}\n")
            os.replace(temp, self.path)
        except OSError:
            return
        self._written = self._clock()


def read_progress(folder: str) -> int:
    """The embedded lines counted by every `ProgressFile` in `folder` (0 if none yet)."""
    total = 0
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    for name in names:
        if not name.endswith(".txt"):
            continue
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                total += int(f.read().strip() or 0)
        except (OSError, ValueError):
            continue
    return total


def match_inputs(patterns: Sequence[str]) -> List[str]:
    """The files the globs match, each once, in order (Beam's `FileSystems.match`)."""
    paths = []
    for result in FileSystems.match(list(patterns)):
        paths += [metadata.path for metadata in result.metadata_list]
    return list(dict.fromkeys(paths))


def count_lines(paths: Sequence[str], chunk_bytes: int = 1 << 20) -> int:
    """Lines in the files (newlines, plus a last line without one), read in 1 MiB chunks;
    compressed files (`.gz`, ...) are counted decompressed, as the pipeline reads them."""
    total = 0
    for path in paths:
        last = b"\n"
        with FileSystems.open(path) as f:
            while chunk := f.read(chunk_bytes):
                total += chunk.count(b"\n")
                last = chunk[-1:]
        total += last != b"\n"
    return total


def failure_line(error: BaseException) -> str:
    """The line of a pipeline error that says why: the last `SomeError: message` line of the
    worker traceback Beam puts in the message, else its first line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    causes = [line for line in lines
              if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b:? ", line)]
    return (causes[-1] if causes else lines[0] if lines else type(error).__name__)[:500]


def format_progress(embedded: int, total: Optional[int], seconds: float) -> str:
    """`embedded X of ~Y lines (Z lines/s, ETA m:ss)`."""
    rate = embedded / seconds if seconds > 0 else 0.0
    of = f" of ~{total}" if total is not None else ""
    if total is not None and rate > 0:
        remaining = max(total - embedded, 0) / rate
        eta = f"ETA {int(remaining // 60)}:{int(remaining % 60):02d}"
    else:
        eta = "ETA unknown"
    return f"embedded {embedded}{of} lines ({rate:.0f} lines/s, {eta})"


def _run_in_background(pipeline: beam.Pipeline) -> Tuple[threading.Thread, dict]:
    """Starts `pipeline` on a daemon thread; the dict gets "result" or "error"."""
    outcome = {}

    def target():
        try:
            result = pipeline.run()
            result.wait_until_finish()
            outcome["result"] = result
        except BaseException as error:  # noqa: BLE001 (handed to the main thread)
            outcome["error"] = error

    thread = threading.Thread(target=target, name="embed_corpus pipeline", daemon=True)
    thread.start()
    return thread, outcome


def beam_workers() -> Set[int]:
    """The process ids of this process's descendants that run Beam's SDK worker
    (`apache_beam.runners.worker.sdk_worker_main`), from /proc (none where there is no
    /proc)."""
    children = {}
    try:
        entries = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return set()
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                parent = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, queue = set(), [os.getpid()]
    while queue:
        for child in children.get(queue.pop(), ()):
            queue.append(child)
            try:
                with open(f"/proc/{child}/cmdline", "rb") as f:
                    if b"sdk_worker_main" in f.read():
                        found.add(child)
            except OSError:
                continue
    return found


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def stop_workers(pids: Set[int], wait: float = _STOP_WAIT) -> None:
    """Kills the worker processes `pids` and waits up to `wait` seconds until they are gone:
    an interrupted run must not leave a worker writing into a folder it then removes."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
    deadline = time.monotonic() + wait
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def _join_new_threads(before: Set[threading.Thread], wait: float = _SETTLE,
                      quiet: float = 1.0) -> None:
    """Waits for the threads started since `before` to settle: until none has ended for
    `quiet` seconds, or `wait` seconds in all. Beam's threads that read from a killed
    worker report the broken stream (a traceback each) as they end, and must do it while
    stderr still goes to the log; its thread pools never end."""
    start = settled = time.monotonic()
    alive = set(threading.enumerate()) - before
    while time.monotonic() - settled < quiet and time.monotonic() - start < wait:
        time.sleep(0.05)
        still = {thread for thread in alive if thread.is_alive()}
        if still != alive:
            alive, settled = still, time.monotonic()


def _report_until_done(thread: threading.Thread, progress_folder: Optional[str],
                       total: Optional[int], report: Callable[[str], None],
                       *, every: float) -> None:
    """A progress line every `every` seconds, and one as soon as the first lines are
    embedded (a short run then shows a count between 0 and the total), until `thread` ends.
    The rate counts from the last look that found nothing embedded: the workers' start-up
    (TensorFlow, the model) is not work that the rest of the input will take again."""
    start = last = time.perf_counter()
    moved = False
    while thread.is_alive():
        thread.join(timeout=min(every, 0.25))
        if not thread.is_alive() or progress_folder is None:
            continue
        now = time.perf_counter()
        embedded = read_progress(progress_folder)
        if not embedded:
            start = now
        if now - last >= every or (embedded and not moved):
            report(format_progress(embedded, total, now - start))
            last, moved = now, moved or embedded > 0


def run_pipeline(pipeline: beam.Pipeline, progress_folder: Optional[str],
                 total: Optional[int], report: Callable[[str], None],
                 *, every: float = 10.0, own_prefix: Optional[str] = None,
                 output: Optional[str] = None):
    """Runs `pipeline`, reporting progress every `every` seconds from the progress files
    (when there are any); returns Beam's result or raises `PipelineFailed`.

    With `own_prefix` (local runs), only the lines written to stderr meanwhile that start
    with it reach the console; the others, the workers' included, go to a log file, which
    is kept, and named in the failure line, only when the pipeline fails. An interrupted
    run (Ctrl-C) kills the workers it started, and waits for them, before it lets the
    interrupt go on. A worker that ran out of disk space is reported as such, naming
    `output` (the folder the pipeline writes) and the space left there.
    """
    log = _new_log() if own_prefix is not None else None
    try:
        outcome = _run_logged(pipeline, progress_folder, total, report, every=every,
                              own_prefix=own_prefix, log=log)
    except BaseException:
        _remove(log)
        raise
    if "error" in outcome:
        where = f" (the workers' log: {log})" if log else ""
        cause = failure_line(outcome["error"])
        if output is not None and ("[Errno 28]" in cause or "No space left" in cause):
            cause = str(disk.DiskFullError(output))
        raise PipelineFailed(f"the pipeline failed: {cause}{where}") from outcome["error"]
    _remove(log)
    return outcome["result"]


def _run_logged(pipeline: beam.Pipeline, progress_folder: Optional[str],
                total: Optional[int], report: Callable[[str], None], *, every: float,
                own_prefix: Optional[str], log: Optional[str]) -> dict:
    """`run_pipeline`'s run, its stderr routed to `log` (when given); the outcome dict."""
    threads, workers = set(threading.enumerate()), beam_workers()
    prefix = (own_prefix or "").encode("utf-8")
    with open(log, "ab") if log else contextlib.nullcontext() as lines, \
            tf_logs.route_stderr(lambda line: line.startswith(prefix), lines) if log \
            else contextlib.nullcontext():
        thread, outcome = _run_in_background(pipeline)
        try:
            _report_until_done(thread, progress_folder, total, report, every=every)
        except BaseException:
            stop_workers(beam_workers() - workers)
            thread.join(timeout=_STOP_WAIT)
            _join_new_threads(threads)
            raise
    return outcome


def _new_log() -> str:
    handle, path = tempfile.mkstemp(prefix="cmlm_tf-beam-", suffix=".log")
    os.close(handle)
    return path


def _remove(path: Optional[str]) -> None:
    if path is not None and os.path.exists(path):
        os.remove(path)
