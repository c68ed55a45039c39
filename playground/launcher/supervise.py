"""Restarts: a failed group started again from the newest whole checkpoint, each restart measured.

torchelastic's agent, inside our launcher (`Launcher(..., supervisor=Supervisor(...))`): when a rank
of the group fails (raises, exits, is killed, hangs, its host dies), the launcher stops the whole
group as it always does; the supervisor then records why, moves the group's logs aside
(`generations/<n>/`), mends cut host links, writes the manifest of a checkpoint whose every part was
written but whose rank 0 died before it could (`store.complete`), picks the newest whole checkpoint
of this run (`store.newest_whole`: every part's checksum checked, a newer torn or corrupted one
skipped and said), removes the ones no writer finished and those newer than it (`store.sweep`,
`store.discard_after`: the next group writes them again), and the launcher starts the next
generation, whose ranks are told the checkpoint (PLAYGROUND_RESUME). After `recovery.max_restarts`
restarts, or for a failure another start cannot mend (the ranks resolved different scenarios, a
checkpoint of another run), the run ends with every generation's failure.

Each restart's record splits the time to recover (`Restart`):

    detection   the fault (a drill's or the mtbf drill's own time; unknown for a kill from outside)
                -> the launcher's first failure
    teardown    -> every rank of the group killed and reaped, its scratch removed
    restart     -> the next group forked, its checkpoint chosen and verified, every rank registered
                   (the table sent): restart and rendezvous
    load        the slowest rank's read of its part (checksum, copy into its buffers)
    warm-up     -> the end of the first step after the load, less the load and one usual step: the
                   model and strategy built again, threads started, cold caches

and the steps redone: from the checkpoint's step to the last step rank 0 reported done.

With `recovery.way: peer` or `shrink` the group is not stopped (`live_recovery`): the launcher
asks the supervisor at the first failure, which records a live recovery in the same list (`way`,
the ranks replaced or lost, the survivor the state came from, the steps redone) and counts it
against `max_restarts`; re-form and transfer take the restart and load columns. A failure it
cannot recover live (a rank already finished, no survivor, StateLost) stops the group as above;
a shrunk group is then not restarted.

`recovery.mtbf_s` is a drill: at an exponential time of that mean after each generation's
rendezvous, the supervisor SIGKILLs a rank drawn at random among the group's (from outside, as a
dying machine would).
"""

import dataclasses
import os
import random
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from playground.checkpoint import store
from playground.config.scenario import Scenario
from playground.core.errors import CheckpointRefused, ScenarioMismatch, StateLost
from playground.rendezvous.coordinator import Coordinator
from playground.rendezvous.failures import LaunchOutcome

NOT_MENDED_BY_A_RESTART = (ScenarioMismatch.__name__, CheckpointRefused.__name__)
NOT_MENDED_LIVE = (*NOT_MENDED_BY_A_RESTART, StateLost.__name__)  # a restart from a checkpoint may mend it
GENERATIONS = "generations"  # a run directory's folder of the failed generations' rank logs


@dataclass
class Restart:
    """One restart: why, from where, and its times on this host's CLOCK_MONOTONIC."""

    generation: int  # the generation that failed
    rank: int | None
    why: str
    step_reached: int  # the last step rank 0 reported done (over every run of the node)
    detected_at: float
    stopped_at: float
    fault_at: float | None = None  # when the fault struck, when known (a drill's)
    checkpoint_step: int | None = None  # what the next generation went on from (None: the start)
    table_at: float | None = None  # every rank of the next generation registered
    load_s: float | None = None
    first_step_at: float | None = None
    usual_step_s: float | None = None
    failures: list[str] = field(default_factory=list)
    way: str = "restart"  # restart: every rank from a checkpoint; peer: a replacement from a survivor
    replaced: list[int] = field(default_factory=list)  # peer: the ranks started again
    steps_redone: int | None = None  # peer: the most any rank did again (its reports)
    source_rank: int | None = None  # peer: the survivor that sent its state
    step_from: int | None = None  # peer: the step the group went on from

    def phases(self) -> dict:
        """The time to recover split (module doc), seconds; None where not measured."""

        def gap(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else max(0.0, b - a)

        warm = gap(self.table_at, self.first_step_at)
        if warm is not None:
            warm = max(0.0, warm - (self.load_s or 0.0) - (self.usual_step_s or 0.0))
        phases = {
            "detection_s": gap(self.fault_at, self.detected_at),
            "teardown_s": gap(self.detected_at, self.stopped_at),
            "restart_s": gap(self.stopped_at, self.table_at),
            "load_s": self.load_s,
            "warmup_s": warm,
        }
        known = [v for v in phases.values() if v is not None]
        return {**phases, "total_s": sum(known) if known else None}

    def to_dict(self) -> dict:
        redone = None if self.checkpoint_step is None else self.step_reached - self.checkpoint_step
        if self.way in ("peer", "shrink"):
            redone = self.steps_redone
        elif redone is None:
            redone = self.step_reached
        return {
            "generation": self.generation,
            "way": self.way,
            "rank": self.rank,
            "why": self.why,
            "step_reached": self.step_reached,
            "checkpoint_step": self.checkpoint_step,
            "steps_redone": redone,
            **(
                {"replaced": self.replaced, "source_rank": self.source_rank, "step_from": self.step_from}
                if self.way in ("peer", "shrink")
                else {}
            ),
            **{k: None if v is None else round(v, 4) for k, v in self.phases().items()},
            "failures": self.failures,
        }


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Supervisor:
    """The restart policy of one run (module doc): `first_env`, `arm` and `after_generation` are the
    launcher's hooks, `outcome` the run's outcome with its restarts."""

    def __init__(
        self,
        scenario: Scenario,
        run_dir: Path,
        resume: store.Checkpoint | None = None,
        say: Callable[[str], None] = _stderr,
    ):
        self.scenario, self.run_dir, self.resume, self.say = scenario, Path(run_dir), resume, say
        self.recovery = scenario.recovery
        contract = scenario.contract
        self.identity = (
            contract.checkpoint_identity(scenario.params, scenario.ranks)
            if contract.checkpoint_identity
            else None
        )
        self.root = store.checkpoints_dir(run_dir)
        self.restarts: list[Restart] = []
        self.rng = random.Random(self.recovery.seed)
        self.killed: dict[int, float] = {}  # generation -> when the mtbf drill killed one of its ranks
        self.started_from: dict[int, int] = {
            0: resume.step if resume is not None else 0
        }  # generation -> step

    def first_env(self) -> dict:
        """The first generation's: a resumed run's checkpoint (the stopped run's logs kept aside first)."""
        if self.resume is not None:
            self._keep_logs()
        return self._env(self.resume)

    @staticmethod
    def _env(checkpoint: store.Checkpoint | None) -> dict:
        return {"PLAYGROUND_RESUME": str(checkpoint.path)} if checkpoint is not None else {}

    # -- the mtbf drill ----------------------------------------------------------------------
    def arm(self, coordinator: Coordinator, generation: int) -> None:
        """The mtbf drill's next kill in this generation, if the scenario asks for one."""
        mtbf_s = self.recovery.mtbf_s
        if mtbf_s is None:
            return
        after_s, rank = self.rng.expovariate(1.0 / mtbf_s), self.rng.randrange(coordinator.n)
        coordinator.timers.append((after_s, lambda: self._kill(coordinator, generation, rank, after_s)))

    def _kill(self, coordinator: Coordinator, generation: int, rank: int, after_s: float) -> None:
        pid = coordinator.pids.get(rank)
        if pid is None or rank in coordinator.reported or coordinator.abort_deadline is not None:
            return  # done already, or the group is failing anyway
        self.killed[generation] = time.monotonic()
        coordinator.record(f"rank {rank} SIGKILLed by the mtbf drill ({after_s:.2f}s after rendezvous)")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    # -- after each generation ---------------------------------------------------------------
    def after_generation(self, generation: int, coordinator: Coordinator, cluster=None) -> dict | None:
        """The group of `generation` has stopped: the environment of the next one's ranks, or None
        to end the run (it finished, restarts are used up, or a restart would not help)."""
        self._complete_last(coordinator)
        outcome = coordinator.outcome()
        root = outcome.root_cause
        if outcome.ok or root is None or self.recovery.way == "shrink":
            return None  # a shrunk group is not restarted: a checkpoint of fewer ranks would not fit
        restart = self._record(generation, coordinator, outcome)
        if len(self.restarts) >= self.recovery.max_restarts or root.error_type in NOT_MENDED_BY_A_RESTART:
            return None
        self.restarts.append(restart)
        self._keep_logs()
        if cluster is not None:
            for host in cluster.restore_links():
                self.say(f"restart: host h{host}'s link is up again")
        checkpoint = self._checkpoint()
        restart.checkpoint_step = checkpoint.step if checkpoint is not None else None
        self.started_from[generation + 1] = checkpoint.step if checkpoint is not None else 0
        where = (
            f"checkpoint step {checkpoint.step}"
            if checkpoint is not None
            else "the start (no whole checkpoint)"
        )
        self.say(
            f"restart {len(self.restarts)}/{self.recovery.max_restarts}: {root.headline()}; "
            f"generation {generation + 1} goes on from {where} (step {restart.step_reached} reached)"
        )
        return self._env(checkpoint)

    def _record(self, generation: int, coordinator: Coordinator, outcome, **extra) -> Restart:
        """The record of a failure of `generation` about to be recovered from (its root cause's)."""
        root = outcome.root_cause
        return Restart(
            generation,
            root.rank,
            root.headline(),
            max(coordinator.progress_done, self.started_from.get(generation, 0)),
            detected_at=coordinator.t0 + root.at_s,
            stopped_at=time.monotonic(),
            fault_at=self._fault_at(coordinator, generation),
            failures=[f.headline() for f in outcome.failures],
            **extra,
        )

    # -- live recovery (recovery.way: peer) -------------------------------------------------
    def live_recovery(self, generation: int, coordinator: Coordinator, gone: set[int]) -> list[int] | None:
        """A rank of `generation` failed and the survivors still run (`gone`: the ranks whose process
        ended): the ranks to start again beside the survivors, recorded as a recovery, or None when
        the group must stop instead (restarts used up, a failure another start cannot mend, a rank
        already done, or no survivor left to copy from)."""
        outcome = coordinator.outcome()
        root = outcome.root_cause
        if self.recovery.way not in ("peer", "shrink") or root is None:
            return None
        replaced = sorted({f.rank for f in outcome.failures if not f.secondary} | gone)
        if self.recovery.way == "shrink" and len(replaced) != 1:
            return None  # the survivors renumber around the one rank their abort named
        if (
            len(self.restarts) >= self.recovery.max_restarts
            or root.is_waiting  # a rank timed out waiting: the one at fault may be silent, blamed only once the abort settles
            or root.error_type in NOT_MENDED_LIVE
            or coordinator.reported - set(replaced)  # a survivor has finished or reported an error
            or len(replaced) >= self.scenario.ranks
        ):
            return None
        self._complete_last(coordinator)
        recovery = self._record(generation, coordinator, outcome, way=self.recovery.way, replaced=replaced)
        self.restarts.append(recovery)
        self._keep_logs(replaced)
        ranks = ", ".join(map(str, replaced))
        how = (
            f"rank {ranks} started again, the others re-form generation {generation + 1}"
            if self.recovery.way == "peer"
            else f"the group goes on without rank {ranks} as generation {generation + 1}, renumbered"
        )
        self.say(
            f"recovery {len(self.restarts)}/{self.recovery.max_restarts} ({self.recovery.way}): "
            f"{root.headline()}; {how} and the newest state is copied from a survivor "
            f"(step {recovery.step_reached} reached)"
        )
        return replaced

    def _checkpoint(self) -> store.Checkpoint | None:
        """The newest whole checkpoint of this run, once the torn ones are gone (no writer lives now)."""
        if self.identity is None:
            return None
        for path in store.candidates(self.root):
            if store.complete(path, self.identity):
                self.say(f"restart: {path.name} had every part on the disk: its manifest written now")
        found, skipped = store.newest_whole(self.root, self.identity)
        for line in skipped:
            self.say(f"restart: skipped {line}")
        store.discard_after(self.root, found.step if found is not None else None)
        store.sweep(self.root)
        return found

    def _fault_at(self, coordinator: Coordinator, generation: int) -> float | None:
        """When the fault struck, if we know: the mtbf drill's kill, or a rank drill's firing."""
        if generation in self.killed:
            return self.killed[generation]
        fired = [e for e in coordinator.events if str(e.get("event", "")).startswith("fault ")]
        return coordinator.t0 + fired[0]["at_s"] if fired else None

    def _complete_last(self, coordinator: Coordinator) -> None:
        """The previous restart's times from the generation it started: its rendezvous, its ranks'
        reports of their load and first step (the slowest rank's)."""
        if not self.restarts or self.restarts[-1].generation != coordinator.generation - 1:
            return
        last = self.restarts[-1]
        last.table_at = coordinator.started_at
        reports = list(coordinator.resumed.values())
        if reports:
            last.load_s = max(r.get("load_s", 0.0) for r in reports)
        if last.way in ("peer", "shrink") and reports:
            last.steps_redone = max(r.get("steps_redone", 0) for r in reports)
            last.step_from = max(r["step"] for r in reports)
            sources = [r["source_rank"] for r in reports if "source_rank" in r]
            last.source_rank = sources[0] if sources else None
            self.started_from[coordinator.generation] = last.step_from
        if reports and all("first_step_at" in r for r in reports):
            last.first_step_at = max(r["first_step_at"] for r in reports)
            usual = [r["usual_step_s"] for r in reports if r.get("usual_step_s") is not None]
            last.usual_step_s = max(usual) if usual else None

    def _keep_logs(self, ranks: list[int] | None = None) -> None:
        """The last generation's rank logs and stacks into generations/<n>/ (n counts over every
        launch of this run directory, `run --resume` included), so the next one's start afresh;
        `ranks`: only theirs (a live recovery's replaced ranks: the survivors' logs go on)."""
        base = self.run_dir / GENERATIONS
        n = 0
        while (base / str(n)).exists():
            n += 1
        target = base / str(n)
        target.mkdir(parents=True)
        for path in [*self.run_dir.glob("rank-*.jsonl"), *self.run_dir.glob("rank-*.stack")]:
            if ranks is None or int(path.name.split("-")[1].split(".")[0]) in ranks:
                shutil.move(str(path), target / path.name)

    def outcome(self, last: LaunchOutcome) -> LaunchOutcome:
        """The run's outcome: the last generation's, with every restart and, when it failed, the
        failures of the generations before it named too."""
        return dataclasses.replace(last, restarts=[r.to_dict() for r in self.restarts])
