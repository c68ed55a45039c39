"""A step's predicted time: compute as measured, communication from the alpha-beta-gamma model.

The compute of a step (forward, backward, optimizer) is what the run measured; the communication
is what `playground.models.costs` predicts on this machine's calibrated link for the mode's
collectives: one all-reduce per bucket (per_tensor: per parameter; after_backward: one of
everything), or ZeRO-1's reduce-scatter plus all-gather of the whole buffer. Then, as the
lecture's section 3.5 puts it:

    serial      = forward + backward + comm + optimizer        (nothing overlaps)
    overlapped  = forward + max(backward, comm) + optimizer    (the all-reduces run during backward)

The overlapped form is the best case: the last bucket cannot start before backward ends, so at
least its all-reduce is always exposed, and here the communication thread needs the same cores as
the compute (no NIC or copy engine moves the data), so backward itself stretches. `departure`
says which of these the measurement shows.
"""

from playground.collectives import registry
from playground.collectives.auto import choose_allreduce
from playground.models.costs import Link, allgather_ring_time_s, reduce_scatter_ring_time_s
from playground.training.modes import Mode


def comm_time_s(
    mode: Mode, bucket_bytes: list[int], total_bytes: int, num_ranks: int, link: Link, algorithm: str
) -> float:
    """The model's time of one step's collectives in `mode` (0 on one rank): ZeRO-1's (a sharded
    mode) reduce-scatter and all-gather of everything, else one all-reduce per bucket."""
    if num_ranks < 2:
        return 0.0
    if mode.sharded:
        return reduce_scatter_ring_time_s(total_bytes, num_ranks, link) + allgather_ring_time_s(
            total_bytes, num_ranks, link
        )
    total = 0.0
    for n in bucket_bytes:
        algo = choose_allreduce(n, num_ranks) if algorithm == registry.AUTO else algorithm
        total += registry.collective_time_s("allreduce", algo, n, num_ranks, link)
    return total


def predicted_step_s(
    forward_s: float, backward_s: float, optimizer_s: float, comm_s: float
) -> dict[str, float]:
    """{"serial_s", "overlapped_s"} from measured compute and modelled communication."""
    return {
        "serial_s": forward_s + backward_s + comm_s + optimizer_s,
        "overlapped_s": forward_s + max(backward_s, comm_s) + optimizer_s,
    }


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
