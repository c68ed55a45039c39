"""The trace's spans (native/span.c behind `Tracer.span`) and the collective's scope: the events
they leave are the ones the Python forms left, on the rank's own clock, and a disabled tracer
records nothing."""

import threading

import pytest

from playground.comm.world import run_local
from playground.tracing.trace import CAT_COMPUTE, CAT_PHASE, Tracer, read_events


class _Clock:
    """A virtual clock, as the simulator gives its ranks: 10 ns a reading."""

    def __init__(self):
        self.now = 0

    def __call__(self) -> int:
        self.now += 10
        return self.now


def test_spans_record_name_category_args_and_duration_on_the_rank_clock(tmp_path):
    path = tmp_path / "rank-0.jsonl"
    tracer = Tracer(0, path, clock_ns=_Clock())
    with tracer.span("outer", CAT_PHASE, steps=3):
        with tracer.span("inner", cat="op", bytes=8):
            pass
        with tracer.span("plain"):
            pass
    tracer.flush()
    events = {e["name"]: e for e in read_events(path)}
    assert events["inner"]["cat"] == "op" and events["inner"]["args"] == {"bytes": 8}
    assert events["outer"]["cat"] == CAT_PHASE and events["outer"]["args"] == {"steps": 3}
    assert events["plain"]["cat"] == CAT_COMPUTE and "args" not in events["plain"]
    assert [events[n]["ts"] * 1000 for n in ("outer", "inner", "plain")] == [10, 20, 40]
    assert [events[n]["dur"] * 1000 for n in ("outer", "inner", "plain")] == [50, 10, 10]
    assert {e["tid"] for e in events.values()} == {0} and {e["rank"] for e in events.values()} == {0}


def test_a_span_records_and_lets_an_exception_through():
    tracer = Tracer(0, None)
    with pytest.raises(KeyError):
        with tracer.span("fails"):
            raise KeyError("x")
    assert [e[2] for e in tracer._events] == ["fails"]


def test_spans_on_another_thread_carry_its_ident_and_a_disabled_tracer_records_nothing():
    tracer, off = Tracer(0, None), Tracer(0, None, enabled=False)

    def work():
        with tracer.span("t"), off.span("t", CAT_PHASE, steps=1):
            pass

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert tracer._events[0][4] == thread.ident
    assert off._events == [] and off.span("a") is off.span("b", cat="op")  # one shared no-op span


def test_the_collective_scope_moves_the_record_on_exit_even_on_an_error():
    def body(comm):
        with comm.collective("allreduce", "rd") as c:
            assert c is comm and comm.op_context() == "in allreduce rd #1"
        try:
            with comm.collective("broadcast", "tree"):
                raise RuntimeError("boom")
        except RuntimeError:
            pass
        return comm.current_op, comm.last_op, comm.num_collectives

    assert run_local(1, body) == [(None, ("broadcast", "tree", 2), 2)]
