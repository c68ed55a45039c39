"""`python -m playground`: the CLI. Once the command has returned (its run finished, cleaned up
and reported), Ctrl-C and SIGTERM are ignored while the interpreter shuts down: Python resets its
own handlers to the default there, so a late signal would end a finished command as killed."""

import signal
import sys

from playground.cli import main

try:
    code = main()
except KeyboardInterrupt:  # landed between the command's own handler and the lines below
    print("interrupted", file=sys.stderr, flush=True)
    code = 130
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, signal.SIG_IGN)
raise SystemExit(code)
