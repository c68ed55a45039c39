"""A user node for the lecture's Ctrl-C tests: it presses Ctrl-C at a chosen point, or waits for it.

- `wait`: write `ready` into the run directory, then wait (the test sends Ctrl-C to the group);
- `launcher`: Ctrl-C to this scenario's launcher alone (the lecture never sees it), then wait;
- `lecture`: Ctrl-C to the lecture alone (the scenario never sees it), then return at once;
- `none`: return at once.
"""

import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psutil


@dataclass(frozen=True)
class Params:
    ctrl_c: Literal["wait", "launcher", "lecture", "none"] = "none"


def main(comm, params):
    launcher = os.getppid()
    if params.ctrl_c == "wait":
        (Path(os.environ["PLAYGROUND_RUN_DIR"]) / "ready").touch()
    elif params.ctrl_c == "launcher":
        os.kill(launcher, signal.SIGINT)
    elif params.ctrl_c == "lecture":
        os.kill(psutil.Process(launcher).ppid(), signal.SIGINT)
        return {"ok": True}
    else:
        return {"ok": True}
    threading.Event().wait(60)  # the launcher kills this rank when it stops
    return {"ok": False, "error": "Ctrl-C never stopped this rank"}
