"""A discrete-event clock that runs each rank's ordinary blocking code, as SMPI does.

Every simulated rank is a greenlet running the same Python as a real rank (a node, a collective
from playground.collectives). Where a real rank would block (a receive whose message has not
arrived, a send that is still on the wire, a reduction that takes CPU time) the simulated one
asks the engine to resume it at a virtual time, and the engine switches to whichever rank has
the earliest pending event. Time advances only by these events; the ranks' own Python costs
nothing in virtual time.

Order is deterministic: events run by (time, posting order). A rank resumes at time t without a
switch when no other event is due before t (most steps of a ring, where each rank's next
message is already on its way). A wait carries a token; a wake-up for an older wait is dropped.
When no event is left but ranks still wait, the simulated program deadlocked: `run` raises
SimDeadlock naming them.
"""

import heapq

from greenlet import GreenletExit, getcurrent, greenlet

from playground.errors import CommError


class SimDeadlock(CommError):
    """Every rank that has not finished waits for a message no rank will send."""


class Proc:
    """One simulated rank: its greenlet, inbox and wait state."""

    __slots__ = ("rank", "glet", "token", "waiting", "inbox", "result", "error", "finished")

    def __init__(self, rank: int):
        self.rank = rank
        self.glet = None
        self.token = 0  # bumped at every wait; a wake-up carries the token of the wait it ends
        self.waiting = False  # waiting for any message: a delivery schedules a wake-up
        self.inbox: list = []  # heap of (arrival_s, seq, message)
        self.result = None
        self.error: BaseException | None = None
        self.finished = False


class Engine:
    """The event queue and the virtual clock (`now`, seconds) shared by all simulated ranks."""

    def __init__(self, num_ranks: int):
        self.now = 0.0
        self.procs = [Proc(r) for r in range(num_ranks)]
        self._events: list = []  # heap of (time_s, seq, proc, token)
        self._seq = 0
        self._main = None
        self.num_events = 0
        self.num_switches = 0
        self.num_messages = 0

    def clock_ns(self) -> int:
        return round(self.now * 1e9)

    # -- scheduling ------------------------------------------------------------------------
    def _wake_at(self, t: float, proc: Proc) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, proc, proc.token))

    def _yield(self, proc: Proc) -> None:
        """Run other ranks until `proc`'s next event: switch straight to the rank whose event is
        earliest (no hop through a scheduler), or just return when that event is `proc`'s own."""
        events = self._events
        while events:
            t, _, nxt, token = heapq.heappop(events)
            if token != nxt.token or nxt.finished:
                continue
            if not nxt.glet:  # not started yet: the main loop starts it, from a shallow stack
                heapq.heappush(events, (t, _, nxt, token))
                break
            self.now = t
            self.num_events += 1
            if nxt is not proc:
                self.num_switches += 1
                nxt.glet.switch()
            return
        self._main.switch()  # nothing left to run (the main loop reports the deadlock) or a start

    def sleep_until(self, proc: Proc, t: float) -> None:
        """Block `proc` (the running rank) until virtual time `t`."""
        if t <= self.now:
            return
        events = self._events
        if not events or t <= events[0][0]:  # nothing else happens before t: no switch needed
            self.now = t
            return
        proc.token += 1
        self._wake_at(t, proc)
        self._yield(proc)

    def wait_for_message(self, proc: Proc, until: float | None) -> None:
        """Block `proc` until a message is delivered to it, or until `until` (its earliest queued
        arrival), whichever is first."""
        if until is not None:
            events = self._events
            if not events or until <= events[0][0]:
                self.now = max(self.now, until)
                return
        proc.token += 1
        proc.waiting = True
        if until is not None:
            self._wake_at(until, proc)
        self._yield(proc)
        proc.waiting = False

    def deliver(self, proc: Proc, arrival: float, message) -> None:
        """Queue `message` for `proc`, arriving at `arrival`; wake `proc` then if it waits."""
        self._seq += 1
        self.num_messages += 1
        heapq.heappush(proc.inbox, (arrival, self._seq, message))
        if proc.waiting:
            self._wake_at(max(arrival, self.now), proc)

    # -- running ---------------------------------------------------------------------------
    def run(self, fn) -> list:
        """Run fn(rank) on every rank from time 0 to the end; each rank's return value. The first
        error raised on a rank stops the simulation and is raised here."""
        self._main = getcurrent()
        for proc in self.procs:
            proc.glet = greenlet(self._body(proc, fn), parent=self._main)
            self._wake_at(0.0, proc)
        events = self._events
        failed = None
        while events:  # ranks switch among themselves; control is back here when one ends
            t, _, proc, token = heapq.heappop(events)
            if token != proc.token or proc.finished:
                continue
            self.now = t
            self.num_events += 1
            proc.glet.switch()
            failed = next((p for p in self.procs if p.error is not None), None)
            if failed is not None:
                break
        stuck = [p for p in self.procs if not p.finished]
        for p in stuck:  # unwind their stacks (finally blocks run), then report
            if p.glet is not None and not p.glet.dead:
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
