"""Every collective's cost in the alpha-beta-gamma model: the critical path of OUR implementations.

The link model (Thakur, Rabenseifner and Gropp 2005, "Optimization of Collective Communication
Operations in MPICH", section 2): a message of n bytes takes alpha + n/beta, every rank has one
full-duplex port (it can send one message and receive another at the same time), and reducing n
received bytes into a buffer costs n/gamma of the rank's CPU. S is each rank's input in bytes as
nccl-tests sizes it (all-gather: the gathered output, N x each rank's part), N the rank count,
p = 2^floor(log2 N) the largest power of two <= N, L = ceil(log2 N).

Each formula below is derived from the module in `playground/collectives/` that runs it, step by
step, with one message per chunk (no segmentation): the DES in `playground/sim/` runs those very
modules on ideal links and reproduces these numbers exactly when N is a power of two and S is a
multiple of N (times the item size). Where they differ otherwise, each function says how. The
model leaves out what a real machine adds: per-message CPU overhead beyond alpha, copies, the
scheduler, contention for memory bandwidth and cores, and NCCL's per-collective base latency.

| collective, algorithm    | time                                                              |
|--------------------------|-------------------------------------------------------------------|
| all-reduce ring          | 2(N-1) alpha + 2(N-1)/N S/beta + (N-1)/N S/gamma                  |
| all-reduce tree          | L (alpha + S/beta + S/gamma) + L (alpha + S/beta)                 |
| all-reduce hd            | 2 log2(p) alpha + 2(p-1)/p S/beta + (p-1)/p S/gamma  (+ fold)     |
| all-reduce rd            | log2(p) (alpha + S/beta + S/gamma)  (+ fold)                      |
| fold (N not a power of 2)| 2 (alpha + S/beta) + S/gamma                                      |
| reduce-scatter ring      | (N-1) (alpha + S/(N beta) + S/(N gamma))                          |
| all-gather ring          | (N-1) (alpha + S/(N beta))                                        |
| broadcast tree           | L (alpha + S/beta)                                                |
| reduce tree              | L (alpha + S/beta + S/gamma)                                      |

All-to-all, gather, scatter and send/recv, which reduce nothing, are in exchange_costs.py.

With gamma = inf these are the lecture's section 5.4 forms. In this model halving-doubling never
loses to the ring at a power of two (same bytes, log2 p instead of N-1 alphas) and recursive
doubling never loses to the tree: real rings win on real networks through pipelining and
topology, which the model does not have. Which formula prices which algorithm, and the model's
pick among them (`best_algorithm`), are in the algorithms' registry, playground/collectives/registry.py.

Link presets (`PRESETS`), all with gamma = inf (on GPUs NCCL reduces inside the copy kernel, so
the reduction hides behind the transfer; an HBM-bound gamma would be 3.35 TB/s / 3 ~ 1.1 TB/s):
- `ib`: the lecture's InfiniBand (sections 5.1, 5.3, 5.4): alpha 5 us, 50 GB/s. 50 GB/s is NDR
  400 Gb/s line rate; nccl-tests#290 measures 46-48 GB/s per NIC. 5 us is also what NCCL's
  `tuning.cc` (v2.30) charges per network hop for the LL protocol of its tree (hwLat NET Tree LL).
- `roce`: RoCE v2 at 400 GbE, 50 GB/s (the same ConnectX-7 class as NDR; nccl#1368 measured
  5 nodes x 4 x 400G RoCE at 190 GB/s ring busbw, 47.5 per NIC). NCCL's tuning has one NET
  table for InfiniBand and RoCE; this preset takes its Simple-protocol hop, 14 us (hwLat NET Ring
  and Tree Simple), the protocol of bulk transfers like ours (whole chunks, no LL flags).
- `ethernet`: 100 Gb/s Ethernet over TCP sockets: 12.5 GB/s line rate (nccl-tests#29: 12.2 GB/s
  measured, "as good as you can get"); alpha 20 us, an assumed value in the lecture's range for
  TCP (section 5.2: "tens of microseconds"), not a measurement.
- `nvlink`: H100 NVLink 4 inside a node, 450 GB/s: the "900 GB/s" of the data sheet counts both
  directions, and this model's port is full duplex, so beta is one direction (sjeaugey in
  nccl-tests#212: line rate 450 GB/s, about 370 effective for the ring); alpha 3.4 us, NCCL's
  hwLat NVLink Ring Simple.
Per-hop constants are from the notes' summary of NCCL `src/graph/tuning.cc` (v2.30).
"""

import math
from collections.abc import Iterable
from dataclasses import dataclass

from playground.core.errors import UsageError
from playground.models.piecewise import Piece, piece_for


@dataclass(frozen=True)
class Link:
    """A link: `alpha_s` per message, `beta_bytes_per_s` bandwidth, `gamma_bytes_per_s` the
    reduction rate (bytes of one operand reduced per second; math.inf: reductions are free). With
    `pieces` (a calibration's size ranges, models/piecewise.py) a message's time is its range's
    alpha_k + n beta_k instead, as SMPI's piecewise-linear model has it; alpha_s and beta_bytes_per_s
    are then the first range's, for captions."""

    alpha_s: float
    beta_bytes_per_s: float
    gamma_bytes_per_s: float = math.inf
    pieces: tuple[Piece, ...] = ()

    def __post_init__(self):
        if not self.alpha_s >= 0 or math.isinf(self.alpha_s):
            raise UsageError(f"must be a finite number >= 0, got {self.alpha_s}", field="alpha_s")
        if not self.beta_bytes_per_s > 0:
            raise UsageError(f"must be > 0, got {self.beta_bytes_per_s}", field="beta_bytes_per_s")
        if not self.gamma_bytes_per_s > 0:
            raise UsageError(
                f"must be > 0 (math.inf: free), got {self.gamma_bytes_per_s}", field="gamma_bytes_per_s"
            )

    @property
    def half_bandwidth_bytes(self) -> float:
        """n_1/2 = alpha * beta: the message size that reaches half the peak bandwidth."""
        return self.alpha_s * self.beta_bytes_per_s

    def message_time_s(self, num_bytes: float) -> float:
        """One point-to-point message: alpha + n/beta (its range's, with pieces)."""
        if self.pieces:
            return piece_for(self.pieces, num_bytes).time_s(num_bytes)
        return self.alpha_s + num_bytes / self.beta_bytes_per_s

    def wire_time_s(self, num_bytes: float) -> float:
        """The bytes' part of one message: n/beta (its range's, with pieces); what a port cannot
        overlap when messages leave back to back."""
        if self.pieces:
            return num_bytes * piece_for(self.pieces, num_bytes).s_per_byte
        return num_bytes / self.beta_bytes_per_s

    def reduce_time_s(self, num_bytes: float) -> float:
        """Reducing n received bytes into a buffer: n/gamma."""
        return num_bytes / self.gamma_bytes_per_s

    def describe(self) -> str:
        """'alpha 5 us, beta 50 GB/s' (and ', gamma 5.3 GB/s' when reductions cost something)."""
        text = f"alpha {self.alpha_s * 1e6:.3g} us, beta {self.beta_bytes_per_s / 1e9:.3g} GB/s"
        if len(self.pieces) > 1:
            text += f" below {self.pieces[1].from_bytes // 1024} KiB ({len(self.pieces)} size ranges)"
        if math.isfinite(self.gamma_bytes_per_s):
            text += f", gamma {self.gamma_bytes_per_s / 1e9:.3g} GB/s"
        return text


PRESETS: dict[str, Link] = {
    "ib": Link(5e-6, 50e9),
    "roce": Link(14e-6, 50e9),
    "ethernet": Link(20e-6, 12.5e9),
    "nvlink": Link(3.4e-6, 450e9),
}


def _check(size_bytes: float, num_ranks: int) -> bool:
    """True when there is nothing to do (one rank or no data): every algorithm returns at once."""
    if num_ranks < 1:
        raise UsageError(f"must be >= 1, got {num_ranks}", field="num_ranks")
    if size_bytes < 0:
        raise UsageError(f"must be >= 0, got {size_bytes}", field="size_bytes")
    return num_ranks == 1 or size_bytes == 0


def _levels(num_ranks: int) -> int:
    """L = ceil(log2 N), the binomial tree's rounds."""
    return (num_ranks - 1).bit_length()


def _pow2_below(num_ranks: int) -> int:
    """p, the largest power of two <= N."""
    return 1 << (num_ranks.bit_length() - 1)


def p2p_time_s(size_bytes: float, link: Link) -> float:
    """One message (lecture 5.1): alpha + S/beta. Exercise 11: 10 us + 1 MB / 25 GB/s = 50 us."""
    return link.message_time_s(size_bytes)


def sends_time_s(sizes_bytes: Iterable[float], link: Link) -> float:
    """Messages sent one after another (lecture 5.3: 1000 x 100 KB on InfiniBand = 7 ms)."""
    return sum(link.message_time_s(n) for n in sizes_bytes)


def reduce_scatter_ring_time_s(size_bytes: float, num_ranks: int, link: Link) -> float:
    """(N-1) (alpha + S/(N beta) + S/(N gamma)).

    `ring.reduce_scatter_into`: at step 0 every rank sends one chunk of its input to the right;
    at each of the N-1 steps it receives a chunk from the left and reduces it with its own copy,
    and the reduced chunk is the next step's message. Every step waits for the previous one's
    reduction on the left neighbour, so the critical path is N-1 x (message of S/N, reduction of
    S/N). Uneven chunks (count not a multiple of N) differ by one element; the path then runs
    through a mix of both sizes and is within (N-1) item times of this.
    """
    if _check(size_bytes, num_ranks):
        return 0.0
    chunk = size_bytes / num_ranks
    return (num_ranks - 1) * (link.message_time_s(chunk) + link.reduce_time_s(chunk))


def allgather_ring_time_s(size_bytes: float, num_ranks: int, link: Link) -> float:
    """(N-1) (alpha + S/(N beta)), S the gathered output (nccl-tests' size for all-gather).

    `ring.allgather_pass`: N-1 steps, each passing the chunk received last to the right; copies
    cost nothing in the model. Each rank's part is exactly S/N, so this is exact at any N.
    """
    if _check(size_bytes, num_ranks):
        return 0.0
    return (num_ranks - 1) * link.message_time_s(size_bytes / num_ranks)


def allreduce_ring_time_s(size_bytes: float, num_ranks: int, link: Link) -> float:
    """2(N-1) alpha + 2(N-1)/N S/beta + (N-1)/N S/gamma.

    `ring.allreduce_ring` = the ring reduce-scatter, then the ring all-gather of the reduced
    chunks: the all-gather's first message (the chunk this rank reduced last) waits for the last
    reduction, so the two phases add: (N-1)(alpha + S/(N beta) + S/(N gamma)) + (N-1)(alpha +
    S/(N beta)). Every rank sends and receives 2(N-1)/N S: bandwidth-optimal, but 2(N-1) alphas.
    Any N; uneven chunks as in `reduce_scatter_ring_time_s`.
    """
    if _check(size_bytes, num_ranks):
        return 0.0
    return reduce_scatter_ring_time_s(size_bytes, num_ranks, link) + allgather_ring_time_s(
        size_bytes, num_ranks, link
    )


def reduce_tree_time_s(size_bytes: float, num_ranks: int, link: Link) -> float:
    """L (alpha + S/beta + S/gamma), L = ceil(log2 N).

    `tree.reduce_tree_into`: at round k a rank with bit k set sends its whole partial result to
    vrank - 2^k; the others receive from vrank + 2^k and reduce. A rank receives from its children
    in order of round, and the child of round k finishes its own subtree (k rounds) first, so by
    induction the root is done after L x (message of S, reduction of S). At a power of two that
    path is exact (the root's last child heads a full subtree of L-1 rounds). At other N the
    formula counts L full levels, which the binomial tree does not always need; the simulator's
    figure is the reference there.
    """
    if _check(size_bytes, num_ranks):
        return 0.0
    return _levels(num_ranks) * (link.message_time_s(size_bytes) + link.reduce_time_s(size_bytes))


def broadcast_tree_time_s(size_bytes: float, num_ranks: int, link: Link) -> float:
    """L (alpha + S/beta).

    `tree.broadcast_tree_into` runs the reduce's tree backwards: a rank receives the whole buffer
    from its parent, then sends it to its children, farthest subtree first. At N = 2^L, if a rank's
    sends leave its port one after another, rank v is reached after one alpha per set bit of v and
    one S/beta per position in its parents' send orders, L - (index of v's lowest set bit) in all:
    at most L (alpha + S/beta), reached by v = N-1. With several sends at once it is the same
    (N-1 is L hops deep). At other N this is an upper bound: N = 5 with sends in turn needs
    2 alpha + 3 S/beta.
    """
    if _check(size_bytes, num_ranks):
        return 0.0
    return _levels(num_ranks) * link.message_time_s(size_bytes)


def allreduce_tree_time_s(size_bytes: float, num_ranks: int, link: Link) -> float:
    """L (alpha + S/beta + S/gamma) + L (alpha + S/beta).

    `tree.allreduce_tree` = binomial reduce to rank 0, then binomial broadcast from it; the
    broadcast starts when the root's reduction ends, so the two add. Few steps (good for small S),
    but every step moves all of S. Exact at powers of two; see the two parts for other N.
    """
    if _check(size_bytes, num_ranks):
        return 0.0
    return reduce_tree_time_s(size_bytes, num_ranks, link) + broadcast_tree_time_s(
        size_bytes, num_ranks, link
    )


def fold_time_s(size_bytes: float, num_ranks: int, link: Link) -> float:
    """2 (alpha + S/beta) + S/gamma when N is not a power of two, else 0.

    `halving_doubling.run_folded`: the first 2(N-p) ranks pair up; each even one sends its whole
    buffer to the odd one after it (alpha + S/beta), which reduces it (S/gamma) before joining
    the power-of-two core; after the core the odd one sends the result back (alpha + S/beta).
    Adding this to the core is an upper bound: ranks outside the fold start the core at once, and
    the folded ranks' lateness need not lie on every path (the simulator is the reference).
    """
    if _check(size_bytes, num_ranks) or num_ranks == _pow2_below(num_ranks):
        return 0.0
    return 2 * link.message_time_s(size_bytes) + link.reduce_time_s(size_bytes)


def allreduce_hd_time_s(size_bytes: float, num_ranks: int, link: Link) -> float:
    """2 log2(p) alpha + 2 (p-1)/p S/beta + (p-1)/p S/gamma, plus `fold_time_s`.

    `halving_doubling.allreduce_halving_doubling` (Rabenseifner): in the reduce-scatter by
    recursive halving, step k (k = 1..log2 p) swaps S/2^k bytes with a partner and reduces the
    half it keeps, which it splits again at the next step: sum over k of (alpha + S/2^k (1/beta +
    1/gamma)) = log2(p) alpha + (p-1)/p S (1/beta + 1/gamma). The all-gather by recursive doubling
    retraces the same pairs with the same sizes, without reductions. At a power of two every rank's
    steps have the same sizes and each waits only for its partner's previous step, so the sum is
    exact. Blocks are ChunkBounds(count, p): uneven by at most one element.
    """
    if _check(size_bytes, num_ranks):
        return 0.0
    p = _pow2_below(num_ranks)
    steps = p.bit_length() - 1
    moved = (p - 1) / p * size_bytes
    core = 2 * sum(link.message_time_s(size_bytes / 2**k) for k in range(1, steps + 1))
    return core + link.reduce_time_s(moved) + fold_time_s(size_bytes, num_ranks, link)


def allreduce_rd_time_s(size_bytes: float, num_ranks: int, link: Link) -> float:
    """log2(p) (alpha + S/beta + S/gamma), plus `fold_time_s`.

    `recursive_doubling.allreduce_recursive_doubling`: at distance d = 1, 2, ..., p/2 each rank
    sends its whole buffer to its partner, receives the partner's and reduces it: log2 p steps
    of (alpha + S/beta + S/gamma), the fewest alphas of any of our algorithms and the most bytes.
    Exact at a power of two.
    """
    if _check(size_bytes, num_ranks):
        return 0.0
    steps = _pow2_below(num_ranks).bit_length() - 1
    core = steps * (link.message_time_s(size_bytes) + link.reduce_time_s(size_bytes))
    return core + fold_time_s(size_bytes, num_ranks, link)


def allreduce_hier_time_s(
    size_bytes: float, num_nodes: int, per_node: int, intra: Link, inter: Link
) -> float:
    """Hierarchical all-reduce (`collectives/hierarchical.py`) on `num_nodes` nodes of `per_node`:
    ring reduce-scatter inside each node, ring all-reduce of each rank's S/k chunk across nodes (the
    k "rails" run in parallel on separate ports), ring all-gather inside each node:

        (k-1)(a1 + S/(k b1) + S/(k g)) + [2(m-1) a2 + 2(m-1)/m S/(k b2) + (m-1)/m S/(k g)] + (k-1)(a1 + S/(k b1))

    The slow links between nodes carry S/k per rank instead of S. On one node (m = 1) it is the
    ring all-reduce."""
    return (
        reduce_scatter_ring_time_s(size_bytes, per_node, intra)
        + allreduce_ring_time_s(size_bytes / per_node, num_nodes, inter)
        + allgather_ring_time_s(size_bytes, per_node, intra)
    )
