"""The results page of faults nobody chose: `python -m playground chaos` in pieces of PIECE_RUNS
runs, one fixed seed each (seeds 1, 2, ...: every piece replays exactly), with `--hosts` where
this process may build emulated hosts; then every piece's chaos.json merged into one table by fault
kind (runs, passed, wrong root causes, leaks, bad exits, detection and exit p50/p99), the failed
runs each with the command that replays it.

Then `chaos --recover` in pieces of its own (seeds 1, 2, ...: the faults a restart must mend), its
histories merged into a second table by fault kind: answered once, run again, twice, never,
differing from a fault-free run, and the time to recover.

A piece already measured is kept under `results --continue`, and `--max-minutes` starts no new one,
so the 200 runs are measured in pieces of a few minutes on a shared machine. A failed run is a
finding for the page, not a failed section: chaos's exit 1 is accepted here.
"""

import json
import time
from pathlib import Path

from playground.chaos import report as chaos_report
from playground.core.errors import EmulationError
from playground.core.rundir import EXIT_FAILED, EXIT_OK
from playground.hosts import netns

PIECE_RUNS = 25
FULL_PIECES = 8  # 200 runs
QUICK_RUNS = 10
RECOVER_RUNS, RECOVER_PIECES, QUICK_RECOVER_RUNS = 20, 2, 6  # chaos --recover: 40 runs (6 quick)


def _can_emulate() -> bool:
    try:
        netns.check_can_emulate()
        return True
    except EmulationError:
        return False


def finished_piece(out: Path) -> dict | None:
    """The last chaos.json under `out` (one piece's --out) of a command that ran to its end."""
    for path in sorted(out.glob("*-chaos/chaos.json"), reverse=True):
        summary = json.loads(path.read_text())
        if "table" in summary and not summary.get("interrupted"):
            stamp = path.parent.name  # YYYYMMDD-HHMMSS-chaos: when the piece started
            return {
                **summary,
                "started": f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]}",
            }
    return None


def read_pieces(work: Path, prefix: str = "seed-") -> list[dict]:
    """Every finished piece under `work` (`prefix`S/), by seed; a piece measured again counts once."""
    dirs = sorted(work.glob(f"{prefix}*"), key=lambda d: int(d.name.rsplit("-", 1)[1]))
    return [s for d in dirs if (s := finished_piece(d)) is not None]


def chaos_section(ctx) -> str:
    """Run the pieces not measured yet, then the page's body from all of them."""
    hosts = _can_emulate() and not ctx.quick
    pieces = [(1, QUICK_RUNS)] if ctx.quick else [(seed, PIECE_RUNS) for seed in range(1, FULL_PIECES + 1)]
    recovering = (
        [(1, QUICK_RECOVER_RUNS)] if ctx.quick else [(s, RECOVER_RUNS) for s in range(1, RECOVER_PIECES + 1)]
    )
    started = time.monotonic()
    _measure(ctx, pieces, "seed-", ["--hosts"] if hosts else [], started)
    _measure(ctx, recovering, "recover-seed-", ["--recover"], started)
    return page(read_pieces(ctx.work), len(pieces)) + recover_page(
        read_pieces(ctx.work, "recover-seed-"), len(recovering)
    )


def _measure(ctx, pieces: list[tuple[int, int]], prefix: str, flags: list[str], started: float) -> None:
    for seed, runs in pieces:
        out = ctx.work / f"{prefix}{seed}"
        kept = finished_piece(out)
        if kept is not None:  # measured by an earlier `results --continue`
            ctx.commands.append(f"{kept['command']} --out {out}  # kept: measured {kept['started']}")
            continue
        if ctx.out_of_time(started):
            break
        args = ["chaos", "--runs", str(runs), "--seed", str(seed), *flags, "--out", str(out)]
        ctx.run(*args, timeout_s=1800, ok=(EXIT_OK, EXIT_FAILED))


def recover_page(summaries: list[dict], planned: int) -> str:
    """The `chaos --recover` part of the page: its runs' histories by fault kind."""
    records = [r for s in summaries for r in s["records"]]
    if not records:
        return "\n## Recovering\n\nNo `chaos --recover` run was measured yet.\n"
    failed, missed = _tally(records)
    lines = [
        "\n## Recovering\n",
        f"`chaos --recover`: {len(records)} runs in {len(summaries)} of {planned} pieces of fixed seeds "
        f"({', '.join(str(s['seed']) for s in summaries)}), each a workload a restart mends hit by one "
        f"fault it must mend. {len(records) - len(failed) - missed} passed, {len(failed)} failed, {missed} "
        "missed (the run ended before its fault).\n",
        "A row per workload and fault kind; a history counts the workload's own units. once: "
        "requests answered once (tensor serving: decode runs done once; training: steps in the record "
        "once); again: requests run again from their prompts after the restart (the standalone "
        "server's: re-sent by its clients; tensor serving: the decode runs of the round in flight; "
        "training: steps redone from the checkpoint); twice, never and differs must be 0 (differs: "
        "tokens unlike a fault-free run's; training: losses and final parameters unlike those of the "
        "same command run without the fault, bit for bit). Recover: the fault to the restarted group "
        "registered (the launcher's teardown and restart; its detection when the fault's time is "
        "known), or to the standalone server up again.\n",
        chaos_report.markdown(records, recover=True),
    ]
    return "\n".join(lines + _failed_runs(failed))


def _tally(records: list[dict]) -> tuple[list[dict], int]:
    """(the failed runs, how many missed)."""
    return [r for r in records if not r["verdict"]["ok"]], sum(r["verdict"]["missed"] for r in records)


def _failed_runs(failed: list[dict]) -> list[str]:
    if not failed:
        return []
    lines = [f"- {line.replace(chr(10) + '    ', ' ')}" for line in chaos_report.failed_lines(failed)]
    return ["**Failed runs**\n", *lines, ""]


def page(summaries: list[dict], planned: int) -> str:
    records = [r for s in summaries for r in s["records"]]
    if not records:
        return "No chaos run was measured yet: rerun `python -m playground results --sections chaos --continue`.\n"
    failed, missed = _tally(records)
    hosts = "on emulated hosts (`--hosts`: host faults too)" if summaries[0]["hosts"] else "on one host"
    lines = [
        f"{len(records)} runs {hosts}, in {len(summaries)} of {planned} pieces of fixed seeds "
        f"({', '.join(str(s['seed']) for s in summaries)}); each run a drawn workload, rank count and "
        f"size, and one fault at a drawn moment. {len(records) - len(failed) - missed} passed every check, "
        f"{len(failed)} failed, {missed} missed (the workload ended before its fault's moment).\n",
        "Detection is the time from the fault to the first failure the launcher recorded (for a KV "
        "client of the standalone server: to the first client's error); exit, to the launcher's (or "
        "last client's) exit. Ctrl-C, SIGTERM and a SIGKILLed launcher fail no rank: only their exit "
        "is timed. Percentiles are nearest-rank (p99 of fewer than 100 runs is their maximum).\n",
        chaos_report.markdown(records),
    ]
    return "\n".join(lines + _failed_runs(failed))
