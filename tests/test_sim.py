"""The simulator: the real collectives in virtual time, against the closed forms, the real
communicator's message sequence, and the network model's own rules (ports, CPUs, deadlock)."""

import json
import sys
import tracemalloc
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from playground.cli.testing import run_scenario
from playground.collectives import ALGORITHMS, ReduceOp, run_collective
from playground.collectives.check import PER_RANK, input_count, pattern
from playground.collectives.chunks import phantom
from playground.comm.optags import logical_tag
from playground.comm.transport import NoRoom
from playground.comm.world import run_local
from playground.models import costs, exchange_costs
from playground.models.costs import PRESETS, Link
from playground.sim.driver import simulate
from playground.sim.engine import SimDeadlock
from playground.sim.fold import ROTATION, XOR, symmetry
from playground.sim.network import Machine
from playground.sim.transport import SimWorld

LINK = Link(5e-6, 50e9, 100e9)  # the docs' example: alpha 5 us, 50 GB/s, gamma 100 GB/s


def flat(n: int, link: Link = LINK, **kw) -> Machine:
    return Machine(1, n, link, link, link.gamma_bytes_per_s, **kw)


CLOSED_FORMS = {
    "ring": costs.allreduce_ring_time_s,
    "tree": costs.allreduce_tree_time_s,
    "hd": costs.allreduce_hd_time_s,
    "rd": costs.allreduce_rd_time_s,
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algorithm", ["tree", "hd", "rd"])
@pytest.mark.parametrize("n", [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024])
def test_log_step_algorithms_equal_their_closed_forms(algorithm, n):
    size = 64 * n * 4  # a multiple of N elements: every chunk the same length
    row, _ = simulate(flat(n), "allreduce", algorithm, size, data=False)
    want = CLOSED_FORMS[algorithm](size, n, LINK)
    assert row["time_us"] / 1e6 == pytest.approx(want, rel=1e-9)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "n",
    [2, 4, 8, 16, 32, 64, 128, 256, 512, pytest.param(1024, marks=pytest.mark.timeout(600))],
)
def test_ring_equals_its_closed_form(n):
    """To 1024 ranks: 2.1 million messages, the suite's slowest test (~40 s)."""
    size = 1 << 30  # data-free: a GiB costs what 8 bytes cost
    row, _ = simulate(flat(n), "allreduce", "ring", size, data=False)
    assert row["time_us"] / 1e6 == pytest.approx(costs.allreduce_ring_time_s(size, n, LINK), rel=1e-9)


def test_ring_state_per_rank_does_not_grow_with_n():
    """Each ring rank holds O(1), not its N chunk bounds, N steps and N pending sends: at 1024
    simulated ranks that was 715 MiB of N^2 objects. Python's allocations are deterministic here."""

    def peak_bytes(n: int) -> int:
        tracemalloc.start()
        try:
            simulate(flat(n), "allreduce", "ring", 1 << 30, data=False)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak_bytes(32), peak_bytes(64)
    assert large < 2.6 * small, (small, large)  # linear: ~2.1x; N^2 state measured 3.6-3.9x


def _python_calls_in(directory: str, n: int) -> tuple[Counter, SimWorld]:
    """Calls of Python functions under playground/<directory>/ while a data-free n-rank ring runs."""
    calls = Counter()

    def count(frame, event, arg):
        if event == "call" and f"/playground/{directory}/" in frame.f_code.co_filename:
            calls[frame.f_code.co_name] += 1

    sys.setprofile(count)
    try:
        _, world = simulate(flat(n), "allreduce", "ring", 1 << 20, data=False)
    finally:
        sys.setprofile(None)
    return calls, world


def test_the_simulator_runs_no_python_per_message():
    """Its cost pinned by structure, not seconds: the event core is native (native/sim_*.c), so no
    Python function of playground/sim/ runs per message, only per rank, and a ring message costs
    the engine two events (its transmission, its receiver's wake-up) and one greenlet switch. The
    Python a message still costs is the algorithm's and the communicator's (docs/simulator.md)."""
    n = 64
    calls, world = _python_calls_in("sim", n)
    engine = world.engine
    assert engine.num_messages == 2 * n * (n - 1)
    assert sum(calls.values()) <= 10 * n, calls.most_common(5)  # 8064 messages, 64 ranks
    assert engine.num_events <= 2 * engine.num_messages
    assert engine.num_switches <= engine.num_messages


def test_a_simulated_ring_message_runs_no_python_of_the_communicator():
    """Pinned by structure too: per message, only isend_computed (whose fill is the algorithm's) is
    Python in playground/comm/; posting, matching, landing, counting and the send's request are C
    (native/comm_core.c). Before it, a ring message cost 8 Python calls there."""
    n = 32
    calls, world = _python_calls_in("comm", n)
    assert calls.pop("isend_computed") == n * (n - 2)  # one per forwarded reduce-scatter chunk
    assert sum(calls.values()) <= 10 * n < world.num_messages, calls.most_common(5)


@pytest.mark.parametrize(
    "collective,algorithm,formula",
    [
        ("reduce_scatter", "ring", costs.reduce_scatter_ring_time_s),
        ("allgather", "ring", costs.allgather_ring_time_s),
        ("broadcast", "tree", costs.broadcast_tree_time_s),
        ("reduce", "tree", costs.reduce_tree_time_s),
    ],
)
@pytest.mark.parametrize("n", [2, 8, 32])
def test_other_collectives_equal_their_closed_forms(collective, algorithm, formula, n):
    size = 16 * n * 4
    row, _ = simulate(flat(n), collective, algorithm, size, data=True)
    assert row["wrong"] == 0
    assert row["time_us"] / 1e6 == pytest.approx(formula(size, n, LINK), rel=1e-9)


EXCHANGES = {
    ("alltoall", "pairwise"): exchange_costs.alltoall_pairwise_time_s,
    ("alltoall", "bruck"): exchange_costs.alltoall_bruck_time_s,
    ("alltoall", "scattered"): exchange_costs.alltoall_scattered_time_s,
    ("gather", "linear"): exchange_costs.gather_linear_time_s,
    ("scatter", "linear"): exchange_costs.gather_linear_time_s,
    ("gather", "tree"): exchange_costs.gather_tree_time_s,
    ("scatter", "tree"): exchange_costs.gather_tree_time_s,
    ("sendrecv", "ring"): exchange_costs.sendrecv_ring_time_s,
}


@pytest.mark.parametrize("key", list(EXCHANGES), ids=lambda k: "-".join(k))
@pytest.mark.parametrize("n", [2, 3, 5, 8, 64])
def test_exchanges_equal_their_closed_forms(key, n):
    """The all-to-alls (the scattered one's queueing included), gather, scatter and send/recv; the
    binomial trees exactly at powers of two and within their bound elsewhere. Data where small."""
    collective, algorithm = key
    size = 64 * n * 4
    row, _ = simulate(flat(n), collective, algorithm, size, data=n <= 8)
    assert row["wrong"] == (0 if n <= 8 else -1)
    want = EXCHANGES[key](size, n, LINK)
    if algorithm == "tree" and n & (n - 1):
        assert want / 2 < row["time_us"] / 1e6 <= want
    else:
        assert row["time_us"] / 1e6 == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("algorithm", ["ring", "tree", "hd", "rd"])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 7, 12, 13])
def test_with_data_results_are_exact_at_any_rank_count(algorithm, n):
    for size in (0, 4, 4 * (n + 1), 4 * 3001):
        row, _ = simulate(flat(n), "allreduce", algorithm, size, data=True, segment_bytes=64)
        assert row["wrong"] == 0, (algorithm, n, size)


def test_hierarchical_is_exact_and_crosses_nodes_less():
    machine = Machine(4, 4, PRESETS["nvlink"], PRESETS["ib"], 1e12)
    hier, w_hier = simulate(machine, "allreduce", "hier", 4 * 1600, data=True)
    ring, w_ring = simulate(machine, "allreduce", "ring", 4 * 1600, data=True)
    assert hier["wrong"] == 0 and ring["wrong"] == 0
    # the flat ring crosses a node boundary at every step (30 alphas of InfiniBand); hier at 6
    assert hier["time_us"] < ring["time_us"] / 2
    assert w_hier.net.bytes_between_nodes < w_ring.net.bytes_between_nodes
    intra, inter = (replace(link, gamma_bytes_per_s=1e12) for link in (machine.intra, machine.inter))
    want = costs.allreduce_hier_time_s(4 * 1600, 4, 4, intra, inter)
    assert hier["time_us"] / 1e6 == pytest.approx(want, rel=1e-9)


class Recorder:
    """A transport wrapper that writes down every post: (destination, tag, bytes), in order; the tag
    as the program gave it (a matched collective's salt taken off, as the trace shows it)."""

    def __init__(self, inner, log: list):
        self.inner, self.log = inner, log
        self.name, self.segment_bytes = inner.name, inner.segment_bytes

    def send(self, dst, tag, x):
        got = self.inner.send(dst, tag, x)
        if not isinstance(got, NoRoom):
            self.log.append((dst, logical_tag(tag), x.nbytes))
        return got

    def reserve(self, dst, count, dtype):
        return self.inner.reserve(dst, count, dtype)

    def send_reserved(self, out, tag):
        got = self.inner.send_reserved(out, tag)
        if not isinstance(got, NoRoom):
            self.log.append((out.dst, logical_tag(tag), out.array.nbytes))
        return got

    def send_obj(self, dst, tag, body):
        return self.inner.send_obj(dst, tag, body)

    def receive(self, timeout_ms):
        return self.inner.receive(timeout_ms)

    def close(self):
        self.inner.close()


def _sent_sequences(
    n: int,
    algorithm: str,
    count: int,
    segment_bytes: int,
    simulated: bool,
    collective: str = "allreduce",
    ranks_per_node: int | None = None,
) -> list[list]:
    logs = [[] for _ in range(n)]

    def body(comm):
        comm.transport = Recorder(comm.transport, logs[comm.rank])
        x = pattern(comm.rank, count, "float32")
        run_collective(comm, collective, x, ReduceOp.SUM, algorithm, segment_bytes, False, ranks_per_node)

    if simulated:
        SimWorld(flat(n)).run(body)
    else:
        run_local(n, body, timeout_s=20)
    return logs


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algorithm", ["ring", "tree", "hd", "rd"])
@pytest.mark.parametrize("n", list(range(2, 17)))
def test_one_definition_of_each_algorithm(algorithm, n):
    """The simulator runs the real code: every rank posts the same messages (peer, tag, bytes), in
    the same order, as on the real communicator."""
    real = _sent_sequences(n, algorithm, 4 * n + 3, 8, simulated=False)
    sim = _sent_sequences(n, algorithm, 4 * n + 3, 8, simulated=True)
    assert sim == real
    assert len(real) == n and all(real), "every rank sends something"


def _logged_sends(run_dir, rank: int, collective: str) -> dict[str, list]:
    """algorithm -> what `rank` sent inside its one timed call (peer, tag, bytes), in order, from
    its log of a real run (one message event per post; the call is its `op` event)."""
    events = [json.loads(line) for line in (run_dir / f"rank-{rank}.jsonl").read_text().splitlines()]
    calls = [e for e in events if e["cat"] == "op" and e["name"] == collective]
    sends = [e for e in events if e["cat"] == "send"]
    return {
        c["args"]["algorithm"]: [
            (e["args"]["peer"], e["args"]["tag"], e["args"]["bytes"])
            for e in sends
            if c["ts"] <= e["ts"] <= c["ts"] + c["dur"]
        ]
        for c in calls
    }


@pytest.mark.timeout(90)
@pytest.mark.parametrize("collective", list(ALGORITHMS))
def test_the_simulator_sends_what_a_real_multi_process_run_sends(runs_dir, collective):
    """Every collective and algorithm, 6 ranks in 6 processes over ipc (uneven chunks, many
    segments, hier in 2 nodes of 3): each rank's posts, as its log records them, are the posts
    the simulated communicator makes, in the same order."""
    n, segment_bytes, per_node = 6, 8, 3
    algorithms = ALGORITHMS[collective]
    size_bytes = 4 * (4 * n + 3) * (n if collective in PER_RANK else 1)  # nccl-tests' size
    count = input_count(collective, size_bytes, 4, n)  # (all-to-all, scatter: whole blocks)
    sets = [f"params.collective={collective}", f"params.algorithm=[{','.join(algorithms)}]"]
    sets += [f"params.sizes=[{size_bytes}]", "params.iters=1", "params.warmup=0", "params.dtype=float32"]
    sets += [
        f"params.segment_bytes={segment_bytes}",
        "params.trace_messages=true",
        f"params.ranks_per_node={per_node}",
    ]
    code, result, out, err = run_scenario("ring", runs_dir, ranks=n, transport="ipc", sets=sets, timeout_s=80)
    assert code == 0, out + err
    run_dir = Path(result["run_dir"])
    real = [_logged_sends(run_dir, r, collective) for r in range(n)]
    for algorithm in algorithms:
        sim = _sent_sequences(n, algorithm, count, segment_bytes, True, collective, per_node)
        logged = [real[r][algorithm] for r in range(n)]
        assert logged == sim, algorithm
        assert sum(map(len, sim)) >= n - 1, algorithm  # something crossed: not two empty lists


def test_a_receiver_port_serialises_an_incast_and_ports_are_full_duplex():
    link = Link(1e-6, 1e9)
    world = SimWorld(flat(4, link))
    n_bytes = 10_000  # 10 us on the wire

    def body(comm):
        if comm.rank in (1, 2, 3):
            comm.send(np.zeros(n_bytes, np.uint8), 0)
            return None
        for src in (1, 2, 3):
            comm.recv(src)
        return world.time_of(0)

    assert world.run(body)[0] == pytest.approx(3 * 10e-6 + 1e-6)  # three messages through one in-port

    world = SimWorld(flat(2, link))

    def exchange(comm):
        comm.sendrecv(np.zeros(n_bytes, np.uint8), 1 - comm.rank, 1 - comm.rank)
        return world.time_of(comm.rank)

    assert world.run(exchange) == [pytest.approx(11e-6)] * 2  # both directions at once


def test_shared_cores_serialise_reductions():
    n, size = 4, 1_000_000
    link = Link(0.0, 1e18, 1e9)  # a free network; 1 ms per reduction of 1 MB

    def tree_time(cores):
        row, _ = simulate(flat(n, link, cores=cores), "reduce", "tree", size, data=False)
        return row["time_us"] / 1e6

    assert tree_time(None) == pytest.approx(2e-3)  # two levels: 2 reductions on the critical path
    assert tree_time(1) == pytest.approx(3e-3)  # all three reductions on one CPU


def test_shared_cores_run_the_work_not_the_ports():
    """With shared cores and plain links, a message still crosses ports (alpha + n/beta, a port per
    rank and direction); the cores run the CPU work (reductions, and on a calibrated host each
    message's sending and receiving: tests/test_contention.py)."""
    link = Link(1e-6, 1e9)
    n_bytes = 10_000  # 10 us on the wire

    def one_way(comm):
        if comm.rank == 0:
            comm.send(np.zeros(n_bytes, np.uint8), 1)
        else:
            comm.recv(0)

    def exchange(comm):
        comm.sendrecv(np.zeros(n_bytes, np.uint8), 1 - comm.rank, 1 - comm.rank)

    def slowest(cores, body):
        world = SimWorld(flat(2, link, cores=cores))
        world.run(body)
        return max(world.time_of(r) for r in range(2))

    for cores in (None, 1, 2):
        assert slowest(cores, one_way) == pytest.approx(11e-6)
        assert slowest(cores, exchange) == pytest.approx(11e-6)  # both directions at once


def test_a_deadlock_names_the_waiting_ranks():
    def body(comm):
        if comm.rank != 1:
            comm.recv((comm.rank + 1) % comm.size, tag=5)

    with pytest.raises(
        SimDeadlock, match=r"2 rank\(s\) wait for messages that no rank will send \(ranks 0, 2\)"
    ):
        SimWorld(flat(3)).run(body)


def test_an_error_on_one_rank_stops_the_simulation_with_it():
    def body(comm):
        if comm.rank == 2:
            raise RuntimeError("rank 2 gives up")
        comm.recv(2)

    with pytest.raises(RuntimeError, match="rank 2 gives up"):
        SimWorld(flat(4)).run(body)


def _end_times(
    machine: Machine, collective: str, algorithm: str, size: int, segment_bytes, fold: bool
) -> list:
    """Every rank's virtual time when the collective returns (folded: rank 0's, standing for all)."""
    count = input_count(collective, size, 4, machine.num_ranks)
    kind = symmetry(machine, collective, algorithm, count, data=False) if fold else 0
    world = SimWorld(machine, data=False, fold=kind)
    assert world.folded == fold, "this point must fold"

    def body(comm):
        run_collective(comm, collective, phantom(count, "float32"), ReduceOp.SUM, algorithm, segment_bytes)
        return world.time_of(comm.rank)

    return world.run(body)


@pytest.mark.parametrize(
    "collective,algorithm,ranks",
    [
        ("allreduce", "ring", [2, 3, 5, 8, 12, 64]),
        ("reduce_scatter", "ring", [3, 8, 12]),
        ("allgather", "ring", [3, 8, 12]),
        ("allreduce", "rd", [2, 4, 8, 32]),
        ("allreduce", "hd", [2, 4, 8, 32]),
        ("alltoall", "pairwise", [2, 3, 8, 12]),
        ("alltoall", "bruck", [2, 3, 8, 12]),
        ("sendrecv", "ring", [2, 5]),
    ],
)
@pytest.mark.parametrize("segment_bytes", [None, 48])
def test_a_folded_simulation_equals_the_exact_one_rank_by_rank(collective, algorithm, ranks, segment_bytes):
    """--fold runs rank 0 alone for all ranks: every exact rank's end time equals it, to the bit."""
    for n, link in ((n, link) for n in ranks for link in (LINK, PRESETS["nvlink"])):
        machine = flat(n, link)
        for size in (4 * n * 3, 4 * n * 64):
            folded = _end_times(machine, collective, algorithm, size, segment_bytes, fold=True)
            exact = _end_times(machine, collective, algorithm, size, segment_bytes, fold=False)
            assert exact == folded, (n, size)


def test_folding_only_where_every_rank_has_the_same_timeline():
    ring = flat(8)
    assert symmetry(ring, "allreduce", "ring", 8 * 5, data=False) == ROTATION
    assert symmetry(flat(16), "allreduce", "rd", 3, data=False) == XOR
    assert symmetry(ring, "allreduce", "ring", 8 * 5 + 1, data=False) == 0  # one chunk longer
    assert symmetry(ring, "allreduce", "ring", 8 * 5, data=True) == 0  # rank 0 would get its own data
    assert symmetry(ring, "allreduce", "tree", 8 * 5, data=False) == 0  # the root is not like the others
    assert symmetry(flat(12), "allreduce", "hd", 12 * 5, data=False) == 0  # 4 ranks fold in first
    assert symmetry(flat(8, cores=2), "allreduce", "ring", 8 * 5, data=False) == 0  # shared CPUs
    assert symmetry(ring, "alltoall", "bruck", 8 * 5, data=False) == ROTATION
    assert symmetry(ring, "alltoall", "scattered", 8 * 5, data=False) == 0  # ports delay rank r by 2r
    two_kinds_of_link = Machine(2, 4, LINK, LINK)
    assert symmetry(two_kinds_of_link, "allreduce", "ring", 8 * 5, data=False) == 0
