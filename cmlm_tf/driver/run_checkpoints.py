"""A training run's checkpoints (`MODEL_DIR/ckpt-N`): which is the latest, which are
readable, and what an interrupted write left behind.

- `latest_checkpoint`: the run's latest checkpoint, one answer for the driver, the restore and
  the export: the newest on disk whose files are whole, recorded in TensorFlow's
  `checkpoint` state or not.
- `recover_latest_checkpoint`: before resuming, the newest checkpoint is read in full; an
  unreadable one (a truncated data file after a crash, say) is moved to `corrupt/`, never
  deleted, and the run resumes from the newest intact one, with a warning naming what was
  skipped.
- `remove_temp_checkpoints`: the `ckpt-N_temp` folders an interrupted checkpoint write
  leaves behind.
- `checkpoint_files`, `checkpoint_problem`, `checkpoint_step`: a checkpoint's files, whether
  it reads, and its step.
"""

import os
import shutil
from typing import List, Optional

from absl import logging

from cmlm_tf.files.locks import is_local

# The name of a run's checkpoints (`ckpt-<step>`), as Model Garden's trainer saves them.
CHECKPOINT_STEM = "ckpt"
CORRUPT_DIR = "corrupt"


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




def checkpoint_files(prefix: str) -> List[str]:
    """The index and data files of the local checkpoint at `prefix`, sorted (FileNotFoundError
    when its folder is missing)."""
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
        files = checkpoint_files(prefix)
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
    from cmlm_tf.runtime import internals  # TensorFlow: the commands check their flags first

    stamps = {} if state is None else dict(zip(
        (os.path.basename(p) for p in state.all_model_checkpoint_paths),
        state.all_model_checkpoint_timestamps))
    names = list(dict.fromkeys(os.path.basename(p) for p in kept))
    # TensorFlow takes relative entries as relative to the working directory and rewrites
    # them against a relative `save_dir`: hand it paths under `model_dir` as given.
    paths = [os.path.join(model_dir, name) for name in names]
    internals.write_checkpoint_state(
        model_dir, paths, [stamps[n] for n in names] if all(n in stamps for n in names) else None,
        None if state is None else state.last_preserved_timestamp)


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
