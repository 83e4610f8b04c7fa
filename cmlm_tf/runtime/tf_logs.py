"""TensorFlow's C++ log lines: the log level, set before TensorFlow is imported, and a filter
of what native code and child processes write to stderr. The package runs
`quiet_tensorflow_logs` at its own import (`cmlm_tf/__init__.py`), so this module imports
nothing of the package: TensorFlow's start-up lines ("failed call to cuInit", oneDNN
notices) are noise for a user of the Python API as for the commands."""

import contextlib
import os
import re
import sys
import threading
from typing import BinaryIO, Callable, Iterator, Optional


def quiet_tensorflow_logs() -> None:
    """Sets TensorFlow's C++ log level before TensorFlow is imported, unless the user did.

    Level 2 hides INFO and WARNING lines (oneDNN, CPU features, "Could not find cuda
    drivers"). On a machine without an NVIDIA driver, level 3: TensorFlow 2.20 logs a
    spurious ERROR, "failed call to cuInit", at start-up there (tensorflow/tensorflow#105022),
    and C++ errors that matter reach Python as exceptions. `TF_CPP_MIN_LOG_LEVEL=0` shows
    everything again.
    """
    if "TF_CPP_MIN_LOG_LEVEL" in os.environ:
        return
    has_nvidia_driver = os.path.exists("/proc/driver/nvidia/version") or \
        os.path.exists("/dev/nvidia0")
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2" if has_nvidia_driver else "3"


def min_log_level() -> int:
    """`TF_CPP_MIN_LOG_LEVEL` (0 when unset or not a number): 1 hides INFO, 2 WARNING too, 3
    ERROR too."""
    try:
        return int(os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0"))
    except ValueError:
        return 0


# A C++ log line's severity, in absl's format (`W0000 00:00:17956.. 15949 file.cc:364] ...`)
# or TensorFlow's (`2026-11-25 21:46:12.260032: W tensorflow/...`).
_LOG_LINE = re.compile(rb"^(?:([IWEF])\d{4} \d\d:\d\d:|\d{4}-\d\d-\d\d [\d:.]+: ([IWEF]) )")
_ABSL_PREAMBLE = b"WARNING: All log messages before absl::InitializeLog() is called"
_SEVERITIES = {b"I": 0, b"W": 1, b"E": 2, b"F": 3}


def cpp_log_severity(line: bytes) -> Optional[int]:
    """The severity of a C++ log line (0 INFO .. 3 FATAL), or None for any other line."""
    if line.startswith(_ABSL_PREAMBLE):
        return 1
    match = _LOG_LINE.match(line)
    return _SEVERITIES[match.group(1) or match.group(2)] if match else None


@contextlib.contextmanager
def route_stderr(keep: Callable[[bytes], bool], rest: Optional[BinaryIO] = None,
                 wait: float = 10.0) -> Iterator[None]:
    """Inside the block, the lines written to file descriptor 2 (by Python, native code, or
    a child process started meanwhile) reach stderr only when `keep(line)`; the others go
    to `rest` (a binary file), or nowhere.

    File descriptor 2 goes through a pipe whose reader thread forwards each line as it
    comes. At the end the reader is given `wait` seconds to see the pipe's end (a child
    still running holds it open), then left to finish on its own.
    """
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    saved = os.dup(2)

    def forward():
        with os.fdopen(read_end, "rb") as lines:
            for line in lines:
                try:
                    if keep(line):
                        os.write(saved, line)
                    elif rest is not None:
                        rest.write(line)
                        rest.flush()
                except (OSError, ValueError):  # stderr closed, a full disk: keep draining,
                    pass                       # or the writers block

    reader = threading.Thread(target=forward, name="stderr-lines", daemon=True)
    reader.start()
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # closes this process's last write end
        reader.join(timeout=wait)
        if not reader.is_alive():
            os.close(saved)


@contextlib.contextmanager
def filtered_cpp_logs(min_level: Optional[int] = None) -> Iterator[None]:
    """Drops the C++ log lines below `min_level` (default: `TF_CPP_MIN_LOG_LEVEL`) that the
    process writes to stderr meanwhile; every other line stays, in order.

    Some of TensorFlow's libraries (the TFLite converter, XLA's "Compiled cluster using XLA!")
    log through absl, which `TF_CPP_MIN_LOG_LEVEL` does not reach.
    """
    level = min_log_level() if min_level is None else min_level
    if level <= 0:
        yield
        return

    def keep(line: bytes) -> bool:
        severity = cpp_log_severity(line)
        return severity is None or severity >= level

    with route_stderr(keep):
        yield
