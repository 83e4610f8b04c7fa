"""What an export format is (`cmlm_tf/export/formats/base.py`)."""

import os

from cmlm_tf.export.formats.base import ExportFormat, WriteContext


def test_a_formats_flag_is_its_name():
    export_format = ExportFormat(name="safetensors", write=lambda context: None)
    assert export_format.flag == "--safetensors"
    assert export_format.card_rows({}) == export_format.card_section({}) == ""


def test_the_context_places_a_relative_path_in_the_staging_folder(tmp_path):
    context = WriteContext(encoder=None, model=None, tokenizer=None, seq_length=8,
                           staged=str(tmp_path), export_dir="OUT", stage=print)
    assert context.path("serving_bf16/1") == os.path.join(str(tmp_path), "serving_bf16", "1")
