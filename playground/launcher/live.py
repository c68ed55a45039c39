"""The launcher's side of a live recovery (`recovery.way: peer` or `shrink`), mixed into `Launcher`.

The coordinator of a live group ends its generation at the first failure, once the survivors are
told (their waits raise PeerLost). `_recover_live` then reaps the failed rank (one that raised is
exiting; one that hangs or is stopped is killed), asks the supervisor whether to recover live
(`Supervisor.live_recovery`: restarts left, survivors to copy from), and starts the next
generation's coordinator, handing it what the survivors already sent it while they re-formed.
For peer it forks a replacement for the failed rank alone (PLAYGROUND_REPLACEMENT tells it to take
its state from a survivor); for shrink `_shrink` renumbers the survivors, as each survivor
renumbers itself (launcher/membership.py), and renames their logs with them. When the supervisor
says no, the launcher lets the abort settle and stops the group as it always does.
"""

import functools
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from playground.launcher.membership import REPLACEMENT_VARIABLE

FAILED_EXIT_GRACE_S = 3.0  # a failed rank that reported its error may take this long to exit


class LiveRecovery:
    """Mixin: needs the Launcher's state and hooks below."""

    if TYPE_CHECKING:  # what the Launcher this is mixed into provides (for the type checker)
        scenario: Any
        run_dir: Path
        n: int
        generation: int
        procs: list
        coordinator: Any
        supervisor: Any
        interrupts: Any
        live: bool
        backlog: list[list[bytes]]

        def _coordinator(self) -> Any: ...
        def _record_fired_fault(self) -> None: ...
        def _remove_empty_stacks(self) -> None: ...
        def _claim_scratch(self, generation: int) -> None: ...
        def _start_ranks(self, mp, extra_env: dict, ranks: list[int] | None = None) -> None: ...

    def _recover_live(self, mp) -> bool:
        """After a failure under `recovery.way: peer`: if the supervisor agrees, the failed ranks
        reaped, the next generation's coordinator made (with what the survivors already sent it)
        and a replacement started for each failed rank, while the survivors keep running (True).
        False: the run finished, or the group must stop as it always does."""
        coord = self.coordinator
        if not self.live or self.interrupts.pending or not coord.failures or self.supervisor is None:
            return False
        failed = {f.rank for f in coord.failures if not f.secondary}
        deadline = time.monotonic() + FAILED_EXIT_GRACE_S
        for rank in sorted(failed):  # one that raised is exiting; one that hangs is killed
            self.procs[rank].join(max(0.0, deadline - time.monotonic()))
            if self.procs[rank].exitcode is None:
                try:
                    os.kill(self.procs[rank].pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.procs[rank].join(5.0)
        self._record_fired_fault()
        gone = {rank for rank, p in enumerate(self.procs) if p.exitcode is not None}
        replaced = self.supervisor.live_recovery(self.generation, coord, gone)
        if replaced is None:
            return False
        self._remove_empty_stacks()
        self.backlog = coord.early
        self.generation += 1
        if self.scenario.recovery.way == "shrink":
            renamed = self._shrink(replaced)
            self.coordinator = self._coordinator()
            self.coordinator.on_table = functools.partial(self._rename_logs, renamed)
            self.backlog = []
            self._claim_scratch(self.generation + 1)
            for rank, p in enumerate(self.procs):
                self.coordinator.pids[rank] = p.pid
            self.supervisor.arm(self.coordinator, self.generation)
            return True
        self.coordinator = self._coordinator()
        self.backlog = []
        self._start_ranks(mp, {REPLACEMENT_VARIABLE: "1"}, ranks=replaced)
        return True

    def _shrink(self, lost: list[int]) -> list[tuple[int, int]]:
        """The group goes on without the `lost` ranks: the survivors renumbered in order, as each
        renumbers itself (its rank less the lost ranks below it); returns each moved survivor's
        (old rank, new rank), for its log to be renamed with it."""
        survivors = [rank for rank in range(self.n) if rank not in lost]
        self.procs = [self.procs[rank] for rank in survivors]
        self.n = len(survivors)
        return [(old, new) for new, old in enumerate(survivors) if new != old]

    def _rename_logs(self, renamed: list[tuple[int, int]]) -> None:
        """The survivors' logs under their new ranks (the lost ranks' were kept aside), once every
        survivor has registered in the new generation: each wrote its last line under its old name
        before it re-formed, and writes its next under the new one only after the table."""
        for old, new in renamed:  # in rank order: a new name is always free by then
            path = self.run_dir / f"rank-{old}.jsonl"
            if path.exists():
                os.replace(path, self.run_dir / f"rank-{new}.jsonl")
