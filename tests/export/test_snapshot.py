"""The checkpoint an export reads, held still (`cmlm_tf/export/snapshot.py`): a trainer
pruning it while the export runs, once, twice or continually, and its hash."""

import json
import os
import shutil
import threading
import time

import pytest

from cmlm_tf.commands import export as export_cli
from cmlm_tf.export import export_lib, snapshot
from cmlm_tf.modeling import sentence_encoder
from tests.conftest import one_error_line


def _copy_run(tiny_run_dir, folder):
    shutil.copytree(tiny_run_dir, folder)
    return folder


def _clone_checkpoint(run, source, step):
    """`ckpt-<step>` with the files of `source`, named in the run's `checkpoint` state, as a
    trainer writes one; returns its prefix."""
    prefix = str(run / f"ckpt-{step}")
    for path in snapshot.checkpoint_files(str(source)):
        suffix = os.path.basename(path)[len(os.path.basename(str(source))):]
        shutil.copyfile(path, prefix + ".tmp")
        os.replace(prefix + ".tmp", prefix + suffix)
    state = run / "checkpoint.tmp"
    state.write_text(f'model_checkpoint_path: "ckpt-{step}"\n', encoding="utf-8")
    os.replace(state, run / "checkpoint")
    return prefix


def _prune(prefix):
    for path in snapshot.checkpoint_files(prefix):
        os.remove(path)


def test_checkpoint_pruned_during_export_is_read_from_one_snapshot(tmp_path, tiny_run_dir,
                                                                   monkeypatch):
    run = _copy_run(tiny_run_dir, tmp_path / "run")
    _clone_checkpoint(run, run / "ckpt-1", 2)
    resolve, restore = sentence_encoder.resolve_checkpoint, sentence_encoder.restore_encoder
    hashes = {}

    def resolve_then_prune(path):
        """The trainer writes ckpt-3 and prunes ckpt-2 right after the export resolved it."""
        prefix = resolve(path)
        if prefix.endswith("ckpt-2"):
            hashes["ckpt-3"] = snapshot.checkpoint_sha256(_clone_checkpoint(run, prefix, 3))
            _prune(prefix)
        return prefix

    def prune_then_restore(encoder, path, **kwargs):
        """... and prunes ckpt-3 too, once the export holds it, before it is read."""
        _prune(str(run / "ckpt-3"))
        return restore(encoder, path, **kwargs)

    monkeypatch.setattr(sentence_encoder, "resolve_checkpoint", resolve_then_prune)
    monkeypatch.setattr(sentence_encoder, "restore_encoder", prune_then_restore)
    out = tmp_path / "out"
    export_lib.export(str(out), model_dir=str(run))
    meta = json.loads((out / "cmlm_tf_export.json").read_text())
    assert meta["source"]["checkpoint"] == "ckpt-3"
    assert meta["source"]["checkpoint_sha256"] == hashes["ckpt-3"]
    assert not os.path.exists(str(run / "ckpt-3.index"))
    assert sorted(os.listdir(tmp_path)) == ["out", "run"]


def test_checkpoint_pruned_twice_is_one_error(tmp_path, tiny_run_dir, monkeypatch, capsys):
    run = _copy_run(tiny_run_dir, tmp_path / "run")
    resolve = sentence_encoder.resolve_checkpoint

    def resolve_then_prune(path):
        """A trainer that writes the next checkpoint and prunes the one just resolved."""
        prefix = resolve(path)
        step = int(prefix.rsplit("-", 1)[1])
        _clone_checkpoint(run, prefix, step + 1)
        _prune(prefix)
        return prefix

    monkeypatch.setattr(sentence_encoder, "resolve_checkpoint", resolve_then_prune)
    rc = export_cli.main(["--model_dir", str(run), "--export_dir", str(tmp_path / "out")])
    line = one_error_line(capsys.readouterr().err)
    assert rc == 2 and f"{run / 'ckpt-2'}: the checkpoint's files were removed" in line
    assert sorted(os.listdir(tmp_path)) == ["run"]


def test_checkpoint_sha256_of_no_files_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint files"):
        snapshot.checkpoint_sha256(str(tmp_path / "ckpt-50"))


def test_export_against_a_live_trainer(tmp_path, tiny_run_dir, monkeypatch):
    """A trainer that writes a checkpoint every 100 ms and keeps only the newest: the export
    records a checkpoint and the hash of that checkpoint's files."""
    run = _copy_run(tiny_run_dir, tmp_path / "run")
    original = shutil.copytree(run, tmp_path / "original")
    hashes, stop = {}, threading.Event()

    def train():
        step, previous = 2, str(run / "ckpt-1")
        while not stop.is_set():
            prefix = _clone_checkpoint(run, original / "ckpt-1", step)
            hashes[f"ckpt-{step}"] = snapshot.checkpoint_sha256(prefix)
            _prune(previous)
            previous, step = prefix, step + 1
            time.sleep(0.1)

    real_sha256 = snapshot.checkpoint_sha256

    def sha256_after_two_more_checkpoints(prefix):
        # The export hashes its snapshot only once the trainer has written and pruned two
        # more checkpoints: the export overlaps them however fast the machine is.
        if threading.current_thread() is threading.main_thread():
            target = len(hashes) + 2
            while len(hashes) < target and trainer.is_alive():
                time.sleep(0.01)
        return real_sha256(prefix)

    monkeypatch.setattr(snapshot, "checkpoint_sha256", sha256_after_two_more_checkpoints)
    trainer = threading.Thread(target=train)
    trainer.start()
    try:
        while len(hashes) < 2 and trainer.is_alive():
            time.sleep(0.05)
        assert len(hashes) >= 2, "the training thread ended before its second checkpoint"
        export_lib.export(str(tmp_path / "out"), model_dir=str(run))
    finally:
        stop.set()
        trainer.join()
    meta = json.loads((tmp_path / "out" / "cmlm_tf_export.json").read_text())
    source = meta["source"]
    assert source["checkpoint_sha256"] == hashes[source["checkpoint"]]
    assert len(hashes) > 3  # checkpoints were written and pruned while the export ran
