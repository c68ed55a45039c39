"""The alpha-beta cost of the collectives that move blocks without reducing them: all-to-all, gather,
scatter and send/recv, each the critical path of its module in playground/collectives/.

The link model and the words are costs.py's: a message of n bytes takes alpha + n/beta, each rank
has one full-duplex port, S is the size as nccl-tests gives it (all-to-all: each rank's input, N
blocks of S/N; gather: the gathered output; scatter: the root's buffer; send/recv: the buffer),
N the rank count, L = ceil(log2 N). Nothing here reduces, so gamma never appears.

| collective, algorithm    | time                                                            |
|--------------------------|-----------------------------------------------------------------|
| all-to-all pairwise      | (N-1) (alpha + S/(N beta))                                      |
| all-to-all bruck         | sum_k (alpha + B_k S/(N beta)); N = 2^L: L (alpha + S/(2 beta)) |
| all-to-all scattered     | alpha + 3(N-1) S/(N beta)  (N >= 3; N = 2: alpha + S/(2 beta))  |
| gather, scatter linear   | alpha + (N-1) S/(N beta)                                        |
| gather, scatter tree     | L alpha + (N-1) S/(N beta)  (N = 2^L)                           |
| send/recv ring           | alpha + S/beta                                                  |
| all-to-all, uneven       | max over ranks of (N-1) (alpha + max(out_r, in_r)/((N-1) beta)) |

B_k is the number of block indices below N with bit k set (`bruck_block_counts`; N/2 at a power of
two). The scattered form pays one alpha but three times the pairwise exchange's wire time: with
every rank's N-1 blocks posted at once, the ports' first-come-first-served queues (the simulator's,
and a switch's) serve the blocks in the order they were posted, so rank r's first block waits while
the in-ports it aims at take 2r blocks of the ranks before it (head-of-line blocking), and the last
block lands after 3(N-1) blocks' time. So the model has MPICH's three regimes: Bruck's few messages
for short blocks, the scattered form's single alpha for medium ones, the pairwise exchange's
orderly steps for long ones; Bruck beats the pairwise exchange below
S* = (N-1-L) alpha beta N / (sum_k B_k - (N-1)) (`bruck_crossover_bytes`). Each message's CPU,
which the simulator on a calibrated host adds, moves the crossovers to larger sizes.
"""

from playground.models.costs import Link, _check, _levels


def bruck_block_counts(num_ranks: int) -> list[int]:
    """B_k for k < L: how many of the indices 0..N-1 have bit k set (collectives/bruck.py's blocks)."""
    out = []
    for k in range(_levels(num_ranks)):
        period = 1 << (k + 1)
        out.append((num_ranks // period) * (1 << k) + max(0, num_ranks % period - (1 << k)))
    return out


def alltoall_pairwise_time_s(size_bytes: float, num_ranks: int, link: Link) -> float:
    """(N-1) (alpha + S/(N beta)).

    `pairwise.pairwise_into`: at step k every rank sends one block to rank + k and waits for the
    block from rank - k; every step is a permutation, so no port carries two messages, and each step
    takes one message of S/N. Exact at any N (the blocks are equal)."""
    if _check(size_bytes, num_ranks):
        return 0.0
    return (num_ranks - 1) * link.message_time_s(size_bytes / num_ranks)


def alltoall_bruck_time_s(size_bytes: float, num_ranks: int, link: Link) -> float:
    """sum over the L steps of (alpha + B_k S/(N beta)).

    `bruck.alltoall_bruck_into`: at step k every rank sends the B_k blocks whose index has bit k
    set to rank + 2^k, packed into one message, and waits for rank - 2^k's; every rank's message of a
    step has the same length, so the steps add. The rotations and packing are local copies, free in
    this model. Exact at any N."""
    if _check(size_bytes, num_ranks):
        return 0.0
    block = size_bytes / num_ranks
    return sum(link.message_time_s(b * block) for b in bruck_block_counts(num_ranks))


def alltoall_scattered_time_s(size_bytes: float, num_ranks: int, link: Link) -> float:
    """alpha + 3(N-1) S/(N beta) for N >= 3 (one block at N = 2).

    `scattered.scattered_into`: every rank posts its N-1 blocks at once, rank 0 first, to rank + 1,
    rank + 2, ...; each port serves its blocks in the order they were posted. Rank 0's blocks take
    the in-ports of ranks 1..N-1 one after another; rank 1's first block (to rank 2) finds rank 2's
    in-port busy until rank 0's block to it has passed, ...: rank r's blocks leave back to back from
    2r blocks' time on, and rank N-1's last one lands alpha after 3(N-1) blocks' time. Exact at any
    N (tests/test_sim.py). Without the queueing (every rank's k-th block at rank + k in step) it would
    be alpha + (N-1) S/(N beta): the ideal the pairwise exchange pays N-1 alphas to reach."""
    if _check(size_bytes, num_ranks):
        return 0.0
    block = size_bytes / num_ranks
    blocks = 1 if num_ranks == 2 else 3 * (num_ranks - 1)
    return link.message_time_s(block) + (blocks - 1) * link.wire_time_s(block)


def alltoallv_time_s(rank_bytes: list[tuple[float, float]], link: Link) -> float:
    """max over ranks r of (N-1) (alpha + max(out_r, in_r) / ((N-1) beta)), `rank_bytes[r]` = (the
    bytes rank r sends to the others, the bytes it receives from them) of an all-to-all with blocks
    of any length (a mixture-of-experts layer's dispatch: as many rows to a rank as its experts were
    chosen).

    Each rank sends N-1 messages and receives N-1 on its full-duplex port, so it is busy for N-1
    alphas and the larger of its two directions' bytes; the exchange ends with its busiest rank. With
    equal blocks of S/N it is the pairwise exchange's (N-1)(alpha + S/(N beta)); with a hot rank, the
    rank that receives every row sets it, whatever the others send."""
    n = len(rank_bytes)
    if n <= 1:
        return 0.0
    return max((n - 1) * link.message_time_s(max(out, into) / (n - 1)) for out, into in rank_bytes)


def gather_linear_time_s(size_bytes: float, num_ranks: int, link: Link) -> float:
    """alpha + (N-1) S/(N beta): `gather.gather_linear`, the root's in-port taking N-1 blocks of S/N
    back to back (all sent at once, one port to serve them); `scatter.scatter_linear` is the same
    from the root's out-port."""
    if _check(size_bytes, num_ranks):
        return 0.0
    block = size_bytes / num_ranks
    return link.message_time_s(block) + (num_ranks - 2) * link.wire_time_s(block)


def gather_tree_time_s(size_bytes: float, num_ranks: int, link: Link) -> float:
    """L alpha + (N-1) S/(N beta) at N = 2^L.

    `gather.gather_tree`: a subtree of 2^j blocks is gathered at its head after sum_{i<j} (alpha +
    2^i S/(N beta)) (its last child's subtree of 2^(j-1) blocks, then that child's message), so the
    root is done after sum_{k<L} (alpha + 2^k S/(N beta)). `scatter.scatter_tree` mirrors it (the
    root's sends leave back to back, largest subtree first; gather.py and scatter.py derive both).
    At other N the last subtrees are smaller than 2^k and this is an upper bound: the simulator is
    the reference there."""
    if _check(size_bytes, num_ranks):
        return 0.0
    block = size_bytes / num_ranks
    return sum(link.message_time_s((1 << k) * block) for k in range(_levels(num_ranks)))


def sendrecv_ring_time_s(size_bytes: float, num_ranks: int, link: Link) -> float:
    """alpha + S/beta: `sendrecv.sendrecv_ring`, every rank sending and receiving S at once on its
    full-duplex port."""
    if _check(size_bytes, num_ranks):
        return 0.0
    return link.message_time_s(size_bytes)


def bruck_crossover_bytes(num_ranks: int, link: Link) -> float | None:
    """The size S from which the pairwise exchange beats Bruck on a uniform link (None: never, as
    at 2 and 3 ranks, where Bruck sends no fewer messages). Both are affine in S: (N-1) alpha +
    (N-1)/N S/beta against L alpha + sum_k B_k / N S/beta."""
    moved = sum(bruck_block_counts(num_ranks))
    fewer_alphas = num_ranks - 1 - _levels(num_ranks)
    if fewer_alphas <= 0:
        return None
    extra_s_per_byte = (moved - (num_ranks - 1)) / num_ranks / link.beta_bytes_per_s
    return fewer_alphas * link.alpha_s / extra_s_per_byte if extra_s_per_byte > 0 else None
