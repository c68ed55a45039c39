"""A step's predicted time: compute as measured, communication from this machine's calibration.

A step ends when its last rank ends it, so the model starts from the last rank's forward and
backward of each step (measured: the work itself is not what this model is about) and adds what
the calibration says the mode's collectives cost: one all-reduce per bucket (per_tensor: per
parameter; after_backward: one of everything), or ZeRO-1's reduce-scatter plus all-gather of the
whole buffer (a ring all-reduce's two halves). As the lecture's section 3.5 puts it:

    serial      = forward + backward + comm + optimizer        (nothing overlaps)
    overlapped  = forward + backward + exposed + optimizer     (the all-reduces run during backward)

where `exposed` is the tail of a two-stage pipeline (`bucket_tail_s`): bucket b's all-reduce starts
once backward has produced it (at its share of backward's bytes) and the previous one is done, so
at least the last bucket's all-reduce is always exposed.

Contention, the part an idle-machine formula leaves out (`cores_for`): the ranks run on the cores
they actually got, the CPU time of their compute over its wall time (the machine's usable cores at
most; fewer when other processes share it). Where the ranks outnumber those cores, a collective's
time is the simulator's on the calibrated host (time slices, wake-ups, shared memory bandwidth),
not the closed form. During backward the communication threads also compete with the ranks'
compute threads, each runnable thread taking an equal share, so the overlapped all-reduces get half
the cores (`Contention.overlapped_cores`), and a message whose receiver's process is computing
waits until it gets a core back: the calibration's `behind_compute` ping-ping prices that, each
message taking its ratio over the idle one for the share of the step the ranks compute
(`behind_compute_cost`), which is itself what the step comes out as (`at_compute_share`).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from playground.collectives import registry
from playground.collectives.auto import choose_allreduce
from playground.models.costs import Link, allgather_ring_time_s, reduce_scatter_ring_time_s
from playground.training.modes import Mode

# (collective, algorithm, bytes, ranks, cores) -> seconds
CollectiveCost = Callable[[str, str, float, int, int], float]


def comm_time_s(
    mode: Mode, bucket_bytes: list[int], total_bytes: int, num_ranks: int, link: Link, algorithm: str
) -> float:
    """The closed forms' time of one step's collectives in `mode` on an idle `link` (0 on one rank):
    ZeRO-1's reduce-scatter and all-gather of everything, ZeRO-2's and -3's per unit (the buckets:
    a reduce-scatter and one all-gather, two for ZeRO-3), else one all-reduce per bucket."""
    if num_ranks < 2:
        return 0.0
    if mode.stage >= 2:  # per unit (the buckets): gathers (two with ZeRO-3) and a reduce-scatter
        return sum(
            reduce_scatter_ring_time_s(n, num_ranks, link)
            + (mode.stage - 1) * allgather_ring_time_s(n, num_ranks, link)
            for n in bucket_bytes
        )
    if mode.sharded:
        return reduce_scatter_ring_time_s(total_bytes, num_ranks, link) + allgather_ring_time_s(
            total_bytes, num_ranks, link
        )
    return sum(
        registry.collective_time_s("allreduce", _algorithm(algorithm, n, num_ranks), n, num_ranks, link)
        for n in bucket_bytes
    )


def _algorithm(algorithm: str, size_bytes: float, num_ranks: int) -> str:
    return choose_allreduce(int(size_bytes), num_ranks) if algorithm == registry.AUTO else algorithm


def cores_for(num_ranks: int, cores: int, compute_cpu_s: float, compute_wall_s: float) -> int:
    """The cores the ranks ran on: N x (their compute's CPU time / its wall time), rounded, between
    1 and the machine's usable `cores` (and no more than N: a rank computes on one core)."""
    if compute_wall_s <= 0:
        return max(1, min(num_ranks, cores))
    got = round(num_ranks * compute_cpu_s / compute_wall_s)
    return max(1, min(num_ranks, cores, got))


@dataclass(frozen=True)
class Contention:
    """How many cores the ranks' collectives run on: `cores` after backward (the ranks' share of
    the machine), `overlapped_cores` during backward (half of them: each rank's compute thread and
    communication thread are both runnable)."""

    cores: int

    @property
    def overlapped_cores(self) -> int:
        return max(1, self.cores // 2)


def collective_times_s(
    mode: Mode,
    bucket_bytes: Sequence[int],
    total_bytes: int,
    num_ranks: int,
    algorithm: str,
    cost: CollectiveCost,
    cores: int,
) -> list[float]:
    """Each of one step's collectives on `cores` cores, in the order they run: one per bucket, or
    ZeRO-1's reduce-scatter plus all-gather of everything (priced as the ring all-reduce they make
    up). Empty on one rank."""
    if num_ranks < 2:
        return []
    if mode.sharded:
        return [cost("allreduce", "ring", total_bytes, num_ranks, cores)]
    return [cost("allreduce", _algorithm(algorithm, n, num_ranks), n, num_ranks, cores) for n in bucket_bytes]


def behind_compute_cost(
    cost: CollectiveCost, ratio: Callable[[float, int], float] | None, share: float
) -> CollectiveCost:
    """`cost` for collectives that run beside the ranks' compute threads, which compute for `share`
    of the time: each message (a ring's, bytes / ranks) is behind compute with that chance and then
    takes `ratio(message bytes, ranks)` times as long (the calibration's `behind_compute`; None: as
    idle, `cost` itself)."""
    if ratio is None:
        return cost

    def priced(collective: str, algorithm: str, size_bytes: float, num_ranks: int, cores: int) -> float:
        slower = ratio(size_bytes / max(1, num_ranks), num_ranks) - 1.0
        return cost(collective, algorithm, size_bytes, num_ranks, cores) * (1.0 + slower * share)

    return priced


def at_compute_share(
    step_s: Callable[[float], float], compute_s: float, rounds: int = 50
) -> tuple[float, float]:
    """(share, step): the share of the step the ranks compute, `compute_s / step`, where the step
    is `step_s(share)` (longer the more of it the collectives spend behind compute): the fixed
    point, approached in damped steps from an idle network (share 0)."""
    share, step = 0.0, step_s(0.0)
    for _ in range(rounds):
        target = min(1.0, compute_s / step) if step > 0 else 0.0
        if abs(target - share) < 1e-4:
            break
        share = (share + target) / 2
        step = step_s(share)
    return share, step


def beside_compute(
    step_s: Callable[[CollectiveCost], float],
    cost: CollectiveCost,
    ratio: Callable[[float, int], float] | None,
    compute_s: float,
) -> CollectiveCost:
    """`cost` priced behind compute (`behind_compute_cost`) at the share of the step the ranks
    compute, where `step_s(priced cost)` is the step it makes (`at_compute_share`); `cost` itself
    without a ratio."""
    if ratio is None:
        return cost
    share, _ = at_compute_share(lambda s: step_s(behind_compute_cost(cost, ratio, s)), compute_s)
    return behind_compute_cost(cost, ratio, share)


def bucket_tail_s(
    backward_s: float,
    bucket_bytes: Sequence[int],
    comm_s: Sequence[float],
    after_s: Sequence[float] | None = None,
) -> float:
    """What of the all-reduces outlasts backward: bucket b is ready once backward has produced its
    share of the bytes (buckets in backward order), its all-reduce starts when it is ready and the
    previous one has ended (one communication thread). Each takes `comm_s[b]` while backward runs
    and `after_s[b]` (default the same) once it has ended: one running across the end goes on at
    that rate for what is left of it. No collectives (one rank): nothing."""
    if not comm_s:
        return 0.0
    total = sum(bucket_bytes)
    produced, end = 0, 0.0
    for n, during, after in zip(bucket_bytes, comm_s, after_s or comm_s, strict=True):
        produced += n
        start = max(backward_s * produced / total if total else backward_s, end)
        if start + during <= backward_s or during <= 0:
            end = start + during
        else:
            left = 1.0 - max(0.0, backward_s - start) / during  # the share not done by backward's end
            end = max(start, backward_s) + left * after
    return max(0.0, end - backward_s)


def predicted_step_s(
    forward_s: float,
    backward_s: float,
    optimizer_s: float,
    serial_comm_s: float,
    exposed_comm_s: float | None = None,
) -> dict[str, float]:
    """{"serial_s", "overlapped_s"} from the compute and the modelled communication: all of it
    after backward (`serial_comm_s`), or only the tail that outlasts backward (`exposed_comm_s`;
    None: the best case, max(backward, comm))."""
    overlapped = (
        forward_s + max(backward_s, serial_comm_s) + optimizer_s
        if exposed_comm_s is None
        else forward_s + backward_s + exposed_comm_s + optimizer_s
    )
    return {"serial_s": forward_s + backward_s + serial_comm_s + optimizer_s, "overlapped_s": overlapped}


def departure(
    mode_overlaps: bool, measured: dict, comm_model_s: float, backward_alone_s: float | None
) -> str:
    """One line: where the measured step departs from the model, largest cause first.

    `measured` has the mode's medians (comm_s exposed, allreduce_s, backward_s); `backward_alone_s`
    is backward's time in a mode without overlap, when one ran (what backward costs on its own)."""
    parts = []
    ratio = measured["allreduce_s"] / comm_model_s if comm_model_s > 0 else float("nan")
    if comm_model_s > 0:
        parts.append(f"all-reduces took {ratio:.1f}x the model's {comm_model_s * 1e3:.1f} ms")
    if measured.get("skew_s") is not None:
        parts.append(
            f"ranks ended backward {measured['skew_s'] * 1e3:.1f} ms apart (median), which the first "
            "collective after it waits for"
        )
    if mode_overlaps:
        exposed_model = max(0.0, comm_model_s - measured["backward_s"])
        parts.append(
            f"exposed {measured['comm_s'] * 1e3:.1f} ms against the overlapped model's {exposed_model * 1e3:.1f}"
        )
        if backward_alone_s:
            stretch = measured["backward_s"] / backward_alone_s - 1
            parts.append(
                f"backward {100 * stretch:+.0f}% against backward without overlap (cores shared with the communication thread)"
            )
    return "; ".join(parts)
