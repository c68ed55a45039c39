"""The flight recorder: each rank's last K operations in a fixed ring (native/oprecord.c,
comm/flight.py), what the rings say together (comm/flight_report.py), and the dump a hung run leaves."""

import json
import sys

import numpy as np
import pytest

from playground.cli.testing import run_cli, run_scenario
from playground.collectives import allreduce
from playground.comm import flight, flight_report
from playground.comm.world import run_local

pytestmark = pytest.mark.timeout(60)


def test_the_ring_keeps_the_newest_k_and_wraps_without_allocating():
    def body(comm):
        comm.attach_flight(8)
        buffer = comm._flight_buffer
        x = np.ones(4, np.float32)
        for _ in range(50):  # warm: every cache of the record filled once
            comm.begin_collective("allreduce", "ring", x, "sum")
            comm.end_collective()
        before = sys.getallocatedblocks()
        for i in range(20_000):
            comm.begin_collective("allreduce", "ring", x, "sum")
            comm.end_collective(i % 2 == 0)
        grown = sys.getallocatedblocks() - before
        assert (
            comm._flight_buffer is buffer and len(buffer) == flight.HEADER_BYTES + 8 * flight.ENTRY.itemsize
        )
        return grown, comm.flight()

    ((grown, ring),) = run_local(1, body)
    assert grown < 20, f"{grown} blocks still allocated after 20,000 operations"
    assert ring.capacity == 8 and ring.records == 20_050 and ring.wrapped
    assert [e["record"] for e in ring.entries] == list(range(20_043, 20_051))  # the newest 8, in order
    assert [e["state"] for e in ring.entries[-2:]] == ["completed", "failed"]
    e = ring.entries[-1]
    assert (e["name"], e["algorithm"], e["op"], e["dtype"], e["nbytes"]) == (
        "allreduce",
        "ring",
        "sum",
        "float32",
        16,
    )


def test_collectives_and_point_to_point_are_recorded(tmp_path):
    def body(comm):
        x = np.arange(6, dtype=np.float64)
        allreduce(comm, x)
        if comm.rank == 0:
            comm.send(x, 1, tag=4)
        else:
            comm.recv(0, tag=4)
        return [
            (e["kind"], e["name"], e["state"], e.get("peer"), e.get("tag")) for e in comm.flight().entries
        ]

    r0, r1 = run_local(2, body, transport="shm", directory=str(tmp_path))
    assert r0 == [("collective", "allreduce", "completed", None, None), ("send", "send", "completed", 1, 4)]
    assert r1 == [("collective", "allreduce", "completed", None, None), ("recv", "recv", "completed", 0, 4)]


def _ring(rank: int, calls: list[tuple], active: int = 0, wait: tuple | None = None) -> flight.Ring:
    entries = []
    for i, (name, op, state) in enumerate(calls, 1):
        e = {
            "record": i, "kind": "collective", "seq": i, "name": name, "algorithm": "ring", "state": state,
            "t_begin_ns": i * 10**9, "t_end_ns": 0 if state == "started" else i * 10**9 + 1, "nbytes": 32,
            "dtype": "float32", "group": 0, "group_seq": i, "op": op, "fingerprint": hash((name, op)) & 0xFFFF,
        }  # fmt: skip
        entries.append(e)
    if wait is not None:
        entries[-1].update(peer=wait[0], tag=-10, t_wait_ns=wait[1])
    return flight.Ring(rank, 3, 100 + rank, 64, len(entries), active, entries)


def test_the_analysis_names_the_first_disagreement_the_missing_and_the_blocking_rank():
    done = [("allreduce", "sum", "completed")] * 2
    rings = {
        0: _ring(0, done + [("allreduce", "sum", "started")], active=3, wait=(1, 3 * 10**9)),
        1: _ring(1, done + [("allreduce", "max", "started")], active=3),
        2: _ring(2, done + [("allreduce", "sum", "started")], active=3, wait=(1, 3 * 10**9)),
    }
    a = flight_report.analyze(rings)
    assert a.disagreement.group_seq == 3 and sorted(a.disagreement.calls) == [0, 1, 2]
    assert a.blocking == 1
    lines = flight_report.summary_lines(a)
    assert lines[0].endswith(
        "ranks 0, 2: allreduce ring #3 (sum, float32, 32 B); rank 1: allreduce ring #3 (max, float32, 32 B)"
    )
    assert "ranks 0, 2 wait for rank 1" in lines[1]

    behind = {
        0: _ring(0, done + [("allreduce", "sum", "started")], 3),
        1: _ring(1, done),
        2: _ring(2, done + [("allreduce", "sum", "started")], 3),
    }
    a = flight_report.analyze(behind)
    assert a.disagreement is None and [(n.group_seq, n.missing, n.entered) for n in a.never_joined] == [
        (3, [1], [0, 2])
    ]
    assert (
        flight_report.summary_lines(a)[0]
        == "rank 1 never joined allreduce ring #3 (sum, float32, 32 B), which ranks 0, 2 entered"
    )


@pytest.mark.timeout(90)
def test_a_hung_rank_is_named_by_the_dump_with_its_collective(runs_dir):
    code, result, out, err = run_scenario(
        "ring",
        runs_dir,
        ranks=3,
        transport="shm",
        sets=["fault.rank=1", "fault.action=hang", "fault.after_ops=30", "timeout_s=2"]
        + ["params.sizes=[4KiB]", "params.iters=50", "params.warmup=0"],
        timeout_s=80,
    )
    assert code == 1, out + err
    run_dir = (runs_dir / "latest").resolve()
    hung = flight.read_ring(run_dir / "flight-rank-1.bin").current
    assert hung is not None and hung["state"] == "started"  # it never left the collective it hung in
    root = result["failures"][0]
    assert (
        root.startswith("rank 1 ")
        and f"its flight recorder: in {hung['name']} {hung['algorithm']} #{hung['seq']}" in root
    )
    dump = json.loads((run_dir / "flight.json").read_text())
    assert dump["blocking"] == 1 and dump["reason"] == "the run failed"
    assert any(
        f"the rank the others wait for: rank 1 (running: {hung['name']}" in line for line in dump["summary"]
    )
    assert {int(r) for r in dump["ranks"]} == {0, 1, 2}
    proc = run_cli(["inspect", str(run_dir), "--flight"])
    out = proc.stdout
    assert (
        proc.returncode == 0 and "the rank the others wait for: rank 1" in out and f"#{hung['seq']}" in out
    ), out


@pytest.mark.timeout(60)
def test_sigusr1_to_the_launcher_dumps_the_rings_while_the_run_goes_on(runs_dir):
    import os
    import signal
    import time

    from playground.cli.testing import session_processes, start_cli

    proc = start_cli(
        ["run", "ring", "--ranks", "2", "--transport", "shm", "--out", str(runs_dir)]
        + ["--set", "params.sizes=[8]", "--set", "params.iters=100000000", "--set", "params.warmup=0"]
    )
    try:
        deadline = time.monotonic() + 30
        rings = []
        while time.monotonic() < deadline and len(rings) < 2:
            rings = sorted({p.resolve() for p in runs_dir.glob("*/flight-rank-*.bin")})
            time.sleep(0.05)
        assert len(rings) == 2, "the ranks never made their rings"
        dump = rings[0].parent / "flight.json"
        while time.monotonic() < deadline and not dump.exists():
            os.kill(proc.pid, signal.SIGUSR1)  # again until it lands: the launcher may still be starting
            time.sleep(0.3)
        assert dump.exists(), "no flight.json after SIGUSR1"
        written = json.loads(dump.read_text())
        assert written["reason"] == "on demand (SIGUSR1 to the launcher)" and set(written["ranks"]) == {
            "0",
            "1",
        }
        assert all(r["records"] > 0 for r in written["ranks"].values())
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        for p in session_processes(proc.pid):
            p.kill()
    assert proc.returncode == 130, err
    assert "flight recorder:" in err  # the line the dump printed
