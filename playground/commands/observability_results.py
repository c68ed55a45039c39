"""The results page of the flight recorder and the straggler scores (docs/results/observability.md):
what the recorder costs the smallest collective it records (`commands/flight_bench.py`: the recorder
off against on, CPU per call and a launched run's time per call, alternated round by round), and how
often a slowed rank is named and a clean run names none (`commands/straggler_bench.py`), and what
watching a run on the live page costs it (`commands/live_bench.py`: plain against `--live`). Both run as
children, as a user types them; their tables are the page.
"""

import subprocess
import sys

CHILD = [sys.executable, "-P", "-m"]


def _module(ctx, module: str, *args: str, timeout_s: float = 7200) -> None:
    """`python -m MODULE ARGS` as a child, recorded for the page; a failure fails the section."""
    line = f"python -m {module} {' '.join(args)}"
    ctx.commands.append(line)
    ctx.console.print(f"[bold]$ {line}[/bold]", highlight=False)
    proc = subprocess.run([*CHILD, module, *args], text=True, stdout=subprocess.PIPE, timeout=timeout_s)
    ctx.console.print(proc.stdout[-3000:], highlight=False, markup=False)
    if proc.returncode != 0:
        from playground.core.errors import ScenarioError

        raise ScenarioError(f"`{line}` exited with {proc.returncode}")


def observability_section(ctx) -> str:
    out = ctx.work / "observability"
    rounds = "3" if ctx.quick else str(max(7, ctx.rounds))
    runs = "3" if ctx.quick else "20"
    _module(ctx, "playground.commands.flight_bench", "--rounds", rounds, "--out", str(out))
    _module(ctx, "playground.commands.straggler_bench", "--runs", runs, "--out", str(out))
    _module(ctx, "playground.commands.live_bench", "--rounds", rounds, "--out", str(out))
    return (
        "## The flight recorder's cost\n\n"
        + (out / "flight_bench.md").read_text()
        + "\n## Stragglers named, and nobody named in clean runs\n\n"
        + (out / "straggler_bench.md").read_text()
        + "\n## The live page's cost\n\n"
        + (out / "live_bench.md").read_text()
    )
