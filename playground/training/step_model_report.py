"""The step-time table of the training report: each mode's measured step against the model
(`steptime_model`: the buckets' tail, or ZeRO-1's collectives; `unit_steptime` for ZeRO-2 and -3,
their schedule replayed on two threads), on the cores the ranks got."""

from playground.training.steptime_model import (
    Contention,
    behind_compute_cost,
    beside_compute,
    bucket_tail_s,
    collective_times_s,
    cores_for,
    predicted_step_s,
)
from playground.training.unit_steptime import unit_step_comm_s


def _ms(x: float) -> float:
    return x * 1e3


MODEL_COLUMNS = {
    "mode": "mode",
    "compute_ms": "path + optimizer (ms)",
    "cores": "cores",
    "comm_model_ms": "comm model",
    "exposed_model_ms": "exposed model",
    "serial_ms": "serial model",
    "overlapped_ms": "overlapped model",
    "measured_ms": "measured",
    "ratio": "measured / model",
}


MODEL_LEGEND = {
    "compute_ms": "measured: from the first rank's start of the step to the last rank's end of backward, and "
    "the optimizer",
    "cores": "the cores the ranks got (their compute's CPU time over its wall time)",
    "comm_model_ms": "the model's time of the step's collectives on those cores",
    "exposed_model_ms": "what the step waits for (serially all of it; overlapped, the tail that outlasts "
    "backward, priced on the cores left beside compute and behind it, so it can exceed the comm model; "
    "ZeRO-3 also its waits for gathers, each with what such a wait paid beyond them in this run: the last "
    "rank's late start, the hand-back to the compute thread)",
}


def model_row(
    mode,
    stats: dict,
    num_ranks: int,
    total_bytes: int,
    algorithm: str,
    cost,
    cores: int,
    units=None,
    behind=None,
) -> dict:
    """The step-time model of one mode (`steptime_model`): measured, the step's path up to the
    collectives (from the first rank's start to the last rank's end of backward, `last_compute_s`)
    of which the last backward is the window the buckets become ready in; modelled, the
    collectives on the cores the ranks got (their compute's CPU over its wall time), all after
    backward (serial) or the tail that outlasts it (overlapped): while backward runs priced
    behind compute by `behind(message bytes, ranks)` (the calibration's ratio; None: as idle),
    after it as idle."""
    backward = stats.get("rank_backward_s", stats["backward_s"])
    compute = stats.get("last_compute_s", stats["forward_s"] + stats["backward_s"])
    forward = max(0.0, compute - backward)  # forward, and the wait for the last rank to start
    wall = stats.get("rank_forward_s", stats["forward_s"]) + backward + stats["optimizer_s"]
    cpu = stats.get("compute_cpu_s", wall)
    contention = Contention(cores_for(num_ranks, cores, cpu, wall))
    if mode.stage >= 2 and units is not None:
        return unit_model_row(mode, stats, units, cost, contention, behind)
    times = collective_times_s(
        mode, stats["buckets"], total_bytes, num_ranks, algorithm, cost, contention.cores
    )
    exposed = None
    if mode.overlaps:  # while backward runs the collectives are behind compute, after it idle

        def on_cores(priced) -> list[float]:
            return collective_times_s(
                mode, stats["buckets"], total_bytes, num_ranks, algorithm, priced, contention.overlapped_cores
            )

        during = on_cores(behind_compute_cost(cost, behind, 1.0))
        exposed = bucket_tail_s(backward, stats["buckets"], during, on_cores(cost))
    pred = predicted_step_s(forward, backward, stats["optimizer_s"], sum(times), exposed)
    model_s = pred["overlapped_s"] if mode.overlaps else pred["serial_s"]
    return {
        "mode": mode.name,
        "compute_ms": _ms(compute + stats["optimizer_s"]),
        "cores": contention.cores,
        "comm_model_ms": _ms(sum(times)),
        "exposed_model_ms": _ms(exposed if exposed is not None else sum(times)),
        "serial_ms": _ms(pred["serial_s"]),
        "overlapped_ms": _ms(pred["overlapped_s"]) if mode.overlaps else float("nan"),
        "model_ms": _ms(model_s),
        "measured_ms": _ms(stats["step_s"]),
        "ratio": stats["step_s"] / model_s if model_s > 0 else float("nan"),
    }


def _passes_s(stats: dict) -> float:
    """The ranks' own forward and backward (medians): the compute the collectives run beside."""
    return stats.get("rank_forward_s", stats["forward_s"]) + stats.get("rank_backward_s", stats["backward_s"])


def unit_model_row(mode, stats: dict, units: dict, cost, contention: Contention, behind=None) -> dict:
    """ZeRO-2's or ZeRO-3's model (`unit_steptime`): the step's path to its last collective as
    measured (from the first rank's start to the last rank's end of backward, as the other modes'),
    less what forward and backward waited for gathers, shared out over the pieces as the trace
    measured them; the collectives replayed on the two threads in the strategies' order (those
    during the passes priced behind compute, as `model_row`'s; a wait for gathers also pays what
    such a wait paid beyond them in the run, `units["resume_s"]`), their exposed part added;
    serial: every collective waited for."""
    plan, itemsize, params = units["plan"], units["itemsize"], units["params"]
    rank_forward = stats.get("rank_forward_s", stats["forward_s"])
    rank_backward = stats.get("rank_backward_s", stats["backward_s"])
    path = stats.get("last_compute_s", rank_forward + rank_backward) - stats.get("waited_s", 0.0)
    share = rank_forward / (rank_forward + rank_backward) if rank_forward + rank_backward > 0 else 0.5
    forward, backward = path * share, path * (1 - share)
    m = params.micro_batches
    compute = scaled_pieces(units["pieces"], forward / m, backward / m)
    resume = units.get("resume_s", 0.0)

    def comm_with(during_cost) -> dict[str, float]:
        return unit_step_comm_s(
            mode.stage, plan, compute, itemsize, cost, contention.cores, contention.overlapped_cores,
            params.prefetch, params.reshard_after_forward, m, during=during_cost, resume_s=resume,
        )  # fmt: skip

    serial_comm = unit_step_comm_s(
        mode.stage, plan, compute, itemsize, cost, contention.cores, contention.cores, 0, True, m
    )["comm_s"]

    def step_s(during_cost) -> float:
        exposed = comm_with(during_cost)["exposed_s"]
        return predicted_step_s(forward, backward, stats["optimizer_s"], serial_comm, exposed)["overlapped_s"]

    comm = comm_with(beside_compute(step_s, cost, behind, _passes_s(stats)))
    pred = predicted_step_s(forward, backward, stats["optimizer_s"], serial_comm, comm["exposed_s"])
    return {
        "mode": mode.name,
        "compute_ms": _ms(forward + backward + stats["optimizer_s"]),
        "cores": contention.cores,
        "comm_model_ms": _ms(comm["comm_s"]),
        "exposed_model_ms": _ms(comm["exposed_s"]),
        "serial_ms": _ms(pred["serial_s"]),
        "overlapped_ms": _ms(pred["overlapped_s"]),
        "model_ms": _ms(pred["overlapped_s"]),
        "measured_ms": _ms(stats["step_s"]),
        "ratio": stats["step_s"] / pred["overlapped_s"] if pred["overlapped_s"] > 0 else float("nan"),
    }


def scaled_pieces(pieces: dict[str, float], forward_s: float, backward_s: float) -> dict[str, float]:
    """The trace's piece times scaled so each pass sums to the given one (the ranks' medians)."""
    out: dict[str, float] = {}
    for direction, total in (("forward.", forward_s), ("backward.", backward_s)):
        mine = {p: t for p, t in pieces.items() if p.startswith(direction)}
        scale = total / sum(mine.values()) if sum(mine.values()) > 0 else 0.0
        out |= {p: t * scale for p, t in mine.items()}
    return out
