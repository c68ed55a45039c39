"""`simulate`'s flags, resolved once into a validated, frozen `SimulateConfig` and its `SimSpec`.

Every flag is checked before anything runs; a bad value is one `ScenarioError` naming the flag
and what is allowed (exit status 2). Precedence for the links: `--alpha/--beta/--gamma` override
fields of `--link` (a preset name), which overrides the default, the lecture's InfiniBand (`ib`).
`--link calibration.json` (from `python -m playground calibrate`) simulates this machine instead:
its `--transport`'s calibrated host (per-message CPU and latency by size, the cores ranks share,
the time slice, the memory bandwidth copies share; models/hostfit.py), its cores unless `--cores`
says otherwise, and the transport's segment unless `--segment` does; `--transport` alone
simulates the default calibration (./calibration.json or $PLAYGROUND_CALIBRATION), and says so, or
says that `calibrate` writes one. With `--topology NODESxPER_NODE` the links inside and between
nodes come from `--intra` and `--inter`.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from playground.collectives import registry
from playground.core import flags
from playground.core.dtypes import DTYPES
from playground.core.errors import ScenarioError
from playground.core.flags import Repeated, Text
from playground.core.sizes import (
    ALLOWED_BANDWIDTH,
    ALLOWED_DURATION,
    parse_bandwidth,
    parse_duration,
    parse_size,
)
from playground.models.calibration import Calibration, default_path, find_calibration, read_calibration
from playground.models.costs import PRESETS, Link
from playground.sim.driver import DATA_MAX_RANKS
from playground.sim.network import Machine

MAX_RANKS = 1 << 16
DEFAULT_LINK = "ib"
CALIBRATED = ("ipc", "shm", "tcp")  # the transports `calibrate` measures
OPS = ("sum", "avg", "max", "min")  # the reductions bench and simulate offer (ReduceOp's, but prod)


@dataclass(frozen=True)
class SimSpec:
    collective: str
    algorithms: tuple[str, ...]
    ranks: tuple[int, ...]
    sizes: tuple[int, ...]
    intra: Link  # alpha, beta (and the machine's gamma) of links inside a node
    inter: Link  # and between nodes (the same as intra without a topology)
    ranks_per_node: int | None  # None: one flat network (every link `inter`)
    cores: int | None
    segment_bytes: int | None
    data: bool | None  # None: with data where small enough (driver.wants_data)
    crossover: bool
    fold: bool  # one rank runs for all where their timelines are the same (fold.py)
    dtype: str
    op: str
    link_source: str  # what the caption says the links are
    calibration: Calibration | None = None  # --link calibration.json: this machine's host
    transport: str = "ipc"  # which of the calibration's transports

    @property
    def gamma_bytes_per_s(self) -> float:
        return self.inter.gamma_bytes_per_s

    def machine(self, num_ranks: int, size_bytes: int = 0) -> Machine:
        """The simulated machine for a run of `num_ranks` ranks on `size_bytes` (a calibrated host's
        copy and reduction rates depend on how much memory the collective touches)."""
        per_node = self.ranks_per_node or num_ranks
        if self.calibration is not None:
            host = self.calibration.host(self.transport, num_ranks, size_bytes)
            link = Link(self.inter.alpha_s, self.inter.beta_bytes_per_s, host.gamma_bytes_per_s)
            return Machine(1, num_ranks, link, link, host.gamma_bytes_per_s, self.cores, host)
        return Machine(
            num_ranks // per_node,
            per_node,
            self.intra,
            self.inter,
            self.gamma_bytes_per_s,
            self.cores,
        )


def _ranks(text: str) -> tuple[int, ...]:
    parts = (
        [t.strip() for t in text.split("..", 1)]
        if ".." in text
        else [t for t in text.split(",") if t.strip()]
    )
    out: tuple[int, ...] = ()
    if parts and all(t.isdigit() for t in parts):
        numbers = [int(t) for t in parts]
        if ".." not in text:
            out = tuple(numbers)
        elif 1 <= numbers[0] <= numbers[1]:
            out = tuple(numbers[0] << k for k in range((numbers[1] // numbers[0]).bit_length()))
    if not out or min(out) < 1 or max(out) > MAX_RANKS:
        raise ScenarioError(
            f"--ranks {text!r}: expected a rank count from 1 to {MAX_RANKS}, a list (8,64) or a doubling range (8..1024)"
        )
    return out


def _preset(flag: str, name: str) -> Link:
    if name not in PRESETS:
        raise ScenarioError(f"{flag} {name!r}: unknown link preset; allowed: {', '.join(PRESETS)}")
    return PRESETS[name]


@dataclass(frozen=True)
class _Links:
    """The link flags as given."""

    link: str | None
    transport: str | None
    alpha: str | None
    beta: str | None
    gamma: str | None
    topology: str | None
    intra: str | None
    inter: str | None


def _calibration(given: _Links) -> tuple[Calibration | None, str]:
    """The calibration `--link` names (a file, not a preset), checked, or with `--transport` alone
    the default one (./calibration.json or $PLAYGROUND_CALIBRATION); None for a preset. And how the
    caption names it."""
    if given.link in PRESETS or (not given.link and not given.transport):
        if given.transport:
            raise ScenarioError(
                f"--transport {given.transport}: only with --link calibration.json (a preset's links have no "
                f"transport; `python -m playground calibrate` measures each transport of this machine)"
            )
        return None, ""
    spec = given.link
    if spec is None:
        found = find_calibration()
        if found is None:
            raise ScenarioError(
                f"--transport {given.transport}: prices this machine's calibrated transport, and there is no "
                f"{default_path()}: `python -m playground calibrate` writes it (or give --link FILE)"
            )
        return _checked(found, given.transport), " (the default calibration: --transport without --link)"
    if "." not in spec and "/" not in spec:
        _preset("--link", spec)  # neither a preset nor a path: say what is allowed
    try:
        calibration = read_calibration(spec)
    except ScenarioError as e:
        raise ScenarioError(f"--link {spec}: {e}") from None
    return _checked(calibration, given.transport), ""


def _checked(calibration: Calibration, transport: str | None) -> Calibration:
    if not calibration.has(transport or "ipc"):
        raise ScenarioError(
            f"--transport {transport or 'ipc'}: {calibration.path} calibrated {', '.join(calibration.transports)}"
        )
    return calibration


def _override(link: Link, given: _Links) -> tuple[Link, list[str]]:
    """`link` with the fields `--alpha`, `--beta`, `--gamma` give; and those flags, as said."""
    alpha = _parsed("--alpha", given.alpha, parse_duration, ALLOWED_DURATION)
    beta = _parsed("--beta", given.beta, parse_bandwidth, ALLOWED_BANDWIDTH)
    gamma = _parsed("--gamma", given.gamma, parse_bandwidth, ALLOWED_BANDWIDTH)
    changed = replace(
        link,
        alpha_s=link.alpha_s if alpha is None else alpha,
        beta_bytes_per_s=link.beta_bytes_per_s if beta is None else beta,
        gamma_bytes_per_s=link.gamma_bytes_per_s if gamma is None else gamma,
    )
    flags = (("--alpha", given.alpha), ("--beta", given.beta), ("--gamma", given.gamma))
    return changed, [f"{flag} {text}" for flag, text in flags if text is not None]


def _parsed(flag: str, text: str | None, parse: Callable[[str], float], allowed: str) -> float | None:
    if text is None:
        return None
    try:
        return parse(text)
    except ValueError:
        raise ScenarioError(f"{flag} {text!r}: expected {allowed}") from None


def _topology(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise ScenarioError(f"--topology {text!r}: expected NODESxRANKS_PER_NODE with both >= 1, e.g. 128x8")
    return int(m.group(1)), int(m.group(2))


@dataclass(frozen=True)
class _Network:
    intra: Link
    inter: Link
    ranks_per_node: int | None
    ranks: tuple[int, ...]
    calibration: Calibration | None
    source: str  # what the caption says the links are


def _network(given: _Links, ranks_text: str | None) -> _Network:
    """The links (from a preset, the flags that override it, or a calibration), the topology, and
    the rank counts (a topology has one)."""
    calibration, found = _calibration(given)
    if calibration is not None and (given.topology or given.alpha or given.beta or given.gamma):
        raise ScenarioError(
            "--link calibration.json with --topology/--alpha/--beta/--gamma: a calibration is one host, "
            "measured; give a preset to change links"
        )
    if calibration is not None:
        transport = given.transport or "ipc"
        base = calibration.link(transport)
        source = f"calibration {calibration.path} ({transport}, {calibration.cores} cores){found}"
    else:
        name = given.link or DEFAULT_LINK
        base, source = _preset("--link", name), f"preset {name}" + ("" if given.link else " (default)")
    link, overridden = _override(base, given)
    source += "".join(f", {o}" for o in overridden) + f": {link.describe()}"
    if not given.topology:
        if given.intra or given.inter:
            raise ScenarioError("--intra/--inter: need --topology NODESxRANKS_PER_NODE")
        return _Network(link, link, None, _ranks(ranks_text or "8"), calibration, source)
    nodes, per_node = _topology(given.topology)
    intra = replace(_preset("--intra", given.intra or "nvlink"), gamma_bytes_per_s=link.gamma_bytes_per_s)
    inter = replace(
        _preset("--inter", given.inter) if given.inter else link, gamma_bytes_per_s=link.gamma_bytes_per_s
    )
    if ranks_text and _ranks(ranks_text) != (nodes * per_node,):
        raise ScenarioError(f"--ranks {ranks_text}: --topology {given.topology} has {nodes * per_node} ranks")
    source = f"{nodes} nodes x {per_node}: inside {intra.describe()}; between {inter.describe()}"
    return _Network(intra, inter, per_node, (nodes * per_node,), None, source)


def _algorithms(collective: str, algo: str | None, per_node: int | None) -> tuple[str, ...]:
    offered = registry.names(collective)
    default = [
        a.name for a in registry.REGISTRY if a.collective == collective and (per_node or not a.on_nodes)
    ]
    algorithms = tuple(a for a in (algo or ",".join(default)).split(",") if a)
    for a in algorithms:
        if a not in offered:
            raise ScenarioError(f"--algo {a!r}: {collective} offers {', '.join(offered)}")
        if a != registry.AUTO and registry.get(collective, a).on_nodes and not per_node:
            raise ScenarioError(
                f"--algo {a}: needs --topology NODESxRANKS_PER_NODE (which ranks share a node)"
            )
    return algorithms


def _segment(text: str | None) -> int | None:
    try:
        segment = parse_size(text) if text else None
    except ValueError as e:
        raise ScenarioError(f"--segment {text!r}: {e}") from None
    if segment is not None and segment < 1:
        raise ScenarioError(f"--segment {text!r}: expected at least 1 byte")
    return segment


def _check_fold(
    fold: bool, data: bool | None, per_node: int | None, cores: int | None, cores_flag: int | None
) -> None:
    if not fold or not (data or per_node or cores):
        return
    flag = (
        "--data"
        if data
        else "--topology"
        if per_node
        else "--cores"
        if cores_flag
        else "--link calibration.json"
    )
    raise ScenarioError(
        f"--fold with {flag}: folding needs data-free messages on one kind of link and no shared "
        "cores (every rank's timeline the same)"
    )


@dataclass(frozen=True)
class SimulateConfig:
    """`simulate`: what is simulated, the measured runs to set beside it, and where its run goes."""

    spec: SimSpec
    measured: tuple[str, ...]  # bench/run directories of this machine
    out: Path

    @classmethod
    def from_flags(
        cls,
        collective: str,
        *,
        algo: Text | None = None,
        ranks: Text | int | None = None,
        sizes: Text = "8..64MiB",
        step: int = 2,
        link: str | None = None,
        transport: str | None = None,
        alpha: str | None = None,
        beta: str | None = None,
        gamma: str | None = None,
        topology: str | None = None,
        intra: str | None = None,
        inter: str | None = None,
        cores: int | None = None,
        segment: str | None = None,
        data: bool | None = None,
        measured: Repeated | None = None,
        crossover: bool = False,
        fold: bool = False,
        dtype: str = "float32",
        op: str = "sum",
        out: str | Path = "runs",
    ) -> "SimulateConfig":
        """The validated simulation from `simulate`'s flags; ScenarioError naming the flag otherwise.
        (Longer than most: the signature is every flag with its default, one a line.)"""
        _choices(collective, transport, dtype, op)
        ranks_text = flags.comma(ranks if not isinstance(ranks, int) else str(ranks))
        network = _network(_Links(link, transport, alpha, beta, gamma, topology, intra, inter), ranks_text)
        algorithms = _algorithms(collective, flags.comma(algo), network.ranks_per_node)
        size_list = flags.sizes("--sizes", sizes, flags.integer("simulate", "--step", step))
        segment_bytes = _segment(segment)
        cores_flag = _cores(cores)
        _check_data(data, network.ranks)
        calibration = network.calibration
        if calibration is not None:  # this machine: its cores, its transport's segment, unless given
            cores = cores_flag or calibration.cores
            segment_bytes = segment_bytes or calibration.segment_bytes(transport or "ipc")
        else:
            cores = cores_flag
        _check_fold(fold, data, network.ranks_per_node, cores, cores_flag)
        spec = SimSpec(
            collective=collective,
            algorithms=algorithms,
            ranks=network.ranks,
            sizes=size_list,
            intra=network.intra,
            inter=network.inter,
            ranks_per_node=network.ranks_per_node,
            cores=cores,
            segment_bytes=segment_bytes,
            data=data,
            crossover=crossover,
            fold=fold,
            dtype=dtype,
            op=op,
            link_source=network.source,
            calibration=calibration,
            transport=transport or "ipc",
        )
        return cls(spec, flags.repeated(measured), Path(out))


def _choices(collective: str, transport: str | None, dtype: str, op: str) -> None:
    """What the command line's choices check, for the Python API's keywords."""
    flags.choice("simulate", "collective", collective, registry.COLLECTIVES)
    flags.choice("simulate", "--dtype/-d", dtype, DTYPES)
    flags.choice("simulate", "--op/-o", op, OPS)
    if transport is not None:
        flags.choice("simulate", "--transport", transport, CALIBRATED)


def _check_data(data: bool | None, ranks: tuple[int, ...]) -> None:
    if data and max(ranks) > DATA_MAX_RANKS:
        raise ScenarioError(
            f"--data: simulating with real bytes is for at most {DATA_MAX_RANKS} ranks, got {max(ranks)}"
        )


def _cores(cores: int | None) -> int | None:
    if cores is None:
        return None
    cores = flags.integer("simulate", "--cores", cores)
    if cores < 1:
        raise ScenarioError(f"--cores {cores}: expected at least 1 CPU")
    return cores
