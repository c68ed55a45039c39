"""What a run leaves behind: its directory (runs/<stamp>-<name>, runs/latest), result.json, and
the exit status every command returns.

Exit statuses: 0 success; 1 the run failed (a rank raised, died or hung, or a result was wrong);
2 bad input (one line naming the file or flag, the key and what is allowed); 130 Ctrl-C.
"""

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


@dataclass(frozen=True)
class Finished:
    """How a command's run ended, for a caller in Python (`playground.api`): the exit status the
    command returns, result.json's dict, and the launcher's `LaunchOutcome` (what each rank
    returned, the root cause of a failure), None where no ranks were launched (a simulation)."""

    code: int
    result: dict
    outcome: Any = None


def make_run_dir(base: Path, name: str) -> Path:
    """runs/<YYYYmmdd-HHMMSS>-<name>[-k]/, with runs/latest pointing at it."""
    base.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = base / f"{stamp}-{name}"
    k = 1
    while True:
        try:
            run_dir.mkdir()
            break
        except FileExistsError:
            k += 1
            run_dir = base / f"{stamp}-{name}-{k}"
    point_latest(base, run_dir)
    return run_dir


def point_latest(base: Path, run_dir: Path) -> None:
    """Make base/latest point at run_dir (atomically: a reader never sees it missing)."""
    latest, tmp = base / "latest", base / f".latest-{os.getpid()}"
    target = run_dir.name if run_dir.resolve().parent == base.resolve() else str(run_dir.resolve())
    try:
        if tmp.is_symlink():
            tmp.unlink()
        tmp.symlink_to(target)
        os.replace(tmp, latest)
    except OSError:
        pass


def write_result(run_dir: Path, result: dict) -> None:
    (run_dir / "result.json").write_text(json.dumps(result, indent=1, default=_json_default))


def _json_default(o):
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)
