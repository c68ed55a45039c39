"""The chaos command's table: one row per fault kind (runs, passed, missed, wrong root causes, leaks,
bad exits, time from the fault to the first error and to the exit), from the runs' records; the
same as markdown for the results page, merged over several chaos.json files. Under `--recover` the
row is the runs' histories summed (kinds.History): done once, done again after the restart, done
twice, never done, different from a fault-free run, and the time to recover.
"""

import math

from playground.chaos.faults import FAULTS
from playground.chaos.workloads import WORKLOADS
from playground.display.report import Table

COLUMNS = {
    "fault": "fault",
    "runs": "runs",
    "passed": "passed",
    "missed": "missed",
    "wrong_root": "wrong root cause",
    "leaks": "leaks",
    "bad_exit": "bad exit",
    "detect_p50_s": "detect p50 (s)",
    "detect_p99_s": "detect p99 (s)",
    "exit_p99_s": "exit p99 (s)",
}


RECOVER_COLUMNS = {
    "workload": "workload",
    "fault": "fault",
    "runs": "runs",
    "passed": "passed",
    "missed": "missed",
    "once": "once",
    "again": "again",
    "twice": "twice",
    "never": "never",
    "differs": "differs",
    "recover_p50_s": "recover p50 (s)",
}


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank q-th percentile (q in 0-100): a value that occurred; None if there are none."""
    if not values:
        return None
    v = sorted(values)
    return v[max(0, math.ceil(q / 100 * len(v)) - 1)]


def _bad_exit(problems: list[str]) -> bool:
    return any(
        p.startswith(("exit status", "did not exit", "the run ended", "the server's exit")) for p in problems
    )


# The standalone KV server's faults are rows of their own: its clients can only time out on a dead
# server, where the labs' ranks hear of a dead server rank from the launcher at once.
STANDALONE = " (standalone)"
KINDS: dict[str, str] = {}  # table row -> what it is, in the table's order
for _fault in FAULTS.values():
    KINDS[_fault.name] = _fault.what
    if _fault.standalone_what is not None:
        KINDS[_fault.name + STANDALONE] = _fault.standalone_what


def kind_of(record: dict) -> str:
    """The table row of a run: its fault, told apart for the standalone server."""
    fault = record["run"]["fault"]
    workload = WORKLOADS.get(record["run"].get("workload", ""))
    standalone = workload is not None and not workload.launched
    return fault + STANDALONE if standalone and fault + STANDALONE in KINDS else fault


def rows(records: list[dict], recover: bool = False) -> list[dict]:
    """One row per fault kind that occurred (in KINDS' order), and a total; under `recover` per
    workload and fault kind (a history counts requests or steps: the workload's units)."""
    if recover:
        return _recover_rows(records)
    out = []
    groups = [(kind, [r for r in records if kind_of(r) == kind]) for kind in KINDS]
    for kind, group in [*(g for g in groups if g[1]), ("all", records)]:
        verdicts = [r["verdict"] for r in group]
        detect = [v["detect_s"] for v in verdicts if v["detect_s"] is not None]
        exits = [v["exit_s"] for v in verdicts if v["exit_s"] is not None]
        out.append(
            {
                "fault": kind,
                "runs": len(group),
                "passed": sum(v["ok"] and not v["missed"] for v in verdicts),
                "missed": sum(v["missed"] for v in verdicts),
                "wrong_root": sum(v["root_ok"] is False for v in verdicts),
                "leaks": sum(bool(v["leaks"]) for v in verdicts),
                "bad_exit": sum(_bad_exit(v["problems"]) for v in verdicts),
                "detect_p50_s": _round(percentile(detect, 50)),
                "detect_p99_s": _round(percentile(detect, 99)),
                "exit_p99_s": _round(percentile(exits, 99)),
            }
        )
    return out


def _recover_rows(records: list[dict]) -> list[dict]:
    """A row per workload (in WORKLOADS' order) and fault kind that occurred, and a total whose
    once and again are left empty (requests and steps do not add up) and twice, never and differs
    are the runs' counts of what must be 0."""
    out = []
    for workload in WORKLOADS:
        mine = [r for r in records if r["run"].get("workload") == workload]
        for kind in KINDS:
            group = [r for r in mine if kind_of(r) == kind]
            if group:
                out.append({"workload": workload, **_recover_row(kind, group)})
    total = {"workload": "all", **_recover_row("", records)}
    return [*out, {**total, "once": None, "again": None}]


def _recover_row(kind: str, group: list[dict]) -> dict:
    verdicts = [r["verdict"] for r in group]
    histories = [v["history"] for v in verdicts if v.get("history")]
    recover = [h["recover_s"] for h in histories if h.get("recover_s") is not None]
    return {
        "fault": kind,
        "runs": len(group),
        "passed": sum(v["ok"] and not v["missed"] for v in verdicts),
        "missed": sum(v["missed"] for v in verdicts),
        **{k: sum(h[k] for h in histories) for k in ("once", "again", "twice", "never", "differs")},
        "recover_p50_s": _round(percentile(recover, 50)),
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def table(records: list[dict], title: str, recover: bool = False) -> Table:
    return Table(title, rows(records, recover), RECOVER_COLUMNS if recover else COLUMNS)


def markdown(records: list[dict], recover: bool = False) -> str:
    """The table as markdown, then what each fault kind is."""
    columns = RECOVER_COLUMNS if recover else COLUMNS
    text = 2 if recover else 1  # the columns that name (left), before the numbers (right)
    lines = [
        "| " + " | ".join(columns.values()) + " |",
        "|" + "---|" * text + "---:|" * (len(columns) - text),
    ]
    for row in rows(records, recover):
        cells = [
            "" if row[k] is None else (f"{row[k]:.2f}" if isinstance(row[k], float) else str(row[k]))
            for k in columns
        ]
        lines.append("| " + " | ".join(cells) + " |")
    seen = {kind_of(r) for r in records}
    lines += ["", *(f"- **{kind}**: {what}" for kind, what in KINDS.items() if kind in seen)]
    return "\n".join(lines) + "\n"


def failed_lines(records: list[dict]) -> list[str]:
    """One line per failed run: what it was, what went wrong, and how to replay it."""
    return [
        f"run {r['run']['index']} ({r['describe']}): {'; '.join(r['verdict']['problems'])[:400]}\n"
        f"    replay: {r['replay']}"
        for r in records
        if not r["verdict"]["ok"]
    ]
