"""Folders published whole (cmlm_tf/files/staged_folder.py): staged beside the target, renamed
into place, an interrupted overwrite restored, and the debris of dead writers removed."""

import json
import os
import socket

import pytest

from cmlm_tf.files import staged_folder


def _staged(target, text):
    folder = staged_folder.owned_tempdir(str(target))
    with open(os.path.join(folder, "file.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    return folder


def test_a_staged_folder_replaces_the_target_and_loses_its_owner_file(tmp_path):
    target = tmp_path / "out"
    first = _staged(target, "first")
    assert os.path.basename(first).startswith("out.tmp-")
    with open(os.path.join(first, staged_folder.OWNER_FILE), encoding="utf-8") as f:
        assert json.load(f)["pid"] == os.getpid()
    staged_folder.replace_dir(first, str(target))
    assert (target / "file.txt").read_text() == "first"
    assert not (target / staged_folder.OWNER_FILE).exists()

    staged_folder.replace_dir(_staged(target, "second"), str(target))
    assert (target / "file.txt").read_text() == "second"
    assert sorted(os.listdir(tmp_path)) == ["out"]  # the old folder is gone too

    with pytest.raises(FileExistsError, match="--overwrite"):
        staged_folder.replace_dir(_staged(target, "third"), str(target), overwrite=False)
    assert (target / "file.txt").read_text() == "second"


def _as_left_by_a_dead_writer(folder):
    with open(os.path.join(folder, staged_folder.OWNER_FILE), "w", encoding="utf-8") as f:
        json.dump({"pid": 2 ** 22 + 1, "host": socket.gethostname()}, f)


def test_an_overwrite_killed_between_its_renames_is_restored(tmp_path, capsys):
    target = tmp_path / "out"
    staged_folder.replace_dir(_staged(target, "old"), str(target))
    # Killed after moving the old folder aside, before the new one was renamed into place.
    old = staged_folder.owned_tempdir(str(target), ".old-")
    os.rename(target, os.path.join(old, "export"))
    new = _staged(target, "new")
    _as_left_by_a_dead_writer(old)
    _as_left_by_a_dead_writer(new)

    removed = staged_folder.remove_stale(str(target))
    assert (target / "file.txt").read_text() == "old"
    assert sorted(removed) == sorted([os.path.basename(old), os.path.basename(new)])
    assert sorted(os.listdir(tmp_path)) == ["out"]
    err = capsys.readouterr().err
    assert "restored" in err and "interrupted export" in err


def test_a_folder_being_written_by_a_live_process_is_kept(tmp_path):
    target = tmp_path / "out"
    live = _staged(target, "being written")
    assert staged_folder.stale_staging(str(target)) == []
    assert staged_folder.remove_stale(str(target)) == []
    assert os.path.isdir(live)
