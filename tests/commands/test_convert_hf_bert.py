"""Tests of `python -m cmlm_tf.convert_hf_bert`: its one-line error."""

from cmlm_tf.commands import convert_hf_bert


def test_converter_cli_reports_missing_folder(tmp_path, capsys):
    assert convert_hf_bert.main(["--hf_dir", str(tmp_path / "nope"),
                                 "--output_dir", str(tmp_path / "out")]) == 2
    assert "nope" in capsys.readouterr().err
