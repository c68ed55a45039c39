"""`python -m playground`: the CLI. A Ctrl-C that lands after the command has finished (while the
interpreter shuts down) ends the way one during the command does, "interrupted" and status 130,
instead of a KeyboardInterrupt escaping into Python's default exit by SIGINT."""

import os
import signal
import sys

from playground.cli import main


def _interrupted_late(signum, frame) -> None:
    print("interrupted", file=sys.stderr, flush=True)
    os._exit(130)  # the command's own cleanup has run; nothing of ours is registered with atexit


try:
    code = main()
except KeyboardInterrupt:  # between the command's own handler and the one below
    print("interrupted", file=sys.stderr, flush=True)
    code = 130
signal.signal(signal.SIGINT, _interrupted_late)
raise SystemExit(code)
