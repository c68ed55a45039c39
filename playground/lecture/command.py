"""`python -m playground lecture`: every section's scenarios, then one page beside the lecture.

Exit status: 0 when every scenario ran and every exact figure matched; 1 when a scenario failed
or an exact figure did not match (the page is written either way, saying which); 2 bad input;
130 Ctrl-C (the page shows what ran before it).
"""

import argparse
import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from playground.config.scenario import find_scenario_file
from playground.core.errors import ParamError
from playground.core.machine import describe_machine, machine_facts
from playground.core.rundir import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, make_run_dir
from playground.display.report import make_console
from playground.lecture import plots
from playground.lecture.figures import Context, Run, evaluate
from playground.lecture.page import Page, ScenarioBlock, SectionBlock, build_html, build_markdown
from playground.lecture.plan import PLAN_FILE, Plan, Section, load_plan
from playground.lecture.readers import READERS
from playground.lecture.runner import LectureRunner, Outcome
from playground.models.alphabeta import AlphaBeta


def parse_sections(text: str | None, plan: Plan) -> tuple[int, ...] | None:
    """'1,2,5' -> (1, 2, 5); None -> every section; anything else is one line naming the flag."""
    if text is None:
        return None
    allowed = [s.number for s in plan.sections]
    numbers = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) not in allowed:
            listing = ", ".join(f"{s.number} {s.title}" for s in plan.sections)
            raise ParamError(
                "--sections",
                f"expected section numbers from {allowed[0]} to {allowed[-1]} separated by commas "
                f"({listing}), got {text!r}",
            )
        numbers.append(int(part))
    return tuple(sorted(set(numbers)))


def format_duration(seconds: float) -> str:
    minutes, s = divmod(round(seconds), 60)
    return f"{minutes} min {s} s" if minutes else f"{s} s"


def _description(name: str) -> str:
    try:
        return (yaml.safe_load(find_scenario_file(name).read_text()) or {}).get("description", "")
    except Exception:  # noqa: BLE001 - a description is decoration
        return ""


def _lecture_link(plan: Plan) -> AlphaBeta | None:
    """The lecture's own alpha-beta of section 5.2, from its figures."""
    figures = {f.id: f for s in plan.sections for f in s.figures}
    try:
        return AlphaBeta(figures["alpha"].lecture * 1e-6, figures["beta"].lecture * 1e9)
    except (KeyError, TypeError, ValueError):
        return None


def _extra_plots(name: str, run: Run, out_dir: Path, plan: Plan, err) -> dict[Path, str]:
    """The plots the page adds for a scenario: file -> its caption ("" for its file name)."""
    draw = {
        "overlap": lambda: plots.overlap_timeline(run, out_dir),
        "bench": lambda: plots.ring_vs_tree(run, out_dir),
        "pingpong": lambda: plots.alpha_beta(run, out_dir, _lecture_link(plan)),
        "messages": lambda: plots.message_diagrams(run, out_dir),
    }.get(name)
    if draw is None:
        return {}
    try:
        drawn = draw()
    except Exception as e:  # noqa: BLE001 - the page goes on without this one plot, and says so
        err.print(f"note: no extra plot for {name}: {type(e).__name__}: {e}", highlight=False, markup=False)
        return {}
    return drawn if isinstance(drawn, dict) else dict.fromkeys(drawn, "")


HELP = "run every section of the lecture and write one page beside its figures"
DESCRIPTION = (
    "Runs the scenarios of each section of the lecture in its order, one at a time, and writes "
    "runs/<timestamp>-lecture/index.html (also runs/latest) and summary.md: per section the commands, "
    "tables, plots, and the lecture's figures beside this machine's and the model's."
)


def add_lecture_flags(lec: argparse.ArgumentParser) -> None:
    """`lecture`'s flags; their defaults are `LectureConfig.from_flags`'."""
    lec.add_argument("--sections", metavar="1,2,5", help="only these sections (1-5; default: all)")
    lec.add_argument(
        "--quick", action="store_true", help="smaller sizes and fewer iterations (about 1.5 min)"
    )
    lec.add_argument("--out", help="directory for run directories (default: runs)")


@dataclass(frozen=True)
class LectureConfig:
    """The lecture's plan, the sections chosen from it, quick or full, and where the runs go."""

    plan: Plan
    sections: tuple[Section, ...]
    quick: bool
    out: Path

    @classmethod
    def from_flags(
        cls,
        *,
        sections: str | None = None,
        quick: bool = False,
        out: str | Path = "runs",
        plan_path: Path = PLAN_FILE,  # not a flag: the tests' small plans
    ) -> "LectureConfig":
        plan = load_plan(plan_path, readers=READERS)
        return cls(plan, plan.select(parse_sections(sections, plan)), quick, Path(out))


def run_lecture(config: LectureConfig) -> int:
    """Every chosen section's scenarios, one at a time, then the page (index.html, summary.md,
    lecture.json) beside them; the exit status says whether everything ran and matched."""
    plan, selected, quick = config.plan, config.sections, config.quick
    console, err = make_console(), make_console(stderr=True)
    lecture_dir = make_run_dir(config.out, "lecture")
    _announce(plan, selected, quick, lecture_dir, console)
    machine, facts = describe_machine(), machine_facts()
    started, t0 = time.time(), time.monotonic()
    runner = LectureRunner(selected, quick, lecture_dir, err)
    try:
        outcomes, interrupted = runner.run()
    except KeyboardInterrupt:
        outcomes, interrupted = runner.outcomes, True
    blocks = _sections(plan, selected, outcomes, facts, lecture_dir / "plots", err)
    page = Page("quick" if quick else "full", started, time.monotonic() - t0, machine, blocks, interrupted)
    (lecture_dir / "index.html").write_text(build_html(page))
    (lecture_dir / "summary.md").write_text(build_markdown(page, lecture_dir))
    (lecture_dir / "lecture.json").write_text(json.dumps(_page_json(page), indent=1, default=str))
    return _report(page, lecture_dir, console, err)


def _announce(plan: Plan, selected: tuple[Section, ...], quick: bool, lecture_dir: Path, console) -> None:
    expected_s = plan.expected_s(selected, quick)
    num_scenarios = sum(len(s.scenarios) for s in selected)
    other = "the full run" if quick else "--quick"
    console.print(
        f"[bold]lecture[/bold]: sections {', '.join(str(s.number) for s in selected)}, {num_scenarios} "
        f"scenarios, one at a time, {'quick' if quick else 'full'} run -> {lecture_dir}\n"
        f"expected duration: about {format_duration(expected_s)} on a 2-core machine like the one the "
        f"estimates come from ({other}: about {format_duration(plan.expected_s(selected, not quick))})",
        highlight=False,
    )


def _sections(
    plan: Plan, selected: tuple[Section, ...], outcomes: list[Outcome], facts: dict, plot_dir: Path, err
) -> list[SectionBlock]:
    """Each section's figures (lecture, measured, model) and its scenarios' tables and plots."""
    ran = [(o, Run.from_dir(o.run.key, o.run_dir)) for o in outcomes if o.exit_code is not None]
    plot_dir.mkdir(exist_ok=True)
    blocks = []
    for section in selected:
        # a scenario that two sections run (train-modes: overlap in 3, buckets in 5) is read from the
        # section's own run; any other from wherever it ran
        runs = {o.run.key: run for o, run in ran} | {
            o.run.key: run for o, run in ran if o.section == section.number
        }
        ctx = Context(runs, section.constants, facts)
        rows = [evaluate(section, f, READERS[f.id], ctx) for f in section.figures]
        scenario_blocks = [
            _scenario_block(o, runs.get(o.run.key), plot_dir, plan, err)
            for o in outcomes
            if o.section == section.number
        ]
        blocks.append(SectionBlock(section, rows, scenario_blocks))
    return blocks


def _scenario_block(o: Outcome, run: Run | None, plot_dir: Path, plan: Plan, err) -> ScenarioBlock:
    images: list[Path] = []
    captions: dict[Path, str] = {}
    if run is not None and run.result is not None:
        images = [run.run_dir / f for f in run.result.get("files") or [] if f.endswith(".png")]
        images = [p for p in images if p.is_file()]
        if run.ok:
            captions = _extra_plots(o.run.name, run, plot_dir, plan, err)
            images += list(captions)
    return ScenarioBlock(o, _description(o.run.name), run.result if run else None, images, captions)


def _page_json(page: Page) -> dict:
    """The page's facts for scripts and tests: every scenario's outcome, every figure's row."""
    return {
        "mode": page.mode,
        "elapsed_s": round(page.elapsed_s, 1),
        "interrupted": page.interrupted,
        "machine": page.machine,
        "scenarios": [
            {
                "section": o.section,
                "name": o.run.key,
                "command": o.command,
                "exit_code": o.exit_code,
                "interrupted": o.interrupted,
                "elapsed_s": round(o.elapsed_s, 2),
                "run_dir": str(o.run_dir) if o.run_dir else None,
                "error": o.error,
            }
            for o in page.outcomes
        ],
        "figures": [
            {
                "section": r.section,
                "id": r.figure.id,
                "kind": r.figure.kind,
                "lecture": r.lecture,
                "measured": r.measured,
                "model": r.model,
                "status": r.status,
                "verdict": r.verdict,
                "error": r.error,
                **{k: v for k, v in dataclasses.asdict(r.figure).items() if k in ("where", "what", "unit")},
            }
            for b in page.sections
            for r in b.figures
        ],
    }


def _report(page: Page, lecture_dir: Path, console, err) -> int:
    if page.interrupted:
        console.print(page.headline(), highlight=False)
        console.print(f"page: {lecture_dir / 'index.html'} (what ran before Ctrl-C)", highlight=False)
        return EXIT_INTERRUPTED
    failed = [o for o in page.outcomes if o.failed]
    for o in failed:
        err.print(f"[bold red]FAILED[/bold red] {o.run.key}: {o.error.splitlines()[-1] if o.error else ''}")
        err.print(f"  rerun it alone: {o.command}", highlight=False, markup=False)
    for r in page.exact:
        if r.status != "matched":
            c = r.cells()
            err.print(
                f"[bold red]{r.status.upper()}[/bold red] {c['figure']}: lecture {c['lecture']}, "
                f"this run {c['this machine'] if not r.error else r.error}",
                highlight=False,
            )
    console.print(page.headline(), highlight=False)
    console.print(
        f"page: {lecture_dir / 'index.html'}  (summary: {lecture_dir / 'summary.md'})", highlight=False
    )
    if failed or any(r.failed for r in page.exact):
        return EXIT_FAILED
    return EXIT_OK
