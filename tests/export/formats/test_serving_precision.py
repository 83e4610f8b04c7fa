"""The serving model in another precision (`cmlm_tf/export/formats/serving_precision.py`)."""

import json

from cmlm_tf.export.formats import serving_precision


def test_each_precision_has_its_folder():
    assert serving_precision.folder("bfloat16") == "serving_bf16/1"
    assert serving_precision.folder("int8") == "serving_int8/1"


def test_an_export_records_and_lists_each_precision_it_wrote(precision_export, tiny_export):
    meta = json.loads((precision_export / "cmlm_tf_export.json").read_text())
    card = (precision_export / "README.md").read_text()
    for precision in ("bfloat16", "int8"):
        export_format = serving_precision.precision_format("x", precision, help="")
        entry = meta["serving_models"][precision]
        assert entry["folder"] == serving_precision.folder(precision)
        assert entry["min_probe_cosine_to_float32"] >= 0.95
        assert (precision_export / entry["folder"] / "saved_model.pb").is_file()
        rows = export_format.card_rows(meta)
        assert rows.startswith(f"| `{entry['folder']}/` | the same TF Serving model in "
                               f"{precision}") and rows in card
    plain = json.loads((tiny_export / "cmlm_tf_export.json").read_text())
    assert list(plain["serving_models"]) == ["float32"]
    assert serving_precision.precision_format("x", "int8", help="").card_rows(plain) == ""
