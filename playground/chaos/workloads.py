"""Every workload chaos draws, in the order draws pick them: one `Workload` each, carrying its rank
counts and faults, the command line it runs (its size drawn), its timeout, how it is run and judged.

Every workload runs "forever" (more iterations than it can finish before its fault), except where
the fault needs an end (`FaultKind.needs_end`: corrupt, which the collectives' check counts at the
last iteration), so the run ends because of the fault and the checks ask whether it ended well.

Adding one: a command function (`rng, run, common` -> the run with its `args`, `transport` and
`size`), then one `Workload(...)` line at the end of `WORKLOADS` (at the end: the draws of seeds
measured before stay the same only while the earlier entries keep their places).

`chaos --recover` draws only the workloads with a `Recoverable`: the faults a restart must mend and
how the run is read as a history (recovered.py); their command function and runner see
`run.recover` and add what a run that recovers needs (serving: a second setup, so that the tokens
of the setup hit are compared with a fault-free one's, and dense generation checked; the
standalone server: a journal, clients that re-send and check their tokens; training: an end,
checkpoints, float64). A launched workload joins by passing its `recover_faults` to `_launched`,
its node putting a `history` (kinds.History's counts) in its report's data, which
`recovered.launched_history` reads with the launcher's restarts; or with a `history` of its own
(training's: the run's steps and parameters against a fault-free run of the same command).
"""

import random
from collections.abc import Callable
from dataclasses import replace

from playground.chaos import checks, kvserver, launched, recovered
from playground.chaos.faults import named
from playground.chaos.kinds import ChaosRun, FaultKind, History, Observation, Recoverable, Workload

TIMEOUT_S = 4.0  # every run's receive timeout: a hang is named after it
KV_TIMEOUT_S = 6.0  # the KV workloads' (their client's timeout too: a restarted server answers in it)
# training under --recover: steps enough to outlast a fault drawn up to 2 s in, at 2 or 4 ranks
RECOVER_STEPS = 400


def sets(pairs: list[str]) -> list[str]:
    """`--set` before each KEY=VALUE."""
    return [a for s in pairs for a in ("--set", s)]


def _collectives(rng: random.Random, run: ChaosRun, common: list[str]) -> ChaosRun:
    transport = "ipc" if run.hosts else rng.choice(["ipc", "tcp", "shm"])
    size = rng.choice(["8", "4KiB", "64KiB", "1MiB"])
    algo = rng.choice(["ring", "tree"])
    iters = 200 if run.fault.needs_end else 10_000_000
    keys = [f"params.sizes=[{size}]", f"params.algorithm={algo}", f"params.iters={iters}", "params.warmup=0"]
    args = ["run", "ring", *common, "--transport", transport, *sets(keys)]
    return replace(run, transport=transport, size=f"{algo} {size}", args=tuple(args))


def _buckets(rng: random.Random, run: ChaosRun, common: list[str]) -> ChaosRun:
    scale = rng.choice([0.01, 0.05, 0.2])
    keys = [
        f"params.scale={scale}",
        "params.iters=1000000",
        "params.warmup=0",
        "params.strategies=[bucketed]",
    ]
    args = ("run", "buckets", *common, *sets(keys))
    return replace(run, transport="ipc", size=f"lecture x{scale}", args=args)


def _train(rng: random.Random, run: ChaosRun, common: list[str]) -> ChaosRun:
    d_model = rng.choice([32, 64])
    mode = rng.choice(["per_tensor", "bucketed", "zero1"])
    steps = 30 if run.fault.needs_end else 1_000_000
    size, more = f"d_model {d_model}", []
    if run.recover:  # an end to reach, checkpoints to go on from, and float64 for a bit-for-bit check
        every = rng.choice([5, 20])
        mode = rng.choice(["per_tensor", "bucketed", "zero1", "zero2", "zero3"])  # drawn after the plain one
        steps, size = RECOVER_STEPS, f"{size}, checkpoint every {every}"
        more = ["params.dtype=float64", f"params.checkpoint_every={every}"]
    keys = [
        f"params.d_model={d_model}",
        "params.layers=1",
        "params.context=32",
        f"params.batch={4 * run.ranks}",
        f"params.steps={steps}",
        f"params.mode=[{mode}]",
        "params.sample_bytes=0",
        *more,
    ]
    return replace(run, transport="ipc", size=size, args=("run", "train", *common, *sets(keys)))


def _serving(rng: random.Random, run: ChaosRun, common: list[str]) -> ChaosRun:
    requests = rng.choice([400, 1000])
    keys = [f"params.num_requests={requests}", "params.policies=[paged]", "params.output_mean=50"]
    if run.recover:  # the setup hit beside a fault-free one (the same tokens), a sample checked densely
        keys[1:2] = ["params.policies=[paged,reserve_max]", "params.verify_every=20"]
    args = ("run", "serving", *common, *sets(keys))
    return replace(run, transport="ipc", size=f"{requests} requests", args=args)


def _serving_tensor(rng: random.Random, run: ChaosRun, common: list[str]) -> ChaosRun:
    """Tensor-parallel serving (drawn under --recover only): the decode batch on 1 and 2 shards,
    round after round; a shard killed mid-round makes every shard run that round again. Rounds of
    about 55 ms: over 2.5 s of them, so that an outside fault (0.2 to 2 s in) seldom misses."""
    rounds = rng.choice([48, 64])
    keys = ["params.shapes=[small]", "params.tensor=[2]", f"params.rounds={rounds}", "params.simulate=[]"]
    transport = "ipc" if run.hosts else "shm"  # shm is one host's: ipc inside a host, tcp across
    args = ("run", "serving-tensor", *common, "--transport", transport, *sets(keys))
    return replace(run, transport=transport, size=f"{rounds} rounds", args=args)


def _kvcache(rng: random.Random, run: ChaosRun, common: list[str]) -> ChaosRun:
    requests = rng.choice([5000, 20000])
    keys = [f"params.num_requests={requests}", f"params.policies=[{rng.choice(['paged', 'contiguous'])}]"]
    args = ("run", "kvcache", *common, *sets(keys))
    return replace(run, transport="ipc", size=f"{requests} requests", args=args)


def _kvserver(rng: random.Random, run: ChaosRun, common: list[str]) -> ChaosRun:
    """No command line of `python -m playground`: kvserver.py starts the server and its clients."""
    requests = rng.choice([6, 8])
    return replace(run, transport="tcp", size=f"{requests} generates per client")


def _rank_posts(run: ChaosRun, rank: int) -> int:
    """A collectives, buckets or training rank: hundreds of posts; a few hundred in all when the run
    must end (the finite collectives run)."""
    return 40 if run.fault.needs_end else 300


def _kv_posts(run: ChaosRun, rank: int) -> int:
    """A KV client posts only around its barriers and its result; the server a few more."""
    return 2 if rank else run.ranks


def _launcher_exit(fault: FaultKind) -> int:
    return fault.exit_code


def _server_exit(fault: FaultKind) -> int:
    """The standalone server left at the end is stopped by SIGINT (0), unless it was the one killed."""
    return -9 if fault.target == "server" and not fault.restarts else 0


def _launched(
    name: str,
    ranks: tuple[int, ...],
    faults: tuple[FaultKind, ...],
    command: Callable[[random.Random, ChaosRun, list[str]], ChaosRun],
    posts: Callable[[ChaosRun, int], int],
    timeout_s: float,
    recover_faults: tuple[FaultKind, ...] = (),
    history: Callable[[ChaosRun, Observation], History | None] = recovered.launched_history,
) -> Workload:
    """A workload `python -m playground run` runs: chaos starts it, fires the fault and judges the
    launcher's exit and root cause; with `recover_faults`, also under --recover: restarted by the
    launcher, its history (`history`: by default the node's own) checked."""
    return Workload(
        name,
        ranks,
        faults,
        command,
        launched.execute,
        checks.judge_launched,
        _launcher_exit,
        posts,
        timeout_s,
        recoverable=Recoverable(recover_faults, history, recovered.judge_recovered)
        if recover_faults
        else None,
    )


_LAUNCHER = ("Ctrl-C", "SIGTERM", "launcher SIGKILL")
_RANK_FAULTS = named("raise", "kill", "exit", "hang", "corrupt", "SIGKILL", "SIGSTOP", *_LAUNCHER, "slow")
_KV_RANK_FAULTS = named(
    "raise", "kill", "exit", "hang", "SIGSTOP", "server killed", "client killed", *_LAUNCHER
)
_UNENDING = tuple(f for f in _RANK_FAULTS if not f.needs_end)  # buckets runs until it is stopped
_KV_MENDED = named("raise", "kill", "exit", "hang", "SIGKILL", "SIGSTOP", "server killed", "client killed")
_SHARD_MENDED = named("raise", "kill", "exit", "SIGKILL", "SIGSTOP")
_TRAIN_MENDED = named("raise", "kill", "exit", "hang", "SIGKILL", "SIGSTOP")

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        _launched("collectives", (2, 3, 4, 5, 6), _RANK_FAULTS, _collectives, _rank_posts, TIMEOUT_S),
        _launched("buckets", (2, 3, 4), _UNENDING, _buckets, _rank_posts, TIMEOUT_S),
        _launched(
            "train",
            (2, 4),
            _RANK_FAULTS,
            _train,
            _rank_posts,
            TIMEOUT_S,
            _TRAIN_MENDED,
            recovered.training_history,
        ),
        _launched("serving", (2, 3), _KV_RANK_FAULTS, _serving, _kv_posts, KV_TIMEOUT_S, _KV_MENDED),
        _launched("kvcache", (2, 3, 4), _KV_RANK_FAULTS, _kvcache, _kv_posts, KV_TIMEOUT_S),
        Workload(
            "kvserver",
            (2, 3),
            named("client killed", "server killed", "server restarted"),
            _kvserver,
            kvserver.execute,
            checks.judge_standalone,
            _server_exit,
            _kv_posts,
            KV_TIMEOUT_S,
            launched=False,
            recoverable=Recoverable(
                named("server restarted"), recovered.standalone_history, recovered.judge_recovered
            ),
        ),
        Workload(  # under --recover only: no fault of the plain draws
            "serving-tensor",
            (2,),
            (),
            _serving_tensor,
            launched.execute,
            checks.judge_launched,
            _launcher_exit,
            _rank_posts,
            TIMEOUT_S,
            recoverable=Recoverable(_SHARD_MENDED, recovered.launched_history, recovered.judge_recovered),
        ),
    )
}
