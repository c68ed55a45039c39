"""The pipeline schedules as pure data: every micro-batch forwarded then backwarded once per stage,
the dependencies satisfiable, 1F1B's in-flight count at most p - stage; and the schedules run in
simulated time against the closed forms (bubble (p - 1) / (m + p - 1))."""

import pytest

from playground.core.errors import UsageError
from playground.models.pipeline import bubble_fraction
from playground.training.pipeline.schedules import (
    BACKWARD,
    FORWARD,
    SCHEDULES,
    Action,
    gpipe,
    in_flight,
    one_f_one_b,
    peak_in_flight,
    validate,
)
from playground.training.pipeline.steptime_model import simulate

GRID = [(p, m) for p in (1, 2, 3, 4, 8) for m in (1, 2, 3, 4, 7, 8, 16)]


@pytest.mark.parametrize("name", list(SCHEDULES))
@pytest.mark.parametrize("p,m", GRID)
def test_every_micro_batch_forward_then_backward_once_per_stage(name, p, m):
    schedule = SCHEDULES[name].build(p, m)
    validate(schedule, m)  # raises on a missing, repeated or early action, or a deadlock
    assert len(schedule) == p
    for s, actions in enumerate(schedule):
        assert sorted(a.micro_batch for a in actions if a.kind == FORWARD) == list(range(m))
        assert sorted(a.micro_batch for a in actions if a.kind == BACKWARD) == list(range(m))
        assert all(a.stage == s for a in actions)
        assert min(in_flight(actions)) >= 0 and in_flight(actions)[-1] == 0


@pytest.mark.parametrize("p,m", GRID)
def test_in_flight_peaks_are_the_formulas(p, m):
    for s in range(p):
        assert peak_in_flight(gpipe(p, m)[s]) == m
        assert peak_in_flight(one_f_one_b(p, m)[s]) == min(p - s, m) <= p - s
        assert SCHEDULES["1f1b"].peak(p, s, m) == min(p - s, m)


def test_one_f_one_b_warms_up_then_alternates_then_cools_down():
    """Stage 0 of 4 over 8: 3 warm-up forwards, then F3 B0 F4 B1 ... F7 B4, then B5 B6 B7 (as in
    Narayanan et al. 2021, figure 4); the last stage alternates from its first forward."""
    words = [f"{a.kind}{a.micro_batch}" for a in one_f_one_b(4, 8)[0]]
    assert words == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7".split()
    assert [f"{a.kind}{a.micro_batch}" for a in one_f_one_b(4, 3)[3]] == "F0 B0 F1 B1 F2 B2".split()
    assert one_f_one_b(4, 2)[0] == gpipe(4, 2)[0]  # m < p: no steady state, GPipe on stage 0


def test_bad_schedules_are_refused():
    good = one_f_one_b(2, 2)
    with pytest.raises(UsageError, match="before its forward"):
        validate(((Action(0, BACKWARD, 0), Action(0, FORWARD, 0), *good[0][2:]), good[1]), 2)
    with pytest.raises(UsageError, match="twice"):
        validate(((*good[0], Action(0, FORWARD, 1)), good[1]), 2)
    with pytest.raises(UsageError, match="does not forward and backward all"):
        validate((good[0][:-1], good[1]), 2)
    # stage 1 waits for F1 before it does B0, which stage 0 waits for before F1: deadlock
    stuck0 = (Action(0, FORWARD, 0), Action(0, BACKWARD, 0), Action(0, FORWARD, 1), Action(0, BACKWARD, 1))
    stuck1 = (Action(1, FORWARD, 0), Action(1, FORWARD, 1), Action(1, BACKWARD, 0), Action(1, BACKWARD, 1))
    with pytest.raises(UsageError, match="deadlocks"):
        validate((stuck0, stuck1), 2)


@pytest.mark.parametrize("name", list(SCHEDULES))
@pytest.mark.parametrize("p,m", GRID)
def test_equal_stages_take_m_plus_p_minus_1_slots(name, p, m):
    """Free messages, a core per stage, forward f and backward b: (m + p - 1)(f + b); the bubble is
    exactly the formula."""
    run = simulate(SCHEDULES[name].build(p, m), [1.0] * p, [2.0] * p)
    assert run.makespan_s == pytest.approx((m + p - 1) * 3.0, rel=1e-12)
    assert run.bubble == pytest.approx(bubble_fraction(p, m), abs=1e-12)
    assert [run.busy_s(s) for s in range(p)] == pytest.approx([3.0 * m] * p)


def test_messages_and_shared_cores_in_the_model():
    """m = 1 on p stages: the activation goes p - 1 hops forward and its gradient p - 1 back; two
    stages computing at once on one core take twice as long."""
    one = simulate(gpipe(4, 1), [1.0] * 4, [2.0] * 4, send_s=0.5)
    assert one.makespan_s == pytest.approx(4 * 3.0 + 2 * 3 * 0.5)
    shared = simulate(gpipe(2, 2), [1.0, 1.0], [1.0, 1.0], cores=1)
    alone = simulate(gpipe(2, 2), [1.0, 1.0], [1.0, 1.0])
    # F1 on stage 0 and F0 on stage 1 run together at half speed: the fill slows down by one slot
    assert alone.makespan_s == pytest.approx(6.0) and shared.makespan_s > alone.makespan_s
    total_work = 2 * 2 * 2.0
    assert shared.makespan_s >= total_work  # one core: never faster than the work itself
    with pytest.raises(UsageError):
        simulate(gpipe(2, 2), [1.0], [1.0, 1.0])
