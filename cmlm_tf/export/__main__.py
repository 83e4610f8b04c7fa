import sys

from cmlm_tf.commands.export import main

sys.exit(main())
