"""This package started again as a child process, and what a child's session leaves behind.

`python -P -m playground ...` with this package first on the child's path: the child imports the
playground we were imported from (the installed one under CI, a checkout's elsewhere), and `-P`
keeps the current directory (perhaps a checkout without the compiled native module) from shadowing
it. The chaos command, `results` and the lecture start their commands this way, and so do the
tests (`cli/testing.py`); a command started in a session of its own is gone when
`session_processes` of that session is empty.
"""

import os
import sys
from pathlib import Path

import psutil

PLAYGROUND = [sys.executable, "-P", "-m", "playground"]
ROOT = str(Path(__file__).resolve().parents[2])  # the directory this package is imported from


def subprocess_env(extra: dict | None = None) -> dict[str, str]:
    """The environment for a child `python -P -m playground`: it imports the same playground as we did."""
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
    return env


def session_processes(*sids: int) -> list[psutil.Process]:
    """The live processes (zombies aside) of these sessions: what a run leaves behind."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) in sids and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, psutil.Error):
            pass
    return out
