"""`python -m cmlm_tf.convert_hf_bert`: the command is `cmlm_tf/commands/convert_hf_bert.py`."""

import sys

from cmlm_tf.commands.convert_hf_bert import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
