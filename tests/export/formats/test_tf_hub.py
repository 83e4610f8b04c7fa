"""The TF Hub and TF Serving format (`cmlm_tf/export/formats/tf_hub.py`), which every
export writes."""

import json

from cmlm_tf.export.formats import tf_hub


def test_every_export_holds_its_outputs(tiny_export):
    assert tf_hub.FORMAT.always
    for path in tf_hub.FORMAT.outputs:
        assert (tiny_export / path).is_file(), path


def test_its_card_rows_list_each_models_custom_ops(tiny_export):
    meta = json.loads((tiny_export / "cmlm_tf_export.json").read_text())
    rows = tf_hub.card_rows(meta)
    assert [row.split(" | ")[0] for row in rows.splitlines()] == [
        "| `preprocessor/`", "| `encoder/`", "| `serving/1/`"]
    assert meta["custom_ops"]["encoder"] == []
    assert rows.splitlines()[1].endswith("| none |")
    assert "TF-Text: `" in rows.splitlines()[0]  # the preprocessor tokenizes with TF-Text
    assert rows in (tiny_export / "README.md").read_text()
