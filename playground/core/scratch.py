"""Per-run scratch directories outside the run directory: ZeroMQ ipc sockets
(/tmp/playground-<port>) and shared-memory rings and pipes (/dev/shm/playground-<port>).

The launcher removes them when a run ends, whatever happened, but a launcher that is itself
SIGKILLed cannot, and rings left in /dev/shm hold memory until reboot. So the launcher writes its
pid into each directory it claims, and every launch first removes the directories whose owner is
gone. Directories without an owner file (ranks started by another launcher) are left alone.
"""

import os
import re
import shutil
import tempfile

OWNER_FILE = ".owner"
_NAME = re.compile(r"playground-\d+(-g\d+)?$")  # -g<n>: a restarted group's (comm/addresses.py)


def scratch_parents() -> tuple[str, ...]:
    return (tempfile.gettempdir(), "/dev/shm")


def claim(directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, OWNER_FILE), "w") as f:
        f.write(str(os.getpid()))


def pid_alive(pid: int) -> bool:
    """Does process `pid` exist (it may belong to another user)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(parents: tuple[str, ...] | None = None) -> list[str]:
    """Remove scratch directories whose owning launcher no longer runs; returns what was removed."""
    removed = []
    for parent in parents or scratch_parents():
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            if not _NAME.match(name):
                continue
            path = os.path.join(parent, name)
            try:
                with open(os.path.join(path, OWNER_FILE)) as f:
                    pid = int(f.read().strip() or 0)
            except (OSError, ValueError):
                continue
            if pid > 0 and not pid_alive(pid):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed
