"""Local and remote folders: remote paths joined with `/`, a folder's files and its
`OUT<infix>` siblings, renamed and deleted whole."""

from cmlm_tf.scale import folders


def test_remote_paths_are_joined_with_a_slash():
    assert folders.is_remote("gs://bucket/out") and not folders.is_remote("/tmp/out")
    assert folders.join("gs://bucket/out/", "part.parquet") == "gs://bucket/out/part.parquet"
    assert folders.clean("gs://bucket/out/") == "gs://bucket/out"


def test_siblings_files_rename_and_delete(tmp_path):
    out = tmp_path / "out"
    staged = tmp_path / "out.staging-1"
    staged.mkdir()
    (staged / "b.txt").write_text("b")
    (staged / "a.txt").write_text("a")
    (tmp_path / "other.staging-2").mkdir()
    assert folders.siblings(str(out), ".staging-") == [str(staged)]
    assert folders.files(str(staged)) == ["a.txt", "b.txt"]
    assert folders.files(str(out)) == []  # no such folder
    folders.rename_folder(str(staged), str(out), "a.txt")
    assert folders.exists(str(out)) and not folders.exists(str(staged))
    with folders.open_file(str(out / "a.txt")) as f:
        assert f.read() == b"a"
    folders.delete_folder(str(out))
    folders.delete_folder(str(out))  # nothing left: no error
    assert not out.exists()
