"""`python -m playground`: the CLI. Ctrl-C interrupts a command even when it was started with
SIGINT ignored (a background job of a non-interactive shell, a CI step: Python then leaves it
ignored), as a signal sent on purpose must, and SIGTERM does what Ctrl-C does (the launcher takes
both while its ranks run; before and after, a SIGTERM with its default action would end the command
mid-report, as killed, with its result unwritten). Once the command has returned (its run finished,
cleaned up and reported), Ctrl-C and SIGTERM are ignored while the interpreter shuts down: Python
resets its own handlers to the default there, so a late signal would end a finished command as
killed."""

import signal
import sys

from playground.cli import main


def _terminated(signum, frame):
    raise KeyboardInterrupt


signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, _terminated)
try:
    code = main()
except KeyboardInterrupt:  # landed between the command's own handler and the lines below
    print("interrupted", file=sys.stderr, flush=True)
    code = 130
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, signal.SIG_IGN)
raise SystemExit(code)
