"""`run ... --live` and `python -m playground watch RUN_DIR`: the live page beside a run.

`run --live` starts the page's server before the first rank (on the run directory the moment it
exists), prints its URL, and once the run is over keeps showing its final state until Ctrl-C; the
exit status stays the run's (Ctrl-C during the run stops it: 130). `watch` serves the page of a run
directory (a run going on in another terminal, or one long over) until Ctrl-C (130). Either way the
server's thread and port are gone when the command returns.
"""

import sys
import time
from collections.abc import Callable
from pathlib import Path

from playground.core.errors import ParamError
from playground.core.machine import usable_cores
from playground.core.rundir import EXIT_INTERRUPTED
from playground.live.server import LiveServer

FINAL = "live page: the run is over; {url} shows its final state (Ctrl-C stops)"


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def wait_for_interrupt() -> None:
    """Sleep until Ctrl-C (KeyboardInterrupt in this, the main, thread)."""
    while True:
        time.sleep(3600)


def run_live(run: Callable[[Callable[[Path], None]], int], port: int) -> int:
    """`run(on_run_dir)` (launcher.run.execute with its scenario) with the page served beside it."""
    server = LiveServer(port=port, cpus=usable_cores())
    url = server.start()  # before the run: a taken --live-port is bad input, and no run dir is made
    try:
        _say(f"live page: {url}")
        code = run(server.watch)
        if code == EXIT_INTERRUPTED:
            return code
        try:  # the line first inside: a Ctrl-C the moment it is read still ends here
            _say(FINAL.format(url=url))
            wait_for_interrupt()
        except KeyboardInterrupt:
            pass
        return code
    finally:
        server.stop()


def run_watch(run_dir: str, port: int) -> int:
    """Serve `run_dir`'s page until Ctrl-C (exit 130)."""
    path = Path(run_dir)
    if not (path / "scenario.yaml").is_file():
        what = "does not exist" if not path.exists() else "is not a run directory (no scenario.yaml)"
        raise ParamError("RUN_DIR", f"{run_dir} {what}")
    server = LiveServer(path.resolve(), port, usable_cores(), flag="--port")
    url = server.start()
    try:
        _say(f"live page of {path.resolve()}: {url} (Ctrl-C stops)")
        wait_for_interrupt()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        server.stop()
    return 0
