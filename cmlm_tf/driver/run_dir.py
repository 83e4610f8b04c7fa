"""A training run's directory (`--model_dir`): one trainer at a time, its config and its
evaluation record; its checkpoints are `run_checkpoints.py`'s.

- `RunLock`: a lock file (`.cmlm_tf.lock`: pid, host, start time) held while a run trains;
  a second trainer on the same directory stops with one line. A lock whose process is gone
  (same host) is stale and taken over with a warning. Directories on remote filesystems
  (`gs://...`) are not locked.
- `write_params`: `params.yaml`, whole or not at all, with paths that survive a move.
- `record_evaluation`, `evaluated_step`: the step whose final evaluation finished.
"""

import datetime
import json
import logging as python_logging
import os
import socket
from typing import Optional

from absl import logging

from cmlm_tf.files import disk, locks

# What `python -m cmlm_tf.train --mode` does in the directory.
MODES = ("train", "eval", "train_and_eval")
LOCK_FILE = ".cmlm_tf.lock"
# Every log line of the training runs in the folder, in absl's full format.
LOG_FILE = "train.log"
# The step whose final evaluation finished, in a `train_and_eval` run.
EVALUATED_FILE = "evaluated.json"


class RunDirLocked(ValueError):
    """Another live process is training in this directory."""


class RunLock:
    """Holds `MODEL_DIR/.cmlm_tf.lock` from `acquire()` to `release()` (or the `with` block).

    Raises `RunDirLocked` naming the holder when another live process has it.

    Taking the lock, and taking over a stale one (its process is gone), happen under an
    exclusive `flock` of the run folder itself, which is never deleted: two processes that
    find the same stale lock take turns, so the second sees the first one's fresh lock and
    never removes it.
    """

    def __init__(self, model_dir: str):
        self.path = os.path.join(model_dir, LOCK_FILE)
        self.held = False

    def acquire(self) -> "RunLock":
        if not locks.is_local(self.path):
            return self
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with locks.folder_guard(os.path.dirname(self.path) or "."):
            return self._acquire()

    def _acquire(self) -> "RunLock":
        record = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": datetime.datetime.now(datetime.timezone.utc).isoformat(
                      timespec="seconds")}
        for _ in range(2):
            try:
                self._create(record)
            except FileExistsError:
                holder = self._holder()
                if holder is not None and not self._stale(holder):
                    raise RunDirLocked(
                        f"{os.path.dirname(self.path)}: a run is already training here (pid "
                        f"{holder.get('pid')} on {holder.get('host')}, since "
                        f"{holder.get('started')}); wait for it, use another --model_dir, or "
                        f"remove {self.path} if that process is gone") from None
                logging.warning("%s: removing a stale lock (%s)", self.path,
                                json.dumps(holder) if holder else "unreadable")
                try:
                    os.remove(self.path)
                except FileNotFoundError:
                    pass
                continue
            self.held = True
            return self
        raise RunDirLocked(f"{self.path}: could not take the lock")

    def _create(self, record: dict) -> None:
        """Creates the lock file holding `record`, whole or not at all.

        The record is written to a temporary file first and hard-linked to the lock's name
        (FileExistsError when another process holds it), so a full disk or a kill never
        leaves an empty lock. Where hard links are not supported, the lock is created
        exclusively and removed again if writing the record fails.
        """
        temp = f"{self.path}.tmp-{os.getpid()}"
        try:
            with disk.reporting_disk_full(self.path):
                with open(temp, "w", encoding="utf-8") as f:
                    json.dump(record, f)
                try:
                    os.link(temp, self.path)
                    return
                except FileExistsError:
                    raise
                except OSError:
                    pass  # no hard links here
                descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                try:
                    with os.fdopen(descriptor, "w", encoding="utf-8") as f:
                        json.dump(record, f)
                except BaseException:
                    os.remove(self.path)
                    raise
        finally:
            if os.path.exists(temp):
                os.remove(temp)

    def _holder(self) -> Optional[dict]:
        try:
            with open(self.path, encoding="utf-8") as f:
                holder = json.load(f)
            return holder if isinstance(holder, dict) else None
        except (OSError, ValueError):
            return None

    @staticmethod
    def _stale(holder: dict) -> bool:
        if holder.get("host") != socket.gethostname():
            return False  # cannot tell from here
        pid = holder.get("pid")
        return not isinstance(pid, int) or (pid != os.getpid() and not locks.pid_alive(pid))

    def release(self) -> None:
        if self.held:
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass
            self.held = False

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


PARAMS_FILE = "params.yaml"


def write_params(params, model_dir: str) -> str:
    """Writes the run's config to `MODEL_DIR/params.yaml` and returns its path.

    Files shipped with cmlm_tf are recorded as `cmlm_tf/...` (`config_files.bundled_paths_as_given`)
    and other paths as the user gave them, so the folder can move. The file is written under
    a temporary name and renamed: a full disk (one error naming the file) leaves the previous
    `params.yaml` as it was.
    """
    from official.modeling import hyperparams

    from cmlm_tf import config_files

    recorded = params.replace()  # an unlocked copy
    config_files.bundled_paths_as_given(recorded)
    path = os.path.join(model_dir, PARAMS_FILE)
    logging.info("Saving the experiment configuration to %s", path)
    if not locks.is_local(path):
        with disk.reporting_disk_full(path):
            hyperparams.save_params_dict_to_yaml(recorded, path)
        return path
    with disk.atomic_output(path) as temp:
        hyperparams.save_params_dict_to_yaml(recorded, temp)
    return path



def record_evaluation(model_dir: str, step: int) -> None:
    """Records that the final evaluation of `step` finished (`evaluated_step`)."""
    path = os.path.join(model_dir, EVALUATED_FILE)
    if not locks.is_local(model_dir):  # object stores write whole files
        import tensorflow as tf

        with tf.io.gfile.GFile(path, "w") as f:
            f.write(json.dumps({"step": int(step)}))
        return
    with disk.atomic_output(path) as temp:
        with open(temp, "w", encoding="utf-8") as f:
            json.dump({"step": int(step)}, f)


def evaluated_step(model_dir: str) -> Optional[int]:
    """The step whose final evaluation finished, or None (none did, or unknown)."""
    import tensorflow as tf

    try:
        with tf.io.gfile.GFile(os.path.join(model_dir, EVALUATED_FILE), "r") as f:
            return int(json.loads(f.read())["step"])
    except (tf.errors.OpError, OSError, ValueError, KeyError, TypeError):
        return None


class _QuietFileHandler(python_logging.FileHandler):
    """A log file that stops, silently, when it cannot be written (a full disk): the run
    it records goes on."""

    def handleError(self, record):
        self.setLevel(python_logging.CRITICAL + 1)


class log_file:  # noqa: N801 (used as a context manager, like open)
    """Inside the block, every log line also goes to `path` in absl's full format (time,
    thread, file and line), chatter included: the record of a run beside its checkpoints."""

    def __init__(self, path: Optional[str]):
        self.path = path
        self.handler = None

    def __enter__(self):
        if self.path:
            try:
                self.handler = _QuietFileHandler(self.path, encoding="utf-8")
            except OSError:  # no log file rather than no run (a full disk, say)
                return self
            self.handler.setFormatter(logging.PythonFormatter())
            python_logging.getLogger().addHandler(self.handler)
        return self

    def __exit__(self, *exc):
        if self.handler is not None:
            python_logging.getLogger().removeHandler(self.handler)
            self.handler.close()
        return False
