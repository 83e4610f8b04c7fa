"""Ctrl-C deferred to a safe point (cmlm_tf/driver/deferred_interrupt.py), in a process that handles
SIGINT and in one that was started with it ignored."""

import os
import signal
import subprocess
import sys

import pytest

from cmlm_tf.driver import deferred_interrupt
from tests.conftest import REPO_DIR, subprocess_env


def test_the_first_ctrl_c_is_recorded_and_a_second_interrupts_at_once(
        ctrl_c_as_in_a_terminal):
    before = signal.getsignal(signal.SIGINT)
    with deferred_interrupt.ctrl_c_between_chunks() as stop:
        assert not stop
        os.kill(os.getpid(), signal.SIGINT)
        assert stop
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before


def test_during_a_save_every_ctrl_c_waits_for_the_end_of_the_block(ctrl_c_as_in_a_terminal):
    before = signal.getsignal(signal.SIGINT)
    with deferred_interrupt.deferred_ctrl_c(second_interrupts=False) as stop:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        finished = True
    assert stop and finished
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize("second_interrupts", [True, False])
def test_a_process_started_with_sigint_ignored_keeps_it_ignored(second_interrupts):
    """A background run (`cmd &` from a script) ignores Ctrl-C: the block neither records it
    nor starts listening, and SIGINT stays ignored after it."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with deferred_interrupt.deferred_ctrl_c(second_interrupts=second_interrupts) as stop:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            finished = True
        assert finished and not stop
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_ctrl_c_tests_pass_in_a_suite_started_with_sigint_ignored():
    """The way the suite is launched cannot break them: this file's and the checkpoint
    manager's Ctrl-C tests, in a child pytest that starts with SIGINT ignored, as `nohup
    pytest &` from a script starts it."""
    def ignore_sigint():
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
         "tests/driver/test_deferred_interrupt.py", "tests/driver/test_checkpoint_manager.py",
         "tests/driver/test_runner.py", "-k", "(ctrl_c or sigint) and not in_a_suite_started"],
        capture_output=True, text=True, env=subprocess_env(), cwd=REPO_DIR,
        preexec_fn=ignore_sigint, timeout=3600)
    assert child.returncode == 0, child.stdout[-3000:] + child.stderr[-3000:]
    assert " passed" in child.stdout and "failed" not in child.stdout, child.stdout[-3000:]
