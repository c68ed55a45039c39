"""Lecture | this machine | model, for each figure: read from the runs, compared, formatted.

A figure's reader (playground/lecture/readers/, a module per section) takes what the scenarios
wrote and returns a `Reading`; `evaluate` turns it into a `FigureRow` the page shows. Nothing here knows a figure's
value: the lecture's comes from lecture.yaml, this machine's from the run's result.json.
"""

import json
import operator
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from playground.core.errors import PlaygroundError
from playground.core.sizes import format_size
from playground.display.report import format_cell
from playground.lecture.plan import Figure, Section
from playground.models.band import within


class NotMeasured(PlaygroundError):
    """A figure's scenario did not run, failed, or left no value for it (the message says which).
    `evaluate` turns it into a "not measured" row; it never leaves this package."""


@dataclass(frozen=True)
class Run:
    """What one scenario run left behind; `result` is None when it wrote no result.json. `params`
    and `recovery` are the resolved scenario's sections of those names (recovery: the mtbf drill)."""

    name: str
    result: dict | None
    params: dict
    run_dir: Path | None
    ok: bool
    recovery: dict = field(default_factory=dict)

    @classmethod
    def from_dir(cls, name: str, run_dir: Path | None) -> "Run":
        result: dict | None = None
        scenario: dict = {}
        if run_dir is not None and (run_dir / "result.json").is_file():
            result = json.loads((run_dir / "result.json").read_text())
        if run_dir is not None and (run_dir / "scenario.yaml").is_file():
            scenario = yaml.safe_load((run_dir / "scenario.yaml").read_text()) or {}
        return cls(
            name,
            result,
            scenario.get("params") or {},
            run_dir,
            bool(result and result.get("ok")),
            scenario.get("recovery") or {},
        )

    def written(self) -> dict:
        """The result.json the run wrote; NotMeasured if it wrote none."""
        if self.result is None:
            raise NotMeasured(f"scenario {self.name} wrote no result")
        return self.result

    def directory(self) -> Path:
        """The run's directory (its logs); NotMeasured if there is none."""
        if self.run_dir is None:
            raise NotMeasured(f"scenario {self.name} has no run directory")
        return self.run_dir


@dataclass(frozen=True)
class Context:
    """What a reader may look at: the runs by scenario name, the section's constants, the machine."""

    runs: dict[str, Run]
    constants: dict = field(default_factory=dict)
    machine: dict = field(default_factory=dict)

    def run(self, name: str) -> Run:
        run = self.runs.get(name)
        if run is None:
            raise NotMeasured(f"scenario {name} was not run")
        if run.result is None:
            raise NotMeasured(f"scenario {name} wrote no result")
        if not run.ok:
            raise NotMeasured(f"scenario {name} failed")
        return run

    def result(self, name: str) -> dict:
        return self.run(name).written()

    def table(self, name: str, index: int = 0) -> list[dict]:
        tables = self.result(name).get("tables") or []
        if index >= len(tables):
            raise NotMeasured(f"scenario {name} has no table {index + 1}")
        return tables[index]["rows"]


@dataclass(frozen=True)
class Reading:
    measured: Any
    model: Any = None
    lecture: Any = None  # only for figures whose lecture value is computed from the constants
    values: dict = field(default_factory=dict)  # for the figure's notes and why sentence


@dataclass(frozen=True)
class FigureRow:
    section: int
    figure: Figure
    lecture: Any
    measured: Any
    model: Any
    status: str  # matched | not matched | measured | not measured
    lecture_note: str = ""
    model_note: str = ""
    why: str = ""
    error: str = ""
    verdict: str = ""  # an exact row's last cell: its status and how the column beside it compares
    outside: bool = False  # the unchecked column beside is outside its band (see `verdict_of`)

    @property
    def failed(self) -> bool:
        """An exact figure that did not match, or that could not be read, fails the lecture."""
        return self.figure.kind == "exact" and self.status != "matched"

    def cells(self) -> dict[str, str]:
        """The row as text: figure, lecture, this machine, model, status."""
        f = self.figure
        return {
            "figure": f"{f.what} ({f.where})",
            "lecture": _join(format_value(self.lecture, f.unit, as_given=True), self.lecture_note),
            "this machine": _join(format_value(self.measured, f.unit), f.measured_note)
            if self.error == ""
            else self.error,
            "model": _join(format_value(self.model, f.unit), self.model_note),
            "status": self.status,
        }


def _join(value: str, note: str) -> str:
    if value == "-":
        return note or "-"
    return f"{value} — {note}" if note else value


class _Blank(dict):
    def __missing__(self, key):
        return "{" + key + "}"


def fill(text: str, values: dict) -> str:
    """`text` with {names} from `values`; a name the reader did not give stays as it is."""
    try:
        return string.Formatter().vformat(text, (), _Blank(values))
    except (ValueError, TypeError, IndexError):
        return text


def format_value(value: Any, unit: str = "", as_given: bool = False) -> str:
    """A value for the page: lists joined with " / ", sizes in KiB/MiB, the unit after it.
    `as_given`: numbers as the lecture wrote them (42.9, not 42.90)."""
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        text = " / ".join(format_value(v, as_given=as_given) for v in value)
    elif unit == "bytes" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_size(int(round(value)))
    elif isinstance(value, float) and not as_given:
        text = format_cell(value)
    else:
        return str(value)  # words (the lecture's "a few ns") carry their own unit
    return f"{text} {unit}".strip() if unit and unit not in ("bytes",) else text


def decimals_of(x: float | int) -> int:
    """Decimal places the lecture gave: 42.9 -> 1, 615 -> 0."""
    if isinstance(x, int):
        return 0
    text = repr(float(x))
    return 0 if "e" in text or text.endswith(".0") else len(text.partition(".")[2])


BOUND = re.compile(r"(>=|<=|>|<)\s*(-?[0-9.]+)")
COMPARE = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


def matches(lecture: Any, value: Any) -> bool:
    """Whether the run's value is the lecture's, to the precision the lecture gave it; a lecture
    value such as "> 0" (the lecture says only that some update is lost) is a bound the value must
    meet."""
    if isinstance(lecture, (list, tuple)):
        if not isinstance(value, (list, tuple)) or len(value) != len(lecture):
            return False
        return all(matches(a, b) for a, b in zip(lecture, value, strict=True))
    bound = BOUND.fullmatch(lecture.strip()) if isinstance(lecture, str) else None
    if bound:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return number and COMPARE[bound[1]](value, float(bound[2]))
    if isinstance(lecture, str):
        return isinstance(value, str) and value.strip().lower() == lecture.strip().lower()
    if isinstance(lecture, bool) or not isinstance(value, (int, float)) or isinstance(value, bool):
        return lecture == value
    return round(float(value), decimals_of(lecture)) == float(lecture)


def _numbers(value: Any) -> list:
    """A value as a list (a scalar is a list of one)."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def beside(checked: Any, other: Any) -> list[tuple[Any, Any]]:
    """The pairs (checked, other) of two columns, element by element (an `other` shorter than
    `checked` stands beside its first elements, as 924 orders beside [924, 702, 216, 6])."""
    if checked is None or other is None:
        return []
    return list(zip(_numbers(checked), _numbers(other), strict=False))


def verdict_of(figure: Figure, lecture: Any, measured: Any, model: Any) -> tuple[str, str, bool]:
    """An exact row's (status, verdict, outside), each computed from the row's own values.

    The `check` column must equal the lecture's figure ("matched"). The column beside it is judged
    too, so that no verdict contradicts a number on its row: beside a checked model, this machine's
    values must be within `figure.band` of the model's (a measured bubble over the formula's is
    "outside" and the verdict names those values); beside a checked measurement, an exact model must
    be equal to it."""
    checked, other = (model, measured) if figure.check == "model" else (measured, model)
    status = "matched" if matches(lecture, checked) else "not matched"
    if figure.check == "model":
        words = f"{status} (the model)"
        pairs = [(c, o) for c, o in beside(checked, other) if _is_number(c) and _is_number(o)]
        off = [(c, o) for c, o in pairs if not (c > 0 and within(o / c, figure.band))]
        if not pairs:
            return status, words, False
        band = f"{100 * figure.band:.0f}%"
        if not off:
            return status, f"{words}; this machine within {band} of it", False
        values = ", ".join(f"{format_value(o)} vs {format_value(c)}" for c, o in off)
        unit = f" {figure.unit}" if figure.unit else ""
        return (
            status,
            f"{words}; this machine outside {band} of it at {len(off)} of {len(pairs)}: {values}{unit}",
            True,
        )
    off = [(c, o) for c, o in beside(checked, other) if not matches(c, o)]
    if not off:
        return status, status, False
    values = ", ".join(f"{format_value(o)} where this machine has {format_value(c)}" for c, o in off)
    return status, f"{status}; the model differs: {values}", True


def _times_lecture(measured: Any, lecture: Any) -> dict:
    """{"x_lecture": measured / lecture} when both are plain positive numbers: how far this machine's
    figure is from the lecture's (a `why` may say it as {x_lecture:.0f}x)."""
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (measured, lecture))
    return {"x_lecture": measured / lecture} if numbers and lecture > 0 else {}


def evaluate(section: Section, figure: Figure, reader, ctx: Context) -> FigureRow:
    """One figure's row; a reader that cannot find its value gives a row that says why."""
    try:
        reading = reader(ctx)
    except NotMeasured as e:
        return FigureRow(
            section.number, figure, figure.lecture, None, None, "not measured", error=f"not measured: {e}"
        )
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError) as e:
        return FigureRow(
            section.number,
            figure,
            figure.lecture,
            None,
            None,
            "not measured",
            error=f"could not read: {type(e).__name__}: {e}",
        )
    lecture = figure.lecture if figure.lecture is not None else reading.lecture
    values = {**ctx.machine, **ctx.constants, **_times_lecture(reading.measured, lecture), **reading.values}
    verdict, outside = "", False
    if figure.kind == "exact":
        status, verdict, outside = verdict_of(figure, lecture, reading.measured, reading.model)
    else:
        status = "measured"
    return FigureRow(
        section.number,
        figure,
        lecture,
        reading.measured,
        reading.model,
        status,
        lecture_note=fill(figure.lecture_note, values),
        model_note=fill(figure.model_note, values),
        why=fill(figure.why, values),
        verdict=verdict,
        outside=outside,
    )
