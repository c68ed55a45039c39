"""Stragglers named (playground.tracing.stragglers): a rank slowed by the slow drill is named with its
scores, a clean run names none; the scores on synthetic logs; the drill's keys checked."""

import pytest

from playground.cli.testing import run_scenario
from playground.comm.slowdown import Slowdown
from playground.config.scenario import Fault
from playground.core.errors import ParamError
from playground.core.machine import usable_cores
from playground.tracing import stragglers


def op(rank: int, ts: float, dur: float, waited: float = 0.0) -> list[dict]:
    """A timed all-reduce of `dur` us on `rank`, `waited` of it waiting for a message."""
    events = [{"ts": ts, "dur": dur, "name": "allreduce", "cat": "op", "rank": rank, "args": {"bytes": 64}}]
    if waited:
        events.append({"ts": ts + 1, "dur": waited, "name": "recv_wait", "cat": "wait", "rank": rank})
    return events


def step(rank: int, k: int, forward_us: float, backward_us: float) -> list[dict]:
    return [
        {"ts": k * 1e5, "dur": forward_us, "name": "forward", "cat": "compute", "args": {"step": k}},
        {"ts": k * 1e5 + 5e4, "dur": backward_us, "name": "backward", "cat": "compute", "args": {"step": k}},
    ]


def test_a_rank_the_others_wait_for_is_named_by_its_busy_time():
    # rank 2 works 300 us of each 400 us all-reduce; ranks 0 and 1 wait 250 of theirs for it
    logs = {r: [e for i in range(12) for e in op(r, i * 1000, 400, 0 if r == 2 else 250)] for r in range(3)}
    found = stragglers.judge(logs)
    assert found.named == [2] and found.sections == ["allreduce 64 B"]
    worst = found.worst(2)
    assert worst.relative == pytest.approx(150 / 400) and worst.individual == pytest.approx(1.0)
    assert found.note().startswith("stragglers: rank 2 (allreduce 64 B: 0.37 of the fastest rank's speed")


def test_a_rank_slowed_from_a_step_on_is_named_by_its_whole_steps_and_its_own_best():
    logs = {0: [], 1: []}
    for k in range(12):
        logs[0] += step(0, k, 1000, 2000)
        slow = 2 if (k >= 6) else 1  # rank 1 slows down half-way
        logs[1] += step(1, k, 1000 * slow, 2000 * slow)
    found = stragglers.judge(logs)
    assert found.named == [1]
    whole = found.worst(1)
    assert whole.section == stragglers.COMPUTE and whole.relative == pytest.approx(0.5)
    assert whole.individual == pytest.approx(0.5)  # its own first half was twice as fast
    assert {s.section for s in found.scores} == {"forward", "backward", stragglers.COMPUTE}


def test_noise_in_one_piece_or_one_sample_names_nobody():
    logs = {0: [], 1: []}
    for k in range(12):
        logs[0] += step(0, k, 1000, 2000)
        logs[1] += step(1, k, 2500 if k % 4 == 0 else 1000, 2000)  # a preempted forward now and then
    assert stragglers.judge(logs).named == []
    assert stragglers.judge({0: logs[0]}).named == []  # one rank: nothing to compare


def test_ranks_that_share_too_few_cpus_are_not_judged():
    logs = {r: [e for i in range(12) for e in op(r, i * 1000, 400, 0 if r == 2 else 250)] for r in range(3)}
    found = stragglers.judge(logs, cpus=2)
    assert (
        found.named == []
        and found.note() == "stragglers: not judged (3 ranks share 2 CPUs: each is a straggler in turn)"
    )
    assert stragglers.judge(logs, cpus=3).named == [2]


def test_the_slow_drill_needs_a_factor_above_one_and_only_it_takes_one():
    assert Fault(rank=1, action="slow", factor=2).factor == 2
    with pytest.raises(ParamError, match="factor"):
        Fault(rank=1, action="slow")
    with pytest.raises(ParamError, match="factor"):
        Fault(rank=1, action="slow", factor=1.0)
    with pytest.raises(ParamError, match="only for action slow"):
        Fault(rank=1, action="raise", factor=2)


def test_the_slowdown_stretches_compute_spans_once_armed():
    class Recorder:
        def __init__(self, *a, **k):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    slow = Slowdown(3.0)
    span = slow.stretch_spans(lambda name, cat="compute", **args: Recorder())
    import time

    def busy(seconds):
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            pass

    t0 = time.perf_counter()
    with span("forward", step=0):
        busy(0.01)
    unarmed = time.perf_counter() - t0
    slow.arm()
    t0 = time.perf_counter()
    with span("forward", step=1):
        busy(0.01)
    armed = time.perf_counter() - t0
    assert unarmed < 0.02 <= armed  # 3x: 0.01 of work, then 0.02 of stretch


RING = ["params.sizes=[4KiB]", "params.iters=60", "params.warmup=2"]


@pytest.mark.timeout(120)
def test_a_twice_slow_rank_is_named(runs_dir):
    if usable_cores() < 2:
        pytest.skip("two ranks need a CPU each to be judged")
    slow = ["fault.rank=1", "fault.action=slow", "fault.factor=2", "fault.after_ops=8"]
    code, result, out, err = run_scenario("ring", runs_dir, ranks=2, transport="shm", sets=RING + slow)
    assert code == 0, out + err
    found = result["stragglers"]
    assert found["named"] == [1], found
    assert found["ranks"]["1"]["relative"] < stragglers.RELATIVE_THRESHOLD
    assert "stragglers: rank 1 (allreduce 4096 B:" in out


@pytest.mark.timing  # a clean rank is within 0.6 of the other's speed only while both have a core
@pytest.mark.timeout(120)
def test_a_clean_run_names_none(runs_dir):
    if usable_cores() < 2:
        pytest.skip("two ranks need a CPU each to be judged")
    code, result, out, err = run_scenario("ring", runs_dir, ranks=2, transport="shm", sets=RING)
    assert code == 0, out + err
    assert result["stragglers"]["named"] == [] and "stragglers: none" in out


def test_chaos_draws_stragglers_from_a_stream_of_their_own_and_judges_them(tmp_path):
    from playground.chaos import checks, launched
    from playground.chaos.kinds import Observation
    from playground.chaos.plan import draw

    runs = [draw(11, k, False) for k in range(1, 21)]
    slow = [r for r in runs if r.fault.straggler]
    assert [r.describe() for r in slow][:1] == [
        "#6 collectives 2 ranks over shm (tree 4KiB): slow rank 0 at post 35"
    ]
    assert "fault.factor=2" in " ".join(slow[0].args)
    if usable_cores() >= 2:
        obs = launched.execute(slow[0], tmp_path)
        verdict = checks.judge(slow[0], obs, {})
        assert verdict.ok and verdict.root_ok and verdict.exit_code == 0, verdict.problems
        assert verdict.root_cause.startswith("stragglers: rank 0 (allreduce 4096 B:")
    named_wrong = Observation(exit_code=0, result={"ok": True, "stragglers": {"named": [1], "ranks": {}}})
    verdict = checks.judge(slow[0], named_wrong, {})
    assert not verdict.ok and any("slow rank 0 not named" in p for p in verdict.problems)
    crowded = Observation(
        exit_code=0, result={"ok": True, "stragglers": {"named": [], "not_judged": "3 ranks"}}
    )
    assert checks.judge(slow[0], crowded, {}).missed
