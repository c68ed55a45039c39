"""`python -m playground bench table`: the README's table in one command. The rendering is a pure
function of the rounds' numbers; one real run (ours only, tiny sizes) checks the command end to end."""

import json

import pytest

from playground.cli.testing import run_cli
from playground.commands.benchtable_render import ratio, render


def _runs():
    """Three rounds of ours (ipc, shm) and Gloo at 2 ranks; in place each system at its time t, out of
    place ours at 2 t (Gloo offers no out-of-place all_reduce)."""
    runs = []
    for rnd, (ipc_us, shm_us, gloo_us) in enumerate(
        ((100.0, 10.0, 400.0), (120.0, 12.0, 300.0), (90.0, 8.0, 500.0))
    ):
        for system, t in (("ipc", ipc_us), ("shm", shm_us), ("gloo", gloo_us)):
            algo = "rd" if system != "gloo" else "gloo"
            best = {"in place": _rows(t, algo)}
            if system != "gloo":
                best["out of place"] = _rows(2 * t, algo)
            runs.append({"round": rnd, "ranks": 2, "system": system, "load": 0.1, "best": best})
    return runs


def _rows(t, algo):
    return {
        8: {"time_us": t, "busbw_gbps": None, "algorithm": algo, "wrong": 0},
        16 << 20: {
            "time_us": t * 1000,
            "busbw_gbps": None,
            "algorithm": "ring" if algo != "gloo" else algo,
            "wrong": 0,
        },
    }


def _row(text, title, start):
    """The line starting with `start` in the table titled `title`."""
    table = text.split(title + ":", 1)[1].split("\n\n", 2)[1]
    return next(line for line in table.splitlines() if line.startswith(start))


COUNTS = {"time": (100, 20), "busbw": (10, 3)}


def test_medians_ranges_and_speed_ratios_per_form():
    text = render(_runs(), [8, 16 << 20], [2], ["ipc", "shm", "gloo"], 3, "cmd", [0.1, 0.5, 0.2], COUNTS)
    assert (
        "each round the slowest rank's median of 100 iterations after 20 warm-up for the times, 10 after 3 for busbw."
        in text
    )
    assert "- load average (1 min): 0.10 before, 0.50 at most during, 0.20 after (it counts" in text
    # in place: medians 100 / 10 / 400 us; ranges over the rounds; Gloo's median over ours
    time_row = _row(text, "Time (us), small messages, in place", "| 2 | 8 B |")
    assert (
        time_row
        == "| 2 | 8 B | 100 (rd) [90.0-120] | 10.0 (rd) [8.0-12.0] | 400 [300-500] | 4.00x | 40.00x |"
    )
    bw_row = _row(text, "busbw (GB/s), large messages, in place", "| 2 | 16 MiB |")
    # busbw = 16 MiB / t x 2(N-1)/N, in GB/s: 16.78 MB / 100 ms = 0.17 GB/s
    assert bw_row.startswith(
        "| 2 | 16 MiB | 0.17 (ring) [0.14-0.19] | 1.68 (ring) [1.40-2.10] | 0.04 [0.03-0.06] |"
    )
    assert bw_row.endswith("| 4.00x | 40.00x |")
    # out of place: ours at twice the time, no Gloo column (torch has no such form), so no ratio to it
    head = _row(text, "Time (us), small messages, out of place", "| ranks |")
    assert head == "| ranks | size | ours, ZeroMQ | ours, shm |"
    assert _row(text, "Time (us), small messages, out of place", "| 2 | 8 B |") == (
        "| 2 | 8 B | 200 (rd) [180-240] | 20.0 (rd) [16.0-24.0] |"
    )


def test_a_ratio_never_sets_an_in_place_figure_against_an_out_of_place_one():
    """MPICH in place 1.6x ours, out of place 0.5x: each table's ratio is of its own form. Were one
    paired across forms, the cell would read 3.20x or 0.25x."""
    runs = []
    for rnd in range(3):
        for system, ip, oop in (("shm", 10.0, 20.0), ("mpi", 16.0, 10.0)):
            best = {
                "in place": {8: {"time_us": ip, "busbw_gbps": None, "algorithm": "rd", "wrong": 0}},
                "out of place": {8: {"time_us": oop, "busbw_gbps": None, "algorithm": "rd", "wrong": 0}},
            }
            runs.append({"round": rnd, "ranks": 2, "system": system, "load": 0.1, "best": best})
    text = render(runs, [8], [2], ["shm", "mpi"], 3, "cmd", [0.1], COUNTS)
    assert ratio(runs, "in place", "shm", "mpi", 2, 8) == pytest.approx(1.6)
    assert ratio(runs, "out of place", "shm", "mpi", 2, 8) == pytest.approx(0.5)
    assert _row(text, "Time (us), small messages, in place", "| 2 |").endswith("| 16.0 [16.0-16.0] | 1.60x |")
    assert _row(text, "Time (us), small messages, out of place", "| 2 |").endswith(
        "| 10.0 [10.0-10.0] | 0.50x |"
    )
    for line in text.splitlines():
        assert "3.20x" not in line and "0.25x" not in line


def test_the_bound_is_the_fewest_passes_at_the_best_rate_so_no_share_exceeds_100_percent():
    """2 S per rank at the best copy rate of any round: 16 MiB at 2 ranks, rates giving 4 and 8 ms,
    so the bound is 4 ms whichever round ran slow; ours (in place) 10, 12 and 8 ms."""
    rate = 2 * 2 * (16 << 20) / (2 * 4e-3 * 1e9)  # GB/s at which the bound is 4 ms
    copies = [{"round": 0, "size": 16 << 20, "one_core": rate / 2, "all_cores": rate, "cores": 2}] + [
        {"round": r, "size": 16 << 20, "one_core": rate / 4, "all_cores": rate / 2, "cores": 2}
        for r in (1, 2)
    ]
    text = render(_runs(), [16 << 20], [2], ["ipc", "shm", "gloo"], 3, "cmd", [0.1], COUNTS, copies)
    assert "| bound (ms) | ours, shm, share of the bound |" in text
    bw_row = _row(text, "busbw (GB/s), large messages, in place", "| 2 | 16 MiB |")
    assert bw_row.endswith("| 4.00x | 40.00x | 4.00 | 40% [33%-50%] |")
    oop_row = _row(text, "busbw (GB/s), large messages, out of place", "| 2 | 16 MiB |")
    assert oop_row.endswith("| 4.00 | 20% [17%-25%] |")
    assert "every rank's buffer read once and its result written once" in text
    plain = render(_runs(), [16 << 20], [2], ["ipc", "shm", "gloo"], 3, "cmd", [0.1], COUNTS)
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
    assert "Time (us), small messages, in place:" in proc.stdout
    assert "Time (us), small messages, out of place:" in proc.stdout
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
    assert saved["command"] == (  # as a reader types it: the flags given, not where the files went
        "python -m playground bench table --sizes 8,1MiB --algo rd,ring --iters 2 --warmup 1 --rounds 2 "
        "--rank-counts 2 --systems ipc,shm"
    )
    assert "median of 2 iterations after 1 warm-up." in proc.stdout
    assert len(runs) == 4 and all(set(r["best"]) == {"in place", "out of place"} for r in runs)
    assert all(b["wrong"] == 0 for r in runs for rows in r["best"].values() for b in rows.values())
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
