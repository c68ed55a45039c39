"""The training step's model: its arithmetic on made-up figures (no timing)."""

import pytest

from playground.training import training_stats
from playground.training.modes import BY_NAME
from playground.training.step_model_report import model_row
from playground.training.steptime_model import (
    Contention,
    at_compute_share,
    behind_compute_cost,
    bucket_tail_s,
    collective_times_s,
    cores_for,
    predicted_step_s,
)


def fake_cost(collective, algorithm, size_bytes, num_ranks, cores):
    """1 ms per KiB, doubled when the ranks outnumber the cores: easy to check by hand."""
    return size_bytes / 1024 * 1e-3 * (2 if num_ranks > cores else 1)


def test_the_last_bucket_is_always_exposed():
    # 3 buckets of 1 KiB over a 30 ms backward: ready at 10, 20, 30 ms; 1 ms each: only the last one
    assert bucket_tail_s(0.030, [1024] * 3, [0.001] * 3) == pytest.approx(0.001)
    # 15 ms each: 10-25, 25-40, 40-55: 25 ms after backward
    assert bucket_tail_s(0.030, [1024] * 3, [0.015] * 3) == pytest.approx(0.025)
    # uneven buckets are ready at their share of the bytes: 3/4 at 15 ms, then the last 1/4 at 20 ms
    assert bucket_tail_s(0.020, [3072, 1024], [0.010, 0.001]) == pytest.approx(0.006)
    assert bucket_tail_s(0.020, [], []) == 0.0
    assert bucket_tail_s(0.020, [3072, 1024], []) == 0.0  # one rank: buckets, but no collectives


def test_a_bucket_running_across_backwards_end_goes_on_at_the_rate_after_it():
    # 4 ms each while backward (10 ms) runs, 1 ms after it, ready at 5 and 10 ms: the first ends
    # at 9 (inside backward), the second starts at 10 (after it) and takes 1 ms
    assert bucket_tail_s(0.010, [1, 1], [0.004, 0.004], [0.001, 0.001]) == pytest.approx(0.001)
    # 8 ms while backward runs: the first, ready at 5, has done 5/8 by 10 ms, the other 3/8 at 1 ms
    # (10.375 ms); the second then takes 1 ms
    assert bucket_tail_s(0.010, [1, 1], [0.008] * 2, [0.001] * 2) == pytest.approx(0.001375)
    assert bucket_tail_s(0.010, [1, 1], [0.008] * 2) == pytest.approx(0.011)  # one rate: 13, 21 ms


def test_the_cores_the_ranks_got():
    assert cores_for(4, 2, compute_cpu_s=0.010, compute_wall_s=0.020) == 2  # 4 x 1/2: all of both
    assert cores_for(2, 2, compute_cpu_s=0.010, compute_wall_s=0.020) == 1  # others took one
    assert cores_for(2, 2, compute_cpu_s=0.010, compute_wall_s=0.010) == 2
    assert cores_for(1, 2, compute_cpu_s=0.010, compute_wall_s=0.010) == 1  # a rank uses one core
    assert cores_for(4, 2, compute_cpu_s=0.001, compute_wall_s=0.100) == 1  # never below one
    assert cores_for(4, 2, compute_cpu_s=0.0, compute_wall_s=0.0) == 2
    assert Contention(2).overlapped_cores == 1 and Contention(1).overlapped_cores == 1
    assert Contention(4).overlapped_cores == 2


def test_each_modes_collectives():
    buckets = [1024, 2048]
    bucketed = collective_times_s(BY_NAME["bucketed"], buckets, 3072, 2, "ring", fake_cost, cores=2)
    assert bucketed == pytest.approx([0.001, 0.002])
    crowded = collective_times_s(BY_NAME["bucketed"], buckets, 3072, 4, "ring", fake_cost, cores=2)
    assert crowded == pytest.approx([0.002, 0.004])
    # ZeRO-1: one reduce-scatter and one all-gather of everything, a ring all-reduce's two halves
    assert collective_times_s(BY_NAME["zero1"], [3072], 3072, 2, "ring", fake_cost, 2) == pytest.approx(
        [0.003]
    )
    assert collective_times_s(BY_NAME["after_backward"], [3072], 3072, 1, "ring", fake_cost, 2) == []


def test_serial_and_overlapped_steps():
    # forward 10 ms, backward 30, optimizer 2, communication 20 of which 4 outlast backward
    pred = predicted_step_s(0.010, 0.030, 0.002, 0.020, exposed_comm_s=0.004)
    assert pred == pytest.approx({"serial_s": 0.062, "overlapped_s": 0.046})
    # without the schedule: the best case, max(backward, comm)
    assert predicted_step_s(0.010, 0.030, 0.002, 0.040)["overlapped_s"] == pytest.approx(0.052)


def test_the_path_to_the_collectives_runs_from_the_first_start_to_the_last_backward():
    def record(start, forward_s, backward_s, step_s, cpu_s=0.02):
        return {
            "step_start": start,
            "forward_s": forward_s,
            "backward_s": backward_s,
            "backward_end": start + forward_s + backward_s,
            "optimizer_s": 0.001,
            "step_s": step_s,
            "compute_cpu_s": cpu_s,
        }

    # step 0 untimed; in step 1 rank 1 starts 5 ms late (it waited for a core) and ends backward at
    # 10.035: the path is 35 ms, though no rank computed more than 30
    per_rank = [
        [record(0.0, 0.01, 0.02, 0.05), record(10.0, 0.01, 0.02, 0.040)],
        [record(0.0, 0.01, 0.02, 0.05), record(10.005, 0.01, 0.02, 0.035)],
    ]
    figures = training_stats.rank_medians(per_rank)
    assert figures["last_compute_s"] == pytest.approx(0.035)
    assert figures["after_last_s"] == pytest.approx(0.040 - 0.035 - 0.001)
    assert figures["compute_cpu_s"] == pytest.approx(0.02)
    # ranks on different hosts have no common clock: the longest forward + backward
    assert training_stats.rank_medians(per_rank, one_clock=False)["last_compute_s"] == pytest.approx(0.03)
    assert training_stats.rank_medians([[{"step_s": 1.0}]]) == {}


def test_a_collective_beside_compute_pays_the_ratio_for_the_share_of_the_step_the_ranks_compute():
    asked = []

    def ratio(message_bytes, num_ranks):
        asked.append((message_bytes, num_ranks))
        return 3.0

    beside = behind_compute_cost(fake_cost, ratio, share=0.25)
    # 4 KiB on 4 ranks: a ring's messages of 1 KiB; idle 4 ms, behind compute a quarter of the time
    # at 3x: 4 x (1 + 2 x 0.25)
    assert beside("allreduce", "ring", 4096, 4, 4) == pytest.approx(0.006)
    assert asked == [(1024, 4)]
    assert behind_compute_cost(fake_cost, ratio, share=0.0)("allreduce", "ring", 4096, 4, 4) == pytest.approx(
        0.004
    )


def test_the_compute_share_is_the_fixed_point_of_the_step_it_makes():
    # 10 ms of compute; the step is 10 ms plus 10 ms of communication that doubles behind compute
    def step_s(share):
        return 0.010 + 0.010 * (1 + share)

    share, step = at_compute_share(step_s, 0.010)
    assert share == pytest.approx(0.010 / step, abs=1e-3)  # consistent: share = compute / step
    assert share == pytest.approx(0.4142, abs=1e-3)  # (solves s = 1 / (2 + s): sqrt(2) - 1)
    assert step == pytest.approx(step_s(share))
    assert at_compute_share(lambda share: 0.0, 0.010) == (0.0, 0.0)  # nothing measured: no share


def test_the_overlapped_modes_model_prices_what_runs_beside_backward_behind_compute():
    stats = {
        "forward_s": 0.010, "backward_s": 0.030, "optimizer_s": 0.002, "step_s": 0.060,
        "rank_forward_s": 0.010, "rank_backward_s": 0.030, "last_compute_s": 0.040,
        "compute_cpu_s": 0.042, "buckets": [8192, 8192, 8192],
    }  # fmt: skip
    args = (BY_NAME["bucketed"], stats, 2, 3 * 8192, "ring", fake_cost, 2)
    idle = model_row(*args)
    same = model_row(*args, behind=lambda message_bytes, num_ranks: 1.0)
    slower = model_row(*args, behind=lambda message_bytes, num_ranks: 4.0)
    assert same["model_ms"] == pytest.approx(idle["model_ms"])  # a ratio of 1: as idle
    # 2 ranks on the 1 core left beside backward: each 8 KiB bucket 16 ms idle, ready at 10, 20 and
    # 30 ms of a 30 ms backward
    assert idle["exposed_model_ms"] == pytest.approx(bucket_tail_s(0.030, [8192] * 3, [0.016] * 3) * 1e3)
    assert idle["exposed_model_ms"] == pytest.approx(28.0)  # ends at 26, 42, 58 ms
    # behind compute 4x while backward runs: the first bucket has done 20 of its 64 ms at 30 ms and
    # ends its other 44/64 idle (at 41 ms); the next two start after backward, idle (57, 73 ms)
    assert slower["exposed_model_ms"] == pytest.approx(43.0)
    assert slower["model_ms"] == pytest.approx(10.0 + 30.0 + 2.0 + 43.0)
    # after backward nothing runs beside compute: the ratio changes nothing
    after = (BY_NAME["after_backward"], stats, 2, 3 * 8192, "ring", fake_cost, 2)
    assert model_row(*after, behind=lambda b, n: 4.0)["model_ms"] == pytest.approx(
        model_row(*after)["model_ms"]
    )
