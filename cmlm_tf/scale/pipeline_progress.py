"""A Beam pipeline run with progress lines: the work to do, counted before it starts; the
work done, counted by the workers in progress files; and one line that says why it failed.

Workers are other processes, so each encoder keeps its count in a file of a local folder
(`ProgressFile`), and the command sums the files (`read_progress`) while the pipeline runs on
a background thread (`run_pipeline`). Used by `cmlm_tf.scale.embed`.
"""

import os
import re
import threading
import time
import uuid
from typing import Callable, List, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems


class PipelineFailed(RuntimeError):
    """The Beam pipeline failed; the message is the one line that says why."""


class ProgressFile:
    """One encoder's count of embedded lines, in `FOLDER/<hex>.txt`, which the command reads
    to print progress (workers are other processes). FOLDER must exist.

    The file is rewritten atomically (a temporary file, then `os.replace`) at most every
    `every` seconds and at `write()`. A failed write is ignored: progress never fails a bundle.
    """

    def __init__(self, folder: str, every: float = 2.0,
                 clock: Callable[[], float] = time.monotonic):
        self.folder = folder
        self.path = os.path.join(folder, f"{uuid.uuid4().hex}.txt")
        self.count = 0
        self._every = every
        self._clock = clock
        self._written = clock()

    def add(self, count: int) -> None:
        self.count += count
        if self._clock() - self._written >= self._every:
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


def run_pipeline(pipeline: beam.Pipeline, progress_folder: Optional[str],
                 total: Optional[int], report: Callable[[str], None],
                 every: float = 10.0):
    """Runs `pipeline`, reporting progress every `every` seconds from the progress files
    (when there are any); returns Beam's result or raises `PipelineFailed`."""
    start = time.perf_counter()
    thread, outcome = _run_in_background(pipeline)
    while thread.is_alive():
        thread.join(timeout=every)
        if thread.is_alive() and progress_folder is not None:
            report(format_progress(read_progress(progress_folder), total,
                                   time.perf_counter() - start))
    if "error" in outcome:
        raise PipelineFailed(f"the pipeline failed: {failure_line(outcome['error'])}"
                             ) from outcome["error"]
    return outcome["result"]
