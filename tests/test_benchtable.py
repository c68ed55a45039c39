"""`python -m playground bench table`: the README's table in one command. The rendering is a pure
function of the rounds' numbers; one real run (ours only, tiny sizes) checks the command end to end."""

import json

import pytest

from playground.cli.testing import run_cli
from playground.commands.benchtable import render


def _runs():
    runs = []
    for rnd, (ipc_us, shm_us, gloo_us) in enumerate(
        ((100.0, 10.0, 400.0), (120.0, 12.0, 300.0), (90.0, 8.0, 500.0))
    ):
        for system, t in (("ipc", ipc_us), ("shm", shm_us), ("gloo", gloo_us)):
            best = {
                8: {
                    "time_us": t,
                    "busbw_gbps": None,
                    "algorithm": "rd" if system != "gloo" else "gloo",
                    "wrong": 0,
                },
                16 << 20: {"time_us": t * 1000, "busbw_gbps": None, "algorithm": "ring", "wrong": 0},
            }
            runs.append({"round": rnd, "ranks": 2, "system": system, "load": 0.1, "best": best})
    return runs


def test_medians_ranges_and_speed_ratios():
    counts = {"time": (100, 20), "busbw": (10, 3)}
    text = render(_runs(), [8, 16 << 20], [2], ["ipc", "shm", "gloo"], 3, "cmd", [0.1, 0.5, 0.2], counts)
    assert (
        "each round the slowest rank's median of 100 iterations after 20 warm-up for the times, 10 after 3 for busbw."
        in text
    )
    assert "- load average (1 min): 0.10 before, 0.50 at most during, 0.20 after (it counts" in text
    time_row = next(line for line in text.splitlines() if line.startswith("| 2 | 8 B |"))
    # medians 100 / 10 / 400 us; ranges over the rounds; Gloo's median over ours
    assert (
        time_row
        == "| 2 | 8 B | 100 (rd) [90.0-120] | 10.0 (rd) [8.0-12.0] | 400 [300-500] | 4.00x | 40.00x |"
    )
    bw_row = next(line for line in text.splitlines() if line.startswith("| 2 | 16 MiB |"))
    # busbw = 16 MiB / t x 2(N-1)/N, in GB/s: 16.78 MB / 100 ms = 0.17 GB/s
    assert bw_row.startswith(
        "| 2 | 16 MiB | 0.17 (ring) [0.14-0.19] | 1.68 (ring) [1.40-2.10] | 0.04 [0.03-0.06] |"
    )
    assert bw_row.endswith("| 4.00x | 40.00x |")


def test_the_bound_and_the_share_of_it_are_taken_round_by_round():
    """Each round's copy rate gives that round's bound; ours over shm is set against it in the
    same round (16 MiB at 2 ranks: 10, 12 and 8 ms against a bound of 8 ms)."""
    counts = {"time": (100, 20), "busbw": (10, 3)}
    rate = 2 * 4.5 * (16 << 20) / (2 * 8e-3 * 1e9)  # GB/s at which the bound is 8 ms
    copies = [
        {"round": r, "size": 16 << 20, "one_core": rate / 2, "all_cores": rate, "cores": 2} for r in range(3)
    ]
    text = render(_runs(), [16 << 20], [2], ["ipc", "shm", "gloo"], 3, "cmd", [0.1], counts, copies)
    assert "| bound (ms), cached / memory | ours, shm, share of the bound, cached / memory |" in text
    bw_row = next(line for line in text.splitlines() if line.startswith("| 2 | 16 MiB |"))
    assert bw_row.endswith("| 4.00x | 40.00x | 8.00 / 8.00 | 80% [67%-100%] / 80% [67%-100%] |")
    assert "The share is the bound over ours over shm" in text
    # a larger size copied at half the rate: the memory bound is twice the cached one
    slow = [{**c, "size": 64 << 20, "one_core": rate / 4, "all_cores": rate / 2} for c in copies]
    text = render(_runs(), [16 << 20], [2], ["ipc", "shm", "gloo"], 3, "cmd", [0.1], counts, copies + slow)
    bw_row = next(line for line in text.splitlines() if line.startswith("| 2 | 16 MiB |"))
    assert bw_row.endswith("| 8.00 / 16.00 | 80% [67%-100%] / 160% [133%-200%] |")
    plain = render(_runs(), [16 << 20], [2], ["ipc", "shm", "gloo"], 3, "cmd", [0.1], counts)
    assert "share of the bound" not in plain


@pytest.mark.timeout(120)
def test_the_command_runs_ours_alternately_and_writes_the_table(tmp_path):
    proc = run_cli(
        [
            "bench",
            "table",
            "--rounds",
            "2",
            "--rank-counts",
            "2",
            "--systems",
            "ipc,shm",
            "--sizes",
            "8,1MiB",
            "--algo",
            "rd,ring",
            "--iters",
            "2",
            "--warmup",
            "1",
            "--out",
            str(tmp_path),
        ],
        timeout_s=110,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| ranks | size | ours, ZeroMQ | ours, shm |" in proc.stdout
    order = [line.split(": ")[0] for line in proc.stderr.splitlines() if line.startswith("round ")]
    assert order == [
        "round 1/2, 2 ranks, ours, ZeroMQ",
        "round 1/2, 2 ranks, ours, shm",
        "round 2/2, 2 ranks, ours, shm",
        "round 2/2, 2 ranks, ours, ZeroMQ",
    ]
    table_dir = next(tmp_path.glob("*-table"))
    assert (table_dir / "table.md").read_text() in proc.stdout
    saved = json.loads((table_dir / "table.json").read_text())
    runs = saved["runs"]
    assert saved["counts"] == {"time": [2, 1], "busbw": [2, 1]}  # --iters and --warmup: every size
    assert "median of 2 iterations after 1 warm-up." in proc.stdout
    assert len(runs) == 4 and all(r["best"] for r in runs)
    assert all(b["wrong"] == 0 for r in runs for b in r["best"].values())
    assert [(c["round"], c["size"]) for c in saved["copies"]] == [(0, 1 << 20), (1, 1 << 20)]
    assert all(c["one_core"] > 0 and c["all_cores"] > 0 for c in saved["copies"])
    assert "ours, shm, share of the bound" in proc.stdout


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "args, message",
    [(["--rounds", "0"], "--rounds: at least 1, got 0"), (["--systems", "foo"], "--systems 'foo': allowed:")],
)
def test_bad_arguments_get_one_line_and_exit_2(args, message, tmp_path):
    proc = run_cli(["bench", "table", *args, "--out", str(tmp_path)], timeout_s=50)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing measured, nothing written
