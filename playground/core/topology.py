"""The emulated cluster's shape as pure functions: which host each rank is on, what a host link is,
and the names and addresses the namespace harness (netns.py) gives them.

Ranks are placed in blocks, as torchrun's --nproc-per-node and Slurm's block distribution do:
ranks 0..b-1 on host 0, the next b on host 1, ...; with R ranks on K hosts the first R mod K hosts
get one rank more, so no host is empty and sizes differ by at most one.

A link is what joins one host to the switch (the bridge): `rate` each way, shaped by tbf on both
ends, and `delay`, the one-way latency added to every message between two hosts. netem is not built
into this kernel, so the delay lives in the transport (comm/delay.py), not in the kernel.
"""

from dataclasses import dataclass

from playground.core.errors import ParamError, UsageError
from playground.core.sizes import Duration, Rate, format_duration, format_rate

SUBNET = "10.77.0"  # every run has its own bridge namespace, so every run can use the same /24
BRIDGE_ADDR = f"{SUBNET}.254"  # the bridge namespace's own address: where the coordinator listens
MAX_HOSTS = 64
MIN_RATE_BPS = 1_000_000  # tbf below 1 mbit works, but every test message would take seconds
MAX_RATE_BPS = 100_000_000_000
MAX_DELAY_S = 10.0


@dataclass(frozen=True)
class Link:
    """Every host's link to the switch: `rate` bits/s each way (None: unshaped veth speed) and a
    one-way `delay` added to each message between two hosts."""

    rate: Rate | None = None  # each way, bits/s as tc writes them (1gbit); null: unshaped veth speed
    delay: Duration = 0.0  # one way, added to every message between two hosts (0: none)

    def __post_init__(self):
        if self.rate is not None and not MIN_RATE_BPS <= self.rate <= MAX_RATE_BPS:
            raise ParamError(
                "rate",
                f"expected {format_rate(MIN_RATE_BPS)} to {format_rate(MAX_RATE_BPS)}, got {format_rate(self.rate)}",
            )
        if not 0 <= self.delay <= MAX_DELAY_S:
            raise ParamError("delay", f"expected 0 to {MAX_DELAY_S:g}s, got {format_duration(self.delay)}")

    def describe(self) -> str:
        rate = f"{format_rate(self.rate)} each way" if self.rate else "unshaped"
        return f"{rate}, delay {format_duration(self.delay)}" if self.delay else rate

    def to_dict(self) -> dict:
        """The YAML form, in units (a bare 0.0002 would not load back as a delay)."""
        d = {"rate": format_rate(self.rate)} if self.rate else {}
        if self.delay:
            d["delay"] = format_duration(self.delay)
        return d


def parse_link_spec(text: str) -> dict:
    """`--link 1gbit,delay=200us` -> {"rate": "1gbit", "delay": "200us"}; a part without `=` is the
    rate. Values are checked later, with the scenario's own `link:` keys (scenario.py)."""
    out: dict = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = (key.strip(), value.strip()) if sep else ("rate", key)
        if key in out:
            raise UsageError(f"--link {text!r}: {key} given twice")
        out[key] = value
    if not out:
        raise UsageError(f"--link {text!r}: expected RATE[,delay=DURATION], e.g. 1gbit,delay=200us")
    return out


def place_blocks(num_ranks: int, num_hosts: int) -> tuple[int, ...]:
    """The host of each rank: consecutive blocks, the first `num_ranks % num_hosts` one rank larger."""
    if not 1 <= num_hosts <= num_ranks:
        raise UsageError(f"expected 1 to {num_ranks} (the rank count), got {num_hosts}", field="hosts")
    base, extra = divmod(num_ranks, num_hosts)
    out: list[int] = []
    for host in range(num_hosts):
        out += [host] * (base + (host < extra))
    return tuple(out)


def ranks_on(placement: tuple[int, ...], host: int) -> list[int]:
    return [r for r, h in enumerate(placement) if h == host]


def host_name(host: int) -> str:
    """What a host is called everywhere a user reads it (PLAYGROUND_HOST, tables, errors)."""
    return f"h{host}"


def host_addr(host: int) -> str:
    return f"{SUBNET}.{host + 1}"


def describe_placement(placement: tuple[int, ...]) -> str:
    """ "h0: ranks 0-1, h1: ranks 2-3" (blocks are contiguous, so a range says it)."""
    parts = []
    for host in range(max(placement, default=-1) + 1):
        ranks = ranks_on(placement, host)
        span = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"
        parts.append(f"{host_name(host)}: {span}")
    return ", ".join(parts)


TBF_MIN_BURST_BYTES = 64 * 1024  # one GSO packet (offloads stay on: see tbf_args)
TBF_MIN_LIMIT_BYTES = 4 << 20  # net.ipv4.tcp_limit_output_bytes: what one tcp flow may queue
HZ = 250  # this kernel's timer tick (CONFIG_HZ)


def tbf_burst_bytes(rate_bps: int) -> int:
    """The token bucket's depth, rate/HZ but at least one 64 KiB GSO packet: what may leave at veth
    speed after an idle spell, and what absorbs a late dequeue without losing rate."""
    return max(rate_bps // 8 // HZ, TBF_MIN_BURST_BYTES)


def tbf_args(rate_bps: int) -> list[str]:
    """`tc qdisc add dev D root` + these: tbf at `rate_bps`.

    Measured here (raw tcp between two host namespaces, README): with the veth's segmentation
    offload left on, tbf passes 0.94-0.96 of 1gbit and 10gbit (tcp/ip headers are 4.4% of a
    1514-byte frame); with GSO off (gso_max_segs 1) the machine forwards 1500-byte packets at only
    0.27 gbit/s, and with 16 KiB GSO at 2.8 gbit/s. tbf splits a GSO packet larger than the bucket,
    so the bucket holds at least one (64 KiB). The queue holds what one tcp flow may put in it.
    """
    burst = tbf_burst_bytes(rate_bps)
    limit = max(TBF_MIN_LIMIT_BYTES, 2 * burst)
    return ["tbf", "rate", f"{rate_bps}bit", "burst", str(burst), "limit", str(limit)]
