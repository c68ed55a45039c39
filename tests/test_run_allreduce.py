"""Real runs: forked ranks, ZeroMQ, the CLI as a user types it."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from playground.cli.testing import run_cli, run_scenario

TESTS = Path(__file__).resolve().parent


def grid_scenario(tmp_path, algorithm, n, segment_bytes=1 << 20, transport="ipc", inplace=False, big=3001):
    p = tmp_path / f"grid-{algorithm}-{n}.yaml"
    p.write_text(
        f"name: grid\nnode: usernode_grid:main\nranks: {n}\ntransport: {transport}\ntimeout_s: 20\n"
        f"params:\n  algorithm: {algorithm}\n  segment_bytes: {segment_bytes}\n  big: {big}\n"
        f"  inplace: {str(inplace).lower()}\n"
    )
    return str(p)


GRID = [("ipc", n) for n in (1, 2, 3, 5, 8)] + [(t, n) for t in ("tcp", "shm") for n in (3, 5)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", ["ring", "tree", "hd", "rd"])
@pytest.mark.parametrize("transport,n", GRID)
def test_grid_over_real_processes(tmp_path, runs_dir, algorithm, transport, n):
    """Every dtype x op x length (0, 1, N-1, N+1, 3001) in a user's own node module; exact on every
    rank; over each transport (ZeroMQ ipc at every size, tcp and shared memory at 3 and 5 ranks)."""
    code, result, out, err = run_scenario(
        grid_scenario(tmp_path, algorithm, n, transport=transport), runs_dir, env={"PYTHONPATH": str(TESTS)}
    )
    assert code == 0, out + err
    assert result["ok"] and result["ranks"] == n
    assert len(result["rows"]) == 4 * 3 * len({0, 1, max(0, n - 1), n + 1, 3001})
    assert all(row["wrong"] == 0 for row in result["rows"])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["ipc", "shm"])
@pytest.mark.parametrize("algorithm", ["ring", "tree", "hd", "rd"])
def test_in_place_over_real_processes(tmp_path, runs_dir, algorithm, transport):
    """In place, sends leave from the very array the results land in (zero-copy over ZeroMQ from
    64 KiB: 100,003 elements in 5 chunks and 128 KiB segments make such messages)."""
    scenario = grid_scenario(
        tmp_path, algorithm, 5, segment_bytes=128 << 10, transport=transport, inplace=True, big=100_003
    )
    code, result, out, err = run_scenario(scenario, runs_dir, env={"PYTHONPATH": str(TESTS)})
    assert code == 0, out + err
    assert len(result["rows"]) == 4 * 3 * len({0, 1, 4, 6, 100_003})  # dtypes x ops x lengths
    assert all(row["wrong"] == 0 for row in result["rows"])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("algorithm", ["ring", "tree"])
def test_multi_segment_over_tcp(tmp_path, runs_dir, algorithm):
    code, result, out, err = run_scenario(
        grid_scenario(tmp_path, algorithm, 3, segment_bytes=64, transport="tcp"),
        runs_dir,
        env={"PYTHONPATH": str(TESTS)},
    )
    assert code == 0, out + err
    assert len(result["rows"]) == 4 * 3 * len({0, 1, 2, 4, 3001})  # dtypes x ops x lengths at 3 ranks
    assert result["transport"] == "tcp" and all(row["wrong"] == 0 for row in result["rows"])


@pytest.mark.timeout(60)
def test_ring_run_writes_run_dir_and_matching_table(runs_dir):
    code, result, out, err = run_scenario(
        "ring", runs_dir, ranks=4, sets=["params.sizes=[8,1KiB,100000]", "params.iters=3", "params.warmup=1"]
    )
    assert code == 0, out + err
    run_dir = Path(result["run_dir"])
    assert (runs_dir / "latest").resolve() == run_dir.resolve()
    assert (run_dir / "scenario.yaml").exists()
    assert sorted(p.name for p in run_dir.glob("rank-*.jsonl")) == [f"rank-{r}.jsonl" for r in range(4)]
    for key in ("ok", "scenario", "ranks", "rows"):
        assert key in result
    assert [r["size"] for r in result["rows"]] == [8, 1024, 100000]
    header = next(line for line in out.splitlines() if "#wrong" in line)
    col = {name: i for i, name in enumerate(c.strip() for c in re.split(r"[┃│|]", header) if c.strip())}
    for row in result["rows"]:
        assert row["algorithm"] == "ring" and row["wrong"] == 0 and row["time_us"] > 0
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 2 * 3 / 4, rel=1e-3, abs=2e-6)
        assert row["algbw_gbps"] == pytest.approx(row["size"] / row["time_us"] / 1e3, rel=1e-3, abs=2e-6)
        # the printed table has the same numbers as result.json
        printed = next(line for line in out.splitlines() if re.match(rf"^\W*{row['size']}\s", line))
        cells = [c.strip() for c in re.split(r"[│|]", printed) if c.strip()]
        assert (
            cells[col["size (B)"]] == str(row["size"])
            and cells[col["count"]] == str(row["count"])
            and cells[col["#wrong"]] == str(row["wrong"])
        )
        assert float(cells[col["time (us)"]].replace(",", "")) == pytest.approx(row["time_us"], rel=0.01)
        assert float(cells[col["model (us)"]].replace(",", "")) == pytest.approx(row["model_us"], rel=0.01)
        assert cells[col["model pick"]] == row["model_pick"]
    # every event line is one JSON object in the documented format
    lines = (run_dir / "rank-1.jsonl").read_text().splitlines()
    assert lines, "rank 1 logged nothing"
    for line in lines:
        ev = json.loads(line)
        assert {"ts", "dur", "name", "cat", "rank", "tid"} <= set(ev) and ev["rank"] == 1


@pytest.mark.timeout(60)
def test_inspect_and_chrome_trace(runs_dir, tmp_path):
    code, result, out, err = run_scenario(
        "tree", runs_dir, ranks=3, sets=["params.sizes=[4KiB]", "params.iters=2"]
    )
    assert code == 0, out + err
    trace = tmp_path / "t.json"
    plot = tmp_path / "t.png"
    proc = run_cli(
        ["inspect", str(runs_dir / "latest"), "--trace", str(trace), "--plot", str(plot)], timeout_s=50
    )
    assert proc.returncode == 0, proc.stderr
    assert "slowest rank:" in proc.stdout and "critical phase" in proc.stdout
    data = json.loads(trace.read_text())
    names = {
        e["pid"]: e["args"]["name"]
        for e in data["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert names == {0: "rank 0", 1: "rank 1", 2: "rank 2"}
    xs = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert xs and all({"ts", "dur", "pid", "tid", "name"} <= set(e) for e in xs)
    assert {e["pid"] for e in xs} == {0, 1, 2}
    assert plot.stat().st_size > 1000


@pytest.mark.timeout(90)
def test_sixty_four_ranks(runs_dir):
    """The largest world we support: counts below and above N, every rank checked."""
    code, result, out, err = run_scenario(
        "ring",
        runs_dir,
        ranks=64,
        timeout_s=80,
        sets=[
            "params.sizes=[4,260]",
            "params.iters=1",
            "params.warmup=0",
            "params.algorithm=[ring,tree]",
            "params.dtype=float32",
        ],
    )
    assert code == 0, out + err
    assert result["ranks"] == 64 and len(result["rows"]) == 4
    assert all(row["wrong"] == 0 for row in result["rows"])
    assert len(list((runs_dir / "latest").glob("rank-*.jsonl"))) == 64


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["ipc", "shm"])
def test_hierarchical_all_reduce_for_real(runs_dir, transport):
    """`hier` on one host, ranks grouped into nodes of 3 by a parameter: reduce-scatter inside each
    group, all-reduce across groups, all-gather inside; exact on every rank."""
    code, result, out, err = run_scenario(
        "ring",
        runs_dir,
        ranks=6,
        transport=transport,
        sets=[
            "params.algorithm=[hier,ring]",
            "params.ranks_per_node=3",
            "params.sizes=[4,20,4KiB,1MiB]",
            "params.iters=2",
            "params.warmup=1",
        ],
    )
    assert code == 0, out + err
    assert [r["algorithm"] for r in result["rows"]] == ["hier"] * 4 + ["ring"] * 4
    assert all(row["wrong"] == 0 for row in result["rows"])


def test_hierarchical_needs_whole_nodes(runs_dir):
    code, _, out, err = run_scenario(
        "ring", runs_dir, ranks=8, sets=["params.algorithm=[hier]", "params.ranks_per_node=3"]
    )
    assert code == 2, out + err
    assert "error: --set params.ranks_per_node=3: must divide the 8 ranks into whole nodes, got 3" in err


@pytest.mark.timeout(60)
def test_the_readme_command_runs_in_the_checkout(tmp_path):
    """`pip install . && python -m playground run ring ...` typed in the clone: Python imports the
    checkout's ./playground, which has no compiled module in it; the installed one must still be found."""
    checkout = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "playground", "run", "ring", "--ranks", "2", "--out", str(tmp_path / "runs")],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert done.returncode == 0 and "wrong values: 0 OK" in done.stdout, done.stdout + done.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("collective", ["allreduce", "allgather", "reduce_scatter", "broadcast"])
def test_the_corrupt_drill_fails_run_ring_for_every_collective(runs_dir, collective):
    """`run ring --ranks 8 --set fault.rank=1 --set fault.action=corrupt`: the bit lands in the first
    array rank 1 sends, a warm-up call's, which is checked like every other. (In a 4-rank binomial
    broadcast from rank 0, rank 1 is a leaf and sends nothing: rank 2 forwards to rank 3.)"""
    rank = 2 if collective == "broadcast" else 1
    code, result, out, err = run_scenario(
        "ring",
        runs_dir,
        ranks=8 if collective == "allreduce" else 4,
        sets=[f"fault.rank={rank}", "fault.action=corrupt", f"params.collective={collective}"]
        + ["params.sizes=[1KiB]"]
        + (["params.algorithm=[tree]"] if collective == "broadcast" else []),
        timeout_s=50,
    )
    assert code == 1, out + err
    assert not result["ok"] and len(result["rows"]) == 1 and result["rows"][0]["wrong"] > 0
    assert "wrong values: 0 OK" not in out and "at warm-up iteration 0" in out + err


@pytest.mark.timeout(60)
def test_a_drill_that_never_fires_says_so(runs_dir):
    """A broadcast's leaf sends nothing: its corrupt drill cannot fire, and the run says so."""
    code, result, out, err = run_scenario(
        "ring",
        runs_dir,
        ranks=4,
        sets=["fault.rank=1", "fault.action=corrupt", "params.collective=broadcast"]
        + ["params.algorithm=[tree]", "params.sizes=[1KiB]"],
        timeout_s=50,
    )
    assert code == 0, out + err
    note = "fault: corrupt on rank 1 never fired: after post 0 it posted no array from then on"
    assert any(n.startswith(note) for n in result["notes"]), result["notes"]
    assert note in " ".join(out.split())
