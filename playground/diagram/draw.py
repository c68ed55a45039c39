"""`inspect RUN --diagram FILE.svg`: read a run, check that it can be drawn, lay it out, write the SVG."""

import json
from dataclasses import dataclass
from pathlib import Path

from playground.core.errors import ParamError, ScenarioError
from playground.diagram.layout import ALL_OPS, MAX_MESSAGES, TIME_AXES, TimeAxis, calls, inside_calls, layout
from playground.diagram.svg import render_svg
from playground.tracing.timeline import load_timeline, message_flows

MAX_RANKS = 8  # lanes that stay readable side by side


@dataclass(frozen=True)
class DiagramInfo:
    """What `draw_diagram` drew: `num_drawn` of the run's `num_messages` (the first ones when
    more than `max_messages`), the longest chain of messages (`depth`: the algorithm's steps)."""

    path: Path
    num_ranks: int
    num_messages: int
    num_drawn: int
    max_messages: int
    time: TimeAxis
    depth: int
    ops: str | None = None

    @property
    def truncated(self) -> bool:
        return self.num_drawn < self.num_messages

    @property
    def which(self) -> str:
        """Which messages: ' inside timed operations', ' of the ring operations' or ''."""
        if self.ops is None:
            return ""
        return " inside timed operations" if self.ops == ALL_OPS else f" of the {self.ops} operations"

    def summary(self) -> str:
        return (
            f"wrote message diagram {self.path} ({self.num_drawn} messages{self.which} between "
            f"{self.num_ranks} ranks, longest chain {self.depth} messages, {self.time} time)"
        )

    def cut_note(self) -> str:
        """One line for a cut diagram (stdout and the figure say the same)."""
        return (
            f"drew the first {self.num_drawn} of {self.num_messages} messages{self.which}: the limit is "
            f"{self.max_messages} (--diagram-max N raises it; --diagram-ops ring keeps one algorithm's)"
        )


def draw_diagram(
    run_dir: Path,
    path: Path,
    max_messages: int = MAX_MESSAGES,
    time: TimeAxis = "logical",
    ops: str | None = None,
    title: str | None = None,
) -> DiagramInfo:
    """Write the message diagram of the run in `run_dir` to `path` (SVG). `ops`: only messages
    inside timed operations (`all`, or one name or algorithm such as `ring`); otherwise every
    message, barriers included. `title` replaces the figure's own ("SCENARIO: N messages between
    R ranks"). Bad input or a run that cannot be drawn: ScenarioError, one line."""

    if time not in TIME_AXES:
        raise ParamError("time", f"expected one of {', '.join(TIME_AXES)}, got {time!r}")
    if max_messages < 1:
        raise ParamError("max_messages", f"must be >= 1, got {max_messages}")
    run_dir, path = Path(run_dir), Path(path)
    events, _ = load_timeline(run_dir)
    if len(events) > MAX_RANKS:
        raise ScenarioError(
            f"{run_dir}: {len(events)} ranks; the message diagram draws at most {MAX_RANKS} (leaving ranks "
            f"out would drop every message to them and misstate the order): rerun with --ranks {MAX_RANKS} or fewer"
        )
    check_drawable(run_dir, events, ops)
    lay = layout(events, time, max_messages, ops)
    if not lay.arrows:
        raise ScenarioError(
            f"{run_dir}: no message was both sent and received"
            + (f" inside the {ops} operations" if ops else "")
            + " in the rank logs, so no diagram"
        )
    info = DiagramInfo(
        path, len(lay.ranks), lay.num_messages, len(lay.arrows), max_messages, time, lay.depth, ops
    )
    if title is None:
        title = f"{_scenario(run_dir)}: {info.num_drawn} messages{info.which} between {info.num_ranks} ranks"
    try:
        path.write_text(render_svg(lay, title, [info.cut_note()] if info.truncated else []))
    except OSError as e:
        raise ScenarioError(f"--diagram {path}: cannot write it ({e.strerror})") from None
    return info


def check_drawable(run_dir: Path, events: dict[int, list[dict]], ops: str | None) -> None:
    """One line (ScenarioError) when the run cannot be drawn: no message events, or none inside
    its timed operations (the collective node with trace_messages off still logs the start-up
    barrier before it turns them off), or no operation that `ops` names."""
    flows = message_flows(events)
    timed = calls(events)
    if not flows or (timed and not inside_calls(flows, timed)):
        where = "inside any of its timed operations" if flows else "in its rank logs"
        raise ScenarioError(
            f"{run_dir}: no message events {where}, so no diagram: the ranks did not trace messages "
            f"(params.trace_messages=false, which bench sets); rerun with --set params.trace_messages=true "
            f"(bench: --trace-messages)"
        )
    if ops is not None and not any(c.matches(ops) for c in timed):
        names = {c.name for c in timed} | {str(c.args["algorithm"]) for c in timed if c.args.get("algorithm")}
        raise ScenarioError(
            f"{run_dir}: no timed operation named {ops!r} (--diagram-ops takes all"
            + (f" or one of {', '.join(sorted(names))})" if names else "; this run logged none)")
        )


def _scenario(run_dir: Path) -> str:
    try:
        return json.loads((run_dir / "result.json").read_text()).get("scenario") or run_dir.name
    except (OSError, ValueError):
        return run_dir.resolve().name
