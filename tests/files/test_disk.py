"""cmlm_tf.files.disk: full disks named in one line, outputs renamed into place or not at all."""

import errno
import os

import pytest
import tensorflow as tf

from cmlm_tf.commands import common
from cmlm_tf.files import disk


def test_disk_full_error_names_the_file_and_the_free_space(tmp_path):
    error = disk.DiskFullError(str(tmp_path / "out.tsv"))
    assert error.errno == errno.ENOSPC
    line = common.one_line(error)
    assert line.startswith(f"{tmp_path / 'out.tsv'}: no space left on device")
    assert "MiB free there" in line
    assert common.is_user_error(error)


def test_tensorflow_disk_full_is_translated(tmp_path):
    with pytest.raises(disk.DiskFullError) as caught:
        with disk.reporting_disk_full(str(tmp_path / "ckpt-3")):
            raise tf.errors.ResourceExhaustedError(
                None, None, "ckpt-3_temp/part-00000; No space left on device [Op:SaveV2]")
    assert str(tmp_path / "ckpt-3") in str(caught.value)
    assert "ResourceExhaustedError" in str(caught.value)


def test_other_errors_pass_through(tmp_path):
    with pytest.raises(PermissionError):
        with disk.reporting_disk_full(str(tmp_path)):
            raise PermissionError(errno.EACCES, "denied")


def test_atomic_output_keeps_the_old_file_on_a_full_disk(tmp_path):
    target = tmp_path / "mined.tsv"
    target.write_text("old\n", encoding="utf-8")
    with pytest.raises(disk.DiskFullError) as caught:
        with disk.atomic_output(str(target)) as temp:
            with open(temp, "w", encoding="utf-8") as f:
                f.write("new, partial")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert str(target) in str(caught.value)
    assert target.read_text(encoding="utf-8") == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["mined.tsv"]


def test_atomic_output_renames_with_the_umask_mode(tmp_path):
    target = tmp_path / "out.txt"
    old_umask = os.umask(0o022)
    try:
        with disk.atomic_output(str(target)) as temp:
            with open(temp, "w", encoding="utf-8") as f:
                f.write("done\n")
    finally:
        os.umask(old_umask)
    assert target.read_text(encoding="utf-8") == "done\n"
    assert (target.stat().st_mode & 0o777) == 0o644
    assert sorted(os.listdir(tmp_path)) == ["out.txt"]
