"""`--int8`: `OUT/serving_int8/1/`, the TF Serving model with int8 matmuls
(`serving_precision`, `cmlm_tf.export.int8_dense`)."""

from cmlm_tf.export.formats.serving_precision import precision_format

FORMAT = precision_format(
    "int8", "int8",
    help="also write OUT/serving_int8/1: the TF Serving model with int8 matmuls (oneDNN: "
         "AVX512-VNNI, AMX)")
