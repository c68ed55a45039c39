"""Pipeline schedules as data: what each stage does, in order, over the m micro-batches of a step.

A schedule is one tuple of `Action`s per stage: (stage, "F" or "B", micro-batch). Stage s runs
F(i) once the activation of micro-batch i arrived from stage s - 1 (stage 0 has the tokens), and
B(i) once the gradient of micro-batch i's output arrived from stage s + 1 (the last stage starts
from its own loss). Between its F(i) and its B(i) a stage holds micro-batch i's activations.

- GPipe (Huang et al., 2019): every forward, then every backward, so every stage holds all m
  micro-batches' activations at the flush: peak m.
- 1F1B, PipeDream-Flush (Narayanan et al., 2021, the schedule Megatron-LM and PyTorch's
  `Schedule1F1B` run): stage s first does min(p - s - 1, m) forwards (warm-up), then alternates
  one forward and one backward (steady state), then does the backwards left (cool-down). A
  micro-batch's backward starts as soon as it can, so stage s holds at most min(p - s, m): p on
  the first stage, against GPipe's m, for the same bubble.

Both are flushes: every gradient of the step is final before the optimizer runs, so the update is
exactly one process's on the whole batch. With p equal stages of forward time f and backward time
b and free messages, both take (m + p - 1)(f + b), of which each stage computes m (f + b): the
bubble is (p - 1) / (m + p - 1) (`playground.models.pipeline.bubble_fraction`), which only more
micro-batches shrink (PTD-P's interleaving would divide it by the chunks per stage; not here).

With m < p, 1F1B has no steady state and is GPipe on every stage with m <= p - s - 1 (which holds
m either way). PyTorch's `Schedule1F1B` refuses m < p; ours runs it.

`validate` checks a schedule without processes: every micro-batch forwarded then backwarded once
per stage, and the dependencies satisfiable (executed in order with blocking receives, no stage
waits forever).
"""

from collections.abc import Callable
from typing import NamedTuple

from playground.core.errors import UsageError

FORWARD, BACKWARD = "F", "B"


class Action(NamedTuple):
    stage: int
    kind: str  # FORWARD or BACKWARD
    micro_batch: int

    def __str__(self) -> str:
        return f"{self.kind}{self.micro_batch}@{self.stage}"


Schedule = tuple[tuple[Action, ...], ...]  # one tuple of actions per stage


def gpipe(num_stages: int, num_micro_batches: int) -> Schedule:
    """All forwards, then all backwards (in micro-batch order, as torch's ScheduleGPipe)."""
    _check(num_stages, num_micro_batches)
    m = range(num_micro_batches)
    return tuple(
        tuple(Action(s, FORWARD, i) for i in m) + tuple(Action(s, BACKWARD, i) for i in m)
        for s in range(num_stages)
    )


def one_f_one_b(num_stages: int, num_micro_batches: int) -> Schedule:
    """PipeDream-Flush: warm-up forwards, one forward one backward, cool-down backwards."""
    _check(num_stages, num_micro_batches)
    out = []
    for s in range(num_stages):
        warmup = min(num_stages - s - 1, num_micro_batches)
        actions = [Action(s, FORWARD, i) for i in range(warmup)]
        for i in range(num_micro_batches - warmup):
            actions += [Action(s, FORWARD, warmup + i), Action(s, BACKWARD, i)]
        actions += [Action(s, BACKWARD, i) for i in range(num_micro_batches - warmup, num_micro_batches)]
        out.append(tuple(actions))
    return tuple(out)


def gpipe_peak(num_stages: int, stage: int, num_micro_batches: int) -> int:
    return num_micro_batches


def one_f_one_b_peak(num_stages: int, stage: int, num_micro_batches: int) -> int:
    return min(num_stages - stage, num_micro_batches)


class ScheduleKind(NamedTuple):
    name: str
    build: Callable[[int, int], Schedule]
    peak: Callable[[int, int, int], int]  # (p, stage, m) -> micro-batches held at most
    summary: str


SCHEDULES: dict[str, ScheduleKind] = {
    k.name: k
    for k in (
        ScheduleKind("gpipe", gpipe, gpipe_peak, "GPipe: all forwards, then all backwards"),
        ScheduleKind(
            "1f1b", one_f_one_b, one_f_one_b_peak, "1F1B (PipeDream-Flush): warm-up, 1F1B, cool-down"
        ),
    )
}
NAMES = tuple(SCHEDULES)


def _check(num_stages: int, num_micro_batches: int) -> None:
    if num_stages < 1 or num_micro_batches < 1:
        raise UsageError(f"need >= 1 stage and micro-batch, got {num_stages} and {num_micro_batches}")


def in_flight(actions: tuple[Action, ...]) -> list[int]:
    """Micro-batches held after each action (forwarded, not yet backwarded)."""
    held, out = 0, []
    for a in actions:
        held += 1 if a.kind == FORWARD else -1
        out.append(held)
    return out


def peak_in_flight(actions: tuple[Action, ...]) -> int:
    return max(in_flight(actions), default=0)


def ready(done: set[Action], a: Action, num_stages: int) -> bool:
    """Whether `a`'s input has arrived: the previous stage's forward, or the next stage's backward
    (the first stage's forward and the last stage's backward need none)."""
    if a.kind == FORWARD:
        return a.stage == 0 or Action(a.stage - 1, FORWARD, a.micro_batch) in done
    return a.stage == num_stages - 1 or Action(a.stage + 1, BACKWARD, a.micro_batch) in done


def validate(schedule: Schedule, num_micro_batches: int) -> None:
    """UsageError unless every stage forwards then backwards each micro-batch exactly once and the
    stages, each running its actions in order and waiting for each input, all finish."""
    p = len(schedule)
    for s, actions in enumerate(schedule):
        seen: dict[str, set[int]] = {FORWARD: set(), BACKWARD: set()}
        for a in actions:
            if a.stage != s or a.kind not in seen or not 0 <= a.micro_batch < num_micro_batches:
                raise UsageError(
                    f"stage {s}: {a} is not an action of stage {s} over {num_micro_batches} micro-batches"
                )
            if a.micro_batch in seen[a.kind]:
                raise UsageError(f"stage {s}: {a} twice")
            if a.kind == BACKWARD and a.micro_batch not in seen[FORWARD]:
                raise UsageError(f"stage {s}: {a} before its forward")
            seen[a.kind].add(a.micro_batch)
        if len(seen[FORWARD]) != num_micro_batches or len(seen[BACKWARD]) != num_micro_batches:
            raise UsageError(
                f"stage {s}: does not forward and backward all {num_micro_batches} micro-batches"
            )
    done: set[Action] = set()
    position = [0] * p
    while any(position[s] < len(schedule[s]) for s in range(p)):
        moved = False
        for s in range(p):
            while position[s] < len(schedule[s]) and ready(done, schedule[s][position[s]], p):
                done.add(schedule[s][position[s]])
                position[s] += 1
                moved = True
        if not moved:
            stuck = ", ".join(
                str(schedule[s][position[s]]) for s in range(p) if position[s] < len(schedule[s])
            )
            raise UsageError(f"the schedule deadlocks: every unfinished stage waits ({stuck})")
