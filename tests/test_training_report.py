"""The training lab's statistics, step-time model and report, on synthetic records (no processes)."""

import json
from types import SimpleNamespace

import pytest

from playground.models.costs import (
    Link,
    allgather_ring_time_s,
    allreduce_ring_time_s,
    reduce_scatter_ring_time_s,
)
from playground.training import training_report, training_stats
from playground.training.modes import BY_NAME
from playground.training.plots import largest_difference
from playground.training.steptime_model import comm_time_s, departure, predicted_step_s
from playground.training.units import Sharding
from playground.transformer import ModelConfig


def step(i: int, step_s: float, **extra) -> dict:
    return {
        "step": i,
        "loss": 5.0 - i,
        "forward_s": 0.01,
        "backward_s": 0.02,
        "comm_s": 0.005,
        "optimizer_s": 0.001,
        "step_s": step_s,
        "allreduce_s": 0.006,
        "check_s": 0.001,
        "backward_end": 100.0 + i + extra.pop("late", 0.0),
        **extra,
    }


def rank_result(rank: int, modes: list[str], slow: float = 0.0, steps: int = 3) -> dict:
    n = 4
    return {
        "ok": True,
        "modes": [
            {
                "mode": mode,
                "host": "h",
                "hash": "0000abcd",
                "steps": [step(i, 0.04 + slow * (i == 2), late=slow) for i in range(steps)],
                "buckets": [1024, 2048],
                "memory": {
                    "params_bytes": 400,
                    "grads_bytes": 400,
                    "optimizer_bytes": 800 // (n if mode == "zero1" else 1),
                    "rss_bytes": 50 << 20,
                    "peak_rss_bytes": 51 << 20,
                },
            }
            for mode in modes
        ],
        **(
            {"sample": "\n的", "sample_likeness": {"valid_utf8": 1.0, "ngrams_found": 0.5, "num_bytes": 4}}
            if rank == 0
            else {}
        ),
    }


def test_each_step_is_read_from_its_slowest_rank_and_the_first_step_is_left_out():
    results = [rank_result(r, ["bucketed"], slow=0.01 * r) for r in range(4)]
    stats = training_stats.mode_stats(results, 0, global_tokens=2048)
    assert stats["step_s"] == pytest.approx(0.04 + 0.03 / 2)  # steps 1 and 2: 0.04, 0.07 (rank 3)
    assert stats["tokens_per_s"] == pytest.approx(2048 / stats["step_s"])
    assert stats["losses"] == [5.0, 4.0, 3.0]
    assert stats["skew_s"] == pytest.approx(0.03)  # rank 3 ended backward 30 ms after rank 0
    assert list(training_stats.timed_steps(1)) == [0] and list(training_stats.timed_steps(5)) == [1, 2, 3, 4]


def test_overlap_is_read_from_the_trace(tmp_path):
    """Backward on the main thread 0-100 us, the bucket's all-reduce on thread 1 from 50 to 150:
    half of the all-reduce was hidden. Step 0 (warm-up) and other modes are left out."""
    events = [
        {
            "ts": 0,
            "dur": 60,
            "name": "backward.head",
            "cat": "compute",
            "tid": 0,
            "args": {"mode": "bucketed", "step": 1},
        },
        {
            "ts": 60,
            "dur": 40,
            "name": "backward.h.0",
            "cat": "compute",
            "tid": 0,
            "args": {"mode": "bucketed", "step": 1},
        },
        {
            "ts": 50,
            "dur": 100,
            "name": "bucket.allreduce",
            "cat": "op",
            "tid": 1,
            "args": {"mode": "bucketed", "step": 1},
        },
        {
            "ts": 0,
            "dur": 100,
            "name": "backward.head",
            "cat": "compute",
            "tid": 0,
            "args": {"mode": "bucketed", "step": 0},
        },
        {
            "ts": 0,
            "dur": 100,
            "name": "bucket.allreduce",
            "cat": "op",
            "tid": 1,
            "args": {"mode": "bucketed", "step": 0},
        },
        {
            "ts": 0,
            "dur": 100,
            "name": "backward.head",
            "cat": "compute",
            "tid": 0,
            "args": {"mode": "after_backward", "step": 1},
        },
        {
            "ts": 100,
            "dur": 30,
            "name": "bucket.allreduce",
            "cat": "op",
            "tid": 0,
            "args": {"mode": "after_backward", "step": 1},
        },
    ]
    (tmp_path / "rank-0.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    per_mode = training_stats.traced_step_overlaps(tmp_path, 1, num_steps=2)
    assert per_mode["bucketed"] == {1: [pytest.approx(50e-6), pytest.approx(100e-6), 1]}  # step 1 only
    got = {mode: training_stats.overlap_over(per_step) for mode, per_step in per_mode.items()}
    assert got["bucketed"] == {
        "hidden_s": pytest.approx(50e-6),
        "comm_s": pytest.approx(100e-6),
        "overlap_pct": 50.0,
    }
    assert got["after_backward"]["overlap_pct"] == 0.0


def test_what_a_wait_for_a_gather_cost_beyond_it_is_read_from_the_trace(tmp_path):
    """For each wait of the main thread: the last rank's late start of the gather it ended with,
    and the time from its end to the next piece; their mean. A gather that ends while a piece
    computes was not waited for; step 0 is left out."""

    def span(name, ts, end, step=1):
        tid = 1 if name.startswith("unit.") else 0
        cat = "op" if tid else "compute"
        return {
            "ts": ts,
            "dur": end - ts,
            "name": name,
            "cat": cat,
            "tid": tid,
            "args": {"mode": "zero3", "step": step},
        }

    pieces = {
        0: [(0, 100), (170, 400), (400, 500), (610, 700)],
        1: [(0, 120), (160, 420), (420, 610), (610, 700)],
    }
    gathers = {
        0: [(100, 150), (180, 250), (500, 540), (540, 600)],
        1: [(130, 150), (190, 260), (500, 530), (560, 600)],
    }
    for r in (0, 1):
        events = [span(f"forward.p{k}", *t) for k, t in enumerate(pieces[r])]
        events += [span("unit.allgather", *t) for t in gathers[r]]
        events += [span("forward.p0", 0, 10, step=0), span("unit.allgather", 10, 5000, step=0)]
        (tmp_path / f"rank-{r}.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    # rank 0: the first wait 30 us for rank 1 to start plus 20 to resume, the second (two gathers:
    # the last one counts) 20 + 10; rank 1: 0 + 10, and its last two gathers end while it computes
    assert training_stats.gather_delays(tmp_path, 2, num_steps=2) == {
        "zero3": pytest.approx((50 + 30 + 10) / 3 * 1e-6)
    }


def test_ddp_records_read_like_ours():
    records = [
        [
            {
                **step(i, 0.05),
                "loss": 4.0 + r,
                "backward_span": [0.0, 1.0],
                "allreduce_spans": [[0.5, 1.5]],
                "bucket_bytes": [10, 20],
            }
            for i in range(3)
        ]
        for r in range(2)
    ]
    ddp = training_stats.ddp_stats(records, 1000)
    assert ddp["losses"] == [4.5, 4.5, 4.5]  # the mean of the ranks' own means
    assert ddp["overlap_pct"] == 50.0 and ddp["buckets"] == [10, 20]
    assert training_stats.relative_gaps([1.0, 2.0], [1.0, 4.0]) == [0.0, 0.5]


def test_the_model_of_each_modes_communication():
    link = Link(10e-6, 1e9, 4e9)
    assert comm_time_s(BY_NAME["bucketed"], [1000, 3000], 4000, 4, link, "ring") == pytest.approx(
        allreduce_ring_time_s(1000, 4, link) + allreduce_ring_time_s(3000, 4, link)
    )
    assert comm_time_s(BY_NAME["zero1"], [4000], 4000, 4, link, "ring") == pytest.approx(
        reduce_scatter_ring_time_s(4000, 4, link) + allgather_ring_time_s(4000, 4, link)
    )
    assert comm_time_s(BY_NAME["after_backward"], [4000], 4000, 1, link, "ring") == 0.0
    assert comm_time_s(BY_NAME["per_tensor"], [8, 1 << 20], 0, 4, link, "auto") > 0
    assert predicted_step_s(0.01, 0.03, 0.002, 0.02) == pytest.approx(
        {"serial_s": 0.062, "overlapped_s": 0.042}
    )
    line = departure(
        True, {"allreduce_s": 0.04, "comm_s": 0.01, "backward_s": 0.033, "skew_s": 0.002}, 0.02, 0.03
    )
    assert "2.0x the model's 20.0 ms" in line and "2.0 ms apart" in line and "backward +10%" in line


def params_of(modes, ddp=None):
    return SimpleNamespace(
        model_config=ModelConfig(layers=1, d_model=8, heads=2, context=8),
        batch=8,
        context=8,
        steps=3,
        mode=tuple(BY_NAME[m] for m in modes),
        dtype="float32",
        algorithm="ring",
        model=None,
        sample_bytes=2,
        prompt="分页",
        temperature=0.0,
        seed=0,
        baseline=ddp,
        micro_batches=1,
        unit_blocks=1,
        prefetch=1,
        reshard_after_forward=True,
        sharding=Sharding(),
    )


def test_the_report_has_every_table_and_the_plot(tmp_path):
    modes = ["per_tensor", "bucketed", "after_backward", "zero1"]
    results = [rank_result(r, modes) for r in range(4)]
    rep = training_report.report(results, params_of(modes), tmp_path)
    assert rep.ok
    titles = [t.title for t in rep.tables]
    assert titles[0].startswith("data-parallel training, 4 ranks")
    assert [t.title.split(":")[0] for t in rep.tables[1:]] == [
        "loss of the global batch (every curve starts from the same weights)",
        "memory per rank",
        "model state and traffic per rank against ZeRO's formulas",
        "step time",
    ]
    memory = {row["mode"]: row for row in rep.tables[2].rows}
    assert memory["zero1"]["states_ratio"] == 0.25 and memory["bucketed"]["states_ratio"] == 1.0
    assert [row["mode"] for row in rep.tables[0].rows] == modes
    assert "loss.png" in rep.files and (tmp_path / "loss.png").stat().st_size > 0
    plot_note = next(n for n in rep.notes if n.startswith("loss plot: "))
    assert str(tmp_path / "loss.png") in plot_note and "the 4 curves agree to rounding" in plot_note
    sample = next(n for n in rep.notes if n.startswith("sample: 2 bytes written by rank 0"))
    assert "greedily" in sample and "'分页'" in sample and sample.endswith("'\\n的'")
    assert any(
        n.startswith("the sample: 100% of its bytes valid UTF-8, 50% of its 4-byte") for n in rep.notes
    )
    assert rep.data["sample"] == "\n的" and rep.data["sample_likeness"]["ngrams_found"] == 0.5


def test_one_mode_has_one_curve_and_no_claim_of_agreement(tmp_path):
    rep = training_report.report(
        [rank_result(r, ["bucketed"]) for r in range(2)], params_of(["bucketed"]), tmp_path
    )
    plot_note = next(n for n in rep.notes if n.startswith("loss plot: "))
    assert plot_note == f"loss plot: {tmp_path / 'loss.png'} (the loss of every step)"
    assert (tmp_path / "loss.png").stat().st_size > 0


def test_the_plot_says_how_far_the_curves_are_apart():
    curves = {"a": [3.0, 2.0, 1.0], "b": [3.0, 2.0 + 1e-7, 1.0], "c": [3.0, 2.0, 1.0 - 3e-7]}
    assert largest_difference(curves) == pytest.approx(3e-7)
    assert largest_difference({"a": [1.0, 2.0]}) == 0.0


def test_the_report_puts_ddp_beside_ours(tmp_path):
    results = [rank_result(r, ["bucketed"]) for r in range(2)]
    ddp = [
        [
            {
                **step(i, 0.05),
                "loss": 5.0 - i,
                "backward_span": [0.0, 1.0],
                "allreduce_spans": [],
                "bucket_bytes": [64],
            }
            for i in range(3)
        ]
        for _ in range(2)
    ]
    rep = training_report.report(results, params_of(["bucketed"], "ddp"), tmp_path, ddp)
    table = rep.tables[-1]
    assert table.title.startswith("ours (bucketed) against PyTorch DDP")
    assert [r["steps"] for r in table.rows] == ["0-0", "1-1", "2-2"]
    assert all(r["loss_gap"] == 0.0 for r in table.rows)
    assert rep.data["ddp"]["loss_gaps"] == [0.0, 0.0, 0.0]


def _span(name: str, ts: float, dur: float, tid: int, s: int) -> dict:
    return {
        "ts": ts,
        "dur": dur,
        "name": name,
        "cat": "op",
        "tid": tid,
        "args": {"mode": "bucketed", "step": s},
    }


def test_each_window_of_the_ddp_table_has_its_own_overlap(tmp_path):
    """Five steps, one per window. Ours: backward 0-100 us and a 100 us all-reduce that starts
    25 x s us before backward ends, so step s hides 25 x s %; DDP's step s hides 20 x s %. Step 0
    is the warm-up, left out: its window has no overlap to show."""
    steps = 5
    for r in range(2):
        events = []
        for s in range(steps):
            events += [
                _span("backward.head", 0, 100, 0, s),
                _span("bucket.allreduce", 100 - 25 * s, 100, 1, s),
            ]
        (tmp_path / f"rank-{r}.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n")
    results = [rank_result(r, ["bucketed"], steps=steps) for r in range(2)]
    ddp = [
        [
            {
                **step(i, 0.05),
                "backward_span": [0.0, 1.0],
                "allreduce_spans": [[1.0 - 0.2 * i, 2.0 - 0.2 * i]],
                "bucket_bytes": [64],
            }
            for i in range(steps)
        ]
        for _ in range(2)
    ]
    params = SimpleNamespace(**{**vars(params_of(["bucketed"], "ddp")), "steps": steps})
    rows = training_report.report(results, params, tmp_path, ddp).tables[-1].rows
    assert [r["steps"] for r in rows] == ["0-0", "1-1", "2-2", "3-3", "4-4"]
    assert [r["overlap_ours_pct"] for r in rows] == pytest.approx([0, 25, 50, 75, 100])
    assert [r["overlap_ddp_pct"] for r in rows] == pytest.approx([0, 20, 40, 60, 80])


def test_one_mode_says_neither_per_mode_nor_that_modes_share_weights(tmp_path):
    """`run train` trains one mode: its titles speak of it alone."""
    results = [rank_result(r, ["bucketed"]) for r in range(4)]
    rep = training_report.report(results, params_of(["bucketed"]), tmp_path)
    titles = " ".join(t.title for t in rep.tables)
    assert "per mode" not in titles and "modes start" not in titles and "same weights" not in titles
