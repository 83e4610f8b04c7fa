"""`python -m cmlm_tf.embed_corpus`: the command lives in `cmlm_tf/commands/embed_corpus.py`."""

import sys

from cmlm_tf.commands.embed_corpus import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
