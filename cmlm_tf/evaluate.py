"""`python -m cmlm_tf.evaluate`: the command lives in `cmlm_tf/commands/evaluate.py`."""

import sys

from cmlm_tf.commands.evaluate import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
