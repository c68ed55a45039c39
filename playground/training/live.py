"""Live recovery of a data-parallel run (`recovery.way: peer`): a failed rank's replacement takes a
survivor's state over the network, and no rank reads a checkpoint. (`shrink` runs the same steps
with no replacement: the survivors re-form as fewer ranks, `loop.rank_rows` shares the batch out.)

When a peer dies, every survivor's communicator raises PeerLost within a slice of its wait; the
loop (`loop.train_steps`) drops the step in flight and calls `recover`:

    re-form    the rank's Membership joins the next rendezvous generation (new control socket,
               transport and table; launcher/membership.py) beside the replacement the launcher
               started, and the strategy is built again over the reopened communicator (its
               communication thread, which died with the old group, started afresh)
    agree      every rank says how many steps it has committed (Adam's step count: an update is
               the commit) and the group takes the newest. Survivors can differ by one: a ring
               all-reduce can complete on one rank and not on another, and that rank updates
    transfer   the lowest rank holding the newest sends each rank behind it its parameters,
               Adam's m, v and step count, the records of the steps it lacks and the parameters'
               hash; the data position is the step itself (a batch depends on the step alone), and
               nothing else draws random numbers
    go on      from the newest step; a replacement does `agree` and `transfer` before its first step

Each rank's update used the same reduced gradients in the same order, so the state sent is the
one every rank would hold without the fault, and the run ends bit for bit as a run without it
(float64; the replicated modes, where every rank holds the whole state). Each rank tells the
launcher how it recovered (a `resumed` report: the step gone on from, the transfer's time, the
steps it redid) and, after its next step, that step's end: the Restarts table's warm-up.
"""

import statistics
import time
from dataclasses import dataclass

import numpy as np

from playground.core.errors import PeerLost, StateLost
from playground.training.checkpointing import restore

TAG_STATE = 7041  # a survivor's state to a rank behind it (a user tag, below optags.TAG_LIMIT)
MAX_REFORMS = 8  # re-forms in a row when peers keep failing while the group re-forms


def committed_steps(trainer) -> int:
    """The steps whose update this rank has applied (its optimizer's step count)."""
    return int(trainer.gradients.state()["adam.steps"])


def _state(trainer) -> dict[str, np.ndarray]:
    """What a rank behind needs besides the records: the parameters and the strategy's state, as a
    checkpoint names them (`checkpointing.restore` reads this form)."""
    arrays = {"params": trainer.model.params}
    arrays.update({f"strategy.{k}": np.asarray(v) for k, v in trainer.gradients.state().items()})
    return arrays


@dataclass
class CatchUp:
    """What one agreement and transfer found: the step the group goes on from, the rank that sent
    its state (None: every rank was at the newest already), the seconds it took on this rank."""

    step: int
    source: int | None
    transfer_s: float
    behind: list[int]


def catch_up(comm, trainer, log, holds_state: bool = True) -> CatchUp:
    """Agree on the newest committed step and copy its holder's state to every rank behind it
    (module doc); every rank of the group calls it at the same point. A replacement that has not
    caught up yet (`holds_state` false) offers nothing; StateLost when no rank holds any state."""
    t0 = time.perf_counter()
    mine = committed_steps(trainer) if holds_state else -1
    counts = comm.allgather_obj(mine)
    newest = max(counts)
    if newest < 0:
        raise StateLost(comm.rank, getattr(comm.live, "generation", 0))
    behind = [r for r, c in enumerate(counts) if c < newest]
    source = counts.index(newest) if behind else None
    if comm.rank == source:
        arrays = _state(trainer)
        for r in behind:
            header = {
                "steps": log.steps[max(counts[r], 0) : newest],
                "digest": log.digest,
                "arrays": [[k, list(a.shape), a.dtype.str] for k, a in sorted(arrays.items())],
            }
            comm.send_obj(header, r, TAG_STATE)
            for _, a in sorted(arrays.items()):
                comm.send(np.ascontiguousarray(a).reshape(-1), r, TAG_STATE)
    elif comm.rank in behind:
        assert source is not None
        header = comm.recv_obj(source, TAG_STATE)
        received = {}
        for name, shape, dtype in header["arrays"]:
            flat = np.empty(int(np.prod(shape)), dtype=np.dtype(dtype))
            comm.recv(source, TAG_STATE, out=flat)
            received[name] = flat.reshape(shape)
        restore(trainer, received)
        del log.steps[max(mine, 0) :]
        log.steps.extend(header["steps"])
        log.digest = header["digest"]
    return CatchUp(newest, source, time.perf_counter() - t0, behind)


class LiveRecovery:
    """One rank's live recoveries in one training run: `recover` after PeerLost, `join` for a
    replacement's start, `after_step` to report the first step after either."""

    def __init__(self, comm, member, rebuild):
        """`member`: the rank's Membership (comm.live); `rebuild()`: the trainer's strategy built
        again over the (reopened) communicator, its state kept."""
        self.comm, self.member, self.rebuild = comm, member, rebuild
        self.holds_state = not member.is_replacement  # a replacement's comes from a survivor
        self.pending: dict | None = None  # the report waiting for the next step's end

    def join(self, trainer, log) -> int:
        """A replacement's start: its state from a survivor; returns the first step to train."""
        self.member.is_replacement = False
        try:
            return self._catch_up(trainer, log, in_flight=None)
        except PeerLost:  # another peer failed before the state came: the next generation's
            return self._reform(trainer, log, in_flight=None)

    def recover(self, trainer, log, step: int, times, checks, sent: int) -> int:
        """After PeerLost in step `step`: keep a record of the step if its update was applied, re-form
        the group, agree and transfer; returns the step to go on from."""
        if committed_steps(trainer) == step + 1 and len(log.steps) == step and times is not None:
            # updated, but the group failed in the step's last check: the step is done on this rank
            log.steps.append(
                {
                    "step": step,
                    "loss": checks.loss,
                    **times.record(),
                    "check_s": checks.seconds,
                    "sent_bytes": sent,
                }
            )
        return self._reform(trainer, log, in_flight=step)

    def _reform(self, trainer, log, in_flight: int | None) -> int:
        """Re-form the group, agree and transfer; again in the next generation when another peer
        fails meanwhile (at most MAX_REFORMS in a row: the launcher's --max-restarts bounds them first)."""
        for attempt in range(1, MAX_REFORMS + 1):
            try:
                t0 = time.monotonic()
                self.rebuild(self.member.reform)
                return self._catch_up(trainer, log, in_flight, reform_s=time.monotonic() - t0)
            except PeerLost as e:
                if e.final or attempt == MAX_REFORMS:
                    raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _catch_up(self, trainer, log, in_flight: int | None, reform_s: float = 0.0) -> int:
        got = catch_up(self.comm, trainer, log, self.holds_state)
        self.holds_state = True
        redone = 0 if in_flight is None else max(0, in_flight + 1 - got.step)
        report = {
            "type": "resumed",
            "rank": self.comm.rank,
            "step": got.step,
            "load_s": got.transfer_s,
            "loaded_at": time.monotonic(),
            "way": self.member.way,
            "steps_redone": redone,
            "reform_s": reform_s,
        }
        if got.source is not None:
            report["source_rank"] = got.source
        self.comm.notify(report)
        before = [s["step_s"] for s in log.steps[: got.step] if "step_s" in s]
        self.pending = {"step": got.step, "usual_step_s": statistics.median(before) if before else None}
        return got.step

    def after_step(self, log) -> None:
        """A step ended: if it is the first after a recovery, tell the launcher when (warm-up)."""
        if self.pending is None:
            return
        pending, self.pending = self.pending, None
        self.comm.notify(
            {
                "type": "resumed",
                "rank": self.comm.rank,
                "step": pending["step"],
                "first_step_at": time.monotonic(),
                "first_step_s": log.steps[-1].get("step_s", 0.0),
                "usual_step_s": pending["usual_step_s"],
            }
        )
