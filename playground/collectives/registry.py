"""One table of every collective algorithm: the function that runs it, its cost formula, its words.

Everything that lists algorithms derives from `REGISTRY`: the dispatchers in `collectives/__init__`,
the choices of `bench --algo`, `simulate --algo` and the collective node's `params.algorithm`
(`names`), the model's time of a row and its pick (`collective_time_s`, `best_algorithm`), and the
simulator's defaults and crossover (`flat_allreduce`). Adding an algorithm is its module, its
formula in `playground/models/costs.py`, and one `Algorithm(...)` line below.

`auto` is not an algorithm but a choice among them by size and rank count (`collectives/auto.py`);
`names(collective)` offers it where it exists.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from playground.collectives.bruck import alltoall_bruck_into
from playground.collectives.gather import gather_linear, gather_tree
from playground.collectives.halving_doubling import allreduce_halving_doubling
from playground.collectives.hierarchical import allreduce_hierarchical
from playground.collectives.pairwise import alltoall_pairwise, pairwise_into
from playground.collectives.recursive_doubling import allreduce_recursive_doubling
from playground.collectives.ring import allgather_ring, allreduce_ring, reduce_scatter_ring
from playground.collectives.scatter import scatter_linear, scatter_tree
from playground.collectives.scattered import alltoall_scattered, scattered_into
from playground.collectives.sendrecv import sendrecv_ring
from playground.collectives.tree import allreduce_tree, broadcast_tree_into, reduce_tree_into
from playground.core.errors import UsageError
from playground.models import costs, exchange_costs
from playground.models.costs import Link

AUTO = "auto"


@dataclass(frozen=True)
class Algorithm:
    """One way to run one collective. `run` has the collective's own signature (see the
    dispatchers); `cost(S, N, link)` is its time on one uniform network; an algorithm that needs
    ranks grouped into nodes (`on_nodes`) is left out of flat comparisons and prices a topology
    with `cost_on_nodes(S, num_nodes, per_node, intra, inter)`."""

    collective: str
    name: str
    run: Callable
    cost: Callable[[float, int, Link], float]
    summary: str
    on_nodes: bool = False
    cost_on_nodes: Callable[[float, int, int, Link, Link], float] | None = None


REGISTRY: tuple[Algorithm, ...] = (
    Algorithm(
        "allreduce",
        "ring",
        allreduce_ring,
        costs.allreduce_ring_time_s,
        "reduce-scatter then all-gather around a ring: fewest bytes, 2(N-1) steps",
    ),
    Algorithm(
        "allreduce",
        "tree",
        allreduce_tree,
        costs.allreduce_tree_time_s,
        "binomial-tree reduce then broadcast: 2 log2 N steps of the whole buffer",
    ),
    Algorithm(
        "allreduce",
        "hd",
        allreduce_halving_doubling,
        costs.allreduce_hd_time_s,
        "recursive halving-doubling (Rabenseifner): the ring's bytes in 2 log2 p steps",
    ),
    Algorithm(
        "allreduce",
        "rd",
        allreduce_recursive_doubling,
        costs.allreduce_rd_time_s,
        "recursive doubling: log2 p exchanges of the whole buffer, for small messages",
    ),
    Algorithm(
        "allreduce",
        "hier",
        allreduce_hierarchical,
        lambda size, n, link: costs.allreduce_hier_time_s(size, 1, n, link, link),  # one node
        "hierarchical: reduce-scatter inside each node, all-reduce across, all-gather inside",
        on_nodes=True,
        cost_on_nodes=costs.allreduce_hier_time_s,
    ),
    Algorithm("allgather", "ring", allgather_ring, costs.allgather_ring_time_s, "N-1 steps around a ring"),
    Algorithm(
        "reduce_scatter",
        "ring",
        reduce_scatter_ring,
        costs.reduce_scatter_ring_time_s,
        "N-1 steps around a ring",
    ),
    Algorithm(
        "broadcast", "tree", broadcast_tree_into, costs.broadcast_tree_time_s, "binomial tree from the root"
    ),
    Algorithm("reduce", "tree", reduce_tree_into, costs.reduce_tree_time_s, "binomial tree to the root"),
    Algorithm(
        "alltoall",
        "pairwise",
        alltoall_pairwise,
        exchange_costs.alltoall_pairwise_time_s,
        "pairwise exchange: N-1 steps, one block to rank+k and one from rank-k each",
    ),
    Algorithm(
        "alltoall",
        "bruck",
        alltoall_bruck_into,
        exchange_costs.alltoall_bruck_time_s,
        "Bruck: ceil(log2 N) messages of about half the blocks each, for short blocks",
    ),
    Algorithm(
        "alltoall",
        "scattered",
        alltoall_scattered,
        exchange_costs.alltoall_scattered_time_s,
        "every block sent at once (isend), received as it comes",
    ),
    Algorithm(
        "alltoallv",
        "pairwise",
        pairwise_into,
        exchange_costs.alltoall_pairwise_time_s,
        "pairwise exchange of blocks of any length (counts per peer, zeros too)",
    ),
    Algorithm(
        "alltoallv",
        "scattered",
        scattered_into,
        exchange_costs.alltoall_scattered_time_s,
        "every block of any length sent at once, received as it comes",
    ),
    Algorithm(
        "gather", "linear", gather_linear, exchange_costs.gather_linear_time_s, "every rank sends to the root"
    ),
    Algorithm("gather", "tree", gather_tree, exchange_costs.gather_tree_time_s, "binomial tree to the root"),
    Algorithm(
        "scatter",
        "linear",
        scatter_linear,
        exchange_costs.gather_linear_time_s,
        "the root sends to every rank",
    ),
    Algorithm(
        "scatter", "tree", scatter_tree, exchange_costs.gather_tree_time_s, "binomial tree from the root"
    ),
    Algorithm(
        "sendrecv",
        "ring",
        sendrecv_ring,
        exchange_costs.sendrecv_ring_time_s,
        "each rank sends to rank+1 and receives from rank-1 at once",
    ),
)
BY_KEY: dict[tuple[str, str], Algorithm] = {(a.collective, a.name): a for a in REGISTRY}
COLLECTIVES: tuple[str, ...] = tuple(dict.fromkeys(a.collective for a in REGISTRY))
AUTO_FOR = ("allreduce", "alltoall")  # collectives whose `auto` picks by size (collectives/auto.py)


def names(collective: str, auto: bool = True) -> tuple[str, ...]:
    """The algorithms `collective` offers, in table order, with `auto` last where it has one."""
    own = tuple(a.name for a in REGISTRY if a.collective == collective)
    return own + ((AUTO,) if auto and collective in AUTO_FOR else ())


def all_names() -> tuple[str, ...]:
    """Every algorithm name of any collective (and auto), each once: a scenario's allowed values."""
    return tuple(dict.fromkeys(n for c in COLLECTIVES for n in names(c)))


def flat_allreduce() -> tuple[str, ...]:
    """The all-reduce algorithms that run on any flat set of ranks (not `hier`): what the model
    picks among and the simulator compares by default."""
    return flat("allreduce")


def flat(collective: str) -> tuple[str, ...]:
    """`collective`'s algorithms that run on any flat set of ranks: what the model picks among."""
    return tuple(a.name for a in REGISTRY if a.collective == collective and not a.on_nodes)


# The registry's names as parameter types: a node's `Params` field of one takes exactly these names
# (`build_params` reads the Literal at run time, and the reference lists them); to the type
# checker, which cannot evaluate a Literal built from the table, they are strings.
if TYPE_CHECKING:
    CollectiveName = str
    AlgorithmName = str
    FlatAllreduceName = str
    AllreduceChoice = str
    AlltoallvName = str
else:
    CollectiveName = Literal[COLLECTIVES]
    AlgorithmName = Literal[all_names()]  # any collective's algorithm, or auto
    FlatAllreduceName = Literal[flat_allreduce()]
    AllreduceChoice = Literal[(*flat_allreduce(), AUTO)]  # a flat all-reduce, or auto: the model picks
    AlltoallvName = Literal[flat("alltoallv")]  # an all-to-all of uneven blocks (a MoE layer's dispatch)


def get(collective: str, algorithm: str) -> Algorithm:
    try:
        return BY_KEY[(collective, algorithm)]
    except KeyError:
        if collective not in COLLECTIVES:
            raise UsageError(
                f"unknown collective {collective!r}; allowed: {', '.join(COLLECTIVES)}"
            ) from None
        raise UsageError(
            f"unknown {collective} algorithm {algorithm!r}; allowed: {', '.join(names(collective, auto=False))}",
            field="algorithm",
        ) from None


def collective_time_s(
    collective: str, algorithm: str, size_bytes: float, num_ranks: int, link: Link
) -> float:
    """The model's time of (collective, algorithm) by name, as rows and scenarios name them."""
    algo = BY_KEY.get((collective, algorithm))
    if algo is None:
        allowed = ", ".join(f"{a.collective} {a.name}" for a in REGISTRY)
        raise UsageError(f"no formula for {collective} {algorithm!r}; allowed: {allowed}", field="algorithm")
    return algo.cost(size_bytes, num_ranks, link)


def best_algorithm(
    size_bytes: float,
    num_ranks: int,
    link: Link,
    algorithms: Iterable[str] | None = None,
    collective: str = "allreduce",
) -> str:
    """The algorithm of `collective` the model predicts fastest (among `algorithms`, default the
    flat ones); ties (within 1e-9 relative) go to the first listed, so the choice does not hang on
    rounding."""
    times = {
        a: collective_time_s(collective, a, size_bytes, num_ranks, link)
        for a in (flat(collective) if algorithms is None else algorithms)
    }
    fastest = min(times.values())
    return next(a for a, t in times.items() if t <= fastest * (1 + 1e-9))
