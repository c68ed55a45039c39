"""`inspect RUN --flight`: what the ranks' flight recorders say about a run, whole or hung.

Reads every rank's ring from the run directory (flight-rank-<r>.bin: written by the ranks as they
go, so it is there after a crash, during a hang, and while the run still runs) and lines them up
(comm/flight_report.py): the first collective the ranks disagree on, the ranks that never joined a
collective the others entered, each rank's last completed collective and the one it is in, and the
rank the others wait for. PyTorch's `fr_trace` analyzer answers the same questions from its dumps.
"""

from pathlib import Path

from playground.comm import flight, flight_report
from playground.core.errors import ScenarioError
from playground.display.report import make_console, render_table

DETAIL_ENTRIES = 6  # the newest entries shown of each rank the summary names


def inspect_flight(run_dir: Path) -> int:
    rings = flight.read_run(run_dir)
    if not rings:
        raise ScenarioError(
            f"{run_dir}: no flight recorder here (flight-rank-<r>.bin): a run of this version writes one per "
            "rank unless PLAYGROUND_FLIGHT_ENTRIES=0"
        )
    analysis = flight_report.analyze(rings)
    console = make_console()
    capacity = max(r.capacity for r in rings.values())
    console.print(
        f"flight recorder of {run_dir}: {len(rings)} ranks, the last {capacity} operations of each",
        highlight=False,
    )
    lines = flight_report.summary_lines(analysis)
    if not lines:
        last = {flight_report.describe(r.last_completed) for r in rings.values()}
        lines = [
            f"every rank completed the same collectives (the last: {', '.join(sorted(last))}); none waits"
        ]
    for line in lines:
        console.print(f"  {line}", highlight=False, markup=False)
    render_table(flight_report.rank_table(analysis), console)
    for rank in named_ranks(analysis):
        render_table(flight_report.last_entries_table(rings[rank], DETAIL_ENTRIES), console)
    return 0


def named_ranks(a: flight_report.FlightAnalysis) -> list[int]:
    """The ranks the summary is about: both sides of the first disagreement, those that never joined,
    and the one the others wait for."""
    named: set[int] = set()
    if a.disagreement is not None:  # one rank of each side
        sides: dict[str, int] = {}
        for rank, entry in sorted(a.disagreement.calls.items()):
            sides.setdefault(flight_report.describe(entry), rank)
        named.update(sides.values())
    for n in a.never_joined:
        named.update(n.missing)
    if a.blocking is not None:
        named.add(a.blocking)
    return sorted(r for r in named if r in a.rings)[:4]
