"""Tests of `cmlm_tf.model_import.hub`: a folder that is not a Model Garden BERT SavedModel is
one error naming it. (A TF Hub encoder imported and compared with its own outputs:
tests/model_import/test_importer.py.)"""

import pytest

from cmlm_tf.model_import import hub


def test_a_folder_without_a_saved_model_is_refused(tmp_path):
    with pytest.raises(ValueError, match=f"{tmp_path}: cannot load the SavedModel"):
        hub.read_hub(str(tmp_path))

