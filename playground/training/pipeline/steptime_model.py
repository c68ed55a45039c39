"""A pipeline step's time, predicted by running its schedule in simulated time.

Each stage runs its actions in order (`schedules`); an action starts when the stage is free and its
input has arrived. Its compute is the stage's calibrated forward or backward time for one
micro-batch; the message it then sends (the activation forward, its gradient backward) arrives
`send_s` later (alpha + bytes / beta on the run's link). When more stages compute at once than
there are `cores`, they share them equally (processor sharing: k stages on c < k cores each run at
c / k of full speed), which is what four stage processes on two cores do.

From the simulated timeline: the makespan (the step's pipeline time) and the bubble, the share of
stage x makespan that no stage computed: 1 - sum(compute) / (p x makespan). With equal stages, free
messages and a core per stage this is exactly (p - 1) / (m + p - 1) for both GPipe and 1F1B (the
tests check the closed forms).

After the pipeline a step still sends the tied embedding's gradient between the first and the last
stage and runs the data-parallel mode's collectives (`after_pipeline_s`), then the optimizer.
"""

from dataclasses import dataclass

from playground.core.errors import UsageError
from playground.training.pipeline.schedules import BACKWARD, FORWARD, Action, Schedule
from playground.training.steptime_model import comm_time_s
from playground.transformer.plan import pipeline_plan

EPS_S = 1e-15


@dataclass(frozen=True)
class Simulated:
    """Each action's (start, end) in seconds from the step's start, and the makespan."""

    spans: dict[Action, tuple[float, float]]
    makespan_s: float

    def busy_s(self, stage: int) -> float:
        return sum(e - s for a, (s, e) in self.spans.items() if a.stage == stage)

    @property
    def bubble(self) -> float:
        stages = {a.stage for a in self.spans}
        if self.makespan_s <= 0:
            return 0.0
        return 1 - sum(self.busy_s(s) for s in stages) / (len(stages) * self.makespan_s)


def _arrival(a: Action, num_stages: int, ends: dict[Action, float], send_s: float) -> float | None:
    """When `a`'s input is there (None: not yet known)."""
    if a.kind == FORWARD:
        if a.stage == 0:
            return 0.0
        src = Action(a.stage - 1, FORWARD, a.micro_batch)
    else:
        if a.stage == num_stages - 1:
            return 0.0
        src = Action(a.stage + 1, BACKWARD, a.micro_batch)
    return ends[src] + send_s if src in ends else None


def simulate(
    schedule: Schedule,
    forward_s: list[float],
    backward_s: list[float],
    send_s: float = 0.0,
    cores: float | None = None,
) -> Simulated:
    """Run `schedule` with stage s's compute `forward_s[s]`, `backward_s[s]` per micro-batch, each
    message `send_s`, on `cores` shared cores (None: one per stage; a fraction: the replicas of a
    data x pipeline grid share the machine's cores)."""
    p = len(schedule)
    if len(forward_s) != p or len(backward_s) != p:
        raise UsageError(
            f"need one forward and one backward time per stage ({p}), got {len(forward_s)}, {len(backward_s)}"
        )
    if cores is not None and not cores > 0:
        raise UsageError(f"cores must be > 0, got {cores}")
    position = [0] * p
    running: dict[int, list] = {}  # stage -> [action, work left in seconds of a full core, start]
    ends: dict[Action, float] = {}
    spans: dict[Action, tuple[float, float]] = {}
    t = 0.0
    while True:
        for s in range(p):
            if s in running or position[s] >= len(schedule[s]):
                continue
            a = schedule[s][position[s]]
            at = _arrival(a, p, ends, send_s)
            if at is not None and at <= t + EPS_S:
                running[s] = [a, forward_s[s] if a.kind == FORWARD else backward_s[s], t]
        if not running and all(position[s] >= len(schedule[s]) for s in range(p)):
            break
        pending = [
            at
            for s in range(p)
            if s not in running and position[s] < len(schedule[s])
            if (at := _arrival(schedule[s][position[s]], p, ends, send_s)) is not None and at > t
        ]
        if not running:
            if not pending:
                raise UsageError("the schedule deadlocks: no stage can start")
            t = min(pending)
            continue
        rate = 1.0 if cores is None else min(1.0, cores / len(running))
        dt = min(work for _, work, _ in running.values()) / rate
        if pending:
            dt = min(dt, min(pending) - t)
        t += dt
        for s in list(running):
            entry = running[s]
            entry[1] -= dt * rate
            if entry[1] <= EPS_S:
                a = entry[0]
                ends[a] = t
                spans[a] = (entry[2], t)
                position[s] += 1
                del running[s]
    return Simulated(spans, max(ends.values(), default=0.0))


def predict(
    schedule: Schedule, calibration: list[dict], message_bytes: int, link, cores: float | None
) -> Simulated:
    """The step's pipeline from each stage's calibrated {"forward_s", "backward_s"} (in stage order)
    and messages of `message_bytes` on `link` (an alpha-beta `Link`)."""
    send_s = link.message_time_s(message_bytes) if len(schedule) > 1 else 0.0
    forward = [c["forward_s"] for c in calibration]
    return simulate(schedule, forward, [c["backward_s"] for c in calibration], send_s, cores)


def after_pipeline_s(setup, mode, num_stages: int, replicas: int, link) -> float:
    """What a step does after the pipeline, for its slowest stage: the tied embedding's message (the
    first and last stage) and the data-parallel mode's collectives over the replicas
    (`training.steptime_model.comm_time_s` on the mode's buckets of that stage's gradients)."""
    config = setup.config
    itemsize = config.np_dtype.itemsize
    worst = 0.0
    for plan in pipeline_plan(config, num_stages):
        layout = plan.layout(config)
        tied = 0.0
        if plan.tied_partner is not None:
            tied = link.message_time_s(config.vocab_size * config.d_model * itemsize)
        sizes = [s.size * itemsize for s in reversed(layout.specs)]
        buckets = mode.plan(sizes, setup.bucket_cap_bytes, setup.first_bucket_bytes)
        total = layout.num_elements * itemsize
        comm = comm_time_s(mode, [b.num_bytes for b in buckets], total, replicas, link, setup.algorithm)
        worst = max(worst, tied + comm)
    return worst
