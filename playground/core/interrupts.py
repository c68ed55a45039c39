"""Holding Ctrl-C and SIGTERM back from a child process until it can take them itself.

A child forked or spawned from us stays in our process group until it has set itself up (its own
signal handlers, or `setsid` for a helper command), so Ctrl-C at the terminal, or a `killpg`,
reaches it in that window and kills it half made. Blocked here, the signal waits: the child
inherits the blocked mask (a rank unblocks once its handlers are set; a command like `ip` runs to
its end with it blocked), and ours is delivered to us when the block ends.
"""

import contextlib
import signal

INTERRUPTS = frozenset({signal.SIGINT, signal.SIGTERM})


@contextlib.contextmanager
def held():
    """Block SIGINT and SIGTERM in this thread for the block; restore the mask it had."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
