"""`python -m cmlm_tf.similarity`: the command lives in `cmlm_tf/commands/similarity.py`."""

import sys

from cmlm_tf.commands.similarity import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
