"""Ctrl-C deferred to a safe point: inside a block, the first Ctrl-C only records the request,
and the caller stops where nothing is half done (between two chunks of training steps, after
a whole checkpoint save).

A process whose SIGINT is ignored (started in the background by a script, `cmd &`, as a
scheduler or CI runner may start it) keeps it ignored: the block installs no handler, so
Ctrl-C neither stops it nor is recorded, as the process that started it asked."""

import contextlib
import signal
import threading


class StopRequest:
    """Whether Ctrl-C asked the training loop to stop (true once it did)."""

    def __init__(self):
        self.requested = False

    def __bool__(self):
        return self.requested


@contextlib.contextmanager
def deferred_ctrl_c(*, second_interrupts: bool = True):
    """Inside the block, Ctrl-C (SIGINT) only records the request (the yielded object is
    true once it came); the caller stops where it is safe. With `second_interrupts`, a
    second Ctrl-C interrupts at once; otherwise every one waits for the block's end.
    Outside the main thread (no signal handlers there), and where SIGINT is ignored,
    nothing changes. The handler found before the block is the one after it."""
    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield stop
        return

    def request(signum, frame):
        stop.requested = True
        if second_interrupts:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = signal.signal(signal.SIGINT, request)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def ctrl_c_between_chunks():
    """While the training loop runs, a first Ctrl-C stops it after the current chunk of
    steps (at most a few seconds), where the loop raises KeyboardInterrupt itself: never
    inside a lock, a log line or a timer of the loop. A second Ctrl-C interrupts at once."""
    return deferred_ctrl_c(second_interrupts=True)
