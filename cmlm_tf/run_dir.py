"""A training run's directory (`--model_dir`): one trainer at a time, readable checkpoints,
no debris from interrupted writes.

- `RunLock`: a lock file (`.cmlm_tf.lock`: pid, host, start time) held while a run trains;
  a second trainer on the same directory stops with one line. A lock whose process is gone
  (same host) is stale and taken over with a warning. Directories on remote filesystems
  (`gs://...`) are not locked.
- `recover_latest_checkpoint`: before resuming, the newest checkpoint is read in full; an
  unreadable one (a truncated data file after a crash, say) is moved to `corrupt/`, never
  deleted, and the run resumes from the newest intact one, with a warning naming what was
  skipped.
- `remove_temp_checkpoints`: the `ckpt-N_temp` folders an interrupted checkpoint write
  leaves behind.
"""

import datetime
import json
import os
import shutil
import socket
from typing import List, Optional

from absl import logging

LOCK_FILE = ".cmlm_tf.lock"
CORRUPT_DIR = "corrupt"


class RunDirLocked(ValueError):
    """Another live process is training in this directory."""


def is_local(path: str) -> bool:
    return "://" not in path


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """Holds `MODEL_DIR/.cmlm_tf.lock` from `acquire()` to `release()` (or the `with` block).

    Raises `RunDirLocked` naming the holder when another live process has it.
    """

    def __init__(self, model_dir: str):
        self.path = os.path.join(model_dir, LOCK_FILE)
        self.held = False

    def acquire(self) -> "RunLock":
        if not is_local(self.path):
            return self
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        record = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": datetime.datetime.now(datetime.timezone.utc).isoformat(
                      timespec="seconds")}
        for _ in range(2):
            try:
                descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
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
            with os.fdopen(descriptor, "w", encoding="utf-8") as f:
                json.dump(record, f)
            self.held = True
            return self
        raise RunDirLocked(f"{self.path}: could not take the lock")

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
        return not isinstance(pid, int) or (pid != os.getpid() and not pid_alive(pid))

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


def remove_temp_checkpoints(model_dir: str) -> List[str]:
    """Removes the `<prefix>_temp*` folders of checkpoint writes that never finished."""
    if not is_local(model_dir) or not os.path.isdir(model_dir):
        return []
    removed = []
    for name in sorted(os.listdir(model_dir)):
        path = os.path.join(model_dir, name)
        if "_temp" in name and os.path.isdir(path) and name.split("_temp")[0].startswith("ckpt"):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(name)
    if removed:
        logging.warning("%s: removed %s left by an interrupted checkpoint write", model_dir,
                        ", ".join(removed))
    return removed


def checkpoint_problem(prefix: str) -> Optional[str]:
    """None when every tensor of the checkpoint at `prefix` can be read, else what failed."""
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in reader.get_variable_to_dtype_map():
            reader.get_tensor(name)
    except Exception as error:  # noqa: BLE001 (any failure to read means unreadable)
        text = " ".join(str(error).split())[:200] or type(error).__name__
        return f"{type(error).__name__}: {text}"
    return None


def _checkpoint_files(prefix: str) -> List[str]:
    directory, base = os.path.split(prefix)
    return sorted(os.path.join(directory, name) for name in os.listdir(directory)
                  if name == base + ".index" or name.startswith(base + ".data-"))


def recover_latest_checkpoint(model_dir: str) -> Optional[str]:
    """The newest readable checkpoint of the run, after setting unreadable newer ones aside.

    Each unreadable checkpoint's files move to `MODEL_DIR/corrupt/` and the directory's
    `checkpoint` state then names the newest intact one, so the trainer resumes from it.
    Returns its prefix, or None for a run with no checkpoint. Raises ValueError when the run
    has checkpoints but none is readable (they are moved aside, so the next start begins
    afresh).
    """
    import tensorflow as tf

    if not is_local(model_dir):
        return tf.train.latest_checkpoint(model_dir)
    state = tf.train.get_checkpoint_state(model_dir)
    if state is None or not state.model_checkpoint_path:
        return None
    listed = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
    if state.model_checkpoint_path not in listed:
        listed.append(state.model_checkpoint_path)
    listed = [p if os.path.isabs(p) else os.path.join(model_dir, p) for p in listed]
    # Checkpoints of the same name on disk count too (the state may have lost track).
    stem = os.path.basename(state.model_checkpoint_path).rsplit("-", 1)[0]
    on_disk = [os.path.join(model_dir, name[:-len(".index")]) for name in os.listdir(model_dir)
               if name.startswith(stem + "-") and name.endswith(".index")
               and name[len(stem) + 1:-len(".index")].isdigit()]
    listed = sorted(set(listed) | set(on_disk),
                    key=lambda p: int(p.rsplit("-", 1)[-1]) if p.rsplit("-", 1)[-1].isdigit()
                    else -1)
    skipped, missing = [], []
    while listed:
        prefix = listed[-1]
        if not os.path.exists(prefix + ".index"):
            missing.append(os.path.basename(listed.pop()))
            continue
        problem = checkpoint_problem(prefix)
        if problem is None:
            if skipped or missing:
                _write_state(model_dir, listed, state)
                logging.warning("%s: resuming from %s; skipped %s", model_dir,
                                os.path.basename(prefix), ", ".join(
                                    [f"unreadable {name} (moved to {CORRUPT_DIR}/)"
                                     for name in skipped] +
                                    [f"missing {name}" for name in missing]))
            return prefix
        corrupt = os.path.join(model_dir, CORRUPT_DIR)
        os.makedirs(corrupt, exist_ok=True)
        files = _checkpoint_files(prefix)
        for path in files:
            os.replace(path, os.path.join(corrupt, os.path.basename(path)))
        logging.warning("%s is unreadable (%s); its files %s moved to %s", prefix, problem,
                        ", ".join(os.path.basename(f) for f in files), corrupt)
        skipped.append(os.path.basename(prefix))
        listed.pop()
    os.makedirs(os.path.join(model_dir, CORRUPT_DIR), exist_ok=True)
    os.replace(os.path.join(model_dir, "checkpoint"),
               os.path.join(model_dir, CORRUPT_DIR, "checkpoint"))
    if not skipped:
        return None
    raise ValueError(f"{model_dir}: no readable checkpoint ({', '.join(skipped)} moved to "
                     f"{CORRUPT_DIR}/); the next start trains from the beginning")


def _write_state(model_dir: str, kept: List[str], state) -> None:
    """Rewrites `MODEL_DIR/checkpoint` to list `kept` (oldest first), keeping their
    timestamps, so `tf.train.CheckpointManager` resumes from and later prunes them."""
    from tensorflow.python.checkpoint import checkpoint_management

    stamps = dict(zip((os.path.basename(p) for p in state.all_model_checkpoint_paths),
                      state.all_model_checkpoint_timestamps))
    names = [os.path.basename(p) for p in kept]
    checkpoint_management.update_checkpoint_state_internal(
        save_dir=model_dir, model_checkpoint_path=names[-1],
        all_model_checkpoint_paths=names, save_relative_paths=True,
        all_model_checkpoint_timestamps=[stamps[n] for n in names] if all(
            n in stamps for n in names) else None,
        last_preserved_timestamp=state.last_preserved_timestamp)


def checkpoint_step(prefix: Optional[str]) -> int:
    """The global step a checkpoint holds (0 for None)."""
    if prefix is None:
        return 0
    import tensorflow as tf

    reader = tf.train.load_checkpoint(prefix)
    for name in reader.get_variable_to_dtype_map():
        if name.startswith("global_step"):
            return int(reader.get_tensor(name))
    return int(prefix.rsplit("-", 1)[-1]) if prefix.rsplit("-", 1)[-1].isdigit() else 0
