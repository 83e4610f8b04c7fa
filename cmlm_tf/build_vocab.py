"""`python -m cmlm_tf.build_vocab`: the command lives in `cmlm_tf/commands/build_vocab.py`."""

import sys

from cmlm_tf.commands.build_vocab import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
