"""Tests of `python -m cmlm_tf.import_model`: a folder that is not there is one line, exit
2, and nothing is written. (The imports themselves: tests/model_import/test_importer.py.)"""

from cmlm_tf.commands import import_model


def test_a_missing_model_folder_is_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    assert import_model.main(["--import_dir", str(tmp_path / "nope"),
                              "--output_dir", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {tmp_path / 'nope'}: model folder not found"]
    assert not out.exists()
