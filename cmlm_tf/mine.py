"""`python -m cmlm_tf.mine`: the command lives in `cmlm_tf/commands/mine.py`."""

import sys

from cmlm_tf.commands.mine import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
