"""Ctrl-C deferred to a safe point (cmlm_tf/deferred_interrupt.py)."""

import os
import signal

import pytest

from cmlm_tf import deferred_interrupt


def test_the_first_ctrl_c_is_recorded_and_a_second_interrupts_at_once():
    with deferred_interrupt.ctrl_c_between_chunks() as stop:
        assert not stop
        os.kill(os.getpid(), signal.SIGINT)
        assert stop
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_during_a_save_every_ctrl_c_waits_for_the_end_of_the_block():
    with deferred_interrupt.deferred_ctrl_c(second_interrupts=False) as stop:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        finished = True
    assert stop and finished
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
