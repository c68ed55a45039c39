"""Pick a KV-cache allocation policy by name; all three speak one check-then-act interface,
`allocation.AllocationPolicy` (`can_allocate / allocate`, `can_append_batch / append_batch`,
`can_fork / fork`, `free`, `slots`, `stats`, `check_invariants`). Capacity is given in token
slots so the three policies get exactly the same memory.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from playground.core.errors import ParamError, UsageError
from playground.kvcache.engine.allocation import AllocationPolicy
from playground.kvcache.engine.block_manager import BlockManager
from playground.kvcache.engine.contiguous import ContiguousAllocator


@dataclass(frozen=True)
class Policy:
    """One allocation policy: `make(capacity_tokens, block_size, prefix_caching, max_new_tokens,
    growth)` builds a fresh allocator."""

    name: str
    summary: str
    make: Callable[[int, int, bool, int, float], AllocationPolicy]


# The policies, one line each: the node's `policies` values, the server's --policy choices and the
# docs derive from this table. Adding one is its module (an AllocationPolicy) and a line.
POLICIES: dict[str, Policy] = {
    p.name: p
    for p in (
        Policy(
            "paged",
            "fixed-size blocks through a block table (vLLM): no external fragmentation, copy-on-write forks",
            lambda cap, bs, prefix, max_new, growth: BlockManager(cap // bs, bs, prefix),
        ),
        Policy(
            "contiguous",
            "one contiguous run per sequence, first fit, grown by `growth` when full (moved if it must)",
            lambda cap, bs, prefix, max_new, growth: ContiguousAllocator(
                cap, reserve_max=False, growth=growth, block_size=bs
            ),
        ),
        Policy(
            "reserve_max",
            "one contiguous run reserved for prompt + max_new_tokens at admission (pre-vLLM servers)",
            lambda cap, bs, prefix, max_new, growth: ContiguousAllocator(
                cap, reserve_max=True, max_new_tokens=max_new, block_size=bs
            ),
        ),
    )
}
if TYPE_CHECKING:  # a Literal of the registry's names, read at run time; to the type checker a string
    PolicyName = str
else:
    PolicyName = Literal[tuple(POLICIES)]


def make_policy(
    name: str,
    capacity_tokens: int,
    block_size: int = 16,
    enable_prefix_caching: bool = False,
    max_new_tokens: int = 2048,
    growth: float = 1.5,
) -> AllocationPolicy:
    """A fresh allocator; paged capacity rounds down to whole blocks."""
    entry = POLICIES.get(name)
    if entry is None:
        raise UsageError(f"unknown policy {name!r}; allowed: {', '.join(POLICIES)}")
    return entry.make(capacity_tokens, block_size, enable_prefix_caching, max_new_tokens, growth)


def check_pool_params(p) -> None:
    """A scenario's policies, prompt lengths and block size against its pool, for the kvcache and
    serving nodes' Params (fields policies, prompt_min, prompt_max, block_size, capacity_tokens)."""
    if not p.policies or len(set(p.policies)) != len(p.policies):
        raise ParamError("policies", f"a non-empty list without repeats, got {list(p.policies)}")
    if p.prompt_max < p.prompt_min:
        raise ParamError("prompt_max", f"must be >= prompt_min ({p.prompt_min}), got {p.prompt_max}")
    if p.block_size > p.capacity_tokens:
        raise ParamError("block_size", f"must be <= capacity_tokens, got {p.block_size}")
