"""A matched collective's salt in the tags of its messages: the arithmetic (native/oprecord.c does it
per message; this module says what a tag that arrived means).

While a matched collective runs (one that `begin_collective` was given its input or its op), every tag
it sends or waits for is lowered by `salt << SALT_SHIFT`, the salt being 10 bits of the collective's
fingerprint (name, algorithm, dtype, bytes, op: the op's code in the top 3 bits, so sum, prod, max,
min and avg always differ). Ranks that called the same collective use the same tags; ranks that did
not never match each other's messages, and a rank waiting for its own salt that finds a peer's
other salt parked knows at once that the two disagree (comm/desync.py). Tags carry it on every
transport unchanged: it costs no byte on the wire.

Tags up to TAG_LIMIT in size are salted: the internal ones (-1..-300), a group's offsets (multiples
of 2**16, at most 15 groups: comm/group.py) and user tags below 2**20. TAG_MISMATCH, on which ranks
tell each other what they called, is never salted.
"""

SALT_SHIFT = 21
TAG_LIMIT = 1 << 20  # tags in (-TAG_LIMIT, TAG_LIMIT) are salted in a matched collective
TAG_MISMATCH = -3  # "this is what I called": the message ranks swap once they disagree


def is_salted(wire_tag: int) -> bool:
    """Did this tag travel inside a matched collective?"""
    return wire_tag <= -TAG_LIMIT


def salt_of(wire_tag: int) -> int:
    """The salt a tag carries (0: none)."""
    return (TAG_LIMIT - 1 - wire_tag) >> SALT_SHIFT if is_salted(wire_tag) else 0


def logical_tag(wire_tag: int) -> int:
    """The tag the program gave, without its salt (what errors and traces show)."""
    return wire_tag + (salt_of(wire_tag) << SALT_SHIFT)


def salted(tag: int, salt: int) -> int:
    """`tag` as it travels in a collective of `salt` (what native/oprecord.c's wire_tag computes)."""
    if not salt or not -TAG_LIMIT < tag < TAG_LIMIT or tag == TAG_MISMATCH:
        return tag
    return tag - (salt << SALT_SHIFT)
