"""One run end to end: run directory, launch, summary table, result.json, exit status."""

import dataclasses
import traceback
from collections.abc import Callable
from pathlib import Path

import yaml
from rich.console import Console

from playground.comm import flight_report
from playground.config.scenario import Scenario
from playground.core.machine import usable_cores
from playground.core.rundir import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Finished,
    make_run_dir,
    point_latest,
    write_result,
)
from playground.core.topology import Link, describe_placement
from playground.display.report import (
    Report,
    Table,
    default_report,
    failed_ranks,
    make_console,
    progress_bar,
    render_report,
    with_rank_checks,
)
from playground.hosts import netns
from playground.launcher.launch import Launcher, LaunchOutcome, rank_cpus
from playground.launcher.recovery_report import resume_checkpoint, with_restarts
from playground.launcher.supervise import Supervisor
from playground.tracing import stragglers


def print_outcome(
    outcome: LaunchOutcome, report: Report, run_dir: Path, console: Console, err: Console
) -> None:
    """The table on success, else the root cause first; then the report's own failures and the logs."""
    if outcome.ok:
        render_report(report, console)
    elif outcome.interrupted:
        pass  # the ranks were stopped on purpose: "interrupted" was said, no failures to blame
    elif outcome.failures:
        for k, r in enumerate(outcome.restarts):
            err.print(f"[bold red]FAILED[/bold red] before restart {k + 1}: {r['why']}", highlight=False)
        if outcome.restarts:
            err.print(f"no restart left after {len(outcome.restarts)} (--max-restarts):", highlight=False)
        print_failures(outcome, err)
    else:
        err.print("[bold red]FAILED[/bold red] not every rank finished", highlight=False)
    for line in report.failures:
        err.print(f"[bold red]FAILED[/bold red] {line}", highlight=False)
    if outcome.failures and not outcome.interrupted:
        print_flight(run_dir, err)
    console.print(f"logs: {run_dir}  (python -m playground inspect {run_dir})", highlight=False)


def print_flight(run_dir: Path, err: Console) -> None:
    """A failed run's flight recorder: every rank's ring into flight.json, and what they say together."""
    written = flight_report.write_dump(run_dir, "the run failed")
    if written is None:
        return
    path, analysis = written
    lines = flight_report.summary_lines(analysis)
    if lines:
        err.print(f"  flight recorder ({path.name}, `inspect --flight`):", highlight=False)
        for line in lines:
            err.print(f"    {line}", highlight=False, markup=False)


def summarize(scenario: Scenario, outcome: LaunchOutcome, run_dir: Path) -> Report:
    """The node's report, made only from ranks that succeeded (see `playground.display.report`)."""
    contract = scenario.contract
    if not outcome.ok:
        return Report(ok=False, tables=[])
    results = [r for r in outcome.results if r is not None]  # every rank's: the run is ok
    failed = failed_ranks(results)
    if failed:
        return Report(ok=False, tables=[], failures=failed)
    if scenario.function is not None:
        return function_report(results, scenario.name)
    if contract.summarize is None:
        return default_report(results, scenario.name)
    try:
        return with_rank_checks(contract.summarize(results, scenario.params, run_dir), results)
    except Exception as e:  # noqa: BLE001 - a broken summary fails the run, it does not crash the CLI
        tb = traceback.format_exc().rstrip().splitlines()
        where = next((ln.strip() for ln in reversed(tb) if ln.strip().startswith("File ")), "")
        return Report(
            ok=False,
            tables=[],
            failures=[
                f"{scenario.node.partition(':')[0]}.summarize raised {type(e).__name__}: {e} ({where})"
            ],
        )


def function_report(results: list[dict], name: str) -> Report:
    """A rank function's report (`playground.api.launch`): rank 0's `rows` when it returned some, as
    for a node without `summarize`, else a row per rank of what it returned; result.json keeps every
    rank's returned dict under "returned"."""
    report = default_report(results, name)
    if not report.tables[0].rows:
        rows = [{"rank": r, **res} for r, res in enumerate(results)]
        report = dataclasses.replace(report, tables=[Table(f"{name}: what each rank returned", rows)])
    return dataclasses.replace(report, data={"returned": results})


def unfired_fault(scenario: Scenario, results: list[dict | None]) -> list[str]:
    """A note when the scenario's rank fault never fired (its rank posted too few messages, or, for
    `corrupt`, no array after `after_ops`), so a drill that tested nothing does not look passed."""
    fault = scenario.fault
    if fault is None:
        return []
    unfired = [(r, res["fault_unfired"]) for r, res in enumerate(results) if res and "fault_unfired" in res]
    what = "posted no array from then on" if fault.action == "corrupt" else "posted no more"
    return [
        f"fault: {fault.action} on rank {rank} never fired: after post {fault.after_ops} it {what} "
        f"({info['num_posts']} posts in all); choose another fault.rank or a smaller fault.after_ops"
        for rank, info in unfired
    ]


def with_stragglers(report: Report, run_dir: Path, cpus: int | None = None) -> Report:
    """The report with a line naming the stragglers (or none) and result.json's "stragglers": each
    rank scored per section against the fastest and its own best (playground.tracing.stragglers);
    `cpus`: how many CPUs the ranks share (all of them run on this machine)."""
    found = stragglers.judge(stragglers.read_judged_events(run_dir), cpus)
    return dataclasses.replace(
        report, notes=[*report.notes, found.note()], data={**report.data, "stragglers": found.to_dict()}
    )


def result_dict(
    scenario: Scenario, outcome: LaunchOutcome, report: Report, run_dir: Path, cpus: list[int] | None = None
) -> dict:
    """result.json; `cpus`: the CPU each rank was pinned to (launch.rank_cpus), None when not pinned
    here (or placed by another launcher). The `at_s` of failures and events count from
    `t0_monotonic_s` (this host's CLOCK_MONOTONIC), so a tool outside can line its own times up."""
    ok = outcome.ok and report.ok
    return {
        "ok": ok,
        "scenario": scenario.name,
        "ranks": scenario.ranks,
        "transport": scenario.transport,
        "node": scenario.node,
        "rank_cpus": cpus,
        **hosts_dict(scenario),
        "elapsed_s": round(outcome.elapsed_s, 3),
        "t0_monotonic_s": outcome.t0_monotonic_s,
        "rows": report.tables[0].rows if report.tables else [],
        "tables": [t.to_dict() for t in report.tables],
        "notes": report.notes,
        "failures": [
            *(
                f"before restart {k + 1}: {r['why']}"
                for k, r in enumerate(outcome.restarts)
                if not outcome.ok
            ),
            *(f.headline() for f in outcome.failures),
            *report.failures,
        ],
        **({"events": outcome.events} if outcome.events else {}),
        **({"recovery": {"restarts": outcome.restarts}} if outcome.restarts else {}),
        "files": report.files,
        "run_dir": str(run_dir),
        "rank_results": [
            {
                "rank": r,
                "bytes_sent": (res or {}).get("bytes_sent"),
                "bytes_received": (res or {}).get("bytes_received"),
            }
            for r, res in enumerate(outcome.results)
        ],
        **report.data,
    }


def hosts_dict(scenario: Scenario) -> dict:
    """What result.json says about the emulated cluster: hosts, link and each rank's host."""
    if not scenario.hosts:
        return {}
    return {
        "hosts": scenario.hosts,
        "link": (scenario.link or Link()).to_dict(),
        "placement": list(scenario.placement),
    }


def describe_hosts(scenario: Scenario) -> str:
    """ "4 hosts (h0: ranks 0-1, ...), links 1gbit each way, delay 200us; ipc inside a host, tcp across"."""
    inside = scenario.transport  # ipc or tcp: a kind that crosses hosts runs as itself inside one
    hosts = scenario.hosts or 1
    return (
        f"{hosts} host{'s' if hosts > 1 else ''} ({describe_placement(scenario.placement)}), "
        f"links {(scenario.link or Link()).describe()}; {inside} inside a host, tcp across"
    )


def print_failures(outcome: LaunchOutcome, console: Console) -> None:
    root = outcome.root_cause
    if root is None:
        return
    console.print(f"[bold red]FAILED[/bold red] root cause: {root.headline()}", highlight=False)
    if root.traceback:
        lines = root.traceback.rstrip().splitlines()
        console.print("\n".join("    " + ln for ln in lines[-12:]), highlight=False, markup=False)
    if root.stack:
        console.print(f"    where rank {root.rank} was stuck:", highlight=False)
        console.print(
            "\n".join("    " + ln for ln in root.stack.strip().splitlines()[:12]),
            highlight=False,
            markup=False,
        )
    for event in outcome.events:  # what a drill did: the cause behind the root cause
        where = "drill" if "rank" in event else "cluster"
        console.print(f"  {where} at {event['at_s']:.2f}s: {event['event']}", highlight=False, markup=False)
    others = [f for f in outcome.failures if f is not root]
    for f in others:
        console.print(f"  then {f.headline()}", highlight=False, markup=False)
        if f.stack and f.kind == "hang" and not root.stack:
            console.print("\n".join("    " + ln for ln in f.stack.strip().splitlines()[:12]), markup=False)


def execute(
    scenario: Scenario,
    out_base: Path,
    console: Console | None = None,
    start_method: str = "fork",
    resume_dir: Path | None = None,
    on_run_dir: Callable[[Path], None] | None = None,
) -> Finished:
    """Run `scenario` into a new run directory under `out_base`, print what the command line prints
    on `console` (the table, or the root cause first) and write result.json. `start_method`: how
    ranks are started (`launch.START_METHODS`): fork for the command line, spawn for the Python API.
    `resume_dir`: go on in that run directory from its newest whole checkpoint (`run --resume`;
    CheckpointRefused, bad input, when it has none of this run). `on_run_dir(run_dir)` runs once the
    run directory exists, before any rank starts (`--live`). (Longer than most: the run's flow from
    its directory to result.json in order, one step a few lines, read top to bottom.)"""
    console = console or make_console()
    err = make_console(stderr=True)
    if scenario.hosts:
        netns.check_can_emulate()  # before anything is made: one line, exit 2
    resume, skipped = resume_checkpoint(scenario, resume_dir) if resume_dir is not None else (None, [])
    for line in skipped:
        err.print(f"resume: skipped {line}", highlight=False, markup=False)
    if resume_dir is not None:
        run_dir = resume_dir
        point_latest(out_base, run_dir)
    else:
        run_dir = make_run_dir(out_base, scenario.name)
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(scenario.to_dict(), sort_keys=False))
    if on_run_dir is not None:
        on_run_dir(run_dir)
    over = f"on {describe_hosts(scenario)}" if scenario.hosts else f"over {scenario.transport}"
    cpus = rank_cpus(scenario)
    if cpus is not None:
        over += f", pinned to CPU{'s' if len(set(cpus)) > 1 else ''} {','.join(map(str, cpus))}"
    console.print(
        f"[bold]{scenario.name}[/bold]: {scenario.ranks} ranks {over}, node {scenario.node} -> {run_dir}",
        highlight=False,
    )
    with progress_bar(err) as progress:
        task = progress.add_task(scenario.name, total=None)

        def on_progress(msg: dict) -> None:
            progress.update(
                task,
                completed=msg.get("done", 0),
                total=msg.get("total") or None,
                description=f"{scenario.name} {msg.get('label', '')}".strip(),
            )

        def say(line: str) -> None:
            err.print(line, highlight=False, markup=False)

        recovery = scenario.recovery
        supervised = recovery.max_restarts > 0 or recovery.mtbf_s is not None or resume is not None
        supervisor = Supervisor(scenario, run_dir, resume, say) if supervised else None
        if resume is not None:
            say(f"resuming {run_dir} from its checkpoint after step {resume.step}")
        outcome = Launcher(scenario, run_dir, on_progress, start_method, supervisor).run()
    if outcome.interrupted:
        err.print("interrupted: every rank was stopped", highlight=False)
    report = summarize(scenario, outcome, run_dir) if not outcome.interrupted else Report(False, [])
    if scenario.hosts and report.tables:
        report = dataclasses.replace(report, notes=[*report.notes, f"hosts: {describe_hosts(scenario)}"])
    if scenario.fault is not None and outcome.ok:
        report = dataclasses.replace(report, notes=[*report.notes, *unfired_fault(scenario, outcome.results)])
    if outcome.restarts or resume is not None:
        report = with_restarts(report, outcome, resume)
    if outcome.ok and scenario.ranks > 1:
        report = with_stragglers(report, run_dir, usable_cores())
    result = result_dict(scenario, outcome, report, run_dir, cpus)
    write_result(run_dir, result)
    print_outcome(outcome, report, run_dir, console, err)
    if outcome.interrupted:
        return Finished(EXIT_INTERRUPTED, result, outcome)
    return Finished(EXIT_OK if result["ok"] else EXIT_FAILED, result, outcome)
