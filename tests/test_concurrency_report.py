"""The concurrency and race labs' reports on synthetic rank results, and the runners with
trivial tasks (no timing asserted: only what ran and what was counted)."""

import multiprocessing
import os

import pytest

from nodes.concurrency import Params as ConcurrencyParams
from nodes.race import Params as RaceParams
from playground.concurrency import concurrency_report, race_report
from playground.concurrency.interleavings import lecture_rows
from playground.concurrency.runners import run_processes, run_serial, run_threads
from playground.core.machine import usable_cores


def memory(ok_process=True):
    return [
        {"writer": "thread", "wrote": 42, "main_sees": 42, "lecture": 42, "ok": True},
        {
            "writer": "child process",
            "wrote": 99,
            "main_sees": 0 if ok_process else 99,
            "lecture": 0,
            "ok": ok_process,
        },
    ]


def concurrency_result(share=1.0, ok_process=True):
    gil = [
        {
            "how": "one after another",
            "time_s": 1.0,
            "speedup": 1.0,
            "model_speedup": 1.0,
            "cpu_per_wall": share,
        },
        {"how": "4 threads", "time_s": 1.1, "speedup": 1 / 1.1, "model_speedup": 1.0, "cpu_per_wall": 0.95},
        {"how": "4 processes", "time_s": 0.6, "speedup": 1 / 0.6, "model_speedup": 2.0, "cpu_per_wall": 1.8},
    ]
    waits = [
        {"how": "8 waits one by one", "time_s": 0.82, "model_s": 0.8, "lecture_s": 0.83},
        {"how": "8 threads waiting", "time_s": 0.11, "model_s": 0.1, "lecture_s": 0.11},
    ]
    return {
        "ok": ok_process,
        "memory": memory(ok_process),
        "gil": gil,
        "waits": waits,
        "iterations": 123456,
        "cores": 2,
        "machine": "Machine: 2 cores usable",
    }


def test_concurrency_report():
    rep = concurrency_report.report(concurrency_result(), ConcurrencyParams())
    assert rep.ok and rep.failures == []
    mem, gil, waits = rep.tables
    assert mem.title == "Who sees a write (lecture 3.1)" and mem.rows == memory()
    assert gil.title == "CPU-bound pure Python, 4 tasks (the GIL, lecture 3.2)"
    assert [r["dev_pct"] for r in gil.rows] == pytest.approx([0.0, 100 * (1 / 1.1 - 1), 100 * (1 / 1.2 - 1)])
    assert waits.title == "Waiting concurrency, 8 x 0.1 s (lecture 3.3)"
    assert [r["dev_pct"] for r in waits.rows] == pytest.approx([2.5, 10.0])
    assert rep.data == {"gil": gil.rows, "waits": waits.rows}
    assert rep.notes[0].startswith("CPU task: 123,456 iterations") and "min(4, 2)" in rep.notes[2]
    assert rep.notes[-1] == "Machine: 2 cores usable"  # no oversubscription note at a full core


def test_concurrency_report_fails_on_the_memory_check_and_warns_when_starved():
    rep = concurrency_report.report(concurrency_result(share=0.5, ok_process=False), ConcurrencyParams())
    assert not rep.ok and rep.failures == ["rank 0: threads/processes memory check failed"]
    assert rep.notes[-1].startswith("The serial run got only 0.50 of a core")


def race_rows(lost_with_lock=0):
    def row(variant, final, ns):
        return {
            "variant": variant,
            "expected": 800,
            "final": final,
            "lost": 800 - final,
            "lost_pct": (800 - final) / 8,
            "time_s": ns * 800e-9,
            "ns_per_increment": ns,
        }

    return [row("no lock", 700, 100.0), row("lock", 800 - lost_with_lock, 400.0), row("sharded", 800, 50.0)]


def test_race_report():
    r = {"rows": race_rows(), "interleavings": lecture_rows(), "example": "A reads 0, ...", "machine": "m"}
    rep = race_report.report(r, RaceParams(num_procs=4, increments=200))
    assert rep.ok and rep.failures == []
    rows, inter = rep.tables
    assert rows.title == "4 processes x 200 increments of one shared counter"
    assert [x["vs_no_lock"] for x in rows.rows] == [1.0, 4.0, 0.5]
    assert inter.rows == lecture_rows() and rep.data == {"interleavings": inter.rows}
    assert rep.notes[0] == "A lost update, step by step: A reads 0, ... -- two increments, x = 1."


def test_race_report_fails_when_a_correct_method_loses_updates_or_the_count_is_off():
    inter = lecture_rows()
    inter[0] = {**inter[0], "match": False}
    r = {"rows": race_rows(lost_with_lock=3), "interleavings": inter, "example": "", "machine": ""}
    rep = race_report.report(r, RaceParams())
    assert not rep.ok
    assert rep.failures == [
        "lock: lost 3 updates; a correct method must lose none",
        "interleavings 2 threads x 1 increment(s): x=1: 18, x=2: 2, lecture x=1: 18, x=2: 2",
    ]
    assert (
        race_report.with_cost_ratio([{"variant": "lock", "ns_per_increment": 2.0}])[0]["vs_no_lock"] is None
    )


COUNTER = multiprocessing.get_context("fork").Value("q", 0)


def _add(n):
    with COUNTER.get_lock():
        COUNTER.value += n


def _exit_with(code):
    os._exit(code)


@pytest.mark.timeout(30)
def test_runners_run_every_task_once():
    for run in (run_serial, run_threads, run_processes):  # processes are forked: they share COUNTER
        COUNTER.value = 0
        wall, cpu = run(_add, [(1,), (10,), (100,)])
        assert COUNTER.value == 111 and wall >= 0 and cpu >= 0, run.__name__
    with pytest.raises(RuntimeError, match=r"exit codes \[0, 3\]"):
        run_processes(_exit_with, [(0,), (3,)])
    assert usable_cores() >= 1
