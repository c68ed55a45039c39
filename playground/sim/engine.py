"""A discrete-event engine that runs each rank's ordinary blocking code, as SMPI does.

Every simulated rank is a greenlet running the same Python as a real rank (a node, a collective
from playground.collectives), with a clock of its own, `Proc.t`, in virtual seconds. What only
concerns the rank moves its clock without stopping it: a reduction costs its time, a received
message is taken at its arrival. What concerns others goes through the event queue in global time
order: a message's transmission (which reserves the ports it crosses, network.py), a request for
a shared CPU. A rank stops (its greenlet switches away) only when it needs something no event
has produced yet: a message not yet transmitted, a send's completion, a CPU. The rank that
blocks runs the event loop itself and switches straight to the rank the next event wakes: one
switch per wake-up, no scheduler in between.

Order is deterministic: events run by (time, posting order), and every rank's clock is at or past
the last event run, so no event is ever posted in the past. All ranks start at time 0: each runs
until it first blocks before any event is run. When no event is left but ranks still wait, the
simulated program deadlocked: `run` raises SimDeadlock naming them.
"""

import heapq
from collections import deque

from greenlet import GreenletExit, getcurrent, greenlet

from playground.errors import CommError

PROGRESS_EVENTS = 1 << 16


class SimDeadlock(CommError):
    """Every rank that has not finished waits for something no rank will do."""


class Proc:
    """One simulated rank: its greenlet, its clock and its inbox."""

    __slots__ = ("rank", "glet", "t", "waiting", "inbox", "result", "error", "finished")

    def __init__(self, rank: int):
        self.rank = rank
        self.glet = None
        self.t = 0.0  # this rank's virtual time, seconds; never behind the engine's `now`
        self.waiting = False  # blocked until a message is delivered to it
        self.inbox: deque = deque()  # delivered messages, in delivery (= sending-time) order
        self.result = None
        self.error: BaseException | None = None
        self.finished = False


class Engine:
    """The event queue, the time of the last event run (`now`) and the ranks."""

    def __init__(self, num_ranks: int):
        self.now = 0.0
        self.procs = [Proc(r) for r in range(num_ranks)]
        self.events: list = []  # heap of (time_s, seq, action, arg); action(arg) -> Proc to run or None
        # A running rank may act at its time t right away (no event) when not starting and no event
        # is due before t: any event still to come is posted at the clock of a rank one wakes.
        self._seq = 0
        self._main = None
        self.starting = True
        self.num_events = 0
        self.num_switches = 0
        self.num_messages = 0
        self.progress = None  # progress(engine), called every PROGRESS_EVENTS events of a long run

    def post(self, t: float, action, arg) -> None:
        """Run action(arg) at virtual time `t` (>= every clock that can still act before it)."""
        self._seq += 1
        heapq.heappush(self.events, (t, self._seq, action, arg))

    def _resume(self, proc: Proc) -> Proc:
        return proc

    def wake_later(self, proc: Proc) -> None:
        """Let `proc` run again once the events due now have run."""
        self.post(self.now, self._resume, proc)

    def block(self, me: Proc) -> None:
        """Stop `me` (the running rank) until an event hands it control back: run events in order
        and switch straight to the first rank one of them wakes (or return if that is `me`)."""
        if self.starting:  # ranks still to start at time 0: nothing runs before they have
            self._main.switch()
            return
        events = self.events
        while events:
            t, _, action, arg = heapq.heappop(events)
            self.now = t
            self.num_events += 1
            if not self.num_events % PROGRESS_EVENTS and self.progress is not None:
                self.progress(self)
            nxt = action(arg)
            if nxt is None:
                continue
            if nxt is not me:
                self.num_switches += 1
                nxt.glet.switch()
            return
        self._main.switch()  # nothing left to run: the main loop reports the deadlock

    # -- running ---------------------------------------------------------------------------
    def run(self, fn) -> list:
        """Run fn(rank) on every rank from time 0 to the end; each rank's return value. The first
        error raised on a rank stops the simulation and is raised here."""
        self._main = getcurrent()
        for proc in self.procs:
            proc.glet = greenlet(self._body(proc, fn), parent=self._main)
        for proc in self.procs:  # each runs until it first blocks, posting its first events
            proc.glet.switch()
            if proc.error is not None:
                break
        self.starting = False
        events = self.events
        failed = next((p for p in self.procs if p.error is not None), None)
        while events and failed is None:  # ranks switch among themselves; back here when one ends
            t, _, action, arg = heapq.heappop(events)
            self.now = t
            self.num_events += 1
            nxt = action(arg)
            if nxt is not None:
                nxt.glet.switch()
                failed = next((p for p in self.procs if p.error is not None), None)
        stuck = [p for p in self.procs if not p.finished]
        for p in stuck:  # unwind their stacks (finally blocks run), then report
            if p.glet is not None and p.glet:
                p.glet.throw(GreenletExit)
        if failed is not None:
            raise failed.error
        if stuck:
            ranks = [p.rank for p in stuck]
            shown = ", ".join(map(str, ranks[:16])) + (" ..." if len(ranks) > 16 else "")
            raise SimDeadlock(
                f"simulation deadlock at t={self.now * 1e6:.3f} us: {len(ranks)} rank(s) wait for "
                f"messages that no rank will send (ranks {shown})"
            )
        return [p.result for p in self.procs]

    def _body(self, proc: Proc, fn):
        def body():
            try:
                proc.result = fn(proc.rank)
            except GreenletExit:
                raise
            except BaseException as e:  # noqa: BLE001 - handed to run(), which raises it
                proc.error = e
            proc.finished = True

        return body
