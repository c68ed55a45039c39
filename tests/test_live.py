"""The live page (playground/live/): its numbers from a finished run, /metrics in Prometheus'
format, `watch` on a run directory, `run --live` with a failing rank in headless Chromium, and the
port free once the server stops (also after Ctrl-C)."""

import json
import os
import shutil
import signal
import socket
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tools import chromium, importable, need

from playground.cli import main
from playground.cli.testing import run_scenario, session_processes, start_cli
from playground.live.server import LiveServer
from playground.live.snapshot import RunWatcher
from playground.tracing.trace import read_events

TINY_TRAIN = [
    "params.mode=[bucketed]",
    "params.layers=1",
    "params.d_model=16",
    "params.heads=2",
    "params.context=16",
    "params.batch=4",
    "params.steps=3",
    "params.sample_bytes=0",
    "params.bucket_cap_mb=0.005",
]
RING_FAILS = ["params.iters=2", "params.sizes=[4KiB]", "fault.rank=1", "fault.action=raise", "timeout_s=20"]


def port_is_free(port: int) -> bool:
    """Whether a server could listen on `port` again (as servers do, with SO_REUSEADDR: the closed
    connections' TIME_WAIT does not count, a socket still listening does)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return False
    return True


def read_url(proc, timeout_s: float = 30) -> str:
    """The page's URL from the command's first line on stderr (`live page...: URL`)."""
    line = proc.stderr.readline()
    assert "http://127.0.0.1:" in line, line + proc.stderr.read()
    return line[line.index("http://") :].split()[0]


def wait_for_line(proc, words: str) -> list[str]:
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if words in line:
            return seen
    raise AssertionError(f"no line with {words!r} in:\n{''.join(seen)}")


@pytest.fixture(scope="module")
def train_run(tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    code, result, out, err = run_scenario("train", runs, ranks=2, sets=TINY_TRAIN, timeout_s=60)
    assert code == 0, out + err
    return (runs / "latest").resolve(), result


def metrics_of(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.timeout(60)
def test_metrics_of_a_finished_training_run_hold_its_numbers_and_the_port_is_free_after(train_run):
    run_dir, result = train_run
    losses = result["modes"][0]["losses"] if "modes" in result else None
    with LiveServer(run_dir) as server:
        url = server.url
        port = int(url.rsplit(":", 1)[1].strip("/"))
        text = httpx.get(url + "metrics", timeout=10).text
        state = httpx.get(url + "state.json", timeout=10).json()
    assert port_is_free(port)
    m = metrics_of(text)
    assert m[("playground_ranks", ())] == 2
    assert m[("playground_run_status", (("status", "finished"),))] == 1
    sent = {r: read_events(run_dir / f"rank-{r}.jsonl") for r in range(2)}
    for src in range(2):
        want = sum(
            e["args"]["bytes"] for e in sent[src] if e["name"] == "send" and e["args"]["peer"] == 1 - src
        )
        assert want > 0
        assert m[("playground_bytes_sent_total", (("dst", str(1 - src)), ("src", str(src))))] == want
    for rank in range(2):
        steps = [e["args"] for e in sent[rank] if e["name"] == "train.step"]
        assert [s["step"] for s in steps] == [0, 1, 2]
        assert m[("playground_train_step", (("rank", str(rank)),))] == 2
        assert m[("playground_train_loss", (("rank", str(rank)),))] == pytest.approx(steps[-1]["loss"])
        ring_seq = state["ranks"][rank]["seq"]
        assert m[("playground_rank_op_seq", (("rank", str(rank)),))] == ring_seq > 0
    if losses is not None:
        assert [p["loss"] for p in state["training"]["0"]] == pytest.approx(losses)
    assert state["root_cause"] is None and state["failures"] == []


@pytest.mark.timeout(60)
def test_watch_serves_a_finished_run_until_ctrl_c_and_frees_its_port(train_run):
    run_dir, _ = train_run
    proc = start_cli(["watch", str(run_dir)])
    try:
        url = read_url(proc)
        state = httpx.get(url + "state.json", timeout=10).json()
        assert state["status"] == "finished" and state["num_ranks"] == 2
        assert [r["rank"] for r in state["ranks"]] == [0, 1]
        assert len(state["training"]["1"]) == 3
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 130
    finally:
        proc.kill()
        proc.communicate()
    assert port_is_free(int(url.rsplit(":", 1)[1].strip("/")))


def test_watch_names_a_directory_that_is_not_a_run(tmp_path, capsys):
    assert main(["watch", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err == f"error: RUN_DIR: {tmp_path / 'nope'} does not exist\n"


def test_the_root_cause_is_read_from_failures_jsonl_while_the_run_goes(tmp_path):
    """Before result.json exists, the first primary failure the coordinator recorded is the root cause."""
    (tmp_path / "scenario.yaml").write_text("name: ring\nranks: 2\n")
    lines = [
        {"rank": 0, "at_s": 1.0, "headline": "rank 0: PeerLost", "secondary": True, "kind": "error"},
        {"rank": 1, "at_s": 1.1, "headline": "rank 1: boom", "secondary": False, "kind": "error"},
    ]
    (tmp_path / "failures.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"torn')
    (tmp_path / "serving-engine.jsonl").write_text(
        json.dumps({"t_s": 0.5, "running": 3, "waiting": 2, "kv_blocks": 7, "capacity_blocks": 64}) + "\n"
    )
    snap = RunWatcher(tmp_path).snapshot()
    assert snap["status"] == "failing" and snap["root_cause"] == "rank 1: boom"
    assert snap["serving"][0]["kv_blocks"] == 7
    assert [r["state"] for r in snap["ranks"]] == ["not started"] * 2


@pytest.mark.timeout(90)
def test_the_live_page_in_chromium_shows_every_rank_and_the_root_cause(tmp_path):
    exe = chromium()
    need(importable("playwright"), "playwright is not installed (pip install playwright)")
    from playwright.sync_api import sync_playwright

    ranks = 3
    args = ["run", "ring", "--ranks", str(ranks), "--out", str(tmp_path), "--live"]
    proc = start_cli([*args, *sum((["--set", s] for s in RING_FAILS), [])])
    try:
        url = read_url(proc)
        port = int(url.rsplit(":", 1)[1].strip("/"))
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1200, "height": 1000})
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.goto(url)
                wait_for_line(proc, "shows its final state")
                page.wait_for_selector("body[data-status=failed]", timeout=20000)
                rows = page.locator("#ranks tbody tr")
                assert rows.count() == ranks
                assert [rows.nth(r).get_attribute("data-rank") for r in range(ranks)] == ["0", "1", "2"]
                root = page.locator("#root").inner_text()
                assert "root cause: rank 1" in root, root
                assert page.locator("#heatmap .main-svg").count() > 0  # plotly drew the heat map
                shot = tmp_path / "live-page.png"
                page.screenshot(path=str(shot), full_page=True)
                if os.environ.get("PLAYGROUND_ARTIFACTS"):
                    shutil.copy(shot, Path(os.environ["PLAYGROUND_ARTIFACTS"]) / shot.name)
                assert errors == []
            finally:
                browser.close()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 1  # the run's status (it failed), not Ctrl-C's
    finally:
        proc.kill()
        proc.communicate()
    assert port_is_free(port)
    result = json.loads((tmp_path / "latest" / "result.json").read_text())
    assert result["failures"][0].startswith("rank 1")
    # what the page read while the run went on: the coordinator's line, written as it happened
    noted = [json.loads(line) for line in (tmp_path / "latest" / "failures.jsonl").read_text().splitlines()]
    assert noted[0] == {**noted[0], "rank": 1, "secondary": False, "headline": result["failures"][0]}


@pytest.mark.timeout(60)
def test_ctrl_c_during_a_live_run_stops_it_with_130_and_leaves_nothing(tmp_path):
    """The run is going (the page says so), Ctrl-C: exit 130, no process of the session, port free."""
    args = ["run", "ring", "--ranks", "2", "--out", str(tmp_path), "--live", "--set", "params.iters=1000000"]
    proc = start_cli([*args, "--set", "params.sizes=[64]"])
    try:
        url = read_url(proc)
        state = {}
        for _ in range(600):  # until a rank has recorded a collective (each poll waits on the server)
            state = httpx.get(url + "state.json", timeout=10).json()
            if state["status"] == "running" and any(r["records"] for r in state["ranks"]):
                break
        assert state["status"] == "running", state
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 130
    finally:
        proc.kill()
        proc.communicate()
    assert session_processes(proc.pid) == []
    assert port_is_free(int(url.rsplit(":", 1)[1].strip("/")))
