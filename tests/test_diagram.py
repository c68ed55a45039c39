"""The message diagram (playground.diagram): its layout and its SVG, on the logs of the real
algorithms run by the simulator (one process, virtual time, exact) and on small synthetic logs.
The real multi-process runs and the CLI are in test_diagram_cli.py."""

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from playground.cli.testing import run_cli
from playground.commands.inspect import load_run
from playground.core.errors import ScenarioError
from playground.diagram import MAX_RANKS, draw_diagram, layout
from playground.diagram.layout import calls, lamport_ticks
from playground.diagram.svg import render_svg
from playground.diagram.tags import message_label, tag_name
from playground.models.costs import Link
from playground.sim.driver import simulate
from playground.sim.network import Machine
from playground.tracing.timeline import message_flows
from playground.tracing.trace import CAT_OP, CAT_PHASE

LINK = Link(5e-6, 50e9, 100e9)
NS = {"s": "http://www.w3.org/2000/svg"}


def log2(n: int) -> int:
    return int(math.log2(n))


# (messages sent, longest chain of messages) of one all-reduce with one segment, from the schedules
# in the algorithms' headers: the ring's 2(N-1) steps of N messages, the tree's 2 log2 N levels
# over N-1 edges each way, halving-doubling's 2 log2 N exchanges and recursive doubling's log2 N.
CLOSED_FORMS = {
    "ring": lambda n: (n * 2 * (n - 1), 2 * (n - 1)),
    "tree": lambda n: (2 * (n - 1), 2 * log2(n)),
    "hd": lambda n: (2 * n * log2(n), 2 * log2(n)),
    "rd": lambda n: (n * log2(n), log2(n)),
}


def simulated(tmp_path: Path, algorithm: str, n: int, size: int = 1024) -> Path:
    """A run directory with rank logs of one all-reduce on `n` simulated ranks."""
    run_dir = tmp_path / f"{algorithm}-{n}"
    run_dir.mkdir()
    simulate(
        Machine(1, n, LINK, LINK, LINK.gamma_bytes_per_s), "allreduce", algorithm, size, trace_dir=run_dir
    )
    return run_dir


def ev(name, ts, dur=1.0, cat="send", **args):
    return {"ts": ts, "dur": dur, "name": name, "cat": cat, "tid": 0, "args": args}


def message(src, dst, tag, seq, sent, received, nbytes=8):
    """The send event at `src` and the receive event at `dst` of one message."""
    return (
        src,
        ev("send", sent, 0.5, peer=dst, tag=tag, bytes=nbytes, seq=seq),
        dst,
        ev("recv_wait", received - 1.0, 1.0, "wait", peer=src, tag=tag, seq=seq),
    )


def logs(*messages, extra=()) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for src, send, dst, recv in messages:
        out.setdefault(src, []).append(send)
        out.setdefault(dst, []).append(recv)
    for rank, e in extra:
        out.setdefault(rank, []).append(e)
    return out


@pytest.mark.parametrize("algorithm", CLOSED_FORMS)
@pytest.mark.parametrize("n", [2, 4, 8])
def test_one_arrow_per_message_and_the_algorithms_steps(tmp_path, algorithm, n):
    lay = layout(load_run(simulated(tmp_path, algorithm, n)))
    messages, steps = CLOSED_FORMS[algorithm](n)
    assert len(lay.arrows) == lay.num_messages == messages
    assert lay.depth == steps
    assert all(a.y1 > a.y0 for a in lay.arrows), "every receive is drawn below its send"
    assert lay.ranks == tuple(range(n))
    assert [(b.name, b.detail) for b in lay.bands] == [("allreduce", f"{algorithm} 1 KiB")]
    assert {b.rank for b in lay.bars} == set(range(n))


@pytest.mark.parametrize("n", [4, 8])
def test_logical_time_puts_each_ring_step_on_one_row(tmp_path, n):
    lay = layout(load_run(simulated(tmp_path, "ring", n)))
    rows: dict[float, list] = {}
    for a in lay.arrows:
        rows.setdefault(a.y0, []).append(a)
    assert sorted(rows) == [2 * k + 1 for k in range(2 * (n - 1))]  # a send row, then its receive row
    for arrows in rows.values():
        assert sorted((a.src, a.dst) for a in arrows) == [(r, (r + 1) % n) for r in range(n)]
        assert {a.y1 for a in arrows} == {arrows[0].y0 + 1}
    assert lay.rows == 4 * (n - 1)


def test_real_time_draws_a_message_from_its_send_start_to_its_wait_end(tmp_path):
    events = load_run(simulated(tmp_path, "tree", 4))
    lay = layout(events, time="real")
    flows = {(f.src, f.dst, f.tag, f.seq): f for f in message_flows(events)}
    t0 = min(f.send["ts"] for f in flows.values())
    for a in lay.arrows:
        f = flows[a.src, a.dst, a.tag, a.seq]
        assert a.y0 == pytest.approx(f.send["ts"] - t0)
        assert a.y1 == pytest.approx(f.recv["ts"] + f.recv["dur"] - t0)
        assert a.y1 > a.y0
    assert lay.y_max == pytest.approx(max(a.y1 for a in lay.arrows))
    assert lay.bands[0].y0 == 0.0 and lay.bands[0].y1 == pytest.approx(lay.y_max)


def test_past_the_limit_the_first_messages_by_send_time_are_drawn(tmp_path):
    events = load_run(simulated(tmp_path, "ring", 4))
    lay = layout(events, max_messages=10)
    assert len(lay.arrows) == 10 and lay.num_messages == 24
    flows = sorted(message_flows(events), key=lambda f: f.send["ts"])
    assert {(a.src, a.seq) for a in lay.arrows} == {(f.src, f.seq) for f in flows[:10]}
    assert all(a.y1 > a.y0 for a in lay.arrows)


def test_ops_keeps_the_messages_inside_timed_calls_of_that_name_or_algorithm():
    events = logs(
        message(0, 1, -1, 0, 1.0, 3.0),  # a barrier before the call
        message(0, 1, -10, 0, 11.0, 13.0),  # inside the ring call
        message(1, 0, -10, 0, 12.0, 14.0),
        message(0, 1, -20, 0, 31.0, 33.0),  # inside the tree call
        extra=[
            (r, ev("allreduce", start, 10.0, CAT_OP, algorithm=algo, bytes=1024))
            for r in (0, 1)
            for start, algo in ((10.0, "ring"), (30.0, "tree"))
        ]
        + [(0, ev("ring.reduce_scatter", 10.5, 3.0, CAT_PHASE))],
    )
    assert [(c.name, c.index, c.args["algorithm"]) for c in calls(events)] == [
        ("allreduce", 0, "ring"),
        ("allreduce", 1, "tree"),
    ]
    everything = layout(events)
    assert [a.tag for a in everything.arrows] == [-1, -10, -10, -20] and len(everything.bands) == 2
    ring = layout(events, ops="ring")
    assert [a.tag for a in ring.arrows] == [-10, -10]
    assert [(b.name, b.detail) for b in ring.bands] == [("allreduce", "ring 1 KiB")]
    assert [(b.rank, b.name) for b in ring.bars] == [(0, "ring.reduce_scatter")]
    assert [a.tag for a in layout(events, ops="all").arrows] == [-10, -10, -20]
    assert [a.tag for a in layout(events, ops="allreduce").arrows] == [-10, -10, -20]


def test_inconsistent_logs_still_get_a_tick_for_every_event():
    """Each rank's receive ends before its own send starts: a cycle no real run can log. It is cut
    at the earliest receive instead of waiting forever."""
    events = logs(message(0, 1, 5, 0, 2.0, 1.0), message(1, 0, 5, 0, 2.0, 1.0))
    sends, receives, chains = lamport_ticks(message_flows(events))
    assert all(t > 0 for t in sends + receives) and max(chains) >= 1


def test_tags_are_named_by_the_algorithm_that_sends_them():
    assert [tag_name(t) for t in (-1, -2, -10, -20, -21, -30, -40, -50)] == [
        "barrier",
        "obj",
        "ring",
        "tree.reduce",
        "tree.bcast",
        "hd",
        "rd",
        "hier",
    ]
    assert tag_name(-110) == "intra.ring" and tag_name(-221) == "inter.tree.bcast"
    assert tag_name(7) == "tag 7" and tag_name(-7) == "tag -7"
    assert message_label(-10, 256) == "ring 256 B" and message_label(-1, 0) == "barrier"
    assert message_label(-10, 0) == "ring 0 B"  # an empty chunk (8 bytes over 8 ranks) says so
    assert message_label(3, 1 << 20) == "tag 3 1 MiB"


def _svg(text: str) -> ET.Element:
    return ET.fromstring(text)  # raises on anything that is not well-formed XML


def _label_boxes(root: ET.Element) -> list[tuple[float, ...]]:
    out = []
    for rect in root.iterfind(".//s:g[@class='label']/s:rect", NS):
        x, y = float(rect.get("x")), float(rect.get("y"))
        out.append((x, y, x + float(rect.get("width")), y + float(rect.get("height"))))
    return out


def _overlaps(a, b) -> bool:
    return min(a[2], b[2]) - max(a[0], b[0]) > 0.5 and min(a[3], b[3]) - max(a[1], b[1]) > 0.5


@pytest.mark.parametrize(("algorithm", "n"), [("ring", 4), ("ring", 8), ("tree", 8), ("rd", 8)])
def test_svg_has_one_arrow_per_message_and_no_label_on_another(tmp_path, algorithm, n):
    lay = layout(load_run(simulated(tmp_path, algorithm, n)))
    root = _svg(render_svg(lay, "a <title> & more"))
    arrows = root.findall(".//s:g[@class='message']/s:line[@class='arrow']", NS)
    assert len(arrows) == len(lay.arrows)
    assert len(root.findall(".//s:g[@class='message']", NS)) == len(lay.arrows)
    assert len(root.findall(".//s:g[@class='band']", NS)) == 1
    assert len(root.findall(".//s:rect[@class='phase']", NS)) == len(lay.bars)
    assert root.find("s:title", NS).text == "a <title> & more"
    boxes = _label_boxes(root)
    assert len(boxes) == len(lay.arrows)
    clashes = [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if _overlaps(a, b)]
    assert clashes == []


def test_draw_diagram_past_the_limit_says_so_on_the_figure(tmp_path):
    run_dir = simulated(tmp_path, "ring", 4)
    info = draw_diagram(run_dir, tmp_path / "cut.svg", max_messages=5)
    assert (info.num_drawn, info.num_messages, info.depth, info.truncated) == (5, 24, info.depth, True)
    text = (tmp_path / "cut.svg").read_text()
    root = _svg(text)
    assert len(root.findall(".//s:line[@class='arrow']", NS)) == 5
    assert "drew the first 5 of 24 messages: the limit is 5" in text
    assert "drew the first 5 of 24 messages" in info.cut_note()
    whole = draw_diagram(run_dir, tmp_path / "whole.svg")
    assert not whole.truncated and "the limit" not in (tmp_path / "whole.svg").read_text()


def test_more_ranks_than_lanes_is_refused_in_one_line(tmp_path):
    run_dir = simulated(tmp_path, "ring", 2 * MAX_RANKS)
    with pytest.raises(ScenarioError, match=r"16 ranks; the message diagram draws at most 8"):
        draw_diagram(run_dir, tmp_path / "d.svg")
    proc = run_cli(["inspect", str(run_dir), "--diagram", str(tmp_path / "d.svg")], timeout_s=30)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "rerun with --ranks 8 or fewer" in proc.stderr
    assert not (tmp_path / "d.svg").exists()


def test_logs_without_messages_are_refused_naming_the_param(tmp_path):
    run_dir = tmp_path / "quiet"
    run_dir.mkdir()
    for r in (0, 1):
        (run_dir / f"rank-{r}.jsonl").write_text(json.dumps({**ev("allreduce", 1.0, 2.0, CAT_OP), "rank": r}))
    with pytest.raises(
        ScenarioError, match=r"no message events in its rank logs.*params.trace_messages=true"
    ):
        draw_diagram(run_dir, tmp_path / "d.svg")
    with pytest.raises(ScenarioError, match=r"no timed operation named 'tree' \(--diagram-ops takes all"):
        draw_diagram(simulated(tmp_path, "ring", 2), tmp_path / "d.svg", ops="tree")
