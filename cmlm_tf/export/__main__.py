import sys

from cmlm_tf.export.cli import main

sys.exit(main())
