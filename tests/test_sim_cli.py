"""`python -m playground simulate` as a user types it: the documented commands (small), the run
directory it writes, inspect on it, and bad input."""

import json
from pathlib import Path

import calibrations
import pytest

from playground.cli.testing import run_cli
from playground.models.calibration import ENVIRONMENT, read_calibration

pytestmark = pytest.mark.timeout(120)
NO_CALIBRATION = {ENVIRONMENT: ""}  # only ./calibration.json is the default one
BENCH_KEYS = {"size", "count", "dtype", "op", "algorithm", "time_us", "algbw_gbps", "busbw_gbps", "wrong"}
BENCH_KEYS |= {"model_us", "vs_model", "model_pick"}


def simulate(runs_dir: Path, *args: str, cwd: Path | None = None):
    proc = run_cli(["simulate", *args, "--out", str(runs_dir)], timeout_s=110, cwd=cwd, env=NO_CALIBRATION)
    result_file = runs_dir / "latest" / "result.json"
    result = json.loads(result_file.read_text()) if result_file.exists() and proc.returncode != 2 else {}
    return proc, result


def test_every_algorithm_beside_its_closed_form_and_a_run_directory_inspect_reads(runs_dir, tmp_path):
    proc, result = simulate(
        runs_dir, "allreduce", "--algo", "ring,tree,hd,rd", "--ranks", "16", "--alpha", "5us",
        "--beta", "50GB/s", "--gamma", "100GB/s", "--sizes", "1KiB..64KiB", "--step", "8",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = result["rows"]
    assert [(r["algorithm"], r["size"]) for r in rows] == [
        (a, s) for a in ("ring", "tree", "hd", "rd") for s in (1024, 8192, 65536)
    ]
    for r in rows:
        assert BENCH_KEYS <= set(r) and r["ranks"] == 16 and r["wrong"] == 0 and r["mode"] == "data"
        assert r["vs_model"] == pytest.approx(1.0, rel=1e-9)
    assert "sim/model" in proc.stdout and "wrong values: 0 OK" in proc.stdout
    run_dir = Path(result["run_dir"])
    assert len(list(run_dir.glob("rank-*.jsonl"))) == 16 and (run_dir / "simulation.yaml").exists()
    trace = tmp_path / "trace.json"
    shown = run_cli(["inspect", str(run_dir), "--trace", str(trace)])
    assert shown.returncode == 0, shown.stderr
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["pid"] for e in events if e.get("ph") == "X"} == set(range(16))
    assert any(e.get("name") == "recv_wait" for e in events)


def test_a_64_rank_trace_is_a_well_formed_perfetto_timeline(runs_dir, tmp_path):
    """ "A 64-rank trace opens in Perfetto", checked offline (the UI needs the network):
    the Chrome trace JSON Perfetto reads, a process per rank, every message an arrow from its send
    to its receive, which comes after it in virtual time."""
    proc, result = simulate(runs_dir, "allreduce", "--algo", "ring", "--ranks", "64", "--sizes", "4KiB")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trace = tmp_path / "trace.json"
    shown = run_cli(["inspect", str(result["run_dir"]), "--trace", str(trace)])
    assert shown.returncode == 0, shown.stderr
    events = json.loads(trace.read_text())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in slices} == set(range(64))
    assert all(isinstance(e["ts"], (int, float)) and e["dur"] >= 0 for e in slices)
    ends = {}
    for e in slices:
        for end in ("flow_out", "flow_in"):
            if e.get(end):
                ends.setdefault(e["bind_id"], {})[end] = e
    assert len(ends) == 64 * 2 * 63  # every message of the ring: 2(N-1) per rank
    for pair in ends.values():
        send, recv = pair["flow_out"], pair["flow_in"]
        assert recv["pid"] != send["pid"]
        assert recv["ts"] + recv["dur"] >= send["ts"] + 5.0 - 1e-6  # taken at arrival: alpha 5 us later


def test_crossover_table_and_plot(runs_dir):
    proc, result = simulate(
        runs_dir,
        "allreduce",
        "--link",
        "ib",
        "--ranks",
        "8..64",
        "--sizes",
        "8..16MiB",
        "--step",
        "8",
        "--crossover",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (Path(result["run_dir"]) / "crossover.png").stat().st_size > 1000
    table = next(t for t in result["tables"] if t["title"].startswith("crossover"))
    assert [r["ranks"] for r in table["rows"]] == [8, 16, 32, 64]
    s_star = [r["model_tree_bytes"] for r in table["rows"]]
    assert s_star == sorted(s_star) and s_star[0] > 0  # the ring needs larger messages at more ranks
    assert s_star[-1] < 16 << 20  # every model crossover lies inside the 8 B .. 16 MiB sweep,
    for r in table["rows"]:  # so the simulation finds it: the first swept size past the model's
        assert r["sim_tree_bytes"], r
        assert r["sim_tree_bytes"] >= r["model_tree_bytes"] > r["sim_tree_bytes"] / 8


def test_fold_runs_one_rank_for_the_ranks_that_share_a_timeline(runs_dir):
    """--fold: the 1024-rank ring runs rank 0 alone (2,046 messages for 2,095,104) and still meets
    its closed form; the tree, whose root is not like the others, runs every rank."""
    proc, result = simulate(
        runs_dir, "allreduce", "--algo", "ring,tree", "--ranks", "1024", "--sizes", "1GiB", "--fold"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ring, tree = result["rows"]
    assert (ring["mode"], tree["mode"]) == ("folded", "sizes")
    assert ring["vs_model"] == pytest.approx(1.0, rel=1e-9) and tree["vs_model"] == pytest.approx(
        1.0, rel=1e-9
    )
    assert "rank 0 ran 2,046 of them for all ranks" in proc.stdout


def test_topology_with_the_hierarchical_algorithm(runs_dir):
    proc, result = simulate(
        runs_dir, "allreduce", "--topology", "4x4", "--intra", "nvlink", "--inter", "ib", "--algo", "ring,hier",
        "--sizes", "1MiB",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ring, hier = result["rows"]
    assert hier["algorithm"] == "hier" and hier["wrong"] == 0 and hier["vs_model"] == pytest.approx(1.0)
    assert hier["time_us"] < ring["time_us"]


def test_a_calibrated_machine_with_shared_cores(runs_dir, tmp_path):
    """`--link calibration.json`: this machine's host, its cores unless --cores says otherwise; the
    closed form only where ranks do not outnumber cores."""
    cal = calibrations.write(tmp_path / "calibration.json")
    cores = read_calibration(cal).cores
    times = {}
    for given in ("64", None):
        proc, result = simulate(
            runs_dir, "allreduce", "--link", str(cal), "--transport", "ipc", "--ranks", "8", "--sizes", "1MiB",
            "--algo", "ring", *(["--cores", given] if given else []),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        row = result["rows"][0]
        times[given] = row["time_us"]
        assert result["simulation"]["cores"] == (int(given) if given else cores)
        assert (row["model_us"] is None) == (8 > (int(given) if given else cores))
    assert cores >= 8 or times[None] > 1.5 * times["64"]  # 8 ranks' work queues for this machine's cores
    proc, _ = simulate(runs_dir, "allreduce", "--link", str(cal), "--transport", "tcp")
    assert proc.returncode == 2 and f"--transport tcp: {cal} calibrated ipc, shm" in proc.stderr


def test_measured_runs_beside_the_simulation_take_the_median_of_repeats(runs_dir, tmp_path):
    """bench runs given with --measured; repeats of one point give their median."""
    measured = []
    for k, t in enumerate((300.0, 100.0, 200.0)):
        d = tmp_path / f"bench{k}"
        d.mkdir()
        rows = [
            {"algorithm": "ring", "size": 4096, "time_us": t},
            {"algorithm": "tree", "size": 4096, "time_us": 1.0},
        ]
        (d / "result.json").write_text(json.dumps({"ranks": 4, "rows": rows}))
        measured += ["--measured", str(d)]
    proc, result = simulate(
        runs_dir, "allreduce", "--alpha", "10us", "--beta", "1GB/s", "--cores", "2", "--ranks", "2,4",
        "--algo", "ring", "--sizes", "4KiB", *measured,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    by_ranks = {r["ranks"]: r for r in result["rows"]}
    assert "measured_us" not in by_ranks[2]  # nothing measured at 2 ranks
    assert by_ranks[4]["measured_us"] == 200.0
    assert by_ranks[4]["vs_measured"] == pytest.approx(by_ranks[4]["time_us"] / 200.0)
    assert "sim/measured" in proc.stdout
    bad = run_cli(
        ["simulate", "allreduce", "--ranks", "4", "--measured", str(tmp_path), "--out", str(runs_dir)]
    )
    assert bad.returncode == 2 and "--measured" in bad.stderr and "Traceback" not in bad.stderr


def test_a_transport_without_a_link_is_the_default_calibrations_or_says_how_to_make_one(runs_dir, tmp_path):
    """`--transport shm` prices this machine's calibrated shm: the default calibration's, said in the
    first line, or, with none, one line naming the command that writes it (never a preset's link)."""
    proc, _ = simulate(runs_dir, "allreduce", "--transport", "shm", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: --transport shm: prices this machine's calibrated transport, and there is no calibration.json: "
        "`python -m playground calibrate` writes it (or give --link FILE)"
    ]
    calibrations.write(tmp_path / "calibration.json")
    args = ["allreduce", "--transport", "shm", "--ranks", "4", "--algo", "ring", "--sizes", "1MiB"]
    proc, result = simulate(runs_dir, *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    assert f"calibration {(tmp_path / 'calibration.json').resolve()} (shm, " in first
    assert "the default calibration: --transport without --link" in first
    named, named_result = simulate(
        runs_dir, *args, "--link", str(tmp_path / "calibration.json"), cwd=tmp_path
    )
    assert named.returncode == 0, named.stderr
    for key in ("calibration", "transport", "cores", "segment_bytes", "inter"):  # the same as naming it
        assert named_result["simulation"][key] == result["simulation"][key], key


@pytest.mark.parametrize(
    "args,expect",
    [
        (["--ranks", "0"], "--ranks '0': expected a rank count from 1"),
        (["--alpha", "-1us"], "--alpha '-1us': expected a duration such as 0, 200us"),
        (["--beta", "fast"], "--beta 'fast': expected a bandwidth such as 50GB/s"),
        (["--topology", "3x"], "--topology '3x': expected NODESxRANKS_PER_NODE"),
        (["--link", "myrinet"], "--link 'myrinet': unknown link preset; allowed: ib, roce, ethernet, nvlink"),
        (["--algo", "hier"], "--algo hier: needs --topology"),
        (["--algo", "ring,bogus"], "--algo 'bogus': allreduce offers ring, tree, hd, rd, hier, auto"),
        (["--topology", "4x4", "--ranks", "8"], "--ranks 8: --topology 4x4 has 16 ranks"),
        (["--cores", "0"], "--cores 0: expected at least 1 CPU"),
        (["--sizes", "8..1QB"], "--sizes '8..1QB': expected a byte count"),
        (["--data", "--ranks", "128"], "--data: simulating with real bytes is for at most 64 ranks"),
        (["--link", "nosuch.json"], "--link nosuch.json: nosuch.json: cannot read it"),
        (["--link", "ib", "--transport", "shm"], "--transport shm: only with --link calibration.json"),
        (
            ["--fold", "--cores", "2"],
            "--fold with --cores: folding needs data-free messages on one kind of link",
        ),
    ],
)
def test_bad_input_is_one_line_and_status_2(runs_dir, args, expect):
    proc, _ = simulate(runs_dir, "allreduce", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0] and "Traceback" not in proc.stderr, proc.stderr
