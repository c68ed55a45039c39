"""Pick a KV-cache allocation policy by name; all three speak one check-then-act interface.

`can_allocate / allocate`, `can_append_batch / append`, `can_fork / fork`, `free`, `slots`,
`stats`, `check_invariants` (see BlockManager for the contract). Capacity is given in token
slots so the three policies get exactly the same memory.
"""

from typing import Literal

from playground.errors import UsageError
from playground.kvcache.block_manager import BlockManager, cdiv
from playground.kvcache.contiguous import ContiguousAllocator

PolicyName = Literal["paged", "contiguous", "reserve_max"]
POLICIES = ("paged", "contiguous", "reserve_max")


def make_policy(
    name: str,
    capacity_tokens: int,
    block_size: int = 16,
    enable_prefix_caching: bool = False,
    max_new_tokens: int = 2048,
    growth: float = 1.5,
):
    """A fresh allocator; paged capacity rounds down to whole blocks."""
    if name == "paged":
        return BlockManager(capacity_tokens // block_size, block_size, enable_prefix_caching)
    if name == "contiguous":
        return ContiguousAllocator(capacity_tokens, reserve_max=False, growth=growth, block_size=block_size)
    if name == "reserve_max":
        return ContiguousAllocator(
            capacity_tokens, reserve_max=True, max_new_tokens=max_new_tokens, block_size=block_size
        )
    raise UsageError(f"unknown policy {name!r}; allowed: {', '.join(POLICIES)}")


def pages(slots: int, block_size: int) -> int:
    """Slots expressed in whole pages, to compare contiguous runs with paged blocks."""
    return cdiv(slots, block_size)
