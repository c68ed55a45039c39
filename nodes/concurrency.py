"""Processes vs threads, the GIL, and waiting concurrency (lecture 3.1-3.3), with real threads
and real forked processes inside one rank.

1. Memory: a thread's write is seen by the main program (one address space); a child process's
   write is not (it wrote its own copy-on-write copy of the page).
2. The GIL: the same pure-Python CPU task run 4 times one after another, on 4 threads and on 4
   processes. Threads take turns holding the GIL, so they give ~1x; processes each have their
   own interpreter, so they give up to min(4, cores)x -- 2x at most on this 2-core machine.
3. Waiting: 8 waits of 0.1 s one by one take 0.8 s; on 8 threads they overlap (a sleeping thread
   holds no GIL and needs no CPU) and take ~0.1 s.
"""

import multiprocessing
import threading
import time
from dataclasses import dataclass

from playground.concurrency import concurrency_report
from playground.concurrency.runners import run_processes, run_serial, run_threads
from playground.concurrency.timing import calibrate_iterations, cpu_work
from playground.config.node import NodeContract
from playground.core.errors import ParamError
from playground.core.machine import load_note, usable_cores
from playground.display.report import Report

_shared = {"x": 0}


@dataclass(frozen=True)
class Params:
    cpu_task_ms: float = 250.0  # ms of one pure-Python CPU task, sized by a calibration at start
    num_workers: int = 4  # CPU tasks of the GIL part: run serially, then one per thread, then one per process
    num_waits: int = 8  # sleeps of the waiting part: done one by one, then each on a thread of its own
    wait_s: float = 0.1  # length of each sleep, seconds
    repeats: int = 3  # rounds of serial / threads / processes, interleaved; the fastest of each is kept

    def __post_init__(self):
        if self.cpu_task_ms <= 0:
            raise ParamError("cpu_task_ms", f"must be > 0, got {self.cpu_task_ms}")
        if not 1 <= self.num_workers <= 64:
            raise ParamError("num_workers", f"must be in 1..64, got {self.num_workers}")
        if not 1 <= self.num_waits <= 256:
            raise ParamError("num_waits", f"must be in 1..256, got {self.num_waits}")
        if not 1 <= self.repeats <= 20:
            raise ParamError("repeats", f"must be in 1..20, got {self.repeats}")
        if self.wait_s <= 0:
            raise ParamError("wait_s", f"must be > 0, got {self.wait_s}")


def _set_x(value: int) -> None:
    _shared["x"] = value


def memory_rows() -> list[dict]:
    """Who wrote x, and what the main program sees afterwards (lecture: 42 and 0)."""
    _shared["x"] = 0
    t = threading.Thread(target=_set_x, args=(42,))
    t.start()
    t.join()
    seen_thread = _shared["x"]
    _shared["x"] = 0
    child = multiprocessing.get_context("fork").Process(target=_set_x, args=(99,))
    child.start()
    child.join()
    seen_process = _shared["x"]
    return [
        {"writer": "thread", "wrote": 42, "main_sees": seen_thread, "lecture": 42, "ok": seen_thread == 42},
        {
            "writer": "child process",
            "wrote": 99,
            "main_sees": seen_process,
            "lecture": 0,
            "ok": seen_process == 0,
        },
    ]


def gil_rows(num_workers: int, iterations: int, repeats: int) -> list[dict]:
    """Serial, threads, processes, interleaved `repeats` times; each keeps its fastest round, the
    one least disturbed by other users of the machine. CPU s / wall s is the parallelism
    actually achieved: the GIL caps it at 1 for threads whatever the load."""
    args = [(iterations,)] * num_workers
    runners = {"serial": run_serial, "threads": run_threads, "processes": run_processes}
    best: dict[str, tuple[float, float]] = {}
    for _ in range(repeats):
        for name, run in runners.items():
            wall, cpu = run(cpu_work, args)
            if name not in best or wall < best[name][0]:
                best[name] = (wall, cpu)
    serial = best["serial"][0]
    cores = usable_cores()
    models = {"serial": 1.0, "threads": 1.0, "processes": float(min(num_workers, cores))}
    labels = {
        "serial": "one after another",
        "threads": f"{num_workers} threads",
        "processes": f"{num_workers} processes",
    }
    return [
        {
            "how": labels[k],
            "time_s": best[k][0],
            "speedup": serial / best[k][0],
            "model_speedup": models[k],
            "cpu_per_wall": best[k][1] / best[k][0],
        }
        for k in runners
    ]


def wait_rows(num_waits: int, wait_s: float) -> list[dict]:
    serial = run_serial(time.sleep, [(wait_s,)] * num_waits)[0]
    threads = run_threads(time.sleep, [(wait_s,)] * num_waits)[0]
    return [
        {
            "how": f"{num_waits} waits one by one",
            "time_s": serial,
            "model_s": num_waits * wait_s,
            "lecture_s": 0.83 if (num_waits, wait_s) == (8, 0.1) else None,
        },
        {
            "how": f"{num_waits} threads waiting",
            "time_s": threads,
            "model_s": wait_s,
            "lecture_s": 0.11 if (num_waits, wait_s) == (8, 0.1) else None,
        },
    ]


def main(comm, params: Params) -> dict:
    if comm.rank != 0:
        return {"ok": True}
    comm.progress(0, 3, "memory")
    memory = memory_rows()
    comm.progress(1, 3, "GIL")
    iterations = calibrate_iterations(params.cpu_task_ms / 1000)
    gil = gil_rows(params.num_workers, iterations, params.repeats)
    comm.progress(2, 3, "waits")
    waits = wait_rows(params.num_waits, params.wait_s)
    comm.progress(3, 3, "done")
    return {
        "ok": all(r["ok"] for r in memory),
        "memory": memory,
        "gil": gil,
        "waits": waits,
        "iterations": iterations,
        "cores": usable_cores(),
        "machine": load_note(),
    }


def summarize(results: list[dict], params: Params, run_dir) -> Report:
    return concurrency_report.report(results[0], params)


CONTRACT = NodeContract(
    Params,
    summarize,
    threaded=True,  # threads beside the rank's own (server, load generator)
)
