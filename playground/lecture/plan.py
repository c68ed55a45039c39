"""lecture.yaml -> frozen dataclasses: the sections, the scenarios each runs, the lecture's figures.

Validated once at load, as scenarios are: an unknown key, a bad kind or a figure without a
reader is one line naming the file and the key.
"""

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from playground.config.params import build_params
from playground.core.errors import ParamError, ScenarioError
from playground.models.band import BAND

PLAN_FILE = Path(__file__).with_name("lecture.yaml")


@dataclass(frozen=True)
class Expected:
    full: float
    quick: float


@dataclass(frozen=True)
class ScenarioRun:
    """One `python -m playground run NAME [--transport T] --set ...`; `sets` for the full run,
    `quick` for --quick. `id` is what the readers and the page call it (default: NAME), so that one
    scenario can run twice, over two transports."""

    name: str
    expected_s: Expected
    sets: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()
    transport: Literal["ipc", "tcp", "shm"] | None = None  # None: the scenario's own
    id: str | None = None

    @property
    def key(self) -> str:
        return self.id or self.name

    def overrides(self, quick: bool) -> tuple[str, ...]:
        return self.quick if quick else self.sets

    def cli_args(self, quick: bool) -> list[str]:
        """The words after `python -m playground run`."""
        words = [self.name] + (["--transport", self.transport] if self.transport else [])
        for s in self.overrides(quick):
            words += ["--set", s]
        return words

    def command(self, quick: bool) -> str:
        """What a user types to run this scenario alone, as the lecture ran it."""
        return shlex.join(["python", "-m", "playground", "run", *self.cli_args(quick)])


@dataclass(frozen=True)
class Figure:
    """A figure of the lecture. `exact`: the run's `check` value must equal `lecture`, and the
    other value beside it agree (a model equal to the measurement; a measurement within `band` of
    the model: measured / model within 1/(1 + band) .. 1 + band); `timed`: this machine's value is
    shown beside the lecture's machine's and the model's, with `why`."""

    id: str
    where: str
    what: str
    kind: Literal["exact", "timed"]
    unit: str = ""
    lecture: Any = None  # a number, a list of numbers, a string; None: computed from `constants`
    check: Literal["measured", "model"] = "measured"
    quote: str = ""  # the lecture's words, verbatim ("……" marks a cut)
    lecture_note: str = ""
    measured_note: str = ""
    model_note: str = ""
    why: str = ""
    band: float = BAND

    def __post_init__(self):
        if self.kind == "timed" and not self.why:
            raise ParamError("why", "a timed figure says where this machine differs and why")


@dataclass(frozen=True)
class Section:
    number: int
    id: str
    title: str
    where: str
    intro: str
    scenarios: tuple[ScenarioRun, ...]
    figures: tuple[Figure, ...] = ()
    constants: dict = field(default_factory=dict)

    @property
    def heading(self) -> str:
        return f"{self.number}. {self.title} ({self.where})"


@dataclass(frozen=True)
class Plan:
    sections: tuple[Section, ...]

    def select(self, numbers: tuple[int, ...] | None) -> tuple[Section, ...]:
        if not numbers:
            return self.sections
        return tuple(s for s in self.sections if s.number in numbers)

    def expected_s(self, sections: tuple[Section, ...], quick: bool) -> float:
        return sum(
            (run.expected_s.quick if quick else run.expected_s.full) for s in sections for run in s.scenarios
        )


def load_plan(path: Path = PLAN_FILE, readers: dict | None = None) -> Plan:
    """The plan in `path`; with `readers` (figure id -> function), every figure must have one."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
        plan = build_params(Plan, raw)
    except yaml.YAMLError as e:
        raise ScenarioError(f"{path}: invalid YAML ({e})") from None
    except ParamError as e:
        raise ScenarioError(f"{path}: key {e.field!r}: {e.message}") from None
    for section in plan.sections:  # the readers of a section find its runs by these names
        keys = [run.key for run in section.scenarios]
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise ScenarioError(
                f"{path}: scenario {twice[0]!r} runs twice in section {section.number}; give one an `id`"
            )
    ids = [f.id for s in plan.sections for f in s.figures]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ScenarioError(f"{path}: figure {dup[0]!r} appears twice; a figure is given once")
    numbers = [s.number for s in plan.sections]
    if numbers != list(range(1, len(numbers) + 1)):
        raise ScenarioError(f"{path}: sections must be numbered 1..{len(numbers)} in order, got {numbers}")
    if readers is not None:
        missing = sorted(set(ids) - set(readers))
        if missing:
            raise ScenarioError(
                f"{path}: figure {missing[0]!r} has no reader in playground/lecture/figures.py"
            )
    return plan
