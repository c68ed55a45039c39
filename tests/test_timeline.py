"""Merging the ranks' logs: clock alignment and send -> receive flow arrows (playground.tracing.timeline),
the communicator's message numbering they rest on, and real runs with a rank's clock skewed on
purpose, where only the offset measured at rendezvous puts every receive after its send."""

import json
import threading

import numpy as np
import pytest
from test_external import SMALL, Ranks, clean_env, ranks  # noqa: F401 - ranks is a fixture

from playground.cli.testing import run_cli, run_scenario
from playground.comm.communicator import Communicator
from playground.comm.world import open_world
from playground.tracing.timeline import align, message_flows, receives_before_send
from playground.tracing.trace import CAT_META, Tracer, read_events, to_chrome_trace


def ev(name, ts, dur=1.0, cat="send", **args):
    return {"ts": ts, "dur": dur, "name": name, "cat": cat, "tid": 0, "args": args}


def test_align_shifts_each_rank_by_its_offset_and_drops_meta_events():
    logs = {
        0: [ev("clock", 5.0, 0.0, CAT_META, offset_us=0.0, uncertainty_us=3.0), ev("op", 10.0, cat="op")],
        1: [
            ev("clock", 9.0, 0.0, CAT_META, offset_us=-1000.0, uncertainty_us=4.0),
            ev("op", 1010.0, cat="op"),
        ],
        2: [ev("op", 7.0, cat="op")],  # no clock event (an older log): left as it is
    }
    aligned, clocks = align(logs)
    assert [e["ts"] for e in aligned[1]] == [10.0] and aligned[2][0]["ts"] == 7.0
    assert all(e["cat"] != CAT_META for events in aligned.values() for e in events)
    assert clocks[1].offset_us == -1000.0 and clocks[1].uncertainty_us == 4.0 and 2 not in clocks
    assert logs[1][1]["ts"] == 1010.0  # the raw log is not modified


def test_kth_send_pairs_with_kth_receive_per_sender_receiver_and_tag():
    logs = {
        0: [
            ev("send", 0.0, peer=1, tag=7, bytes=4, seq=0),
            ev("send", 1.0, peer=1, tag=7, bytes=4, seq=1),
            ev("send", 2.0, peer=1, tag=8, bytes=4, seq=0),
            ev("send", 3.0, peer=1, tag=7, bytes=4, seq=2),  # never received: no arrow
        ],
        1: [
            ev("recv_wait", 5.0, cat="wait", peer=0, tag=8, seq=0),
            ev("recv_wait", 6.0, cat="wait", peer=0, tag=7, seq=0),
            ev("recv_wait", 7.0, 0.0, cat="wait", peer=0, tag=7, seq=1),
            ev("send", 8.0, peer=0, tag=7, bytes=4, seq=0),  # other direction, same tag and seq
        ],
    }
    flows = message_flows(logs)
    assert sorted((f.src, f.dst, f.tag, f.seq, f.send["ts"], f.recv["ts"]) for f in flows) == [
        (0, 1, 7, 0, 0.0, 6.0),
        (0, 1, 7, 1, 1.0, 7.0),
        (0, 1, 8, 0, 2.0, 5.0),
    ]
    assert len({f.id for f in flows}) == 3 and all(f.id.startswith("0x") for f in flows)
    assert receives_before_send(flows) == []
    late_sender = {0: [ev("send", 100.0, peer=1, tag=7, bytes=4, seq=0)], 1: logs[1][1:2]}
    assert len(receives_before_send(message_flows(late_sender))) == 1


def clocked(
    rank_offsets: dict[int, tuple[float, float]], messages: list[tuple[int, float, int, float]]
) -> dict:
    """Logs whose clock events say (offset, uncertainty) and whose messages are (src, raw send
    start, dst, raw receive end)."""
    logs = {
        r: [ev("clock", 0.0, 0.0, CAT_META, offset_us=o, uncertainty_us=u)]
        for r, (o, u) in rank_offsets.items()
    }
    for seq, (src, sent, dst, received) in enumerate(messages):
        logs[src].append(ev("send", sent, 1.0, peer=dst, tag=0, bytes=4, seq=seq))
        logs[dst].append(ev("recv_wait", received - 2.0, 2.0, cat="wait", peer=src, tag=0, seq=seq))
    return logs


def test_offsets_are_tightened_within_their_bounds_until_every_receive_follows_its_send():
    # Both clocks are truly the same; rank 1's estimate is 20 us low (bound 50): a 10 us message
    # from 0 to 1 would show received 10 us before it was sent.
    logs = clocked({0: (0.0, 40.0), 1: (-20.0, 50.0)}, [(0, 100.0, 1, 110.0), (1, 300.0, 0, 340.0)])
    aligned, clocks = align(logs)
    assert receives_before_send(message_flows(aligned)) == []
    assert set(clocks) == {0, 1}
    for c in clocks.values():
        assert abs(c.applied_us - c.offset_us) <= c.uncertainty_us
    assert clocks[1].applied_us - clocks[0].applied_us >= -10.0  # what the 0 -> 1 message requires
    assert clocks[1].applied_us - clocks[0].applied_us <= 40.0  # and what the 1 -> 0 one allows


def test_tightening_never_leaves_the_bounds():
    """Bounds too tight for the messages (a clock that drifted): the offsets stop at their bounds
    and the timeline still shows the receive first, for inspect to warn about."""
    logs = clocked({0: (0.0, 1.0), 1: (-20.0, 1.0)}, [(0, 100.0, 1, 110.0)])
    aligned, clocks = align(logs)
    assert clocks[0].applied_us == -1.0 and clocks[1].applied_us == -19.0
    assert len(receives_before_send(message_flows(aligned))) == 1


def test_chrome_trace_binds_each_send_to_its_receive():
    logs = {
        0: [
            ev("clock", 0.0, 0.0, CAT_META, offset_us=0.0, uncertainty_us=2.0),
            ev("send", 1.0, peer=1, tag=0, bytes=8, seq=0),
        ],
        1: [
            ev("clock", 0.0, 0.0, CAT_META, offset_us=50.0, uncertainty_us=2.5),
            ev("recv_wait", -40.0, 5.0, cat="wait", peer=0, tag=0, seq=0),
        ],
    }
    aligned, clocks = align(logs)
    flows = message_flows(aligned)
    trace = to_chrome_trace(aligned, flows, clocks)["traceEvents"]
    out = [e for e in trace if e.get("flow_out")]
    into = [e for e in trace if e.get("flow_in")]
    assert len(out) == len(into) == 1 and out[0]["bind_id"] == into[0]["bind_id"] == flows[0].id
    assert (out[0]["pid"], out[0]["name"]) == (0, "send") and (into[0]["pid"], into[0]["name"]) == (
        1,
        "recv_wait",
    )
    assert into[0]["ts"] == 10.0  # shifted by rank 1's offset: the receive ends after the send began
    labels = [e for e in trace if e["name"] == "process_labels"]
    assert "+50.0 us (+/- 2.5 us)" in labels[1]["args"]["labels"]


def test_communicator_numbers_every_message_and_records_parked_receives(tmp_path):
    """seq counts per (peer, tag); a message taken from the parked queue still gets a (zero-length)
    recv_wait, so every received message has its arrow."""
    transports = open_world("local", 2, "")
    tracers = [Tracer(r, tmp_path / f"rank-{r}.jsonl") for r in range(2)]
    comms = [Communicator(r, 2, t, tracer=tracers[r], timeout_s=5) for r, t in enumerate(transports)]
    x = np.arange(3, dtype=np.float32)

    def rank0():
        for _ in range(3):
            comms[0].send(x, 1, tag=5)
        comms[0].send(x, 1, tag=6)
        comms[0].send_obj({"k": 1}, 1, tag=5)  # an object on the same tag is the 4th message
        comms[0].recv(1, tag=9)

    t = threading.Thread(target=rank0)
    t.start()
    comms[1].recv(0, tag=6)  # the three tag-5 arrays arrive first and are parked
    for _ in range(3):
        comms[1].recv(0, tag=5)
    assert comms[1].recv_obj(0, tag=5) == {"k": 1}
    comms[1].send(x, 0, tag=9)
    t.join(5)
    for tr in tracers:
        tr.flush()
    logs = {r: read_events(tmp_path / f"rank-{r}.jsonl") for r in range(2)}
    sends = [(e["args"]["tag"], e["args"]["seq"]) for e in logs[0] if e["name"] == "send"]
    assert sends == [(5, 0), (5, 1), (5, 2), (6, 0), (5, 3)]
    waits = [(e["args"]["tag"], e["args"]["seq"]) for e in logs[1] if e["name"] == "recv_wait"]
    assert waits == [(6, 0), (5, 0), (5, 1), (5, 2), (5, 3)]
    assert any(e["dur"] == 0.0 for e in logs[1] if e["name"] == "recv_wait")  # taken from the parked queue
    flows = message_flows(logs)
    assert len(flows) == 6 and receives_before_send(flows) == []
    for c in comms:
        c.close()


def check_skewed_run(run_dir, skews: dict[int, float], n: int) -> None:
    """Raw logs show the skew (some receives before their sends); the offsets measured at rendezvous
    are each within their bound of the injected skew, and the aligned timeline has no receive
    before its send."""
    raw = {r: read_events(run_dir / f"rank-{r}.jsonl") for r in range(n)}
    raw_flows = message_flows(raw)
    assert raw_flows and receives_before_send(raw_flows), "the skew did not show in the raw timestamps"
    aligned, clocks = align(raw)
    assert sorted(clocks) == list(range(n))
    for r, clock in clocks.items():
        # The rank's clock runs skew ahead, so its offset to rank 0's clock is -skew; the offset
        # applied (tightened by the messages) stays within the same bound of the estimate.
        assert abs(clock.offset_us + skews.get(r, 0.0)) <= clock.uncertainty_us, (r, clock)
        assert abs(clock.applied_us - clock.offset_us) <= clock.uncertainty_us, (r, clock)
    flows = message_flows(aligned)
    assert len(flows) == len(raw_flows)
    assert receives_before_send(flows) == []


@pytest.mark.timeout(90)
def test_skewed_rank_is_repaired_by_its_measured_offset(runs_dir):
    skews = {2: 250_000.0, 1: -3_000.0}
    code, result, out, err = run_scenario(
        "ring",
        runs_dir,
        ranks=4,
        sets=["params.sizes=[1KiB,64KiB]", "params.iters=5"],
        env={"PLAYGROUND_CLOCK_SKEW_US": "2=250000,1=-3000"},
    )
    assert code == 0, out + err
    run_dir = runs_dir / "latest"
    check_skewed_run(run_dir, skews, 4)
    trace_file = runs_dir / "trace.json"
    proc = run_cli(["inspect", str(run_dir), "--trace", str(trace_file)])
    assert proc.returncode == 0, proc.stderr
    assert "message arrows" in proc.stdout and "warning" not in proc.stdout, proc.stdout
    trace = json.loads(trace_file.read_text())["traceEvents"]
    ins = {e["bind_id"] for e in trace if e.get("flow_in")}
    outs = {e["bind_id"] for e in trace if e.get("flow_out")}
    assert ins and ins == outs


@pytest.mark.timeout(90)
def test_skewed_rank_0_under_another_launcher(ranks, runs_dir):  # noqa: F811
    """Rank 0 hosts the coordinator in a thread; its own time source is skewed, the coordinator's is
    not: rank 0 gets an offset like any other rank."""
    port = ranks.start_nodes(3, runs_dir, SMALL, extra_env={"PLAYGROUND_CLOCK_SKEW_US": "0=40000,2=-7000"})
    done = ranks.finish()
    assert [code for code, _, _ in done] == [0, 0, 0], done
    check_skewed_run(runs_dir / f"ring-{port}", {0: 40_000.0, 2: -7_000.0}, 3)
