"""`python -m cmlm_tf.convert_nli`: the command lives in `cmlm_tf/commands/convert_nli.py`."""

import sys

from cmlm_tf.commands.convert_nli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
