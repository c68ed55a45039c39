"""A discrete-event engine that runs each rank's ordinary blocking code, as SMPI does.

Every simulated rank is a greenlet running the same Python as a real rank (a node, a collective
from playground.collectives), with a clock of its own in virtual seconds (`time_of(rank)`). What
only concerns the rank moves its clock without stopping it: a reduction costs its time, a received
message is taken at its arrival. What concerns others goes through the event queue in global time
order: a message's transmission (which reserves the ports it crosses, network.py), a request for
a shared CPU. A rank stops (its greenlet switches away) only when it needs something no event
has produced yet: a message not yet transmitted, a send's completion, a CPU. The rank that
blocks runs the event loop itself and switches straight to the rank the next event wakes: one
switch per wake-up, no scheduler in between.

Order is deterministic: events run by (time, posting order), and every rank's clock is at or past
the last event run, so no event is ever posted in the past. Waking a rank is an event too, posted
when the message it waits for is delivered (or its send completes): the woken rank runs after the
events already due at that instant, so it usually finds its own sends of that instant gone and
does not stop again for them (one switch a message on a ring, not one and a half). All ranks
start at time 0: each runs until it first blocks before any event is run. When no event is left
but ranks still wait, the simulated program deadlocked: `run` raises SimDeadlock naming them.

The queue, the clocks, the inboxes and the blocking are the native module's SimEngine
(native/sim_engine.c): an event is a plain record in one array, not a tuple of Python objects,
and a message costs no Python call of the simulator's own. This class starts the greenlets and
reports how they ended.
"""

from _playground_native import SimEngine
from greenlet import GreenletExit, getcurrent, greenlet

from playground.collectives.chunks import phantom
from playground.core.errors import CommError
from playground.sim.network import Network


class SimDeadlock(CommError):
    """Every rank that has not finished waits for something no rank will do."""


class Proc:
    """One simulated rank's greenlet and outcome (its clock and inbox live in the SimEngine)."""

    __slots__ = ("rank", "glet", "result", "error", "finished")

    def __init__(self, rank: int):
        self.rank = rank
        self.glet: greenlet | None = None
        self.result: object = None
        self.error: BaseException | None = None
        self.finished = False


class Engine(SimEngine):
    """The event queue, the time of the last event run (`now`), the ranks' clocks (`time_of`) and
    their greenlets (`procs`); `progress(engine)` is called every 65536 events of a long run.
    Folded (`fold`, fold.py), only rank 0 runs."""

    def __init__(self, network: Network, reduce_s_per_byte: float = 0.0, fold: int = 0):
        super().__init__(network, reduce_s_per_byte, fold)
        self.procs = [Proc(r) for r in range(1 if fold else network.num_ranks)]
        self.phantom = phantom  # what a data-free message reads as

    def run(self, fn) -> list:
        """Run fn(rank) on every rank (rank 0 alone when folded) from time 0 to the end; each one's
        return value. The first error raised on a rank stops the simulation and is raised here."""
        main = getcurrent()
        self.set_greenlet(-1, main)
        try:
            glets = [greenlet(self._body(proc, fn), parent=main) for proc in self.procs]
            for proc, glet in zip(self.procs, glets, strict=True):
                proc.glet = glet
                self.set_greenlet(proc.rank, glet)
            for proc, glet in zip(self.procs, glets, strict=True):  # each runs until it first blocks
                self.current = proc.rank
                glet.switch()
                if self.failed:
                    break
            self.starting = False
            if not self.failed:
                self.run_events()  # ranks switch among themselves; back here when one ends or fails
            return self._outcome()
        finally:
            self.close()

    def _outcome(self) -> list:
        errors = [p.error for p in self.procs if p.error is not None]
        stuck = [p for p in self.procs if not p.finished]
        for p in stuck:  # unwind their stacks (finally blocks run), then report
            if p.glet is not None and p.glet:
                p.glet.throw(GreenletExit)
        if errors:
            raise errors[0]
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
                self.failed = True
            proc.finished = True

        return body
