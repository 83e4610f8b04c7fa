"""Export: a trained encoder as TF Hub SavedModels, a TF Serving model and TFLite models.

`export_lib.export` is the library call; `python -m cmlm_tf.export` (also
`python -m export.export_tfhub` in a checkout, and the `cmlm-tf-export` command) its command
line. This package imports TensorFlow only when an export runs.
"""
