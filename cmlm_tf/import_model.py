"""`python -m cmlm_tf.import_model`: the command lives in `cmlm_tf/commands/import_model.py`."""

import sys

from cmlm_tf.commands.import_model import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
