"""Units of sharded data parallelism: which parameters are gathered, freed and reduce-scattered
together (FSDP's `fully_shard` units, a block each by default), as data: pure, no communication.

A unit is a contiguous run of the flat buffer's parameters, so a unit's parameters and gradients are
one slice of a flat buffer and one message stream of a collective:

    wte                        the tied embedding: its own unit (the embedding and the head both use it)
    wpe, h.0.*  .. h.{k-1}.*   the first k blocks (k = unit_blocks), with the position embedding
    h.k.*       ..             the next k blocks, ...
    .., h.{L-1}.*, ln_f.*      the last blocks, with the final layernorm

`unit_blocks: 0` wraps nothing: one unit of everything (FSDP on the root module alone). A stage of a
pipeline or a tensor-parallel shard has its own layout (a stage's blocks, a shard's slices); the
same rule cuts it, counting its own blocks. A mixture of experts' layout puts every block's experts
first: they make units of their own by the same rule (k blocks' experts each), and a block's piece
needs both of its units.

The model announces what it computes as pieces (its trace spans): `forward.embedding`,
`forward.h.3`, `forward.head`, `backward.head`, `backward.h.3`, `backward.embedding`. Each piece
needs the units holding the parameters it reads (`needs`); a pass's gathers come in the order its
pieces first need them (`gather_order`), and a unit is done with in a pass after the last piece
that needs it (`last_use`): freed there after forward (`reshard_after_forward`) and always after
backward. Prefetch depth d: when a piece starts, the gathers up to d beyond the last it needs are
issued too (`to_issue`), so they run on the communication thread while the piece computes.

Each unit is cut into one chunk per rank, `ChunkBounds(unit size, N)`: rank r owns elements
[a_r, b_r) of every unit (its shard of the parameters, the gradients and Adam's states).
"""

from dataclasses import dataclass

from playground.collectives.chunks import ChunkBounds
from playground.core.errors import ParamError, UsageError
from playground.transformer.layout import ParamLayout

FORWARD, BACKWARD = "forward", "backward"
EMBEDDING, HEAD = "embedding", "head"


@dataclass(frozen=True)
class Sharding:
    """How ZeRO-2 and ZeRO-3 cut and move the model: `unit_blocks` blocks a unit (0: one unit of
    everything, nothing wrapped), `prefetch` units gathered ahead of the one in use (FSDP2's 1),
    `reshard_after_forward` (FSDP's default: free a unit's parameters after its forward, gather them
    again for its backward)."""

    unit_blocks: int = 1
    prefetch: int = 1
    reshard_after_forward: bool = True

    def __post_init__(self):
        if self.unit_blocks < 0:
            raise ParamError(
                "unit_blocks", f"must be >= 0 (0: one unit of everything), got {self.unit_blocks}"
            )
        if self.prefetch < 0:
            raise ParamError(
                "prefetch", f"must be >= 0 (0: gather a unit when it is needed), got {self.prefetch}"
            )

    def check_model(self, layers: int, key: str = "unit_blocks") -> None:
        """ParamError naming `key` if a unit holds more blocks than the model has."""
        if self.unit_blocks > layers:
            raise ParamError(
                key,
                f"a unit of {self.unit_blocks} blocks is larger than the model's {layers} (0: one unit of everything)",
            )


@dataclass(frozen=True)
class Unit:
    """Unit `index`: parameters `names` at elements [start, stop) of the flat buffer."""

    index: int
    start: int
    stop: int
    names: tuple[str, ...]

    @property
    def size(self) -> int:
        return self.stop - self.start

    @property
    def label(self) -> str:
        """'wte', 'h.0-1', 'h.2-3 + ln_f', 'h.0 experts': what a report calls it."""
        blocks = sorted({int(n.split(".")[1]) for n in self.names if n.startswith("h.")})
        parts = [f"h.{blocks[0]}" + (f"-{blocks[-1]}" if len(blocks) > 1 else "")] if blocks else []
        parts += [n.split(".")[0] for n in self.names if not n.startswith("h.")]
        experts = all(".experts." in n for n in self.names)  # a mixture of experts' leading part
        return " + ".join(dict.fromkeys(parts)) + (" experts" if experts else "")


def _block(name: str) -> int | None:
    return int(name.split(".")[1]) if name.startswith("h.") else None


class UnitPlan:
    """The units of `layout` with `unit_blocks` blocks each (0: one unit of everything), and which
    pieces need which units; `num_ranks` cuts each unit into the ranks' chunks."""

    def __init__(self, layout: ParamLayout, unit_blocks: int, num_ranks: int):
        if unit_blocks < 0:
            raise UsageError(
                f"must be >= 0 (0: one unit of everything), got {unit_blocks}", field="unit_blocks"
            )
        if num_ranks < 1:
            raise UsageError(f"must be >= 1, got {num_ranks}", field="num_ranks")
        self.layout, self.unit_blocks, self.num_ranks = layout, unit_blocks, num_ranks
        blocks = sorted({b for s in layout.specs if (b := _block(s.name)) is not None})
        self.blocks = blocks
        units: list[Unit] = []
        previous = None
        for spec in layout.specs:
            key = self._key(spec.name, blocks)
            if key == previous:
                last = units[-1]
                units[-1] = Unit(last.index, last.start, spec.stop, (*last.names, spec.name))
            else:
                units.append(Unit(len(units), spec.offset, spec.stop, (spec.name,)))
            previous = key
        self.units = tuple(units)
        self._unit_of = {name: u.index for u in units for name in u.names}
        self._block_units: dict[int, tuple[int, ...]] = {}  # a block's units (experts lead the layout)
        for u in units:
            for name in u.names:
                if (b := _block(name)) is not None and u.index not in self._block_units.get(b, ()):
                    self._block_units[b] = (*self._block_units.get(b, ()), u.index)
        self.bounds = [ChunkBounds(u.size, num_ranks) for u in units]

    def _key(self, name: str, blocks: list[int]) -> str:
        if self.unit_blocks == 0:
            return "all"
        if name == "wte":
            return "wte"
        block = _block(name)
        if block is None:  # wpe joins the first blocks, ln_f the last ones (own units without blocks)
            if not blocks:
                return name.split(".")[0]
            block = blocks[0] if name == "wpe" else blocks[-1]
        return f"blocks {(block - blocks[0]) // self.unit_blocks}"

    def __len__(self) -> int:
        return len(self.units)

    def unit_of(self, name: str) -> int:
        return self._unit_of[name]

    # -- pieces ---------------------------------------------------------------------------------
    @property
    def has_embedding(self) -> bool:
        return "wpe" in self._unit_of

    @property
    def has_head(self) -> bool:
        return "ln_f.weight" in self._unit_of

    def pieces(self, direction: str) -> list[str]:
        """The pieces of one pass in the order the model runs them (`forward` or `backward`)."""
        fwd = ([EMBEDDING] if self.has_embedding else []) + [f"h.{b}" for b in self.blocks]
        fwd += [HEAD] if self.has_head else []
        order = fwd if direction == FORWARD else fwd[::-1]
        return [f"{direction}.{p}" for p in order]

    def needs(self, piece: str) -> tuple[int, ...]:
        """The units whose parameters piece `forward.h.3` (etc.) reads (the tied wte at both ends; a
        block's every unit, its experts' too, which lead a mixture of experts' layout); () for a piece
        this plan does not know (the caller's own spans)."""
        direction, _, what = piece.partition(".")
        if direction not in (FORWARD, BACKWARD):
            return ()
        if what == EMBEDDING:
            names = ["wte", "wpe"]
        elif what == HEAD:
            names = ["wte", "ln_f.weight"]
        elif what.startswith("h.") and what[2:].isdigit():
            return self._block_units.get(int(what[2:]), ())
        else:
            return ()
        return tuple(dict.fromkeys(self._unit_of[n] for n in names if n in self._unit_of))

    def gather_order(self, direction: str) -> list[int]:
        """The units in the order the pass's pieces first need them."""
        return list(dict.fromkeys(u for p in self.pieces(direction) for u in self.needs(p)))

    def last_use(self, direction: str) -> dict[str, tuple[int, ...]]:
        """piece -> the units the pass is done with once that piece ends."""
        last: dict[int, str] = {}
        for p in self.pieces(direction):
            for u in self.needs(p):
                last[u] = p
        out: dict[str, tuple[int, ...]] = {}
        for u, p in last.items():
            out[p] = (*out.get(p, ()), u)
        return out

    def to_issue(self, direction: str, piece: str, prefetch: int) -> list[int]:
        """The gathers that must have been issued when `piece` starts: those it needs, and up to
        `prefetch` more of the pass's gather order after the last of them."""
        order = self.gather_order(direction)
        needed = self.needs(piece)
        if not needed:
            return []
        upto = max(order.index(u) for u in needed) + prefetch
        return order[: upto + 1]

    # -- the ranks' chunks ----------------------------------------------------------------------
    def chunk(self, unit: int, rank: int) -> tuple[int, int]:
        """[a, b) of unit `unit` that rank `rank` owns, in the unit's own elements."""
        return self.bounds[unit][rank]

    def shard_elements(self, rank: int) -> int:
        """How many elements rank `rank` owns over all units."""
        return sum(b - a for a, b in (bounds[rank] for bounds in self.bounds))

    def describe(self) -> str:
        return ", ".join(u.label for u in self.units)
