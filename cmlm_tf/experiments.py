"""Importing this module registers every cmlm_tf experiment with Model Garden's factory."""

from cmlm_tf.tasks import bgt, bitext, cmlm, cmlm_bitext, mlm_tlm, moco, nli  # noqa: F401
