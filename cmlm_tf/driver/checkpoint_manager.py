"""The training run's checkpoint manager: one restore line, a full disk reported by its
checkpoint, and a Ctrl-C during a save deferred until the save is whole (`SaveInterrupted`)."""

import os

from absl import logging

from cmlm_tf.driver import deferred_interrupt
from cmlm_tf.files import disk
from cmlm_tf.runtime import internals


class SaveInterrupted(KeyboardInterrupt):
    """Ctrl-C came during a checkpoint save, which finished first; `path` is the checkpoint
    it wrote (None when the interval skipped it)."""

    def __init__(self, path):
        super().__init__(path)
        self.path = path


class CheckpointManager(internals.CheckpointManagerBase):
    """Restores with a one-line log; values a run does not use now (a finished run's
    optimizer slots, another stage's heads) are not reported as failures."""

    def restore_or_initialize(self):
        latest = self.recorded_latest
        if latest is None:
            # Orbit's controller asks more than once; the task's initialisation (a
            # warm start) runs, and is logged, only the first time.
            if not getattr(self, "_initialized", False):
                self._initialized = True
                self.run_init_fn()
                logging.info("no checkpoint in %s: starting at step 0", self.directory)
            return None
        self.restore_checkpoint(latest)
        logging.info("restored step %d from %s", self.step,
                     os.path.basename(latest))
        return latest

    def save(self, checkpoint_number=None, check_interval: bool = True, options=None):
        """Saves as tf.train.CheckpointManager does; a full disk is one error naming
        the checkpoint (the previous ones stay: nothing is pruned before a save ends)."""
        number = checkpoint_number if checkpoint_number is not None else self.step
        # Ctrl-C waits for the whole save: the files, their recording in the `checkpoint`
        # state and the pruning of old ones. Then it stops the run (KeyboardInterrupt).
        with deferred_interrupt.deferred_ctrl_c(second_interrupts=False) as stop:
            with disk.reporting_disk_full(f"{self.prefix}-{int(number)}"):
                path = super().save(checkpoint_number=checkpoint_number,
                                    check_interval=check_interval, options=options)
        if stop:
            raise SaveInterrupted(path)
        return path
