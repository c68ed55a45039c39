"""A scenario's `fault:` section: a failure drill, checked against the run's ranks and hosts."""

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from playground.core.errors import ParamError, ScenarioError, UsageError
from playground.core.sizes import Duration, format_duration
from playground.core.topology import place_blocks, ranks_on

RANK_ACTIONS = ("raise", "kill", "hang", "exit", "corrupt", "slow")
HOST_ACTIONS = ("cut_link", "delay_link", "kill_host")


@dataclass(frozen=True)
class Fault:
    """Make one rank, or one host of an emulated cluster, fail on purpose (a drill).

    Rank actions need `rank` and fire on its post number `after_ops + 1`: raise, kill, hang, exit,
    corrupt (flip one bit of the next array it sends, which the collectives' check must catch), or
    slow (from then on the rank's own work, its compute and what it does between messages, takes
    `factor` times as long: a straggler, which the run's report must name).
    Host actions need `hosts:` and name the host by `host`, or by `rank` (that rank's host):
      cut_link    take the host's link down, `after_s` seconds after every rank registered or on post
                  `after_ops + 1` of `rank` (default: the host's first rank)
      kill_host   SIGKILL every rank of the host, triggered the same way
      delay_link  add `delay` to every message to or from the host, from `after_s` on
    """

    # rank actions: the rank that fails (required). Host actions: its host is the one hit (unless
    # `host` says), and its posts are counted (default: the host's first rank)
    rank: int | None = None
    # what happens (above): raise FaultInjected, SIGKILL itself, hang, exit with status 3, flip a bit
    # of its next array (corrupt), work `factor` times slower (slow); cut_link, delay_link, kill_host
    # act on a host
    action: Literal[
        "raise", "kill", "hang", "exit", "corrupt", "slow", "cut_link", "delay_link", "kill_host"
    ] = "raise"
    # fire on the counting rank's post number after_ops + 1 (a post: an array or object it sends;
    # 0: its first)
    after_ops: int = 0
    # cut_link, kill_host: fire this many seconds after every rank registered, not on a post;
    # delay_link: start then (null: at once)
    after_s: float | None = None
    host: int | None = None  # host actions: the host (0 to hosts - 1); null: the host of `rank`
    delay: Duration | None = None  # delay_link: added to every message to or from the host (e.g. 50ms)
    factor: float | None = None  # slow: how many times longer the rank's own work takes (> 1, e.g. 2)

    def __post_init__(self):
        if self.after_ops < 0:
            raise ParamError("after_ops", f"must be >= 0, got {self.after_ops}")
        if self.after_s is not None and self.after_s < 0:
            raise ParamError("after_s", f"must be >= 0, got {self.after_s}")
        if self.action == "slow" and (self.factor is None or not self.factor > 1):
            raise ParamError(
                "factor", f"action slow needs a factor > 1 (e.g. 2: twice as slow), got {self.factor}"
            )
        if self.factor is not None and self.action != "slow":
            raise ParamError("factor", f"only for action slow, not {self.action}")
        if self.action in RANK_ACTIONS:
            if self.rank is None:
                raise ParamError("rank", f"required for action {self.action}")
            for key in ("after_s", "host", "delay"):
                if getattr(self, key) is not None:
                    raise ParamError(key, f"only for the host actions {', '.join(HOST_ACTIONS)}")
            return
        if self.rank is None and self.host is None:
            raise ParamError("host", f"required for action {self.action} (or rank: that rank's host)")
        if self.action == "delay_link":
            if self.delay is None:
                raise ParamError("delay", "required for action delay_link, e.g. 50ms")
            if self.after_ops:
                raise ParamError("after_ops", "delay_link starts after after_s seconds, not after operations")
        elif self.delay is not None:
            raise ParamError("delay", f"only for action delay_link, not {self.action}")
        if self.after_s is not None and self.after_ops:
            raise ParamError("after_s", "give after_s or after_ops, not both")

    @property
    def is_host_action(self) -> bool:
        return self.action in HOST_ACTIONS

    def target_host(self, placement: tuple[int, ...]) -> int:
        """The host a host action hits: `host`, else the host of `rank` (one of the two is set)."""
        if self.host is not None:
            return self.host
        if self.rank is None:
            raise UsageError(f"fault {self.action}: names neither a host nor a rank")
        return placement[self.rank]

    def counting_rank(self, placement: tuple[int, ...]) -> int | None:
        """The rank whose posts trigger the fault; None when it is timed (after_s) instead."""
        if self.is_host_action and (self.after_s is not None or self.action == "delay_link"):
            return None
        return self.rank if self.rank is not None else ranks_on(placement, self.target_host(placement))[0]

    def to_dict(self) -> dict:
        d = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        if self.delay is not None:
            d["delay"] = format_duration(self.delay)
        return d


def check_fault(fault: Fault, ranks: int, hosts: int | None, at: Callable[[str], str]) -> None:
    """What the fault's own fields cannot check: its rank and host exist in this run, a host action
    has hosts, and a rank named with its host is on it. `at(key)` says where a key came from."""
    if fault.rank is not None and not 0 <= fault.rank < ranks:
        raise ScenarioError(f"{at('fault.rank')}: expected 0..{ranks - 1}, got {fault.rank}")
    if not fault.is_host_action:
        return
    if not hosts:
        raise ScenarioError(f"{at('fault.action')}: {fault.action} needs hosts (e.g. --hosts 2)")
    if fault.host is not None and not 0 <= fault.host < hosts:
        raise ScenarioError(f"{at('fault.host')}: expected 0..{hosts - 1}, got {fault.host}")
    placement = place_blocks(ranks, hosts)
    if fault.rank is not None and fault.host is not None and placement[fault.rank] != fault.host:
        raise ScenarioError(
            f"{at('fault.host')}: rank {fault.rank} is on host {placement[fault.rank]}, not {fault.host}"
        )
