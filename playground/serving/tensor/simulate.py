"""The decode batch on t simulated ranks: the launched ranks' own code (`decode.decode_batch`: the
model's shard, the engine, the tensor all-reduces through the collectives) run by `SimWorld` in
virtual time, to more ranks than this machine has cores.

What is simulated and what is measured:
- communication: every message of every all-reduce crosses the simulator's network (alpha + bytes /
  beta on the run's calibrated link, a port per rank, `sim/network.py`), with real bytes, so the
  shards really sum their partial products and generate real tokens (checked against one process);
- compute: measured, as SimGrid's SMPI does for the computation between two MPI calls: each rank's
  own CPU time (`time.thread_time`) from the end of one communication to the start of the next,
  charged to its virtual clock (`SimEngine.compute`). The simulated ranks run one at a time in this
  one thread with one BLAS thread, so that is the time a rank with a core of its own would take for
  its shard's work, the per-call costs of small products included; the model's compute / t leaves
  them out.

A shard must compute whole heads: beyond the model's heads the simulation runs the same widths cut
into more heads (`split_heads`: the same parameters, products and bytes, another model's attention,
so its tokens are compared with its own one-rank run, not the original's).
"""

import dataclasses
import math
import statistics
import time

from playground.models.costs import Link
from playground.serving.tensor.decode import DecodeBatch, decode_batch, decode_times
from playground.sim.network import Machine
from playground.sim.transport import SimWorld
from playground.transformer import ModelConfig, pin_blas_threads
from playground.transformer.init import init_params


class Bursts:
    """One simulated rank's compute, measured as it runs and charged to its clock (SMPI's online
    simulation): `clock()` for the engine, `around(fn)` for the communication."""

    def __init__(self, comm):
        self.engine, self.rank = comm.transport.engine, comm.transport.rank
        self.start = time.thread_time()

    def charge(self) -> None:
        self.engine.compute(self.rank, max(0.0, time.thread_time() - self.start))

    def mark(self) -> None:
        self.start = time.thread_time()

    def clock(self) -> float:
        """The rank's virtual time, its compute so far charged."""
        self.charge()
        self.mark()
        return self.now()

    def now(self) -> float:
        return self.engine.time_of(self.rank)

    def around(self, fn):
        def charged(x, where: str = "tensor"):
            self.charge()
            out = fn(x, where)
            self.mark()
            return out

        return charged


def split_heads(config: ModelConfig, sizes) -> ModelConfig | None:
    """The same widths cut into enough heads for every t of `sizes` that does not divide the
    model's (the least common multiple of those t); None if every t divides them."""
    beyond = [t for t in sizes if config.heads % t]
    if not beyond:
        return None
    return dataclasses.replace(config, heads=math.lcm(*beyond))


def simulate_decode(
    config: ModelConfig, workload: DecodeBatch, t: int, link: Link, seed: int = 0, whole=None
) -> dict:
    """The decode batch on t simulated ranks, one node, a core each: {"t", "heads", "decode_s"
    (median), "decode_min_s", "decode_max_s", "allreduce_s" (per decode step, median), "tokens",
    "agree" (every shard the same tokens)}."""
    whole = init_params(config, seed) if whole is None else whole
    machine = Machine(1, t, link, link, link.gamma_bytes_per_s)
    world = SimWorld(machine, data=True)

    def rank(comm) -> dict:
        bursts = Bursts(comm)
        return decode_batch(
            comm,
            config,
            workload,
            whole=whole,
            seed=seed,
            clock=bursts.clock,
            comm_clock=bursts.now,
            wrap=bursts.around,
        )

    with pin_blas_threads(1):
        results = world.run(rank, timeout_s=600.0)
    steps = results[0]["steps"]
    times = decode_times(steps)
    return {
        "t": t,
        "heads": config.heads,
        "decode_s": statistics.median(times),
        "decode_min_s": min(times),
        "decode_max_s": max(times),
        "allreduce_s": statistics.median([s["allreduce_s"] for s in steps if s["prefill"] == 0]),
        "tokens": results[0]["tokens"],
        "agree": all(r["tokens"] == results[0]["tokens"] for r in results),
    }


def simulate_sizes(
    config: ModelConfig, workload: DecodeBatch, sizes, link: Link, seed: int = 0
) -> list[dict]:
    """`simulate_decode` at every t of `sizes` (beyond the heads on `split_heads`' model), each
    also checked against its model's one rank ("equal": the same tokens)."""
    whole = init_params(config, seed)  # the heads do not change the parameters
    wide = split_heads(config, sizes)
    one_rank: dict[int, dict] = {}  # by heads: that model on one rank (also the t = 1 row)
    rows = []
    for t in sizes:
        model = config if config.heads % t == 0 or wide is None else wide
        if model.heads not in one_rank:
            one_rank[model.heads] = simulate_decode(model, workload, 1, link, seed, whole)
        row = (
            dict(one_rank[model.heads]) if t == 1 else simulate_decode(model, workload, t, link, seed, whole)
        )
        row["equal"] = row["agree"] and row["tokens"] == one_rank[model.heads]["tokens"]
        rows.append(row)
    return rows
