"""The nouns of a chaos run: a kind of fault, a workload, the run drawn from them, what was observed
of it, the verdict on it, and under `chaos --recover` the run read as a history.

A `FaultKind` and a `Workload` carry what they do, so no code asks for one by name: a fault says
where it comes from, whom it hits, the signal it sends, what the root cause must then say and the
exit status the command must end with; a workload says its rank counts and faults, how to draw its
command line, how many posts a rank surely makes, its timeout, how it is run and how it is judged.
The tables of them are `faults.FAULTS` and `workloads.WORKLOADS`.
"""

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from playground.core.topology import host_name, place_blocks

Source = Literal["inside", "outside", "hosts"]
Target = Literal["rank", "server", "client", "launcher", "host"]


@dataclass(frozen=True)
class FaultKind:
    """One kind of fault. `source`: inside (the scenario's fault keys, fired by the faulty rank on a
    post), outside (a signal to a real pid) or hosts (a drill on emulated hosts, timed by the
    launcher). `target`: whom it hits: any rank, the KV server (rank 0, or the standalone server),
    a KV client, the launcher, or a host."""

    name: str
    what: str  # the table's line on it
    source: Source
    target: Target
    signal: int | None = None  # outside: the signal sent
    to_group: bool = False  # sent to the launcher's process group, as a terminal sends Ctrl-C
    says: str | None = None  # what the root cause's message must contain
    exit_code: int = 1  # the launched command's exit status
    interrupts: bool = False  # stops the run on purpose: the command says "interrupted" and blames no rank
    cleans_up: bool = True  # False: the launcher cannot clean up (the next launch sweeps what it left)
    found_by: str | None = None  # found by the result check at the end (a regex of the failure), not a rank
    needs_end: bool = False  # the workload must end by itself: the check that finds it runs at the end
    sets: tuple[str, ...] = ()  # scenario keys the fault needs besides its action, host and moment
    restarts: bool = False  # the standalone KV server is started again on its address
    # the standalone server hit: the errors its clients may fail with (kvclient's `error: <class>:`)
    clients_fail_with: tuple[str, ...] = ()
    standalone_what: str | None = None  # on the standalone server: a table row of its own, so described
    # a straggler, not a failure: the run ends well, and its report must name the rank (slow); drawn
    # from a stream of its own (plan.py), so the other draws of a seed stay what they were
    straggler: bool = False

    @property
    def blames(self) -> bool:
        """Whether a root cause must name who was hit (an interrupt or a killed launcher fails no rank)."""
        return self.target != "launcher"


@dataclass(frozen=True)
class History:
    """A run that recovered, read as a history (Jepsen's check of a history, `chaos --recover`): what
    it did once, what a restart made it do again, and what must be 0: done twice, never done, and
    outputs that differ from a fault-free run's. Serving counts requests (answered once, generated
    again from their prompts, answered twice, never answered, tokens that differ); training counts
    steps (committed, redone from the checkpoint, duplicated, lost, parameters that differ)."""

    asked: int = 0  # what the run had to do: requests sent, steps to take
    once: int = 0
    again: int = 0  # a restart's cost, not a fault
    twice: int = 0
    never: int = 0
    differs: int = 0
    restarts: int = 0  # restarts the run made (the fault's: at least one)
    recover_s: float | None = None  # the fault to the restarted group (or server) ready

    @property
    def holds(self) -> bool:
        return self.twice == 0 and self.never == 0 and self.differs == 0

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, d: dict) -> "History":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True)
class Recoverable:
    """How a workload runs under `chaos --recover`: the faults a restart must mend (the run is
    started with one restart allowed, or its server started again); its run read as a history
    (`history(run, observation)`; None: it had none to read) and the verdict on it (`judge`, as a
    workload's own). What the run needs besides (more setups to compare, a journal) its command
    function and runner add when `run.recover` is set."""

    faults: tuple[FaultKind, ...]
    history: Callable[["ChaosRun", "Observation"], "History | None"]
    judge: Callable[["ChaosRun", "Observation", "Verdict"], None]


@dataclass(frozen=True)
class Workload:
    """One workload chaos draws: its rank counts and the faults that apply, how it draws its size and
    command line (`command(rng, run, common)`, `common` the flags every launched run gets), how many
    posts rank r surely makes early on (an inside fault fires on one of them), the receive timeout,
    how it is run (`execute(run, out_dir)`), its exit status under a fault (`expected_exit`), and
    how it is judged (`judge(run, observation, verdict)`, filling the verdict in)."""

    name: str
    ranks: tuple[int, ...]
    faults: tuple[FaultKind, ...]
    command: Callable[[random.Random, "ChaosRun", list[str]], "ChaosRun"]
    execute: Callable[["ChaosRun", Path], "Observation"]
    judge: Callable[["ChaosRun", "Observation", "Verdict"], None]
    expected_exit: Callable[[FaultKind], int]
    posts: Callable[["ChaosRun", int], int]
    timeout_s: float
    launched: bool = True  # run by `python -m playground run` (else the standalone KV server)
    recoverable: Recoverable | None = None  # how `chaos --recover` runs it (None: it does not)


EXIT_GRACE_S = 30.0  # after the fault's moment and the run's timeout: longer is "did not exit"
RECOVER_GRACE_S = 90.0  # a recovering run also finishes its work after the restart


@dataclass(frozen=True)
class ChaosRun:
    """One drawn run. `rank` is the faulty rank (or host, for a host fault: `host`); `after_s` the
    moment of an outside fault (seconds after every rank exists) or of a timed host drill;
    `after_ops` the post an inside fault fires on; `args` the command line after `python -m playground`."""

    index: int
    seed: int
    workload: Workload
    ranks: int
    fault: FaultKind
    transport: str = ""
    hosts: int | None = None
    rank: int | None = None
    host: int | None = None
    after_s: float = 0.0
    after_ops: int = 0
    size: str = ""  # what was drawn for the workload's size, in words
    args: tuple[str, ...] = field(default_factory=tuple)
    recover: bool = False  # chaos --recover: the run must recover from its fault and lose nothing

    @property
    def timeout_s(self) -> float:
        return self.workload.timeout_s

    @property
    def exit_budget_s(self) -> float:
        """How long after the fault's moment the run may take to exit: its timeout and a grace
        (recovering: also the rest of the run, done again after a restart)."""
        return self.timeout_s + (RECOVER_GRACE_S if self.recover else EXIT_GRACE_S)

    @property
    def target_host(self) -> str:
        """The host the root cause must name ("" on one host)."""
        if not self.hosts:
            return ""
        if self.host is not None:
            return host_name(self.host)
        return host_name(place_blocks(self.ranks, self.hosts)[self.rank]) if self.rank is not None else ""

    def describe(self) -> str:
        where = (
            f" on {self.hosts} hosts" if self.hosts else (f" over {self.transport}" if self.transport else "")
        )
        if self.host is not None:
            who = f" host h{self.host}"
        elif not self.workload.launched:
            who = f" client {self.rank}" if self.rank else ""
        else:
            who = f" rank {self.rank}" if self.rank is not None else ""
        inside = self.fault.source == "inside"
        when = f" at post {self.after_ops + 1}" if inside else f" at {self.after_s:.2f}s"
        what = f"{self.workload.name} {self.ranks} ranks{where} ({self.size})"
        recovering = ", recovering" if self.recover else ""
        return f"#{self.index} {what}: {self.fault.name}{who}{when}{recovering}"

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "workload": self.workload.name,
            "ranks": self.ranks,
            "transport": self.transport,
            "hosts": self.hosts,
            "size": self.size,
            "fault": self.fault.name,
            "rank": self.rank,
            "host": self.host,
            "after_s": round(self.after_s, 3),
            "after_ops": self.after_ops,
            "command": "python -m playground " + " ".join(self.args) if self.args else "",
            "recover": self.recover,
        }


@dataclass
class Observation:
    """What a run did, as seen from outside."""

    exit_code: int | None = None  # None: it did not exit in time (then it was killed)
    fault_at: float | None = None  # CLOCK_MONOTONIC of the fault (outside: when sent; else from result.json)
    exited_at: float = 0.0
    fired: bool = True  # False: the run ended before the fault's moment
    result: dict = field(default_factory=dict)
    run_dir: Path | None = None
    stdout: str = ""
    stderr: str = ""
    launcher_pid: int = 0
    rank_pids: dict[int, int] = field(default_factory=dict)
    ports: set[int] = field(default_factory=set)
    snapshots: list[tuple[float, dict]] = field(default_factory=list)  # (monotonic, {file: (size, sha1)})
    sessions: list[int] = field(default_factory=list)  # session ids whose processes must be gone
    owners: list[int] = field(default_factory=list)  # pids whose scratch directories must be gone
    notes: list[str] = field(default_factory=list)
    clients: list[dict] = field(default_factory=list)  # standalone KV clients: rank, exit, exited_at, stderr
    kv_freed: bool | None = None  # standalone: the killed client's blocks freed after its lease
    journal_twice: int | None = None  # standalone, recovering: ids its journal answered more than once


@dataclass
class Verdict:
    ok: bool = True
    missed: bool = False  # the fault never fired (the run ended first): neither passed nor failed
    exit_code: int | None = None
    root_cause: str = ""
    root_ok: bool | None = None  # None: no root cause to judge (an interrupt, a launcher killed)
    detect_s: float | None = None
    exit_s: float | None = None
    leaks: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    history: History | None = None  # chaos --recover: the run read as a history

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "missed": self.missed,
            "exit_code": self.exit_code,
            "root_cause": self.root_cause,
            "root_ok": self.root_ok,
            "detect_s": None if self.detect_s is None else round(self.detect_s, 3),
            "exit_s": None if self.exit_s is None else round(self.exit_s, 3),
            "leaks": self.leaks,
            "problems": self.problems,
            "history": self.history.to_dict() if self.history is not None else None,
        }
