"""`python -m playground bench ...` as a user runs it: the nccl-tests table, result.json, the plot,
exit status 1 on a wrong result, and p2p beside raw pyzmq."""

import json

import calibrations
import pytest
from tools import NO_MPI4PY, NO_MPICH, have, importable, need

from playground.cli import parse_args
from playground.cli.testing import run_cli
from playground.collectives.measure import turns
from playground.core.sizes import format_size
from playground.models.calibration import read_calibration


def _result(out_dir) -> dict:
    return json.loads((out_dir / "latest" / "result.json").read_text())


@pytest.mark.timeout(90)
def test_bench_allreduce_rows_table_and_plot(tmp_path):
    proc = run_cli(
        [
            "bench",
            "allreduce",
            "--ranks",
            "3",
            "--algo",
            "ring,rd",
            "--sizes",
            "8..1KiB",
            "--step",
            "4",
            "--iters",
            "2",
            "--warmup",
            "1",
            "--out",
            str(tmp_path),
        ],
        timeout_s=80,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    header = next(line for line in proc.stdout.splitlines() if "#wrong" in line)
    for col in ("size (B)", "count", "type", "redop", "time (us)", "algbw (GB/s)", "busbw (GB/s)"):
        assert col in header
    result = _result(tmp_path)
    rows = result["rows"]
    assert [(r["algorithm"], r["size"]) for r in rows] == [
        (a, s) for a in ("ring", "rd") for s in (8, 32, 128, 512)
    ]
    for r in rows:
        assert (
            r["wrong"] == 0 and r["count"] == r["size"] // 4 and r["dtype"] == "float32" and r["op"] == "sum"
        )
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * 2 / 3, rel=1e-3, abs=2e-6)
    assert (tmp_path / "latest" / "busbw.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrong values: 0 OK" in proc.stdout and "avg busbw (GB/s): ring " in proc.stdout


@pytest.mark.timeout(90)
@pytest.mark.parametrize("transport", ["ipc", "shm"])
def test_a_wrong_result_fails_the_bench(tmp_path, transport):
    """Rank 1 flips one bit of a message it sends in the (only, checked) timed iteration."""
    proc = run_cli(
        [
            "bench",
            "allreduce",
            "--ranks",
            "3",
            "--algo",
            "ring",
            "--sizes",
            "64KiB",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--transport",
            transport,
            "--out",
            str(tmp_path),
            "--set",
            "fault.rank=1",
            "--set",
            "fault.action=corrupt",
        ],
        timeout_s=80,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = _result(tmp_path)
    assert not result["ok"] and result["rows"][0]["wrong"] > 0
    assert f"wrong values: {result['rows'][0]['wrong']} FAILED" in proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("transport", ["ipc", "shm"])
def test_bench_p2p_measures_ours_and_raw_pyzmq(tmp_path, transport):
    proc = run_cli(
        [
            "bench",
            "p2p",
            "--sizes",
            "64,64KiB",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--transport",
            transport,
            "--out",
            str(tmp_path),
        ],
        timeout_s=80,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _result(tmp_path)["tables"][0]["rows"]
    assert [r["size"] for r in rows] == [64, 65536]
    assert all(r["ours_us"] > 0 and r["raw_us"] > 0 and r["ours_gbps"] > 0 for r in rows)
    assert ("shared memory" in proc.stdout) == (transport == "shm")
    assert not (tmp_path / "latest" / "calibration.json").exists()  # `calibrate` writes the one calibration


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_bench_model_columns_from_a_preset_and_from_a_calibration(tmp_path):
    base = ["bench", "allreduce", "--ranks", "2", "--algo", "ring,auto", "--sizes", "8,64KiB"]
    base += ["--iters", "1", "--warmup", "0", "--out", str(tmp_path)]
    proc = run_cli([*base, "--link", "ib"], timeout_s=80)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "model: preset ib (alpha 5 us, beta 50 GB/s)" in proc.stdout
    header = next(line for line in proc.stdout.splitlines() if "#wrong" in line)
    assert header.index("algo") < header.index("model pick") < header.index("time (us)")
    assert header.index("#wrong") < header.index("model (us)") < header.index("measured/model")
    rows = _result(tmp_path)["rows"]
    assert [r["algorithm"].split("->")[0] for r in rows] == ["ring", "ring", "auto", "auto"]
    assert all(r["model_pick"] == "rd" and r["model_us"] > 0 and r["vs_model"] > 0 for r in rows)

    calibration = calibrations.write(tmp_path / "calibration.json")
    cores = read_calibration(calibration).cores
    proc = run_cli([*base, "--link", str(calibration)], timeout_s=80)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    model = _result(tmp_path)["model"]
    assert model["kind"] == "calibration" and model["name"] == str(calibration.resolve())
    rows = _result(tmp_path)["rows"]
    for r in rows:  # 2 ranks: each a core (if the machine has 2), the closed form on the calibrated link
        assert r["model_by"] == ("closed form" if cores >= 2 else "sim")
        link = read_calibration(calibration).link("ipc", 2, r["size"])
        if cores >= 2 and r["algorithm"] == "ring":
            half = r["size"] / 2
            expected = 2 * link.message_time_s(half) + link.reduce_time_s(half)
            assert r["model_us"] == pytest.approx(1e6 * expected, rel=1e-6)
    if cores <= 4:  # more ranks than cores: the simulator on the calibrated host is the model
        crowded = ["bench", "allreduce", "--ranks", str(cores + 1), "--algo", "ring,tree", "--sizes", "4KiB"]
        crowded += ["--iters", "1", "--warmup", "0", "--link", str(calibration), "--out", str(tmp_path)]
        proc = run_cli(crowded, timeout_s=80)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert all(r["model_by"] == "sim" and r["model_us"] > 0 for r in _result(tmp_path)["rows"])
        assert "model by" in proc.stdout


@pytest.mark.timeout(90)
def test_bench_in_place_columns(tmp_path):
    proc = run_cli(
        [
            "bench",
            "allreduce",
            "--ranks",
            "3",
            "--algo",
            "ring,hd",
            "--sizes",
            "8,256KiB",
            "--inplace",
            "--iters",
            "2",
            "--warmup",
            "1",
            "--out",
            str(tmp_path),
        ],
        timeout_s=80,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "in-place time (us)" in proc.stdout
    rows = _result(tmp_path)["rows"]
    assert [(r["algorithm"], r["size"]) for r in rows] == [
        (a, s) for a in ("ring", "hd") for s in (8, 256 * 1024)
    ]
    for r in rows:
        assert r["wrong"] == 0 and r["ip_wrong"] == 0 and r["ip_time_us"] > 0
        assert r["ip_busbw_gbps"] == pytest.approx(r["ip_algbw_gbps"] * 2 * 2 / 3, rel=1e-3, abs=2e-6)


@pytest.mark.timeout(30)
def test_in_place_is_not_for_allgather(tmp_path):
    proc = run_cli(["bench", "allgather", "--inplace", "--ranks", "2", "--out", str(tmp_path)], timeout_s=25)
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith(
        "key 'params.inplace': only allreduce, broadcast, reduce, alltoall, gather, scatter, sendrecv work in "
        "place, not allgather"
    )
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.timeout(90)
@pytest.mark.parametrize("after_ops", [0, 400])
def test_the_readme_corrupt_drill_fails_the_bench_wherever_the_bit_lands(tmp_path, after_ops):
    """The README's example, with its default 5 warm-up and 20 timed iterations of each algorithm
    (taken in turn): the bit lands in a warm-up call (after_ops 0) or a timed one that is not the
    last (400), and both fail."""
    proc = run_cli(
        ["bench", "allreduce", "--ranks", "4", "--sizes", "4KiB", "--out", str(tmp_path)]
        + ["--set", "fault.rank=1", "--set", "fault.action=corrupt", "--set", f"fault.after_ops={after_ops}"],
        timeout_s=80,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (row,) = [r for r in _result(tmp_path)["rows"] if r["wrong"]]
    first = row["first_wrong"]
    assert first["warmup"] == (after_ops == 0)
    assert first["got"] != first["expected"] and first["index"] >= 0
    phase = "warm-up iteration" if first["warmup"] else "timed iteration"
    assert f"first seen on rank {first['rank']} at {phase} {first['iteration']}: element" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.timeout(120)
def test_bench_against_mpi_compares_each_form_with_its_own(tmp_path):
    """With a baseline, ours is measured in both forms too (no --inplace needed), MPICH in both
    (MPI_IN_PLACE), and the comparison has one row per form and size, each ratio of one form."""
    need(importable("mpi4py"), NO_MPI4PY)
    need(have("mpiexec"), NO_MPICH)
    proc = run_cli(
        ["bench", "allreduce", "--ranks", "2", "--algo", "rd", "--sizes", "8,4KiB", "--transport", "shm"]
        + ["--iters", "3", "--warmup", "1", "--baseline", "mpi", "--out", str(tmp_path)],
        timeout_s=110,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = _result(tmp_path)
    assert all(r["ip_wrong"] == 0 and r["ip_time_us"] > 0 for r in result["rows"])
    assert all(r["wrong"] == 0 and r["ip_wrong"] == 0 for r in result["baseline_rows"])
    got = [(c["form"], c["size"]) for c in result["comparison"]]
    assert got == [(f, s) for f in ("out of place", "in place") for s in ("8 B", "4 KiB")]
    for c in result["comparison"]:
        prefix = "" if c["form"] == "out of place" else "ip_"
        ours = next(r for r in result["rows"] if format_size(r["size"]) == c["size"])
        mpi = next(r for r in result["baseline_rows"] if format_size(r["size"]) == c["size"])
        assert c["ours_us"] == ours[prefix + "time_us"] and c["mpi_us"] == mpi[prefix + "time_us"]
        assert c["x_mpi"] == round(mpi[prefix + "time_us"] / ours[prefix + "time_us"], 2)
    assert "out of place against out of place and in place against in place" in " ".join(proc.stdout.split())


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "table", "--transport", "shm"],
        ["bench", "p2p", "--algo", "ring"],
        ["bench", "copy", "--ranks", "4"],
    ],
)
def test_a_flag_a_sub_command_does_not_use_is_refused(argv, capsys):
    """Each sub-command has its own flags: one that would do nothing there is bad input, exit 2."""
    with pytest.raises(SystemExit) as refused:
        parse_args(argv)
    assert refused.value.code == 2 and argv[2] in capsys.readouterr().err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("turn_calls", [2, 0])
def test_algorithms_take_turns_of_calls(tmp_path, turn_calls):
    """Several algorithms at a size take turns of `turn_calls` timed calls (the first after the
    warm-up, each later one after one more untimed call), so drift on a shared machine reaches them
    alike; 0: each algorithm's calls all together. Either way the rows come out per algorithm in
    size order, every result checked."""
    args = ["bench", "allreduce", "--ranks", "2", "--transport", "shm", "--algo", "ring,tree"]
    args += ["--sizes", "1KiB,4KiB", "--iters", "5", "--warmup", "1", "--out", str(tmp_path)]
    proc = run_cli(args + ["--set", f"params.turn_calls={turn_calls}"], timeout_s=50)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _result(tmp_path)["rows"]
    assert [(r["algorithm"], r["size"]) for r in rows] == [
        (a, s) for a in ("ring", "tree") for s in (1024, 4096)
    ]
    assert all(r["wrong"] == 0 for r in rows)
    events = [json.loads(line) for line in (tmp_path / "latest" / "rank-0.jsonl").read_text().splitlines()]
    timed = [
        (e["args"]["bytes"], e["args"]["algorithm"], e["args"]["iter"])
        for e in events
        if e.get("cat") == "op"
    ]
    if turn_calls:  # turns of 2, 2 and 1
        want = [
            (s, a, i)
            for s in (1024, 4096)
            for turn in ((0, 1), (2, 3), (4,))
            for a in ("ring", "tree")
            for i in turn
        ]
    else:
        want = [(s, a, i) for a in ("ring", "tree") for s in (1024, 4096) for i in range(5)]
    assert timed == want


def test_turns_split_the_timed_calls():
    assert turns(20, 5, 3) == [5, 5, 5, 5]
    assert turns(7, 3, 2) == [3, 3, 1]
    assert turns(10, 5, 1) == [10]  # one algorithm: no turns
    assert turns(10, 0, 3) == [10]
    assert turns(4, 5, 3) == [4]
