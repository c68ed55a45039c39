"""What each chaos run is: a workload, its size and rank count, and one fault at a random moment,
all drawn from the seed and the run's number alone, so `--seed S --only K` replays run K exactly.

As Jepsen's nemesis does, the fault is chosen without regard to what the run is doing: a fault
fired from inside (a scenario's `fault:` keys, counted in the faulty rank's posts) or from outside
(a signal to a real pid: a rank, the launcher; a KV server killed or restarted; a client killed).
Every workload runs "forever" (more iterations than it can finish before its fault), except where
the fault needs an end (corrupt: the collectives' check counts wrong elements to the last
iteration), so the run ends because of the fault, and the checks ask whether it ended well.
"""

import random
from dataclasses import dataclass, field, replace

from playground.core.topology import host_name, place_blocks

TIMEOUT_S = 4.0  # every run's receive timeout: a hang is named after it
KV_TIMEOUT_S = 6.0  # the KV workloads' (their client's timeout too: a restarted server answers in it)

# fault kind -> (where it comes from, what it does); the table's rows, in this order
FAULTS = {
    "raise": "inside: the rank raises FaultInjected on a post",
    "kill": "inside: the rank SIGKILLs itself on a post",
    "exit": "inside: the rank exits with status 3 on a post",
    "hang": "inside: the rank sleeps forever in a post",
    "corrupt": "inside: the rank flips a bit of an array it sends",
    "SIGKILL": "outside: SIGKILL to a rank",
    "SIGSTOP": "outside: SIGSTOP to a rank",
    "server killed": "outside: SIGKILL to the KV server (rank 0 of serving or kvcache; or the standalone one)",
    "client killed": "outside: SIGKILL to a KV client mid-request (a client rank; or a standalone client)",
    "server restarted": "outside: the standalone KV server SIGKILLed and started again on its address",
    "Ctrl-C": "outside: SIGINT to the launcher's process group, as a terminal sends it",
    "SIGTERM": "outside: SIGTERM to the launcher",
    "launcher SIGKILL": "outside: SIGKILL to the launcher",
    "cut_link": "hosts: a host's link taken down",
    "kill_host": "hosts: every rank of a host SIGKILLed",
    "delay_link": "hosts: a host's link delayed past the receive timeout",
}
INSIDE = ("raise", "kill", "exit", "hang", "corrupt")
HOST_FAULTS = ("cut_link", "kill_host", "delay_link")
LAUNCHER_FAULTS = ("Ctrl-C", "SIGTERM", "launcher SIGKILL")
KV_SERVER_FAULTS = ("client killed", "server killed", "server restarted")


@dataclass(frozen=True)
class Workload:
    name: str
    ranks: tuple[int, ...]  # the rank counts drawn from
    faults: tuple[str, ...]  # the fault kinds that apply
    launched: bool = True  # run by `python -m playground run` (else the standalone KV server)


_RANK_FAULTS = (*INSIDE, "SIGKILL", "SIGSTOP", *LAUNCHER_FAULTS)
_KV_RANK_FAULTS = (
    "raise",
    "kill",
    "exit",
    "hang",
    "SIGSTOP",
    "server killed",
    "client killed",
    *LAUNCHER_FAULTS,
)
WORKLOADS = (
    Workload("collectives", (2, 3, 4, 5, 6), _RANK_FAULTS),
    Workload("buckets", (2, 3, 4), tuple(f for f in _RANK_FAULTS if f != "corrupt")),
    Workload("train", (2, 4), _RANK_FAULTS),
    Workload("serving", (2, 3), _KV_RANK_FAULTS),
    Workload("kvcache", (2, 3, 4), _KV_RANK_FAULTS),
    Workload("kvserver", (2, 3), KV_SERVER_FAULTS, launched=False),
)
BY_NAME = {w.name: w for w in WORKLOADS}


@dataclass(frozen=True)
class ChaosRun:
    """One drawn run. `rank` is the faulty rank (or host, for a host fault: `host`); `after_s` the
    moment of an outside fault (seconds after every rank exists) or of a timed host drill;
    `after_ops` the post an inside fault fires on; `args` the command line after `python -m playground`."""

    index: int
    seed: int
    workload: str
    ranks: int
    fault: str
    transport: str = ""
    hosts: int | None = None
    rank: int | None = None
    host: int | None = None
    after_s: float = 0.0
    after_ops: int = 0
    size: str = ""  # what was drawn for the workload's size, in words
    args: tuple[str, ...] = field(default_factory=tuple)

    @property
    def timeout_s(self) -> float:
        return KV_TIMEOUT_S if self.workload in ("serving", "kvcache", "kvserver") else TIMEOUT_S

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
        elif self.workload == "kvserver":
            who = f" client {self.rank}" if self.rank else ""
        else:
            who = f" rank {self.rank}" if self.rank is not None else ""
        when = f" at post {self.after_ops + 1}" if self.fault in INSIDE else f" at {self.after_s:.2f}s"
        return (
            f"#{self.index} {self.workload} {self.ranks} ranks{where} ({self.size}): {self.fault}{who}{when}"
        )

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "workload": self.workload,
            "ranks": self.ranks,
            "transport": self.transport,
            "hosts": self.hosts,
            "size": self.size,
            "fault": self.fault,
            "rank": self.rank,
            "host": self.host,
            "after_s": round(self.after_s, 3),
            "after_ops": self.after_ops,
            "command": "python -m playground " + " ".join(self.args) if self.args else "",
        }


def replay_command(seed: int, index: int, hosts: bool) -> str:
    return f"python -m playground chaos --seed {seed} --only {index}" + (" --hosts" if hosts else "")


def draw(seed: int, index: int, hosts: bool) -> ChaosRun:
    """Run `index` (1-based) of seed `seed`: a function of the two alone."""
    rng = random.Random(f"chaos-{seed}-{index}")
    workload = rng.choice(WORKLOADS)  # the standalone server runs on this host, with --hosts too
    faults = list(workload.faults) + (list(HOST_FAULTS) * 2 if hosts and workload.launched else [])
    fault = rng.choice(faults)
    ranks = rng.choice(workload.ranks)
    num_hosts = None
    if hosts and workload.launched:
        num_hosts = rng.choice([h for h in (2, 3) if h <= ranks] or [2])
        ranks = max(ranks, num_hosts)
    run = ChaosRun(index, seed, workload.name, ranks, fault, hosts=num_hosts)
    return _with_target(rng, _with_workload(rng, run))


def outside(workload: str, ranks: int, fault: str, rank: int, after_s: float, size_seed: int = 0) -> ChaosRun:
    """One run chosen rather than drawn (its size still drawn from `size_seed`): an outside fault
    (a signal to `rank`, or to the standalone server or client `rank`) `after_s` after its ranks
    exist. A test names the fault; the chaos command draws it."""
    run = _with_workload(random.Random(size_seed), ChaosRun(0, size_seed, workload, ranks, fault))
    return replace(run, rank=rank, after_s=after_s)


def _with_target(rng: random.Random, run: ChaosRun) -> ChaosRun:
    """Who is hit, and when."""
    after_s = round(rng.uniform(0.2, 2.0), 2)
    if run.fault in HOST_FAULTS:
        host = rng.randrange(run.hosts)
        sets = [f"fault.action={run.fault}", f"fault.host={host}", f"fault.after_s={after_s}"]
        if run.fault == "delay_link":
            sets.append("fault.delay=30s")
        return replace(run, host=host, after_s=after_s, args=(*run.args, *_sets(sets)))
    if run.fault in LAUNCHER_FAULTS:
        return replace(run, after_s=after_s)
    if run.workload == "kvserver":
        return replace(run, rank=rng.randrange(1, run.ranks + 1) if run.fault == "client killed" else 0,
                       after_s=round(rng.uniform(0.1, 1.0), 2))  # fmt: skip
    if run.fault == "server killed":
        rank = 0
    elif run.fault == "client killed":
        rank = rng.randrange(1, run.ranks)
    else:
        rank = rng.randrange(run.ranks)
    if run.fault in INSIDE:
        after_ops = rng.randrange(_posts(run, rank))
        sets = [f"fault.rank={rank}", f"fault.action={run.fault}", f"fault.after_ops={after_ops}"]
        return replace(run, rank=rank, after_ops=after_ops, args=(*run.args, *_sets(sets)))
    return replace(run, rank=rank, after_s=after_s)


def _posts(run: ChaosRun, rank: int) -> int:
    """How many posts the faulty rank surely makes early in the run: the inside fault fires on one
    of them (a KV client posts only around its barriers and its result; the server a few more)."""
    if run.workload in ("serving", "kvcache"):
        return 2 if rank else run.ranks
    if run.fault == "corrupt":
        return 40  # the finite collectives run has a few hundred posts per rank
    return 300


def _sets(pairs: list[str]) -> list[str]:
    return [a for s in pairs for a in ("--set", s)]


def _with_workload(rng: random.Random, run: ChaosRun) -> ChaosRun:
    """The command line of the run's workload, its size drawn."""
    n, timeout = run.ranks, run.timeout_s
    hosts = ["--hosts", str(run.hosts)] if run.hosts else []
    common = ["--ranks", str(n), *hosts, *_sets([f"timeout_s={timeout:g}"])]
    if run.workload == "collectives":
        transport = "ipc" if run.hosts else rng.choice(["ipc", "tcp", "shm"])
        size = rng.choice(["8", "4KiB", "64KiB", "1MiB"])
        algo = rng.choice(["ring", "tree"])
        iters = 200 if run.fault == "corrupt" else 10_000_000
        sets = [
            f"params.sizes=[{size}]",
            f"params.algorithm={algo}",
            f"params.iters={iters}",
            "params.warmup=0",
        ]
        args = ["run", "ring", *common, "--transport", transport, *_sets(sets)]
        return replace(run, transport=transport, size=f"{algo} {size}", args=tuple(args))
    if run.workload == "buckets":
        scale = rng.choice([0.01, 0.05, 0.2])
        sets = [
            f"params.scale={scale}",
            "params.iters=1000000",
            "params.warmup=0",
            "params.strategies=[bucketed]",
        ]
        return replace(
            run, transport="ipc", size=f"lecture x{scale}", args=("run", "buckets", *common, *_sets(sets))
        )
    if run.workload == "train":
        d_model = rng.choice([32, 64])
        sets = [
            f"params.d_model={d_model}",
            "params.layers=1",
            "params.context=32",
            f"params.batch={4 * n}",
            "params.steps=1000000",
            f"params.mode=[{rng.choice(['per_tensor', 'bucketed', 'zero1'])}]",
            "params.sample_bytes=0",
        ]
        return replace(
            run, transport="ipc", size=f"d_model {d_model}", args=("run", "train", *common, *_sets(sets))
        )
    if run.workload == "serving":
        requests = rng.choice([400, 1000])
        sets = [f"params.num_requests={requests}", "params.policies=[paged]", "params.output_mean=50"]
        return replace(
            run, transport="ipc", size=f"{requests} requests", args=("run", "serving", *common, *_sets(sets))
        )
    if run.workload == "kvcache":
        requests = rng.choice([5000, 20000])
        sets = [f"params.num_requests={requests}", f"params.policies=[{rng.choice(['paged', 'contiguous'])}]"]
        return replace(
            run, transport="ipc", size=f"{requests} requests", args=("run", "kvcache", *common, *_sets(sets))
        )
    requests = rng.choice([6, 8])
    return replace(run, transport="tcp", size=f"{requests} generates per client")
