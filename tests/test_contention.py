"""playground.models.contention and the simulator's shared cores (native/sim_cpu.c): max-min shares of
memory bandwidth on hand-computed cases, time slices against a hand-computed round-robin schedule,
and a calibrated host's per-message costs by size range."""

import math

import numpy as np
import pytest

from playground.core.errors import UsageError
from playground.models.contention import HostModel, MessageCosts, closed_form_applies, max_min_shares
from playground.models.costs import Link
from playground.sim.network import Machine
from playground.sim.transport import SimWorld

FREE = Link(0.0, 1e18)


# -- max-min shares ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "demands, capacity, shares",
    [
        ([1, 1], 1, [0.5, 0.5]),  # two equal copies: half each
        ([0.2, 1, 1], 1, [0.2, 0.4, 0.4]),  # the small one gets all it asks, the rest split what is left
        ([0.2, 0.3], 1, [0.2, 0.3]),  # under capacity: everyone their demand
        ([3, 1, 2], 3, [1, 1, 1]),  # order of the flows does not matter
        ([4, 1, 2], 5, [2, 1, 2]),  # water filling: 1, then 2 and 2 of the 4 left
        ([1, 1], math.inf, [1, 1]),  # no shared limit
        ([1, 1], 0, [1, 1]),  # 0 means no limit too
        ([], 1, []),
    ],
)
def test_max_min_shares_by_hand(demands, capacity, shares):
    assert max_min_shares(demands, capacity) == pytest.approx(shares)


def test_max_min_refuses_a_negative_demand():
    with pytest.raises(UsageError, match="demands must be >= 0"):
        max_min_shares([1, -1], 1)


def test_the_closed_form_applies_only_while_ranks_have_a_core_each():
    assert closed_form_applies(8, None) and closed_form_applies(2, 2)
    assert not closed_form_applies(3, 2)


# -- the simulator's shared cores --------------------------------------------------------------------


def _world(n: int, cores: int, slice_s: float = 0.0, memory: float = 0.0) -> SimWorld:
    world = SimWorld(Machine(1, n, FREE, FREE, math.inf, cores), data=False)
    world.net.set_cores(slice_s, memory, 0.0, 0.0)
    return world


def _end_times(world: SimWorld, work) -> list[float]:
    def body(comm):
        work(comm)
        return world.time_of(comm.rank)

    return world.run(body)


def test_time_slices_follow_a_hand_computed_round_robin():
    """Three ranks ask one core for 10 ms each at t=0, slices of 4 ms: 0-4 r0, 4-8 r1, 8-12 r2,
    12-16 r0, 16-20 r1, 20-24 r2, 24-26 r0 (done), 26-28 r1 (done), 28-30 r2 (done)."""
    ends = _end_times(
        _world(3, 1, slice_s=4e-3), lambda comm: comm.transport.engine.compute(comm.rank, 10e-3)
    )
    assert ends == pytest.approx([26e-3, 28e-3, 30e-3])
    # without slices: first come, first served
    ends = _end_times(_world(3, 1), lambda comm: comm.transport.engine.compute(comm.rank, 10e-3))
    assert ends == pytest.approx([10e-3, 20e-3, 30e-3])
    # a slice longer than the work changes nothing; two cores run two at once
    ends = _end_times(_world(3, 2, slice_s=4e-3), lambda comm: comm.transport.engine.compute(comm.rank, 3e-3))
    assert ends == pytest.approx([3e-3, 3e-3, 6e-3])


def test_a_rank_alone_keeps_its_core_past_its_slice():
    ends = _end_times(_world(1, 1, slice_s=1e-3), lambda comm: comm.transport.engine.compute(comm.rank, 5e-3))
    assert ends == pytest.approx([5e-3])


def test_a_rank_waits_for_its_own_core_until_it_may_migrate():
    """Three ranks on two cores; rank 2's core is rank 0's (2 ms of work), core 1 idles after rank 1's
    0.1 ms. One queue: rank 2 runs on core 1 at once (0.1-0.4 ms). A run queue per core with a 0.5 ms
    migration cost: core 1 takes it over when it has waited that long (0.5-0.8 ms); with 5 ms it waits
    for its own core (2-2.3 ms)."""
    work = {0: 2e-3, 1: 0.1e-3, 2: 0.3e-3}

    def ends(migration_cost_s: float) -> list[float]:
        world = SimWorld(Machine(1, 3, FREE, FREE, math.inf, 2), data=False)
        world.net.set_cores(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, migration_cost_s)
        return _end_times(world, lambda comm: comm.transport.engine.compute(comm.rank, work[comm.rank]))

    assert ends(0.0) == pytest.approx([2e-3, 0.1e-3, 0.4e-3])
    assert ends(0.5e-3) == pytest.approx([2e-3, 0.1e-3, 0.8e-3])
    assert ends(5e-3) == pytest.approx([2e-3, 0.1e-3, 2.3e-3])


def test_the_migration_cost_is_the_kernels_or_its_default(tmp_path, monkeypatch):
    from playground.commands import hostbench

    knob = tmp_path / "migration_cost_ns"
    knob.write_text("250000\n")
    monkeypatch.setattr(hostbench, "MIGRATION_COST_FILES", (str(tmp_path / "absent"), str(knob)))
    assert hostbench.migration_cost_s() == (pytest.approx(0.25e-3), str(knob))
    monkeypatch.setattr(hostbench, "MIGRATION_COST_FILES", (str(tmp_path / "absent"),))
    assert hostbench.migration_cost_s() == (0.5e-3, "kernel default")


def test_copies_at_once_share_the_memory_bandwidth_max_min():
    """Two 1-second copies, each moving 1 unit/s alone, on 1.5 units/s: 0.75 each, 4/3 s. With demands
    1 and 2 on 2 units: 1 and 1 (the second at half speed) until the first ends at 1 s, half the second
    left; then it has all of its 2 (full speed): 1.5 s."""
    ends = _end_times(
        _world(2, 2, memory=1.5), lambda comm: comm.transport.engine.compute(comm.rank, 0.0, 1.0, 1.0)
    )
    assert ends == pytest.approx([4 / 3, 4 / 3])
    ends = _end_times(
        _world(2, 2, memory=2.0),
        lambda comm: comm.transport.engine.compute(comm.rank, 0.0, 1.0, 1.0 + comm.rank),
    )
    assert ends == pytest.approx([1.0, 1.5])
    # the CPU part runs at full speed; sharing starts with the memory-bound part
    ends = _end_times(
        _world(2, 2, memory=1.0),
        lambda comm: comm.transport.engine.compute(comm.rank, 0.5 * comm.rank, 1.0, 1.0),
    )
    # rank 0 alone 0-0.5 (0.5 done), shares 0.5 each until it ends at 1.5; rank 1 then alone: 1.0 + 0.5 = 2.0
    assert ends == pytest.approx([1.5, 2.0])


def test_a_host_charges_each_size_range_its_own_costs():
    """A message's sender CPU, latency and receiver CPU by range (no ports): below 1 KiB 1 + 2 + 3 us,
    from 1 KiB 10 + 20 + 30 us plus 1 ns a byte copied in and out."""
    host = HostModel(
        (
            MessageCosts(0, 1e-6, 0.0, 3e-6, 0.0, 2e-6),
            MessageCosts(1024, 10e-6, 1e-9, 30e-6, 1e-9, 20e-6),
        ),
        cores=2,
        gamma_bytes_per_s=math.inf,
    )
    assert host.one_way_s(100) == pytest.approx(6e-6)
    assert host.one_way_s(2048) == pytest.approx(60e-6 + 2 * 2048e-9)

    def one_way(n: int) -> float:
        world = SimWorld(Machine(1, 2, FREE, FREE, math.inf, 2, host), data=False)

        def body(comm):
            if comm.rank == 0:
                comm.send(np.zeros(n, np.uint8), 1)
            else:
                comm.recv(0, out=np.empty(n, np.uint8))
            return world.time_of(comm.rank)

        return world.run(body)[1]

    assert one_way(100) == pytest.approx(host.one_way_s(100))
    assert one_way(2048) == pytest.approx(host.one_way_s(2048))


def test_a_receiver_that_waited_for_its_message_pays_the_wake_up_and_one_that_did_not_does_not():
    """1 us to send, 1 us to receive, 5 us more for a receiver that slept waiting: received at once,
    7 us; after 20 us of copying (the message long there), 20 + 1 us."""
    host = HostModel(
        (MessageCosts(0, 1e-6, 0.0, 1e-6, 0.0, 0.0, wait_s=5e-6),),
        cores=2,
        gamma_bytes_per_s=math.inf,
        copy_s_per_byte=1e-9,
    )

    def received_at(busy_bytes: int) -> float:
        world = SimWorld(Machine(1, 2, FREE, FREE, math.inf, 2, host), data=False)

        def body(comm):
            if comm.rank == 0:
                comm.send(np.zeros(8, np.uint8), 1)
            else:
                if busy_bytes:
                    world.engine.local_copy(busy_bytes)
                comm.recv(0, out=np.empty(8, np.uint8))
            return world.time_of(comm.rank)

        return world.run(body)[1]

    assert received_at(0) == pytest.approx(7e-6)
    assert received_at(20_000) == pytest.approx(21e-6)


def test_a_core_that_goes_on_with_another_rank_pays_a_switch_and_one_that_stays_does_not():
    """One core, 2 us to send and 2 us to receive, 5 us a switch: a ping-pong's ranks take turns, so
    each message's sending and receiving run on one core after the other rank's: 4 + 5 us a message
    after the first; a rank's own work back to back (three local copies) pays none."""
    host = HostModel(
        (MessageCosts(0, 2e-6, 0.0, 2e-6, 0.0, 0.0),),
        cores=1,
        gamma_bytes_per_s=math.inf,
        copy_s_per_byte=1e-9,
        switch_s=5e-6,
    )

    def ping_pongs(trips: int) -> float:
        world = SimWorld(Machine(1, 2, FREE, FREE, math.inf, 1, host), data=False)

        def body(comm):
            buf = np.zeros(8, np.uint8)
            for _ in range(trips):
                if comm.rank == 0:
                    comm.send(buf, 1)
                    comm.recv(1, out=buf)
                else:
                    comm.recv(0, out=buf)
                    comm.send(buf, 0)
            return world.time_of(comm.rank)

        return max(world.run(body))

    per_trip = ping_pongs(3) - ping_pongs(2)
    assert per_trip == pytest.approx(2 * (4e-6 + 5e-6))
    world = SimWorld(Machine(1, 2, FREE, FREE, math.inf, 1, host), data=False)

    def alone(comm):
        if comm.rank == 0:
            for _ in range(3):
                world.engine.local_copy(1000)
        return world.time_of(comm.rank)

    assert world.run(alone)[0] == pytest.approx(3e-6)


def test_where_ranks_sleep_only_a_rank_woken_from_a_receive_pays_a_switch():
    """One core, 2 us to send and 2 us to receive, 5 us a switch. Two ranks each send the other three
    messages, then take the other's three: nobody ever waits for a message, and the queue serves their
    requests in turns. Where the transport polls (wake_s 0) each turn is a switch; where it sleeps a
    rank keeps its core until it blocks, so the turns cost nothing beyond the work. And a rank that
    slept on a receive pays the switch (and, on the idle core, the wake-up) once woken."""

    def host(switch_s: float, wake_s: float) -> HostModel:
        return HostModel(
            (MessageCosts(0, 2e-6, 0.0, 2e-6, 0.0, 0.0),),
            cores=1,
            gamma_bytes_per_s=math.inf,
            copy_s_per_byte=1e-9,
            switch_s=switch_s,
            wake_s=wake_s,
        )

    def both_send_first(switch_s: float, wake_s: float) -> float:
        world = SimWorld(Machine(1, 2, FREE, FREE, math.inf, 1, host(switch_s, wake_s)), data=False)

        def body(comm):
            buf = np.zeros(8, np.uint8)
            for _ in range(3):
                comm.send(buf, 1 - comm.rank)
            for _ in range(3):
                comm.recv(1 - comm.rank, out=buf)
            return world.time_of(comm.rank)

        return max(world.run(body))

    work = both_send_first(0.0, 0.0)
    assert work == pytest.approx(12 * 2e-6)  # 6 sends and 6 receives on the one core
    assert both_send_first(5e-6, 1e-6) == pytest.approx(work)
    assert both_send_first(5e-6, 0.0) > work + 5 * 5e-6  # polling: the turns switch

    world = SimWorld(Machine(1, 2, FREE, FREE, math.inf, 1, host(5e-6, 1e-6)), data=False)

    def woken(comm):
        buf = np.zeros(8, np.uint8)
        if comm.rank == 0:
            world.engine.local_copy(10_000)  # 10 us while rank 1 sleeps on its receive
            comm.send(buf, 1)
        else:
            comm.recv(0, out=buf)
        return world.time_of(comm.rank)

    assert world.run(woken)[1] == pytest.approx(10e-6 + 2e-6 + 1e-6 + 5e-6 + 2e-6)  # work, wake, switch


def test_a_swap_that_streams_between_polling_partners_waits_for_the_go_ahead():
    """A stream starts when both partners are there: where they poll, one message's fixed costs
    more than a swap sent the usual way (measured here: a swap of 8 KiB over shm takes a round trip)."""

    def swap_s(stream_from_bytes: int) -> float:
        host = HostModel(
            (MessageCosts(0, 1e-6, 0.0, 2e-6, 0.0, 0.5e-6),),
            cores=2,
            gamma_bytes_per_s=math.inf,
            stream_from_bytes=stream_from_bytes,
        )
        world = SimWorld(Machine(1, 2, FREE, FREE, math.inf, 2, host), data=True)

        def body(comm):
            buf = np.full(1024, comm.rank + 1, np.float32)
            comm.sendrecv_reduce(buf, 1 - comm.rank, 1 - comm.rank, 0, np.add)
            assert (buf == 3).all()
            return world.time_of(comm.rank)

        return world.run(body)[0]

    assert swap_s(0) == pytest.approx(3.5e-6)  # sent, 0.5 us on the way, received
    assert swap_s(1024) == pytest.approx(3.5e-6 + 3.5e-6)


def test_a_swap_that_streams_pays_half_a_copy_in_and_reads_one_operand_from_cache():
    """sendrecv_reduce of 4 KiB between 2 ranks, 1 ns a byte copied in (all of it the copy) and
    1 ns a byte reduced: sent the usual way 4.096 + 4.096 us; streamed (the shm transport's swap)
    half the copy, 2.048 us, and two thirds of the reduction, 2.731 us; with sleeping ranks, a
    wake-up per window the stream fills. The sum is right either way."""

    def swap(
        stream_from_bytes: int, window_bytes: int = 0, wake_s: float = 0.0, migration_s: float = 0.0
    ) -> list:
        host = HostModel(
            (MessageCosts(0, 0.0, 1e-9, 0.0, 1e-9, 0.0),),
            cores=2,
            gamma_bytes_per_s=1e9,
            copy_s_per_byte=1e-9,
            stream_from_bytes=stream_from_bytes,
            stream_window_bytes=window_bytes,
            wake_s=wake_s,
            migration_cost_s=migration_s,
        )
        world = SimWorld(Machine(1, 2, FREE, FREE, 1e9, 2, host), data=True)

        def body(comm):
            buf = np.full(1024, comm.rank + 1, np.float32)
            comm.sendrecv_reduce(buf, 1 - comm.rank, 1 - comm.rank, 0, np.add)
            return world.time_of(comm.rank), buf

        return world.run(body)

    for stream_from_bytes, expected_s in ((0, 8.192e-6), (1024, 2.048e-6 + 4.096e-6 * 2 / 3)):
        results = swap(stream_from_bytes)
        assert [t for t, _ in results] == pytest.approx([expected_s] * 2)
        assert all((buf == 3).all() for _, buf in results)
    assert swap(8192)[0][0] == pytest.approx(8.192e-6)  # smaller than the stream's threshold
    # where ranks sleep (a wake-up costs 1 us), the partners take turns: a wake-up per 1 KiB window,
    # until the scheduler moves them apart: a turn takes its copy in, its reduction and its wake-up,
    # 1 KiB at 0.5 ns + 2/3 ns a byte + 1 us = 2.195 us, so with a 2.5 us migration cost they take
    # 1 + 1 turns, not 4, and with 2 us 1 + 0
    for migration_s, extra_s in ((0.0, 4e-6), (2.5e-6, 2e-6), (2e-6, 1e-6)):
        turns = [t for t, _ in swap(1024, 1024, 1e-6, migration_s)]
        alone = [t for t, _ in swap(1024, 0, 1e-6, migration_s)]
        assert [a - b for a, b in zip(turns, alone, strict=True)] == pytest.approx([extra_s] * 2)
