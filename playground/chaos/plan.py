"""What each chaos run is: a workload, its size and rank count, and one fault at a random moment,
all drawn from the seed and the run's number alone, so `--seed S --only K` replays run K exactly.

As Jepsen's nemesis does, the fault is chosen without regard to what the run is doing: a fault
fired from inside (a scenario's `fault:` keys, counted in the faulty rank's posts) or from outside
(a signal to a real pid: a rank, the launcher; a KV server killed or restarted; a client killed).
What each workload runs is its own (workloads.py); what each fault does, its own (faults.py).
The order of the draws below is part of every seed's meaning: change it and a replay of a run
measured before is another run. `--recover` draws from its own stream (the workloads a restart
mends, and their faults), so the plain draws of a seed stay what they were.

A straggler (a fault kind that slows a rank instead of failing it) is drawn from a stream of its
own, after the others: one run in STRAGGLER_ONE_IN whose workload can slow a rank becomes one, on
STRAGGLER_RANKS ranks (it is judged only when every rank has a CPU of its own), and every other run
of a seed stays what it was before stragglers were drawn.
"""

import random
from dataclasses import replace

from playground.chaos.faults import FAULTS, HOST_FAULTS
from playground.chaos.kinds import ChaosRun
from playground.chaos.workloads import WORKLOADS, sets


def replay_command(seed: int, index: int, hosts: bool, recover: bool = False) -> str:
    return (
        f"python -m playground chaos --seed {seed} --only {index}"
        + (" --hosts" if hosts else "")
        + (" --recover" if recover else "")
    )


def draw(seed: int, index: int, hosts: bool, recover: bool = False) -> ChaosRun:
    """Run `index` (1-based) of seed `seed`: a function of the two alone (and of `recover`)."""
    if recover:
        return _draw_recovering(seed, index, hosts)
    rng = random.Random(f"chaos-{seed}-{index}")
    workload = rng.choice(
        [w for w in WORKLOADS.values() if w.faults]  # those drawn under --recover only have none
    )  # the standalone server runs on this host, with --hosts too
    straggler = _straggler(seed, index, workload, hosts)
    if straggler is not None:
        return straggler
    faults = [f for f in workload.faults if not f.straggler]
    faults += list(HOST_FAULTS) * 2 if hosts and workload.launched else []
    fault = rng.choice(faults)
    ranks = rng.choice(workload.ranks)
    num_hosts = None
    if hosts and workload.launched:
        num_hosts = rng.choice([h for h in (2, 3) if h <= ranks] or [2])
        ranks = max(ranks, num_hosts)
    run = ChaosRun(index, seed, workload, ranks, fault, hosts=num_hosts)
    return _with_target(rng, _with_workload(rng, run))


def _draw_recovering(seed: int, index: int, hosts: bool = False) -> ChaosRun:
    """A run of `chaos --recover`: a workload a restart mends, one of the faults it must mend (with
    `hosts`, on emulated hosts, a launched workload's host faults among them: a restarted group runs
    on mended links, without the drill)."""
    rng = random.Random(f"chaos-recover-{seed}-{index}")
    workload = rng.choice([w for w in WORKLOADS.values() if w.recoverable is not None])
    assert workload.recoverable is not None
    on_hosts = hosts and workload.launched
    fault = rng.choice([*workload.recoverable.faults, *(HOST_FAULTS * 2 if on_hosts else ())])
    ranks, num_hosts = rng.choice(workload.ranks), None
    if on_hosts:
        num_hosts = rng.choice([h for h in (2, 3) if h <= ranks] or [2])
        ranks = max(ranks, num_hosts)
    run = ChaosRun(index, seed, workload, ranks, fault, hosts=num_hosts, recover=True)
    return _with_target(rng, _with_workload(rng, run))


STRAGGLER_ONE_IN = 8
STRAGGLER_RANKS = 2


def _straggler(seed: int, index: int, workload, hosts: bool) -> ChaosRun | None:
    """Run `index` as a straggler of `workload`, drawn from its own stream; None for most runs."""
    kinds = [f for f in workload.faults if f.straggler]
    rng = random.Random(f"chaos-straggler-{seed}-{index}")
    if not kinds or hosts or rng.randrange(STRAGGLER_ONE_IN):
        return None
    run = ChaosRun(index, seed, workload, STRAGGLER_RANKS, rng.choice(kinds))
    return _with_target(rng, _with_workload(rng, run))


def outside(
    workload: str,
    ranks: int,
    fault: str,
    rank: int,
    after_s: float,
    size_seed: int = 0,
    recover: bool = False,
) -> ChaosRun:
    """One run chosen rather than drawn (its size still drawn from `size_seed`): an outside fault
    (a signal to `rank`, or to the standalone server or client `rank`) `after_s` after its ranks
    exist; with `recover`, one that must recover from it. A test names the fault; the chaos command
    draws it."""
    chosen = ChaosRun(0, size_seed, WORKLOADS[workload], ranks, FAULTS[fault], recover=recover)
    run = _with_workload(random.Random(size_seed), chosen)
    return replace(run, rank=rank, after_s=after_s)


def _with_workload(rng: random.Random, run: ChaosRun) -> ChaosRun:
    """The command line of the run's workload, its size drawn."""
    hosts = ["--hosts", str(run.hosts)] if run.hosts else []
    restarts = ["--max-restarts", "1"] if run.recover else []
    common = ["--ranks", str(run.ranks), *hosts, *restarts, *sets([f"timeout_s={run.timeout_s:g}"])]
    return run.workload.command(rng, run, common)


def _with_target(rng: random.Random, run: ChaosRun) -> ChaosRun:
    """Who is hit, and when."""
    fault = run.fault
    after_s = round(rng.uniform(0.2, 2.0), 2)
    if fault.target == "host":
        assert run.hosts is not None  # host faults are drawn only with --hosts
        host = rng.randrange(run.hosts)
        keys = [f"fault.action={fault.name}", f"fault.host={host}", f"fault.after_s={after_s}", *fault.sets]
        return replace(run, host=host, after_s=after_s, args=(*run.args, *sets(keys)))
    if fault.target == "launcher":
        return replace(run, after_s=after_s)
    if not run.workload.launched:  # the standalone server (0) or client 1..N
        rank = rng.randrange(1, run.ranks + 1) if fault.target == "client" else 0
        return replace(run, rank=rank, after_s=round(rng.uniform(0.1, 1.0), 2))
    if fault.target == "server":
        rank = 0
    elif fault.target == "client":
        rank = rng.randrange(1, run.ranks)
    else:
        rank = rng.randrange(run.ranks)
    if fault.source == "inside":
        after_ops = rng.randrange(run.workload.posts(run, rank))
        keys = [
            f"fault.rank={rank}",
            f"fault.action={fault.name}",
            f"fault.after_ops={after_ops}",
            *fault.sets,
        ]
        return replace(run, rank=rank, after_ops=after_ops, args=(*run.args, *sets(keys)))
    return replace(run, rank=rank, after_s=after_s)
