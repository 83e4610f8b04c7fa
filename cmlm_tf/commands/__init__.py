"""The command lines: one module per command, each with its parser and `main`, over the
library modules below it. `python -m cmlm_tf.<command>` runs them through the two-line
modules of the same name at the package root (`cmlm_tf/train.py` ...), kept for those
documented command lines; `cmlm_tf.commands.common` holds what the commands share (the
one-line error path, console logging, the PCR flags, loading an encoder)."""
