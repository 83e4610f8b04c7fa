"""`--int8` (`cmlm_tf/export/formats/int8.py`)."""

from cmlm_tf.export.formats import int8


def test_int8_writes_the_int8_serving_model(precision_export):
    assert int8.FORMAT.flag == "--int8" and int8.FORMAT.recorded
    assert int8.FORMAT.outputs == ("serving_int8/1/saved_model.pb",)
    assert (precision_export / int8.FORMAT.outputs[0]).is_file()
