"""The concurrency lab's report (lecture 3.1-3.3): rank 0's memory, GIL and waiting rows ->
three tables beside the models, and notes that say why threads give ~1x on CPU-bound Python."""

from playground.display.report import Report, Table

MEMORY_COLUMNS = {
    "writer": "writer",
    "wrote": "wrote",
    "main_sees": "main sees",
    "lecture": "lecture",
    "ok": "ok",
}
GIL_COLUMNS = {
    "how": "how",
    "time_s": "time s",
    "speedup": "speed-up",
    "model_speedup": "model",
    "dev_pct": "dev %",
    "cpu_per_wall": "CPU s / wall s",
}
WAIT_COLUMNS = {
    "how": "how",
    "time_s": "time s",
    "model_s": "model s",
    "dev_pct": "dev %",
    "lecture_s": "lecture s",
}


def gil_with_deviation(gil: list[dict]) -> list[dict]:
    return [{**row, "dev_pct": 100 * (row["speedup"] / row["model_speedup"] - 1)} for row in gil]


def waits_with_deviation(waits: list[dict]) -> list[dict]:
    return [{**row, "dev_pct": 100 * (row["time_s"] / row["model_s"] - 1)} for row in waits]


def notes(r: dict, p) -> list[str]:
    cores = r["cores"]
    out = [
        f"CPU task: {r['iterations']:,} iterations of a pure-Python loop, calibrated to about {p.cpu_task_ms:g} ms; "
        f"fastest of {p.repeats} interleaved rounds. CPU s / wall s = cores actually used at once: "
        "the GIL keeps threads at <= 1.0 however many cores are free.",
        f"Threads: the GIL lets one thread run Python bytecode at a time, so {p.num_workers} threads take as "
        "long as one after another (a little longer: they hand the GIL back and forth every 5 ms).",
        f"Processes: each has its own interpreter and GIL; the model speed-up is min(workers, cores) = "
        f"min({p.num_workers}, {cores}). The lecture's machine had 12 cores; this one has {cores}, shared "
        "with other users, so the measured speed-up also drops when others are busy.",
        "Waits: sleeping needs no CPU and releases the GIL, so the waits overlap even on 2 cores; the small "
        "excess is thread start-up and sleep wake-up latency.",
        r["machine"],
    ]
    share = r["gil"][0]["cpu_per_wall"]
    if share < 0.8:
        out.append(
            f"The serial run got only {share:.2f} of a core (CPU s / wall s): other users kept the machine "
            "oversubscribed, so no variant could run in parallel and the speed-ups above say little; "
            "rerun when `uptime` shows a load below the core count."
        )
    return out


def report(r: dict, p) -> Report:
    """The report from rank 0's result `r` (`p`: the node's Params). Fails when the memory check
    did (a thread's write unseen, or a child's write seen)."""
    failures = (
        [] if all(row["ok"] for row in r["memory"]) else ["rank 0: threads/processes memory check failed"]
    )
    gil, waits = gil_with_deviation(r["gil"]), waits_with_deviation(r["waits"])
    return Report(
        ok=not failures,
        tables=[
            Table("Who sees a write (lecture 3.1)", r["memory"], MEMORY_COLUMNS),
            Table(f"CPU-bound pure Python, {p.num_workers} tasks (the GIL, lecture 3.2)", gil, GIL_COLUMNS),
            Table(f"Waiting concurrency, {p.num_waits} x {p.wait_s:g} s (lecture 3.3)", waits, WAIT_COLUMNS),
        ],
        notes=notes(r, p),
        failures=failures,
        data={"gil": gil, "waits": waits},
    )
