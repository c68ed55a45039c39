"""This machine's calibration: one file, written by `python -m playground calibrate`, read by every model.

`calibration.json` (in the current directory, or where PLAYGROUND_CALIBRATION points; every
command also takes the file by name) holds what `calibrate` measured, raw: the machine's copy and
add rates at a range of sizes, its scheduler's time slice, and per transport every pair of ranks
ping-ponging at 2 ranks and at more ranks than cores (commands/calibrate.py). models/hostfit.py turns
that into the costs the models use: the closed forms' link (alpha, beta by size range, gamma) and
the simulator's host (per-message CPU and latency, shared cores, shared memory bandwidth).

A calibration describes one machine and one version of the code that measured it: a file from
another machine (host name, CPU, cores) or another version is refused with one line saying which
(`CalibrationMismatch`, exit status 2), not used to print wrong numbers.

The model columns of a collective table (`load_model`) use a link spec when given (a preset of
playground.models.costs.PRESETS, or a calibration file), else the default calibration's transport,
else a labelled default of rough figures (`DEFAULT_LINKS`), and say which in their caption.
"""

import json
import math
import os
import platform
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from playground.core.errors import ScenarioError, UsageError
from playground.core.machine import cpu_model, usable_cores
from playground.core.sizes import parse_duration, parse_rate
from playground.core.topology import parse_link_spec
from playground.core.version import VERSION
from playground.models import hostfit
from playground.models.contention import HostModel
from playground.models.costs import PRESETS, Link
from playground.models.piecewise import Piece

CALIBRATION_FILE = "calibration.json"
ENVIRONMENT = "PLAYGROUND_CALIBRATION"
FORMAT = 1  # what calibrate writes; a file of another format is refused
TOP_KEYS = ("format", "version", "machine", "host", "transports")
HOW = "`python -m playground calibrate` measures this machine"
# Rough figures of a 2-core development VM for runs that have no calibration; every caption says so.
DEFAULT_LINKS = {
    "ipc": Link(50e-6, 1e9, 5e9),
    "tcp": Link(55e-6, 0.8e9, 5e9),
    "shm": Link(35e-6, 10e9, 5e9),
}
HOSTS_PREFIX = "hosts "  # the network of a run across emulated hosts: "hosts 1gbit,delay=200us"


class CalibrationMismatch(ScenarioError):
    """A calibration file measured on another machine or by another version: one line, exit 2."""


def default_path() -> Path:
    """Where the calibration is when no command names one."""
    return Path(os.environ.get(ENVIRONMENT) or CALIBRATION_FILE)


def this_machine() -> dict:
    """What a calibration must have been measured on to describe this machine."""
    return {"hostname": platform.node(), "cpu_model": cpu_model(), "cores": usable_cores()}


@dataclass(frozen=True)
class Calibration:
    """A checked calibration file (`read_calibration`); `record` is its JSON."""

    path: str
    record: dict = field(repr=False, compare=False)

    @property
    def cores(self) -> int:
        return int(self.record["machine"]["cores"])

    @property
    def transports(self) -> tuple[str, ...]:
        return tuple(self.record["transports"])

    def has(self, transport: str) -> bool:
        return transport in self.record["transports"]

    def segment_bytes(self, transport: str) -> int | None:
        """The largest message the transport's collectives send at once (their default segment)."""
        return self.record["transports"][self._entry_name(transport)].get("segment_bytes")

    def host(self, transport: str, num_ranks: int, size_bytes: float) -> HostModel:
        """The simulator's host for a collective of `size_bytes` on `num_ranks` ranks."""
        return hostfit.host_model(self.record, self._entry_name(transport), num_ranks, size_bytes)

    def link(self, transport: str, num_ranks: int = 2, size_bytes: float = 0.0) -> Link:
        """The closed forms' link: the idle one-way time by size range (alpha, beta of each), gamma
        at the collective's footprint."""
        host = self.host(transport, min(num_ranks, self.cores), size_bytes)
        pieces = tuple(
            Piece(c.from_bytes, c.send_s + c.recv_s + c.latency_s, c.send_s_per_byte + c.recv_s_per_byte)
            for c in host.ranges
        )
        first = pieces[0]
        beta = 1.0 / first.s_per_byte if first.s_per_byte > 0 else math.inf
        return Link(first.alpha_s, beta, host.gamma_bytes_per_s, pieces=pieces)

    def behind_compute(self, transport: str, num_ranks: int, size_bytes: float) -> float:
        """How many times longer a message takes while the ranks' compute threads run (a training
        rank's collectives beside its backward): the mean one-way time of the `behind_compute`
        ping-ping over the plain ping-ping's, at the nearest rank count measured (the smallest at or
        above `num_ranks`, else the largest), between the sizes measured on a log scale (the ends
        beyond them); 1.0 where the file has none (an older calibration), where it came out faster,
        and where the receivers spin instead of sleeping (shared memory while ranks have cores: there
        the probe's spin loop fights its own compute thread for the core, which a training rank's
        communication thread, idle between its collectives, does not: the steps measured over shared
        memory at 2 and 4 ranks on 2 cores take what the idle model says)."""
        means: dict[int, dict[int, dict[str, float]]] = {}
        asleep: dict[int, bool] = {}
        for p in self.record["transports"][self._entry_name(transport)]["patterns"]:
            if p["pattern"] in ("pingping", "behind_compute") and p.get("mean_s", 0) > 0:
                means.setdefault(p["ranks"], {}).setdefault(p["size"], {})[p["pattern"]] = p["mean_s"]
                asleep[p["ranks"]] = bool(p.get("sleeps", True))
        curves = {
            ranks: sorted(
                (size, m["behind_compute"] / m["pingping"]) for size, m in by_size.items() if len(m) == 2
            )
            for ranks, by_size in means.items()
        }
        curves = {ranks: curve for ranks, curve in curves.items() if curve}
        if not curves:
            return 1.0
        at = next((n for n in sorted(curves) if n >= num_ranks), max(curves))
        if not asleep[at]:
            return 1.0
        sizes, ratios = zip(*curves[at], strict=True)
        ratio = float(np.interp(math.log(max(size_bytes, 1.0)), [math.log(s) for s in sizes], ratios))
        return max(1.0, ratio)

    def _entry_name(self, transport: str) -> str:
        if transport not in self.record["transports"]:
            raise UsageError(
                f"{self.path} has no {transport}; it calibrated {', '.join(self.transports)}",
                field="transport",
            )
        return transport


def _identity_mismatch(record: dict, path: str) -> str | None:
    """Why `record` does not describe this machine and version (None if it does)."""
    if record.get("format") != FORMAT or record.get("version") != VERSION:
        return (
            f"{path}: written by another version (format {record.get('format')}, playground "
            f"{record.get('version')}; this is format {FORMAT}, playground {VERSION}); {HOW} again"
        )
    theirs, ours = record.get("machine") or {}, this_machine()
    for key, what in (("hostname", "host"), ("cpu_model", "CPU"), ("cores", "cores")):
        if theirs.get(key) != ours[key]:
            return (
                f"{path}: measured on another machine ({what} {theirs.get(key)!r}, this one {ours[key]!r}); "
                f"{HOW}"
            )
    return None


def read_calibration(path: str | Path) -> Calibration:
    """The calibration in `path`, checked: CalibrationMismatch (another machine or version) or
    ScenarioError (not a calibration) with one line saying why."""
    path = str(path)
    try:
        record = json.loads(Path(path).read_text())
    except OSError as e:
        raise ScenarioError(f"{path}: cannot read it ({e.strerror}); {HOW}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ScenarioError(f"{path}: not a calibration file (not JSON: {e})") from None
    missing = [k for k in TOP_KEYS if k not in record] if isinstance(record, dict) else list(TOP_KEYS)
    if missing:
        raise ScenarioError(f"{path}: not a calibration file (missing {missing[0]!r}; {HOW} and writes one)")
    why = _identity_mismatch(record, path)
    if why:
        raise CalibrationMismatch(why)
    return Calibration(str(Path(path).resolve()), record)


def find_calibration(path: str | Path | None = None) -> Calibration | None:
    """The calibration named, else the default one if it exists (None if not); a file that is named
    or found but does not fit this machine raises, with one line."""
    if path is not None:
        return read_calibration(path)
    default = default_path()
    return read_calibration(default) if default.is_file() else None


# -- the model columns' link -----------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSource:
    """The link the model columns use and where it came from: kind is 'calibration', 'preset' or
    'default'; `name` is the file, the preset's name, or the transport; a calibration also gives the
    simulator's host for rank counts the closed forms do not fit (ranks outnumbering cores)."""

    link: Link
    kind: str
    name: str
    transport: str = ""
    calibration: Calibration | None = field(default=None, compare=False)

    @property
    def caption(self) -> str:
        what = self.link.describe()
        if self.kind == "calibration" and self.calibration is not None:
            return (
                f"model: calibration {_short(self.name)} ({self.transport}, {what}); where ranks outnumber "
                f"its {self.calibration.cores} cores the simulator on it (model by: sim)"
            )
        if self.kind == "preset":
            return f"model: preset {self.name} ({what})"
        if self.transport.startswith(HOSTS_PREFIX):
            link = self.transport[len(HOSTS_PREFIX) :]
            return f"model: default for tcp across hosts linked at {link}, not a calibration ({what})"
        return f"model: default for {self.transport}, not a calibration ({what}); {HOW}"

    def to_dict(self) -> dict:
        gamma = self.link.gamma_bytes_per_s
        return {
            "kind": self.kind,
            "name": self.name,
            "transport": self.transport,
            "alpha_s": self.link.alpha_s,
            "beta_bytes_per_s": self.link.beta_bytes_per_s,
            "gamma_bytes_per_s": gamma if math.isfinite(gamma) else None,  # JSON has no inf
            "caption": self.caption,
        }


def _short(path: str) -> str:
    """`path` relative to the current directory when it lies inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return path


class LinkSpec(str):
    """A scenario's `link:` value: a preset's name, or a calibration file, resolved when the scenario
    is read (the file's absolute path), so a frozen `Params` holds the final value."""

    ALLOWED = f"a link preset ({', '.join(PRESETS)}) or a {CALIBRATION_FILE} written by `calibrate`"

    @classmethod
    def parse_param(cls, value) -> str:
        """The resolved spec, checked to load; ValueError saying why not."""
        if not isinstance(value, str):
            raise ValueError(f"expected {cls.ALLOWED}, got {value!r}")
        if value in PRESETS:
            return value
        if not Path(value).is_file():
            raise ValueError(
                f"no such preset or file; allowed: {', '.join(PRESETS)}, or a {CALIBRATION_FILE}"
            )
        read_calibration(value)
        return str(Path(value).resolve())


def model_from_spec(spec: str, network: str = "ipc") -> ModelSource:
    """A preset name or a calibration file (its `network` transport); ScenarioError otherwise."""
    if spec in PRESETS:
        return ModelSource(PRESETS[spec], "preset", spec)
    if not Path(spec).is_file():
        raise ScenarioError(
            f"no such preset or file; allowed: {', '.join(PRESETS)}, or a {CALIBRATION_FILE} ({HOW})"
        )
    return _from_calibration(read_calibration(spec), network) or ModelSource(
        default_link(network), "default", network, network
    )


def _from_calibration(calibration: Calibration, network: str) -> ModelSource | None:
    if not calibration.has(network):
        return None
    return ModelSource(calibration.link(network), "calibration", calibration.path, network, calibration)


def _run_scenario(run_dir: Path) -> dict:
    """The resolved scenario the launcher saved in the run directory ({} if there is none)."""
    import yaml

    try:
        return yaml.safe_load((Path(run_dir) / "scenario.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}


def run_network(run_dir: Path) -> str:
    """`network_of` a run, from its saved scenario."""
    return network_of(_run_scenario(run_dir))


def network_of(scenario: dict) -> str:
    """What a run's model is matched by: the transport on one host ('ipc'), or across emulated hosts
    their link ('hosts 1gbit,delay=200us'), which no one-host calibration describes."""
    if not scenario.get("hosts"):
        return scenario.get("transport", "ipc")
    link = scenario.get("link") or {}
    parts = [str(link.get("rate", "unshaped"))] + ([f"delay={link['delay']}"] if link.get("delay") else [])
    return HOSTS_PREFIX + ",".join(parts)


def default_link(network: str) -> Link:
    """The labelled default of a network with no calibration: the transport's rough figures, or
    across hosts tcp's with the link's delay added to alpha and its rate capping beta."""
    if not network.startswith(HOSTS_PREFIX):
        return DEFAULT_LINKS.get(network, DEFAULT_LINKS["ipc"])
    tcp = DEFAULT_LINKS["tcp"]
    spec = parse_link_spec(network[len(HOSTS_PREFIX) :])
    rate = spec.get("rate", "unshaped")
    beta = tcp.beta_bytes_per_s if rate == "unshaped" else min(tcp.beta_bytes_per_s, parse_rate(rate) / 8)
    return Link(tcp.alpha_s + parse_duration(spec.get("delay", 0)), beta, tcp.gamma_bytes_per_s)


def load_model(spec: str | None, network: str) -> ModelSource:
    """What the model columns use: `spec` if given (`model_from_spec`), else the default calibration
    (`find_calibration`) if it calibrated `network`, else the labelled default for it."""
    if spec:
        return model_from_spec(spec, network)
    calibration = find_calibration()
    found = _from_calibration(calibration, network) if calibration is not None else None
    return found or ModelSource(default_link(network), "default", network, network)
