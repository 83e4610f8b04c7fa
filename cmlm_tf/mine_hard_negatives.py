"""`python -m cmlm_tf.mine_hard_negatives`: see `cmlm_tf/commands/mine_hard_negatives.py`."""

import sys

from cmlm_tf.commands.mine_hard_negatives import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
