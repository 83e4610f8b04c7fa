"""Imports every module that registers a `cmlm_tf/...` experiment or task."""

from cmlm_tf.tasks import cmlm  # noqa: F401
