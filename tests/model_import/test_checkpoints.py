"""Tests of `cmlm_tf.model_import.checkpoints`: which checkpoint beside `bert_config.json`
is read, and its family from its variable names. (Imports of both families end to end:
tests/model_import/test_importer.py.)"""

import pytest
import tensorflow as tf

from cmlm_tf.model_import import checkpoints


def _write(prefix, **variables):
    names = sorted(variables)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(variables[name]) for name in names])


def test_the_family_is_read_from_the_variable_names(tmp_path):
    _write(tmp_path / "tf1", **{"bert/embeddings/word_embeddings": [1.0]})
    assert checkpoints.checkpoint_family(str(tmp_path / "tf1")) == (
        "tf1_checkpoint", str(tmp_path / "tf1"))
    _write(tmp_path / "tf2", **{"encoder/.ATTRIBUTES/x": [1.0]})
    assert checkpoints.checkpoint_family(str(tmp_path / "tf2"))[0] == "tf2_checkpoint"
    _write(tmp_path / "other", **{"something/else": [1.0]})
    with pytest.raises(ValueError, match="neither bert/... variables"):
        checkpoints.checkpoint_family(str(tmp_path / "other"))


def test_a_folder_needs_exactly_one_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match="expected one checkpoint .* found none"):
        checkpoints.checkpoint_prefix(str(tmp_path))
    _write(tmp_path / "bert_model.ckpt", **{"bert/x": [1.0]})
    assert checkpoints.checkpoint_prefix(str(tmp_path)) == str(tmp_path / "bert_model.ckpt")
    _write(tmp_path / "second.ckpt", **{"bert/x": [1.0]})
    with pytest.raises(FileNotFoundError, match="bert_model.ckpt.index, second.ckpt.index"):
        checkpoints.checkpoint_prefix(str(tmp_path))
