"""`simulate`'s command line, resolved once into a validated, frozen `SimSpec`.

Every flag is checked before anything runs; a bad value is one `ScenarioError` naming the flag
and what is allowed (exit status 2). Precedence for the links: `--alpha/--beta/--gamma` override
fields of `--link` (a preset name), which overrides the default, the lecture's InfiniBand (`ib`).
`--link calibration.json` (from `python -m playground calibrate`) simulates this machine instead:
its `--transport`'s calibrated host (per-message CPU and latency by size, the cores ranks share,
the time slice, the memory bandwidth copies share; models/hostfit.py), its cores unless `--cores`
says otherwise, and the transport's segment unless `--segment` does. With `--topology
NODESxPER_NODE` the links inside and between nodes come from `--intra` and `--inter`.
"""

import re
from dataclasses import dataclass, replace

from playground.collectives import registry
from playground.core.errors import ScenarioError
from playground.core.sizes import (
    ALLOWED_BANDWIDTH,
    ALLOWED_DURATION,
    parse_bandwidth,
    parse_duration,
    parse_size,
    parse_size_range,
)
from playground.models.calibration import Calibration, read_calibration
from playground.models.costs import PRESETS, Link
from playground.sim.network import Machine

MAX_RANKS = 1 << 16
DEFAULT_LINK = "ib"


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


def _calibration(args) -> Calibration | None:
    """The calibration `--link` names (a file, not a preset), checked; None for a preset."""
    if not args.link or args.link in PRESETS:
        if args.transport:
            raise ScenarioError(f"--transport {args.transport}: only with --link calibration.json")
        return None
    if "." not in args.link and "/" not in args.link:
        _preset("--link", args.link)  # neither a preset nor a path: say what is allowed
    try:
        calibration = read_calibration(args.link)
    except ScenarioError as e:
        raise ScenarioError(f"--link {args.link}: {e}") from None
    transport = args.transport or "ipc"
    if not calibration.has(transport):
        raise ScenarioError(
            f"--transport {transport}: {args.link} calibrated {', '.join(calibration.transports)}"
        )
    return calibration


def _base_link(args, calibration: Calibration | None) -> tuple[Link, str]:
    """(link, what the caption calls it)."""
    if calibration is not None:
        transport = args.transport or "ipc"
        link = calibration.link(transport)
        return link, f"calibration {calibration.path} ({transport}, {calibration.cores} cores)"
    name = args.link or DEFAULT_LINK
    return _preset("--link", name), f"preset {name}" + ("" if args.link else " (default)")


def _override(link: Link, args) -> tuple[Link, list[str]]:
    changed = {}
    for flag, field, parse, allowed in (
        ("--alpha", "alpha_s", parse_duration, ALLOWED_DURATION),
        ("--beta", "beta_bytes_per_s", parse_bandwidth, ALLOWED_BANDWIDTH),
        ("--gamma", "gamma_bytes_per_s", parse_bandwidth, ALLOWED_BANDWIDTH),
    ):
        text = getattr(args, flag[2:])
        if text is None:
            continue
        try:
            changed[field] = parse(text)
        except ValueError:
            raise ScenarioError(f"{flag} {text!r}: expected {allowed}") from None
    return replace(link, **changed), [
        f"--{flag} {getattr(args, flag)}"
        for flag in ("alpha", "beta", "gamma")
        if getattr(args, flag) is not None
    ]


def _topology(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise ScenarioError(f"--topology {text!r}: expected NODESxRANKS_PER_NODE with both >= 1, e.g. 128x8")
    return int(m.group(1)), int(m.group(2))


def resolve(args) -> SimSpec:
    """The validated simulation from parsed arguments; ScenarioError naming the flag otherwise."""
    collective = args.collective
    calibration = _calibration(args)
    if calibration is not None and (args.topology or args.alpha or args.beta or args.gamma):
        raise ScenarioError(
            "--link calibration.json with --topology/--alpha/--beta/--gamma: a calibration is one host, "
            "measured; give a preset to change links"
        )
    base, source = _base_link(args, calibration)
    link, overridden = _override(base, args)
    source += "".join(f", {o}" for o in overridden) + f": {link.describe()}"
    intra = inter = link
    per_node = None
    if args.topology:
        nodes, per_node = _topology(args.topology)
        intra = replace(_preset("--intra", args.intra or "nvlink"), gamma_bytes_per_s=link.gamma_bytes_per_s)
        inter = replace(
            _preset("--inter", args.inter) if args.inter else link, gamma_bytes_per_s=link.gamma_bytes_per_s
        )
        if args.ranks and _ranks(args.ranks) != (nodes * per_node,):
            raise ScenarioError(
                f"--ranks {args.ranks}: --topology {args.topology} has {nodes * per_node} ranks"
            )
        ranks = (nodes * per_node,)
        source = f"{nodes} nodes x {per_node}: inside {intra.describe()}; between {inter.describe()}"
    elif args.intra or args.inter:
        raise ScenarioError("--intra/--inter: need --topology NODESxRANKS_PER_NODE")
    else:
        ranks = _ranks(args.ranks or "8")
    offered = registry.names(collective)
    default = [
        a.name for a in registry.REGISTRY if a.collective == collective and (per_node or not a.on_nodes)
    ]
    algorithms = tuple(a for a in (args.algo or ",".join(default)).split(",") if a)
    for a in algorithms:
        if a not in offered:
            raise ScenarioError(f"--algo {a!r}: {collective} offers {', '.join(offered)}")
        if a != registry.AUTO and registry.get(collective, a).on_nodes and not per_node:
            raise ScenarioError(
                f"--algo {a}: needs --topology NODESxRANKS_PER_NODE (which ranks share a node)"
            )
    try:
        sizes = tuple(parse_size_range(args.sizes, args.step))
    except ValueError as e:
        raise ScenarioError(f"--sizes {args.sizes!r}: {e}") from None
    try:
        segment = parse_size(args.segment) if args.segment else None
    except ValueError as e:
        raise ScenarioError(f"--segment {args.segment!r}: {e}") from None
    if segment is not None and segment < 1:
        raise ScenarioError(f"--segment {args.segment!r}: expected at least 1 byte")
    if args.cores is not None and args.cores < 1:
        raise ScenarioError(f"--cores {args.cores}: expected at least 1 CPU")
    if args.data and max(ranks) > 64:
        raise ScenarioError(f"--data: simulating with real bytes is for at most 64 ranks, got {max(ranks)}")
    cores = args.cores
    if calibration is not None:
        cores = cores or calibration.cores
        if segment is None:
            segment = calibration.segment_bytes(args.transport or "ipc")
    if args.fold and (args.data or per_node or cores):
        flag = (
            "--data"
            if args.data
            else "--topology"
            if per_node
            else "--cores"
            if args.cores
            else "--link calibration.json"
        )
        raise ScenarioError(
            f"--fold with {flag}: folding needs data-free messages on one kind of link and no shared "
            "cores (every rank's timeline the same)"
        )
    return SimSpec(
        collective=collective,
        algorithms=algorithms,
        ranks=ranks,
        sizes=sizes,
        intra=intra,
        inter=inter,
        ranks_per_node=per_node,
        cores=cores,
        segment_bytes=segment,
        data=args.data,
        crossover=args.crossover,
        fold=args.fold,
        dtype=args.dtype,
        op=args.op,
        link_source=source,
        calibration=calibration,
        transport=args.transport or "ipc",
    )
