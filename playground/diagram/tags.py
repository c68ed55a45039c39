"""What each message tag is called and drawn as: the internal tags (negative) by the algorithm
that sends them, user tags (>= 0) as "tag N"."""

from playground.collectives.halving_doubling import TAG_HD
from playground.collectives.hierarchical import TAG_HIER, TAG_INTER, TAG_INTRA
from playground.collectives.recursive_doubling import TAG_RD
from playground.collectives.ring import TAG_RING
from playground.collectives.tree import TAG_TREE_BCAST, TAG_TREE_REDUCE
from playground.comm.communicator import TAG_BARRIER, TAG_OBJ
from playground.core.sizes import format_size

TAG_NAMES = {
    TAG_BARRIER: "barrier",
    TAG_OBJ: "obj",
    TAG_RING: "ring",
    TAG_TREE_REDUCE: "tree.reduce",
    TAG_TREE_BCAST: "tree.bcast",
    TAG_HD: "hd",
    TAG_RD: "rd",
    TAG_HIER: "hier",
}
_GROUP_PREFIXES = ((TAG_INTER, "inter."), (TAG_INTRA, "intra."))  # hier's groups shift the tags

# The algorithms' tags keep one colour in every diagram (ring beside tree on the lecture page);
# other tags take OTHER_COLORS in order of appearance.
TAG_COLORS = {
    TAG_BARRIER: "#8a8a8a",
    TAG_RING: "#1f77b4",
    TAG_TREE_REDUCE: "#d62728",
    TAG_TREE_BCAST: "#2ca02c",
    TAG_HD: "#9467bd",
    TAG_RD: "#8c564b",
}
OTHER_COLORS = ("#ff7f0e", "#e377c2", "#17becf", "#bcbd22", "#393b79", "#637939")


def tag_name(tag: int) -> str:
    if tag in TAG_NAMES:
        return TAG_NAMES[tag]
    for offset, prefix in _GROUP_PREFIXES:
        if tag - offset in TAG_NAMES:
            return prefix + TAG_NAMES[tag - offset]
    return f"tag {tag}"


def message_label(tag: int, nbytes: int) -> str:
    """'ring 256 B'; a barrier's messages, always empty, show their tag only."""
    return tag_name(tag) if tag == TAG_BARRIER else f"{tag_name(tag)} {format_size(nbytes)}"
