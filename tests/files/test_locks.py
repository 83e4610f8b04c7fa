"""Locks on local folders (`cmlm_tf.files.locks`)."""

import fcntl
import os
import subprocess
import sys

import pytest

from cmlm_tf.files import locks


def _locked_by_someone_else(folder) -> bool:
    """Whether a second descriptor of `folder` fails to take the flock without waiting."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)
    return False


@pytest.mark.parametrize("lock", [locks.folder_lock, locks.folder_guard])
def test_a_folder_is_locked_inside_the_block_only_and_no_file_is_left(tmp_path, lock):
    with lock(str(tmp_path)):
        assert _locked_by_someone_else(tmp_path)
    assert not _locked_by_someone_else(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_guard_of_a_folder_that_cannot_be_opened_runs_its_block_unguarded(tmp_path):
    ran = []
    with locks.folder_guard(str(tmp_path / "absent")):
        ran.append(True)
    assert ran == [True]


def test_a_finished_process_is_not_alive_and_this_one_is():
    child = subprocess.Popen([sys.executable, "--version"], stdout=subprocess.DEVNULL)
    child.wait()  # reaped: its pid names no process now
    assert not locks.pid_alive(child.pid)
    assert locks.pid_alive(os.getpid())


def test_remote_urls_are_not_local():
    assert locks.is_local("runs/x") and locks.is_local("/tmp/x")
    assert not locks.is_local("gs://bucket/runs/x")
