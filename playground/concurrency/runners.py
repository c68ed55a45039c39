"""Run the same task one after another, on threads, or in forked processes; time wall and CPU.

CPU seconds over wall seconds is how many cores a variant really used at once: the number that
shows the GIL (threads stay at <= 1.0 however many cores are free) and a busy shared machine
(even the serial run gets less than one core). Children's CPU time counts once they are joined.
"""

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence

from playground.core.errors import LabError


def cpu_s() -> float:
    """CPU seconds used so far by this process and its waited-for children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def run_serial(target: Callable, args_list: Sequence[tuple]) -> tuple[float, float]:
    """(wall s, CPU s) of calling `target(*args)` for each args, one after another."""
    c0, t0 = cpu_s(), time.perf_counter()
    for a in args_list:
        target(*a)
    return time.perf_counter() - t0, cpu_s() - c0


def run_threads(target: Callable, args_list: Sequence[tuple]) -> tuple[float, float]:
    """(wall s, CPU s) of running each args on its own thread."""
    threads = [threading.Thread(target=target, args=a) for a in args_list]
    c0, t0 = cpu_s(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, cpu_s() - c0


def run_processes(target: Callable, args_list: Sequence[tuple]) -> tuple[float, float]:
    """(wall s, CPU s) of running each args in its own forked process; LabError if one fails."""
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=target, args=a) for a in args_list]
    c0, t0 = cpu_s(), time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    wall = time.perf_counter() - t0
    if any(p.exitcode != 0 for p in procs):
        raise LabError(
            f"a worker process failed: exit codes {[p.exitcode for p in procs]}", step="a worker process"
        )
    return wall, cpu_s() - c0
