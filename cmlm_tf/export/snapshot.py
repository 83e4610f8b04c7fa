"""The checkpoint an export reads, held still: its files hard-linked (or copied) into the
export's work folder, so a trainer that prunes it meanwhile cannot take them, and hashed
(`checkpoint_sha256`), so the metadata names exactly the weights exported."""

import errno
import hashlib
import os
import shutil
from typing import Callable, Optional, Tuple

from cmlm_tf.driver import run_checkpoints
from cmlm_tf.export.source import ExportSource
from cmlm_tf.files import disk, locks


def checkpoint_files(prefix: str) -> list:
    """The index and data files of the checkpoint at `prefix`, sorted (none: []); local or
    remote (`gs://...`)."""
    import tensorflow as tf

    if locks.is_local(prefix):
        try:
            return run_checkpoints.checkpoint_files(os.path.abspath(prefix))
        except FileNotFoundError:
            return []
    return sorted(tf.io.gfile.glob(prefix + ".index") + tf.io.gfile.glob(prefix + ".data-*"))


def checkpoint_sha256(prefix: str) -> str:
    """SHA-256 over a checkpoint's index and data files, in name order.

    Raises FileNotFoundError when the checkpoint has no files: the hash of nothing would
    name no checkpoint.
    """
    import tensorflow as tf

    files = checkpoint_files(prefix)
    if not files:
        raise FileNotFoundError(f"{prefix}: no checkpoint files to hash ({prefix}.index, "
                                f"{prefix}.data-*)")
    digest = hashlib.sha256()
    for path in files:
        digest.update(os.path.basename(path).encode("utf-8"))
        with tf.io.gfile.GFile(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def snapshot_checkpoint(prefix: str, folder: str) -> str:
    """Hard links (or, across filesystems, copies) the checkpoint's files into `folder` and
    returns the snapshot's prefix: a trainer that prunes `prefix` meanwhile cannot take the
    files the export reads and hashes.

    Raises FileNotFoundError when the index or a data shard is gone (pruned).
    """
    import tensorflow as tf

    if "://" not in prefix:
        prefix = os.path.abspath(prefix)
    files = checkpoint_files(prefix)
    shards = [path for path in files if ".data-" in os.path.basename(path)]
    # Data files are named `<prefix>.data-00000-of-00002`: every shard must be there.
    expected = {int(path.rsplit("-of-", 1)[-1]) for path in shards if "-of-" in path}
    if prefix + ".index" not in files or not shards or (expected
                                                          and expected != {len(shards)}):
        raise FileNotFoundError(f"{prefix}: the checkpoint's files are gone or incomplete")
    tf.io.gfile.makedirs(folder)
    for path in files:
        target = os.path.join(folder, os.path.basename(path))
        try:
            os.link(path, target)
        except OSError as error:
            if error.errno == errno.ENOENT:
                raise FileNotFoundError(f"{path}: removed while the export read it") from None
            with disk.reporting_disk_full(target):  # another filesystem (or a bucket)
                try:
                    tf.io.gfile.copy(path, target, overwrite=True)
                except tf.errors.NotFoundError:
                    raise FileNotFoundError(
                        f"{path}: removed while the export read it") from None
    return os.path.join(folder, os.path.basename(prefix))


def snapshot_source(source: ExportSource, folder: str,
                    again: Optional[Callable[[], ExportSource]]) -> Tuple[ExportSource, str]:
    """`source` with its checkpoint snapshotted into `folder`, and the checkpoint's own
    prefix; when the checkpoint was pruned first, the latest is resolved (`again()`) and
    snapshotted once more, else one error."""
    for attempt in range(2):
        try:
            original = source.checkpoint
            source.checkpoint = snapshot_checkpoint(original, folder)
            return source, original
        except FileNotFoundError:
            shutil.rmtree(folder, ignore_errors=True)
            if attempt or again is None:
                raise ValueError(
                    f"{source.checkpoint}: the checkpoint's files were removed while the export "
                    "read them (a trainer pruning old checkpoints?); export again, or pass "
                    "--checkpoint naming one the trainer keeps") from None
            source = again()
    raise AssertionError("unreachable")
