"""This machine's alpha, beta and gamma: measured by `run pingpong`, saved, and found again.

`run pingpong` fits T(n) = alpha + n/beta to its one-way times, and rank 0 times the reduction
every collective does on receipt, `np.add(a, b, out=c)`, for the run's dtype (`measure_gamma`).
`write_calibration` saves the three, with what they were measured on, to
`runs/<run>/calibration.json`. The model columns of every collective table come from
`load_model(spec, network, runs_dir)`: a file (or a run directory holding one), a preset of
`playground.models.costs.PRESETS`, or, with no spec, the newest calibration of the run's
network (its transport, or across emulated hosts their link) under `runs_dir`, else a default
that says it is one.

gamma counts bytes the way the model and nccl-tests do: n / t for an n-byte operand (nccl-tests'
size), although the add reads 2n and writes n bytes of memory. Operands are one to four times the
last-level cache, so the rate is the memory-bound one of large buffers (a ring's segments that are
still in cache reduce faster).
"""

import json
import math
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from playground.core.errors import UsageError
from playground.core.machine import cpu_model, data_caches
from playground.core.sizes import parse_duration, parse_rate
from playground.core.topology import parse_link_spec
from playground.models.costs import PRESETS, Link

CALIBRATION_FILE = "calibration.json"
REQUIRED_KEYS = ("alpha_s", "beta_bytes_per_s", "gamma_bytes_per_s", "transport")
# Rough figures of the 2-core development VM (one pingpong run per transport, np.add float32), for
# runs that have no calibration yet; every caption that uses them says so.
DEFAULT_LINKS = {
    "ipc": Link(50e-6, 1e9, 5e9),
    "tcp": Link(55e-6, 0.8e9, 5e9),
    "shm": Link(35e-6, 10e9, 5e9),
}

HOSTS_PREFIX = "hosts "  # the network of a run across emulated hosts: "hosts 1gbit,delay=200us"


@dataclass(frozen=True)
class ModelSource:
    """The link the model columns use and where it came from: kind is 'calibration', 'preset'
    or 'default'; `name` is the file, the preset's name, or the transport."""

    link: Link
    kind: str
    name: str
    transport: str = ""

    @property
    def caption(self) -> str:
        what = self.link.describe()
        if self.kind == "calibration":
            return f"model: calibration {_short(self.name)} ({self.transport}, {what})"
        if self.kind == "preset":
            return f"model: preset {self.name} ({what})"
        if self.transport.startswith(HOSTS_PREFIX):
            link = self.transport[len(HOSTS_PREFIX) :]
            return (
                f"model: default for tcp across hosts linked at {link}, not a calibration ({what}); "
                f"`python -m playground run pingpong --hosts 2 --link {link}` measures one"
            )
        return (
            f"model: default for {self.transport}, not a calibration ({what}); "
            f"`python -m playground run pingpong --transport {self.transport}` measures one"
        )

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
    """`path` relative to the current directory when it lies inside it (runs/<run>/...)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return path


GAMMA_MAX_OPERAND_BYTES = 128 << 20  # the time budget: 7 adds of 3 such operands take well under 1 s
GAMMA_MEMORY_SHARE = 16  # the largest size's 3 operands take at most 1/16 of the available memory


def gamma_sizes_bytes(available_bytes: int | None = None) -> tuple[int, ...]:
    """Operand sizes for `measure_gamma`: 1, 2 and 4 times the last-level cache (32 MiB if unknown),
    all scaled down so that the largest fits the memory and time budgets above. A VM can report
    its host's whole last-level cache (hundreds of MiB), which unbounded would take GBs of memory
    and tens of seconds; `available_bytes` defaults to what psutil says is available."""
    if available_bytes is None:
        import psutil

        available_bytes = psutil.virtual_memory().available
    llc = max((c.size_bytes for c in data_caches()), default=32 << 20)
    largest = max(1, min(4 * llc, GAMMA_MAX_OPERAND_BYTES, available_bytes // (3 * GAMMA_MEMORY_SHARE)))
    return (max(1, largest // 4), max(1, largest // 2), largest)


def measure_gamma(dtype: str = "float32", sizes_bytes: tuple[int, ...] | None = None, reps: int = 5) -> dict:
    """{'gamma_bytes_per_s', 'dtype', 'points'}: the median over sizes of n / (median time of
    `np.add(a, b, out=c)`), n the bytes of one operand, after one untimed call that pages c in."""
    points = []
    for n in sizes_bytes or gamma_sizes_bytes():
        a = np.ones(max(1, n // np.dtype(dtype).itemsize), dtype=dtype)
        b, c = a.copy(), np.empty_like(a)
        np.add(a, b, out=c)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            np.add(a, b, out=c)
            times.append(time.perf_counter() - t0)
        points.append({"bytes": int(a.nbytes), "seconds": float(np.median(times))})
    rates = [p["bytes"] / p["seconds"] for p in points if p["seconds"] > 0]
    return {"gamma_bytes_per_s": float(np.median(rates)) if rates else None, "dtype": dtype, "points": points}


def _run_scenario(run_dir: Path) -> dict:
    """The resolved scenario the launcher saved in the run directory ({} if there is none)."""
    try:
        return yaml.safe_load((Path(run_dir) / "scenario.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}


def network_of(scenario: dict) -> str:
    """What a calibration is matched by: the transport on one host ('ipc'), or across emulated
    hosts their link ('hosts 1gbit,delay=200us'), so a shaped link's calibration never becomes the
    model of a run on one host, nor the other way round."""
    if not scenario.get("hosts"):
        return scenario.get("transport", "ipc")
    link = scenario.get("link") or {}
    parts = [str(link.get("rate", "unshaped"))] + ([f"delay={link['delay']}"] if link.get("delay") else [])
    return HOSTS_PREFIX + ",".join(parts)


def run_network(run_dir: Path) -> str:
    """`network_of` a run, from its saved scenario."""
    return network_of(_run_scenario(run_dir))


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


def write_calibration(run_dir: Path, fit, gamma: dict | None, sizes_bytes: list, one_way_s: list) -> str:
    """Save `fit` (alpha_s, beta_bytes_per_s) and `gamma` (from `measure_gamma`; None: not
    measured, saved as null, read as free) to run_dir/calibration.json; return the line to print."""
    run_dir = Path(run_dir)
    scenario = _run_scenario(run_dir)
    gamma = gamma or {}
    record = {
        "alpha_s": fit.alpha_s,
        "beta_bytes_per_s": fit.beta_bytes_per_s,
        "gamma_bytes_per_s": gamma.get("gamma_bytes_per_s"),
        "transport": scenario.get("transport", "ipc"),
        "network": network_of(scenario),
        "dtype": gamma.get("dtype"),
        "ranks": scenario.get("ranks"),
        "hostname": platform.node(),
        "cpu_model": cpu_model(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "pingpong_sizes_bytes": [int(n) for n in sizes_bytes],
        "pingpong_one_way_s": [float(t) for t in one_way_s],
        "gamma_points": gamma.get("points", []),
        "gamma_counts": "bytes of one operand (nccl-tests' size) per second of np.add(a, b, out=c)",
    }
    path = run_dir / CALIBRATION_FILE
    path.write_text(json.dumps(record, indent=1))
    return f"calibration ({record['dtype']}): {_link(record).describe()} -> {path}"


def _number(record: dict, key: str, allow_none: bool = False) -> float:
    value = record.get(key)
    if value is None and allow_none:
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"expected a number, got {value!r}", field=key)
    return float(value)


def _link(record: dict) -> Link:
    return Link(
        _number(record, "alpha_s"),
        _number(record, "beta_bytes_per_s"),
        _number(record, "gamma_bytes_per_s", allow_none=True),
    )


def read_calibration(path: Path) -> ModelSource:
    """A calibration file as a ModelSource; UsageError (a ValueError) says what is wrong with it."""
    try:
        record = json.loads(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"cannot read it ({e.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"not a calibration file (not JSON: {e})") from None
    missing = [k for k in REQUIRED_KEYS if k not in record] if isinstance(record, dict) else REQUIRED_KEYS
    if missing:
        raise UsageError(
            f"not a calibration file (missing {missing[0]!r}; expected {', '.join(REQUIRED_KEYS)}, "
            "as `python -m playground run pingpong` writes)"
        )
    return ModelSource(
        _link(record), "calibration", str(path), str(record.get("network") or record["transport"])
    )


class ModelSpec(str):
    """A scenario's `model:` value: a preset's name, or a calibration file (or the run directory
    holding one) resolved when the scenario is read, so a frozen `Params` holds the final value."""

    ALLOWED = f"a link preset ({', '.join(PRESETS)}), a calibration.json or the run directory holding one"

    @classmethod
    def parse_param(cls, value) -> str:
        """The resolved spec (see `resolve_spec`), checked to load; ValueError saying why not."""
        if not isinstance(value, str):
            raise ValueError(f"expected {cls.ALLOWED}, got {value!r}")
        spec = resolve_spec(value)
        model_from_spec(spec)
        return spec


def resolve_spec(spec: str) -> str:
    """A preset's name as it is; a calibration file or a run directory holding one as the file's
    absolute real path, so `runs/latest` still means the same run once a new run has moved
    `latest` (and the run's saved scenario says which file). UsageError if it is neither."""
    if spec in PRESETS:
        return spec
    path = Path(spec)
    if path.is_dir() and (path / CALIBRATION_FILE).is_file():
        path = path / CALIBRATION_FILE
    if path.is_file():
        return str(path.resolve())
    raise UsageError(
        f"no such preset or file; allowed: {', '.join(PRESETS)}, or a {CALIBRATION_FILE} (or the run "
        "directory holding one) written by `python -m playground run pingpong`"
    )


def model_from_spec(spec: str) -> ModelSource:
    """A preset name, a calibration file, or a run directory holding one; UsageError otherwise."""
    spec = resolve_spec(spec)
    return ModelSource(PRESETS[spec], "preset", spec) if spec in PRESETS else read_calibration(Path(spec))


def newest_calibration(network: str, runs_dir: Path) -> ModelSource | None:
    """The newest readable runs_dir/*/calibration.json of `network` (a transport, or emulated
    hosts' link: `network_of`), by its date, then mtime."""
    found = []
    for path in Path(runs_dir).glob(f"*/{CALIBRATION_FILE}"):
        if path.parent.is_symlink():  # runs/latest: the same run again
            continue
        try:
            source = read_calibration(path)
            stamp = (json.loads(path.read_text()).get("date") or "", path.stat().st_mtime_ns)
        except (ValueError, OSError):
            continue
        if source.transport == network:
            found.append((stamp, source))
    return max(found, key=lambda f: f[0])[1] if found else None


def load_model(spec: str | None, network: str, runs_dir: Path) -> ModelSource:
    """What the model columns use: `spec` if given (see `model_from_spec`), else the newest
    calibration of `network` (`run_network`) under `runs_dir`, else the labelled default for it."""
    if spec:
        return model_from_spec(spec)
    newest = newest_calibration(network, runs_dir)
    if newest is not None:
        return newest
    return ModelSource(default_link(network), "default", network, network)
