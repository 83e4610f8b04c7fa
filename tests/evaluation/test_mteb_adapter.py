"""The MTEB adapter's parts that need no MTEB: reading an encode call's texts, the options it
refuses or ignores, the model name, the wrapper's encode and the pairwise similarity."""

import logging

import numpy as np
import pytest

from cmlm_tf.evaluation import mteb_adapter


def test_texts_are_read_in_the_loaders_order():
    batches = [{"text": ["a", "b"]}, {"text": ["c"]}]
    assert mteb_adapter.loader_texts(batches, task_metadata=None, hf_split="test") == \
        ["a", "b", "c"]


def test_a_call_without_protocol_keywords_is_no_mteb_call():
    with pytest.raises(TypeError, match="unexpected keyword arguments: batch_size"):
        mteb_adapter.loader_texts([{"text": ["a"]}], batch_size=8)


def test_only_float32_precision_is_given():
    texts = mteb_adapter.loader_texts([{"text": ["a"]}], prompt_type=None, precision="float32")
    assert texts == ["a"]
    with pytest.raises(ValueError, match="precision='int8': cmlm_tf encoders give float32"):
        mteb_adapter.loader_texts([{"text": ["a"]}], prompt_type=None, precision="int8")


def test_a_batch_without_text_names_its_number_and_fields():
    with pytest.raises(ValueError, match=r"MTEB batch 1 has no 'text' field \(it has "
                                         r"\['image'\]\)"):
        mteb_adapter.loader_texts([{"text": ["a"]}, {"image": [0]}], prompt_type=None)


def test_unknown_options_are_ignored_with_one_warning_per_set(caplog):
    mteb_adapter.warn_ignored_once.cache_clear()
    with caplog.at_level(logging.WARNING, logger=mteb_adapter.__name__):
        for _ in range(3):
            mteb_adapter.loader_texts([{"text": ["a"]}], prompt_type=None, new_option=1)
        mteb_adapter.loader_texts([{"text": ["a"]}], prompt_type=None, other=2)
    warnings = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert warnings == [
        "MTEB passed encode options this encoder does not use, ignored: new_option",
        "MTEB passed encode options this encoder does not use, ignored: other"]


def test_the_model_name_is_the_export_folder_under_cmlm_tf(tmp_path):
    assert mteb_adapter.model_name(str(tmp_path / "my_export") + "/") == "cmlm_tf/my_export"


class RecordingModel:
    """A stand-in for a loaded export: its `encode` records what it was given."""

    def __init__(self):
        self.calls = []

    def encode(self, texts, batch_size=64, show_progress_bar=None):
        self.calls.append((list(texts), batch_size, show_progress_bar))
        return np.zeros([len(texts), 2], np.float32)


def test_the_wrapper_reads_mtebs_loader_and_passes_the_models_own_options():
    model = RecordingModel()
    encoder = mteb_adapter.MTEBEncoder(model)
    vectors = encoder.encode([{"text": ["a", "b"]}, {"text": ["c"]}], task_metadata=None,
                             hf_split="test", prompt_type=None, batch_size=2,
                             show_progress_bar=False)
    assert vectors.shape == (3, 2)
    encoder.encode(["plain", "texts"])
    assert model.calls == [(["a", "b", "c"], 2, False), (["plain", "texts"], 64, None)]
    with pytest.raises(TypeError, match="unexpected keyword arguments: normalise"):
        encoder.encode(["the dog"], normalise=True)


def test_pairwise_similarity_is_the_cosine_of_matching_rows():
    first = np.array([[1.0, 0.0], [1.0, 1.0]])
    second = np.array([[2.0, 0.0], [-1.0, 0.0]])
    result = mteb_adapter.MTEBEncoder(None).similarity_pairwise(first, second)
    assert result.dtype == np.float32
    np.testing.assert_allclose(result, [1.0, -np.sqrt(0.5)], rtol=1e-6)
