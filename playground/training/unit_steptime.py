"""ZeRO-2 and ZeRO-3's step on two resources, the compute thread and the communication thread: the
step-time model of the unit modes, and the simulator's scaling study's (`zero_scaling`).

The schedule is the strategies' own (`units.UnitPlan`: the pieces of each pass, the units each
needs, the gather order, where a unit is last used), replayed in time:

    a piece starts: the gathers it needs and `prefetch` more of the pass's order are queued on the
        communication thread (first come, first served), unless whole or queued already;
        the piece waits until the units it needs are whole (the wait is exposed);
    the piece computes for its measured time;
    it ends: the units it used last are freed (after forward only with `reshard_after_forward`);
        in backward, the units whose gradients it completed are queued for their reduce-scatter.

With `gathers` off (ZeRO-2: the parameters stay whole) only the reduce-scatters run. The pass
order of the queue is what FSDP2's streams serialise too: a gather queued behind a reduce-scatter
waits for it, which is why a backward piece queues the next gather before its own reduce-scatter.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from playground.training.steptime_model import CollectiveCost
from playground.training.units import BACKWARD, FORWARD, UnitPlan


@dataclass(frozen=True)
class Timeline:
    """One step's passes: when the compute ended, when the last collective ended, how long the
    compute waited for gathers, and the collectives' own time."""

    compute_end_s: float
    comm_end_s: float
    waited_s: float
    comm_s: float

    @property
    def end_s(self) -> float:
        return max(self.compute_end_s, self.comm_end_s)


class _Clock:
    """The compute thread's time and the communication thread's queue."""

    def __init__(self):
        self.now = self.comm_free = self.waited = self.comm = 0.0

    def queue(self, seconds: float) -> float:
        """A collective queued now: when it ends."""
        start = max(self.now, self.comm_free)
        self.comm_free = start + seconds
        self.comm += seconds
        return self.comm_free

    def wait_until(self, t: float, resume_s: float = 0.0) -> None:
        """Wait for what ends at t; a wait that blocks costs `resume_s` more before going on."""
        if t > self.now:
            self.waited += t + resume_s - self.now
            self.now = t + resume_s


def unit_timeline(
    plan: UnitPlan,
    compute_s: Mapping[str, float],
    gather_s: Sequence[float],
    scatter_s: Sequence[float],
    prefetch: int = 1,
    reshard_after_forward: bool = True,
    gathers: bool = True,
    micro_batches: int = 1,
    resume_s: float = 0.0,
) -> Timeline:
    """The passes of one step (`micro_batches` forward-backward pairs): `compute_s[piece]` each
    piece's compute, `gather_s[u]`, `scatter_s[u]` each unit's all-gather and reduce-scatter;
    `resume_s` what a piece that waited for its gathers pays beyond them (the last rank's late start,
    the hand-back to the compute thread: `training_stats.gather_delays` measures it)."""
    clock = _Clock()
    whole: set[int] = set()
    queued: dict[int, float] = {}
    for _ in range(micro_batches):
        for direction in (FORWARD, BACKWARD):
            order, last_use, issued = plan.gather_order(direction), plan.last_use(direction), -1
            for piece in plan.pieces(direction):
                needed = plan.needs(piece)
                if gathers and needed:
                    upto = min(len(order) - 1, max(order.index(u) for u in needed) + prefetch)
                    for u in [*order[issued + 1 : upto + 1], *needed]:
                        if u not in whole and u not in queued:
                            queued[u] = clock.queue(gather_s[u])
                    issued = max(issued, upto)
                    ready = [queued.pop(u) for u in needed if u in queued]
                    whole.update(needed)
                    if ready:
                        clock.wait_until(max(ready), resume_s)
                clock.now += compute_s.get(piece, 0.0)
                done = last_use.get(piece, ())
                if direction == FORWARD and not reshard_after_forward:
                    continue
                whole.difference_update(done)
                if direction == BACKWARD:
                    for u in done:
                        clock.queue(scatter_s[u])
    return Timeline(clock.now, clock.comm_free, clock.waited, clock.comm)


def piece_compute_s(
    plan: UnitPlan, forward_s: float, backward_s: float, weights: Mapping[str, float]
) -> dict:
    """Each piece's compute when only the passes' totals are known: `forward_s` and `backward_s`
    shared out by `weights[piece]` (relative, e.g. FLOPs; a piece without a weight gets the mean)."""
    out: dict[str, float] = {}
    for direction, total in ((FORWARD, forward_s), (BACKWARD, backward_s)):
        pieces = plan.pieces(direction)
        known = [weights[p.partition(".")[2]] for p in pieces if p.partition(".")[2] in weights]
        mean = sum(known) / len(known) if known else 1.0
        w = {p: weights.get(p.partition(".")[2], mean) for p in pieces}
        scale = total / sum(w.values()) if sum(w.values()) else 0.0
        out |= {p: w[p] * scale for p in pieces}
    return out


def unit_step_comm_s(
    stage: int,
    plan: UnitPlan,
    compute_s: Mapping[str, float],
    itemsize: int,
    cost,
    cores: int,
    overlapped_cores: int,
    prefetch: int = 1,
    reshard_after_forward: bool = True,
    micro_batches: int = 1,
    during: CollectiveCost | None = None,
    resume_s: float = 0.0,
) -> dict[str, float]:
    """ZeRO-2's or ZeRO-3's communication in one step on `plan.num_ranks` ranks: {"comm_s": every
    collective's own time, "exposed_s": what the step waits for beyond its compute}. `cost(collective,
    algorithm, bytes, ranks, cores)` prices a collective (`steptime_model.CollectiveCost`): during
    the passes by `during` (default `cost`: beside compute, `steptime_model.behind_compute_cost`) on
    `overlapped_cores` (the compute threads want the cores too), ZeRO-2's all-gather after the
    update by `cost` on `cores`; a wait for gathers costs `resume_s` more (`unit_timeline`)."""
    n = plan.num_ranks
    if n < 2:
        return {"comm_s": 0.0, "exposed_s": 0.0}
    passes = during or cost
    sizes = [u.size * itemsize for u in plan.units]
    gather_s = [passes("allgather", "ring", b, n, overlapped_cores) for b in sizes]
    scatter_s = [passes("reduce_scatter", "ring", b, n, overlapped_cores) for b in sizes]
    timeline = unit_timeline(
        plan,
        compute_s,
        gather_s,
        scatter_s,
        prefetch,
        reshard_after_forward,
        stage >= 3,
        micro_batches,
        resume_s,
    )
    compute = micro_batches * sum(compute_s.get(p, 0.0) for d in (FORWARD, BACKWARD) for p in plan.pieces(d))
    exposed, comm = timeline.end_s - compute, timeline.comm_s
    if stage == 2:  # the updated chunks gathered after the optimizer, nothing to hide behind
        after = sum(cost("allgather", "ring", b, n, cores) for b in sizes)
        exposed, comm = exposed + after, comm + after
    return {"comm_s": comm, "exposed_s": max(0.0, exposed)}
