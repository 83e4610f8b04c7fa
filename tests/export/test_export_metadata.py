"""The export's metadata file: reading it, and the serving model folder of each precision."""

import json

import pytest

from cmlm_tf.export import export_metadata


def test_each_precision_runs_its_own_folder_where_the_export_has_one(tmp_path):
    metadata = {"serving_models": {"float32": {"folder": "serving/1"},
                                   "bfloat16": {"folder": "serving_bf16/1"},
                                   "int8": {"folder": "serving_int8/1"}}}
    for precision, folder in (("float32", "serving"), ("bfloat16", "serving_bf16"),
                              ("int8", "serving_int8")):
        assert export_metadata.serving_model_dir(str(tmp_path), metadata, precision) == str(
            tmp_path / folder / "1")


def test_exports_without_the_folders_run_serving_1_and_have_no_int8(tmp_path):
    """Exports made before `--bf16` and `--int8` (no `serving_models`) run bfloat16 from the
    functions of `serving/1`; int8 is refused with the flag that makes it."""
    assert export_metadata.serving_model_dir(str(tmp_path), {}, "bfloat16") == str(
        tmp_path / "serving" / "1")
    with pytest.raises(ValueError, match="no int8 model .*--int8"):
        export_metadata.serving_model_dir(str(tmp_path), {}, "int8")


def test_metadata_errors_name_the_file(tmp_path):
    (tmp_path / export_metadata.METADATA_FILE).write_text(json.dumps({"format_version": 1}))
    with pytest.raises(ValueError, match=r"cmlm_tf_export.json: format_version 1"):
        export_metadata.read_metadata(str(tmp_path))
    (tmp_path / export_metadata.METADATA_FILE).write_text("[")
    with pytest.raises(ValueError, match="cannot read export metadata"):
        export_metadata.read_metadata(str(tmp_path))
