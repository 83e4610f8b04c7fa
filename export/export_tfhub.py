"""`python -m export.export_tfhub`: the exporter's command line, run from a checkout.

The library is `cmlm_tf.export.export_lib`; an installed package runs the same command as
`python -m cmlm_tf.export` or `cmlm-tf-export`.
"""

import sys

from cmlm_tf.commands.export import main
from cmlm_tf.export.export_lib import export

__all__ = ["export", "main"]

if __name__ == "__main__":
    sys.exit(main(prog="python -m export.export_tfhub"))
