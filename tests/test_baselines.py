"""Baselines: the pure parts (busbw factors, layouts, closed forms, rows), the process runner with
stand-in workers, and real Gloo / MPI runs at 2 ranks when those optional extras are installed."""

import json
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from tools import NO_MPI4PY, NO_MPICH, NO_TORCH, have, importable, need

from playground.baselines import available, common, run_baseline
from playground.baselines.common import bus_factor, expected, layout, layouts, pattern
from playground.core.errors import ScenarioError
from playground.launcher.procs import BaselineError, run_workers, worker_env

# -- busbw factors and sizes, as nccl-tests defines them -------------------------------------------


@pytest.mark.parametrize(
    "n, allreduce, gather", [(1, 0.0, 0.0), (2, 1.0, 0.5), (4, 1.5, 0.75), (8, 1.75, 0.875)]
)
def test_bus_factors(n, allreduce, gather):
    assert bus_factor("allreduce", n) == allreduce
    assert bus_factor("allgather", n) == gather
    assert bus_factor("reduce_scatter", n) == gather
    assert bus_factor("broadcast", n) == 1.0
    assert bus_factor("reduce", n) == 1.0


def test_bus_factor_unknown_collective():
    with pytest.raises(ValueError, match="allowed: allreduce"):
        bus_factor("alltoallv", 4)


def test_layout_sizes_follow_nccl_tests():
    ar = layout("allreduce", 16 << 20, 8, "float32")
    assert (ar.in_count, ar.out_count, ar.size_bytes) == (4 << 20, 4 << 20, 16 << 20)
    ag = layout("allgather", 64, 4, "float32")  # size is the total output
    assert (ag.in_count, ag.out_count, ag.count, ag.size_bytes) == (4, 16, 16, 64)
    rs = layout("reduce_scatter", 64, 4, "float64")  # size is the total input
    assert (rs.in_count, rs.out_count, rs.count, rs.size_bytes) == (8, 2, 8, 64)
    bc = layout("broadcast", 12, 3, "int32")
    assert (bc.in_count, bc.out_count) == (3, 3)


def test_layouts_round_down_drop_empty_and_dedupe():
    # allgather at 3 ranks, float32: 100 B -> 8 per rank -> 96 B; 8 B -> 0 per rank -> dropped
    assert [lay.size_bytes for lay in layouts("allgather", [8, 100, 96, 4096], 3, "float32")] == [96, 4092]
    assert [lay.size_bytes for lay in layouts("allreduce", [8, 64, 16], 8, "float64")] == [8, 16, 64]


# -- the input pattern and its closed-form results ------------------------------------------------


def test_pattern_is_the_documented_formula():
    assert pattern(0, 18, "int64").tolist() == [((7 * i) % 17) - 8 for i in range(18)]
    assert pattern(3, 5, "float32").tolist() == [((7 * i + 39) % 17) - 8 for i in range(5)]
    assert pattern(5, 1000, "int32").min() == -8 and pattern(5, 1000, "int32").max() == 8


def test_hand_computed_values():
    # N = 2, i = 0: x_0 = -8, x_1 = 13 - 8 = 5
    lay = layout("allreduce", 8, 2, "int64")
    assert expected(lay, 0, "sum", "int64")[0] == -3
    assert expected(lay, 0, "max", "int64")[0] == 5
    assert expected(lay, 0, "min", "int64")[0] == -8
    # 17 ranks: 13 r mod 17 runs through every residue, so each sum is (0 + ... + 16) - 17 * 8 = 0
    lay17 = layout("allreduce", 8 * 40, 17, "int64")
    assert not expected(lay17, 4, "sum", "int64").any()


def _stack(n, count, dtype):
    return np.stack([pattern(r, count, dtype) for r in range(n)])


NP_OPS = {"sum": np.sum, "max": np.max, "min": np.min}


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("op", common.OPS)
@pytest.mark.parametrize("dtype", common.DTYPES)
def test_reductions_equal_numpy(n, op, dtype):
    for per_rank in (1, max(n - 1, 1), n + 1, 37):
        ar = layout("allreduce", per_rank * np.dtype(dtype).itemsize, n, dtype)
        want = NP_OPS[op](_stack(n, ar.in_count, dtype), axis=0)
        assert np.array_equal(expected(ar, n - 1, op, dtype), want)
        red = layout("reduce", ar.size_bytes, n, dtype)
        assert np.array_equal(expected(red, 0, op, dtype), want)
        assert all(expected(red, r, op, dtype) is None for r in range(1, n))
        rs = layout("reduce_scatter", per_rank * n * np.dtype(dtype).itemsize, n, dtype)
        full = NP_OPS[op](_stack(n, rs.in_count, dtype), axis=0)
        for r in range(n):
            assert np.array_equal(expected(rs, r, op, dtype), full[r * per_rank : (r + 1) * per_rank])


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_allgather_and_broadcast_expected(n):
    ag = layout("allgather", 5 * n * 8, n, "float64")
    assert np.array_equal(expected(ag, n - 1, "sum", "float64"), _stack(n, 5, "float64").reshape(-1))
    bc = layout("broadcast", 40, n, "int32")
    assert all(np.array_equal(expected(bc, r, "sum", "int32"), pattern(0, 10, "int32")) for r in range(n))


# -- rows ------------------------------------------------------------------------------------------


def _measure_one_rank(out_dir, prepare, iters: int, warmup: int, barrier=lambda: None) -> list[dict]:
    """The baselines' measuring loop on a stand-in rank 0 of 1 whose `prepare` the test gives:
    the records it writes (one per size), its header line left out."""
    from playground.baselines.measure import measure

    rank = type("OneRank", (), {"rank": 0, "nranks": 1})()
    rank.barrier, rank.prepare = barrier, prepare
    spec = {"collective": "allreduce", "sizes": [64], "dtype": "float32", "op": "sum"}
    measure(rank, {**spec, "iters": iters, "warmup": warmup}, out_dir)
    return [json.loads(line) for line in (out_dir / "rank-0.jsonl").read_text().splitlines()][1:]


def test_the_baselines_check_every_iteration_warm_up_included(tmp_path):
    """The loop both baseline workers run checks each call after its timing, as our bench does: a
    result wrong in one warm-up call only is counted and named."""
    from playground.baselines.measure import Call

    calls = []

    def prepare(lay, op, inp, inplace):
        if inplace:
            return None  # out of place only: one form's record
        buf = inp.copy()

        def run():
            calls.append(1)
            if len(calls) == 2:  # the second warm-up call goes wrong
                buf[3] += 1

        return Call(reset=lambda: np.copyto(buf, inp), run=run, result=lambda: buf)

    (record,) = _measure_one_rank(tmp_path, prepare, iters=3, warmup=2)
    assert len(calls) == 5
    assert record["wrong"] == 1
    assert record["first_wrong"] == {
        "iteration": 1,
        "warmup": True,
        "index": 3,
        "got": float(pattern(0, 16, "float32")[3] + 1),
        "expected": float(pattern(0, 16, "float32")[3]),
    }


def test_the_baselines_meet_after_a_timed_call_before_they_check(tmp_path):
    """As ours (tests/test_measure_check.py): no rank reads its result while another may still be in
    its timed call, so a barrier stands between every timed run and its check."""
    from playground.baselines.measure import Call

    order = []

    def prepare(lay, op, inp, inplace):
        if inplace:
            return None
        buf = inp.copy()

        def result():
            order.append("check")
            return buf

        return Call(reset=lambda: np.copyto(buf, inp), run=lambda: order.append("run"), result=result)

    _measure_one_rank(tmp_path, prepare, iters=2, warmup=1, barrier=lambda: order.append("barrier"))
    warm = ["barrier", "run", "check"]
    timed = ["barrier", "run", "barrier", "check"]
    assert order == warm + timed + timed


def test_each_form_the_library_offers_is_measured_out_of_place_first(tmp_path):
    """nccl-tests' order: the out-of-place form, then the in-place one, each with its own warm-up,
    timing and #wrong; a form the library does not offer (None) leaves its fields out."""
    from playground.baselines.measure import Call

    order = []

    def offering(offered):
        def prepare(lay, op, inp, inplace):
            form = "ip" if inplace else "oop"
            if form not in offered:
                return None
            buf = inp.copy()

            def run():
                order.append(form)
                if form == "ip":
                    buf[0] += 1  # the in-place form goes wrong on every call

            return Call(reset=lambda: np.copyto(buf, inp), run=run, result=lambda: buf)

        return prepare

    (both,) = _measure_one_rank(tmp_path, offering({"oop", "ip"}), iters=2, warmup=1)
    assert order == ["oop"] * 3 + ["ip"] * 3
    assert both["wrong"] == 0 and both["ip_wrong"] == 3 and both["ip_first_wrong"]["warmup"] is True
    assert {"median_us", "min_us", "max_us", "ip_median_us", "ip_min_us", "ip_max_us"} <= set(both)
    (tmp_path / "ip").mkdir()
    (ip_only,) = _measure_one_rank(tmp_path / "ip", offering({"ip"}), iters=2, warmup=1)
    assert "median_us" not in ip_only and "wrong" not in ip_only and ip_only["ip_wrong"] == 3
    (row,) = common.combine("gloo", layouts("allreduce", [64], 1, "float32"), "float32", "sum", [[ip_only]])
    assert row["time_us"] is None and row["busbw_gbps"] is None and row["ip_wrong"] == 3


def test_combine_takes_max_of_rank_medians_and_sums_wrong():
    lays = layouts("allreduce", [8, 64], 2, "float32")
    per_rank = [
        [
            {"rank": 0, "size": 8, "phase": "start"},
            {"rank": 0, "size": 8, "median_us": 5.0, "wrong": 0},
            {"rank": 0, "size": 64, "median_us": 9.0, "wrong": 1},
        ],
        [
            {"rank": 1, "size": 8, "median_us": 7.0, "wrong": 0},
            {"rank": 1, "size": 64, "median_us": 3.0, "wrong": 2},
        ],
    ]
    rows = common.combine("mpi", lays, "float32", "sum", per_rank)
    assert [(r["size"], r["time_us"], r["wrong"]) for r in rows] == [(8, 7.0, 0), (64, 9.0, 3)]
    with pytest.raises(ValueError, match=r"ranks \[1\] reported nothing for size 64"):
        common.combine("mpi", lays, "float32", "sum", [per_rank[0], per_rank[1][:1]])


def test_median_us():
    assert common.median_us([3000, 1000, 2000, 100_000]) == 2.5


# -- validation and availability -------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"collective": "alltoallv"}, "allowed: allreduce, allgather"),
        ({"dtype": "float16"}, "allowed: float32, float64, int32, int64"),
        ({"op": "prod"}, "allowed: sum, max, min"),
        ({"ranks": 0}, "ranks must be"),
        ({"sizes": []}, "sizes must be"),
        ({"iters": 0}, "iters must be"),
    ],
)
def test_bad_arguments_fail_before_any_process(kwargs, message):
    args = {
        "name": "gloo",
        "collective": "allreduce",
        "sizes": [8],
        "ranks": 2,
        "dtype": "float32",
        "op": "sum",
        "iters": 1,
        "warmup": 0,
    } | kwargs
    with pytest.raises(ScenarioError, match=message):
        run_baseline(**args)


def test_unknown_baseline():
    assert available("nccl") == "unknown baseline 'nccl'; allowed: gloo, mpi"
    with pytest.raises(ScenarioError, match="unknown baseline"):
        run_baseline("nccl", "allreduce", [8], 2)


def test_missing_extras_give_the_install_line(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert available("gloo") == "torch is not installed: pip install torch==2.13.0"
    assert available("mpi").startswith("mpi4py or mpiexec not found: apt-get install mpich")
    with pytest.raises(ScenarioError, match="pip install torch"):
        run_baseline("gloo", "allreduce", [8], 2)


def test_package_imports_without_torch_or_mpi4py():
    code = textwrap.dedent("""
        import sys
        sys.modules["torch"] = None  # any import of it now fails, and find_spec says it is missing
        sys.modules["mpi4py"] = None
        import playground.baselines as b
        from playground.baselines import common, gloo, mpi, measure
        from playground.launcher import procs
        print(b.available("gloo")); print(b.available("mpi"))
    """)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=worker_env({})
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "torch is not installed: pip install torch==2.13.0",
        "mpi4py or mpiexec not found: apt-get install mpich && pip install --no-binary mpi4py mpi4py",
    ]


# -- the process runner, with stand-in workers (no extras needed) ---------------------------------


def _workers(tmp_path, n, body):
    """n stand-in workers running `body` with RANK and OUT (the rank file) defined."""
    prelude = "import json, os, sys, time, subprocess\nRANK = int(sys.argv[1])\nOUT = sys.argv[2]\n"
    cmds = [
        [sys.executable, "-c", prelude + textwrap.dedent(body), str(r), str(tmp_path / f"rank-{r}.jsonl")]
        for r in range(n)
    ]
    return cmds, [worker_env({}) for _ in range(n)]


@pytest.mark.timeout(60)
def test_runner_collects_each_ranks_records(tmp_path):
    cmds, envs = _workers(
        tmp_path,
        3,
        """
        with open(OUT, "a") as f:
            f.write(json.dumps({"rank": RANK, "size": 8, "median_us": RANK + 1.0, "wrong": 0}) + "\\n")
    """,
    )
    per_rank = run_workers("fake", cmds, envs, tmp_path, 3, timeout_s=30)
    assert [recs[0]["median_us"] for recs in per_rank] == [1.0, 2.0, 3.0]


@pytest.mark.timeout(60)
def test_runner_names_the_first_failure_and_stops_the_rest(tmp_path):
    cmds, envs = _workers(
        tmp_path,
        3,
        """
        if RANK == 1:
            with open(OUT, "a") as f:
                f.write(json.dumps({"rank": 1, "error": "RuntimeError: boom", "t": time.time()}) + "\\n")
            sys.exit(1)
        time.sleep(60)
    """,
    )
    t0 = time.monotonic()
    with pytest.raises(BaselineError, match=r"^fake: rank 1 failed: RuntimeError: boom$"):
        run_workers("fake", cmds, envs, tmp_path, 3, timeout_s=30)
    assert time.monotonic() - t0 < 10


@pytest.mark.timeout(60)
def test_runner_reports_a_crash_without_a_record(tmp_path):
    cmds, envs = _workers(
        tmp_path,
        2,
        """
        print("segfault-ish last words", flush=True)
        os.kill(os.getpid(), 9) if RANK == 0 else time.sleep(60)
    """,
    )
    with pytest.raises(BaselineError, match=r"killed by SIGKILL: segfault-ish last words"):
        run_workers("fake", cmds, envs, tmp_path, 2, timeout_s=30)


@pytest.mark.timeout(60)
def test_runner_timeout_kills_the_whole_group(tmp_path):
    cmds, envs = _workers(
        tmp_path,
        2,
        """
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        with open(OUT + ".child", "w") as f:
            f.write(str(child.pid))
        with open(OUT, "a") as f:
            f.write(json.dumps({"rank": RANK, "size": 4096, "phase": "start"}) + "\\n")
        time.sleep(120)
    """,
    )
    t0 = time.monotonic()
    with pytest.raises(BaselineError, match=r"timed out after 3s \(reached size 4096 B\)"):
        run_workers("fake", cmds, envs, tmp_path, 2, timeout_s=3)
    assert time.monotonic() - t0 < 10
    for r in range(2):
        grandchild = int((tmp_path / f"rank-{r}.jsonl.child").read_text())
        assert not _alive(grandchild), f"worker {r}'s child {grandchild} survived the timeout"


def test_runner_names_a_launcher_that_cannot_start(tmp_path):
    with pytest.raises(BaselineError, match=r"^mpi: cannot start /nonexistent/mpiexec: "):
        run_workers("mpi", [["/nonexistent/mpiexec", "-n", "2"]], [worker_env({})], tmp_path, 2, timeout_s=5)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# -- real runs: only where the optional extras are installed ---------------------------------------

REAL_CASES = [  # (collective, op, dtype): every collective, op and dtype at least once
    ("allreduce", "sum", "float32"),
    ("allgather", "sum", "float64"),
    ("reduce_scatter", "max", "int64"),
    ("broadcast", "sum", "int32"),
    ("reduce", "min", "float32"),
    ("alltoall", "sum", "float32"),
]
# MPI's in-place gather is the whole output on every rank, MPI_IN_PLACE at the root only (its
# scatter and Sendrecv_replace are simpler); torch's are plain out-of-place calls like its
# all_to_all_single, and each Gloo run costs a torch import per rank: one case of the four is Gloo's
MPI_ONLY_CASES = [("gather", "sum", "int32")]


REAL_SIZES = [8, 4096, 65536]


# The forms each library offers: (out of place, in place)
FORMS_OFFERED = {
    "gloo": {
        "allreduce": (False, True),
        **dict.fromkeys(
            ("allgather", "reduce_scatter", "alltoall", "gather", "scatter", "sendrecv"), (True, False)
        ),
    },
    "mpi": {"broadcast": (False, True)},
}


def _check_rows(rows, name, collective, dtype):
    # 8 B gives a float64/int64 allgather or reduce_scatter less than one element per rank: left out
    assert [r["size"] for r in rows] == [lay.size_bytes for lay in layouts(collective, REAL_SIZES, 2, dtype)]
    assert len(rows) >= 2
    oop, ip = FORMS_OFFERED[name].get(collective, (True, True))
    if name == "gloo" and collective in ("broadcast", "reduce"):
        oop = False  # one tensor, written in place
    for r in rows:
        assert r["algorithm"] == name and r["dtype"] == dtype
        for prefix, offered in (("", oop), ("ip_", ip)):
            if not offered:
                assert r[prefix + "time_us"] is None if not prefix else prefix + "time_us" not in r
                continue
            assert r[prefix + "wrong"] == 0, r
            assert r[prefix + "time_us"] > 0
            assert r[prefix + "busbw_gbps"] == pytest.approx(
                r[prefix + "algbw_gbps"] * bus_factor(collective, 2)
            )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("collective, op, dtype", REAL_CASES)
def test_gloo_two_ranks(collective, op, dtype):
    need(importable("torch"), NO_TORCH)
    rows = run_baseline("gloo", collective, REAL_SIZES, 2, dtype, op, iters=3, warmup=1, timeout_s=90)
    _check_rows(rows, "gloo", collective, dtype)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("collective, op, dtype", REAL_CASES + MPI_ONLY_CASES)
def test_mpi_two_ranks(collective, op, dtype):
    need(importable("mpi4py"), NO_MPI4PY)
    need(have("mpiexec"), NO_MPICH)
    rows = run_baseline("mpi", collective, REAL_SIZES, 2, dtype, op, iters=3, warmup=1, timeout_s=90)
    _check_rows(rows, "mpi", collective, dtype)


@pytest.mark.timeout(120)
def test_mpi_worker_failure_is_one_line(tmp_path):
    need(importable("mpi4py"), NO_MPI4PY)
    need(have("mpiexec"), NO_MPICH)
    from playground.baselines import mpi

    spec = {
        "collective": "allreduce",
        "sizes": [8],
        "dtype": "float32",
        "op": "no-such-op",
        "iters": 1,
        "warmup": 0,
        "timeout_s": 60,
    }
    with pytest.raises(
        BaselineError,
        match=r"^mpi: rank \d failed: UsageError: unknown reduce op 'no-such-op'; allowed: sum, prod, max, min, avg$",
    ):
        mpi.run(spec, 2, tmp_path)
    # the first rank to fail aborts the job, so the other may not get to write its own error
    records = [json.loads(line) for p in tmp_path.glob("rank-*.jsonl") for line in p.read_text().splitlines()]
    assert any("error" in rec for rec in records)
