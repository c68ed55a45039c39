"""`inspect RUN --diagram FILE.svg` on real runs: the `messages` scenario (a 1 KiB ring and tree
all-reduce on 4 rank processes, every message traced) drawn through the CLI, its layout counted
against the algorithms, the limit, a run without message events, bad flags, and the lecture's two
diagrams with their sentences."""

import xml.etree.ElementTree as ET

import pytest

from playground.cli.testing import run_cli, run_scenario
from playground.commands.inspect import load_run
from playground.diagram import layout
from playground.lecture import plots
from playground.lecture.figures import Run

N = 4
NS = {"s": "http://www.w3.org/2000/svg"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    code, result, stdout, stderr = run_scenario("messages", out=out, ranks=N, timeout_s=50)
    assert code == 0, stdout + stderr
    assert [r["algorithm"] for r in result["rows"]] == ["ring", "tree"]
    return (out / "latest").resolve()


def arrows(svg_path) -> list[ET.Element]:
    root = ET.parse(svg_path).getroot()  # well-formed XML, or this raises
    return root.findall(".//s:g[@class='message']/s:line[@class='arrow']", NS)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("time", ["logical", "real"])
def test_a_real_run_has_one_arrow_per_message_of_each_algorithm(run_dir, time):
    events = load_run(run_dir)
    ring = layout(events, time=time, ops="ring")
    assert len(ring.arrows) == N * 2 * (N - 1)  # 2(N-1) steps, one message per rank each
    assert {(a.src, a.dst) for a in ring.arrows} == {(r, (r + 1) % N) for r in range(N)}
    tree = layout(events, time=time, ops="tree")
    assert len(tree.arrows) == 2 * (N - 1)  # every edge of the tree once up, once down
    if time == "logical":
        assert ring.depth == 2 * (N - 1) and tree.depth == 2 * 2  # 2 log2 N levels
    for lay in (ring, tree):
        assert all(a.y1 > a.y0 for a in lay.arrows), "a receive drawn above its send"
    everything = layout(events, time=time)
    barriers = [a for a in everything.arrows if a.tag == -1]
    assert len(everything.arrows) - len(barriers) == len(ring.arrows) + len(tree.arrows)
    assert barriers and len(barriers) % (N * 2) == 0  # dissemination barriers: log2 N rounds of N


@pytest.mark.timeout(60)
def test_the_cli_writes_the_diagram_and_says_what_it_drew(run_dir, tmp_path):
    svg = tmp_path / "ring.svg"
    proc = run_cli(["inspect", str(run_dir), "--diagram", str(svg), "--diagram-ops", "ring"], timeout_s=30)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote message diagram {svg} (24 messages of the ring operations between 4 ranks" in proc.stdout
    assert "longest chain 6 messages, logical time" in proc.stdout
    assert len(arrows(svg)) == 24
    real = tmp_path / "all.svg"
    proc = run_cli(["inspect", str(run_dir), "--diagram", str(real), "--diagram-time", "real"], timeout_s=30)
    assert proc.returncode == 0, proc.stderr
    assert len(arrows(real)) == len(layout(load_run(run_dir)).arrows) > 30


@pytest.mark.timeout(60)
def test_past_the_limit_it_draws_the_first_ones_and_says_so(run_dir, tmp_path):
    svg = tmp_path / "cut.svg"
    proc = run_cli(["inspect", str(run_dir), "--diagram", str(svg), "--diagram-max", "10"], timeout_s=30)
    assert proc.returncode == 0, proc.stderr
    total = len(layout(load_run(run_dir)).arrows)
    line = f"drew the first 10 of {total} messages: the limit is 10"
    assert f"note: {line}" in proc.stdout
    assert len(arrows(svg)) == 10 and line in svg.read_text()


@pytest.mark.timeout(60)
def test_a_run_without_message_events_is_one_line_and_exit_2(tmp_path):
    code, _, stdout, stderr = run_scenario(
        "ring",
        out=tmp_path,
        ranks=2,
        sets=["params.sizes=[1KiB]", "params.iters=1", "params.warmup=0", "params.trace_messages=false"],
        timeout_s=50,
    )
    assert code == 0, stdout + stderr
    svg = tmp_path / "d.svg"
    proc = run_cli(["inspect", str(tmp_path / "latest"), "--diagram", str(svg)], timeout_s=30)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert "no message events inside any of its timed operations" in proc.stderr
    assert "--set params.trace_messages=true" in proc.stderr
    assert not svg.exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--diagram", "d.png"], "--diagram: the diagram is written as SVG: give a FILE.svg"),
        (["--diagram", "d.svg", "--diagram-max", "0"], "--diagram-max: must be >= 1, got 0"),
        (["--diagram-ops", "ring"], "--diagram-ops: needs --diagram FILE.svg"),
        (["--diagram", "d.svg", "--diagram-ops", "hd"], "no timed operation named 'hd'"),
    ],
)
def test_bad_diagram_flags_are_one_line_and_exit_2(run_dir, tmp_path, flags, said):
    proc = run_cli(["inspect", str(run_dir), *flags], timeout_s=30, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and said in proc.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.timeout(60)
def test_the_lecture_draws_ring_beside_tree_and_counts_their_steps(run_dir, tmp_path):
    drawn = plots.message_diagrams(Run.from_dir("messages", run_dir), tmp_path)
    assert [p.name for p in drawn] == ["ring-diagram.svg", "tree-diagram.svg"]
    ring, tree = drawn.values()
    assert "24 messages in 6 steps, 2(N-1) = 6" in ring
    assert "6 messages in 4 steps, 2 log2 N = 4" in tree
    assert [len(arrows(p)) for p in drawn] == [24, 6]
