"""What an export reads (`cmlm_tf/export/source.py`): a missing folder or one that is
neither a training run nor an imported folder is one error naming it. (Imported folders,
relative and moved: tests/model_import/test_import_folder.py.)"""

import pytest

from cmlm_tf.export import export_lib, source


def test_export_errors_name_the_bad_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        export_lib.export(str(tmp_path / "e"), model_dir=str(tmp_path / "nowhere"))
    empty = tmp_path / "empty_run"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="params.yaml"):
        export_lib.export(str(tmp_path / "e"), model_dir=str(empty))
    assert not (tmp_path / "e").exists()


def test_a_training_run_is_described_by_names_not_paths(tiny_run_dir):
    found = source.resolve_source(model_dir=str(tiny_run_dir))
    assert found.checkpoint == str(tiny_run_dir / "ckpt-1")
    assert found.seq_length == 16  # the run's task.train_data.seq_length
    assert found.description == {"kind": "training_run", "model_dir": tiny_run_dir.name,
                                 "checkpoint": "ckpt-1"}


def test_exactly_one_source_is_needed(tmp_path):
    with pytest.raises(ValueError, match="pass exactly one of --model_dir and --hf_dir"):
        source.resolve_source()
    with pytest.raises(ValueError, match="pass exactly one of --model_dir and --hf_dir"):
        source.resolve_source(model_dir=str(tmp_path), hf_dir=str(tmp_path))
