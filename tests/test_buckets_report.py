"""The network labs' reports (buckets, overlap, ping-pong) and the pure plan they run, on
synthetic rank results and traces (no processes)."""

import json
import math

import pytest

from nodes.buckets import Params as BucketsParams
from nodes.overlap import Params as OverlapParams
from nodes.overlap import Setting
from playground.buckets import buckets_report, overlap_report
from playground.buckets.architectures import backward_order, gradient_elements
from playground.buckets.schedules import schedules
from playground.collectives.bucketing import MIB, plan_buckets
from playground.models.alphabeta import AlphaBeta
from playground.models.costs import Link
from playground.network import pingpong_report

KIB = 1024


# -- the plan ---------------------------------------------------------------------------------------
def test_gradient_elements_custom_real_and_scaled():
    assert gradient_elements("lecture", (4 * KIB, 40, 8)) == [KIB, 10, 2]
    assert gradient_elements("lecture", (4 * KIB, 40, 8), scale=0.5) == [512, 5, 1]
    assert gradient_elements("lecture", (4,), scale=0.01) == [1]  # at least one element
    resnet = gradient_elements("resnet50")
    assert len(resnet) == 161 and resnet == [t.num_elements for t in backward_order("resnet50")]


def test_schedules_in_strategy_order_with_scaled_caps():
    sizes = [4 * KIB, 8 * KIB, 24 * KIB, 200 * KIB]
    plan = schedules(("single", "bucketed", "per_tensor"), sizes, (0.0625, 1.0), 0.015625)
    assert [(label, cap) for label, cap, _ in plan] == [
        ("single bucket", None),
        ("bucketed 0.0625 MiB", 0.0625),
        ("bucketed 1 MiB", 1.0),
        ("per-tensor", None),
    ]
    assert plan[0][2] == plan_buckets(sizes, None) and plan[3][2] == plan_buckets(sizes, 0)
    assert [len(b) for _, _, b in plan] == [1, 3, 2, 4]
    assert plan[1][2] == plan_buckets(sizes, 64 * KIB, 16 * KIB)
    scaled = schedules(("bucketed",), sizes, (1.0,), None, scale=0.5)
    assert scaled[0][2] == plan_buckets(sizes, MIB // 2, None)


# -- buckets ----------------------------------------------------------------------------------------
AB = {"alpha_s": 50e-6, "beta_bytes_per_s": 1e9, "points": []}
ABL = {"alpha_s": 80e-6, "beta_bytes_per_s": 0.5e9}


FIRST_WRONG = {"iteration": 0, "warmup": True, "bucket": 0, "index": 7, "got": 9.0, "expected": 3.0}


def buckets_results(num_ranks=3, alpha_beta=AB, wrong=0):
    def row(strategy, cap, sizes, times):
        return {
            "strategy": strategy,
            "cap_mb": cap,
            "num_allreduces": len(sizes),
            "bucket_bytes": sizes,
            "times_s": times,
            "sent_bytes": 2 * sum(sizes),
            "wrong": 0,
        }

    out = []
    for r in range(num_ranks):
        rows = [
            row("per-tensor", None, [4 * KIB] * 4, [0.010 + r * 0.001, 0.020, 0.012]),
            row("bucketed 0.0625 MiB", 0.0625, [8 * KIB, 8 * KIB], [0.006, 0.005 + r * 0.001, 0.007]),
            row("single bucket", None, [16 * KIB], [0.004, 0.004, 0.004]),
        ]
        if wrong and r == 1:
            rows[2]["wrong"] = wrong
            rows[2]["first_wrong"] = FIRST_WRONG
        out.append(
            {
                "ok": True,
                "rows": rows,
                "num_tensors": 4,
                "total_bytes": 16 * KIB,
                "alpha_beta": alpha_beta,
                "alpha_beta_loaded": ABL if alpha_beta else None,
            }
        )
    return out


def test_combine_takes_the_slowest_rank_per_pass_then_the_median():
    p = BucketsParams(tensor_bytes=(4 * KIB,) * 4, iters=3)
    per_tensor_row, bucketed, single = buckets_report.combine(buckets_results(), p)
    assert per_tensor_row["measured_ms"] == pytest.approx(12.0)  # passes: max 12, 20, 12 -> median 12
    assert bucketed["measured_ms"] == pytest.approx(7.0)  # passes: 6, 7, 7
    model = AlphaBeta(50e-6, 1e9)  # the same formula as the registry's ring
    assert per_tensor_row["model_ms"] == pytest.approx(1e3 * model.schedule_time_s([4 * KIB] * 4, 3, "ring"))
    assert per_tensor_row["diff_ms"] == pytest.approx(
        per_tensor_row["measured_ms"] - per_tensor_row["model_ms"]
    )
    assert per_tensor_row["ratio"] == pytest.approx(
        per_tensor_row["measured_ms"] / per_tensor_row["model_ms"]
    )
    assert per_tensor_row["messages"] == 4 * 2 * (3 - 1) and single["messages"] == 4
    assert (per_tensor_row["payload"], per_tensor_row["sent"]) == ("16 KiB", "32 KiB")
    assert per_tensor_row["model_ms"] > single["model_ms"]  # alpha is paid per all-reduce
    loaded = AlphaBeta(80e-6, 0.5e9).schedule_time_s([16 * KIB], 3, "ring")
    assert single["loaded_model_ms"] == pytest.approx(1e3 * loaded)


@pytest.mark.parametrize(
    ("algorithm", "messages"), [("ring", 2 * 4), ("tree", 2 * 3), ("hd", 2 * 2 + 2), ("rd", 2 + 2)]
)
def test_every_flat_algorithm_has_its_model_and_message_count(algorithm, messages):
    """5 ranks: the ring's 2(N-1) steps, the tree's 2 ceil(log2 N), halving-doubling's 2 log2 p and
    recursive doubling's log2 p on p = 4, the last two plus the fold's two messages (5 is not a
    power of 2)."""
    assert buckets_report.messages_per_rank(5, algorithm) == messages
    assert buckets_report.messages_per_rank(1, algorithm) == 0
    link = Link(50e-6, 1e9)
    per_tensor = buckets_report.schedule_time_s(link, [4 * KIB] * 4, 5, algorithm)
    one = buckets_report.schedule_time_s(link, [16 * KIB], 5, algorithm)
    assert per_tensor - one == pytest.approx(3 * messages * link.alpha_s)  # alpha paid per all-reduce
    p = BucketsParams(tensor_bytes=(4 * KIB,) * 4, algorithm=algorithm, iters=3)
    rows = buckets_report.combine(buckets_results(num_ranks=5), p)
    assert rows[0]["messages"] == 4 * messages and rows[0]["model_ms"] == pytest.approx(1e3 * per_tensor)


def test_buckets_report(tmp_path):
    p = BucketsParams(tensor_bytes=(4 * KIB,) * 4, bucket_mb=(0.0625,), iters=3, scale=0.5)
    rep = buckets_report.report(buckets_results(), p, tmp_path)
    assert rep.ok and rep.failures == []
    (table,) = rep.tables
    assert table.title == (
        "gradient all-reduce, custom list of 4 tensors: 4 tensors, 16 KiB float32 per rank, "
        "sizes x0.5 (tensors and caps); 3 ranks, ring; slowest rank, median of 3"
    )
    assert table.columns == buckets_report.COLUMNS and len(table.rows) == 3
    assert (
        rep.notes[0]
        == "alpha-beta from ping-pong rank 0 <-> 1: alpha = 50.0 us, beta = 1.000 GB/s (n_1/2 = 48.8 KiB)"
    )
    assert rep.notes[2] == (
        "model: ring all-reduce (reduce-scatter then all-gather around a ring: fewest bytes, 2(N-1) steps) "
        "with this fit's alpha and beta, reductions free, summed over the schedule's all-reduces "
        "(formulas: playground/models/costs.py)"
    )
    assert rep.files == ["buckets.png"] and (tmp_path / "buckets.png").stat().st_size > 0
    assert rep.notes[-1] == f"plot: {tmp_path / 'buckets.png'}"
    assert rep.data == {"alpha_beta": AB, "algorithm": "ring"}


def test_buckets_report_one_rank_and_wrong_elements(tmp_path):
    p = BucketsParams(strategies=("per_tensor",), iters=3)
    rep = buckets_report.report(buckets_results(num_ranks=1, alpha_beta=None), p, tmp_path)
    assert rep.notes[0] == "one rank: nothing is sent, so there is no alpha-beta fit and the model predicts 0"
    assert len(rep.tables[0].rows) == 3
    assert all(math.isnan(r["model_ms"]) and math.isnan(r["ratio"]) for r in rep.tables[0].rows)
    failed = buckets_report.report(buckets_results(wrong=5), BucketsParams(iters=3), tmp_path)
    assert not failed.ok and failed.failures == [
        "single bucket: 5 wrong elements (summed over ranks; first seen on rank 1 at warm-up iteration 0, "
        "bucket 0: element 7 is 9.0, expected 3.0)"
    ]


def test_no_sweep_no_plot(tmp_path):
    rows = [{"strategy": "per-tensor", "cap_mb": None, "measured_ms": 1.0, "model_ms": 1.0}]
    assert not buckets_report.plot_sweep(rows, tmp_path / "x.png") and not (tmp_path / "x.png").exists()


# -- overlap ----------------------------------------------------------------------------------------
def step(step_s, compute_s, comm_s, wrong=0):
    return {"step_s": step_s, "compute_s": compute_s, "comm_s": comm_s, "wrong": wrong}


def overlap_results(wrong=0):
    # one setting of 2 layers, one bucket each; 3 timed steps; rank 1 is slower on step 0
    serial = [step(0.030, [0.010, 0.010], [0.005, 0.005]) for _ in range(3)]
    overlap = [step(0.024, [0.010, 0.010], [0.005, 0.005], wrong=wrong) for _ in range(3)]
    slow = [dict(s, step_s=s["step_s"] + 0.010) for s in serial[:1]] + serial[1:]
    checked = {"serial": {"wrong": 0}, "overlap": {"wrong": 3 * wrong}}
    if wrong:
        checked["overlap"]["first_wrong"] = FIRST_WRONG
    return [
        {
            "ok": True,
            "settings": [
                {"setting": "x", "modes": {"serial": serial, "overlap": overlap}, "checked": checked}
            ],
            "units_per_ms": 7.0,
        },
        {
            "ok": True,
            "settings": [{"setting": "x", "modes": {"serial": slow, "overlap": overlap}, "checked": checked}],
            "units_per_ms": 7.0,
        },
    ]


def write_trace(run_dir, rank, warmup=1):
    def ev(name, tid, ts, dur, it):
        return {
            "name": name,
            "tid": tid,
            "ts": ts,
            "dur": dur,
            "args": {"setting": "x", "mode": "overlap", "step": it},
        }

    events = []
    for it in range(warmup + 2):  # compute 0..10 and 10..20 on tid 0; all-reduce 10..15 on tid 7
        t0 = 1000.0 * it
        events += [ev("backward.layer", 0, t0, 10.0, it), ev("backward.layer", 0, t0 + 10, 10.0, it)]
        events += [ev("bucket.allreduce", 7, t0 + 10, 5.0, it), ev("bucket.allreduce", 0, t0, 3.0, it)]
    events.append(
        {"name": "backward.layer", "tid": 0, "ts": 0, "dur": 99, "args": {"setting": "y", "mode": "overlap"}}
    )
    (run_dir / f"rank-{rank}.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n{torn")


def test_traced_overlap_counts_compute_and_allreduce_at_once_per_timed_step(tmp_path):
    write_trace(tmp_path, 0)
    write_trace(tmp_path, 1)
    assert overlap_report.traced_overlap_s(tmp_path, "x", 2, warmup=1) == pytest.approx(5e-6)
    assert overlap_report.traced_overlap_s(tmp_path, "x", 3, warmup=1) == pytest.approx(
        5e-6
    )  # rank 2: no log
    assert overlap_report.traced_overlap_s(tmp_path, "nope", 2, warmup=1) == 0.0


def test_overlap_report(tmp_path):
    write_trace(tmp_path, 0)
    p = OverlapParams(settings=(Setting("x", 2, 4 * KIB, 10.0),), iters=3, warmup=1)
    rep = overlap_report.report(overlap_results(), p, tmp_path)
    assert rep.ok and rep.failures == []
    serial, overlap = rep.tables[0].rows
    assert (serial["mode"], overlap["mode"]) == ("serial", "overlap")
    assert serial["step_ms"] == pytest.approx(30.0)  # slowest rank per step, then the median
    assert serial["hidden_ms"] == 0 and serial["exposed_ms"] == pytest.approx(10.0)
    assert overlap["hidden_ms"] == pytest.approx(6.0) and overlap["efficiency_pct"] == pytest.approx(60.0)
    assert serial["model_ms"] == pytest.approx(30.0) and overlap["model_ms"] == pytest.approx(25.0)
    assert overlap["speedup"] == pytest.approx(30 / 24)
    assert rep.data["traced_overlap_ms_per_step"] == {"x": pytest.approx(0.005)}
    assert rep.data["units_per_ms"] == 7.0
    assert rep.notes[0].startswith(
        "x: 2 layers x 4 KiB gradients, 10 ms compute each, 2 buckets; overlap hid 6.0"
    )
    bad = overlap_report.report(overlap_results(wrong=2), p, tmp_path)
    assert not bad.ok and bad.failures == [
        "x overlap: 12 wrong elements (summed over ranks and steps; first seen on rank 0 at warm-up "
        "iteration 0, bucket 0: element 7 is 9.0, expected 3.0)"
    ]


def test_compute_per_bucket():
    buckets = plan_buckets([4, 4, 4], 8)
    assert overlap_report.compute_per_bucket([1.0, 2.0, 4.0], buckets) == [3.0, 4.0]


# -- ping-pong --------------------------------------------------------------------------------------
def pingpong_results(sizes=(64, 4096, 65536), path="ZeroMQ"):
    rows = [
        {
            "size": n,
            "ours_oneway_us": 20 + n / 1000,
            "raw_oneway_us": 10 + n / 2000,
            "ours_stream_gbps": 1.0,
            "raw_stream_gbps": 2.0,
        }
        for n in sizes
    ]
    return [{"rows": rows, "ours_path": path}, {"rows": rows}]


def test_pingpong_report_fits_alpha_beta_to_our_times():
    rep = pingpong_report.report(pingpong_results())
    assert rep.ok
    (table,) = rep.tables
    assert table.title == "point-to-point, rank 0 <-> rank 1 (2 ranks)"
    assert [r["lat_ratio"] for r in table.rows] == pytest.approx(
        [20.064 / 10.032, 24.096 / 12.048, 85.536 / 42.768]
    )
    assert all(r["bw_ratio"] == 2.0 for r in table.rows)
    assert [r["model_us"] for r in table.rows] == pytest.approx(
        [r["ours_us"] for r in table.rows]
    )  # exact line
    assert rep.notes[0].startswith("alpha-beta fit to our one-way times: alpha = 20.0 us, beta = 1.00 GB/s")
    assert rep.notes[1].startswith("ratios > 1 are the framework's overhead")


def test_pingpong_report_without_a_fit_or_over_shm():
    one = pingpong_report.report(pingpong_results(sizes=(64,), path="shared memory"))
    assert "model_us" not in one.tables[0].rows[0]
    assert one.notes == [
        "ours went through mailboxes in shared memory (--transport shm), raw pyzmq over ipc: "
        "ratios < 1 are what bypassing ZeroMQ on one host gains"
    ]
    flat = pingpong_results(sizes=(64, 4096))
    for r in flat[0]["rows"]:
        r["ours_oneway_us"] = 20.0
    assert pingpong_report.report(flat).notes[0].startswith("no alpha-beta fit: ")
