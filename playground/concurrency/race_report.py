"""The race lab's report (lecture 3.4): what each variant's counter reached, the exhaustive
interleavings beside the lecture, and the checks: only "no lock" may lose updates."""

from playground.display.report import Report, Table

COLUMNS = {
    "variant": "variant",
    "expected": "expected",
    "final": "final",
    "lost": "lost updates",
    "lost_pct": "lost %",
    "time_s": "time s",
    "ns_per_increment": "ns / increment",
    "vs_no_lock": "x no lock",
}
INTERLEAVING_COLUMNS = {
    "case": "case",
    "orders": "orders",
    "final_values": "final x: orders",
    "lecture": "lecture",
    "correct": "correct orders",
    "match": "match",
}


def failures(rows: list[dict], inter: list[dict]) -> list[str]:
    """A correct method that lost an update, or an enumeration that disagrees with the lecture."""
    out = [
        f"{x['variant']}: lost {x['lost']} updates; a correct method must lose none"
        for x in rows
        if x["variant"] != "no lock" and x["lost"] != 0
    ]
    return out + [
        f"interleavings {x['case']}: {x['final_values']}, lecture {x['lecture']}"
        for x in inter
        if not x["match"]
    ]


def with_cost_ratio(rows: list[dict]) -> list[dict]:
    """The rows with `vs_no_lock`: each variant's cost per increment over the unlocked one's."""
    base = next((x["ns_per_increment"] for x in rows if x["variant"] == "no lock"), None)
    return [{**x, "vs_no_lock": x["ns_per_increment"] / base if base else None} for x in rows]


def notes(example: str, machine: str) -> list[str]:
    return [
        f"A lost update, step by step: {example} -- two increments, x = 1.",
        "no lock: read and write are separate steps on shared memory; another process's write between them "
        "is overwritten. How many are lost depends on how often two processes run at once (2 cores here) or "
        "one is preempted between its read and its write -- rare per increment, so it takes many to see.",
        "lock: correct, but every increment pays a lock/unlock (a futex system call when contended) and the "
        "processes take turns, so it is the slowest.",
        "atomic (kernel O_APPEND): one write(2) per increment; the kernel updates the file offset atomically. "
        "A true CPU atomic (lock xadd, CUDA's atomicAdd) costs a few ns but is not reachable from pure Python.",
        "sharded: no sharing while counting, so no lost updates and no waiting; the sum is taken once at the end.",
        machine,
    ]


def report(r: dict, p) -> Report:
    """The report from rank 0's result `r` (`p`: the node's Params)."""
    rows, inter = with_cost_ratio(r["rows"]), r["interleavings"]
    failed = failures(rows, inter)
    return Report(
        ok=not failed,
        tables=[
            Table(
                f"{p.num_procs} processes x {p.increments:,} increments of one shared counter",
                rows,
                COLUMNS,
                legend={"vs_no_lock": "this variant's time / the variant without a lock"},
            ),
            Table("Every interleaving of read / add / write (exhaustive)", inter, INTERLEAVING_COLUMNS),
        ],
        notes=notes(r["example"], r["machine"]),
        failures=failed,
        data={"interleavings": inter},
    )
