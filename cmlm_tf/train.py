"""`python -m cmlm_tf.train`: the command lives in `cmlm_tf/commands/train.py`."""

from cmlm_tf.commands.train import console_main, main

__all__ = ["console_main", "main"]

if __name__ == "__main__":
    console_main()
