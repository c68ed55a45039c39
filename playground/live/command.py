"""`run ... --live` and `python -m playground watch RUN_DIR`: the live page beside a run.

`run --live` starts the page's server before the first rank (on the run directory the moment it
exists), prints its URL, and once the run is over keeps showing its final state until Ctrl-C; the
exit status stays the run's (Ctrl-C during the run stops it: 130). `watch` serves the page of a run
directory (a run going on in another terminal, or one long over) until Ctrl-C (130). Either way the
server's thread and port are gone when the command returns.
"""

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from playground.core.errors import ParamError
from playground.core.machine import usable_cores
from playground.core.rundir import EXIT_INTERRUPTED

HELP = "serve the live page of a run directory (a run going on, or one that is over)"
DESCRIPTION = (
    "The live page of `run --live` for a run directory: a run going on in another terminal, or one "
    "that is over (its final state). Serves on 127.0.0.1 until Ctrl-C; /metrics has the same numbers."
)
FINAL = "live page: the run is over; {url} shows its final state (Ctrl-C stops)"


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def wait_for_interrupt() -> None:
    """Sleep until Ctrl-C (KeyboardInterrupt in this, the main, thread)."""
    while True:
        time.sleep(3600)


def add_watch_flags(w: argparse.ArgumentParser) -> None:
    """`watch`'s flags; their defaults are `WatchConfig.from_flags`'."""
    w.add_argument("run_dir", nargs="?", help="the run directory (default: runs/latest)")
    w.add_argument("--port", type=int, help="the page's port (default: a free one)")


@dataclass(frozen=True)
class WatchConfig:
    run_dir: Path
    port: int

    def __post_init__(self):
        if not (self.run_dir / "scenario.yaml").is_file():
            what = (
                "does not exist" if not self.run_dir.exists() else "is not a run directory (no scenario.yaml)"
            )
            raise ParamError("RUN_DIR", f"{self.run_dir} {what}")
        if not 0 <= self.port <= 65535:
            raise ParamError("--port", f"must be in 0..65535 (0: a free port), got {self.port}")

    @classmethod
    def from_flags(cls, *, run_dir: str | Path = "runs/latest", port: int = 0) -> "WatchConfig":
        return cls(Path(run_dir), port)


def run_live(run: Callable[[Callable[[Path], None]], int], port: int) -> int:
    """`run(on_run_dir)` (launcher.run.execute with its scenario) with the page served beside it."""
    from playground.live.server import LiveServer

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


def run_watch(config: WatchConfig) -> int:
    """Serve the run directory's page until Ctrl-C (exit 130)."""
    from playground.live.server import LiveServer

    run_dir = config.run_dir.resolve()
    server = LiveServer(run_dir, config.port, usable_cores(), flag="--port")
    url = server.start()
    try:
        _say(f"live page of {run_dir}: {url} (Ctrl-C stops)")
        wait_for_interrupt()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        server.stop()
    return 0
