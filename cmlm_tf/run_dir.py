"""A training run's directory (`--model_dir`): one trainer at a time, readable checkpoints,
no debris from interrupted writes.

- `RunLock`: a lock file (`.cmlm_tf.lock`: pid, host, start time) held while a run trains;
  a second trainer on the same directory stops with one line. A lock whose process is gone
  (same host) is stale and taken over with a warning. Directories on remote filesystems
  (`gs://...`) are not locked.
- `latest_checkpoint`: the run's latest checkpoint, one answer for the driver, the restore and
  the export: the newest on disk whose files are whole, recorded in TensorFlow's
  `checkpoint` state or not.
- `recover_latest_checkpoint`: before resuming, the newest checkpoint is read in full; an
  unreadable one (a truncated data file after a crash, say) is moved to `corrupt/`, never
  deleted, and the run resumes from the newest intact one, with a warning naming what was
  skipped.
- `remove_temp_checkpoints`: the `ckpt-N_temp` folders an interrupted checkpoint write
  leaves behind.
- `write_params`: `params.yaml`, whole or not at all, with paths that survive a move.
- `folder_lock`: an exclusive lock on a folder, for writers that share it (exports that swap
  one OUT, experiment runners that write one seed's initialisation).
"""

import contextlib
import datetime
import json
import os
import shutil
import socket
from typing import List, Optional

from absl import logging

LOCK_FILE = ".cmlm_tf.lock"
# Every log line of the training runs in the folder, in absl's full format.
LOG_FILE = "train.log"
# The step whose final evaluation finished, in a `train_and_eval` run.
EVALUATED_FILE = "evaluated.json"
# The name of a run's checkpoints (`ckpt-<step>`), as Model Garden's trainer saves them.
CHECKPOINT_STEM = "ckpt"
CORRUPT_DIR = "corrupt"


class RunDirLocked(ValueError):
    """Another live process is training in this directory."""


def is_local(path: str) -> bool:
    return "://" not in path


@contextlib.contextmanager
def folder_lock(folder: str):
    """Holds an exclusive lock on the local folder `folder` (no file is left behind): the
    processes that take it for one folder run their blocks one at a time."""
    import fcntl

    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _folder_guard(folder: str):
    """An exclusive `flock` of `folder` for the block (where the platform has none, or the
    file system refuses it, the block runs unguarded)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(descriptor)  # closing the last descriptor releases the flock


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
        if not is_local(self.path):
            return self
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with _folder_guard(os.path.dirname(self.path) or "."):
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
        from cmlm_tf import disk

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


PARAMS_FILE = "params.yaml"


def write_params(params, model_dir: str) -> str:
    """Writes the run's config to `MODEL_DIR/params.yaml` and returns its path.

    Files shipped with cmlm_tf are recorded as `cmlm_tf/...` (`configs.bundled_paths_as_given`)
    and other paths as the user gave them, so the folder can move. The file is written under
    a temporary name and renamed: a full disk (one error naming the file) leaves the previous
    `params.yaml` as it was.
    """
    from absl import logging
    from official.modeling import hyperparams

    from cmlm_tf import configs, disk

    recorded = params.replace()  # an unlocked copy
    configs.bundled_paths_as_given(recorded)
    path = os.path.join(model_dir, PARAMS_FILE)
    logging.info("Saving the experiment configuration to %s", path)
    if not is_local(path):
        with disk.reporting_disk_full(path):
            hyperparams.save_params_dict_to_yaml(recorded, path)
        return path
    with disk.atomic_output(path) as temp:
        hyperparams.save_params_dict_to_yaml(recorded, temp)
    return path


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


def _listed_checkpoints(model_dir: str):
    """(state, prefixes): the directory's `checkpoint` state (None without one) and every
    checkpoint it lists or that is on disk under the same name (`ckpt-N` when there is no
    state), oldest first. A checkpoint whose files were written but whose recording in
    the state was cut short (a kill, or the first checkpoint of a run) counts."""
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(model_dir)
    listed = []
    stem = CHECKPOINT_STEM
    if state is not None and state.model_checkpoint_path:
        listed = list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]
        if state.model_checkpoint_path not in listed:
            listed.append(state.model_checkpoint_path)
        # `get_checkpoint_state` has already joined relative entries to `model_dir`
        # (relative or absolute, as given): joining again would name missing files.
        listed = [os.path.normpath(p) for p in listed]
        stem = os.path.basename(state.model_checkpoint_path).rsplit("-", 1)[0]
    on_disk = [os.path.normpath(os.path.join(model_dir, name[:-len(".index")]))
               for name in os.listdir(model_dir)
               if name.startswith(stem + "-") and name.endswith(".index")
               and name[len(stem) + 1:-len(".index")].isdigit()]
    return state, sorted(set(listed) | set(on_disk), key=_step_and_path)


def latest_checkpoint(model_dir: str) -> Optional[str]:
    """The run's latest checkpoint, the one answer of the driver, the restore and the
    export: the newest whose files are all there (its `.index` is written last), whether
    or not the `checkpoint` state recorded it. Changes nothing on disk (a trainer may be
    running); `recover_latest_checkpoint` also sets unreadable ones aside."""
    import tensorflow as tf

    if not is_local(model_dir):
        return tf.train.latest_checkpoint(model_dir)
    if not os.path.isdir(model_dir):
        return None
    _, listed = _listed_checkpoints(model_dir)
    present = [prefix for prefix in listed if os.path.exists(prefix + ".index")]
    return present[-1] if present else None


def recover_latest_checkpoint(model_dir: str) -> Optional[str]:
    """The newest readable checkpoint of the run, after setting unreadable newer ones aside.

    Each unreadable checkpoint's files move to `MODEL_DIR/corrupt/`, and the directory's
    `checkpoint` state then names the newest intact one, so the trainer resumes from it; a
    newer checkpoint than the state names (its recording was cut short) is recorded.
    Returns its prefix, or None for a run with no checkpoint. Raises ValueError when the run
    has checkpoints but none is readable (they are moved aside, so the next start begins
    afresh).
    """
    import tensorflow as tf

    if not is_local(model_dir):
        return tf.train.latest_checkpoint(model_dir)
    if not os.path.isdir(model_dir):
        return None
    state, listed = _listed_checkpoints(model_dir)
    if not listed:
        return None
    recorded = os.path.normpath(state.model_checkpoint_path) if state is not None else None
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
            elif prefix != recorded:
                _write_state(model_dir, listed, state)
                logging.warning("%s: %s was saved but not recorded as the latest checkpoint "
                                "(the run stopped while recording it); recorded it now",
                                model_dir, os.path.basename(prefix))
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
    if os.path.exists(os.path.join(model_dir, "checkpoint")):
        os.replace(os.path.join(model_dir, "checkpoint"),
                   os.path.join(model_dir, CORRUPT_DIR, "checkpoint"))
    if not skipped:
        return None
    raise ValueError(f"{model_dir}: no readable checkpoint ({', '.join(skipped)} moved to "
                     f"{CORRUPT_DIR}/); the next start trains from the beginning")


def _step_and_path(prefix: str):
    """Sort key of a checkpoint prefix: its step (-1 when it has none), then the path."""
    step = prefix.rsplit("-", 1)[-1]
    return (int(step) if step.isdigit() else -1, prefix)


def _write_state(model_dir: str, kept: List[str], state) -> None:
    """Rewrites `MODEL_DIR/checkpoint` to list `kept` (oldest first), keeping their
    timestamps, so `tf.train.CheckpointManager` resumes from and later prunes them.
    Entries are written relative to `MODEL_DIR`, so the folder can be moved."""
    from tensorflow.python.checkpoint import checkpoint_management

    stamps = {} if state is None else dict(zip(
        (os.path.basename(p) for p in state.all_model_checkpoint_paths),
        state.all_model_checkpoint_timestamps))
    names = list(dict.fromkeys(os.path.basename(p) for p in kept))
    # TensorFlow takes relative entries as relative to the working directory and rewrites
    # them against a relative `save_dir`: hand it paths under `model_dir` as given.
    paths = [os.path.join(model_dir, name) for name in names]
    checkpoint_management.update_checkpoint_state_internal(
        save_dir=model_dir, model_checkpoint_path=paths[-1],
        all_model_checkpoint_paths=paths, save_relative_paths=True,
        all_model_checkpoint_timestamps=[stamps[n] for n in names] if all(
            n in stamps for n in names) else None,
        last_preserved_timestamp=None if state is None else state.last_preserved_timestamp)


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


def record_evaluation(model_dir: str, step: int) -> None:
    """Records that the final evaluation of `step` finished (`evaluated_step`)."""
    from cmlm_tf import disk

    path = os.path.join(model_dir, EVALUATED_FILE)
    if not is_local(model_dir):  # object stores write whole files
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
